"""The math family of graphrt-ops-basic: trigonometric and hyperbolic functions, Round, IsInf,
IsNaN, the bitwise operators, BitCast, more activations (PRelu, Celu, Shrink, Softsign,
ThresholdedRelu, HardSwish, Mish, Swish) and normalizations (LpNormalization,
GroupNormalization, MeanVarianceNormalization).

onnx's node cases run through the kernels; the focused tests check every attribute and opset
form against the spec's formulas (written here in numpy, usually in float64) or onnx's
reference evaluator, and in-place execution.  Through sessions, test_math_contract.py checks
errors by kind, exact-mode bits, steady states and a random model against onnxruntime.
"""

from __future__ import annotations

import struct

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto

from tests._versions import ONNX
from tests.ops._math import (
    FACTORIES,
    INF,
    NAN,
    OPS,
    RNG,
    TRIG,
    bind_in_place,
    bits,
    close,
    error_of,
    evaluate,
    f64,
    int_values,
    reference,
    same,
    schema_missing,
    spec_shrink,
)
from tests.ops.node_cases import node_case_params, run_case

# -- onnx's node cases --------------------------------------------------------------------------

NODE_CASE_FAILURES = {}
if ONNX < (1, 21):
    NODE_CASE_FAILURES["test_l2normalization_axis_0"] = (
        "onnx < 1.21 only: the case's expected output has NaN where a slice along axis 0 is all "
        "zeros (0/0); onnx 1.21 (onnx#7618) specified LpNormalization's zero-norm output as 0 "
        "and regenerated the case, which graphrt follows"
    )
NODE_CASES = node_case_params(OPS, NODE_CASE_FAILURES)


def test_every_operator_has_a_kernel_and_node_cases():
    assert set(FACTORIES) == OPS
    covered = {p.values[0].graph.node[0].op_type for p in NODE_CASES}
    assert covered == {op for op in OPS if not schema_missing(op)}


@pytest.mark.parametrize(("model", "inputs", "outputs"), NODE_CASES)
def test_onnx_node_case(model, inputs, outputs):
    inputs = [np.asarray(x) if isinstance(x, np.generic) else x for x in inputs]
    with np.errstate(all="ignore"):
        run_case(FACTORIES[model.graph.node[0].op_type], model, inputs, outputs)


# -- trigonometric and hyperbolic ---------------------------------------------------------------

EDGES = np.array([-3.0, -2, -1, -0.5, -0.0, 0.0, 1e-30, 0.5, 0.999, 1, 1.5, 2, 40, INF, -INF, NAN])


@pytest.mark.parametrize("op", sorted(TRIG))
@pytest.mark.parametrize(
    ("dtype", "rtol"), [(np.float16, 1e-3), (np.float32, 2e-6), (np.float64, 1e-14)]
)
def test_trig_against_float64_values_out_of_domain_included(op, dtype, rtol):
    x = EDGES.astype(dtype)
    with np.errstate(all="ignore"):
        want = TRIG[op](x.astype(np.float64))  # the function, computed in float64
        want = want.astype(dtype).astype(np.float64)  # what the type can hold (inf on overflow)
    got = evaluate(op, x)
    assert got.dtype == dtype and got.shape == x.shape
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=0)
    assert list(np.signbit(got[4:6])) == list(np.signbit(want[4:6]))  # odd functions keep -0


def test_trig_in_bfloat16_and_an_out_of_domain_nan():
    x = np.array([-0.5, 0.0, 0.25, 0.75], ml_dtypes.bfloat16)
    got = evaluate("Asin", x)
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(got.astype(np.float64), np.arcsin(x.astype(np.float64)), rtol=1e-2)
    assert np.isnan(evaluate("Acosh", np.float32([0.5]))[0])
    assert evaluate("Atanh", np.float32([1.0]))[0] == INF


