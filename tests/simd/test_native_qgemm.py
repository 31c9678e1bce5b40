"""The native int8 GEMM (qgemm.h) against numpy's int64 products, and the MatMulInteger and
QLinearMatMul kernels of the simd paths against ops-basic's numpy kernels, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import graphrt
from tests.simd._simd import ALL_PATHS, simd

qproduct = pytest.importorskip(
    "graphrt_ops_simd.qproduct", reason="graphrt-ops-simd is not installed (its int8 kernels)"
)
_native = simd._native

VARIANTS = ("scalar", "avx2-madd", "avx2-vnni", "avx512-madd", "avx512-vnni")
TYPES = (np.uint8, np.int8)


def variant_or_skip(name: str) -> str:
    if name not in _native.qgemm_variants():
        pytest.skip(f"int8 GEMM kernel {name!r} is not available on this CPU/OS")
    return name


def reference(a, b, za, zb) -> np.ndarray:
    """(A - za) @ (B - zb) in int64, wrapped to int32 (numpy's own integer matmul)."""
    a64 = a.astype(np.int64) - np.asarray(za, np.int64)
    b64 = b.astype(np.int64) - np.asarray(zb, np.int64).reshape(1, -1)
    return (a64 @ b64).astype(np.int32)


def ints(rng, dtype, shape) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)


def run_native(isa, a, b, za, zb, threads=1) -> np.ndarray:
    packed = _native.PackedQB(b, zb, isa)
    out = np.full((a.shape[0], b.shape[1]), -7, np.int32)  # garbage the call must overwrite
    _native.QGemmCall(a, packed, out, za, threads)()
    return out


@st.composite
def problems(draw):
    m = draw(st.integers(1, 40))
    k = draw(st.one_of(st.integers(0, 70), st.integers(900, 1100)))
    n = draw(st.integers(1, 80))
    ta, tb = draw(st.sampled_from(TYPES)), draw(st.sampled_from(TYPES))
    per_column = draw(st.booleans())
    seed = draw(st.integers(0, 2**31))
    return m, k, n, ta, tb, per_column, seed


