"""Element-wise operators by opset (against onnx's reference evaluator and the spec's text):
the legacy broadcast attribute, the Softmax family's 2-D coercion, reductions, Clip's bounds,
Dropout; and Cast (strings, float8 saturation, e8m0 rounding modes, opset 1's type names,
CastLike)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto

from graphrt.errors import SessionError
from graphrt.kernel import evaluate_node
from tests._versions import ONNX
from tests.ops._elementwise import RNG, X, bits, evaluate, kernel_for, reference

# -- older opsets (against the reference evaluator) ---------------------------------------------


def test_legacy_broadcast_attribute_aligns_b_at_axis():
    a = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    b = RNG.standard_normal((3, 4)).astype(np.float32)
    got = evaluate("Add", a, b, opset=6, broadcast=1, axis=1)
    np.testing.assert_array_equal(got, a + b[:, :, None])
    got = evaluate("Less", a, b[0, :1].reshape(1), opset=6, broadcast=1)
    np.testing.assert_array_equal(got, a < b[0, 0])


def _legacy_along_axis(op: str, x: np.ndarray, axis: int) -> np.ndarray:
    """Opsets 1-12 from the spec text: coerce to 2-D at ``axis``, work along the second dim."""
    rows = x.reshape(math.prod(x.shape[:axis]), -1).astype(np.float64)
    if op == "Hardmax":
        out = np.zeros_like(rows)
        out[np.arange(len(rows)), rows.argmax(axis=1)] = 1
    else:
        shifted = rows - rows.max(axis=1, keepdims=True)
        logsum = np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        out = shifted - logsum if op == "LogSoftmax" else np.exp(shifted - logsum)
    return out.reshape(x.shape)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset", [1, 11, 13])
@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1])
def test_softmax_family_semantics_by_opset(op, opset, axis):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    x[1, 2, 1] = x[1, 2, 3] = 9  # a tie: Hardmax takes the first
    attrs = {} if axis is None else {"axis": axis}
    got = evaluate(op, x, opset=opset, **attrs)
    if opset < 13:
        # onnx's reference evaluator runs these opsets with opset 13's single-axis meaning,
        # against their spec text, so the oracle here is the text itself
        want = _legacy_along_axis(op, x, (1 if axis is None else axis) % 3)
    else:
        want = reference(op, x, opset=opset, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _reduction_versions():
    for op in ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"]:
        since = 13 if op == "ReduceSum" else 18  # axes become an input
        for opset in (11, 13, 18):
            if opset < since:
                yield op, opset, None
            else:
                yield op, opset, 0
                yield op, opset, 1


@pytest.mark.parametrize(("op", "opset", "noop"), list(_reduction_versions()))
@pytest.mark.parametrize("axes", [None, [1], [0, -1], []])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reductions_by_opset(op, opset, noop, axes, keepdims):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    as_input = noop is not None
    attrs = {"keepdims": keepdims}
    if as_input:
        attrs["noop_with_empty_axes"] = noop
    inputs = [x]
    if as_input and axes is not None:
        inputs.append(np.array(axes, np.int64))
    elif not as_input and axes:
        attrs["axes"] = axes
    got = evaluate(op, *inputs, opset=opset, **attrs)
    if ONNX < (1, 20) and op != "ReduceSum" and noop and axes == []:
        # onnx's reference evaluator before 1.20 reduces over every axis when the axes input
        # is empty, noop_with_empty_axes=1 notwithstanding (its ReduceSum alone got it right);
        # the spec: the input is not reduced
        want = x
    else:
        want = reference(op, *inputs, opset=opset, **attrs)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_reductions_over_nothing_give_the_identity():
    x = np.zeros((2, 0, 3), np.float32)
    assert evaluate("ReduceSum", x, np.int64([1]), opset=13).tolist() == [[[0, 0, 0]]] * 2
    assert (evaluate("ReduceMax", x, np.int64([1]), opset=18) == -np.inf).all()
    assert (
        evaluate("ReduceMin", x.astype(np.int32), np.int64([1]), opset=18) == np.iinfo(np.int32).max
    ).all()
    assert (evaluate("ReduceProd", x, np.int64([1]), opset=18) == 1).all()


@pytest.mark.parametrize("opset", [1, 6, 11, 12, 13])
def test_clip_bounds_by_opset(opset):
    x = np.linspace(-3, 3, 13).astype(np.float32)
    if opset < 11:
        for attrs in [{"min": -1.0, "max": 2.0}, {"min": -1.0}, {"max": 0.5}, {}]:
            if opset == 1 and attrs == {}:
                continue  # the reference evaluator has no Clip-1
            got = evaluate("Clip", x, opset=opset, **attrs)
            want = np.clip(x, attrs.get("min", -np.inf), attrs.get("max", np.inf))
            np.testing.assert_array_equal(got, want)
        return
    kernel = kernel_for("Clip", opset, 3)
    low, high = np.array(-1, np.float32), np.array(2, np.float32)
    for args in [[x, low, high], [x, None, high], [x, low, None], [x, None, None]]:
        got = evaluate_node(kernel, args, 1)[0]
        lo = -np.inf if args[1] is None else -1
        hi = np.inf if args[2] is None else 2
        np.testing.assert_array_equal(got, np.clip(x, lo, hi))


@pytest.mark.parametrize("opset", [6, 7, 10, 12, 13, 22])
def test_dropout_at_inference_copies_and_masks_nothing(opset):
    x = X.copy()
    y, mask = evaluate("Dropout", x, opset=opset, n_outputs=2, ratio=0.3)
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == (np.bool_ if opset >= 10 else np.float32)
    assert (mask == 1).all()


def test_dropout_in_training_mode_is_seeded_and_scaled():
    x = np.ones((64, 64), np.float32)
    args = [x, np.array(0.25, np.float32), np.array(True)]
    kernel = kernel_for("Dropout", 13, 3, 2, seed=5)
    (y1, m1), (y2, m2) = (evaluate_node(kernel, args, 2) for _ in range(2))
    assert m1.dtype == np.bool_ and 0.65 < m1.mean() < 0.85
    np.testing.assert_array_equal(m1, m2)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(y1, np.where(m1, np.float32(1 / 0.75), 0))
    y, m = evaluate_node(kernel, [x, np.array(0.25, np.float32), np.array(False)], 2)
    np.testing.assert_array_equal(y, x)
    assert m.all()
    with pytest.raises(SessionError) as err:  # no seed: no reproducible bits
        evaluate_node(kernel_for("Dropout", 13, 3, 1), args, 1, exact=True)
    assert err.value.kind == "exact_mode_unavailable"


# -- Cast -----------------------------------------------------------------------------------------


def test_cast_to_and_from_strings():
    x = np.array([1.5, 0.47892547, np.inf, -np.inf, np.nan, -0.0, 1e20], np.float32)
    got = evaluate("Cast", x, to=TensorProto.STRING)
    assert got.dtype == object
    assert got.tolist() == reference("Cast", x, opset=21, to=TensorProto.STRING).tolist()
    text = np.array(["1.5", "+INF", "-inf", "NaN", "1e5", "1E-3", " 7 ", "inF"], dtype=object)
    got = evaluate("Cast", text, to=TensorProto.FLOAT)
    want = reference("Cast", text, opset=21, to=TensorProto.FLOAT)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.float32
    ints = evaluate("Cast", np.array(["12", "-7", "300", "2.9"], object), to=TensorProto.INT8)
    assert ints.tolist() == [12, -7, 44, 2]  # 300 keeps its low 8 bits; "2.9" truncates
    assert evaluate("Cast", np.array([True, False]), to=TensorProto.STRING).tolist() == [
        "True",
        "False",
    ]


@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize(
    "to",
    [
        TensorProto.FLOAT8E4M3FN,
        TensorProto.FLOAT8E4M3FNUZ,
        TensorProto.FLOAT8E5M2,
        TensorProto.FLOAT8E5M2FNUZ,
    ],
)
@pytest.mark.parametrize("src", [np.float32, np.float16, np.float64])
def test_cast_to_float8_saturates_as_onnx_says(saturate, to, src):
    values = [0.0, -0.0, 1.0, 0.3, 1e6, -1e6, np.inf, -np.inf, np.nan, 450.0, 60000.0]
    with np.errstate(over="ignore"):  # 1e6 is inf in float16
        x = np.array(values, np.float32).astype(src)
    got = evaluate("Cast", x, to=to, saturate=saturate)
    want = reference("Cast", x, opset=21, to=to, saturate=saturate)
    assert got.dtype == want.dtype
    assert bits(got.view(np.uint8).astype(np.uint16)) == bits(want.view(np.uint8).astype(np.uint16))


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [0, 1])
def test_cast_to_e8m0_rounds_by_mode(round_mode, saturate):
    def cast(values):
        x = np.array(values, np.float32)
        got = evaluate(
            "Cast", x, opset=24, to=TensorProto.FLOAT8E8M0, saturate=saturate, round_mode=round_mode
        )
        return got.view(np.uint8).tolist()

    normal = [0.124, 0.25, 0.375, 0.376, 1.1, 1.5, 3.0, 1e38, 2.0**-126 * 1.5]
    want = reference(
        "Cast",
        np.array(normal, np.float32),
        opset=24,
        to=TensorProto.FLOAT8E8M0,
        saturate=saturate,
        round_mode=round_mode,
    )
    assert cast(normal) == want.view(np.uint8).tolist()
    # The spec's table (onnx's reference evaluator differs on 0 and inf), and float32
    # subnormals by value (the reference works on their exponent bits): 2**-127 is exact,
    # 6e-39 lies between 2**-127 and 2**-126, below the midpoint.
    specials = [0.0, np.inf, 3e38, np.nan, 2.0**-127, 6e-39]
    if saturate:
        assert cast(specials) == [0, 254, 254, 255, 0, 1 if round_mode == "up" else 0]
    else:
        big = 255 if round_mode != "down" else 254
        assert cast(specials) == [255, 255, big, 255, 0, 1 if round_mode == "up" else 0]


def test_cast_opset_1_names_the_type():
    got = evaluate("Cast", np.array([1.5, -2.5]), opset=1, to="INT32")
    assert got.dtype == np.int32 and got.tolist() == [1, -2]


def test_castlike_and_same_type_cast():
    x = np.array([1.7, -1.7, 3e9, np.nan], np.float64)
    got = evaluate("CastLike", x, np.zeros(0, np.int64), opset=15)
    assert got.dtype == np.int64 and got[:2].tolist() == [1, -1]
    assert evaluate("Cast", X, to=TensorProto.FLOAT) is not X
    got = evaluate("Cast", np.array([0.0, -0.0, np.nan, 2.0]), to=TensorProto.BOOL)
    assert got.tolist() == [False, False, True, True]