def test_cos_at_opset_17_as_the_window_functions_use_it():
    x = np.linspace(0, 6.3, 50, dtype=np.float32)
    close(evaluate("Cos", x, opset=17), np.cos(x.astype(np.float64)), np.float32)


# -- Round, IsInf, IsNaN ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
def test_round_halves_to_even(dtype):
    x = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.3, -2.7, 0.9, -0.0, 7.0, INF, -INF, NAN]
    want = [0.0, 2.0, 2.0, -0.0, -2.0, -2.0, 2.0, -3.0, 1.0, -0.0, 7.0, INF, -INF, NAN]
    got = evaluate("Round", np.array(x, dtype))
    same(got, np.array(want, dtype))
    assert np.signbit(got[3]) and np.signbit(got[9])  # -0.5 -> -0, -0 stays -0
    if dtype == np.float64:  # 2^52 + 0.5 is not representable; 2^52 + 1 is integral already
        big = np.array([2.0**52 + 1, 4503599627370495.5], np.float64)
        same(evaluate("Round", big), np.array([2.0**52 + 1, 4503599627370496.0]))


@pytest.mark.parametrize(
    ("pos", "neg", "want"),
    [
        (1, 1, [True, True, False, False, False]),
        (1, 0, [True, False, False, False, False]),
        (0, 1, [False, True, False, False, False]),
        (0, 0, [False, False, False, False, False]),
    ],
)
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
def test_isinf_sides(pos, neg, want, dtype):
    x = np.array([INF, -INF, NAN, 0.0, -3.5], dtype)
    got = evaluate("IsInf", x, opset=20, detect_positive=pos, detect_negative=neg)
    same(got, np.array(want), np.bool_)


def test_isinf_and_isnan_of_the_float8_types():
    values = np.array([INF, -INF, NAN, 1.0], np.float32)
    for dtype, has_inf in [
        (ml_dtypes.float8_e5m2, True),
        (ml_dtypes.float8_e4m3fn, False),  # no infinity: inf converts to NaN
        (ml_dtypes.float8_e4m3fnuz, False),
        (ml_dtypes.float8_e5m2fnuz, False),
    ]:
        x = values.astype(dtype)
        inf = [True, True, False, False] if has_inf else [False] * 4
        same(evaluate("IsInf", x, opset=20), np.array(inf))
        same(evaluate("IsInf", x, opset=20, detect_negative=0), np.array(inf[:1] + [False] * 3))
        nan = [False, False, True, False] if has_inf else [True, True, True, False]
        same(evaluate("IsNaN", x, opset=20), np.array(nan))


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
def test_isnan(dtype):
    x = np.array([[NAN, 1.0], [-INF, -NAN]], dtype)
    same(evaluate("IsNaN", x, opset=13), np.array([[True, False], [False, True]]))


# -- bitwise operators --------------------------------------------------------------------------

INT_TYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
PY_BITWISE = {
    "BitwiseAnd": lambda a, b: a & b,
    "BitwiseOr": lambda a, b: a | b,
    "BitwiseXor": lambda a, b: a ^ b,
}


@pytest.mark.parametrize("op", sorted(PY_BITWISE))
@pytest.mark.parametrize("dtype", INT_TYPES)
def test_bitwise_binary_against_python_integers(op, dtype):
    a, b = int_values(dtype, (3, 4, 5)), int_values(dtype, (5,))  # b broadcasts
    want = np.array(
        [PY_BITWISE[op](int(u), int(v)) for u, v in zip(a.reshape(-1), np.tile(b, 12))], dtype
    ).reshape(3, 4, 5)
    same(evaluate(op, a, b, opset=18), want)
    same(evaluate(op, b, a, opset=18), want)  # broadcasting either way


