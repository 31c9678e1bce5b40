"""Native MaxPool, Gelu and Concat: values against independent references on every ISA,
sessions against the numpy path, fusion keeping bits, and refusals of bad arguments."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import strategies as st
from onnx import helper

import graphrt
from tests._models import init, make_model, tensor
from tests.simd._simd import (
    ALL_PATHS,
    ISAS,
    bits,
    counting_gemm_call,
    on_every_isa,
    path_or_skip,
    simd,
)

F32 = np.float32


def maxpool_reference(x, kernel, strides, dilations, pads, out):
    """Every window's taps gathered one by one; -inf where a tap lies outside x."""
    n, c, h, w = x.shape
    y = np.full((n, c, *out), -np.inf, np.float32)
    nan = np.zeros(y.shape, bool)
    for oy in range(out[0]):
        for ox in range(out[1]):
            for ty in range(kernel[0]):
                for tx in range(kernel[1]):
                    iy = oy * strides[0] - pads[0] + ty * dilations[0]
                    ix = ox * strides[1] - pads[1] + tx * dilations[1]
                    if 0 <= iy < h and 0 <= ix < w:
                        y[:, :, oy, ox] = np.fmax(y[:, :, oy, ox], x[:, :, iy, ix])
                        nan[:, :, oy, ox] |= np.isnan(x[:, :, iy, ix])
    y[nan] = np.nan
    return y


@st.composite
def windows(draw):
    kernel = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    strides = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilations = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pads = (draw(st.integers(0, kernel[0] - 1)), draw(st.integers(0, kernel[1] - 1)))
    size = [draw(st.integers(1, 20)), draw(st.integers(1, 37))]
    ceil = draw(st.booleans())
    out = []
    for a in range(2):
        span = size[a] + 2 * pads[a] - dilations[a] * (kernel[a] - 1) - 1
        if span < 0:
            size[a] -= span
            span = 0
        o = (-(-span // strides[a]) if ceil else span // strides[a]) + 1
        out.append(o)
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 5)), *size)
    return dict(shape=shape, kernel=kernel, strides=strides, dilations=dilations, pads=pads,
                out=tuple(out), seed=draw(st.integers(0, 2**31)))  # fmt: skip