@pytest.mark.parametrize("isa", VARIANTS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(g=problems())
def test_random_products_equal_int64_reference(isa, g):
    variant_or_skip(isa)
    m, k, n, ta, tb, per_column, seed = g
    rng = np.random.default_rng(seed)
    a, b = ints(rng, ta, (m, k)), ints(rng, tb, (k, n))
    za = ints(rng, ta, (1,))
    zb = ints(rng, tb, (n,) if per_column else (1,))
    want = reference(a, b, za, zb)
    got = [run_native(isa, a, b, za, zb, threads) for threads in (1, 2, 4)]
    for out in got:
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("isa", VARIANTS)
@pytest.mark.parametrize(("ta", "tb"), [(x, y) for x in TYPES for y in TYPES])
def test_extreme_values_maximise_the_sums(isa, ta, tb):
    """Every term at its largest magnitude ((-128 - 127) * (255 - 0), ...) over k = 1031, odd
    tails on every axis; the per-column zero points flip the sign column by column."""
    variant_or_skip(isa)
    m, k, n = 13, 1031, 37
    ia, ib = np.iinfo(ta), np.iinfo(tb)
    a = np.full((m, k), ia.min, ta)
    a[1::2] = ia.max
    b = np.full((k, n), ib.max, tb)
    b[:, ::2] = ib.min
    for za in (ia.max, ia.min):
        zb = np.where(np.arange(n) % 2 == 0, ib.max, ib.min).astype(tb)
        want = reference(a, b, np.array([za], ta), zb)
        assert np.abs(want.astype(np.int64)).max() >= 255 * 255 * 1000 // 2
        got = run_native(isa, a, b, np.array([za], ta), zb)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("isa", VARIANTS)
def test_no_zero_points_and_empty_depth(isa):
    variant_or_skip(isa)
    rng = np.random.default_rng(3)
    a, b = ints(rng, np.uint8, (9, 0)), ints(rng, np.int8, (0, 5))
    np.testing.assert_array_equal(run_native(isa, a, b, None, None), np.zeros((9, 5), np.int32))
    a, b = ints(rng, np.int8, (70, 129)), ints(rng, np.uint8, (129, 33))
    np.testing.assert_array_equal(run_native(isa, a, b, None, None, 3), reference(a, b, 0, 0))


@pytest.mark.parametrize("isa", VARIANTS)
def test_row_strided_a_and_zero_point_read_per_call(isa):
    """A as every other row of a larger array; the A zero point is read at each call (the
    output of a DynamicQuantizeLinear changes per run)."""
    variant_or_skip(isa)
    rng = np.random.default_rng(4)
    big, b = ints(rng, np.uint8, (40, 300)), ints(rng, np.int8, (299, 45))
    a = big[::2, :299]
    za = np.array([3], np.uint8)
    out = np.empty((20, 45), np.int32)
    call = _native.QGemmCall(a, _native.PackedQB(b, np.array(5, np.int8), isa), out, za, 2)
    for z in (3, 250, 0):
        za[0] = z
        call()
        np.testing.assert_array_equal(out, reference(a, b, z, 5))


@pytest.mark.parametrize("path", ["avx2", "avx512"])
def test_paths_pick_vnni_when_present(path):
    if f"{path}-madd" not in _native.qgemm_variants():
        pytest.skip(f"{path} is not available on this CPU/OS")
    packed = _native.PackedQB(np.zeros((3, 3), np.int8), None, path)
    vnni = f"{path}-vnni" in _native.qgemm_variants()
    assert packed.isa == (f"{path}-vnni" if vnni else f"{path}-madd")


# ---- hostile arguments ------------------------------------------------------------------------


def _ok():
    a = np.zeros((4, 6), np.uint8)
    packed = _native.PackedQB(np.zeros((6, 5), np.int8), None, "scalar")
    return a, packed, np.zeros((4, 5), np.int32)


@pytest.mark.parametrize(
    "make",
    [
        lambda a, p, o: (a[:, :5], p, o, None),  # inner dimensions differ
        lambda a, p, o: (a.astype(np.int16), p, o, None),  # A type
        lambda a, p, o: (a.astype(np.float32), p, o, None),
        lambda a, p, o: (a[None], p, o, None),  # A rank
        lambda a, p, o: (np.zeros((6, 4), np.uint8).T, p, o, None),  # A column stride
        lambda a, p, o: (a, p, o.astype(np.int64), None),  # out type
        lambda a, p, o: (a, p, o[:, :4], None),  # out shape
        lambda a, p, o: (a, p, np.zeros((5, 4), np.int32).T, None),  # out not C-contiguous
        lambda a, p, o: (a, p, o, np.zeros(1, np.int8)),  # zero point of another type
        lambda a, p, o: (a, p, o, np.zeros(2, np.uint8)),  # two zero points
        lambda a, p, o: (a, object(), o, None),  # not a packed B
    ],
)
def test_hostile_call_arguments_are_refused(make):
    args = make(*_ok())
    with pytest.raises((TypeError, ValueError)):
        _native.QGemmCall(*args, 1)


def test_misaligned_and_overlapping_out_refused():
    a, packed, _ = _ok()
    raw = np.zeros(4 * 5 * 4 + 1, np.uint8)
    misaligned = np.frombuffer(raw.data, np.int32, 20, offset=1).reshape(4, 5)
    with pytest.raises(ValueError, match="aligned"):
        _native.QGemmCall(a, packed, misaligned, None, 1)
    buf = np.zeros(4 * 5 * 4, np.uint8)  # A's bytes inside out's
    out = buf.view(np.int32).reshape(4, 5)
    with pytest.raises(ValueError, match="overlap"):
        _native.QGemmCall(buf[:24].reshape(4, 6), packed, out, None, 1)


@pytest.mark.parametrize(
    ("b", "zb", "isa"),
    [
        (np.zeros((3, 4), np.int16), None, "scalar"),
        (np.zeros((3, 4, 1), np.int8), None, "scalar"),
        (np.zeros((4, 3), np.int8).T, None, "scalar"),  # not C-contiguous
        (np.zeros((3, 4), np.int8), np.zeros(3, np.int8), "scalar"),  # zero points per row
        (np.zeros((3, 4), np.int8), np.zeros(4, np.uint8), "scalar"),  # zero point type
        (np.zeros((3, 4), np.int8), None, "sse9"),
    ],
)
def test_hostile_packing_refused(b, zb, isa):
    with pytest.raises((TypeError, ValueError)):
        _native.PackedQB(b, zb, isa)


# ---- sessions -----------------------------------------------------------------------------------


def _model(op, inputs, const, out_type, extra_nodes=()):
    decl, inits = [], []
    names = []
    for i, x in enumerate(inputs):
        name = f"i{i}"
        names.append(name)
        if i in const:
            inits.append(numpy_helper.from_array(np.asarray(x), name))
        else:
            dt = helper.np_dtype_to_tensor_dtype(np.asarray(x).dtype)
            decl.append(helper.make_tensor_value_info(name, dt, np.asarray(x).shape))
    node = helper.make_node(op, names, ["y"])
    out = helper.make_tensor_value_info("y", out_type, None)
    graph = helper.make_graph([*extra_nodes, node], "g", decl, [out], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _feeds(inputs, const):
    return {f"i{i}": np.asarray(x) for i, x in enumerate(inputs) if i not in const}


class _Counting:
    """Stands in for qproduct's ``_native``: counts the QGemmCall objects made."""

    def __init__(self):
        self.calls = 0

    def __getattr__(self, name):
        return getattr(_native, name)

    def QGemmCall(self, *args):
        self.calls += 1
        return _native.QGemmCall(*args)


def _check_paths(model, feeds, monkeypatch, native_expected=True):
    monkeypatch.setattr(qproduct, "NATIVE_ISAS", ALL_PATHS)  # the scalar kernels too
    want = graphrt.Session(model, mode="exact", kernel_path="numpy").run(None, feeds)[0]
    for path in ALL_PATHS:
        if path not in simd.available_isas():
            continue
        for mode in ("exact", "fast"):
            for threads in (1, 2):
                counter = _Counting()
                monkeypatch.setattr(qproduct, "_native", counter)
                sess = graphrt.Session(model, mode=mode, kernel_path=path, intra_op_threads=threads)
                for _ in range(2):
                    got = sess.run(None, feeds)[0]
                    assert got.dtype == want.dtype and got.shape == want.shape
                    np.testing.assert_array_equal(got, want)
                assert (counter.calls > 0) == native_expected, (path, mode)


@pytest.mark.parametrize("ta", TYPES)
@pytest.mark.parametrize("tb", TYPES)
@pytest.mark.parametrize("a_shape", [(2, 33, 70), (70,), (130, 70)])
def test_matmul_integer_sessions(ta, tb, a_shape, monkeypatch):
    rng = np.random.default_rng(11)
    a, b = ints(rng, ta, a_shape), ints(rng, tb, (70, 45))
    za, zb = ints(rng, ta, ()), ints(rng, tb, (45,))
    inputs = [a, b, za, zb]
    for const in ({1, 2, 3}, {1, 3}):  # A's zero point constant or a graph input
        model = _model("MatMulInteger", inputs, const, TensorProto.INT32)
        _check_paths(model, _feeds(inputs, const), monkeypatch)


def test_matmul_integer_fallbacks(monkeypatch):
    """A run-time B and per-row A zero points stay on the numpy kernel (same bits)."""
    rng = np.random.default_rng(12)
    a, b = ints(rng, np.uint8, (6, 20)), ints(rng, np.int8, (20, 9))
    za = ints(rng, np.uint8, (6,))
    inputs = [a, b, za]
    model = _model("MatMulInteger", inputs, {2}, TensorProto.INT32)
    _check_paths(model, _feeds(inputs, {2}), monkeypatch, native_expected=False)
    model = _model("MatMulInteger", inputs, {1, 2}, TensorProto.INT32)
    _check_paths(model, _feeds(inputs, {1, 2}), monkeypatch, native_expected=False)


def test_dynamic_quantize_feeds_matmul_integer(monkeypatch):
    """DynamicQuantizeLinear's run-time zero point into the native product."""
    rng = np.random.default_rng(13)
    x = rng.standard_normal((17, 96)).astype(np.float32) * 3 + 0.5
    b = ints(rng, np.int8, (96, 50))
    dq = helper.make_node("DynamicQuantizeLinear", ["x"], ["i0", "s", "i2"])
    inputs = [np.zeros((17, 96), np.uint8), b, np.zeros((), np.uint8)]
    model = _model("MatMulInteger", inputs, {1}, TensorProto.INT32, extra_nodes=[dq])
    graph = model.graph
    del graph.input[:]
    graph.input.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape))
    _check_paths(model, {"x": x}, monkeypatch)


