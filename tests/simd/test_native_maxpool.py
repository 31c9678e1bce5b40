"""Native MaxPool on AveragePool's two-pass kernel: CNN window shapes against onnxruntime, NaN
windows against a tap-by-tap reference, and the same bits for any thread count and ISA."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import graphrt
from tests._models import make_model, ort_session, tensor
from tests.simd._simd import ALL_PATHS, ISAS, bits, path_or_skip, simd
from tests.simd.test_native_pool_gelu import maxpool_reference

F32 = np.float32
NATIVE = [p for p in ("avx2", "avx512") if p in ISAS]

# (planes, height, width, attributes): inception_v2's and squeezenet's pools, ResNet's stem,
# VGG's 2x2, ceil_mode and asymmetric pads
SHAPES = {
    "7x7_s1_p1": (1024, 7, 7, dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    "28x28_s1_p1": (192, 28, 28, dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    "112_s2_p0": (64, 112, 112, dict(kernel_shape=[3, 3], strides=[2, 2])),
    "112_s2_p1": (64, 112, 112, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    "55_s2": (96, 55, 55, dict(kernel_shape=[3, 3], strides=[2, 2])),
    "14_2x2_s2": (512, 14, 14, dict(kernel_shape=[2, 2], strides=[2, 2])),
    "56_s2_ceil": (64, 56, 56, dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    "28_s2_p01_ceil": (
        48,
        28,
        28,
        dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1], ceil_mode=1),
    ),
    "13x9_dilated": (6, 13, 9, dict(kernel_shape=[2, 3], strides=[1, 3], dilations=[2, 1])),
    "5x40_s3_p2": (10, 5, 40, dict(kernel_shape=[3, 5], strides=[3, 3], pads=[2, 2, 1, 0])),
}


def _model(planes: int, h: int, w: int, attrs: dict):
    node = helper.make_node("MaxPool", ["x"], ["y"], **attrs)
    return make_model([node], [tensor("x", shape=[1, planes, h, w])], [tensor("y")])


def _run(model, path: str, threads: int, x: np.ndarray) -> np.ndarray:
    sess = graphrt.Session(model, kernel_path=path, intra_op_threads=threads)
    return sess.run(None, {"x": x})[0]


@pytest.mark.skipif(not NATIVE, reason="no avx2/avx512 path: MaxPool stays numpy")
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_shapes_match_onnxruntime_on_every_path_and_thread_count(name):
    planes, h, w, attrs = SHAPES[name]
    model = _model(planes, h, w, attrs)
    x = np.random.default_rng(planes + h).standard_normal((1, planes, h, w)).astype(F32)
    want = ort_session(model).run(None, {"x": x})[0]
    first = None
    for path in NATIVE:
        for threads in (1, 2):
            got = _run(model, path, threads, x)
            np.testing.assert_array_equal(got, want)
            first = bits(got) if first is None else first
            np.testing.assert_array_equal(bits(got), first)  # ties of +-0 aside: none here


# (shape, kernel, strides, dilations, pads): each kernel branch (narrow rows on avx2's lanes,
# stride 1 and 2, the flat 2x2 run, other strides one by one)
GEOMETRIES = [
    ((2, 3, 7, 7), (3, 3), (1, 1), (1, 1), (1, 1)),
    ((1, 4, 28, 28), (3, 3), (1, 1), (1, 1), (1, 1)),
    ((1, 3, 23, 23), (3, 3), (2, 2), (1, 1), (0, 0)),
    ((1, 2, 40, 37), (3, 3), (2, 2), (1, 1), (1, 1)),  # avx512's one-pass rows (w >= 16)
    ((1, 3, 27, 27), (3, 3), (2, 2), (1, 1), (0, 0)),  # ... light_squeezenet's last, 13 outputs
    ((1, 2, 17, 17), (3, 3), (2, 2), (1, 1), (1, 1)),  # ... a vector and one column, pads
    ((1, 2, 9, 70), (3, 3), (2, 2), (1, 1), (0, 0)),  # avx2's whole-vector rows (9+ outputs)
    ((1, 2, 9, 19), (3, 3), (2, 2), (1, 1), (0, 0)),  # ... 9: one vector, then the last 8 again
    ((1, 2, 9, 21), (3, 3), (2, 2), (1, 1), (1, 1)),  # ... a pad column each side: 10 of 11
    ((1, 2, 7, 20), (3, 3), (2, 2), (1, 1), (1, 1)),  # ... (the right pad unused)
    ((2, 3, 13, 13), (3, 3), (2, 2), (1, 1), (0, 0)),  # rows of one vector, two at a time: 6
    ((1, 3, 14, 14), (3, 3), (2, 2), (1, 1), (1, 1)),  # ... 7 rows (the last alone), pads
    ((1, 2, 33, 17), (3, 3), (2, 2), (2, 1), (1, 0)),  # ... 8 outputs (avx2's vector), dilated
    ((1, 2, 12, 33), (3, 3), (2, 2), (1, 1), (0, 0)),  # ... 16 outputs (avx512's vector)
    ((3, 2, 4, 5), (3, 3), (2, 2), (1, 1), (0, 0)),  # ... a row of two outputs
    ((1, 2, 11, 67), (3, 3), (2, 2), (2, 1), (1, 1)),  # ... with pads and dilated rows
    ((1, 2, 5, 64), (3, 3), (2, 2), (1, 1), (0, 0)),
    ((1, 3, 14, 14), (2, 2), (2, 2), (1, 1), (0, 0)),
    ((1, 3, 10, 36), (2, 2), (2, 2), (1, 1), (0, 0)),  # 2x2 rows in one pass, a last part vector
    ((2, 2, 7, 32), (2, 2), (2, 2), (1, 1), (0, 0)),  # (whole vectors on avx512; odd height)
    ((2, 2, 19, 18), (2, 2), (2, 2), (2, 1), (0, 0)),  # not the flat 2x2 run: dilated rows
    ((1, 2, 9, 18), (2, 2), (2, 2), (1, 2), (0, 0)),  # nor dilated columns
    ((1, 2, 9, 40), (3, 3), (3, 3), (1, 2), (1, 2)),
    ((1, 2, 3, 5), (2, 4), (1, 2), (1, 1), (1, 3)),
    ((2, 3, 7, 7), (7, 7), (1, 1), (1, 1), (0, 0)),  # one window over the whole plane
    ((1, 3, 5, 8), (5, 8), (1, 1), (1, 1), (0, 0)),  # ... avx2's vector wide
    ((1, 3, 3, 16), (3, 16), (2, 2), (1, 1), (0, 0)),  # ... avx512's
]


def _out(shape, kernel, strides, dilations, pads) -> tuple[int, int]:
    return tuple(
        (shape[2 + a] + 2 * pads[a] - dilations[a] * (kernel[a] - 1) - 1) // strides[a] + 1
        for a in (0, 1)
    )


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_nan_windows(isa, geometry):
    """A NaN as the first, a middle or the last tap of windows, next to infinities of both
    signs (whose sum also says 'maybe NaN'), in planes beside NaN-free ones: NaN exactly where
    a window holds one."""
    path_or_skip(isa)
    shape, kernel, strides, dilations, pads = geometry
    out = _out(*geometry)
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(F32)
    flat = x.reshape(-1, shape[2] * shape[3])
    flat[0, 0] = flat[0, -1] = np.nan  # first and last element of plane 0
    flat[0, rng.integers(0, flat.shape[1])] = np.nan
    if flat.shape[0] > 2:
        flat[1, rng.integers(0, flat.shape[1], 2)] = [np.inf, -np.inf]  # no NaN, both infinities
        flat[2, :] = -np.inf
    y = np.full((*shape[:2], *out), 7.0, F32)
    simd.maxpool2d(x, y, kernel, strides, dilations, pads, isa)
    np.testing.assert_array_equal(y, maxpool_reference(x, kernel, strides, dilations, pads, out))


# the one-pass rows of 3 x 3/2 windows (avx2 from 9 outputs a row, at most one pad column on the
# left; avx512 from rows of 16 floats): inside x under three rows avx2 takes a plain maximum, its
# NaN checked apart; with pads, top and bottom rows of two taps, dilated rows, the last vector
# of a row made again (19, 21, 27 and 55 columns) and windows over the right pad (67, 21)
ONE_PASS = [
    ((1, 1, 7, 70), (3, 3), (2, 2), (1, 1), (0, 0)),
    ((1, 1, 8, 67), (3, 3), (2, 2), (1, 1), (1, 1)),
    ((1, 1, 9, 81), (3, 3), (2, 2), (2, 1), (1, 1)),
    ((1, 1, 5, 40), (3, 3), (2, 2), (1, 1), (1, 1)),
    ((1, 1, 7, 19), (3, 3), (2, 2), (1, 1), (0, 0)),
    ((1, 1, 7, 21), (3, 3), (2, 2), (1, 1), (1, 1)),
    ((1, 1, 9, 27), (3, 3), (2, 2), (1, 1), (0, 0)),
    ((1, 1, 5, 55), (3, 3), (2, 2), (1, 1), (0, 0)),
]


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize("geometry", ONE_PASS)
def test_one_nan_anywhere_reaches_exactly_its_windows(isa, geometry):
    """Plane k holds one NaN, at position k: as any of a window's three rows and three columns,
    in a row's first, middle and last vectors; the other values of both signs, infinities among
    them (the plain maximum's tie and infinity cases): NaN exactly in the windows over it."""
    path_or_skip(isa)
    (_, _, h, w), kernel, strides, dilations, pads = geometry
    out = _out(*geometry)
    rng = np.random.default_rng(w)
    x = rng.choice(np.array([-0.0, 0.0, -1.0, 3.0, np.inf, -np.inf], F32), size=(1, h * w, h, w))
    x.reshape(h * w, h * w)[np.arange(h * w), np.arange(h * w)] = np.nan
    y = np.full((1, h * w, *out), 7.0, F32)
    simd.maxpool2d(x, y, kernel, strides, dilations, pads, isa)
    want = maxpool_reference(x, kernel, strides, dilations, pads, out)
    np.testing.assert_array_equal(y, want)
    assert np.isnan(y).sum() == np.isnan(want).sum() > 0


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_same_bits_on_every_isa_and_split(geometry):
    """Signed zeros tie everywhere (which one a tie keeps is the kernel's: the same on every
    path, for any split of the planes over threads), with and without NaN planes."""
    shape, kernel, strides, dilations, pads = geometry
    out = _out(*geometry)
    rng = np.random.default_rng(7)
    x = rng.choice(np.array([-0.0, 0.0, -1.0], F32), size=shape)
    x.reshape(-1)[-1] = np.nan  # the last plane takes the NaN-keeping maximum
    args = [kernel, strides, dilations, pads]
    want = maxpool_reference(x, kernel, strides, dilations, pads, out)
    first = None
    for isa in [p for p in ALL_PATHS if p in ISAS]:
        for threads in (1, 2, 3):
            y = np.empty((*shape[:2], *out), F32)
            simd.MaxPoolCall(x, y, *args, isa, 0, -1, threads)()
            np.testing.assert_array_equal(y, want)
            first = bits(y) if first is None else first
            np.testing.assert_array_equal(bits(y), first, err_msg=f"{isa}, {threads} threads")


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize("hw", [5, 13, 16, 17, 27, 33])
def test_rows_of_one_vector_write_inside_their_planes_only(isa, hw):
    """Rows of at most one vector of outputs store whole vectors only while they stay inside the
    plane's outputs (the rest masked): the floats past the output, and other threads' planes,
    are never written."""
    path_or_skip(isa)
    rng = np.random.default_rng(hw)
    x = rng.standard_normal((1, 5, hw, hw)).astype(F32)
    out = (hw - 3) // 2 + 1
    buf = np.full(5 * out * out + 64, 7.0, F32)
    y = buf[: 5 * out * out].reshape(1, 5, out, out)
    for threads in (1, 3):
        simd.MaxPoolCall(x, y, [3, 3], [2, 2], [1, 1], [0, 0], isa, 0, -1, threads)()
        np.testing.assert_array_equal(buf[y.size :], 7.0)
        want = maxpool_reference(x, [3, 3], [2, 2], [1, 1], [0, 0], (out, out))
        np.testing.assert_array_equal(y, want)


# 3 x 3 windows at stride 1 with pads of 1 on planes small enough for the flat passes (7 x 7 to
# 28 x 28), and planes too short for avx512's flat run that avx2's still takes (5 x 4, 3 x 8)
FLAT_SHAPES = [(1, 3, 7, 7), (2, 2, 14, 14), (1, 2, 28, 28), (1, 2, 5, 4), (1, 1, 3, 8)]


@pytest.mark.parametrize("shape", FLAT_SHAPES)
def test_flat_planes_keep_the_row_kernels_bits(shape):
    """Contiguous planes take the flat passes, a column slice of a wider array the row-at-a-time
    ones: the same bits from both (signed-zero ties, NaN and infinities in corners and edges),
    on every path and split."""
    rng = np.random.default_rng(sum(shape))
    h, w = shape[2:]
    wide = rng.choice(np.array([-0.0, 0.0, -1.0, 2.0], F32), size=(*shape[:2], h, w + 3))
    wide[0, 0, 0, 1] = wide[0, -1, -1, w] = np.nan  # corners of the first and last plane
    wide[0, 0, h // 2, 1 + w // 2] = np.inf
    wide[-1, 0, h - 1, 1] = -np.inf
    rows = wide[..., 1 : 1 + w]  # rows w + 3 floats apart: the row kernels
    flat = np.ascontiguousarray(rows)
    args = [(3, 3), (1, 1), (1, 1), (1, 1)]
    want = maxpool_reference(flat, *args, (h, w))
    first = None
    for isa in [p for p in ALL_PATHS if p in ISAS]:
        for threads in (1, 2):
            for x in (flat, rows):
                y = np.empty(shape, F32)
                simd.MaxPoolCall(x, y, *args, isa, 0, -1, threads)()
                np.testing.assert_array_equal(y, want)
                first = bits(y) if first is None else first
                np.testing.assert_array_equal(bits(y), first, err_msg=f"{isa}, {threads} threads")


@pytest.mark.parametrize("path", ALL_PATHS)
@pytest.mark.parametrize("name", ["112_s2_p1", "13x9_dilated", "5x40_s3_p2"])
def test_exact_mode_runs_native_with_ops_basics_bits(path, name):
    """Exact mode takes the native kernel on every path (scalar too): ties of -0 and +0 come out
    +0 and NaN canonical, bit for bit ops-basic's exact MaxPool, on 1 and 2 threads."""
    path_or_skip(path)
    planes, h, w, attrs = SHAPES[name]
    model = _model(planes, h, w, attrs)
    rng = np.random.default_rng(planes + h)
    x = np.where(rng.random((1, planes, h, w)) < 0.5, -0.0, 0.0).astype(F32)  # zeros of both signs
    x[0, planes // 2] = rng.standard_normal((h, w))  # and one plane of numbers
    x[0, 1, 2, 3] = np.nan
    x.view(np.uint32)[0, 2, 1, 1] = 0xFFC00123  # a negative NaN with a payload
    want = graphrt.Session(model, mode="exact", kernel_path="numpy").run(None, {"x": x})[0]
    assert (bits(want) == 0x80000000).sum() == 0  # the reference itself: no -0 maximum
    for threads in (1, 2):
        sess = graphrt.Session(model, mode="exact", kernel_path=path, intra_op_threads=threads)
        (step,) = sess.plan_for([x]).steps
        assert step.prepared.exact  # the native plan (ops-basic's has no such field)
        got = sess.run(None, {"x": x})[0]
        np.testing.assert_array_equal(bits(got), bits(want))