@pytest.mark.parametrize("dtype", INT_TYPES)
def test_bitwise_not_against_python_integers(dtype):
    x = int_values(dtype, (4, 6))
    mask = (1 << (8 * np.dtype(dtype).itemsize)) - 1
    if np.dtype(dtype).kind == "i":
        want = [~int(v) for v in x.reshape(-1)]
    else:
        want = [~int(v) & mask for v in x.reshape(-1)]
    same(evaluate("BitwiseNot", x, opset=18), np.array(want, dtype).reshape(4, 6))


# -- BitCast ------------------------------------------------------------------------------------


def test_bitcast_float_and_integer_bits():
    x = np.array([1.0, -2.5, INF, NAN, -0.0], np.float32)
    want = np.array([struct.unpack("<i", struct.pack("<f", v))[0] for v in x], np.int32)
    same(evaluate("BitCast", x, opset=26, to=TensorProto.INT32), want)
    back = evaluate("BitCast", want, opset=26, to=TensorProto.FLOAT)
    assert bits(back) == bits(x)  # NaN payloads and -0 survive
    d = np.array([[1.5, -1e300]], np.float64)
    want = np.array([[struct.unpack("<q", struct.pack("<d", v))[0] for v in d[0]]], np.int64)
    same(evaluate("BitCast", d, opset=26, to=TensorProto.INT64), want)
    s = evaluate("BitCast", np.array(1.0, np.float32), opset=26, to=TensorProto.UINT32)
    same(s, np.array(0x3F800000, np.uint32))


def test_bitcast_of_the_same_width_types():
    h = np.array([1.0, -2.0, 65504.0], np.float16)
    got = evaluate("BitCast", h, opset=26, to=TensorProto.BFLOAT16)
    assert got.dtype == ml_dtypes.bfloat16 and bits(got) == bits(h)
    same(
        evaluate("BitCast", np.array([True, False]), opset=26, to=TensorProto.UINT8),
        np.array([1, 0], np.uint8),
    )
    same(
        evaluate("BitCast", np.array([255, 128, 1], np.uint8), opset=26, to=TensorProto.INT8),
        np.array([-1, -128, 1], np.int8),
    )
    c = np.array([1 + 2j], np.complex64)
    got = evaluate("BitCast", c, opset=26, to=TensorProto.INT64)
    assert got.tolist() == [struct.unpack("<q", struct.pack("<ff", 1.0, 2.0))[0]]


def test_bitcast_of_the_4_bit_types():
    x = np.array([-1, 7, -8, 0], ml_dtypes.int4)
    got = evaluate("BitCast", x, opset=26, to=TensorProto.UINT4)
    assert got.dtype == ml_dtypes.uint4 and got.astype(np.int32).tolist() == [15, 7, 8, 0]
    back = evaluate("BitCast", got, opset=26, to=TensorProto.INT4)
    assert back.astype(np.int32).tolist() == [-1, 7, -8, 0]
    fp4 = evaluate(
        "BitCast", np.array([2, 15], ml_dtypes.uint4), opset=26, to=TensorProto.FLOAT4E2M1
    )
    assert fp4.astype(np.float32).tolist() == [1.0, -6.0]  # 0b0010 = 1.0, 0b1111 = -6


# -- PRelu --------------------------------------------------------------------------------------


def spec_prelu(x, slope):
    return np.where(x < 0, slope * x, x)


@pytest.mark.parametrize("slope_shape", [(5,), (4, 1), (3, 4, 5), (1,), (), (1, 4, 5)])
def test_prelu_broadcasts_the_slope_to_x(slope_shape):
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    slope = RNG.standard_normal(slope_shape).astype(np.float32)
    for opset in (7, 9, 16):
        same(evaluate("PRelu", x, slope, opset=opset), spec_prelu(x, slope).astype(np.float32))
    np.testing.assert_array_equal(
        evaluate("PRelu", x, slope, opset=16), reference("PRelu", x, slope, opset=16)
    )


