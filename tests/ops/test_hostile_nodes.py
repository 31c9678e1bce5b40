"""Nodes that break their operator's schema: an extra input or output, attributes of the wrong type
or far out of range.  Refused, or run; never a kernel error, in fast or in exact mode.

onnxruntime refuses such nodes when it loads the model.  graphrt's kernels check what they use
and may accept more (a unary operator ignores a second input); what they must not do is fail in
the middle of a run (Add's third input failed unpacking its inputs, Dropout's negative seed in
numpy's generator: "a bug in the kernel").  The cases come from onnx's schemas for every
standard operator of ops-basic (its newest version), each input given the first of float, int64,
int32 and bool its type parameter allows.
"""

from __future__ import annotations

import pytest
from onnx import AttributeProto

import graphrt
from graphrt_ops_basic.table import OPERATORS
from tests.ops._schemas import (
    TYPES,
    VARIADIC,
    allowed_types,
    feed_of,
    node_model,
    required,
    run_to_a_verdict,
    schemas,
    standard_ops,
)

PREFERRED = ["tensor(float)", "tensor(int64)", "tensor(int32)", "tensor(bool)"]
#: Values of the wrong type, or out of any range, for each kind of attribute.
WRONG = {
    AttributeProto.INT: [("a string", "x"), ("2**62", 2**62), ("-5", -5)],
    AttributeProto.INTS: [("[2**62, -2**62]", [2**62, -(2**62)])],
    AttributeProto.FLOAT: [("a string", "x")],
    AttributeProto.STRING: [("an int", 7)],
}
SHAPE = (2, 3, 4, 4)


def _types(schema) -> list[tuple[int, object]] | None:
    """A proto code and numpy type per input (optional ones too), else None."""
    picked = []
    for formal in schema.inputs:
        allowed = allowed_types(schema, formal.type_str)
        first = next((t for t in PREFERRED if t in allowed), None)
        if first is None:
            return None
        picked.append(TYPES[first])
    return picked


def _cases() -> list[tuple[str, int, str, int, int, dict]]:
    cases = []
    for op in standard_ops(OPERATORS):
        found = schemas(op)
        if not found:
            continue
        schema = found[-1]
        if schema.deprecated or any(i.option == VARIADIC for i in schema.inputs):
            continue  # (a deprecated form: no plugin runs it)
        if _types(schema) is None:
            continue
        given, outputs = len(schema.inputs), len(schema.outputs)
        cases.append((op, schema.since_version, "an extra input", given + 1, outputs, {}))
        cases.append((op, schema.since_version, "an extra output", given, outputs + 1, {}))
        for name, attribute in sorted(schema.attributes.items()):
            for label, value in WRONG.get(attribute.type, []):
                what = f"{name}={label}"
                cases.append((op, schema.since_version, what, given, outputs, {name: value}))
    return cases


CASES = _cases()


def test_the_schemas_give_cases() -> None:
    labels = {(op, what) for op, _, what, *_ in CASES}
    assert {("Add", "an extra input"), ("Dropout", "seed=-5")} <= labels
    assert len(CASES) >= 500


@pytest.mark.parametrize("mode", ["fast", "exact"])  # (exact mode's kernels are others)
@pytest.mark.parametrize(
    "op, opset, what, inputs, outputs, attributes",
    CASES,
    ids=[f"{c[0]}-{c[2]}" for c in CASES],
)
def test_refused_or_run_never_a_kernel_error(
    op, opset, what, inputs, outputs, attributes, mode
) -> None:
    picked = _types(schemas(op)[-1])
    picked += [picked[-1] if picked else TYPES["tensor(float)"]] * (inputs - len(picked))
    model = node_model(
        op, [(code, SHAPE) for code, _ in picked], outputs, opset, attributes=attributes
    )
    run_to_a_verdict(model, feed_of([(numpy_type, SHAPE) for _, numpy_type in picked]), mode)


@pytest.mark.parametrize("op", ["Add", "Where", "ScatterElements", "BitwiseAnd"])
def test_a_third_or_fourth_input_is_refused_by_name(op) -> None:
    schema = schemas(op)[-1]
    picked = _types(schema)
    picked += [picked[-1]]
    model = node_model(op, [(code, SHAPE) for code, _ in picked], opset=schema.since_version)
    count = {2: "two", 3: "three"}[len(required(schema))]
    with pytest.raises(graphrt.SessionError, match=f"takes {count} inputs") as e:
        graphrt.Session(model.SerializeToString()).run(
            None, feed_of([(numpy_type, SHAPE) for _, numpy_type in picked])
        )
    assert e.value.kind == "invalid_model" and e.value.node == "the_node"
