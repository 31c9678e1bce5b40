"""Native inference BatchNormalization (ChannelAffineCall, graphrt_ops_simd.batchnorm): values
against float64 references on every ISA, sessions against onnxruntime, the same bits for any
thread count, the fallbacks (float64, exact mode, run-time parameters) and bad arguments."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import graphrt
from tests._models import init, make_model, ort_session, tensor
from tests.simd._simd import ALL_PATHS, ISAS, bits, path_or_skip, simd

F32 = np.float32
_native = pytest.importorskip("graphrt_ops_simd._native")
#: Shapes (N, C, H*W) whose C and H*W are not multiples of any vector width (and some that are).
SHAPES = [(1, 1, 1), (2, 3, 5), (2, 13, 37), (1, 7, 49), (3, 5, 16), (1, 17, 100), (2, 4, 0)]


def _params(c: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(c).astype(F32), rng.standard_normal(c).astype(F32)


def _reference(x: np.ndarray, s: np.ndarray, t: np.ndarray, relu: bool) -> np.ndarray:
    """x * s + t per channel in float64 (then max with 0), NaN kept."""
    y = x.astype(np.float64) * s[:, None] + t[:, None]
    if relu:
        y = np.where(np.isnan(y), y, np.maximum(y, 0))
    return y.astype(F32)


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("relu", [False, True])
def test_kernel_values(isa, shape, relu):
    path_or_skip(isa)
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(F32)
    if x.size:
        x.flat[rng.integers(0, x.size)] = np.nan
    s, t = _params(shape[1])
    y = np.full_like(x, 7.0)
    _native.ChannelAffineCall(x, y, s, t, "relu" if relu else "none", isa)()
    want = _reference(x, s, t, relu)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)
    assert np.array_equal(np.isnan(y), np.isnan(want))


@pytest.mark.parametrize("isa", ALL_PATHS)
def test_kernel_in_place_and_threads_same_bits(isa):
    path_or_skip(isa)
    x = np.random.default_rng(4).standard_normal((2, 19, 33 * 29)).astype(F32)  # > 2^15 floats
    s, t = _params(19, 5)
    outs = []
    for threads in (1, 2, 4):
        y = np.empty_like(x)
        _native.ChannelAffineCall(x, y, s, t, "relu", isa, threads)()
        outs.append(bits(y))
    inplace = x.copy()
    _native.ChannelAffineCall(inplace, inplace, s, t, "relu", isa, 3)()
    outs.append(bits(inplace))
    for other in outs[1:]:
        np.testing.assert_array_equal(outs[0], other)
    np.testing.assert_allclose(inplace, _reference(x, s, t, True), rtol=1e-6, atol=1e-6)


def test_kernel_refuses_bad_arguments():
    isa = ISAS[-1]
    x = np.zeros((2, 3, 4), F32)
    s, t = _params(3)
    with pytest.raises(ValueError, match="one float per channel"):
        _native.ChannelAffineCall(x, np.empty_like(x), s[:2], t, "none", isa)
    with pytest.raises(ValueError, match="shape"):
        _native.ChannelAffineCall(x, np.empty((2, 3, 5), F32), s, t, "none", isa)
    with pytest.raises(ValueError, match="C-contiguous"):
        _native.ChannelAffineCall(x[:, :, ::2], np.empty((2, 3, 2), F32), s, t, "none", isa)
    with pytest.raises(ValueError, match="activation"):
        _native.ChannelAffineCall(x, np.empty_like(x), s, t, "sigmoid", isa)
    with pytest.raises(TypeError, match="float32"):
        _native.ChannelAffineCall(x.astype(np.float64), np.empty_like(x), s, t, "none", isa)
    buf = np.zeros(2 * 3 * 4 + 1, F32)
    with pytest.raises(ValueError, match="overlap"):  # y overlaps x without being x
        _native.ChannelAffineCall(buf[:-1].reshape(x.shape), buf[1:].reshape(x.shape), s, t,
                                  "none", isa)  # fmt: skip


# ---- sessions ------------------------------------------------------------------------------


@pytest.fixture
def native_calls(monkeypatch):
    """Counts the ChannelAffineCall objects the sessions bind (the native kernel in use)."""
    made = []
    real = _native.ChannelAffineCall

    def counting(*args):
        made.append(args[4])  # the activation
        return real(*args)

    monkeypatch.setattr(_native, "ChannelAffineCall", counting)
    return made


def _bn_model(shape, relu=True, concat=True, dtype=TensorProto.FLOAT, runtime_scale=False):
    """[Concat ->] BatchNormalization [-> Relu] with constant (or a run-time scale) parameters."""
    np_type = F32 if dtype == TensorProto.FLOAT else np.float64
    rng = np.random.default_rng(21)
    c = shape[1]
    params = {
        "scale": rng.standard_normal(c).astype(np_type),
        "bias": rng.standard_normal(c).astype(np_type),
        "mean": rng.standard_normal(c).astype(np_type),
        "var": (rng.random(c) + 0.25).astype(np_type),
    }
    inputs, nodes, feed = [], [], {}
    first = c // 2
    if concat:
        halves = [(*shape[:1], first, *shape[2:]), (*shape[:1], c - first, *shape[2:])]
        for name, sh in zip("ab", halves):
            inputs.append(tensor(name, dtype, list(sh)))
            feed[name] = rng.standard_normal(sh).astype(np_type)
        nodes.append(helper.make_node("Concat", ["a", "b"], ["x"], axis=1))
    else:
        inputs.append(tensor("x", dtype, list(shape)))
        feed["x"] = rng.standard_normal(shape).astype(np_type)
    if runtime_scale:
        inputs.append(tensor("scale", dtype, [c]))
        feed["scale"] = params.pop("scale")
    out = "bn" if relu else "y"
    nodes.append(
        helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], [out],
                         epsilon=1e-3)
    )  # fmt: skip
    if relu:
        nodes.append(helper.make_node("Relu", ["bn"], ["y"]))
    inits = [init(k, v) for k, v in params.items()]
    return make_model(nodes, inputs, [tensor("y", dtype)], inits, opset=15), feed


def _fast_path() -> str:
    return path_or_skip("avx512" if "avx512" in ISAS else "avx2")


@pytest.mark.parametrize(
    "shape", [(2, 13, 5, 7), (1, 3, 1, 1), (2, 19, 33, 29), (3, 6, 17), (4, 9)]
)
@pytest.mark.parametrize("relu", [False, True])
def test_session_matches_onnxruntime(native_calls, shape, relu):
    path = _fast_path()
    model, feed = _bn_model(shape, relu=relu)
    want = ort_session(model).run(None, feed)[0]
    sess = graphrt.Session(model, kernel_path=path)
    got = sess.run(None, feed)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert native_calls == ["relu" if relu else "none"]


def test_plain_batchnorm_native_without_fusion(native_calls):
    """A BatchNormalization alone (no Relu to fuse with) runs natively in fast mode too."""
    path = _fast_path()
    model, feed = _bn_model((2, 10, 6, 6), relu=False, concat=False)
    want = ort_session(model).run(None, feed)[0]
    sess = graphrt.Session(model, kernel_path=path)
    assert [n.info.op_type for n in sess.graph.nodes] == ["BatchNormalization"]
    np.testing.assert_allclose(sess.run(None, feed)[0], want, rtol=1e-5, atol=1e-6)
    assert native_calls == ["none"]


def test_threads_same_bits(native_calls):
    path = _fast_path()
    model, feed = _bn_model((2, 40, 31, 29))  # large enough to split over the threads
    outs = [
        graphrt.Session(model, kernel_path=path, intra_op_threads=n).run(None, feed)[0]
        for n in (1, 2, 4)
    ]
    for other in outs[1:]:
        np.testing.assert_array_equal(bits(outs[0]), bits(other))
    assert len(native_calls) == 3


@pytest.mark.parametrize(
    "case",
    [
        dict(dtype=TensorProto.DOUBLE),  # float64: ops-basic's kernel
        dict(runtime_scale=True),  # parameters folded per run: ops-basic's kernel
    ],
)
def test_fallbacks_match_onnxruntime(native_calls, case):
    path = _fast_path()
    model, feed = _bn_model((2, 7, 5, 3), **case)
    want = ort_session(model).run(None, feed)[0]
    got = graphrt.Session(model, kernel_path=path).run(None, feed)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert native_calls == []


@pytest.mark.parametrize("path", ALL_PATHS)
def test_exact_mode_runs_ops_basic_arithmetic_natively(native_calls, path):
    """Exact mode: no fusion, and the native kernel (every path, the scalar one too) computes
    ops-basic's exact BatchNormalization: the bits of the numpy path, in one pass."""
    path_or_skip(path)
    model, feed = _bn_model((2, 13, 5, 7))
    feed = {k: v.copy() for k, v in feed.items()}
    first = next(iter(feed))
    feed[first].flat[:4] = [np.nan, -0.0, np.inf, 1e-42]  # NaN, -0, inf, a subnormal
    sess = graphrt.Session(model, kernel_path=path, mode="exact")
    assert [n.info.op_type for n in sess.graph.nodes] == ["Concat", "BatchNormalization", "Relu"]
    got = sess.run(None, feed)[0]
    want = graphrt.Session(model, kernel_path="numpy", mode="exact").run(None, feed)[0]
    np.testing.assert_array_equal(bits(got), bits(want))
    assert native_calls == ["none"]  # the BatchNormalization; the Relu is ops-basic's


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize("shape", SHAPES)
def test_exact_kernel_bits(isa, shape):
    """(x * s) + t, each rounded, NaN canonical: numpy's float32 bits, any thread count."""
    path_or_skip(isa)
    rng = np.random.default_rng(11)
    x = rng.standard_normal(shape).astype(F32)
    specials = np.array([np.nan, -np.nan, -0.0, np.inf, -np.inf, 1e-42, 3e38], F32)
    specials[1] = np.frombuffer(np.uint32(0xFFC12345).tobytes(), F32)[0]  # a NaN payload
    n = min(x.size, specials.size)
    x.flat[:n] = specials[:n]
    s, t = _params(shape[1], 12)
    s[0] = 2.0  # 3e38 * 2 overflows to inf; inf + t stays inf
    with np.errstate(over="ignore", invalid="ignore"):
        want = x * s[:, None]
        want = want + t[:, None]
    want[np.isnan(want)] = np.frombuffer(np.uint32(0x7FC00000).tobytes(), F32)[0]
    for threads in (1, 3):
        y = np.full_like(x, 7.0)
        _native.ChannelAffineCall(x, y, s, t, "none", isa, threads, True)()
        np.testing.assert_array_equal(bits(y), bits(want))
    with pytest.raises(ValueError, match="no activation"):
        _native.ChannelAffineCall(x, y, s, t, "relu", isa, 1, True)


