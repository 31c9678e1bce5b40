"""The element-wise families of graphrt-ops-basic: onnx's node cases, then focused checks.

Every onnx node case of these operators runs through its kernel (``node_cases.run_case``); the
ones that cannot pass are listed in ``EXPECTED_FAILURES`` with the reason, strict.  The focused
tests pin what the node cases do not see: exact-mode bits, in-place execution through ``bind``,
errors, accuracy of our own Erf, older opset semantics (against onnx's reference evaluator),
and that the float32 fast paths allocate nothing in a steady-state run.
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
from graphrt.kernel import InferContext, KernelContext, evaluate_node
from graphrt_ops_basic.table import OPERATORS
from tests._numpy_alloc import count_numpy_allocations
from tests._versions import ONNX
from tests.ops.node_cases import node_case_params, run_case

OPS = {
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Mod",
    "BitShift",
    "Equal",
    "Less",
    "Greater",
    "LessOrEqual",
    "GreaterOrEqual",
    "And",
    "Or",
    "Xor",
    "Not",
    "Sum",
    "Max",
    "Min",
    "Mean",
    "Relu",
    "Sigmoid",
    "Tanh",
    "Erf",
    "Sqrt",
    "Exp",
    "Log",
    "Neg",
    "Abs",
    "Reciprocal",
    "Floor",
    "Ceil",
    "Sign",
    "Softplus",
    "LeakyRelu",
    "Elu",
    "Selu",
    "HardSigmoid",
    "Clip",
    "Where",
    "Cast",
    "CastLike",
    "Dropout",
    "Softmax",
    "LogSoftmax",
    "Hardmax",
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
}
FACTORIES = {d.op_type: d.factory for d in OPERATORS if d.op_type in OPS and d.domain == ""}

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


# -- helpers ------------------------------------------------------------------------------------


def kernel_for(op: str, opset: int = 21, n_inputs: int = 2, n_outputs: int = 1, **attrs):
    inputs = [f"i{k}" for k in range(n_inputs)]
    outputs = [f"o{k}" for k in range(n_outputs)]
    node = helper.make_node(op, inputs, outputs, **attrs)
    return FACTORIES[op](node_info(node, opset))


def evaluate(op: str, *inputs, opset: int = 21, n_outputs: int = 1, exact: bool = False, **attrs):
    kernel = kernel_for(op, opset, len(inputs), n_outputs, **attrs)
    outs = evaluate_node(kernel, list(inputs), n_outputs, exact=exact)
    return outs if n_outputs > 1 else outs[0]


def reference(op: str, *inputs, opset: int, n_outputs: int = 1, **attrs):
    """onnx's reference evaluator on one node (a test oracle only)."""
    names = [f"i{k}" for k in range(len(inputs))]
    outs = [f"o{k}" for k in range(n_outputs)]
    node = helper.make_node(op, names, outs, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in names],
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in outs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    got = ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))
    return got if n_outputs > 1 else got[0]


def bind_in_place(op: str, *inputs, opset: int = 21, exact: bool = False, **attrs):
    """Run the kernel the way a plan does when its output takes input ``in_place_input``'s
    storage: infer, scratch, ``bind``, call.  Returns the output, which is that input array."""
    kernel = kernel_for(op, opset, len(inputs), 1, **attrs)
    ip = kernel.in_place_input
    assert ip is not None
    arrays = [np.array(x) for x in inputs]
    ictx = InferContext(
        [a.dtype for a in arrays], [a.shape for a in arrays], [None] * len(arrays), 1, exact
    )
    kernel.infer(ictx)
    dtype, shape = ictx.output_types()[0]
    assert (dtype, shape) == (arrays[ip].dtype, arrays[ip].shape)
    scratch = [np.full(s, 77, dtype=d) for d, s in ictx.scratch]  # garbage, like a reused slab
    kctx = KernelContext(prepared=ictx.prepared, scratch=scratch, exact=exact)
    out = arrays[ip]
    kernel.bind(kctx, arrays, [out])()
    return out


def session_for(
    op: str, inputs: dict, opset: int = 21, mode: str = "fast", threads: int = 1, **attrs
):
    node = helper.make_node(op, list(inputs), ["y"], **attrs)
    decls = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for n, v in inputs.items()
    ]
    y = helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)
    graph = helper.make_graph([node], "g", decls, [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return graphrt.Session(model, mode=mode, intra_op_threads=threads)


def bits(a: np.ndarray) -> list[int]:
    return a.reshape(-1).view({4: np.uint32, 8: np.uint64, 2: np.uint16}[a.itemsize]).tolist()


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

RNG = np.random.default_rng(7)
X = (RNG.standard_normal((3, 5)) * 3).astype(np.float32)
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
