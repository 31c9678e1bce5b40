"""The quantization operators of graphrt-ops-basic (quantize.py, qmatmul.py, qconv.py).

Single-node models against onnxruntime, or onnx's reference evaluator where onnxruntime lacks
the type or attribute (float8/float4 targets, 2-bit types, blocked 4-bit, float16 scales of
QLinearMatMul 21).  Each model runs twice: parameters as initializers (prepared once in
``infer``) and as graph inputs (read per run).  Values are picked to hit rounding ties,
saturation, negative zero points, negative axes and uneven blocks.  Exact-mode runs on 1 and 2
threads must give the same bits (and the fast mode's: the integer products are exact).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import graphrt
from tests._models import ort_session
from tests._versions import old_oracles

if old_oracles():
    pytest.skip(old_oracles(), allow_module_level=True)

F8 = {
    TensorProto.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn,
    TensorProto.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
    TensorProto.FLOAT8E5M2: ml_dtypes.float8_e5m2,
    TensorProto.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz,
}
SMALL_INTS = {
    TensorProto.INT4: (ml_dtypes.int4, -8, 7),
    TensorProto.UINT4: (ml_dtypes.uint4, 0, 15),
}
if hasattr(TensorProto, "INT2"):  # onnx >= 1.20 (tox -e numpy1 runs an older onnx)
    SMALL_INTS[TensorProto.INT2] = (ml_dtypes.int2, -2, 1)
    SMALL_INTS[TensorProto.UINT2] = (ml_dtypes.uint2, 0, 3)


def _elem(a: np.ndarray) -> int:
    return helper.np_dtype_to_tensor_dtype(a.dtype)


def make_model(op, inputs, opset, const=(), n_out=1, **attrs) -> onnx.ModelProto:
    """One node; inputs in ``const`` (indices) become initializers; None: an absent input."""
    inputs = [None if x is None else np.asarray(x) for x in inputs]
    names = ["" if x is None else f"i{k}" for k, x in enumerate(inputs)]
    while names and names[-1] == "":
        names.pop()
    outs = [f"o{k}" for k in range(n_out)]
    node = helper.make_node(op, names, outs, **attrs)
    decl, inits = [], []
    for k, x in enumerate(inputs):
        if x is None:
            continue
        if k in const:
            inits.append(numpy_helper.from_array(np.asarray(x), f"i{k}"))
        else:
            decl.append(helper.make_tensor_value_info(f"i{k}", _elem(x), x.shape))
    types = _output_types(op, inputs, attrs)
    outputs = [helper.make_tensor_value_info(o, t, None) for o, t in zip(outs, types)]
    graph = helper.make_graph([node], "g", decl, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _output_types(op, inputs, attrs) -> list[int]:
    """The outputs' element types, as the operator's type rules give them (onnxruntime wants
    them declared)."""
    if op == "QuantizeLinear":
        if attrs.get("output_dtype"):
            return [attrs["output_dtype"]]
        return [
            _elem(inputs[2]) if len(inputs) > 2 and inputs[2] is not None else TensorProto.UINT8
        ]
    if op == "DequantizeLinear":
        return [attrs.get("output_dtype") or _elem(np.asarray(inputs[1]))]
    if op == "DynamicQuantizeLinear":
        return [TensorProto.UINT8, TensorProto.FLOAT, TensorProto.UINT8]
    if op in ("MatMulInteger", "ConvInteger"):
        return [TensorProto.INT32]
    return [_elem(np.asarray(inputs[7]))]  # QLinearMatMul, QLinearConv: y_zero_point's type


def feeds(inputs, const=()) -> dict:
    return {
        f"i{k}": np.asarray(x) for k, x in enumerate(inputs) if x is not None and k not in const
    }


def graphrt_run(model, inputs, const=(), **options) -> list[np.ndarray]:
    return graphrt.Session(model, **options).run(None, feeds(inputs, const))


def oracle(model, inputs, const=(), use_ort=True) -> list[np.ndarray]:
    if use_ort:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        return ort_session(model, so).run(None, feeds(inputs, const))
    return ReferenceEvaluator(model).run(None, feeds(inputs, const))


def bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(np.dtype(f"u{a.dtype.itemsize}")) if a.dtype.itemsize in (1, 2, 4, 8) else a


def assert_same(got, want) -> None:
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, (g.shape, w.shape)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        if g.dtype.kind == "f" or g.dtype.name.startswith(("float", "bfloat")):
            np.testing.assert_array_equal(bits(g), bits(w))  # NaN payloads and -0 too
        else:
            np.testing.assert_array_equal(g.astype(np.int64), w.astype(np.int64))


def check(op, inputs, opset, const_sets=((), None), use_ort=True, n_out=1, **attrs) -> None:
    """graphrt equals the oracle with the parameters as initializers and as graph inputs."""
    for const in const_sets:
        const = tuple(range(1, len(inputs))) if const is None else const
        model = make_model(op, inputs, opset, const, n_out, **attrs)
        assert_same(graphrt_run(model, inputs, const), oracle(model, inputs, const, use_ort))


def ties(scale: float) -> np.ndarray:
    """Values whose quotient by ``scale`` is a tie, near ties, saturating and special."""
    q = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49, -0.51, 126.5, 127.5, 300, -300, 0, -0.0])
    return (q * scale).astype(np.float32)


# -- QuantizeLinear ----------------------------------------------------------------------------


@pytest.mark.parametrize("opset", [10, 13, 19, 21])
@pytest.mark.parametrize("zp", [np.uint8(0), np.uint8(131), np.int8(0), np.int8(-3), np.int8(5)])
def test_quantize_per_tensor_ties_and_saturation(opset, zp):
    x = np.concatenate([ties(0.5), ties(0.5) + 1]).reshape(4, 7)
    check("QuantizeLinear", [x, np.float32(0.5), np.asarray(zp)], opset)


@pytest.mark.parametrize("zp", [np.uint8(10), np.int8(-3)])
def test_quantize_nan_and_infinities(zp):
    """NaN becomes the type's lowest value (onnxruntime's choice; a C cast of NaN is undefined)."""
    x = np.array([np.nan, 1, -np.nan, np.inf, -np.inf, 3e38], np.float32)
    check("QuantizeLinear", [x, np.float32(1), zp], 13)


def test_dequantize_exact_mode_canonical_nan():
    x = np.array([1, 2], np.int8)
    scale = np.frombuffer(np.uint32(0x7FC00123).tobytes(), np.float32)[0]  # a NaN payload
    model = make_model("DequantizeLinear", [x, scale], 13, (1,))
    got = graphrt_run(model, [x, scale], (1,), mode="exact")[0]
    assert (bits(got) == 0x7FC00000).all()


@pytest.mark.parametrize("axis", [1, -1, -3, 0])
def test_quantize_per_axis(axis):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, 4, 5)) * 50).astype(np.float32)
    d = x.shape[axis]
    scale = np.linspace(0.25, 1.5, d).astype(np.float32)
    zp = np.arange(-(d // 2), d - d // 2, dtype=np.int8) * 7
    check("QuantizeLinear", [x, scale, zp], 13, axis=axis)


@pytest.mark.parametrize("elem", ["int8", "uint8", "int16", "uint16"])
@pytest.mark.parametrize("block,axis", [(2, 1), (3, -1), (4, 0)])
def test_quantize_blocked(elem, block, axis):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((6, 7)) * 200).astype(np.float32)
    ax = axis % 2
    shape = list(x.shape)
    shape[ax] = -(-shape[ax] // block)
    scale = rng.uniform(0.5, 2, shape).astype(np.float32)
    info = np.iinfo(elem)
    zp = rng.integers(max(info.min, -20), min(info.max, 20), shape).astype(elem)
    check("QuantizeLinear", [x, scale, zp], 21, axis=axis, block_size=block)


@pytest.mark.parametrize("elem", ["int16", "uint16"])
def test_quantize_16bit(elem):
    x = np.concatenate([ties(0.25), ties(0.25) * 1000]).reshape(2, 14)
    zp = np.asarray(-7 if elem == "int16" else 40000, elem)
    check("QuantizeLinear", [x, np.float32(0.25), zp], 21)


@pytest.mark.parametrize("code", list(SMALL_INTS))
@pytest.mark.parametrize("blocked", [False, True])
def test_quantize_small_ints(code, blocked):
    dtype, lo, hi = SMALL_INTS[code]
    x = np.concatenate([ties(0.5), ties(0.5) / 100]).reshape(4, 7)
    if blocked:
        scale = np.array([[0.5, 0.25, 1.0, 2.0]] * 4, np.float32)  # 7 columns in blocks of 2
        zp = np.full(scale.shape, hi, dtype)
        check("QuantizeLinear", [x, scale, zp], 25, use_ort=False, axis=1, block_size=2)
    else:
        zp = np.array(lo, dtype)
        check("QuantizeLinear", [x, np.float32(0.5), zp], 25, use_ort=False)


@pytest.mark.parametrize("code", list(F8))
@pytest.mark.parametrize("saturate", [1, 0])
def test_quantize_float8(code, saturate):
    x = np.array([0.1, -3.3, 1e5, -1e5, np.inf, -np.inf, 17.7, 240, 449, 57345, 0.0], np.float32)
    zp = np.zeros((), F8[code])
    check("QuantizeLinear", [x, np.float32(2.0), zp], 21, use_ort=False, saturate=saturate)


def test_quantize_float4_and_output_dtype():
    x = np.array([0.1, -3.3, 100, -100, 2.5, 5.0, 0.75, 1.25], np.float32)
    model_in = [x, np.float32(0.5)]
    check("QuantizeLinear", model_in, 23, use_ort=False, output_dtype=TensorProto.FLOAT4E2M1)
    check("QuantizeLinear", [x * 100, np.float32(0.5)], 21, output_dtype=TensorProto.INT8)
    check("QuantizeLinear", [x * 100, np.float32(0.5)], 19)  # no zero point: uint8


@pytest.mark.parametrize(
    "x,scale,attrs",
    [
        (np.array([0.1, -3.3, 100, -100, 2.5, 1.3], np.float32), 0.3, {"output_dtype": 27}),
        (np.array([0.1, -3.3, 100, -100, 2.5, 1.3], np.float32), 0.3, {"output_dtype": 28}),
        (
            np.array([3, -10, 300, 7, 2.5, 1.3], np.float32),
            0.3,
            {"output_dtype": 3, "precision": 10},
        ),
        (np.array([3, -10, 300, 7, 2, 1], np.int32), 0.5, {"output_dtype": 3}),
        (np.array([3, -10, 300, 7, 2.5, 1.3], ml_dtypes.bfloat16), 0.3, {"output_dtype": 2}),
    ],
    ids=["float6e2m3", "float6e3m2", "precision-float16", "int32-x", "bfloat16-x"],
)
def test_quantize_opset_28(x, scale, attrs):
    """float6 targets, the precision attribute, int32 and bfloat16 inputs (onnx's reference)."""
    scale = np.asarray(scale, x.dtype if x.dtype.kind != "i" else np.float32)
    check("QuantizeLinear", [x, scale], 28, use_ort=False, **attrs)


def test_quantize_float16_input_and_scale():
    x = ties(0.5).astype(np.float16)
    check("QuantizeLinear", [x, np.float16(0.5), np.int8(-4)], 19)


# -- DequantizeLinear --------------------------------------------------------------------------


@pytest.mark.parametrize("opset", [10, 13, 19, 21])
@pytest.mark.parametrize("elem", ["int8", "uint8", "int32"])
def test_dequantize_per_tensor(opset, elem):
    info = np.iinfo(elem)
    x = np.array([info.min, info.max, 0, 1, -1 if info.min else 2, 77], elem)
    zp = None if elem == "int32" else np.asarray(-9 if info.min else 200, elem)
    check("DequantizeLinear", [x, np.float32(0.37), zp], opset)


@pytest.mark.parametrize("axis", [1, -2, -1])
def test_dequantize_per_axis(axis):
    x = np.arange(-60, 60, dtype=np.int8).reshape(2, 3, 4, 5)
    d = x.shape[axis]
    scale = np.linspace(0.1, 2, d).astype(np.float32)
    zp = (np.arange(d) * 5 - 6).astype(np.int8)
    check("DequantizeLinear", [x, scale, zp], 13, axis=axis)


@pytest.mark.parametrize("elem", ["int8", "uint16"])
def test_dequantize_blocked(elem):
    rng = np.random.default_rng(2)
    x = rng.integers(0, 100, (5, 7)).astype(elem)
    scale = rng.uniform(0.1, 1, (2, 7)).astype(np.float32)
    zp = rng.integers(0, 30, (2, 7)).astype(elem)
    check("DequantizeLinear", [x, scale, zp], 21, axis=0, block_size=3)


@pytest.mark.parametrize("code", list(SMALL_INTS))
def test_dequantize_small_ints(code):
    dtype, lo, hi = SMALL_INTS[code]
    x = np.arange(lo, hi + 1).astype(dtype)
    check("DequantizeLinear", [x, np.float32(0.75), np.array(lo, dtype)], 25, use_ort=False)


@pytest.mark.parametrize("code", list(F8) + [TensorProto.FLOAT4E2M1])
def test_dequantize_floats(code):
    dtype = F8.get(code, ml_dtypes.float4_e2m1fn)
    x = np.array([0.5, -1.5, 3, -6, 0], np.float32).astype(dtype)
    check("DequantizeLinear", [x, np.float32(3.0)], 23, use_ort=False)


def test_dequantize_float16_output():
    x = np.arange(-128, 128, dtype=np.int8)
    check("DequantizeLinear", [x, np.float16(0.0123), np.int8(3)], 19)
    # output_dtype: onnx's reference lacks it; (x - zp) * scale in float32, rounded once
    ins = [x, np.float32(0.0123), np.int8(3)]
    model = make_model("DequantizeLinear", ins, 21, (), output_dtype=TensorProto.FLOAT16)
    want = ((x.astype(np.float32) - 3) * np.float32(0.0123)).astype(np.float16)
    assert_same(graphrt_run(model, ins), [want])


# -- DynamicQuantizeLinear ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "x",
    [
        np.random.default_rng(3).standard_normal((4, 33)).astype(np.float32) * 3,
        np.array([0.5, 1, 2, 3.75], np.float32),  # all positive: min adjusted to 0
        np.array([-0.5, -1, -2, -3.75], np.float32),  # all negative: max adjusted to 0
        np.array([-1, 254, 0.5, 1.5, 2.5], np.float32),  # scale 1: ties
        np.zeros((2, 3), np.float32),  # onnxruntime: scale 1 (the spec's formula: 0)
    ],
    ids=["random", "positive", "negative", "ties", "zeros"],
)
def test_dynamic_quantize(x):
    check("DynamicQuantizeLinear", [x], 11, const_sets=((),), n_out=3)