def test_scalar_path_fast_mode_falls_back(native_calls):
    model, feed = _bn_model((2, 5, 4, 4))
    got = graphrt.Session(model, kernel_path="scalar").run(None, feed)[0]
    np.testing.assert_allclose(got, ort_session(model).run(None, feed)[0], rtol=1e-5, atol=1e-6)
    assert native_calls == []


def test_strided_input_runs_through_a_copy():
    """bind_native's path for a strided X (a view another kernel produced)."""
    from graphrt.kernel import KernelContext
    from graphrt_ops_simd import batchnorm

    path = _fast_path()
    base = np.random.default_rng(8).standard_normal((2, 5, 6, 8)).astype(F32)
    x = base[:, :, :, ::2]
    s, t = _params(5, 9)
    plan = batchnorm._Plan((2, 5, 24), s, t, "relu")
    y = np.empty(x.shape, F32)
    kernel = object.__new__(batchnorm.BatchNormalization)  # bind_native reads only its isa
    kernel.isa = path
    ctx = KernelContext(prepared=plan)
    kernel.bind_native(ctx, [x], [y])()
    want = _reference(np.ascontiguousarray(x).reshape(2, 5, 24), s, t, True).reshape(x.shape)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


def test_module_exports():
    assert hasattr(simd._native, "ChannelAffineCall")