@pytest.mark.parametrize("ta", TYPES)
@pytest.mark.parametrize("tb", TYPES)
@pytest.mark.parametrize("per", ["tensor", "column"])
def test_qlinear_matmul_sessions(ta, tb, per, monkeypatch):
    rng = np.random.default_rng(14)
    n = 37
    a, b = ints(rng, ta, (3, 21, 64)), ints(rng, tb, (64, n))
    shape = (n,) if per == "column" else ()
    b_scale = (rng.random(shape) * 0.02 + 0.001).astype(np.float32)
    zb = ints(rng, tb, shape)
    inputs = [a, np.float32(0.05), ints(rng, ta, ()), b, b_scale, zb, np.float32(0.7)]
    inputs.append(ints(rng, ta, ()))  # y in A's type
    for const in ({1, 2, 3, 4, 5, 6, 7}, {3, 5}):  # scales and zero points per run too
        model = _model(
            "QLinearMatMul", inputs, const, helper.np_dtype_to_tensor_dtype(np.dtype(ta))
        )
        _check_paths(model, _feeds(inputs, const), monkeypatch)


# ---- DynamicQuantizeLinear ----------------------------------------------------------------------


def _dql_inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(21)
    ties = np.float32(np.arange(-40, 215) + 0.5) * np.float32(0.02)  # x / scale near .5
    nan = rng.standard_normal(50).astype(np.float32)
    nan[7] = np.nan
    return [
        rng.standard_normal((17, 96)).astype(np.float32) * 3 + 0.5,
        ties,
        np.zeros(10, np.float32),
        np.full(9, -2.5, np.float32),  # all negative: zero point 255
        np.abs(rng.standard_normal(33)).astype(np.float32) + 1,  # all positive: zero point 0
        nan,
        np.array([1.0, np.inf, -3.0], np.float32),
        np.array([-np.inf, 2.0], np.float32),
        np.array([3e-44, -1e-44, 1e-45, 0.0], np.float32),  # subnormal ranges
        np.array([-0.0, 0.0, 5.0], np.float32),
        np.zeros((0, 4), np.float32),
        rng.standard_normal(128 * 768).astype(np.float32),
    ]


