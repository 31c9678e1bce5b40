"""The native 2-D convolution: values against a float64 reference on every ISA, bits that do
not depend on how the work is split, which convolutions take it, and refusals of bad input."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import strategies as st
from onnx import helper

import graphrt
from tests._models import init, make_model, tensor
from tests.simd._simd import ALL_PATHS, ISAS, bits, on_every_isa, path_or_skip, simd

F32 = np.float32


def reference(x, w, b, group, strides, dilations, pads, out):
    """float64 convolution by taps: each tap a strided view of the zero-padded image."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    (sh, sw), (dh, dw), (ph, pw), (oh, ow) = strides, dilations, pads, out
    xp = np.zeros((n, c, ph + h + kh * dh + oh * sh, pw + wd + kw * dw + ow * sw))
    xp[:, :, ph : ph + h, pw : pw + wd] = x
    y = np.zeros((n, m, oh, ow))
    mg = m // group
    for g in range(group):
        for dy in range(kh):
            for dx in range(kw):
                rows = slice(dy * dh, dy * dh + oh * sh, sh)
                cols = slice(dx * dw, dx * dw + ow * sw, sw)
                patch = xp[:, g * cg : (g + 1) * cg, rows, cols]
                y[:, g * mg : (g + 1) * mg] += np.einsum(
                    "ncij,mc->nmij", patch, w[g * mg : (g + 1) * mg, :, dy, dx]
                )
    if b is not None:
        y += b.reshape(1, -1, 1, 1)
    return y


def out_extent(size, k, s, d, before, after):
    return (size + before + after - d * (k - 1) - 1) // s + 1


@st.composite
def geometries(draw):
    group = draw(st.sampled_from([1, 1, 2, 3]))
    cg, mg = draw(st.integers(1, 12)), draw(st.integers(1, 40))
    n = draw(st.integers(1, 2))
    kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    sh, sw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    ph, pw = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    ah, aw = draw(st.integers(0, 3)), draw(st.integers(0, 3))  # pads after
    h = draw(st.integers(max(1, dh * (kh - 1) + 1 - ph - ah), 24))
    w = draw(st.integers(max(1, dw * (kw - 1) + 1 - pw - aw), 40))
    out = (out_extent(h, kh, sh, dh, ph, ah), out_extent(w, kw, sw, dw, pw, aw))
    return dict(
        x_shape=(n, cg * group, h, w),
        w_shape=(mg * group, cg, kh, kw),
        group=group,
        strides=(sh, sw),
        dilations=(dh, dw),
        pads=(ph, pw),
        out=out,
        seed=draw(st.integers(0, 2**31)),
        bias=draw(st.booleans()),
        act=draw(st.sampled_from(["none", "relu"])),
        residual=draw(st.booleans()),  # z, summed before the activation
    )


def _plan(isa, g, x, w, kernel="auto"):
    return simd.conv_plan(
        w, g["group"], list(x.shape), g["strides"], g["dilations"], g["pads"], g["out"], isa,
        kernel,
    )  # fmt: skip


def _run(isa, g, x, w, b, split, kernel="auto", z=None, z_is_y=False):
    """The convolution into a fresh y (NaN-filled; with ``z_is_y``, a copy of z passed as z
    too: the residual written over, as the planner places a FusedConv's output)."""
    plan = _plan(isa, g, x, w, kernel)
    work = np.full(plan.work_floats, np.nan, F32)  # staging must write what the kernel reads
    y = np.full((x.shape[0], w.shape[0], *g["out"]), np.nan, F32)
    if z_is_y:
        y[...] = z
        z = y
    if split:  # staging blocks spread over two threads, then unit by unit, last first
        plan.stage(x, work, 2)
        for u in reversed(range(plan.units)):
            plan.run(x, work, y, b, g["act"], u, u + 1, 1, z)
    else:  # stage and run bound once, as a session's step calls them
        simd.ConvCall(plan, x, work, y, b, g["act"], 1, z)()
    return y


def check_written_over_z(isa, g, x, w, b, kernel, z, want_bits):
    """z as y itself, where the plan says it may be (``z_in_place``: every output written once,
    after its whole depth, reading its Z element first): the bits of separate buffers, whole
    and unit by unit.  Plans whose partial sums of depth blocks go to y (packed and stream
    deeper than CONV_KC, 256) refuse it."""
    plan = _plan(isa, g, x, w, kernel)
    depth = w.shape[1] * w.shape[2] * w.shape[3]
    assert plan.z_in_place == (plan.kernel not in ("packed", "stream") or depth <= 256), kernel
    for split in (False, True):
        if plan.z_in_place:
            got = _run(isa, g, x, w, b, split, kernel, z=z, z_is_y=True)
            np.testing.assert_array_equal(bits(got), want_bits, err_msg=f"{kernel} {split}")
        else:
            with pytest.raises(ValueError, match="z may be y itself only"):
                _run(isa, g, x, w, b, split, kernel, z=z, z_is_y=True)


#: Depths of one, several and a partial last block of CONV_KC (256) steps, the packed kernel's
#: weights laid out block by block: (x shape, w shape, group, strides, pads)
DEEP_PACKED = [
    ((1, 600, 5, 7), (70, 300, 1, 1), 2, (1, 1), (0, 0)),  # two groups, 256 + 44 deep
    ((1, 64, 6, 6), (13, 64, 3, 3), 1, (1, 1), (1, 1)),  # 576: 256 + 256 + 64
    ((2, 40, 8, 5), (22, 20, 5, 5), 2, (2, 2), (2, 2)),  # 500, strided, two images
    ((1, 1024, 3, 3), (9, 1024, 1, 1), 1, (1, 1), (0, 0)),  # 1024: four whole blocks
]


@pytest.mark.parametrize("case", DEEP_PACKED)
@pytest.mark.parametrize("isa", ALL_PATHS)
def test_packed_kernel_over_several_depth_blocks(isa, case):
    """The packed kernel forced on depths of several blocks, with partial tiles of output
    channels, groups, bias, Relu and a residual, whole and unit by unit: the float64 result."""
    path_or_skip(isa)
    x_shape, w_shape, group, strides, pads = case
    out = tuple(
        out_extent(x_shape[2 + a], w_shape[2 + a], strides[a], 1, pads[a], pads[a]) for a in (0, 1)
    )
    g = dict(group=group, strides=strides, dilations=(1, 1), pads=pads, out=out, act="relu")
    rng = np.random.default_rng(sum(w_shape))
    x = rng.standard_normal(x_shape).astype(F32)
    w = rng.standard_normal(w_shape).astype(F32)
    b = rng.standard_normal(w_shape[0]).astype(F32)
    want = reference(x, w, b, group, strides, (1, 1), pads, out)
    z = rng.standard_normal(want.shape).astype(F32)
    want = np.maximum(want + z, 0)
    depth = w_shape[1] * w_shape[2] * w_shape[3]
    for split in (False, True):
        got = _run(isa, g, x, w, b, split=split, kernel="packed", z=z)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * depth, err_msg=f"{split}")
    check_written_over_z(isa, g, x, w, b, "packed", z, bits(got))


@pytest.mark.parametrize("tuning", ["split512", "full512"])
@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("isa", ALL_PATHS)
def test_packed_last_positions_carry_the_bits_of_whole_tiles(isa, exact, tuning):
    """A 1x1 layer's position j reads x[..., j] alone, so the first P positions of a row of P
    (a last partial tile: on avx2/avx512 a few positions taken with the channels in lanes, or
    one riding along with a whole tile) carry the same bits as in a row of 48 (whole tiles
    only): over two depth blocks, a partial tile of channels, bias, a residual and Relu (fast
    mode), on 1 and 2 threads (spans of channels), and the float64 values.  Under full512 the
    avx512 kernel runs whole tiles in pairs: the same bits as split512's single tiles."""
    path_or_skip(isa)
    c, m, full = 300, 50, 80
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, c, 1, full)).astype(F32)
    wt = rng.standard_normal((m, c, 1, 1)).astype(F32)
    b = rng.standard_normal(m).astype(F32)
    z = rng.standard_normal((1, m, 1, full)).astype(F32)

    def run(width: int, threads: int, tuning: str = tuning) -> np.ndarray:
        plan = simd.conv_plan(wt, 1, [1, c, 1, width], [1, 1], [1, 1], [0, 0], [1, width], isa,
                              "packed", exact, tuning)  # fmt: skip
        y = np.full((1, m, 1, width), np.nan, F32)
        residual = None if exact else np.ascontiguousarray(z[..., :width])
        simd.ConvCall(plan, np.ascontiguousarray(x[..., :width]),
                      np.empty(max(plan.work_floats, 1), F32), y, b, "none" if exact else "relu",
                      threads, residual)()  # fmt: skip
        return y

    whole = run(full, 1)
    want = reference(x, wt, b, 1, (1, 1), (1, 1), (0, 0), (1, full))
    want = want if exact else np.maximum(want + z, 0)
    np.testing.assert_allclose(whole, want, rtol=1e-4, atol=1e-4 * c)
    np.testing.assert_array_equal(bits(run(full, 2, "split512")), bits(whole))
    for width in range(1, full):
        for threads in (1, 2):
            got = run(width, threads)
            np.testing.assert_array_equal(bits(got), bits(whole[..., :width]), f"{width, threads}")


