"""The element-wise families of graphrt-ops-basic: onnx's node cases, then focused checks.

Every onnx node case of these operators runs through its kernel (``node_cases.run_case``); the
ones that cannot pass are listed in ``EXPECTED_FAILURES`` with the reason, strict.  The focused
tests pin what the node cases do not see: exact-mode bits, in-place execution through ``bind``,
errors, accuracy of our own Erf, and that the float32 fast paths allocate nothing in a
steady-state run; older opset semantics and Cast are in test_elementwise_legacy.py.
"""

from __future__ import annotations

import math
import warnings

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import graphrt
from graphrt.attrs import node_info
from graphrt.errors import SessionError
from graphrt.kernel import InferContext, KernelContext
from tests._numpy_alloc import count_numpy_allocations
from tests._versions import ONNX
from tests.ops._elementwise import (
    FACTORIES,
    OPS,
    RNG,
    X,
    bind_in_place,
    bits,
    evaluate,
    kernel_for,
    session_for,
)
from tests.ops.node_cases import node_case_params, run_case

_RNG = (
    "the mask comes from the random generator, which ONNX leaves unspecified: onnx drew it "
    "with numpy's legacy np.random.seed/uniform (MT19937), graphrt with numpy's Generator (PCG64)"
)
#: Node cases that cannot pass, with the reason.  Strict: a case that starts passing fails.
EXPECTED_FAILURES: dict[str, str] = {
    "test_training_dropout": _RNG,
    "test_training_dropout_default": _RNG,
    "test_training_dropout_default_mask": _RNG,
    "test_training_dropout_mask": _RNG,
}


NODE_CASES = node_case_params(OPS, EXPECTED_FAILURES)

#: How many node cases of these operators onnx ships, at least: each release adds some
#: (onnx 1.19 has 445, 1.20 475, 1.21 and 1.22 476, 1.23 503).
MIN_NODE_CASES = 500 if ONNX >= (1, 23) else 475 if ONNX >= (1, 20) else 445


def test_every_operator_has_node_cases_and_a_kernel():
    assert set(FACTORIES) == OPS
    covered = {p.values[0].graph.node[0].op_type for p in NODE_CASES}
    assert covered == OPS
    assert len(NODE_CASES) >= MIN_NODE_CASES


@pytest.mark.parametrize(("model", "inputs", "outputs"), NODE_CASES)
def test_onnx_node_case(model, inputs, outputs):
    # 0-d inputs arrive as numpy scalars, which evaluate_node would take for opaque objects
    inputs = [np.asarray(x) if isinstance(x, np.generic) else x for x in inputs]
    with np.errstate(all="ignore"):  # as in a session: NaN and inf are results, not warnings
        run_case(FACTORIES[model.graph.node[0].op_type], model, inputs, outputs)


# -- exact mode ---------------------------------------------------------------------------------

PAYLOAD_NANS = np.array([0x7FC12345, 0xFFC00001, 0x7F800001, 0x3F800000], np.uint32)
PAYLOAD_NANS = PAYLOAD_NANS.view(np.float32)


@pytest.mark.parametrize("op", ["Add", "Mul", "Div"])
def test_exact_mode_nan_results_are_canonical(op):
    b = np.array([1, 1, 1, 0], np.float32)
    a = PAYLOAD_NANS.copy()
    a[3] = 0  # 0 + 0, 0 * 0, 0 / 0: the last is a fresh NaN (0xFFC00000 on x86)
    with np.errstate(invalid="ignore"):
        got = evaluate(op, a, b, exact=True)
    assert bits(got)[:3] == [0x7FC00000] * 3
    if op == "Div":
        assert bits(got)[3] == 0x7FC00000
    # the same through a session (bind's path), float64 too
    for dtype, canonical in [(np.float32, 0x7FC00000), (np.float64, 0x7FF8000000000000)]:
        x = np.array([np.nan, 0.0], dtype) * np.array([-1, 1], dtype)  # -NaN
        sess = session_for(op, {"a": x, "b": np.array([1, 0], dtype)}, mode="exact")
        y = sess.run(None, {"a": x, "b": np.array([1, 0], dtype)})[0]
        assert bits(y)[0] == canonical
        if op == "Div":
            assert bits(y)[1] == canonical


