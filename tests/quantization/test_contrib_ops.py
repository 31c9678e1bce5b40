"""graphrt-ops-contrib's com.microsoft operators, one node each, against onnxruntime.

Scales and zero points are initializers (read once at planning) and, in a second run, graph
inputs (read per run).  8-bit outputs must be within one unit of onnxruntime's (its MLAS
kernels order float operations their own way, which may move a value across a rounding tie),
float outputs within float32 rounding of the products' scale.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import graphrt
from tests._models import ort_session

MS = "com.microsoft"
RNG = np.random.default_rng(11)


def _model(op, inputs, const, attrs=None) -> onnx.ModelProto:
    names = ["" if x is None else f"i{k}" for k, x in enumerate(inputs)]
    decl, inits = [], []
    for k, x in enumerate(inputs):
        if x is None:
            continue
        if k in const:
            inits.append(numpy_helper.from_array(np.asarray(x), f"i{k}"))
        else:
            elem = helper.np_dtype_to_tensor_dtype(np.asarray(x).dtype)
            decl.append(helper.make_tensor_value_info(f"i{k}", elem, np.shape(x)))
    node = helper.make_node(op, names, ["y"], domain=MS, **(attrs or {}))
    out = helper.make_empty_tensor_value_info("y")
    graph = helper.make_graph([node], "g", decl, [out], inits)
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]
    )


def _check(op, inputs, data=(0,), attrs=None, float_atol=None):
    """Run with everything but ``data`` as initializers, then everything as inputs."""
    inputs = [None if x is None else np.asarray(x) for x in inputs]
    for const in ({k for k in range(len(inputs)) if k not in data}, set()):
        m = _model(op, inputs, const, attrs)
        feed = {f"i{k}": x for k, x in enumerate(inputs) if x is not None and k not in const}
        (ref,) = ort_session(m).run(None, feed)
        (got,) = graphrt.Session(m).run(None, feed)
        assert got.dtype == ref.dtype and got.shape == ref.shape
        if ref.dtype.kind == "f":
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=float_atol or 0)
        else:
            assert np.abs(got.astype(np.int32) - ref).max() <= 1
            assert np.mean(got != ref) < 0.02  # ties only
    return got


def _codes(dtype, shape):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def _zero(dtype, v):
    return np.array(v, dtype)


T8 = [np.uint8, np.int8]


@pytest.mark.parametrize("dtype", T8, ids=["u8", "i8"])
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_binary(op, dtype):
    a, b = _codes(dtype, (3, 4, 5)), _codes(dtype, (4, 1))
    za, zb, zc = _zero(dtype, 7), _zero(dtype, -3 if dtype == np.int8 else 200), _zero(dtype, 11)
    sa, sb, sc = (
        np.float32(0.0513),
        np.float32(0.0217),
        np.float32(0.0731 if op == "QLinearAdd" else 0.317),
    )
    _check(op, [a, sa, za, b, sb, zb, sc, zc], data=(0, 3))


@pytest.mark.parametrize("dtype", T8, ids=["u8", "i8"])
@pytest.mark.parametrize("op", ["QLinearSigmoid", "QLinearLeakyRelu"])
def test_lookup(op, dtype):
    x = np.arange(256, dtype=np.uint8).view(dtype).reshape(4, 64)  # every code
    attrs = {"alpha": 0.1} if op == "QLinearLeakyRelu" else {}
    ys = np.float32(1 / 256) if op == "QLinearSigmoid" else np.float32(0.03)
    yz = _zero(dtype, -128 if dtype == np.int8 and op == "QLinearSigmoid" else 5)
    _check(op, [x, np.float32(0.04), _zero(dtype, 10), ys, yz], attrs=attrs)


@pytest.mark.parametrize("dtype", T8, ids=["u8", "i8"])
def test_concat(dtype):
    a, b, c = _codes(dtype, (2, 3, 4)), _codes(dtype, (2, 5, 4)), _codes(dtype, (2, 1, 4))
    ys, yz = np.float32(0.05), _zero(dtype, 3)
    inputs = [ys, yz, a, ys, yz, b, np.float32(0.11), _zero(dtype, -1 if dtype == np.int8 else 9)]
    inputs += [c, np.float32(0.02), _zero(dtype, 4)]
    _check("QLinearConcat", inputs, data=(2, 5, 8), attrs={"axis": 1})


@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("dtype", T8, ids=["u8", "i8"])
def test_global_average_pool(dtype, channels_last):
    x = _codes(dtype, (2, 5, 6, 7))
    inputs = [x, np.float32(0.03), _zero(dtype, 4), np.float32(0.01), _zero(dtype, 2)]
    _check("QLinearGlobalAveragePool", inputs, attrs={"channels_last": channels_last})


@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [3, 3], "strides": [2, 2]},
        {"kernel_shape": [3, 2], "pads": [1, 1, 1, 0], "count_include_pad": 1},
        {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1, "strides": [2, 2]},
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "channels_last": 1},
    ],
    ids=["plain", "count-pad", "ceil", "nhwc"],
)
@pytest.mark.parametrize("dtype", T8, ids=["u8", "i8"])
def test_average_pool(dtype, attrs):
    x = _codes(dtype, (2, 3, 7, 8))
    zy = _zero(dtype, -2 if dtype == np.int8 else 9)
    inputs = [x, np.float32(0.0317), _zero(dtype, 4), np.float32(0.0213), zy]
    _check("QLinearAveragePool", inputs, attrs=attrs)


@pytest.mark.parametrize("opset,axis", [(13, -1), (13, 1), (12, 1)])
@pytest.mark.parametrize("dtype", T8, ids=["u8", "i8"])
def test_softmax(dtype, opset, axis):
    x = _codes(dtype, (2, 3, 10))
    yz = _zero(dtype, -128 if dtype == np.int8 else 0)
    inputs = [x, np.float32(0.08), _zero(dtype, 3), np.float32(1 / 256), yz]
    _check("QLinearSoftmax", inputs, attrs={"opset": opset, "axis": axis})


@pytest.mark.parametrize("quantized", [True, False], ids=["int8-out", "float-out"])
@pytest.mark.parametrize("trans", [(0, 0), (1, 1), (0, 1)], ids=["nn", "tt", "nt"])
@pytest.mark.parametrize("per_column", [False, True], ids=["tensor", "column"])
def test_qgemm(per_column, trans, quantized):
    ta, tb = trans
    m, k, n = 6, 40, 9
    a = _codes(np.uint8, (k, m) if ta else (m, k))
    b = _codes(np.int8, (n, k) if tb else (k, n))
    bs = (RNG.random(n) * 0.01 + 0.001).astype(np.float32) if per_column else np.float32(0.004)
    bz = np.zeros(n, np.int8) if per_column else np.int8(0)
    c = RNG.integers(-5000, 5000, n).astype(np.int32)
    inputs = [a, np.float32(0.02), np.uint8(130), b, bs, bz, c]
    if quantized:
        inputs += [np.float32(0.5), np.uint8(128)]
    got = _check(
        "QGemm", inputs, attrs={"alpha": 0.75, "transA": ta, "transB": tb}, float_atol=1e-5
    )
    assert got.shape == (m, n)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("per_column", [False, True], ids=["tensor", "column"])
def test_matmul_integer_to_float(per_column, bias):
    a, b = _codes(np.uint8, (2, 5, 48)), _codes(np.int8, (48, 7))
    bs = (RNG.random(7) * 0.01).astype(np.float32) if per_column else np.float32(0.003)
    bz = _codes(np.int8, (7,)) if per_column else np.int8(-2)
    inputs = [a, b, np.float32(0.02), bs, np.uint8(120), bz]
    inputs.append(RNG.standard_normal(7).astype(np.float32) if bias else None)
    _check("MatMulIntegerToFloat", inputs, float_atol=1e-5)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("bz", [None, -3], ids=["no-zp", "zp"])
def test_dynamic_quantize_matmul(bz, bias):
    a = RNG.standard_normal((3, 4, 32)).astype(np.float32)
    b = _codes(np.int8, (32, 8))
    inputs = [a, b, (RNG.random(8) * 0.01).astype(np.float32)]
    inputs.append(None if bz is None else np.full(8, bz, np.int8))
    inputs.append(RNG.standard_normal(8).astype(np.float32) if bias else None)
    # the A codes come from the same rule; a tie in x / scale may move one code by one
    scale = float((max(a.max(), 0) - min(a.min(), 0)) / 255)
    _check("DynamicQuantizeMatMul", inputs, float_atol=2 * scale * 0.01 * 128)
