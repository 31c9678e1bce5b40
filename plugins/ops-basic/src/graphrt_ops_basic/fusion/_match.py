"""What the fusion passes share: constants read as numbers, chains of values that exactly one
node reads, and the fused node itself."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import GraphPass, PassContext, PassGraph, PassNode

GRAPHRT = "com.graphrt"

Fusion = tuple[list[PassNode], PassNode]


class FusionPass(GraphPass):
    """A pass that looks at every node it may start a pattern from (:meth:`starts`) and
    replaces the nodes :meth:`fuse` returns by the node it makes."""

    def starts(self, node: PassNode) -> bool:
        raise NotImplementedError

    def fuse(self, graph: PassGraph, ctx: PassContext, node: PassNode) -> Fusion | None:
        raise NotImplementedError

    def run(self, graph: PassGraph, ctx: PassContext) -> bool:
        gone: set[int] = set()  # ids of the nodes fused away during this run
        for node in list(graph.nodes):
            if id(node) in gone or not self.starts(node):
                continue
            found = self.fuse(graph, ctx, node)
            if found is not None:
                graph.replace(*found)
                gone.update(id(n) for n in found[0])
        return bool(gone)


def sole_reader(graph: PassGraph, name: str) -> PassNode | None:
    """The node reading ``name`` when it is the only one and ``name`` is no graph output: the
    condition for ``name`` to disappear into a fused node."""
    if not name or graph.is_graph_output(name):
        return None
    readers = graph.consumers(name)
    return readers[0] if len(readers) == 1 else None


def is_op(node: PassNode | None, op_type: str, min_opset: int = 1) -> bool:
    """An ai.onnx node of this type, from this opset on."""
    return (
        node is not None
        and node.op_type == op_type
        and node.info.domain == ""
        and node.info.opset >= min_opset
    )


def float_constant(graph: PassGraph, name: str) -> np.ndarray | None:
    """The constant ``name`` if it is a float16/32/64 tensor."""
    value = graph.constants.get(name) if name else None
    if value is None or not isinstance(value, np.ndarray) or value.dtype.kind != "f":
        return None
    return value


def scalar(graph: PassGraph, name: str, max_ndim: int = 0) -> np.ndarray | None:
    """A float constant of one element and at most ``max_ndim`` dims (0: a true scalar, which
    broadcasts without changing any shape), as a 0-d array of its type."""
    value = float_constant(graph, name)
    if value is None or value.size != 1 or value.ndim > max_ndim:
        return None
    return value.reshape(())


def near(value: np.ndarray, target: float) -> bool:
    """``value`` is ``target`` rounded to its type (within one unit of that type's rounding)."""
    eps = float(np.finfo(value.dtype).eps)
    return abs(float(value) - target) <= eps * abs(target)


def other_input(node: PassNode, name: str) -> str | None:
    """The input of a two-input node that is not ``name`` (``name`` itself for f(v, v))."""
    if len(node.inputs) != 2:
        return None
    a, b = node.inputs
    if a == name:
        return b
    return a if b == name else None


def fusion(
    ctx: PassContext,
    anchor: PassNode,
    op_type: str,
    inputs: Sequence[str],
    old: list[PassNode],
    attrs: dict[str, Any],
    domains: Sequence[str] = (GRAPHRT,),
) -> Fusion | None:
    """``old`` and the node replacing it: ``op_type`` of the first of ``domains`` the session
    has (None if none has it), writing what the last of ``old`` wrote.

    The new node keeps the anchor's name (errors and ``graphrt explain`` name a node the model
    has).
    """
    for domain in domains:
        op_def = ctx.lookup(domain, op_type)
        if op_def is not None:
            break
    else:
        return None
    outputs = list(old[-1].outputs)
    info = dataclasses.replace(
        anchor.info,
        op_type=op_type,
        domain=domain,
        opset=anchor.info.opset if domain == "" else 1,
        attrs=attrs,
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        proto=None,
    )
    return old, PassNode(info, op_def, list(inputs), outputs)


def rewired(
    node: PassNode, inputs: Sequence[str], outputs: Sequence[str], attrs: dict[str, Any]
) -> PassNode:
    """The same operator with other inputs, outputs and attributes (a Conv that takes the bias
    of an Add)."""
    info = dataclasses.replace(
        node.info, attrs=attrs, inputs=tuple(inputs), outputs=tuple(outputs), proto=None
    )
    return PassNode(info, node.op_def, list(inputs), list(outputs))
