"""GELU written as primitives, fused into one Gelu node.

    0.5 * x * (1 + Erf(x / sqrt(2)))

as exporters write it: ``x / sqrt(2)`` as a Div by sqrt(2) or a Mul by 1/sqrt(2) (either
operand order); ``1 + erf`` as an Add either way round; then the product in any of

    ((x * (1 + erf)) * 0.5)      (x * 0.5) * (1 + erf)      x * ((1 + erf) * 0.5)

with every Mul's operands in either order.  Constants are float scalars (0-d: they broadcast
without changing x's shape) whose value is the exact one rounded to their type; every
intermediate is read by exactly one node and is no graph output.  The result is ai.onnx Gelu
when the model's opset has it (20+), else ``com.graphrt.Gelu``.

The Gelu kernel evaluates its own sequence of roundings (x * 1/sqrt(2) even where the model
divides, its own association of the products), so the pass does not preserve bits and is
skipped in exact mode (where Erf is not available anyway).
"""

from __future__ import annotations

import math

import numpy as np

from graphrt.plugin import PassContext, PassGraph, PassNode

from ._match import (
    GRAPHRT,
    Fusion,
    FusionPass,
    fusion,
    is_op,
    near,
    other_input,
    scalar,
    sole_reader,
)

SQRT2 = math.sqrt(2.0)


class FuseGelu(FusionPass):
    name = "fuse_gelu"
    min_level = "all"
    preserves_bits = False
    order = 120

    def starts(self, node: PassNode) -> bool:
        return is_op(node, "Erf")

    def fuse(self, graph: PassGraph, ctx: PassContext, erf: PassNode) -> Fusion | None:
        found = self._match(graph, erf)
        if found is None:
            return None
        return fusion(ctx, erf, "Gelu", [found[0]], found[1], {}, ("", GRAPHRT))

    def _match(self, graph: PassGraph, erf: PassNode) -> tuple[str, list[PassNode]] | None:
        scaled = erf.inputs[0] if erf.inputs else ""
        pre = graph.producer(scaled)
        if pre is None or sole_reader(graph, scaled) is not erf:
            return None
        x = _argument(graph, pre)
        plus = sole_reader(graph, erf.outputs[0])
        if x is None or not is_op(plus, "Add", 7) or not _is(graph, plus, erf.outputs[0], 1.0):
            return None
        one_plus = plus.outputs[0]
        mul = sole_reader(graph, one_plus)
        if not is_op(mul, "Mul", 7):
            return None
        other = other_input(mul, one_plus)
        if other == x:  # (x * (1 + erf)) * 0.5
            last = sole_reader(graph, mul.outputs[0])
            if is_op(last, "Mul", 7) and _is(graph, last, mul.outputs[0], 0.5):
                return x, [pre, erf, plus, mul, last]
            return None
        half_x = graph.producer(other or "")
        if (  # (x * 0.5) * (1 + erf)
            is_op(half_x, "Mul", 7)
            and sole_reader(graph, other) is mul
            and other_input(half_x, x) is not None
            and _is(graph, half_x, x, 0.5)
        ):
            return x, [pre, erf, plus, half_x, mul]
        if _is(graph, mul, one_plus, 0.5):  # x * ((1 + erf) * 0.5)
            last = sole_reader(graph, mul.outputs[0])
            if is_op(last, "Mul", 7) and other_input(last, mul.outputs[0]) == x:
                return x, [pre, erf, plus, mul, last]
        return None


def _argument(graph: PassGraph, pre: PassNode) -> str | None:
    """x, when ``pre`` computes x / sqrt(2) or x * (1 / sqrt(2))."""
    if is_op(pre, "Div", 7) and len(pre.inputs) == 2:
        c = scalar(graph, pre.inputs[1])
        return pre.inputs[0] if c is not None and near(c, SQRT2) else None
    if is_op(pre, "Mul", 7) and len(pre.inputs) == 2:
        for k in (0, 1):
            c = scalar(graph, pre.inputs[1 - k])
            if c is not None and near(c, 1 / SQRT2):
                return pre.inputs[k]
    return None


def _is(graph: PassGraph, node: PassNode, value: str, target: float) -> bool:
    """Whether ``node``'s input other than ``value`` is a scalar constant equal to ``target``
    (0.5 and 1 are exact in every float type, so equality is asked for)."""
    c = scalar(graph, other_input(node, value) or "")
    return c is not None and bool(c == np.asarray(target, c.dtype))