@on_every_isa(windows())
def test_maxpool_values(isa, g):
    rng = np.random.default_rng(g["seed"])
    x = rng.standard_normal(g["shape"]).astype(F32)
    x.flat[rng.integers(0, x.size)] = np.nan
    y = np.empty((*g["shape"][:2], *g["out"]), F32)
    args = [g["kernel"], g["strides"], g["dilations"], g["pads"], isa]
    planes = g["shape"][0] * g["shape"][1]
    simd.maxpool2d(x, y, *args, 0, planes // 2)
    simd.maxpool2d(x, y, *args, planes // 2, planes)
    want = maxpool_reference(x, g["kernel"], g["strides"], g["dilations"], g["pads"], g["out"])
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize(
    "shape",
    [(1, 16, 32, 32), (2, 3, 16, 16), (1, 5, 7, 8), (1, 2, 9, 36), (3, 1, 2, 2), (1, 1, 4, 70)],
)
def test_maxpool_2x2_flat_path(isa, shape):
    """2x2 windows at stride 2 over even widths (the flat path across output rows: short rows,
    rows of exactly a vector, tails, odd heights), through a bound MaxPoolCall."""
    path_or_skip(isa)
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(F32)
    x.flat[rng.integers(0, x.size, 3)] = np.nan
    out = (shape[2] // 2, shape[3] // 2)
    y = np.full((*shape[:2], *out), 7.0, F32)
    call = simd.MaxPoolCall(x, y, (2, 2), (2, 2), (1, 1), (0, 0), isa, 0, -1, 1)
    call()
    np.testing.assert_array_equal(y, maxpool_reference(x, (2, 2), (2, 2), (1, 1), (0, 0), out))
    x[...] = -x  # the call reads its arrays anew each time
    call()
    np.testing.assert_array_equal(y, maxpool_reference(x, (2, 2), (2, 2), (1, 1), (0, 0), out))


def test_maxpool_refusals():
    x, y = np.ones((1, 2, 5, 5), F32), np.empty((1, 2, 3, 3), F32)
    ok = [(3, 3), (1, 1), (1, 1), (0, 0), "scalar"]
    simd.maxpool2d(x, y, *ok)
    for i, bad, message in [
        (0, (0, 3), "kernel"),
        (1, (1,), "strides"),
        (3, (-1, 0), "pads"),
        (4, "sse9", "unknown isa"),
    ]:
        args = list(ok)
        args[i] = bad
        with pytest.raises(ValueError, match=message):
            simd.maxpool2d(x, y, *args)
    with pytest.raises(ValueError, match="images and channels"):
        simd.maxpool2d(x, np.empty((1, 3, 3, 3), F32), *ok)
    with pytest.raises(ValueError, match="C-contiguous"):
        simd.maxpool2d(x, np.empty((1, 2, 3, 6), F32)[..., ::2], *ok)
    with pytest.raises(ValueError, match="unit column stride"):
        simd.maxpool2d(np.ones((1, 2, 5, 10), F32)[..., ::2], y, *ok)
    with pytest.raises(ValueError, match="plane range"):
        simd.maxpool2d(x, y, *ok, 0, 3)
    with pytest.raises(TypeError, match="float32"):
        simd.maxpool2d(x.astype(np.float64), y, *ok)
    shared = np.ones(2 * 25 + 2 * 9, F32)
    with pytest.raises(ValueError, match="overlap"):
        simd.maxpool2d(shared[:50].reshape(1, 2, 5, 5), shared[40:58].reshape(1, 2, 3, 3), *ok)


def _pool_model(**attrs):
    node = helper.make_node("MaxPool", ["x"], ["y"], **attrs)
    return make_model([node], [tensor("x", shape=[2, 8, 23, 19])], [tensor("y")])


@pytest.mark.parametrize(
    "attrs",
    [
        dict(kernel_shape=[3, 3], strides=[2, 2]),
        dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
        dict(kernel_shape=[2, 3], strides=[1, 2], dilations=[2, 1], auto_pad="SAME_UPPER"),
    ],
)
@pytest.mark.parametrize("path", ["avx2", "avx512"])
def test_maxpool_sessions_match_numpy(path, attrs):
    path_or_skip(path)
    model = _pool_model(**attrs)
    x = np.random.default_rng(2).standard_normal((2, 8, 23, 19)).astype(F32)
    want = graphrt.Session(model, kernel_path="numpy").run(None, {"x": x})[0]
    for threads in (1, 2):
        got = graphrt.Session(model, kernel_path=path, intra_op_threads=threads).run(
            None, {"x": x}
        )[0]
        np.testing.assert_array_equal(got, want)


def gelu_reference(x: np.ndarray) -> np.ndarray:
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x.astype(np.float64) / math.sqrt(2.0)))


@pytest.mark.parametrize("isa", ALL_PATHS)
def test_gelu_values(isa):
    path_or_skip(isa)
    x = np.concatenate(
        [np.linspace(-12, 12, 2001), [0.0, -0.0, 1e-30, -1e-30, np.inf, -np.inf, np.nan]]
    ).astype(F32)
    y = np.empty_like(x)
    simd.unary("gelu", x, y, isa)
    want = gelu_reference(x[:-3])
    # (erf + 1) cancels for large negative x: an absolute error of |x| * 2^-24 or so
    np.testing.assert_allclose(y[:-3], want, rtol=2e-6, atol=1e-6)
    assert y[-3] == np.inf and np.isnan(y[-2]) and np.isnan(y[-1])  # -inf: 0 * -inf
    assert bits(y[-1:])[0] == 0x7FC00000


def _fused_model(fused_with: str, act: str, rows: int = 6):
    rng = np.random.default_rng(5)
    if fused_with == "matmul":
        inits = [init("w", (rng.standard_normal((24, 40)) * 0.3).astype(F32)),
                 init("b", rng.standard_normal(40).astype(F32))]  # fmt: skip
        nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
                 helper.make_node("Add", ["m", "b"], ["a"])]  # fmt: skip
        x_shape = [rows, 24]
    else:
        inits = [init("w", (rng.standard_normal((12, 3, 3, 3)) * 0.3).astype(F32))]
        nodes = [helper.make_node("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1])]
        x_shape = [2, 3, 20, 20]
    nodes.append(helper.make_node(act, ["a"], ["y"]))
    model = make_model(nodes, [tensor("x", shape=x_shape)], [tensor("y")], inits, opset=20)
    x = np.random.default_rng(6).standard_normal(x_shape).astype(F32)
    return model, {"x": x}


@pytest.mark.parametrize(
    "fused_with, act, rows",
    [
        ("matmul", "Gelu", 6),
        ("matmul", "Gelu", 300),
        ("matmul", "Relu", 300),
        ("matmul", "Identity", 300),
        ("conv", "Gelu", 0),
    ],
)
@pytest.mark.parametrize("path", ["avx2", "avx512"])
def test_fused_products_keep_bits_on_native_paths(path, fused_with, act, rows, monkeypatch):
    """FusedMatMul (the native GEMM from 128 rows: bias and Relu in its epilogue) and
    FusedConv ending in the native Gelu give the bits of the unfused nodes on the same path."""
    path_or_skip(path)
    import graphrt_ops_simd.kernels as kernels

    calls = []
    real = kernels._native.GemmCall
    monkeypatch.setattr(
        kernels._native, "GemmCall", counting_gemm_call(real, lambda args: calls.append(args[6]))
    )
    model, feed = _fused_model(fused_with, act, rows)
    plain = graphrt.Session(model, kernel_path=path, optimization_level="none")
    fused = graphrt.Session(model, kernel_path=path, optimization_level="basic")
    want = plain.run(None, feed)[0]
    calls.clear()
    got = fused.run(None, feed)[0]
    np.testing.assert_array_equal(bits(got), bits(want))
    if fused_with == "matmul":
        assert calls and set(calls) == {"relu" if act == "Relu" else "none"}
    numpy_path = graphrt.Session(model, kernel_path="numpy").run(None, feed)[0]
    np.testing.assert_allclose(got, numpy_path, rtol=1e-5, atol=1e-5)


def test_gelu_tanh_and_exact_stay_on_numpy():
    if ISAS[-1] == "scalar":
        pytest.skip("no SIMD path on this machine")
    node = helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")
    model = make_model([node], [tensor("x", shape=[4, 5])], [tensor("y")], opset=20)
    x = np.random.default_rng(1).standard_normal((4, 5)).astype(F32)
    want = graphrt.Session(model, kernel_path="numpy").run(None, {"x": x})[0]
    got = graphrt.Session(model, kernel_path=ISAS[-1]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    "shapes, axis",
    [
        ([(1, 64, 55, 55), (1, 64, 55, 55)], 1),
        ([(2, 3, 4), (2, 5, 4), (2, 1, 4)], 1),
        ([(3, 7), (3, 2)], 1),
        ([(4, 6), (1, 6), (2, 6)], 0),
        ([(2, 3, 1), (2, 3, 9)], 2),
    ],
)
def test_native_concat_copies(shapes, axis, threads):
    rng = np.random.default_rng(len(shapes))
    xs = [rng.standard_normal(s).astype(F32) for s in shapes]
    want = np.concatenate(xs, axis=axis)
    out = np.full_like(want, np.nan)
    simd.concat(xs, out, axis, threads)
    np.testing.assert_array_equal(bits(out), bits(want))


def test_native_concat_refusals():
    a, b = np.ones((2, 3), F32), np.ones((2, 4), F32)
    out, shared = np.empty((2, 7), F32), np.zeros(20, F32)
    for args, kind, message in [
        (([a, b], np.empty((2, 8), F32), 1), ValueError, "add up to"),
        (([a, np.ones((3, 4), F32)], out, 1), ValueError, "does not fit"),
        (([a, b], out, 2), ValueError, "axis 2"),
        (([a, np.ones((2, 8), F32)[:, ::2]], out, 1), ValueError, "C-contiguous"),
        (([a, b.astype(np.float64)], out, 1), TypeError, "float32"),
        (([a, shared[10:18].reshape(2, 4)], shared[:14].reshape(2, 7), 1), ValueError, "overlap"),
    ]:
        with pytest.raises(kind, match=message):
            simd.concat(*args)


def test_concat_sessions_keep_bits_in_both_modes():
    """Copies are exact: fast and exact mode give numpy's bytes; empty inputs add nothing."""
    path = ISAS[-1]
    nodes = [helper.make_node("Concat", ["a", "e", "b"], ["y"], axis=1)]
    model = make_model(
        nodes,
        [
            tensor("a", shape=[1, 64, 40, 40]),
            tensor("e", shape=[1, 0, 40, 40]),
            tensor("b", shape=[1, 32, 40, 40]),
        ],
        [tensor("y")],
    )
    rng = np.random.default_rng(4)
    feed = {
        "a": rng.standard_normal((1, 64, 40, 40)).astype(F32),
        "e": np.empty((1, 0, 40, 40), F32),
        "b": rng.standard_normal((1, 32, 40, 40)).astype(F32),
    }
    want = np.concatenate([feed["a"], feed["b"]], axis=1)
    for mode in ("fast", "exact"):
        for threads in (1, 2):
            sess = graphrt.Session(model, kernel_path=path, mode=mode, intra_op_threads=threads)
            np.testing.assert_array_equal(bits(sess.run(None, feed)[0]), bits(want))