def _raw(a) -> np.ndarray:
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


@pytest.mark.parametrize("index", range(len(_dql_inputs())))
def test_dynamic_quantize_linear_same_bits_as_ops_basic(index, monkeypatch):
    x = _dql_inputs()[index]
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [
            helper.make_tensor_value_info("y", TensorProto.UINT8, None),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("z", TensorProto.UINT8, None),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    want = graphrt.Session(model, mode="exact", kernel_path="numpy").run(None, {"x": x})
    calls = []
    real = _native.dynamic_quantize
    monkeypatch.setattr(_native, "dynamic_quantize", lambda *a: calls.append(1) or real(*a))
    for path in ALL_PATHS:
        if path not in simd.available_isas():
            continue
        for mode in ("exact", "fast"):
            calls.clear()
            sess = graphrt.Session(model, mode=mode, kernel_path=path)
            for _ in range(2):
                got = sess.run(None, {"x": x})
                for g, w in zip(got, want):
                    assert g.dtype == w.dtype and g.shape == w.shape
                    np.testing.assert_array_equal(_raw(g), _raw(w))
            assert calls, (path, mode)


def test_dynamic_quantize_hostile_arguments():
    x = np.zeros(8, np.float32)
    y, s, z = np.zeros(8, np.uint8), np.zeros(1, np.float32), np.zeros(1, np.uint8)
    bad = [
        (x.astype(np.float64), y, s, z),
        (x, y[:7], s, z),
        (x, y.astype(np.int8), s, z),
        (x, y, s.astype(np.float64), z),
        (x, y, np.zeros(2, np.float32), z),
        (x[::2], y[:4], s, z),  # x not C-contiguous
        (x, x.view(np.uint8)[:8], s, z),  # y inside x
    ]
    with pytest.raises(ValueError, match="isa"):
        _native.dynamic_quantize(x, y, s, z, "sse9")
    for args in bad:
        with pytest.raises((TypeError, ValueError)):
            _native.dynamic_quantize(*args, "scalar")
