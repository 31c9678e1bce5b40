"""Model-local functions (ModelProto.functions), resolved before any plugin operator.

A call to a function the model defines is replaced by the function's body: formal inputs and
outputs renamed to the call's values, every other value given a name unique to the call, and
attributes that refer to the caller's (``ref_attr_name``) filled in from the call or from the
function's defaults.  Calls inside function bodies are expanded the same way, so nested
functions work; a body that uses an operator no plugin provides is reported like any other
missing operator.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from graphrt.errors import SessionError
from graphrt.ir import IrModel, IrNode, check_cancelled, decl
from graphrt.proto import AttributeProto, NodeProto

__all__ = ["inline_functions"]

MAX_DEPTH = 64
#: Most nodes inlining may make: calls that fan out at every level grow exponentially.
MAX_NODES = 1_000_000


def inline_functions(ir: IrModel, cancellation: Any = None) -> IrModel:
    """The model with every call of a model-local function expanded (``cancellation`` is
    checked per call: a million inlined nodes take a while)."""
    if not ir.functions:
        return ir
    table = {(f.domain, f.name): f for f in ir.functions}
    for f in ir.functions:
        for imp in f.opset_import:
            ir.opsets.setdefault("" if imp.domain == "ai.onnx" else imp.domain, int(imp.version))
    sizes: dict[tuple[str, str], int] = {}
    total = sum(_inlined_size(n.proto, table, sizes, 0) for n in ir.nodes)
    if total > MAX_NODES:
        raise SessionError(
            "invalid_model",
            f"inlining the model-local functions would make {total} nodes; graphrt refuses "
            f"more than {MAX_NODES}",
        )
    counter = itertools.count()
    nodes: list[IrNode] = []
    for n in ir.nodes:
        check_cancelled(cancellation)
        nodes += [IrNode.of(proto) for proto in _expand(n.proto, table, counter, 0, ir)]
    _check_single_assignment(nodes, {d.name for d in ir.inputs} | set(ir.initializers))
    ir.nodes = nodes
    return ir


def _inlined_size(node: NodeProto, table: dict, sizes: dict, depth: int) -> int:
    """How many nodes a node becomes once inlined, counted without building them."""
    key = (node.domain, node.op_type)
    fn = table.get(key)
    if fn is None:
        return 1
    if key not in sizes:
        if depth > MAX_DEPTH:
            raise SessionError(
                "invalid_model",
                f"function {node.op_type!r} calls itself (recursion)",
                node=node.name,
            )
        sizes[key] = sum(_inlined_size(n, table, sizes, depth + 1) for n in fn.node)
    return sizes[key]


def _check_single_assignment(nodes: list[IrNode], known: set[str]) -> None:
    """A function body that writes a value twice (or over an input) is an invalid model."""
    written = set(known)
    for n in nodes:
        for o in n.outputs:
            if o and o in written:
                raise SessionError(
                    "invalid_model",
                    f"value {o!r} is produced twice (node {n.name!r}, inlined from a function)",
                    node=n.name,
                )
            written.add(o)


def _expand(node: NodeProto, table: dict, counter: Any, depth: int, ir: IrModel) -> list[NodeProto]:
    """The call replaced by the function's nodes; its value_info joins the model's, renamed."""
    fn = table.get((node.domain, node.op_type))
    if fn is None:
        return [node]
    if depth > MAX_DEPTH:
        raise SessionError(
            "invalid_model", f"function {node.op_type!r} calls itself (recursion)", node=node.name
        )
    call = next(counter)
    prefix = f"{node.name or node.op_type}__call{call}__"
    rename: dict[str, str] = {}
    for formal, actual in zip(fn.input, node.input):
        rename[formal] = actual
    for formal in fn.input[len(node.input) :]:
        rename[formal] = ""
    for formal, actual in zip(fn.output, node.output):
        rename[formal] = actual
    for v in getattr(fn, "value_info", ()):  # annotations share the run's map (check_shapes)
        name = _renamed(v.name, rename, prefix)
        if name:
            ir.value_info.setdefault(name, dataclasses.replace(decl(v), name=name))
    attrs = {a.name: a for a in node.attribute}
    defaults = {a.name: a for a in fn.attribute_proto}
    out: list[NodeProto] = []
    for body_node in fn.node:
        new = NodeProto()
        new.CopyFrom(body_node)
        new.name = prefix + (body_node.name or body_node.op_type)
        del new.input[:]
        new.input.extend(_renamed(x, rename, prefix) for x in body_node.input)
        del new.output[:]
        new.output.extend(_renamed(x, rename, prefix) for x in body_node.output)
        del new.attribute[:]
        for a in body_node.attribute:
            if a.ref_attr_name:
                given = attrs.get(a.ref_attr_name) or defaults.get(a.ref_attr_name)
                if given is None:
                    continue  # not given and no default: the attribute is absent
                filled = AttributeProto()
                filled.CopyFrom(given)
                filled.name = a.name
                new.attribute.append(filled)
            else:
                new.attribute.append(a)
        out.extend(_expand(new, table, counter, depth + 1, ir))
    return out


def _renamed(name: str, rename: dict[str, str], prefix: str) -> str:
    if not name:
        return name
    if name in rename:
        return rename[name]
    return prefix + name