def test_exact_mode_relu_turns_negative_zero_positive():
    x = np.array([-0.0, 0.0, -1.0, 2.0, np.nan], np.float32)
    got = evaluate("Relu", x, exact=True)
    assert bits(got)[:4] == [0, 0, 0, 0x40000000]
    assert bits(got)[4] == 0x7FC00000
    sess = session_for("Relu", {"x": x}, mode="exact")
    assert bits(sess.run(None, {"x": x})[0])[:2] == [0, 0]


def test_exact_support_is_declared_only_where_bits_are_fixed():
    exact = {op for op, f in FACTORIES.items() if f.supports_exact}
    assert {"Add", "Sub", "Mul", "Div", "Relu", "Equal", "Less", "And", "Xor", "Where"} <= exact
    # our own exp-based algorithms (_exact_math, docs/exact-mode.md), and Hardmax (comparisons)
    assert {"Exp", "Tanh", "Sigmoid", "Erf", "Softmax", "Hardmax"} <= exact
    assert {"Sum", "Mean"} <= exact  # a left fold in input order: the canonical order
    transcendental = {
        "Pow",
        "Log",
        "LogSoftmax",
        "Softplus",
        "Elu",
        "Selu",
        "ReduceSum",
        "ReduceMean",
    }
    assert not exact & transcendental
    x = np.ones(3, np.float32)
    with pytest.raises(SessionError) as err:
        session_for("Pow", {"a": x, "b": x}, mode="exact")
    assert err.value.kind == "exact_mode_unavailable"


# -- in place -----------------------------------------------------------------------------------

X[0, :3] = [0.0, -0.0, np.nan]
POS = np.abs(X) + 0.5