def test_prelu_before_opset_7_has_one_slope_per_channel():
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    slope = np.float32([0.1, 0.2, 0.3])
    want = spec_prelu(x, slope.reshape(3, 1, 1))
    for opset in (1, 6):
        same(evaluate("PRelu", x, slope, opset=opset), want)
        same(evaluate("PRelu", x, np.float32([0.25]), opset=opset), spec_prelu(x, np.float32(0.25)))
    # from opset 7 the slope broadcasts numpy's way: [3] against X's last axis (5) fails
    assert error_of(lambda: evaluate("PRelu", x, slope, opset=7)).kind == "invalid_input"


@pytest.mark.parametrize(
    "dtype", [np.int32, np.int64, np.uint32, np.uint64, np.float16, np.float64]
)
def test_prelu_types(dtype):
    x = (
        np.array([[-3, -1, 0, 2], [5, -7, 1, 0]]).astype(dtype)
        if np.dtype(dtype).kind != "u"
        else (np.array([[3, 1, 0, 2], [5, 7, 1, 0]]).astype(dtype))
    )
    slope = np.array([2, 3, 4, 5]).astype(dtype)
    same(evaluate("PRelu", x, slope, opset=16), spec_prelu(x, slope).astype(dtype))


def test_prelu_in_place_and_special_values():
    x = np.float32([-2, -0.0, 0.0, 3, NAN, -INF, INF])
    slope = np.float32([0.5])
    want = np.float32([-1, -0.0, 0.0, 3, NAN, -INF, INF])
    got = bind_in_place("PRelu", x, slope, opset=16)
    same(got, want)
    assert np.signbit(got[1])  # -0 is not below 0: x itself


# -- element-wise activations -------------------------------------------------------------------

ACT_X = np.concatenate(
    [np.float32([-100, -30, -5, -1e-3, -0.0, 0.0, 1e-3, 2.9, 3.1, 30, 100]),
     RNG.standard_normal(40).astype(np.float32) * 4]
)  # fmt: skip


@pytest.mark.parametrize("alpha", [1.0, 2.0, 0.5])
def test_celu_against_its_formula(alpha):
    x = f64(ACT_X)
    want = np.maximum(0, x) + np.minimum(0, alpha * np.expm1(x / alpha))  # exp - 1, accurately
    close(evaluate("Celu", ACT_X, opset=12, alpha=alpha), want, np.float32, rtol=2e-6, atol=1e-7)
    close(evaluate("Celu", x, opset=28, alpha=alpha), want, np.float64, rtol=1e-14, atol=1e-300)
    got = evaluate("Celu", ACT_X.astype(np.float16), opset=28, alpha=alpha)
    close(got, want, np.float16, rtol=2e-3, atol=1e-4)


def test_celu_large_values():
    got = evaluate("Celu", np.float32([1e30, -1e30, 89, -89]), opset=12, alpha=0.5)
    same(got, np.float32([1e30, -0.5, 89, -0.5]))


def test_celu_against_the_reference_evaluator():
    got = evaluate("Celu", ACT_X, opset=12, alpha=1.5)
    x = f64(ACT_X)
    close(got, np.maximum(x, 0) + np.minimum(0, 1.5 * np.expm1(x / 1.5)), np.float32, atol=0)
    # onnx's reference computed alpha * (exp(x / alpha) - 1) in float32 (onnx 1.19), which
    # cancels near 0 (about one float32 ulp of alpha absolute); onnx#8354 moved it to
    # np.expm1, as the 1.23 of the default env has.  Older: compare within that error.
    atol = 0 if ONNX >= (1, 23) else 1.5 * np.finfo(np.float32).eps
    np.testing.assert_allclose(
        got, reference("Celu", ACT_X, opset=12, alpha=1.5), rtol=1e-6, atol=atol
    )


