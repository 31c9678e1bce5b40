"""RMS normalization written as primitives, fused into one RMSNormalization node.

    ms = ReduceMean(Pow(x, 2) or Mul(x, x), axes=[-1])
    r  = Sqrt(Add(ms, eps))
    y  = Mul(x, Reciprocal(r))  or  Mul(x, Div(1, r))  or  Div(x, r)
         or Mul(x, Pow(Add(ms, eps), -0.5))                          [ -> Mul(y, gamma) ]

as exporters write ``x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight``
(LLaMA, T5, Mistral...; rsqrt exports as Reciprocal(Sqrt)), every Mul and Add with its
operands in either order.  Over the last axis only (``axes`` = [-1] as an attribute or, from
opset 18, a constant input; ``keepdims`` 1), as the layer norm fusion asks; eps is a positive
float scalar, gamma a float constant of at most one dimension and eps's type (it broadcasts
over the last axis as RMSNormalization's scale does); x is read by the square and the final
product (and may have other readers: it stays), every intermediate by exactly one node, none is
a graph output.  The result is ai.onnx RMSNormalization (axis -1) when the model's opset has it
(23+), else ``com.graphrt.RMSNormalization`` (the same kernel); without a gamma the scale is a
constant 1.

The kernel sums the squares with one einsum and divides x by the root where the model may
multiply by a reciprocal, so the pass does not preserve bits (and the primitives have no exact
kernels: ReduceMean sums pairwise, Pow is numpy's).
"""

from __future__ import annotations

import numpy as np

from graphrt.plugin import PassGraph, PassNode

from ._match import (
    float_constant,
    is_op,
    other_input,
    scalar,
    sole_reader,
)
from .layernorm import NormFusion, _over_last_axis


class FuseRMSNorm(NormFusion):
    name = "fuse_rms_norm"
    order = 150
    fused_op = "RMSNormalization"

    def _match(
        self, graph: PassGraph, mean: PassNode
    ) -> tuple[list[str], float, list[PassNode]] | None:
        if not _over_last_axis(graph, mean):
            return None
        square = graph.producer(mean.inputs[0])
        x = _squared(graph, square)
        if x is None or sole_reader(graph, square.outputs[0]) is not mean:
            return None
        plus = sole_reader(graph, mean.outputs[0])
        if not is_op(plus, "Add", 7):
            return None
        eps = scalar(graph, other_input(plus, mean.outputs[0]) or "", max_ndim=1)
        if eps is None or not float(eps) > 0:
            return None
        old = [square, mean, plus]
        value = plus.outputs[0]
        node = sole_reader(graph, value)
        if is_op(node, "Pow", 7) and node.inputs[0] == value and _is(graph, node.inputs[1], -0.5):
            old.append(node)  # (ms + eps) ** -0.5
        else:
            if not is_op(node, "Sqrt"):
                return None
            old.append(node)
            value = node.outputs[0]
            node = sole_reader(graph, value)
            if is_op(node, "Div", 7) and node.inputs == [x, value]:  # x / r: the product itself
                return self._gamma(graph, x, eps, old + [node])
            if is_op(node, "Reciprocal") or (
                is_op(node, "Div", 7) and node.inputs[1] == value and _is(graph, node.inputs[0], 1)
            ):
                old.append(node)
            else:
                return None
        value = old[-1].outputs[0]
        product = sole_reader(graph, value)
        if not is_op(product, "Mul", 7) or other_input(product, value) != x or x == value:
            return None
        return self._gamma(graph, x, eps, old + [product])

    @staticmethod
    def _gamma(
        graph: PassGraph, x: str, eps: np.ndarray, old: list[PassNode]
    ) -> tuple[list[str], float, list[PassNode]]:
        """The inputs with the gamma of a following Mul by a constant, if there is one."""
        value = old[-1].outputs[0]
        node = sole_reader(graph, value)
        scale = ""
        if is_op(node, "Mul", 7):
            name = other_input(node, value) or ""
            c = float_constant(graph, name)
            if c is not None and c.dtype == eps.dtype and c.ndim <= 1 and name != value:
                scale = name
                old.append(node)
        if not scale:
            scale = graph.add_constant(x + "_rms_scale", np.ones(1, eps.dtype))
        return [x, scale], float(eps), old


def _squared(graph: PassGraph, node: PassNode | None) -> str | None:
    """x, when ``node`` is Mul(x, x) or Pow(x, 2)."""
    if is_op(node, "Mul", 7) and len(node.inputs) == 2 and node.inputs[0] == node.inputs[1]:
        return node.inputs[0]
    if is_op(node, "Pow", 7) and len(node.inputs) == 2 and _is(graph, node.inputs[1], 2):
        return node.inputs[0]
    return None


def _is(graph: PassGraph, name: str, target: float) -> bool:
    """A constant of one element (at most 1-D) equal to ``target`` (exact in every type)."""
    value = graph.constants.get(name) if name else None
    return (
        value is not None
        and value.size == 1
        and value.ndim <= 1
        and value.dtype.kind in "fiu"
        and float(value.reshape(())) == target
    )
