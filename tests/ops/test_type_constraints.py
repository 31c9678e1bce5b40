"""Operators refuse the element types their ONNX schema does not allow, with an error that says so.

onnxruntime refuses such a model when it loads it; numpy would instead fail in the middle of a
run (exp of an int32 tensor: "a bug in the kernel") or quietly compute something else (the
integer reciprocal).  The cases come from onnx's own schemas: every standard operator of
ops-basic whose required inputs share one type parameter that every version of the operator
limits to float types.  Each gets int32 inputs and must fail with a SessionError that names the
node and the type when the node is planned (the first run, for a graph whose planning waits for
its inputs), never a kernel error.  More broadly, no operator whose required inputs share one
type parameter may fail mid-run on a type its schema leaves out (bool subtraction and division,
Neg of a bool): it refuses the type, or handles it as an extension (int8 reductions).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

import graphrt
from graphrt_ops_basic.table import OPERATORS
from tests.ops._schemas import (
    TYPES,
    allowed_types,
    feed_of,
    node_model,
    one_type_inputs,
    required,
    run_to_a_verdict,
    schemas,
    standard_ops,
)

FLOAT_TYPES = {"tensor(float)", "tensor(double)", "tensor(float16)", "tensor(bfloat16)"}
#: What the schema alone does not settle: Dropout's T also lists the float8 types, which the
#: case's int32 does not test.
LEFT_OUT = {"Dropout"}
#: The required attributes of float-only operators, so that the type is what they refuse (an
#: int32 AveragePool ran, its means truncated, behind a missing kernel_shape).
REQUIRED_ATTRIBUTES = {
    "AveragePool": {"kernel_shape": [2, 2]},
    "LpPool": {"kernel_shape": [2, 2]},
    "LRN": {"size": 3},
    "GroupNormalization": {"num_groups": 1},
}
#: The types fed to operators whose schema (every version) leaves them out.
OTHER_TYPES = [t for t in TYPES if t != "tensor(string)" and t != "tensor(int64)"]


def _allowed(op: str) -> tuple[int, int, bool, set[str]] | None:
    """(inputs to give, newest version, whether it has a required attribute, the types any
    version allows) for an operator whose required inputs share one type parameter."""
    found = schemas(op)
    if not found or any(one_type_inputs(s) is None for s in found):
        return None
    allowed = set().union(*(allowed_types(s, required(s)[0].type_str) for s in found))
    newest = found[-1]
    attributes = any(a.required for a in newest.attributes.values())
    return one_type_inputs(newest), newest.since_version, attributes, allowed


ALLOWED = {op: found for op in standard_ops(OPERATORS) if (found := _allowed(op)) is not None}
CASES = sorted(
    (op, inputs, opset, attributes)
    for op, (inputs, opset, attributes, allowed) in ALLOWED.items()
    if allowed <= FLOAT_TYPES and op not in LEFT_OUT
)
OUTSIDE = sorted(
    (op, inputs, opset, type_str)
    for op, (inputs, opset, _, allowed) in ALLOWED.items()
    for type_str in OTHER_TYPES
    if type_str not in allowed
)


def test_the_schemas_give_cases() -> None:
    # the list is onnx's, not ours: it must hold the operators that once failed mid-run
    ops = {op for op, *_ in CASES}
    assert {"Exp", "Log", "Softmax", "Sigmoid", "Mean", "Elu", "Reciprocal"} <= ops
    assert len(CASES) >= 40 and len(OUTSIDE) >= 300


@pytest.mark.parametrize("op, inputs, opset, attributes", CASES, ids=[c[0] for c in CASES])
def test_an_integer_input_is_refused_with_the_node_named(
    op: str, inputs: int, opset: int, attributes: bool
) -> None:
    shape = (1, 2, 3, 3)
    given = REQUIRED_ATTRIBUTES.get(op, {})
    model = node_model(op, [(TensorProto.INT32, shape)] * inputs, opset=opset, attributes=given)
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(model.SerializeToString()).run(None, feed_of([(np.int32, shape)] * inputs))
    err = info.value
    assert err.kind in ("invalid_input", "invalid_model"), str(err)  # never "kernel_error"
    assert err.node == "the_node", str(err)
    if given or not attributes:  # (else the missing attribute may be named first)
        assert "float" in str(err) and "int32" in str(err), str(err)


def test_a_float_input_still_runs() -> None:
    model = node_model("Exp", [(TensorProto.FLOAT, (2, 3))])
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    (y,) = graphrt.Session(model.SerializeToString()).run(None, {"x0": x})
    np.testing.assert_allclose(y, np.exp(x), rtol=1e-6)


@pytest.mark.parametrize("mode", ["fast", "exact"])
@pytest.mark.parametrize(
    "op, inputs, opset, type_str", OUTSIDE, ids=[f"{c[0]}-{c[3][7:-1]}" for c in OUTSIDE]
)
def test_a_type_outside_the_schema_never_fails_mid_run(
    op: str, inputs: int, opset: int, type_str: str, mode: str
) -> None:
    code, numpy_type = TYPES[type_str]
    shape = (1, 2, 3, 3)
    model = node_model(op, [(code, shape)] * inputs, opset=opset)
    run_to_a_verdict(model, feed_of([(numpy_type, shape)] * inputs), mode)


@pytest.mark.parametrize(
    "op, inputs, code, numpy_type, wanted",
    [
        ("Add", 2, TensorProto.BOOL, np.bool_, "numeric"),  # numpy's add of bools: a logical or
        ("Sub", 2, TensorProto.BOOL, np.bool_, "numeric"),
        ("Neg", 1, TensorProto.BOOL, np.bool_, "numeric"),
        ("Not", 1, TensorProto.FLOAT, np.float32, "bool"),  # numpy wrote 0.0 and 1.0
    ],
)
def test_arithmetic_and_logic_refuse_the_other_kind(op, inputs, code, numpy_type, wanted) -> None:
    model = node_model(op, [(code, (3,))] * inputs)
    with pytest.raises(
        graphrt.SessionError, match=f"must be an? {wanted} tensor|must be {wanted} tensors"
    ) as info:
        graphrt.Session(model.SerializeToString()).run(None, feed_of([(numpy_type, (3,))] * inputs))
    assert info.value.kind == "invalid_input" and info.value.node == "the_node"
