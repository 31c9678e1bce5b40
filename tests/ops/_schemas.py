"""onnx's operator schemas as test cases: one-node models built from them, run to a verdict.

Shared by the tests that feed operators what their schema does not allow (other element types,
ranks, extra inputs and outputs, attributes of the wrong type): a run must end in a result or a
SessionError of the model's or the input's kind, never in a "kernel_error" (an exception the
kernel did not mean) or any other exception.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from onnx import ModelProto, TensorProto, defs, helper

import graphrt

OPTIONAL = defs.OpSchema.FormalParameterOption.Optional
VARIADIC = defs.OpSchema.FormalParameterOption.Variadic
#: The kinds of a refusal: the model's, the input's, or an operator form no plugin runs.
REFUSALS = ("invalid_input", "invalid_model", "unsupported")
#: Element types by ONNX type string: proto code and numpy type (object: strings).
TYPES: dict[str, tuple[int, Any]] = {
    "tensor(float)": (TensorProto.FLOAT, np.float32),
    "tensor(int64)": (TensorProto.INT64, np.int64),
    "tensor(int32)": (TensorProto.INT32, np.int32),
    "tensor(bool)": (TensorProto.BOOL, np.bool_),
    "tensor(double)": (TensorProto.DOUBLE, np.float64),
    "tensor(int8)": (TensorProto.INT8, np.int8),
    "tensor(uint64)": (TensorProto.UINT64, np.uint64),
    "tensor(string)": (TensorProto.STRING, object),
}


def standard_ops(operators: Iterable[Any]) -> list[str]:
    """The op types of a plugin table's lines in the default domain."""
    return sorted({d.op_type for d in operators if d.domain in ("", "ai.onnx")})


def schemas(op: str, domain: str = "") -> list[defs.OpSchema]:
    """Every version of an operator onnx defines, oldest first."""
    newest = defs.onnx_opset_version() if domain == "" else 5
    found: list[defs.OpSchema] = []
    for version in range(1, newest + 1):
        try:
            schema = defs.get_schema(op, version, domain)
        except defs.SchemaError:
            continue
        if not found or schema.since_version != found[-1].since_version:
            found.append(schema)
    return found


def required(schema: defs.OpSchema) -> list[Any]:
    return [i for i in schema.inputs if i.option != OPTIONAL]


def one_type_inputs(schema: defs.OpSchema) -> int | None:
    """How many inputs to give an operator whose required inputs share one type parameter
    (a variadic one: two), else None."""
    needed = required(schema)
    if not needed or len({i.type_str for i in needed}) != 1:
        return None
    return 2 if needed[0].option == VARIADIC else len(needed)


def allowed_types(schema: defs.OpSchema, type_str: str) -> set[str]:
    constraints = {t.type_param_str: set(t.allowed_type_strs) for t in schema.type_constraints}
    return constraints.get(type_str, {type_str})


def node_model(
    op: str,
    inputs: Sequence[tuple[int, Sequence[int]]],
    outputs: int = 1,
    opset: int = 17,
    domain: str = "",
    attributes: Mapping[str, Any] | None = None,
) -> ModelProto:
    """One node named ``the_node`` reading x0, x1, ... (proto type code, shape) into y0, ..."""
    names = [f"x{i}" for i in range(len(inputs))]
    node = helper.make_node(
        op,
        names,
        [f"y{i}" for i in range(outputs)],
        name="the_node",
        domain=domain,
        **(attributes or {}),
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, code, list(s)) for n, (code, s) in zip(names, inputs)],
        [
            helper.make_tensor_value_info(f"y{i}", TensorProto.UNDEFINED, None)
            for i in range(outputs)
        ],
    )
    opsets = [helper.make_opsetid("", max(opset, 7) if domain == "" else 21)]
    if domain:
        opsets.append(helper.make_opsetid(domain, opset))
    return helper.make_model(graph, opset_imports=opsets)


def feed_of(inputs: Sequence[tuple[Any, Sequence[int]]]) -> dict[str, np.ndarray]:
    """Inputs x0, x1, ... of ones (strings: "a") of the numpy type and shape given."""
    return {
        f"x{i}": np.full(tuple(s), "a", dtype=object) if t is object else np.ones(tuple(s), t)
        for i, (t, s) in enumerate(inputs)
    }


def run_to_a_verdict(model: ModelProto, feed: Mapping[str, np.ndarray], mode: str = "fast") -> None:
    """Runs the model: a result, or a refusal of the model's or the input's kind (in exact
    mode also an operator exact mode does not cover)."""
    refusals = REFUSALS + (("exact_mode_unavailable",) if mode == "exact" else ())
    try:
        graphrt.Session(model.SerializeToString(), mode=mode).run(None, dict(feed))
    except graphrt.SessionError as err:
        assert err.kind in refusals, str(err)
