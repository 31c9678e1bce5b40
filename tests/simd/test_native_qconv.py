"""ConvInteger and QLinearConv of the simd paths (im2col + the native int8 GEMM) against
ops-basic's numpy kernels, bit for bit, and onnxruntime as an outside oracle."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphrt
from tests.simd._simd import ALL_PATHS, simd

qconv = pytest.importorskip(
    "graphrt_ops_simd.qconv", reason="graphrt-ops-simd is not installed (its int8 convolutions)"
)
_native = simd._native

TYPES = (np.uint8, np.int8)
ONNX_TYPE = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8}


def ints(rng, dtype, shape) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)


def near_middle(rng, dtype, shape) -> np.ndarray:
    """Zero points near the middle of the type's range (requantized outputs not saturated)."""
    info = np.iinfo(dtype)
    mid = (int(info.min) + int(info.max) + 1) // 2
    return (mid + rng.integers(-12, 12, size=shape)).astype(dtype)


def _model(op, inputs, const, out_type, **attrs):
    decl, inits, names = [], [], []
    for i, x in enumerate(inputs):
        name = "" if x is None else f"i{i}"
        names.append(name)
        if x is None:
            continue
        if i in const:
            inits.append(numpy_helper.from_array(np.asarray(x), name))
        else:
            dt = helper.np_dtype_to_tensor_dtype(np.asarray(x).dtype)
            decl.append(helper.make_tensor_value_info(name, dt, np.asarray(x).shape))
    while names and names[-1] == "":
        names.pop()
    node = helper.make_node(op, names, ["y"], **attrs)
    out = helper.make_tensor_value_info("y", out_type, None)
    graph = helper.make_graph([node], "g", decl, [out], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _feeds(inputs, const):
    return {
        f"i{i}": np.asarray(x) for i, x in enumerate(inputs) if x is not None and i not in const
    }


class _Counting:
    """Stands in for qconv's ``_native``: counts the QGemmCall objects made."""

    def __init__(self):
        self.calls = 0

    def __getattr__(self, name):
        return getattr(_native, name)

    def QGemmCall(self, *args):
        self.calls += 1
        return _native.QGemmCall(*args)


def _check_paths(model, feeds, monkeypatch, native_expected=True, forced=True):
    """Every available path, both modes, 1 and 2 threads, against the numpy path's bits;
    ``forced``: natively on every path and depth (not only where it is the faster kernel)."""
    if forced:
        monkeypatch.setattr(qconv, "NATIVE_ISAS", ALL_PATHS)
        monkeypatch.setattr(qconv, "MIN_K", 1)
    want = graphrt.Session(model, mode="exact", kernel_path="numpy").run(None, feeds)[0]
    ran = 0
    for path in ALL_PATHS:
        if path not in simd.available_isas():
            continue
        for mode in ("exact", "fast"):
            for threads in (1, 2):
                counter = _Counting()
                monkeypatch.setattr(qconv, "_native", counter)
                sess = graphrt.Session(model, mode=mode, kernel_path=path, intra_op_threads=threads)
                for _ in range(2):
                    got = sess.run(None, feeds)[0]
                    assert got.dtype == want.dtype and got.shape == want.shape
                    np.testing.assert_array_equal(got, want)
                assert (counter.calls > 0) == native_expected, (path, mode)
                ran += 1
    assert ran, "no simd path is available"
    return want


# (x shape, w shape, attributes)
GEOMETRIES = [
    ((2, 5, 9, 11), (7, 5, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 6, 10, 9), (8, 3, 3, 2), {"group": 2, "strides": [2, 1], "pads": [1, 0, 2, 1]}),
    ((2, 4, 12, 12), (6, 4, 3, 3), {"dilations": [2, 1], "strides": [1, 3]}),
    ((2, 6, 8, 8), (6, 1, 3, 3), {"group": 6, "auto_pad": "SAME_UPPER"}),
    ((2, 16, 7, 5), (12, 16, 1, 1), {}),  # 1x1: no im2col gather of taps
    ((2, 3, 17), (4, 3, 4), {"pads": [2, 1], "strides": [2]}),  # 1-D
    ((1, 2, 5, 6, 4), (3, 2, 2, 3, 2), {"pads": [1, 0, 1, 0, 1, 1]}),  # 3-D
]


def _ids(g):
    return f"x{list(g[0])}-w{list(g[1])}-{g[2]}"


@pytest.mark.parametrize("geom", GEOMETRIES, ids=_ids)
@pytest.mark.parametrize("tx", TYPES)
@pytest.mark.parametrize("tw", TYPES)
@pytest.mark.parametrize("per_channel", [False, True])
def test_conv_integer_sessions(geom, tx, tw, per_channel, monkeypatch):
    xs, ws, attrs = geom
    rng = np.random.default_rng(3)
    x, w = ints(rng, tx, xs), ints(rng, tw, ws)
    xz = ints(rng, tx, ())
    wz = ints(rng, tw, (ws[0],) if per_channel else ())
    inputs = [x, w, xz, wz]
    for const in ({1, 2, 3}, {1, 3}):  # x's zero point constant or a graph input
        model = _model("ConvInteger", inputs, const, TensorProto.INT32, **attrs)
        _check_paths(model, _feeds(inputs, const), monkeypatch)


def test_conv_integer_without_zero_points(monkeypatch):
    rng = np.random.default_rng(4)
    x, w = ints(rng, np.uint8, (2, 3, 6, 7)), ints(rng, np.int8, (5, 3, 3, 3))
    model = _model("ConvInteger", [x, w], {1}, TensorProto.INT32, pads=[1, 1, 1, 1])
    got = _check_paths(model, _feeds([x, w], {1}), monkeypatch)
    # an outside oracle: int64 sums of the zero-padded windows
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros(got.shape, np.int64)
    for i in range(3):
        for j in range(3):
            win = xp[:, :, i : i + 6, j : j + 7]
            want += np.einsum("nchw,mc->nmhw", win, w[:, :, i, j].astype(np.int64))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("geom", GEOMETRIES[:4] + GEOMETRIES[5:6], ids=_ids)
@pytest.mark.parametrize("tx", TYPES)
@pytest.mark.parametrize("tw", TYPES)
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_qlinear_conv_sessions(geom, tx, tw, per_channel, bias, monkeypatch):
    xs, ws, attrs = geom
    rng = np.random.default_rng(5)
    m = ws[0]
    x, w = ints(rng, tx, xs), ints(rng, tw, ws)
    xz, yz = near_middle(rng, tx, ()), near_middle(rng, tx, ())
    wz = near_middle(rng, tw, (m,) if per_channel else ())
    xsc = np.float32(0.02)
    wsc = (rng.uniform(0.005, 0.02, (m,) if per_channel else ())).astype(np.float32)
    # sums of K products of ~74 * 74 (uniform codes about middle zero points): Y's std ~ 40
    ysc = np.float32(0.02 * 0.0125 * 5500 * np.sqrt(np.prod(ws[1:])) / 40)
    b = rng.integers(-20000, 20000, (m,)).astype(np.int32) if bias else None
    inputs = [x, xsc, xz, w, wsc, wz, ysc, yz, b]
    for const in ({1, 2, 3, 4, 5, 6, 7, 8}, {3, 5}):  # everything but W at run time, or not
        model = _model("QLinearConv", inputs, const, ONNX_TYPE[np.dtype(tx)], **attrs)
        got = _check_paths(model, _feeds(inputs, const), monkeypatch)
        lo, hi = np.iinfo(tx).min, np.iinfo(tx).max
        inside = (got > lo) & (got < hi)
        assert inside.mean() > 0.8, "mostly saturated: a weak test"


def test_qlinear_conv_matches_onnxruntime(monkeypatch):
    from tests._models import ort_session

    rng = np.random.default_rng(6)
    x, w = ints(rng, np.uint8, (2, 8, 9, 9)), ints(rng, np.int8, (6, 4, 3, 3))
    wz = np.zeros(6, np.int8)
    wsc = rng.uniform(0.001, 0.01, 6).astype(np.float32)
    b = rng.integers(-3000, 3000, 6).astype(np.int32)
    inputs = [x, np.float32(0.03), np.uint8(120), w, wsc, wz, np.float32(0.1), np.uint8(128), b]
    const = {1, 2, 3, 4, 5, 6, 7, 8}
    attrs = {"group": 2, "pads": [1, 1, 1, 1], "strides": [2, 2]}
    model = _model("QLinearConv", inputs, const, TensorProto.UINT8, **attrs)
    feeds = _feeds(inputs, const)
    got = _check_paths(model, feeds, monkeypatch)
    want = ort_session(model).run(None, feeds)[0]
    np.testing.assert_array_equal(got, want)


def test_fallbacks(monkeypatch):
    """A run-time W or w_zero_point stays on the numpy kernel (same bits)."""
    rng = np.random.default_rng(7)
    x, w = ints(rng, np.uint8, (2, 3, 6, 6)), ints(rng, np.uint8, (4, 3, 3, 3))
    xz, wz = np.uint8(3), np.uint8(100)
    inputs = [x, w, xz, wz]
    for const in ({2, 3}, {1, 2}):
        model = _model("ConvInteger", inputs, const, TensorProto.INT32)
        _check_paths(model, _feeds(inputs, const), monkeypatch, native_expected=False)


def test_deep_product_falls_back(monkeypatch):
    """K above qproduct.MAX_K could wrap an int32 sum natively: the numpy kernel runs."""
    rng = np.random.default_rng(8)
    k = qconv.MAX_K + 1
    x, w = ints(rng, np.uint8, (1, k, 1, 1)), ints(rng, np.int8, (1, k, 1, 1))
    model = _model("ConvInteger", [x, w], {1}, TensorProto.INT32)
    _check_paths(model, _feeds([x, w], {1}), monkeypatch, native_expected=False)


def test_numpy_where_faster(monkeypatch):
    """By default the scalar path and shallow products (a 3-channel stem) keep the numpy
    kernel; deeper products run natively on avx2/avx512."""
    rng = np.random.default_rng(9)
    for c, native in ((3, False), (8, True)):
        x, w = ints(rng, np.uint8, (1, c, 12, 12)), ints(rng, np.int8, (4, c, 3, 3))
        model = _model("ConvInteger", [x, w], {1}, TensorProto.INT32, pads=[1, 1, 1, 1])
        feeds = _feeds([x, w], {1})
        want = graphrt.Session(model, kernel_path="numpy").run(None, feeds)[0]
        for path in ALL_PATHS:
            if path not in simd.available_isas():
                continue
            counter = _Counting()
            monkeypatch.setattr(qconv, "_native", counter)
            got = graphrt.Session(model, kernel_path=path).run(None, feeds)[0]
            np.testing.assert_array_equal(got, want)
            assert (counter.calls > 0) == (native and path in qconv.NATIVE_ISAS), (c, path)


@pytest.mark.parametrize("op", ["ConvInteger", "QLinearConv"])
def test_native_steady_state_allocates_nothing(op, monkeypatch):
    """The native plan's steady-state runs allocate no numpy array data (plan scratch only)."""
    from graphrt.testing._alloc import count_numpy_allocations

    path = next((p for p in qconv.NATIVE_ISAS if p in simd.available_isas()), None)
    if path is None:
        pytest.skip("no path on which the native int8 convolution runs by default")
    rng = np.random.default_rng(10)
    x, w = ints(rng, np.uint8, (2, 8, 10, 10)), ints(rng, np.int8, (8, 4, 3, 3))
    attrs = {"group": 2, "pads": [1, 1, 1, 1]}
    if op == "ConvInteger":
        inputs, const, out_type = [x, w, np.uint8(7), np.int8(2)], {1, 3}, TensorProto.INT32
    else:
        scales = np.full(8, 0.01, np.float32)
        b = np.arange(8, dtype=np.int32)
        inputs = [x, np.float32(0.1), np.uint8(7), w, scales, np.int8(2), np.float32(4.0)]
        inputs += [np.uint8(100), b]
        const, out_type = {1, 3, 4, 5, 6, 7, 8}, TensorProto.UINT8
    model = _model(op, inputs, const, out_type, **attrs)
    feeds = _feeds(inputs, const)
    counter = _Counting()
    monkeypatch.setattr(qconv, "_native", counter)
    sess = graphrt.Session(model, kernel_path=path, intra_op_threads=1)
    first = sess.run(None, feeds)[0]
    assert counter.calls > 0, "the native kernel did not run"
    out = {"y": np.empty_like(first)}
    for _ in range(3):
        sess.run(None, feeds, out=out)
    with count_numpy_allocations() as counter:
        for _ in range(3):
            sess.run(None, feeds, out=out)
    assert counter.count == 0, (counter.count, counter.bytes)
    want = graphrt.Session(model, kernel_path="numpy").run(None, feeds)[0]
    np.testing.assert_array_equal(out["y"], want)


def test_qlinear_conv_bias_wraps_in_int32(monkeypatch):
    """A bias near the int32 limits: sum + bias wraps in int32 as in ops-basic, then rounds to
    float32 (values above 2**24 are not all float32 integers)."""
    rng = np.random.default_rng(11)
    x, w = ints(rng, np.uint8, (2, 8, 6, 6)), ints(rng, np.int8, (4, 8, 3, 3))
    b = np.array([2**31 - 5, -(2**31) + 3, 2**24 + 1, -(2**25) - 3], np.int32)
    scales = np.array([1e-7, 1e-7, 3e-6, 1e-6], np.float32)
    inputs = [x, np.float32(1.0), np.uint8(128), w, scales, np.int8(0), np.float32(1.0)]
    inputs += [np.uint8(128), b]
    const = {1, 2, 3, 4, 5, 6, 7, 8}
    model = _model("QLinearConv", inputs, const, TensorProto.UINT8, pads=[1, 1, 1, 1])
    _check_paths(model, _feeds(inputs, const), monkeypatch)


def test_native_requantize_refuses_bad_arguments():
    acc = np.zeros((1, 1, 4, 3), np.int32)
    y = np.zeros((1, 3, 4), np.uint8).reshape(1, 1, 3, 4).transpose(0, 1, 3, 2)
    mult = np.ones(3, np.float32)
    isa = simd.available_isas()[0]
    _native.requantize_i32(acc + 7, None, mult, 2.0, 0.0, 255.0, y, isa)
    assert (y == 9).all()
    with pytest.raises(ValueError, match="int32"):
        _native.requantize_i32(acc.astype(np.int64), None, mult, 0.0, 0.0, 255.0, y, isa)
    with pytest.raises(ValueError, match="shape"):
        _native.requantize_i32(acc, None, mult, 0.0, 0.0, 255.0, y[:, :, :2], isa)
    with pytest.raises(ValueError, match="mult"):
        _native.requantize_i32(acc, None, np.ones(2, np.float32), 0.0, 0.0, 255.0, y, isa)
    with pytest.raises(ValueError, match="bias"):
        _native.requantize_i32(acc, np.ones(2, np.int32), mult, 0.0, 0.0, 255.0, y, isa)
