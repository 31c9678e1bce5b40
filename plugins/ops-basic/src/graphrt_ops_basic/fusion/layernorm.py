"""LayerNormalization written as primitives, fused into one LayerNormalization node.

    mean = ReduceMean(x, axes=[-1])          d = Sub(x, mean)
    var  = ReduceMean(Pow(d, 2) or Mul(d, d), axes=[-1])
    y    = Div(d, Sqrt(Add(var, eps)))  [ -> Mul(y, gamma) ] [ -> Add(y, beta) ]

over the last axis only (``axes`` = [-1] as an attribute or, from opset 18, a constant input;
``keepdims`` 1): a pass never knows ranks, so a positive axis cannot be told to be the last.
eps is a positive float scalar, gamma and beta float constants of at most one dimension (they
broadcast over the last axis as LayerNormalization's Scale and B do); d is read by exactly the
square and the Div, every other intermediate by exactly one node, none is a graph output.  The
result is ai.onnx LayerNormalization (axis -1) when the model's opset has it (17+), else
``com.graphrt.LayerNormalization``; without a gamma the scale is a constant 1.

The kernel's statistics are its own (a mean from one pairwise sum, the variance as a dot
product of the centred row with itself, one multiply by 1/sqrt instead of a division; float16
computed in float32), so the pass does not preserve bits and is skipped in exact mode.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from graphrt.plugin import PassContext, PassGraph, PassNode

from ._match import (
    GRAPHRT,
    Fusion,
    FusionPass,
    float_constant,
    fusion,
    is_op,
    other_input,
    scalar,
    sole_reader,
)


class NormFusion(FusionPass):
    """A normalization over the last axis, found from its first ReduceMean: ``_match`` returns
    the fused node's inputs, its epsilon and the nodes it replaces."""

    min_level = "all"
    preserves_bits = False
    fused_op: ClassVar[str]

    def starts(self, node: PassNode) -> bool:
        return is_op(node, "ReduceMean")

    def fuse(self, graph: PassGraph, ctx: PassContext, mean: PassNode) -> Fusion | None:
        found = self._match(graph, mean)
        if found is None:
            return None
        inputs, eps, old = found
        attrs = {"axis": -1, "epsilon": eps, "stash_type": 1}
        return fusion(ctx, mean, self.fused_op, inputs, old, attrs, ("", GRAPHRT))

    def _match(
        self, graph: PassGraph, mean: PassNode
    ) -> tuple[list[str], float, list[PassNode]] | None:
        raise NotImplementedError


class FuseLayerNorm(NormFusion):
    name = "fuse_layernorm"
    order = 110
    fused_op = "LayerNormalization"

    def _match(
        self, graph: PassGraph, mean: PassNode
    ) -> tuple[list[str], float, list[PassNode]] | None:
        if not _over_last_axis(graph, mean):
            return None
        x = mean.inputs[0]
        sub = sole_reader(graph, mean.outputs[0])
        if not is_op(sub, "Sub", 7) or sub.inputs != [x, mean.outputs[0]]:
            return None
        d = sub.outputs[0]
        readers = graph.consumers(d)
        if graph.is_graph_output(d) or len(readers) != 2:
            return None
        square = next((n for n in readers if _squares(graph, n, d)), None)
        div = next((n for n in readers if n is not square), None)
        var = sole_reader(graph, square.outputs[0]) if square is not None else None
        if var is None or not is_op(var, "ReduceMean") or not _over_last_axis(graph, var):
            return None
        plus = sole_reader(graph, var.outputs[0])
        if not is_op(plus, "Add", 7):
            return None
        eps = scalar(graph, other_input(plus, var.outputs[0]) or "", max_ndim=1)
        if eps is None or not float(eps) > 0:
            return None
        root = sole_reader(graph, plus.outputs[0])
        if not is_op(root, "Sqrt") or sole_reader(graph, root.outputs[0]) is not div:
            return None
        if not is_op(div, "Div", 7) or div.inputs != [d, root.outputs[0]]:
            return None
        old = [mean, sub, square, var, plus, root, div]
        inputs = [x, "", ""]
        for k, op in ((1, "Mul"), (2, "Add")):
            value = old[-1].outputs[0]
            node = sole_reader(graph, value)
            if not is_op(node, op, 7):
                continue
            name = other_input(node, value) or ""
            c = float_constant(graph, name)
            if c is None or c.dtype != eps.dtype or c.ndim > 1:
                continue
            inputs[k] = name
            old.append(node)
        if not inputs[1]:
            inputs[1] = graph.add_constant(x + "_ln_scale", np.ones(1, eps.dtype))
        return [n for n in inputs if n], float(eps), old


def _over_last_axis(graph: PassGraph, node: PassNode) -> bool:
    """A ReduceMean over axes [-1] that keeps the reduced dim."""
    if not node.info.attrs.get("keepdims", 1):
        return False
    if node.info.opset < 18:
        axes = node.info.attrs.get("axes")
    else:
        value = graph.constants.get(node.inputs[1]) if len(node.inputs) > 1 else None
        axes = None if value is None else value.reshape(-1).tolist()
    return axes is not None and list(axes) == [-1]


def _squares(graph: PassGraph, node: PassNode, d: str) -> bool:
    """Mul(d, d) or Pow(d, 2)."""
    if is_op(node, "Mul", 7):
        return node.inputs == [d, d]
    if is_op(node, "Pow", 7) and len(node.inputs) == 2 and node.inputs[0] == d:
        e = graph.constants.get(node.inputs[1])
        return e is not None and e.size == 1 and e.ndim <= 1 and float(e.reshape(())) == 2.0
    return False