# -- MatMulInteger and QLinearMatMul -----------------------------------------------------------


def _ints(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


@pytest.mark.parametrize("ta,tb", [("uint8", "int8"), ("int8", "uint8"), ("uint8", "uint8")])
@pytest.mark.parametrize(
    "a_shape,b_shape",
    [((5, 7), (7, 3)), ((2, 5, 7), (7, 4)), ((2, 3, 6), (2, 6, 5)), ((7,), (7, 2))],
)
def test_matmul_integer(ta, tb, a_shape, b_shape):
    rng = np.random.default_rng(4)
    a, b = _ints(rng, ta, a_shape), _ints(rng, tb, b_shape)
    az = np.asarray(rng.integers(0, 100), ta)
    bz = (
        _ints(rng, tb, (b_shape[-1],))
        if len(b_shape) == 2
        else np.asarray(-3 + 3 * (tb == "uint8"), tb)
    )
    check("MatMulInteger", [a, b, az, bz], 10)
    check("MatMulInteger", [a, b], 10)


def test_matmul_integer_per_row_zero_point():
    rng = np.random.default_rng(5)
    a, b = _ints(rng, "uint8", (4, 6)), _ints(rng, "int8", (6, 3))
    az = _ints(rng, "uint8", (4,))
    got = graphrt_run(make_model("MatMulInteger", [a, b, az], 10), [a, b, az])[0]
    want = (a.astype(np.int64) - az[:, None]) @ b.astype(np.int64)
    np.testing.assert_array_equal(got, want)


def _product_plan(a, b, az, bz):
    """The compute type MatMulInteger's kernel plans for a constant B."""
    from graphrt.plugin import InferContext, NodeInfo
    from graphrt_ops_basic.qmatmul import MatMulInteger

    node = NodeInfo("n", "MatMulInteger", "", 10, {}, ("a", "b", "az", "bz"), ("y",))
    k = MatMulInteger(node)
    ins = [a, b, az, bz]
    ctx = InferContext([x.dtype for x in ins], [x.shape for x in ins], [None, b, az, bz], 1)
    k.infer(ctx)
    return ctx.prepared.how


@pytest.mark.parametrize("case", ["f4", "checked-pass", "checked-fail", "f8"])
def test_matmul_integer_large_k_paths(case):
    """BERT's K = 768 (float32 by B's column sums) and 3072 (float32 after the run-time check
    on A, else float64); always exact."""
    rng = np.random.default_rng(6)
    k = 768 if case == "f4" else 3072
    a = rng.integers(0, 21, (9, k)).astype(np.uint8)  # near the zero point: passes the check
    b = _ints(rng, "int8", (k, 11))
    if case == "checked-fail":  # one row far from the zero point: float64 this run
        a[3] = 255
        b[:, 0], b[0, 0] = 127, 126  # y[3, 0] = 245 * 390143, odd and above 2**26
    az, bz = np.uint8(10), np.int8(0)
    if case == "f8":
        const = (2,)  # B a graph input: no run-time check
    else:
        const = (1, 2, 3)
        want = {"f4": "f4", "checked-pass": "checked", "checked-fail": "checked"}[case]
        assert _product_plan(a, b, np.asarray(az), np.asarray(bz)) == want
    inputs = [a, b, np.asarray(az), np.asarray(bz)]
    model = make_model("MatMulInteger", inputs, 10, const)
    got = graphrt_run(model, inputs, const)[0]
    np.testing.assert_array_equal(got, (a.astype(np.int64) - 10) @ b.astype(np.int64))
    assert_same([got], oracle(model, inputs, const))


@pytest.mark.parametrize("ta,tb", [("uint8", "int8"), ("int8", "int8"), ("uint8", "uint8")])
@pytest.mark.parametrize("per", ["tensor", "row-col"])
def test_qlinear_matmul(ta, tb, per):
    rng = np.random.default_rng(7)
    m, k, n = 6, 40, 5
    a, b = _ints(rng, ta, (m, k)), _ints(rng, tb, (k, n))
    if per == "tensor":
        a_s, a_z = np.float32(0.02), np.asarray(7, ta)
        b_s, b_z = np.float32(0.03), np.asarray(-2 if tb == "int8" else 130, tb)
    else:  # ORT: per-row A scale (M, 1), per-column B scale (1, N)
        a_s, a_z = rng.uniform(0.01, 0.03, (m, 1)).astype(np.float32), _ints(rng, ta, (m, 1))
        b_s, b_z = rng.uniform(0.01, 0.03, (1, n)).astype(np.float32), np.zeros((1, n), tb)
    y_s, y_z = np.float32(0.9), np.asarray(-1 if ta == "int8" else 128, ta)
    # onnxruntime takes per-row scales but not per-row zero points
    check("QLinearMatMul", [a, a_s, a_z, b, b_s, b_z, y_s, y_z], 10, use_ort=per == "tensor")


def test_qlinear_matmul_3d_and_float16_scales():
    rng = np.random.default_rng(8)
    a, b = _ints(rng, "uint8", (2, 3, 8)), _ints(rng, "uint8", (2, 8, 4))
    ins = [a, np.float32(0.05), np.uint8(100), b, np.float32(0.04), np.uint8(120),
           np.float32(0.5), np.uint8(90)]  # fmt: skip
    ins = [np.asarray(v) for v in ins]
    check("QLinearMatMul", ins, 10)
    half = [v.astype(np.float16) if v.dtype == np.float32 else v for v in ins]
    check("QLinearMatMul", half, 21, use_ort=False)


# -- ConvInteger and QLinearConv ---------------------------------------------------------------

CONV_ATTRS = [
    {},
    {"pads": [1, 1, 1, 1]},
    {"strides": [2, 2], "pads": [1, 0, 1, 2]},
    {"dilations": [2, 1], "group": 2},
    {"auto_pad": "SAME_UPPER", "strides": [2, 1]},
]


@pytest.mark.parametrize("attrs", CONV_ATTRS)
@pytest.mark.parametrize("tx,tw", [("uint8", "uint8"), ("uint8", "int8")])
def test_conv_integer(attrs, tx, tw):
    rng = np.random.default_rng(9)
    g = attrs.get("group", 1)
    x = _ints(rng, tx, (2, 4, 7, 6))
    w = _ints(rng, tw, (6, 4 // g, 3, 2))
    xz, wz = np.asarray(131, tx), np.asarray(3, tw)
    check("ConvInteger", [x, w, xz, wz], 10, **attrs)
    check("ConvInteger", [x, w], 10, **attrs)


def test_conv_integer_per_channel_zero_point_1d():
    rng = np.random.default_rng(10)
    x, w = _ints(rng, "uint8", (1, 2, 9)), _ints(rng, "uint8", (3, 2, 4))
    xz, wz = np.uint8(7), np.array([0, 50, 255], np.uint8)
    # onnxruntime takes one W zero point only, onnx's reference fails on it: the formula
    xp = np.pad(x.astype(np.int64) - 7, ((0, 0), (0, 0), (2, 1)))
    ws = w.astype(np.int64) - wz.astype(np.int64)[:, None, None]
    want = np.stack([np.einsum("nck,mck->nm", xp[:, :, o : o + 4], ws) for o in range(9)], -1)
    ins = [x, w, np.asarray(xz), wz]
    for const in ((), (1, 3)):
        model = make_model("ConvInteger", ins, 10, const, pads=[2, 1])
        assert_same(graphrt_run(model, ins, const), [want.astype(np.int32)])


@pytest.mark.parametrize("attrs", CONV_ATTRS)
@pytest.mark.parametrize("tx,tw", [("uint8", "int8"), ("int8", "int8"), ("uint8", "uint8")])
@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_conv(attrs, tx, tw, per_channel):
    rng = np.random.default_rng(11)
    g = attrs.get("group", 1)
    x = _ints(rng, tx, (1, 4, 8, 7))
    w = _ints(rng, tw, (6, 4 // g, 3, 3))
    x_s, x_z = np.float32(0.05), np.asarray(-5 if tx == "int8" else 140, tx)
    if per_channel:
        w_s, w_z = rng.uniform(0.005, 0.02, 6).astype(np.float32), np.zeros(6, tw)
    else:
        w_s, w_z = np.float32(0.01), np.asarray(0 if tw == "int8" else 128, tw)
    y_s, y_z = np.float32(0.3), np.asarray(3 if tx == "int8" else 120, tx)
    bias = rng.integers(-3000, 3000, 6).astype(np.int32)
    ins = [x, x_s, x_z, w, w_s, w_z, y_s, y_z, bias]
    check("QLinearConv", ins, 10, **attrs)
    check("QLinearConv", ins[:8], 10, **attrs)


# -- exact mode, threads and ops-simd ----------------------------------------------------------


def _big_cases():
    rng = np.random.default_rng(12)
    a = _ints(rng, "uint8", (300, 768))
    b = _ints(rng, "int8", (768, 64))
    mm = ([a, b, np.uint8(120), np.int8(0)], "MatMulInteger", {}, (1, 3))
    a3 = rng.integers(100, 141, (300, 3072)).astype(np.uint8)  # checked, and passing
    checked = (
        [a3, _ints(rng, "int8", (3072, 64)), np.uint8(120), np.int8(0)], "MatMulInteger", {},
        (1, 3),
    )  # fmt: skip
    qmm = (
        [a, np.float32(0.02), np.uint8(120), b, np.float32(0.01), np.int8(0), np.float32(2.0),
         np.uint8(128)],
        "QLinearMatMul", {}, (1, 2, 3, 4, 5, 6, 7),
    )  # fmt: skip
    x = _ints(rng, "uint8", (2, 16, 40, 40))
    w = _ints(rng, "int8", (32, 16, 3, 3))
    qconv = (
        [x, np.float32(0.02), np.uint8(110), w, np.float32(0.01), np.int8(0), np.float32(1.5),
         np.uint8(100), rng.integers(-500, 500, 32).astype(np.int32)],
        "QLinearConv", {"pads": [1, 1, 1, 1]}, (1, 2, 3, 4, 5, 6, 7, 8),
    )  # fmt: skip
    xq = (rng.standard_normal((64, 300)) * 4).astype(np.float32)
    quant = ([xq, np.float32(0.03), np.int8(-2)], "QuantizeLinear", {}, (1, 2))
    dyn = ([xq], "DynamicQuantizeLinear", {}, ())
    return {
        "matmulinteger": mm,
        "checked": checked,
        "qlinearmatmul": qmm,
        "qlinearconv": qconv,
        "quantize": quant,
        "dynamic": dyn,
    }


@pytest.mark.parametrize("name", list(_big_cases()))
def test_exact_mode_threads_same_bits(name):
    ins, op, attrs, const = _big_cases()[name]
    ins = [np.asarray(v) for v in ins]
    n_out = 3 if op == "DynamicQuantizeLinear" else 1
    model = make_model(op, ins, 10 if op != "DynamicQuantizeLinear" else 11, const, n_out, **attrs)
    runs = [graphrt_run(model, ins, const, mode="exact", intra_op_threads=t) for t in (1, 2, 2)] + [
        graphrt_run(model, ins, const, intra_op_threads=2)
    ]
    for r in runs[1:]:
        assert_same(r, runs[0])
    assert_same(runs[0], oracle(model, ins, const))


@pytest.mark.parametrize("name", ["matmulinteger", "qlinearconv"])
def test_same_kernels_with_and_without_simd(name):
    """ops-simd may take MatMul and Conv, never these: the results do not change with it."""
    ins, op, attrs, const = _big_cases()[name]
    ins = [np.asarray(v) for v in ins]
    model = make_model(op, ins, 10, const, **attrs)
    every = graphrt.Session(model)
    basic = graphrt.Session(model, plugins=["ops-basic"])
    assert_same(every.run(None, feeds(ins, const)), basic.run(None, feeds(ins, const)))
    assert_same(every.run(None, feeds(ins, const)), oracle(model, ins, const))


# -- steady state ------------------------------------------------------------------------------


def _bound_step(op, inputs, opset, known, n_out=1, **attrs):
    """The kernel prepared and bound as a plan does it (constants known to ``infer``)."""
    from graphrt.attrs import node_info
    from graphrt.plugin import InferContext, KernelContext
    from graphrt_ops_basic.table import OPERATORS

    factory = next(d.factory for d in OPERATORS if d.op_type == op and d.domain == "")
    names = [f"i{k}" for k in range(len(inputs))]
    node = helper.make_node(op, names, [f"o{k}" for k in range(n_out)], **attrs)
    kernel = factory(node_info(node, opset))
    ictx = InferContext(
        [x.dtype for x in inputs],
        [x.shape for x in inputs],
        [x if k in known else None for k, x in enumerate(inputs)],
        n_out,
    )
    kernel.infer(ictx)
    outs = [np.empty(s, d) for d, s in ictx.output_types()]
    ctx = KernelContext(prepared=ictx.prepared, scratch=[np.empty(s, d) for d, s in ictx.scratch])
    return kernel.bind(ctx, inputs, outs), outs


@pytest.mark.parametrize("name", list(_big_cases()))
def test_steady_state_allocates_no_array_data(name):
    from tests._numpy_alloc import count_numpy_allocations

    ins, op, attrs, const = _big_cases()[name]
    ins = [np.asarray(v) for v in ins]
    opset = 11 if op == "DynamicQuantizeLinear" else 10
    n_out = 3 if op == "DynamicQuantizeLinear" else 1
    step, outs = _bound_step(op, ins, opset, const, n_out, **attrs)
    step()
    want = [o.copy() for o in outs]
    with count_numpy_allocations() as counter:
        step()
    assert counter.count == 0, f"{counter.count} numpy allocations ({counter.bytes} bytes)"
    assert_same(outs, want)
    assert_same(outs, oracle(make_model(op, ins, opset, const, n_out, **attrs), ins, const))


def test_quantize_refuses_an_input_type_the_spec_does_not_take():
    model = make_model("QuantizeLinear", [np.ones((2, 3), np.int64), np.float32(0.1)], 21, (1,))
    with pytest.raises(graphrt.SessionError) as info:
        graphrt_run(model, [np.ones((2, 3), np.int64), np.float32(0.1)], (1,))
    assert info.value.kind == "invalid_input" and "X must be a float tensor or int32" in str(
        info.value
    )