@pytest.mark.parametrize(
    ("op", "inputs", "attrs"),
    [
        ("Add", [X, X[0]], {}),
        ("Div", [X, POS], {}),
        ("Div", [np.arange(-7, 8, dtype=np.int32).reshape(3, 5), np.int32([2, -3, 4, -5, 7])], {}),
        ("Pow", [POS, np.int64([2, -1, 0, 3, 1])], {}),
        ("Pow", [np.arange(-7, 8, dtype=np.int64).reshape(3, 5), np.int64([2, -1, 0, 3, -2])], {}),
        ("Mod", [X, POS], {"fmod": 1}),
        ("Less", [X > 0, X < 0], {}),
        ("Sum", [X, X[1], X], {}),
        ("Max", [X, X[1], X], {}),
        ("Mean", [X, POS, X[2]], {}),
        ("Sigmoid", [X * 100], {}),
        ("Erf", [X], {}),
        ("Softplus", [X], {}),
        ("Tanh", [X], {}),
        ("LeakyRelu", [X], {"alpha": 0.1}),
        ("LeakyRelu", [X], {"alpha": 3.0}),
        ("Elu", [X], {"alpha": 0.7}),
        ("Selu", [X], {}),
        ("HardSigmoid", [X], {}),
        ("Clip", [X, np.float32(-1), np.float32(2)], {}),
        ("Clip", [np.arange(15, dtype=np.int8).reshape(3, 5), np.int8(3), np.int8(9)], {}),
        ("Where", [X > 0, X[0], POS], {}),
        ("Cast", [X], {"to": TensorProto.FLOAT}),
        ("Dropout", [X], {}),
        ("Softmax", [X], {"axis": 0}),
        ("LogSoftmax", [X], {}),
        ("Hardmax", [X], {}),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_in_place_output_matches_out_of_place(op, inputs, attrs):
    with np.errstate(all="ignore"):
        want = evaluate(op, *[np.array(x) for x in inputs], **attrs)
        got = bind_in_place(op, *inputs, **attrs)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype


def test_in_place_output_is_the_input_array_itself():
    x = X.copy()
    before = x.__array_interface__["data"][0]
    kernel = kernel_for("Sigmoid", n_inputs=1)
    ictx = InferContext([x.dtype], [x.shape], [None], 1)
    kernel.infer(ictx)
    kctx = KernelContext(ictx.prepared, [np.empty(s, d) for d, s in ictx.scratch])
    kernel.bind(kctx, [x], [x])()
    assert x.__array_interface__["data"][0] == before
    np.testing.assert_allclose(x, 1 / (1 + np.exp(-X.astype(np.float64))), rtol=1e-6)


def test_in_place_when_input_0_is_also_a_later_input():
    """Sum(a, b, a) over a's storage must still read the original a at the third term, and
    integer Div(a, a) must read a as the divisor after its first temporary is written."""
    for op, names, opset, arrays, want in [
        ("Sum", ["a", "b", "a"], 13, [X.copy(), POS], (X + POS) + X),
        ("Mean", ["a", "b", "a"], 13, [X.copy(), POS], ((X + POS) + X) / np.float32(3)),
        ("Div", ["a", "a"], 14, [np.arange(-6, 9, dtype=np.int32)], None),
    ]:
        kernel = FACTORIES[op](node_info(helper.make_node(op, names, ["y"]), opset))
        a = arrays[0]
        inputs = [a if n == "a" else arrays[1] for n in names]
        ictx = InferContext(
            [x.dtype for x in inputs], [x.shape for x in inputs], [None] * len(inputs), 1
        )
        kernel.infer(ictx)
        scratch = [np.full(s, 3, dtype=d) for d, s in ictx.scratch]
        kernel.bind(KernelContext(ictx.prepared, scratch), inputs, [a])()
        if want is None:
            want = np.where(np.arange(-6, 9) == 0, 0, 1)
        np.testing.assert_array_equal(a, want)


# -- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "shapes"),
    [
        ("Add", [(2, 3), (4,)]),
        ("Div", [(2, 3), (2,)]),
        ("Pow", [(5,), (3,)]),
        ("Equal", [(2, 3), (3, 2)]),
        ("Mod", [(3,), (4,)]),
        ("Sum", [(2, 3), (3,), (2,)]),
        ("Max", [(2,), (3,)]),
        ("Where", [(2, 3), (3,), (4,)]),
    ],
)
def test_shapes_that_do_not_broadcast_are_invalid_input(op, shapes):
    arrays = [np.ones(s, np.float32) for s in shapes]
    if op == "Where":
        arrays[0] = arrays[0] > 0
    with pytest.raises(SessionError) as err:
        evaluate(op, *arrays)
    assert err.value.kind == "invalid_input"
    assert op in str(err.value)


def test_mixed_input_types_are_refused_except_for_pow():
    for op in ("Add", "Div", "Equal", "Mod", "Sum"):
        with pytest.raises(SessionError) as err:
            evaluate(op, np.ones(3, np.int32), np.ones(3, np.float32))
        assert err.value.kind == "invalid_model", op
    assert evaluate("Pow", np.ones(3, np.int32), np.ones(3, np.float32)).dtype == np.int32


def test_bad_attributes_are_invalid_model():
    for op, attrs in [
        ("Mod", {"fmod": 2}),
        ("BitShift", {"direction": "UP"}),
        ("Cast", {"to": 9999}),
    ]:
        with pytest.raises(SessionError) as err:
            kernel_for(op, **attrs)
        assert err.value.kind in ("invalid_model", "unsupported"), op
    with pytest.raises(SessionError) as err:
        evaluate("Softmax", X, axis=2)
    assert err.value.kind == "invalid_model"
    with pytest.raises(SessionError) as err:
        evaluate("ReduceSum", X, np.int64([3]), opset=13)
    assert err.value.kind == "invalid_input"


# -- Erf and Sigmoid ----------------------------------------------------------------------------


def test_erf_float64_matches_math_erf_to_1e15():
    grid = np.concatenate(
        [
            np.linspace(-7.0, 7.0, 140_001),
            np.linspace(0.46, 0.48, 2001),  # the first interval's edge
            np.linspace(3.99, 4.01, 2001),  # the second interval's edge
            np.geomspace(1e-300, 1.0, 3000),
            -np.geomspace(1e-300, 30.0, 3000),
            [5.9, 6.0, 26.5, 27.0, 1e10, 1e300, np.inf, -np.inf, 0.0, -0.0],
        ]
    )
    got = evaluate("Erf", grid)
    want = np.array([math.erf(v) for v in grid])
    rel = np.abs(got - want) / np.maximum(np.abs(want), np.finfo(np.float64).tiny)
    assert rel.max() <= 1e-15, grid[rel.argmax()]
    assert bits(got[-1:]) == bits(np.array([-0.0]))
    assert np.isnan(evaluate("Erf", np.array([np.nan, 1.0]))[0])


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_erf_narrow_floats_round_to_nearly_the_correct_value(dtype):
    x = np.linspace(-5, 5, 20_001).astype(dtype)
    got = evaluate("Erf", x).astype(np.float64)
    want = np.array([math.erf(float(v)) for v in x]).astype(dtype).astype(np.float64)
    eps = float(ml_dtypes.finfo(dtype).eps)
    assert np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-30)) <= 4 * eps