def test_softsign_hardswish_mish_against_their_formulas():
    x = f64(ACT_X)
    close(evaluate("Softsign", ACT_X), x / (1 + np.abs(x)), np.float32, rtol=1e-6)
    hard = x * np.maximum(0, np.minimum(1, x / 6 + 0.5))
    close(evaluate("HardSwish", ACT_X), hard, np.float32, rtol=1e-6, atol=2e-7)  # x/6 + 0.5 cancels
    mish = x * np.tanh(np.log1p(np.exp(x)))
    close(evaluate("Mish", ACT_X), mish, np.float32, rtol=2e-6, atol=1e-30)
    for op in ("Softsign", "HardSwish", "Mish"):
        got = evaluate(op, ACT_X.astype(np.float64))
        want = {"Softsign": x / (1 + np.abs(x)), "HardSwish": hard, "Mish": mish}[op]
        close(got, want, np.float64, rtol=1e-13, atol=1e-15)  # HardSwish cancels near -3


@pytest.mark.parametrize("alpha", [1.0, 0.5, -2.0])
def test_swish_against_its_formula(alpha):
    x = f64(ACT_X)
    want = x / (1 + np.exp(-alpha * x))
    close(evaluate("Swish", ACT_X, opset=24, alpha=alpha), want, np.float32, rtol=3e-6, atol=1e-30)
    got = evaluate("Swish", ACT_X.astype(ml_dtypes.bfloat16), opset=24, alpha=alpha)
    close(got, want, ml_dtypes.bfloat16, rtol=2e-2, atol=1e-2)


@pytest.mark.parametrize("op", ["Softsign", "HardSwish", "Mish", "Celu", "Swish"])
def test_activations_in_place_and_nan(op):
    x = ACT_X.copy()
    x[0] = NAN
    want = evaluate(op, x, opset=24)
    got = bind_in_place(op, x, opset=24)
    same(got, want)
    assert np.isnan(got[0])


@pytest.mark.parametrize("alpha", [1.0, 2.5, -1.0, 0.0])
def test_thresholded_relu(alpha):
    x = np.float32([-INF, -2, -1, -0.0, 0.0, 0.5, 1, 2.5, 3, INF, NAN])
    want = np.where(x > alpha, x, 0).astype(np.float32)
    want[-1] = 0  # NaN is not above alpha
    same(evaluate("ThresholdedRelu", x, alpha=alpha), want)
    same(bind_in_place("ThresholdedRelu", x, alpha=alpha), want)


@pytest.mark.parametrize(("lambd", "bias"), [(0.5, 0.0), (1.5, 1.5), (1.0, 0.25), (0.0, -1.0)])
def test_shrink_floats(lambd, bias):
    x = np.float32([-INF, -3, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 3, INF, NAN])
    want = spec_shrink(f64(x), lambd, bias)
    want[-1] = 0  # NaN is neither below -lambd nor above lambd
    got = evaluate("Shrink", x, opset=9, lambd=lambd, bias=bias)
    same(got, want.astype(np.float32))
    same(bind_in_place("Shrink", x, opset=9, lambd=lambd, bias=bias), want.astype(np.float32))
    got16 = evaluate("Shrink", x.astype(np.float16), opset=9, lambd=lambd, bias=bias)
    same(got16, want.astype(np.float16))


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint16])
def test_shrink_integers_truncate(dtype):
    x = np.arange(-5, 6) if np.dtype(dtype).kind == "i" else np.arange(0, 11)
    x = x.astype(dtype)
    got = evaluate(
        "Shrink", x, opset=9, lambd=1.5, bias=1.5 if np.dtype(dtype).kind == "i" else 0.5
    )
    bias = 1.5 if np.dtype(dtype).kind == "i" else 0.5
    want = np.trunc(spec_shrink(f64(x), 1.5, bias)).astype(dtype)
    same(got, want)
    big = np.array([2**40 + 3], np.int64)  # computed in float64, not in a narrow type
    same(evaluate("Shrink", big, opset=9, lambd=0.5, bias=1.0), np.array([2**40 + 2], np.int64))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint32, np.int64, np.uint64])
