"""Operators that make shapes or take their values from shapes (the shape subgraph of exports).

Shape and Size are constants for a plan; ConstantOfShape, Range and Expand read their shape
inputs with ``ctx.value`` so that, when those come from constants (the usual Shape -> Gather ->
Concat chain), the plan knows every extent and the node stays static.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.kernel import InferContext, KernelContext, OpKernel


class Shape(OpKernel):
    supports_exact = True

    def infer(self, ctx: InferContext) -> None:
        shape = ctx.shape(0)
        rank = len(shape)
        start = self.node.attr("start", 0) if self.node.opset >= 15 else 0
        end = self.node.attr("end", rank) if self.node.opset >= 15 else rank
        start = min(max(start + rank if start < 0 else start, 0), rank)
        end = min(max(end + rank if end < 0 else end, 0), rank)
        ctx.set_constant_output(0, np.array(shape[start:end], dtype=np.int64))


class Size(OpKernel):
    supports_exact = True

    def infer(self, ctx: InferContext) -> None:
        ctx.set_constant_output(0, np.array(math.prod(ctx.shape(0)), dtype=np.int64))


def _shape_value(kernel: OpKernel, ctx: InferContext, i: int) -> tuple[int, ...]:
    value = np.asarray(ctx.value(i))
    if value.ndim != 1:
        raise kernel.fail(f"the shape input must be 1-D, got shape {list(value.shape)}", "invalid_input")
    dims = tuple(int(d) for d in value)
    if any(d < 0 for d in dims):
        raise kernel.fail(f"negative extent in shape {list(dims)}", "invalid_input")
    return dims


class ConstantOfShape(OpKernel):
    supports_exact = True

    def infer(self, ctx: InferContext) -> None:
        value = self.node.attr("value")
        fill = np.zeros((), np.float32) if value is None else np.asarray(value).reshape(())
        ctx.set_output(0, fill.dtype, _shape_value(self, ctx, 0))
        ctx.prepared = fill

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        np.copyto(outputs[0], ctx.prepared)


class Range(OpKernel):
    """start + i * delta for i < max(ceil((limit - start) / delta), 0), in the inputs' type."""

    def infer(self, ctx: InferContext) -> None:
        start, limit, delta = (np.asarray(ctx.value(i)).reshape(()) for i in range(3))
        if delta == 0:
            raise self.fail("delta must not be 0", "invalid_input")
        count = max(math.ceil((float(limit) - float(start)) / float(delta)), 0)
        ctx.set_output(0, ctx.dtype(0), (count,))
        ctx.prepared = (start, delta)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        start, delta = ctx.prepared
        out = outputs[0]
        # each element is its own start + i * delta (no running sum, so no drift)
        np.multiply(np.arange(out.shape[0], dtype=out.dtype), delta, out=out, casting="unsafe")
        np.add(out, start, out=out, casting="unsafe")


class Expand(OpKernel):
    supports_exact = True

    def infer(self, ctx: InferContext) -> None:
        target = np.asarray(ctx.value(1)).reshape(-1)
        try:
            shape = np.broadcast_shapes(ctx.shape(0), tuple(int(d) for d in target))
        except ValueError as exc:
            raise self.fail(
                f"cannot expand {list(ctx.shape(0))} to {target.tolist()}", "invalid_input"
            ) from exc
        ctx.set_output(0, ctx.dtype(0), shape)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        np.copyto(outputs[0], inputs[0])