def test_erf_of_a_large_tensor_gives_the_same_bits_on_any_thread_count():
    x = np.random.default_rng(1).standard_normal(200_003) * 3
    one = evaluate("Erf", x)  # blocks in sequence
    for threads in (1, 4):
        sess = session_for("Erf", {"x": x}, opset=13, threads=threads)
        assert bits(sess.run(None, {"x": x})[0]) == bits(one)


def test_sigmoid_is_stable_without_warnings():
    for dtype in (np.float32, np.float64, np.float16):
        x = np.array([-1000, -100, -20, 0, 20, 1000, np.inf, -np.inf, np.nan], dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = evaluate("Sigmoid", x)
        assert got.dtype == dtype
        assert got[0] == 0 and got[1] >= 0 and got[5] == 1 and got[3] == 0.5
        assert got[6] == 1 and got[7] == 0 and np.isnan(got[8])
    x = np.linspace(-700, 700, 14_001)
    want = np.array([1 / (1 + math.exp(-v)) if v > -700 else math.exp(v) for v in x])
    np.testing.assert_allclose(evaluate("Sigmoid", x), want, rtol=1e-14)


# -- integer arithmetic and special values ------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64])
def test_integer_div_truncates_toward_zero(dtype):
    info = np.iinfo(dtype)
    a = np.array([7, -7, 7, -7, 1, -1, 0, info.max, info.min, 5], dtype)
    b = np.array([2, 2, -2, -2, 3, 3, 5, 7, 3, 0], dtype)
    got = evaluate("Div", a, b)
    want = [int(x / y) if y else 0 for x, y in zip(a.tolist(), b.tolist())]
    want[7], want[8] = int(info.max) // 7, -(-int(info.min) // 3)
    assert got.tolist() == want
    sess = session_for("Div", {"a": a, "b": b})  # bind's path
    assert sess.run(None, {"a": a, "b": b})[0].tolist() == want


def test_pow_mixed_types_and_negative_integer_exponents():
    base = np.array([2, -2, 1, -1, 0, 3], np.int64)
    exp = np.array([-1, -3, -5, -5, 2, 3], np.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = evaluate("Pow", base, exp)
    assert got.tolist() == [0, 0, 1, -1, 0, 27]
    got = evaluate("Pow", np.float32([2, 4]), np.int64([3, -1]))
    assert got.dtype == np.float32 and got.tolist() == [8.0, 0.25]
    got = evaluate("Pow", np.int32([2, 9]), np.float32([0.5, 0.5]))
    assert got.dtype == np.int32 and got.tolist() == [1, 3]
    got = evaluate("Pow", np.float16([3]), np.float32([2]))
    assert got.dtype == np.float16 and got.tolist() == [9.0]


@settings(max_examples=60, deadline=None)
@given(
    hnp.arrays(np.int32, 24, elements=st.integers(-(2**31), 2**31 - 1)),
    hnp.arrays(np.int32, 24, elements=st.integers(-(2**31), 2**31 - 1).filter(bool)),
)
def test_integer_div_and_mod_match_python_arithmetic(a, b):
    assert evaluate("Div", a, b).tolist() == [
        _wrap32(_trunc_div(x, y)) for x, y in zip(a.tolist(), b.tolist())
    ]
    assert evaluate("Mod", a, b).tolist() == [x % y for x, y in zip(a.tolist(), b.tolist())]
    assert evaluate("Mod", a, b, fmod=1).tolist() == [
        x - _trunc_div(x, y) * y for x, y in zip(a.tolist(), b.tolist())
    ]


def _trunc_div(x: int, y: int) -> int:
    q = abs(x) // abs(y)
    return q if (x < 0) == (y < 0) else -q


def _wrap32(v: int) -> int:
    return (v + 2**31) % 2**32 - 2**31  # INT_MIN / -1 wraps


def test_mod_follows_the_divisor_or_the_dividend():
    a = np.array([5, -5, 5, -5], np.int32)
    b = np.array([3, 3, -3, -3], np.int32)
    assert evaluate("Mod", a, b).tolist() == [2, 1, -1, -2]
    assert evaluate("Mod", a, b, fmod=1).tolist() == [2, -2, 2, -2]
    f = evaluate("Mod", np.float64([5.5, -0.0]), np.float64([-2, 3]), fmod=1)
    assert f.tolist() == [1.5, 0.0]


def test_bitshift_out_of_range_amounts_follow_opset_28():
    x = np.array([-8, 8, -1, 5], np.int32)
    s = np.array([40, 40, -1, 2], np.int32)
    assert evaluate("BitShift", x, s, direction="RIGHT").tolist() == [-1, 0, -1, 1]
    assert evaluate("BitShift", x, s, direction="LEFT").tolist() == [0, 0, 0, 20]


def test_clip_with_min_above_max_gives_max_and_keeps_nan():
    got = evaluate(
        "Clip", np.float32([1, 5, np.nan]), np.array(4, np.float32), np.array(2, np.float32)
    )
    assert got[:2].tolist() == [2, 2] and np.isnan(got[2])


# -- variadic -----------------------------------------------------------------------------------


def test_variadic_operators_fold_in_input_order_with_broadcasting():
    a = RNG.standard_normal((2, 1, 4)).astype(np.float32)
    b = RNG.standard_normal((3, 1)).astype(np.float32)
    c = RNG.standard_normal((4,)).astype(np.float32)
    np.testing.assert_array_equal(evaluate("Sum", a, b, c), (a + b) + c)
    np.testing.assert_array_equal(evaluate("Max", a, b, c), np.maximum(np.maximum(a, b), c))
    np.testing.assert_array_equal(evaluate("Mean", a, b, c), ((a + b) + c) / np.float32(3))
    np.testing.assert_array_equal(evaluate("Min", a), a)


# -- steady state -------------------------------------------------------------------------------


def _chain_model():
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Div", ["x", "d"], ["a"]),
        helper.make_node("Sigmoid", ["a"], ["b"]),
        helper.make_node("Erf", ["b"], ["c"]),
        helper.make_node("Tanh", ["c"], ["e"]),
        helper.make_node("Sum", ["e", "x", "a"], ["s"]),
        helper.make_node("LeakyRelu", ["s"], ["l"], alpha=0.2),
        helper.make_node("Elu", ["l"], ["el"]),
        helper.make_node("Clip", ["el", "lo", "hi"], ["cl"]),
        helper.make_node("Greater", ["cl", "d"], ["g"]),
        helper.make_node("Where", ["g", "cl", "x"], ["w"]),
        helper.make_node("Pow", ["w", "two"], ["p"]),
        helper.make_node("Softmax", ["p"], ["sm"]),
        helper.make_node("LogSoftmax", ["sm"], ["ls"], axis=0),
        helper.make_node("ReduceMean", ["ls", "axes"], ["rm"], keepdims=1),
        helper.make_node("Sub", ["ls", "rm"], ["y"]),
    ]
    inits = [
        helper.make_tensor("d", f, [16], np.linspace(0.5, 2, 16).astype(np.float32)),
        helper.make_tensor("lo", f, [], [-1.0]),
        helper.make_tensor("hi", f, [], [2.0]),
        helper.make_tensor("two", f, [], [2.0]),
        helper.make_tensor("axes", TensorProto.INT64, [1], [1]),
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", f, [8, 16])],
        [helper.make_tensor_value_info("y", f, [8, 16])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_float32_fast_paths_allocate_nothing_in_the_steady_state():
    sess = graphrt.Session(_chain_model(), intra_op_threads=1)
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    out = {"y": np.empty((8, 16), np.float32)}
    for _ in range(3):
        sess.run(None, {"x": x}, out=out)
    assert sess.cached_plans[0].static
    with count_numpy_allocations() as counter:
        for _ in range(3):
            sess.run(None, {"x": x}, out=out)
    assert counter.count == 0, f"{counter.count} numpy allocations ({counter.bytes} bytes)"
    want = ReferenceEvaluator(_chain_model()).run(None, {"x": x})[0]
    np.testing.assert_allclose(out["y"], want, rtol=1e-4, atol=1e-5)
