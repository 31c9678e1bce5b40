"""The native convolution with a blocked output (BlockedConvCall): the planar lanes kernel's
bits (the same chain of multiply-adds per output) from planar or blocked X, for any thread
count, and its refusals."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import strategies as st

from tests.simd._simd import bits, on_every_isa, path_or_skip, simd

_native = simd._native
blocked = pytest.importorskip("graphrt_ops_simd.blocked")  # (after _simd: its skip comes first)
block_into, blocked_shape, unblock_into = (
    blocked.block_into,
    blocked.blocked_shape,
    blocked.unblock_into,
)
F32 = np.float32
LANES = ("avx2", "avx512")
RNG = np.random.default_rng(5)


def _geometry(c, m, h, w, k, stride, pad, dil):
    span = (k - 1) * dil + 1
    oh = (h + 2 * pad - span) // stride + 1
    ow = (w + 2 * pad - span) // stride + 1
    return oh, ow


def _plan(isa, wt, x_shape, stride, pad, dil, out, **layout):
    return _native.conv_plan(
        wt, 1, list(x_shape), [stride] * 2, [dil] * 2, [pad] * 2, list(out), isa, "lanes",
        **layout,
    )  # fmt: skip


def _blocked_conv(isa, x, wt, bias, stride, pad, dil, x_blocked, threads, relu=True):
    """y unblocked, from a BlockedConvCall on planar or blocked x."""
    block = _native.blocked_block(isa)
    n, c, h, w = x.shape
    out = _geometry(c, wt.shape[0], h, w, wt.shape[2], stride, pad, dil)
    plan = _plan(
        isa, wt, x.shape, stride, pad, dil, out, x_block=block if x_blocked else 0, y_blocked=True
    )
    xin = x
    if x_blocked:
        xin = np.empty(blocked_shape(x.shape, block), F32)
        block_into(x, xin)
        xin[:, -1, ..., c % block or block :] = np.nan  # padding lanes: never read as channels
    y = np.full(blocked_shape((n, wt.shape[0], *out), block), np.nan, F32)
    work = np.empty(max(plan.call_work_floats, 1), F32)
    call = _native.BlockedConvCall(plan, xin, work, y, bias, "relu" if relu else "none", threads)
    call()
    planes = np.empty((n, wt.shape[0], *out), F32)
    unblock_into(y, planes)
    return planes


def _planar_lanes(isa, x, wt, bias, stride, pad, dil, relu=True):
    n, c, h, w = x.shape
    out = _geometry(c, wt.shape[0], h, w, wt.shape[2], stride, pad, dil)
    plan = _plan(isa, wt, x.shape, stride, pad, dil, out)
    assert plan.kernel == "lanes"
    y = np.empty((n, wt.shape[0], *out), F32)
    work = np.empty(max(plan.call_work_floats, 1), F32)
    _native.ConvCall(plan, x, work, y, bias, "relu" if relu else "none", 1)()
    return y


GEOMETRY = st.fixed_dictionaries(
    {
        "n": st.integers(1, 2),
        "c": st.sampled_from([1, 3, 8, 16, 20, 33, 64]),
        "m": st.sampled_from([1, 8, 16, 24, 40, 64, 72]),
        "hw": st.integers(3, 17),
        "k": st.sampled_from([1, 3]),
        "stride": st.integers(1, 2),
        "pad": st.integers(0, 1),
        "dil": st.integers(1, 2),
        "x_blocked": st.booleans(),
        "bias": st.booleans(),
        "relu": st.booleans(),
    }
)


@on_every_isa(GEOMETRY, examples=40)
def test_blocked_output_has_the_planar_lanes_bits(isa, g):
    if isa not in LANES:
        pytest.skip(f"{isa} has no lanes kernel: no blocked convolution")
    span = (g["k"] - 1) * g["dil"] + 1
    if g["hw"] + 2 * g["pad"] < span:
        return
    x = RNG.standard_normal((g["n"], g["c"], g["hw"], g["hw"] + 1)).astype(F32)
    x.reshape(-1)[:2] = [-0.0, np.inf]
    wt = RNG.standard_normal((g["m"], g["c"], g["k"], g["k"])).astype(F32)
    bias = RNG.standard_normal(g["m"]).astype(F32) if g["bias"] else None
    geo = (g["stride"], g["pad"], g["dil"])
    want = _planar_lanes(isa, x, wt, bias, *geo, relu=g["relu"])
    for threads in (1, 3):
        got = _blocked_conv(isa, x, wt, bias, *geo, g["x_blocked"], threads, relu=g["relu"])
        np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize("isa", LANES)
@pytest.mark.parametrize(
    "c, m, hw, k, pad",
    [(16, 64, 55, 3, 1), (128, 16, 55, 1, 0), (64, 256, 13, 3, 1), (512, 1000, 13, 1, 0)],
)
def test_squeezenet_layers_at_every_thread_count(isa, c, m, hw, k, pad):
    path_or_skip(isa)
    x = RNG.standard_normal((1, c, hw, hw)).astype(F32)
    wt = (RNG.standard_normal((m, c, k, k)) * 0.1).astype(F32)
    bias = RNG.standard_normal(m).astype(F32)
    want = _planar_lanes(isa, x, wt, bias, 1, pad, 1)
    for threads in (1, 2, 4):
        got = _blocked_conv(isa, x, wt, bias, 1, pad, 1, True, threads)
        np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize("isa", LANES)
def test_refusals(isa):
    path_or_skip(isa)
    block = _native.blocked_block(isa)
    wt = np.ones((16, 8, 3, 3), F32)
    shape, out = [1, 8, 6, 6], [4, 4]
    with pytest.raises(ValueError, match=r"unsupported: a blocked convolution .* not exact mode"):
        _native.conv_plan(wt, 1, shape, [1, 1], [1, 1], [0, 0], out, isa, "lanes", True,
                          y_blocked=True)  # fmt: skip
    with pytest.raises(ValueError, match=f"x_block must be this path's {block} channels"):
        _native.conv_plan(wt, 1, shape, [1, 1], [1, 1], [0, 0], out, isa, x_block=block + 1,
                          y_blocked=True)  # fmt: skip
    with pytest.raises(ValueError, match="with y_blocked"):
        _native.conv_plan(wt, 1, shape, [1, 1], [1, 1], [0, 0], out, isa, x_block=block)
    if "scalar" in simd.available_isas():
        with pytest.raises(ValueError, match=r"unsupported: .*this path"):
            _native.conv_plan(wt, 1, shape, [1, 1], [1, 1], [0, 0], out, "scalar",
                              y_blocked=True)  # fmt: skip
    plan = _native.conv_plan(wt, 1, shape, [1, 1], [1, 1], [0, 0], out, isa, y_blocked=True)
    assert plan.kernel == "lanes"
    x = np.ones(shape, F32)
    work = np.empty(max(plan.call_work_floats, 1), F32)
    with pytest.raises(ValueError, match="runs as a BlockedConvCall"):
        _native.ConvCall(plan, x, work, np.empty([1, 16, 4, 4], F32), None, "none", 1)
    with pytest.raises(ValueError, match=r"y must have 5 dimension\(s\), got 4"):
        _native.BlockedConvCall(plan, x, work, np.empty([1, 16, 4, 4], F32), None, "none", 1)
    wrong = np.empty([1, 1, 4, 5, block], F32)
    blocks = -(-16 // block)
    want = rf"a blocked y must have shape \(1, {blocks}, 4, 4, {block}\), got \(1, 1, 4, 5"
    with pytest.raises(ValueError, match=want):
        _native.BlockedConvCall(plan, x, work, wrong, None, "none", 1)
    assert plan.call_work_floats == 0  # no pads: x read as it lies, so it must be contiguous
    strided = np.ones([1, 8, 6, 9], F32)[..., :6]  # rows 9 floats apart
    y = np.empty(blocked_shape([1, 16, 4, 4], block), F32)
    with pytest.raises(ValueError, match="x must be C-contiguous: the call reads it in place"):
        _native.BlockedConvCall(plan, strided, work[:0], y, None, "none", 1)
    planar = _native.conv_plan(wt, 1, shape, [1, 1], [1, 1], [0, 0], out, isa)
    y = np.empty(blocked_shape([1, 16, 4, 4], block), F32)
    with pytest.raises(ValueError, match="has no blocked output"):
        _native.BlockedConvCall(planar, x, np.empty(planar.call_work_floats, F32), y, None, "none")
    blocked_x = _native.conv_plan(
        wt, 1, shape, [1, 1], [1, 1], [0, 0], out, isa, x_block=block, y_blocked=True
    )
    with pytest.raises(ValueError, match=r"x must have 5 dimension\(s\), got 4"):
        _native.BlockedConvCall(blocked_x, x, work, y, None, "none", 1)
    want = rf"a blocked x must have shape \(1, 1, 6, 6, {block}\), got \(1, 1, 6, 5"
    with pytest.raises(ValueError, match=want):
        _native.BlockedConvCall(blocked_x, np.ones([1, 1, 6, 5, block], F32), work, y, None, "none")