def test_shrink_integer_results_out_of_range_saturate(dtype):
    info = np.iinfo(dtype)
    x = np.array([info.min, 1, info.max], dtype)
    got = evaluate("Shrink", x, opset=9, lambd=0.5, bias=-10.0)  # x - bias above lambd...
    assert got[2] >= info.max - 4096 and got[1] == 11  # ...saturates near the top
    got = evaluate("Shrink", np.array([2, 3], dtype), opset=9, lambd=0.5, bias=10.0)
    want = [0, 0] if info.min == 0 else [-8, -7]  # 2 - 10 saturates at 0 for unsigned types
    same(got, np.array(want, dtype))


def test_shrink_against_the_reference_evaluator():
    got = evaluate("Shrink", ACT_X, opset=9, lambd=0.7, bias=0.2)
    np.testing.assert_array_equal(got, reference("Shrink", ACT_X, opset=9, lambd=0.7, bias=0.2))


# -- LpNormalization ----------------------------------------------------------------------------


def spec_lp(x, p, axis):
    x = f64(x)
    norm = np.sum(np.abs(x) ** p, axis=axis, keepdims=True) ** (1 / p)
    return np.where(norm == 0, 0, x / np.where(norm == 0, 1, norm))


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_lp_normalization(p, axis):
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    x[1, :, 2] = 0  # a zero norm along axis 1 gives zeros
    x[:, 2, 3] = 0
    x[2, 3, :] = 0
    got = evaluate("LpNormalization", x, p=p, axis=axis)
    close(got, spec_lp(x, p, axis), np.float32, rtol=2e-6, atol=1e-7)
    got16 = evaluate("LpNormalization", x.astype(np.float16), opset=22, p=p, axis=axis)
    close(got16, spec_lp(x.astype(np.float16), p, axis), np.float16, rtol=1e-3, atol=1e-4)
    if p == 2:  # (onnx's reference evaluator sums x, not |x|, for p = 1)
        got_ref = reference("LpNormalization", x, opset=22, p=p, axis=axis)
        np.testing.assert_allclose(got, np.nan_to_num(got_ref), rtol=1e-6, atol=1e-7)


# -- GroupNormalization -------------------------------------------------------------------------