def kernels_for(isa: str, g: dict) -> list[str]:
    """Every conv kernel this ISA can run on the geometry g."""
    kernels = ["auto", "packed"]
    if max(g["strides"]) <= 4:  # strided: on phase planes
        kernels.append("direct")
    if tuple(g["strides"]) == (1, 1):
        plain = tuple(g["w_shape"][2:]) == (1, 1) and tuple(g["pads"]) == (0, 0)
        if plain and tuple(g["out"]) == tuple(g["x_shape"][2:]):
            kernels.append("stream")
    if isa != "scalar":  # channels in lanes: one vector of channels (8 on avx2, 16 on avx512)
        kernels.append("lanes")
    if winograd_fits(g):
        kernels.append("winograd")
    return kernels


def winograd_fits(g: dict) -> bool:
    """Whether the Winograd kernel (F(2x2, 3x3)) runs on the geometry g."""
    unit = tuple(g["strides"]) == (1, 1) and tuple(g["dilations"]) == (1, 1)
    return unit and tuple(g["w_shape"][2:]) == (3, 3)


@on_every_isa(geometries())
def test_values_and_split_independence(isa, g):
    rng = np.random.default_rng(g["seed"])
    x = rng.standard_normal(g["x_shape"]).astype(F32)
    w = rng.standard_normal(g["w_shape"]).astype(F32)
    b = rng.standard_normal(g["w_shape"][0]).astype(F32) if g["bias"] else None
    want = reference(x, w, b, g["group"], g["strides"], g["dilations"], g["pads"], g["out"])
    z = None
    if g["residual"]:
        z = rng.standard_normal(want.shape).astype(F32)
        want = want + z
    if g["act"] == "relu":
        want = np.maximum(want, 0)
    depth = g["w_shape"][1] * g["w_shape"][2] * g["w_shape"][3]
    for kernel in kernels_for(isa, g):
        whole = _run(isa, g, x, w, b, split=False, kernel=kernel, z=z)
        np.testing.assert_allclose(whole, want, rtol=1e-5, atol=1e-5 * depth, err_msg=kernel)
        split = _run(isa, g, x, w, b, split=True, kernel=kernel, z=z)
        np.testing.assert_array_equal(bits(split), bits(whole), err_msg=kernel)
        if z is not None:
            check_written_over_z(isa, g, x, w, b, kernel, z, bits(whole))


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize(
    "m, h, w, k, stride",
    [
        (80, 9, 29, 3, 1),  # lanes: four channel vectors, then one; a row a tile, pieces of 6, 5
        (64, 6, 7, 3, 1),  # narrow rows: pairs of channel vectors
        # avx2's pairs on narrow rows: pieces run on from one row into the next
        (40, 7, 7, 3, 1),  # one run of 49 positions (pieces of 5 and 4), then a vector
        (32, 23, 12, 3, 2),  # strided, 12 rows of 6: a run of 64 positions, then one of 8
        (16, 3, 2, 3, 1),  # a run of 6 positions: fewer than a whole store of 8
        (72, 11, 23, 3, 2),  # strided quads
        (70, 7, 40, 5, 3),  # other strides: quads index each position
        (40, 12, 33, 3, 1),  # direct: wide positions (fewer tiles than rows of 16, 16, 1)
        (24, 5, 30, 3, 1),  # direct: row tiles of 16 and 14
        (40, 5, 16, 3, 1),  # direct: rows of one whole tile, paired with the next row's
        (24, 4, 48, 3, 1),  # direct: a row's third tile paired with the next row's first
        # planes a multiple of 4 KiB apart: lanes buffers each output row
        (80, 32, 32, 3, 1),  # quads, then a vector (a row a tile)
        (70, 8, 128, 3, 1),  # quads, then 6 channels stored one by one (tiles of 14, 13)
        (72, 64, 64, 3, 2),  # strided, onto 32 x 32
    ],
)
def test_wide_channel_and_row_tiles(isa, m, h, w, k, stride):
    """More output channels per unit than the hypothesis geometries draw: the lanes kernel's
    tiles of four and two channel vectors, the direct kernel's two tilings and the pairs of
    whole tiles (AVX-512: rows of 32 positions and more, whole or partial channel tiles),
    with a residual and Relu, against the float64 reference, with the same bits on one unit
    at a time and (for a window within one depth block) the same bits from every kernel: each
    output is the same chain of multiply-adds in any tile."""
    path_or_skip(isa)
    c = 5
    out = [(h + 2 * (k // 2) - k) // stride + 1, (w + 2 * (k // 2) - k) // stride + 1]
    g = dict(group=1, strides=[stride] * 2, dilations=[1, 1], pads=[k // 2] * 2, out=out)
    g["act"] = "relu"
    rng = np.random.default_rng(m * w)
    x = rng.standard_normal((2, c, h, w)).astype(F32)
    wt = rng.standard_normal((m, c, k, k)).astype(F32)
    b = rng.standard_normal(m).astype(F32)
    z = rng.standard_normal((2, m, *out)).astype(F32)
    want = reference(x, wt, b, 1, g["strides"], g["dilations"], g["pads"], out) + z
    want = np.maximum(want, 0)
    kernels = ["packed", *(["direct"] if stride == 1 else [])]
    kernels += ["lanes"] if isa != "scalar" else []
    results = []
    for kernel in kernels:
        whole = _run(isa, g, x, wt, b, split=False, kernel=kernel, z=z)
        np.testing.assert_allclose(whole, want, rtol=1e-5, atol=1e-5 * c * k * k, err_msg=kernel)
        split = _run(isa, g, x, wt, b, split=True, kernel=kernel, z=z)
        np.testing.assert_array_equal(bits(split), bits(whole), err_msg=kernel)
        check_written_over_z(isa, g, x, wt, b, kernel, z, bits(whole))
        results.append(whole)
    for kernel, y in zip(kernels[1:], results[1:]):
        np.testing.assert_array_equal(bits(y), bits(results[0]), err_msg=kernel)


@pytest.mark.parametrize("isa", ["avx512", "avx2"])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("m", [128, 80])
@pytest.mark.parametrize("k", [3, 1])
def test_deep_windows_run_quads_in_depth_blocks(isa, stride, m, k):
    """A window too deep for four channel vectors' weights in the lanes kernel's budget (350
    channels x 3 x 3: 3150 steps, two blocks on avx512) runs its quads (avx2: pairs of 8
    channels, deeper still to need blocks) in depth blocks, the partial sums kept between
    them (chunks of four channel vectors; with 80 channels the fifth runs whole): the float64
    values, and the same bits as one unit at a time and as the direct kernel (the whole depth
    in registers), since each output's chain of multiply-adds is unchanged.  1x1 windows step
    from plane to plane without an offset table (uniform_step), each block from its own."""
    path_or_skip(isa)
    # avx2's pairs hold 2 x 8 channels' weights: blocks from 768 KiB / 64 B = 12288 steps
    deep = {(3, "avx512"): 350, (3, "avx2"): 1400, (1, "avx512"): 3200, (1, "avx2"): 12800}
    c = deep[k, isa]
    h, w = (6, 20) if isa == "avx512" else (4, 12)
    pad = k // 2
    out = [(h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1]
    g = dict(group=1, strides=[stride] * 2, dilations=[1, 1], pads=[pad] * 2, out=out)
    g["act"] = "relu"
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, c, h, w)).astype(F32)
    wt = rng.standard_normal((m, c, k, k)).astype(F32)
    b = rng.standard_normal(m).astype(F32)
    z = rng.standard_normal((1, m, *out)).astype(F32)
    want = np.maximum(reference(x, wt, b, 1, g["strides"], [1, 1], [pad] * 2, out) + z, 0)
    lanes = _run(isa, g, x, wt, b, split=False, kernel="lanes", z=z)
    np.testing.assert_allclose(lanes, want, rtol=1e-4, atol=1e-3 * c * k * k / 9)
    split = _run(isa, g, x, wt, b, split=True, kernel="lanes", z=z)
    np.testing.assert_array_equal(bits(split), bits(lanes))
    check_written_over_z(isa, g, x, wt, b, "lanes", z, bits(lanes))  # partial sums apart
    if stride == 1:
        direct = _run(isa, g, x, wt, b, split=False, kernel="direct", z=z)
        np.testing.assert_array_equal(bits(direct), bits(lanes))


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize(
    "n, c, m, h, w, group",
    [
        (1, 64, 16, 55, 55, 1),
        (2, 8, 40, 5, 7, 1),
        (1, 12, 48, 3, 3, 3),
        (2, 16, 16, 4, 4, 2),
        (1, 320, 24, 6, 6, 1),  # deeper than a block: a partial tile's sums go to y first
    ],
)
def test_stream_kernel_on_plain_1x1(isa, n, c, m, h, w, group):
    """x's planes read in place: whole tiles, a last partial tile (or only that) and groups,
    against the reference and, bit for bit, the unit-by-unit run; rows that are not h * w
    apart take the packed columns instead, with the same values, and the staged kernels lay
    them end to end."""
    path_or_skip(isa)
    rng = np.random.default_rng(c * m + h)
    x = rng.standard_normal((n, c, h, w)).astype(F32)
    wt = rng.standard_normal((m, c // group, 1, 1)).astype(F32)
    b = rng.standard_normal(m).astype(F32)
    g = dict(group=group, strides=(1, 1), dilations=(1, 1), pads=(0, 0), out=(h, w),
             act="relu")  # fmt: skip
    z = rng.standard_normal((n, m, h, w)).astype(F32)  # a residual, summed before the Relu
    want = np.maximum(reference(x, wt, b, group, (1, 1), (1, 1), (0, 0), (h, w)) + z, 0)
    whole = _run(isa, g, x, wt, b, split=False, kernel="stream", z=z)
    np.testing.assert_allclose(whole, want, rtol=1e-5, atol=1e-4)
    split = _run(isa, g, x, wt, b, split=True, kernel="stream", z=z)
    np.testing.assert_array_equal(bits(split), bits(whole))
    check_written_over_z(isa, g, x, wt, b, "stream", z, bits(whole))
    wider = np.zeros((n, c, h, w + 3), F32)
    wider[..., :w] = x
    rows_apart = _run(isa, g, wider[..., :w], wt, b, split=False, kernel="stream", z=z)
    np.testing.assert_allclose(rows_apart, want, rtol=1e-5, atol=1e-4)
    # channels in lanes read the plane as one row too: staged from rows wherever they lie, the
    # same bits as from x itself and as the stream kernel's
    for kernel in ["lanes", "direct"] if isa != "scalar" else ["direct"]:
        flat = _run(isa, g, wider[..., :w], wt, b, split=False, kernel=kernel, z=z)
        np.testing.assert_array_equal(bits(flat), bits(whole), err_msg=kernel)
    if isa != "scalar":
        # lanes read x's planes in place where they lie h * w apart (x, a channel slice of a
        # larger array), else staged (planes a row apart): the same bits every way
        taller = np.zeros((n, c, h + 1, w), F32)
        taller[:, :, :h] = x
        more = np.zeros((n, c + 5, h, w), F32)
        more[:, 2 : 2 + c] = x
        for view in (x, more[:, 2 : 2 + c], taller[:, :, :h]):
            for split in (False, True):
                got = _run(isa, g, view, wt, b, split=split, kernel="lanes", z=z)
                np.testing.assert_array_equal(bits(got), bits(whole))


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize(
    "strides, size, out",
    [
        ((2, 2), (14, 14), (7, 7)),  # a ResNet downsample's shortcut
        ((2, 2), (13, 9), (7, 5)),  # odd sizes: the last row and column read
        ((3, 1), (10, 6), (4, 6)),  # rows only
        ((1, 4), (5, 17), (5, 5)),  # columns only
        ((2, 2), (6, 6), (3, 4)),  # a pad after the last column: read in place, not copied
    ],
)
def test_strided_1x1_runs_on_the_subsampled_image(isa, strides, size, out):
    """A strided 1x1 kernel without pads reads every sh-th row and sw-th column alone: every
    kernel runs it as a plain 1x1 on a copy of those made by stage() (into work, after the
    staged image), the bits of that plain plan on the caller's own subsampled copy, whole and
    unit by unit, from x or from a strided view of it; the float64 values.  With a pad after
    the last row or column the kernels read x in place as before."""
    path_or_skip(isa)
    c, m = 20, 24
    g = dict(group=1, strides=strides, dilations=(1, 1), pads=(0, 0), out=out, act="relu")
    rng = np.random.default_rng(sum(size))
    x = rng.standard_normal((2, c, *size)).astype(F32)
    wt = rng.standard_normal((m, c, 1, 1)).astype(F32)
    b = rng.standard_normal(m).astype(F32)
    z = rng.standard_normal((2, m, *out)).astype(F32)
    sub = x[:, :, :: strides[0], :: strides[1]][:, :, : out[0], : out[1]]
    padded = sub.shape[2:] != tuple(out)
    if padded:  # the end pads' zeros
        sub = np.pad(sub, ((0, 0), (0, 0), (0, out[0] - sub.shape[2]), (0, out[1] - sub.shape[3])))
    want = np.maximum(np.einsum("nchw,mc->nmhw", sub.astype(np.float64), wt[:, :, 0, 0])
                      + b[:, None, None] + z, 0)  # fmt: skip
    plain = dict(g, strides=(1, 1))
    wider = np.zeros((2, c + 3, size[0], size[1] + 5), F32)  # x as a view: planes, rows apart
    wider[:, 1 : 1 + c, :, : size[1]] = x
    for kernel in kernels_for(isa, dict(g, w_shape=wt.shape, x_shape=x.shape)):
        plan = _plan(isa, g, x, wt, kernel)
        whole = _run(isa, g, x, wt, b, split=False, kernel=kernel, z=z)
        np.testing.assert_allclose(whole, want, rtol=1e-5, atol=1e-5 * c, err_msg=kernel)
        if not padded:
            assert plan.work_floats >= sub.size, kernel  # the copy's room
            same = _run(isa, plain, np.ascontiguousarray(sub), wt, b, False, plan.kernel, z)
            np.testing.assert_array_equal(bits(whole), bits(same), err_msg=kernel)
        view = wider[:, 1 : 1 + c, :, : size[1]]
        for got in (
            _run(isa, g, x, wt, b, True, kernel, z),
            _run(isa, g, view, wt, b, False, kernel, z),
        ):
            np.testing.assert_array_equal(bits(got), bits(whole), err_msg=kernel)


@pytest.mark.parametrize("isa", ["avx2", "avx512"])  # (the scalar path has no lanes kernel)
@pytest.mark.parametrize("k, stride, size", [(1, 2, 28), (3, 1, 9), (3, 2, 15), (2, 3, 11)])
def test_lanes_without_padding_read_x_in_place_or_staged_alike(isa, k, stride, size):
    """With no padding the lanes kernel reads x's own planes where they lie h * w apart (x, a
    channel slice of a larger array) and a staged copy where they do not: the same bits."""
    path_or_skip(isa)
    rng = np.random.default_rng(size * k + stride)
    n, c, m = 2, 24, 40
    out = ((size - k) // stride + 1,) * 2
    x = rng.standard_normal((n, c, size, size)).astype(F32)
    wt = rng.standard_normal((m, c, k, k)).astype(F32)
    b = rng.standard_normal(m).astype(F32)
    g = dict(group=1, strides=(stride, stride), dilations=(1, 1), pads=(0, 0), out=out,
             act="relu")  # fmt: skip
    z = rng.standard_normal((n, m, *out)).astype(F32)
    want = np.maximum(reference(x, wt, b, 1, (stride,) * 2, (1, 1), (0, 0), out) + z, 0)
    whole = _run(isa, g, x, wt, b, split=False, kernel="lanes", z=z)
    np.testing.assert_allclose(whole, want, rtol=1e-4, atol=1e-3)
    more = np.zeros((n, c + 3, size, size), F32)
    more[:, 1 : 1 + c] = x
    taller = np.zeros((n, c, size + 2, size), F32)
    taller[:, :, :size] = x
    for view in (more[:, 1 : 1 + c], taller[:, :, :size]):
        for split in (False, True):
            got = _run(isa, g, view, wt, b, split=split, kernel="lanes", z=z)
            np.testing.assert_array_equal(bits(got), bits(whole))


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize(
    "m, c, kh, group", [(32, 16, 3, 1), (40, 7, 3, 1), (48, 36, 1, 3), (17, 5, 2, 1)]
)
def test_weight_packing_from_any_layout(isa, m, c, kh, group):
    """The plan packs a C-contiguous weight in place (whole 16 x 16 blocks transposed in
    registers on avx512, the rest float by float) and a strided one through a dense copy: the
    same packed weight, so the same bits, and the reference's values."""
    path_or_skip(isa)
    rng = np.random.default_rng(m * c + kh)
    x = rng.standard_normal((1, c * group, 6, 7)).astype(F32)
    w = rng.standard_normal((m * group, c, kh, kh)).astype(F32)
    strided = np.empty((m * group, c, kh, 2 * kh), F32)[..., ::2]  # every stride differs
    strided[...] = w
    assert not strided.flags.c_contiguous
    out = (6 - kh + 1, 7 - kh + 1)
    g = dict(group=group, strides=(1, 1), dilations=(1, 1), pads=(0, 0), out=out, act="none")
    want = reference(x, w, None, group, (1, 1), (1, 1), (0, 0), out)
    for kernel in ("packed", "direct"):
        dense = _run(isa, g, x, w, None, split=False, kernel=kernel)
        np.testing.assert_allclose(dense, want, rtol=1e-5, atol=1e-4, err_msg=kernel)
        copied = _run(isa, g, x, strided, None, split=False, kernel=kernel)
        np.testing.assert_array_equal(bits(copied), bits(dense), err_msg=kernel)


@pytest.mark.parametrize("isa", ALL_PATHS)
def test_nan_propagates_through_relu_and_strided_input(isa):
    path_or_skip(isa)
    rng = np.random.default_rng(3)
    big = rng.standard_normal((2, 8, 12, 30)).astype(F32)
    x = big[:, :, :, ::2]  # unit column stride is required: refused, then copied
    w = rng.standard_normal((16, 8, 3, 3)).astype(F32)
    x_c = np.ascontiguousarray(x)
    x_c[0, 2, 5, 5] = np.nan
    g = dict(group=1, strides=(1, 1), dilations=(1, 1), pads=(1, 1), out=(12, 15), act="relu")
    y = _run(isa, g, x_c, w, None, split=False)
    assert np.isnan(y[0, :, 4:7, 4:7]).all() and not np.isnan(y[1]).any()
    plan = simd.conv_plan(w, 1, list(x.shape), [1, 1], [1, 1], [1, 1], [12, 15], isa)
    with pytest.raises(ValueError, match="unit column stride"):
        plan.stage(x, np.empty(plan.work_floats, F32))


@pytest.mark.parametrize("path", ["avx2", "avx512"])
@pytest.mark.parametrize("pad", [2**61, 2**62])
def test_geometry_past_the_native_bound_is_refused_naming_the_node(path, pad):
    """Pads whose output extent passes int64 (2**62) are refused like those whose positions
    overflow the plan's checked sizes (2**61): unsupported, naming the node."""
    path_or_skip(path)
    model, feed = _conv_model(4, 8, 3, 1, pad, relu=False, n=1, size=7)
    with pytest.raises(graphrt.SessionError) as err:
        graphrt.Session(model, kernel_path=path).run(None, feed)
    assert err.value.kind == "unsupported"
    assert "Conv node" in str(err.value) and "native bound" in str(err.value)


def _conv_model(c, m, k, stride, pad, group=1, relu=True, clip=False, n=2, size=17):
    rng = np.random.default_rng(c * 100 + m)
    inits = [
        init("w", (rng.standard_normal((m, c // group, k, k)) * 0.2).astype(F32)),
        init("b", rng.standard_normal(m).astype(F32)),
    ]
    nodes = [
        helper.make_node(
            "Conv", ["x", "w", "b"], ["c"], strides=[stride] * 2, pads=[pad] * 4, group=group
        )
    ]
    last = "c"
    if relu:
        nodes.append(helper.make_node("Relu", [last], ["r"]))
        last = "r"
    if clip:
        lo, hi = init("lo", np.array(-0.5, F32)), init("hi", np.array(0.7, F32))
        inits += [lo, hi]
        nodes.append(helper.make_node("Clip", [last, "lo", "hi"], ["y"]))
    else:
        nodes.append(helper.make_node("Identity", [last], ["y"]))
    model = make_model(nodes, [tensor("x", shape=[n, c, size, size])], [tensor("y")], inits)
    x = np.random.default_rng(7).standard_normal((n, c, size, size)).astype(F32)
    return model, {"x": x}


MODELS = {
    "3x3": dict(c=16, m=24, k=3, stride=1, pad=1),
    "5x5/2": dict(c=8, m=32, k=5, stride=2, pad=2, size=40),
    "1x1/2": dict(c=16, m=20, k=1, stride=2, pad=0, size=40),
    "1x1 wide": dict(c=8, m=40, k=1, stride=1, pad=0),
    "grouped": dict(c=16, m=32, k=3, stride=1, pad=1, group=2),
    "no relu": dict(c=6, m=17, k=3, stride=1, pad=0, relu=False),
    "clip": dict(c=6, m=17, k=3, stride=1, pad=1, clip=True),
}


def _fire_model(c=24, squeeze=8, expand=16, size=19):
    """SqueezeNet's fire module on a batch of one: the expand convolutions write their outputs
    straight into the Concat's (an assembled step)."""
    rng = np.random.default_rng(5)
    weights = {
        "ws": (squeeze, c, 1), "we1": (expand, squeeze, 1), "we3": (expand, squeeze, 3),
    }  # fmt: skip
    inits = [
        init(n, (rng.standard_normal((m, ci, k, k)) * 0.3).astype(F32))
        for n, (m, ci, k) in weights.items()
    ]
    inits += [init(f"b{n}", rng.standard_normal(m).astype(F32)) for n, (m, _, _) in weights.items()]
    conv = lambda w, src, out, k: helper.make_node(
        "Conv", [src, w, f"b{w}"], [out], pads=[k // 2] * 4
    )
    nodes = [
        conv("ws", "x", "s", 1), helper.make_node("Relu", ["s"], ["sr"]),
        conv("we1", "sr", "e1", 1), helper.make_node("Relu", ["e1"], ["e1r"]),
        conv("we3", "sr", "e3", 3), helper.make_node("Relu", ["e3"], ["e3r"]),
        helper.make_node("Concat", ["e1r", "e3r"], ["y"], axis=1),
    ]  # fmt: skip
    model = make_model(nodes, [tensor("x", shape=[1, c, size, size])], [tensor("y")], inits)
    x = np.random.default_rng(8).standard_normal((1, c, size, size)).astype(F32)
    return model, {"x": x}


@pytest.mark.parametrize("z_first", [False, True])
@pytest.mark.parametrize("k, size", [(3, 14), (1, 30), (3, 40)])  # lanes, stream, lanes
@pytest.mark.parametrize("path", ["avx2", "avx512"])
def test_residual_block_fused_into_the_native_conv(path, k, size, z_first):
    """Conv -> Add(shortcut) -> Relu as one FusedConv whose kernel sums Z in registers: the
    bits of the unfused nodes on the same path (the same IEEE steps), on 1 and 2 threads."""
    path_or_skip(path)
    rng = np.random.default_rng(k * size)
    inits = [
        init("w", (rng.standard_normal((16, 16, k, k)) * 0.2).astype(F32)),
        init("b", rng.standard_normal(16).astype(F32)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[k // 2] * 4),
        helper.make_node("Add", ["x", "c"] if z_first else ["c", "x"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    model = make_model(nodes, [tensor("x", shape=[1, 16, size, size])], [tensor("y")], inits)
    feed = {"x": rng.standard_normal((1, 16, size, size)).astype(F32)}
    plain = graphrt.Session(model, kernel_path=path, optimization_level="none")
    want = plain.run(None, feed)[0]
    for threads in (1, 2):
        fused = graphrt.Session(model, kernel_path=path, intra_op_threads=threads)
        assert [n.info.op_type for n in fused.graph.nodes] == ["FusedConv"]
        np.testing.assert_array_equal(bits(fused.run(None, feed)[0]), bits(want))


# one depth block of 256 steps; two (avx2's packed kernel sums them in y: declined)
@pytest.mark.parametrize("channels, out, size", [(64, 32, 14), (320, 256, 7)])
@pytest.mark.parametrize("mode", ["fast", "exact"])
@pytest.mark.parametrize("path", ["numpy", "avx2", "avx512"])
def test_a_dying_shortcut_is_written_over(path, mode, channels, out, size):
    """A ResNet block's shortcut made by a convolution and dying at the FusedConv that adds
    it: the fused output is planned over it where the native plan reads each Z element
    before writing that output (``z_in_place``: always on one depth block), apart elsewhere
    (numpy's kernel, exact mode, packed or stream sums deeper than a block); the bits of the
    unfused graph on the same path either way, on 1 and 2 threads."""
    if path != "numpy":
        path_or_skip(path)
    from graphrt.explain import plan_report

    rng = np.random.default_rng(channels)
    inits = [
        init("ws", (rng.standard_normal((out, channels, 1, 1)) * 0.1).astype(F32)),
        init("w", (rng.standard_normal((out, channels, 1, 1)) * 0.1).astype(F32)),
        init("b", rng.standard_normal(out).astype(F32)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "ws"], ["s"]),  # a shortcut, in the slab
        helper.make_node("Conv", ["x", "w", "b"], ["c"]),
        helper.make_node("Add", ["c", "s"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    model = make_model(nodes, [tensor("x", shape=[1, channels, size, size])], [tensor("y")], inits)
    feed = {"x": rng.standard_normal((1, channels, size, size)).astype(F32)}
    plain = graphrt.Session(model, kernel_path=path, mode=mode, optimization_level="none")
    want = plain.run(None, feed)[0]
    for threads in (1, 2):
        fused = graphrt.Session(model, kernel_path=path, mode=mode, intra_op_threads=threads)
        plan = fused.plan_for([feed["x"]])
        (step,) = [st for st in plan.steps if st.node.info.op_type == "FusedConv"]
        native = getattr(step.prepared, "native", None)
        over = path != "numpy" and mode == "fast" and native.z_in_place
        if channels == 64:
            assert over == (path != "numpy" and mode == "fast")
        (entry,) = [e for e in plan_report(plan)["steps"] if e["op_type"] == "FusedConv"]
        z = entry["inputs"][3]  # (the fusion may take either product as the Add's other)
        assert z in ("s", "c") and entry["in_place_of"] == (z if over else None)
        np.testing.assert_array_equal(bits(fused.run(None, feed)[0]), bits(want))


@pytest.mark.parametrize("path", ["avx2", "avx512"])
def test_fire_module_assembled_from_native_convolutions(path):
    path_or_skip(path)
    model, feed = _fire_model()
    want = graphrt.Session(model, kernel_path="numpy").run(None, feed)[0]
    got = []
    for threads in (1, 2):
        sess = graphrt.Session(model, kernel_path=path, intra_op_threads=threads, debug=True)
        plan = sess.plan_for([feed["x"]])
        assert [s.kind for s in plan.steps if s.node.info.op_type == "Concat"] == ["assembled"]
        got.append(sess.run(None, feed)[0])
    np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(bits(got[1]), bits(got[0]))


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("path", ["avx2", "avx512"])
def test_sessions_fused_and_threaded(path, name, monkeypatch):
    """Native fast mode agrees with the numpy path in value; fusion (level basic: Conv+Relu
    into FusedConv) and the thread count leave its bits unchanged."""
    path_or_skip(path)
    import graphrt_ops_simd.conv as native_conv

    runs = []
    real = native_conv._native.conv_plan
    monkeypatch.setattr(
        native_conv._native, "conv_plan", lambda *a, **kw: (runs.append(1), real(*a, **kw))[1]
    )
    model, feed = _conv_model(**MODELS[name])
    want = graphrt.Session(model, kernel_path="numpy").run(None, feed)[0]
    results = []
    for level, threads in (("none", 1), ("basic", 1), ("basic", 2), ("all", 4)):
        sess = graphrt.Session(
            model, kernel_path=path, optimization_level=level, intra_op_threads=threads
        )
        results.append(sess.run(None, feed)[0])
    assert runs, "the native convolution was not planned"
    np.testing.assert_allclose(results[0], want, rtol=1e-4, atol=1e-4)
    for got in results[1:]:
        np.testing.assert_array_equal(bits(got), bits(results[0]))


@pytest.mark.parametrize(
    "kw, native",
    [
        (dict(c=16, m=16, k=3, stride=1, pad=1, group=16), False),  # depthwise
        (dict(c=16, m=8, k=3, stride=1, pad=1, group=2), False),  # 4 channels per group
        (dict(c=16, m=16, k=3, stride=1, pad=1), True),
        (dict(c=16, m=16, k=1, stride=2, pad=0, size=40), True),
        (dict(c=16, m=16, k=3, stride=2, pad=1), True),
        (dict(c=16, m=32, k=1, stride=1, pad=0), True),
    ],
)
def test_which_convolutions_go_native(kw, native, monkeypatch):
    path = path_or_skip(ISAS[-1]) if ISAS[-1] != "scalar" else pytest.skip("no SIMD path here")
    import graphrt_ops_simd.conv as native_conv
    from graphrt_ops_simd import conv_exact

    runs = []
    real = native_conv._native.conv_plan
    monkeypatch.setattr(
        native_conv._native, "conv_plan", lambda *a, **k: (runs.append(1), real(*a, **k))[1]
    )
    model, feed = _conv_model(**kw)
    graphrt.Session(model, kernel_path=path).run(None, feed)
    assert len(runs) == int(native)
    # exact mode plans the native convolution for windows of 128 terms or more (conv_exact.py)
    graphrt.Session(model, kernel_path=path, mode="exact").run(None, feed)
    depth = kw["c"] // kw.get("group", 1) * kw["k"] ** 2
    exact = native and depth >= conv_exact.NATIVE_MIN_DEPTH
    assert len(runs) == int(native) + int(exact)


@pytest.mark.parametrize("isa", ["avx512", "avx2"])
@pytest.mark.parametrize(
    "n, c, m, size, stride",
    [
        (1, 64, 136, 7, 1),  # weights far above the image
        (1, 64, 40, 14, 2),  # strided, few channel groups
        (1, 350, 80, 8, 1),  # avx512: quads in depth blocks
        (2, 64, 136, 7, 1),  # two images
    ],
)
def test_lanes_runs_give_the_same_bits_on_any_thread_count(isa, n, c, m, size, stride):
    """A whole run of the lanes kernel over several threads (its position blocks re-cut into a
    multiple of the thread count) against the float64 values and bit for bit against one
    thread and against one unit at a time."""
    path_or_skip(isa)
    out = [(size + 2 - 3) // stride + 1] * 2
    g = dict(group=1, strides=[stride] * 2, dilations=[1, 1], pads=[1, 1], out=out)
    rng = np.random.default_rng(c + m)
    x = rng.standard_normal((n, c, size, size)).astype(F32)
    wt = rng.standard_normal((m, c, 3, 3)).astype(F32)
    b = rng.standard_normal(m).astype(F32)
    z = rng.standard_normal((n, m, *out)).astype(F32)
    want = np.maximum(reference(x, wt, b, 1, g["strides"], [1, 1], [1, 1], out) + z, 0)
    _same_bits_on_thread_counts(isa, g, x, wt, b, z, want, "lanes")


def _same_bits_on_thread_counts(isa, g, x, wt, b, z, want, kernel):
    """Whole runs of the kernel (Relu, Z summed) on 1 to 4 threads: the float64 values, and
    the same bits as one thread and as one unit at a time."""
    pads, out = list(g["pads"]), list(g["out"])
    plan = simd.conv_plan(wt, g["group"], list(x.shape), g["strides"], [1, 1], pads, out, isa,
                          kernel)  # fmt: skip
    work = np.empty(plan.work_floats, F32)
    atol = 1e-4 * wt[0].size
    results = []
    for threads in (1, 2, 3, 4):
        plan.stage(x, work, threads)
        y = np.full((x.shape[0], wt.shape[0], *out), np.nan, F32)
        plan.run(x, work, y, b, "relu", threads=threads, z=z)
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=atol, err_msg=str(threads))
        results.append(y)
    # a bound call (the Winograd kernel's per-thread whole run; on one thread, its chunks)
    for threads in (1, 2, 3, 4):
        y = np.full((x.shape[0], wt.shape[0], *out), np.nan, F32)
        simd.ConvCall(plan, x, work, y, b, "relu", threads, z)()
        results.append(y)
    for y in results[1:]:
        np.testing.assert_array_equal(bits(y), bits(results[0]))
    units = _run(isa, dict(g, act="relu"), x, wt, b, split=True, kernel=kernel, z=z)
    np.testing.assert_array_equal(bits(units), bits(results[0]))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize(
    "n, c, m, size, k, groups",
    [
        (1, 96, 200, 7, 1, 1),  # a small map under many channels: threads take channel spans
        (2, 64, 70, 7, 1, 1),  # two images, channel spans
        (1, 64, 160, 7, 1, 2),  # two groups, channel spans within each
        (1, 32, 40, 12, 1, 1),  # more positions than channels: spans of positions
        (1, 48, 100, 9, 3, 1),  # a 3x3 window, packed columns
    ],
)
def test_packed_runs_give_the_same_bits_on_any_thread_count(isa, n, c, m, size, k, groups):
    """A whole run of the packed kernel over several threads (spans of positions, or of output
    channels where the weight outweighs the columns) against the float64 values and bit for
    bit against one thread and against one unit at a time."""
    path_or_skip(isa)
    p = k // 2
    g = dict(group=groups, strides=[1, 1], dilations=[1, 1], pads=[p, p], out=[size, size])
    rng = np.random.default_rng(c + m)
    x = rng.standard_normal((n, c, size, size)).astype(F32)
    wt = rng.standard_normal((m, c // groups, k, k)).astype(F32)
    b = rng.standard_normal(m).astype(F32)
    z = rng.standard_normal((n, m, size, size)).astype(F32)
    want = np.maximum(reference(x, wt, b, groups, [1, 1], [1, 1], [p, p], [size, size]) + z, 0)
    _same_bits_on_thread_counts(isa, g, x, wt, b, z, want, "packed")


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize(
    "n, c, m, size, pad, groups",
    [
        (1, 64, 64, 14, 1, 1),  # 49 tiles: 48 in vectors, the 49th a column on its own
        # tile rows of 7, narrower than a vector (partial vectors stored whole); the 49th
        # column for 5 (avx2) or 3 (avx512) slivers: four at a time, then one by one
        (1, 48, 30, 13, 1, 1),
        (1, 24, 40, 27, 1, 1),  # 196 tiles: the last unit's 4 tiles are 4 columns on their own
        (2, 40, 70, 15, 1, 1),  # odd maps: the last tiles' right column and bottom row dropped
        (1, 32, 50, 9, 0, 1),  # no padding, 7 x 7 outputs
        (1, 24, 20, 11, 2, 2),  # two groups, two pads: 13 x 13 outputs
        (1, 300, 24, 6, 1, 1),  # deeper than one block of the products (256)
        (1, 16, 130, 20, 1, 1),  # 130 channels: several chunks of slivers, 100 tiles
        (2, 20, 36, 58, 1, 1),  # 841 tiles: a bound call splits the panels over its threads
        # (one thread: chunks of V of 12 panels (avx512), cutting tile rows of 29)
        (1, 16, 64, 55, 1, 1),  # light_squeezenet's: one thread's chunks of 16 whole tile rows
        (1, 9, 24, 47, 0, 3),  # ... in three groups, odd: 23 x 23 tiles, the last ones cut
    ],
)
def test_winograd_values_and_bits_on_any_thread_count(isa, n, c, m, size, pad, groups):
    """The Winograd kernel (F(2x2, 3x3)) against the float64 values, and bit for bit on 1 to 4
    threads and one unit at a time: a unit's tiles and channels never change its arithmetic,
    nor does a bound call on one thread transforming V a chunk of panels at a time."""
    path_or_skip(isa)
    out = size + 2 * pad - 2
    g = dict(group=groups, strides=[1, 1], dilations=[1, 1], pads=[pad, pad], out=[out, out])
    rng = np.random.default_rng(c + m + size)
    x = rng.standard_normal((n, c, size, size)).astype(F32)
    wt = rng.standard_normal((m, c // groups, 3, 3)).astype(F32)
    b = rng.standard_normal(m).astype(F32)
    z = rng.standard_normal((n, m, out, out)).astype(F32)
    want = reference(x, wt, b, groups, [1, 1], [1, 1], [pad, pad], [out, out]) + z
    _same_bits_on_thread_counts(isa, g, x, wt, b, z, np.maximum(want, 0), "winograd")


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize("threads", [1, 2])
def test_winograd_keeps_nan_and_infinity_to_their_windows(isa, threads):
    """A NaN or an infinity in a tile's 4 x 4 patch reaches all four outputs of A^T M A, also
    those whose 3 x 3 window does not hold it: those outputs are taken by their windows, so the
    non-finite outputs are exactly the direct kernel's (NaN where it has NaN, infinities of its
    signs) and the others keep their values."""
    path_or_skip(isa)
    rng = np.random.default_rng(5)
    n, c, m, size = 1, 20, 24, 23
    x = rng.standard_normal((n, c, size, size)).astype(F32)
    x[0, 3, 0, 0] = np.nan  # a corner: in the pad's tiles
    x[0, 5, 10, 11] = np.inf  # inside, at a tile's odd column
    x[0, 5, 16, 4] = -np.inf
    x[0, 7, 22, 22] = np.nan  # the last row and column (odd map: the last tiles cut)
    x[0, 9, 6, 6] = np.inf
    x[0, 9, 6, 7] = -np.inf  # windows holding both: NaN
    wt = rng.standard_normal((m, c, 3, 3)).astype(F32)
    wt[:, 5] = np.abs(wt[:, 5])  # channel 5's infinities keep their signs
    b = rng.standard_normal(m).astype(F32)
    g = dict(group=1, strides=[1, 1], dilations=[1, 1], pads=[1, 1], out=[size, size], act="none")
    plan = simd.conv_plan(wt, 1, list(x.shape), [1, 1], [1, 1], [1, 1], [size, size], isa,
                          "winograd")  # fmt: skip
    work = np.empty(plan.work_floats, F32)
    got = np.full((n, m, size, size), 7.0, F32)
    simd.ConvCall(plan, x, work, got, b, "none", threads)()
    want = _run(isa, g, x, wt, b, split=False, kernel="packed")
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(np.isposinf(got), np.isposinf(want))
    assert np.array_equal(np.isneginf(got), np.isneginf(want))
    assert np.isnan(want).any() and np.isposinf(want).any() and np.isneginf(want).any()
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-5 * c * 9)


#: The measured rules of conv_choice.cpp: avx512's (16-channel lanes) as measured on Zen 4
#: (the split512 rule set) ...
AUTO_CHOICES_AVX512 = [
    ((64, 64, 56, 56, 3), (1, 1), "winograd"),  # 3x3, 16 channels and more, 2**24 MACs
    ((256, 256, 14, 14, 3), (1, 1), "winograd"),  # ... on 49 tiles
    ((32, 128, 27, 27, 3), (1, 1), "winograd"),
    ((512, 512, 7, 7, 3), (1, 1), "lanes"),  # ... but not 16 tiles: half a panel of 32
    ((48, 192, 13, 13, 3), (1, 1), "winograd"),  # ... from 32 channels 2**23 multiply-adds
    ((32, 128, 13, 13, 3), (1, 1), "lanes"),  # ... not fewer
    ((64, 64, 224, 224, 3), (1, 1), "direct"),  # ... nor a V of more than 32 MiB
    ((64, 64, 56, 56, 5), (1, 1), "lanes"),  # a large map, a deep window
    ((8, 64, 56, 56, 3), (1, 1), "direct"),  # a large map, a shallow window
    ((16, 64, 56, 56, 3), (1, 1), "winograd"),  # from 16 channels
    ((16, 64, 56, 56, 5), (1, 1), "lanes"),  # a depth of 400
    ((64, 64, 14, 14, 3), (1, 1), "lanes"),  # a small map, a deep window (too few MACs)
    ((3, 16, 32, 32, 3), (1, 1), "direct"),  # small_cnn's layers: rows of whole tiles
    ((16, 32, 16, 16, 3), (1, 1), "direct"),
    ((16, 32, 15, 15, 3), (1, 1), "lanes"),  # the same depth on rows of 15 of 16 lanes
    ((16, 32, 7, 7, 3), (1, 1), "lanes"),  # a shallow window on rows of 7 of 16 lanes
    ((256, 64, 56, 56, 1), (1, 1), "stream"),  # 1x1, few output channels: x in place
    ((64, 256, 56, 56, 1), (1, 1), "packed"),  # 1x1, many output channels: a plain copy
    ((512, 512, 7, 7, 1), (1, 1), "lanes"),
    ((1024, 256, 14, 14, 1), (1, 1), "lanes"),  # 1x1, a deep input on a mid-size map: one row
    ((576, 96, 14, 14, 1), (1, 1), "lanes"),  # ... of 196 positions, 576 deep
    ((256, 1024, 14, 14, 1), (1, 1), "lanes"),  # ... 256 deep
    ((512, 1000, 13, 13, 1), (1, 1), "lanes"),
    ((1024, 128, 16, 17, 1), (1, 1), "packed"),  # ... but not on more than 256 positions
    ((768, 128, 16, 17, 1), (1, 1), "stream"),  # ... and few outputs: x in place
    ((992, 128, 16, 17, 1), (1, 1), "packed"),  # ... too deep to read x in place
    ((128, 192, 14, 14, 1), (1, 1), "packed"),  # ... a shallower input
    ((192, 64, 14, 14, 1), (1, 1), "stream"),  # ... and few outputs
    ((128, 128, 56, 56, 3), (2, 2), "lanes"),  # strided, a deep window
    ((4, 64, 224, 224, 3), (2, 2), "direct"),  # strided, 8 channels or fewer: phase planes
    ((3, 64, 224, 224, 3), (2, 2), "direct"),  # ... (light_squeezenet's first)
    ((16, 32, 64, 64, 3), (2, 2), "lanes"),  # ... not 16 channels
    ((3, 96, 224, 224, 11), (4, 4), "lanes"),  # ... nor stride 4
]
#: ... and avx2's own: 8-channel lanes for windows above 1x1 from a depth of 400 (strided: 32),
#: packed columns for 1x1 kernels (stream for at most 24 channels, lanes for squeezes, for one
#: position and for small maps of more positions off whole tiles than the packed kernel takes in
#: lanes) and for large images with 128 channels and more.
AUTO_CHOICES_AVX2 = [
    ((64, 64, 56, 56, 3), (1, 1), "winograd"),  # 3x3, 16 channels and more, 2**24 MACs
    ((224, 224, 7, 7, 3), (1, 1), "winograd"),  # ... on one whole panel of 16 tiles
    ((512, 512, 7, 7, 3), (1, 1), "lanes"),  # ... but not with 16 MiB of U
    ((128, 256, 56, 56, 3), (1, 1), "winograd"),
    ((64, 64, 14, 14, 3), (1, 1), "lanes"),  # ... but not fewer multiply-adds
    ((256, 256, 14, 14, 3), (1, 1), "winograd"),  # ... 49 tiles
    ((64, 64, 56, 56, 5), (1, 1), "lanes"),  # a large map, a window 1600 deep
    ((256, 256, 14, 14, 5), (1, 1), "lanes"),
    ((16, 32, 27, 27, 5), (1, 1), "lanes"),  # a depth of 400
    ((16, 128, 27, 27, 3), (1, 1), "direct"),  # a depth of 144
    ((16, 64, 56, 56, 3), (1, 1), "winograd"),  # ... Winograd from 16 channels
    ((8, 64, 56, 56, 3), (1, 1), "direct"),  # ... but not 8
    ((128, 32, 56, 56, 3), (1, 1), "winograd"),  # ... from 32 output channels
    ((128, 16, 56, 56, 3), (1, 1), "lanes"),  # ... not 16
    ((128, 256, 56, 56, 5), (1, 1), "packed"),  # a 1.9 MiB image, 256 channels: packed
    ((512, 512, 28, 28, 5), (1, 1), "packed"),
    ((64, 128, 28, 28, 5), (1, 1), "lanes"),  # ... but not a 256 KiB one
    ((3, 64, 224, 224, 7), (2, 2), "direct"),  # strided, 8 channels or fewer: phase planes
    ((3, 64, 224, 224, 3), (2, 2), "direct"),
    ((16, 32, 64, 64, 3), (2, 2), "lanes"),  # ... not 16 channels
    ((3, 96, 224, 224, 11), (4, 4), "lanes"),  # ... nor stride 4
    ((64, 256, 56, 56, 1), (1, 1), "packed"),  # 1x1: packed columns ...
    ((16, 64, 55, 55, 1), (1, 1), "packed"),
    ((24, 16, 55, 55, 1), (1, 1), "stream"),  # ... x in place for 16 channels ...
    ((256, 32, 27, 27, 1), (1, 1), "lanes"),  # ... channels in lanes for squeezes ...
    ((64, 16, 55, 55, 1), (1, 1), "lanes"),
    ((256, 64, 56, 56, 1), (1, 1), "lanes"),  # ... of up to 64 channels on any map
    ((192, 64, 28, 28, 1), (1, 1), "lanes"),
    ((512, 128, 28, 28, 1), (1, 1), "lanes"),  # ... 128 from four times as many inputs
    ((1024, 128, 14, 14, 1), (1, 1), "lanes"),
    ((256, 128, 28, 28, 1), (1, 1), "packed"),  # ... not from fewer
    ((1024, 128, 7, 7, 1), (1, 1), "packed"),  # ... nor on 49 positions
    ((1024, 256, 14, 14, 1), (1, 1), "packed"),  # ... nor 256 channels
    ((512, 2048, 7, 7, 1), (1, 1), "packed"),  # 49 positions: the 49th in lanes, packed
    ((512, 128, 7, 7, 1), (1, 1), "packed"),
    ((512, 512, 5, 5, 1), (1, 1), "lanes"),  # ... but 9 past whole tiles: lanes
    ((512, 512, 2, 2, 1), (1, 1), "lanes"),  # ... and no whole tile
    ((256, 256, 8, 8, 1), (1, 1), "packed"),  # ... not on 64: whole tiles of 16 positions
    ((2048, 1000, 1, 1, 1), (1, 1), "lanes"),  # ... and on one position, under any weight
    ((1024, 2048, 14, 14, 1), (2, 2), "packed"),
]


#: ... and where full-width 512-bit units (full512: Zen 5) changed them: Winograd from 100 tiles,
#: 1x1 kernels on few positions in lanes only under 2 MiB of weights, deep ones only where they
#: squeeze, the stream kernel up to 512 output channels on maps of more than 256 positions.
AUTO_CHOICES_FULL512 = [
    ((256, 256, 14, 14, 3), (1, 1), "lanes"),  # 49 tiles: lanes
    ((48, 192, 13, 13, 3), (1, 1), "lanes"),
    ((32, 128, 27, 27, 3), (1, 1), "winograd"),  # ... 196 tiles: Winograd
    ((64, 64, 56, 56, 3), (1, 1), "winograd"),
    ((512, 512, 7, 7, 1), (1, 1), "lanes"),  # 49 positions, 1 MiB of weights
    ((512, 2048, 7, 7, 1), (1, 1), "packed"),  # ... 4 MiB
    ((1024, 2048, 14, 14, 1), (2, 2), "packed"),  # ... strided, 8 MiB
    ((2048, 1000, 1, 1, 1), (1, 1), "lanes"),  # ... but one position, under any weight
    ((1024, 256, 14, 14, 1), (1, 1), "lanes"),  # deep, on 196 positions, a squeeze
    ((768, 384, 14, 14, 1), (1, 1), "lanes"),
    ((512, 1000, 13, 13, 1), (1, 1), "packed"),  # ... not an expansion
    ((256, 1024, 14, 14, 1), (1, 1), "packed"),
    ((512, 512, 13, 13, 1), (1, 1), "packed"),  # ... nor as many outputs as inputs
    ((512, 1024, 28, 28, 1), (2, 2), "packed"),  # ... strided
    ((64, 256, 56, 56, 1), (1, 1), "stream"),  # x in place up to 512 output channels
    ((512, 256, 28, 28, 1), (1, 1), "stream"),
    ((128, 512, 28, 28, 1), (1, 1), "stream"),
    ((512, 1024, 28, 28, 1), (1, 1), "packed"),  # ... not more
    ((256, 256, 14, 14, 1), (1, 1), "packed"),  # ... and on 256 positions or fewer up to 191
    ((192, 128, 14, 14, 1), (1, 1), "stream"),
    ((992, 128, 16, 17, 1), (1, 1), "packed"),  # ... nor deeper than 768
]


@pytest.mark.parametrize(
    "isa, tuning, shape, strides, want",
    [("avx512", "split512", *row) for row in AUTO_CHOICES_AVX512]
    + [("avx512", "full512", *row) for row in AUTO_CHOICES_FULL512]
    + [("avx2", tuning, *row) for row in AUTO_CHOICES_AVX2 for tuning in ("split512", "full512")],
)
def test_auto_kernel_choice(isa, tuning, shape, strides, want):
    """The kernel conv_plan picks by itself, per ISA and rule set (avx2 has one)."""
    path_or_skip(isa)
    c, m, h, w, k = shape
    out = [(h + 2 * (k // 2) - k) // strides[0] + 1, (w + 2 * (k // 2) - k) // strides[1] + 1]
    wt = np.ones((m, c, k, k), F32)
    plan = simd.conv_plan(wt, 1, [1, c, h, w], strides, [1, 1], [k // 2] * 2, out, isa,
                          tuning=tuning)  # fmt: skip
    assert plan.kernel == want
    assert plan.staged == (want in ("direct", "lanes", "winograd"))


def _cpuinfo() -> dict[str, str] | None:
    """The first processor's fields in /proc/cpuinfo (None where there is no such file)."""
    try:
        with open("/proc/cpuinfo") as f:
            first = f.read().split("\n\n")[0]
    except OSError:
        return None
    pairs = (line.split(":", 1) for line in first.splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def test_conv_tuning_follows_the_cpu():
    """full512 exactly on AMD family 26 (Zen 5) and later, by the kernel's own cpuid; "auto"
    takes that rule set, and an unknown name says which ones there are."""
    info = _cpuinfo()
    if info is None or "cpu family" not in info:
        pytest.skip("no /proc/cpuinfo with a cpu family to hold the kernel's cpuid against")
    if ("avx512f" in info.get("flags", "").split()) != ("avx512" in simd.available_isas()):
        pytest.skip("cpuid is not /proc/cpuinfo's CPU here (an emulated CPU: tox -e avx2-cpu)")
    amd = info.get("vendor_id") == "AuthenticAMD"
    want = "full512" if amd and int(info["cpu family"]) >= 26 else "split512"
    assert simd.conv_tuning() == want
    wt = np.ones((192, 48, 3, 3), F32)  # a layer the rule sets split on: 13 x 13, 49 tiles
    args = (wt, 1, [1, 48, 13, 13], [1, 1], [1, 1], [1, 1], [13, 13], "scalar")
    assert simd.conv_plan(*args, tuning="auto").kernel == simd.conv_plan(*args).kernel
    with pytest.raises(ValueError, match="unknown conv tuning 'zen9'; expected auto, split512"):
        simd.conv_plan(*args, tuning="zen9")
    if "avx512" in simd.available_isas():
        avx512 = (*args[:-1], "avx512")
        assert simd.conv_plan(*avx512).kernel == simd.conv_plan(*avx512, tuning=want).kernel
        assert [simd.conv_plan(*avx512, tuning=t).kernel for t in ("split512", "full512")] == [
            "winograd",
            "lanes",
        ]


def test_refusals():
    w = np.ones((8, 4, 3, 3), F32)
    ok = dict(w=w, group=1, x_shape=[1, 4, 6, 6], strides=[1, 1], dilations=[1, 1],
              pads=[1, 1], out=[6, 6], isa="scalar")  # fmt: skip
    bad = [
        (dict(group=3), ValueError, "does not fit"),
        (dict(x_shape=[1, 4, 6]), ValueError, "x_shape"),
        (dict(strides=[0, 1]), ValueError, "strides"),
        (dict(pads=[-1, 0]), ValueError, "pads"),
        (dict(out=[0, 6]), ValueError, "out"),
        (dict(isa="sse9"), ValueError, "unknown isa"),
        (dict(w=np.ones((8, 4, 3), F32)), ValueError, "dimension"),
        (dict(w=np.ones((8, 4, 3, 3))), TypeError, "float32"),
        (dict(kernel="fft"), ValueError, "unknown conv kernel"),
        (dict(strides=[1, 2], out=[6, 3], kernel="winograd"), ValueError, "3x3 kernel, unit"),
        (dict(dilations=[2, 1], out=[4, 6], kernel="winograd"), ValueError, "and dilations"),
        (dict(kernel="lanes"), ValueError, "no channels-in-lanes"),  # scalar: 1-float vectors
        (dict(strides=[5, 1], out=[2, 6], kernel="direct"), ValueError, "strides up to 4"),
        (dict(kernel="stream"), ValueError, "1x1 kernel, unit strides and no padding"),
    ]
    for change, kind, message in bad:
        with pytest.raises(kind, match=message):
            simd.conv_plan(**{**ok, **change})
    plan = simd.conv_plan(**ok)
    x, y = np.ones((1, 4, 6, 6), F32), np.empty((1, 8, 6, 6), F32)
    work = np.empty(plan.work_floats, F32)
    plan.stage(x, work)
    shifted = np.empty(y.size + 1, F32)
    runs = [
        (dict(x=np.ones((1, 4, 6, 7), F32)), ValueError, "x must have shape"),
        (dict(y=np.empty((1, 8, 6, 5), F32)), ValueError, "y must have shape"),
        (dict(y=np.empty((1, 8, 6, 12), F32)[..., ::2]), ValueError, "contiguously"),
        (dict(work=np.empty(plan.work_floats - 1, F32)), ValueError, "work must hold"),
        (dict(bias=np.ones(7, F32)), ValueError, "bias must have 8"),
        (dict(bias=np.ones(8)), TypeError, "float32"),
        (dict(activation="gelu"), ValueError, "activation"),
        (dict(activation="sigmoid"), ValueError, "'none' or 'relu'"),
        (dict(u1=plan.units + 1), ValueError, "unit range"),
        (dict(x=np.ones((1, 4, 6, 6), np.float64)), TypeError, "float32"),
        (dict(z=np.ones((1, 8, 6, 5), F32)), ValueError, "z must have shape"),
        (dict(z=np.ones((1, 6, 8, 6), F32).transpose(0, 2, 1, 3)), ValueError, "y's strides"),
        (
            dict(y=shifted[:-1].reshape(y.shape), z=shifted[1:].reshape(y.shape)),
            ValueError,
            "overlap",
        ),  # z overlapping y, not y itself
    ]
    base = dict(x=x, work=work, y=y, bias=None, activation="none", u0=0, u1=-1, z=None)
    for change, kind, message in runs:
        args = {**base, **change}
        with pytest.raises(kind, match=message):
            plan.run(args["x"], args["work"], args["y"], args["bias"], args["activation"],
                     args["u0"], args["u1"], 1, args["z"])  # fmt: skip
        if args["u1"] == -1:  # a bound call makes the same checks once, when made
            with pytest.raises(kind, match=message):
                simd.ConvCall(plan, args["x"], args["work"], args["y"], args["bias"],
                              args["activation"], 1, args["z"])  # fmt: skip
    shared = np.ones(1 * 8 * 6 * 6, F32)
    with pytest.raises(ValueError, match="overlap"):
        plan.run(shared[: 4 * 36].reshape(1, 4, 6, 6), work, shared.reshape(1, 8, 6, 6), None,
                 "none")  # fmt: skip


def test_the_plugins_threads_under_concurrent_callers():
    """Eight Python threads run convolutions, products and Gelu on the plugin's pool at once
    (one job at a time: a caller finding it busy runs its items itself); every result has the
    bits of a one-thread run."""
    isa = ISAS[-1]
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 32, 30, 30)).astype(F32)
    w = rng.standard_normal((48, 32, 3, 3)).astype(F32)
    plan = simd.conv_plan(w, 1, list(x.shape), [1, 1], [1, 1], [1, 1], [30, 30], isa)
    work = np.empty(plan.work_floats, F32)
    plan.stage(x, work)
    a = rng.standard_normal((300, 64)).astype(F32)
    packed = simd.pack_b(rng.standard_normal((64, 200)).astype(F32), isa)
    g = rng.standard_normal(200_000).astype(F32)

    def results(threads: int) -> list[np.ndarray]:
        y = np.empty((2, 48, 30, 30), F32)
        plan.run(x, work, y, None, "relu", 0, -1, threads)
        c = np.empty((300, 200), F32)
        simd.gemm(a, packed, c, threads=threads)
        h = np.empty_like(g)
        simd.unary("gelu", g, h, isa, threads=threads)
        return [y, c, h]

    want = results(1)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            for _ in range(5):
                for got, expected in zip(results(2), want):
                    np.testing.assert_array_equal(bits(got), bits(expected))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


@pytest.mark.parametrize("path", ALL_PATHS)
def test_a_conv_of_no_input_channels_is_its_bias(path):
    """X with no channels (W [m, 0, k, k]): every sum is empty, so Y is B in every position on
    every path, as ops-basic computes it (the native plan, which needs channels, is not asked)."""
    path_or_skip(path)
    b = np.arange(1, 9, dtype=F32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], pads=[1] * 4)
    inits = [init("w", np.ones((8, 0, 3, 3), F32)), init("b", b)]
    model = make_model([node], [tensor("x", shape=[1, 0, 5, 5])], [tensor("y")], inits)
    (y,) = graphrt.Session(model, kernel_path=path).run(None, {"x": np.ones((1, 0, 5, 5), F32)})
    np.testing.assert_array_equal(y, np.broadcast_to(b[None, :, None, None], (1, 8, 5, 5)))


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_a_winograd_call_takes_no_work_where_it_runs_in_chunks(isa):
    """A bound call transforms V chunk by chunk into its threads' own buffers: its step
    reserves no work (the unit API's stage and run still take V whole), with the bits of
    stage and run; with input channels too many for a chunk it takes V whole in work."""
    path_or_skip(isa)
    rng = np.random.default_rng(11)
    for c, chunked in ((16, True), (512, False)):
        x = rng.standard_normal((1, c, 28, 28)).astype(F32)
        wt = rng.standard_normal((16, c, 3, 3)).astype(F32)
        plan = simd.conv_plan(wt, 1, [1, c, 28, 28], [1, 1], [1, 1], [1, 1], [28, 28], isa,
                              "winograd")  # fmt: skip
        assert plan.work_floats > 0
        assert plan.call_work_floats == (0 if chunked else plan.work_floats)
        want = np.empty((1, 16, 28, 28), F32)
        work = np.empty(plan.work_floats, F32)
        plan.stage(x, work)
        plan.run(x, work, want, None, "none")
        got = np.full_like(want, 7.0)
        call_work = np.empty(plan.call_work_floats, F32)
        for threads in (1, 2, 3):
            simd.ConvCall(plan, x, call_work, got, None, "none", threads)()
            np.testing.assert_array_equal(bits(got), bits(want))
        if not chunked:
            with pytest.raises(ValueError, match="work must hold"):
                simd.ConvCall(plan, x, np.empty(0, F32), got, None, "none", 1)