def spec_group_norm(x, scale, bias, groups, eps, per_channel):
    x = f64(x)
    n, c = x.shape[:2]
    g = x.reshape(n, groups, -1)
    mean = g.mean(axis=2, keepdims=True)
    var = ((g - mean) ** 2).mean(axis=2, keepdims=True)
    z = ((g - mean) / np.sqrt(var + eps)).reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    if not per_channel:  # one value per group, for each of its channels
        scale, bias = np.repeat(scale, c // groups), np.repeat(bias, c // groups)
    return z * f64(scale).reshape(shape) + f64(bias).reshape(shape)


@pytest.mark.parametrize("shape", [(2, 6, 4, 3), (3, 6), (1, 6, 2, 2, 2)])
@pytest.mark.parametrize("groups", [1, 2, 3, 6])
def test_group_normalization_both_opsets(shape, groups):
    x = (RNG.standard_normal(shape) * 3 + 1).astype(np.float32)
    c = shape[1]
    scale, bias = (
        RNG.standard_normal(c).astype(np.float32),
        RNG.standard_normal(c).astype(np.float32),
    )
    got = evaluate("GroupNormalization", x, scale, bias, opset=21, num_groups=groups, epsilon=1e-3)
    want = spec_group_norm(x, scale, bias, groups, 1e-3, True)
    close(got, want, np.float32, rtol=1e-4, atol=1e-5)
    gs, gb = scale[:groups], bias[:groups]
    got = evaluate("GroupNormalization", x, gs, gb, opset=18, num_groups=groups)
    close(got, spec_group_norm(x, gs, gb, groups, 1e-5, False), np.float32, rtol=1e-4, atol=1e-5)


def test_group_normalization_stash_type_and_types():
    x = RNG.standard_normal((2, 4, 5, 5)) * 100 + 1e4  # a large mean: float32 statistics lose
    scale, bias = np.ones(4), np.zeros(4)
    want = spec_group_norm(x, scale, bias, 2, 1e-5, True)
    wide = evaluate("GroupNormalization", x, scale, bias, opset=21, num_groups=2, stash_type=11)
    close(wide, want, np.float64, rtol=1e-9, atol=1e-10)
    narrow = evaluate("GroupNormalization", x, scale, bias, opset=21, num_groups=2)  # float32
    close(narrow, want, np.float64, rtol=1e-2, atol=1e-3)
    assert np.abs(narrow - want).max() > 1e-9  # computed in float32 as the attribute says
    x16 = (RNG.standard_normal((2, 4, 3, 3))).astype(np.float16)
    s16, b16 = np.ones(4, np.float16) * 2, np.full(4, 0.5, np.float16)
    got = evaluate("GroupNormalization", x16, s16, b16, opset=21, num_groups=4)
    close(got, spec_group_norm(x16, s16, b16, 4, 1e-5, True), np.float16, rtol=2e-3, atol=2e-3)
    xb = x16.astype(ml_dtypes.bfloat16)
    got = evaluate("GroupNormalization", xb, s16.astype(xb.dtype), b16.astype(xb.dtype), opset=18,
                   num_groups=4)  # fmt: skip
    assert got.dtype == ml_dtypes.bfloat16
    x32 = x.astype(np.float32)
    got = evaluate("GroupNormalization", x32, scale.astype(np.float32), bias.astype(np.float32),
                   opset=21, num_groups=2, stash_type=11)  # fmt: skip
    close(got, want, np.float32, rtol=1e-5, atol=1e-5)


def test_group_normalization_against_the_reference_evaluator():
    x = RNG.standard_normal((3, 4, 2, 2)).astype(np.float32)
    scale, bias = (
        RNG.standard_normal(4).astype(np.float32),
        RNG.standard_normal(4).astype(np.float32),
    )
    got = evaluate("GroupNormalization", x, scale, bias, opset=21, num_groups=2)
    want = reference("GroupNormalization", x, scale, bias, opset=21, num_groups=2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# -- MeanVarianceNormalization ------------------------------------------------------------------


def spec_mvn(x, axes):
    x = f64(x)
    mean = x.mean(axis=axes, keepdims=True)
    std = np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True))
    return (x - mean) / (std + 1e-9)


@pytest.mark.parametrize("axes", [None, [2, 3], [1], [0, 1, 2, 3], [-1, 0]])
def test_mean_variance_normalization(axes):
    x = (RNG.standard_normal((2, 3, 4, 5)) * 2 + 3).astype(np.float32)
    attrs = {} if axes is None else {"axes": axes}
    want = spec_mvn(x, tuple(axes) if axes is not None else (0, 2, 3))
    for opset in (9, 13):
        close(evaluate("MeanVarianceNormalization", x, opset=opset, **attrs), want, np.float32,
              rtol=1e-4, atol=1e-5)  # fmt: skip
    x16 = x.astype(np.float16)
    got = evaluate("MeanVarianceNormalization", x16, opset=13, **attrs)
    close(got, spec_mvn(x16, tuple(axes) if axes is not None else (0, 2, 3)), np.float16,
          rtol=3e-3, atol=3e-3)  # fmt: skip


def test_mvn_of_constant_data_is_zero_not_nan():
    x = np.full((2, 3, 4, 4), 0.1, np.float32)
    got = evaluate("MeanVarianceNormalization", x, opset=13)
    assert not np.isnan(got).any() and np.abs(got).max() < 1e-2


def test_mvn_against_the_reference_evaluator():
    x = RNG.standard_normal((3, 3, 3, 1)).astype(np.float32)
    got = evaluate("MeanVarianceNormalization", x, opset=13)
    want = reference("MeanVarianceNormalization", x, opset=13)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
