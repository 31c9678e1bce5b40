"""Slice: a strided window of the input, with ONNX's clamping rules (opset 13 text).

Python's slices clamp differently for negative steps (ONNX clamps a start below 0 to 0, so
``x[-10:-20:-1]`` of five elements is ``[x[0]]`` in ONNX and empty in Python), so the effective
bounds are computed here and only then turned into slice objects.  They go to ``prepared``:
when starts/ends/axes/steps are constants (the common case) that happens once per plan and
``bind`` makes the sliced view once per run state, so a run is one ``np.copyto``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._values import axes_in, int_values


def effective_bounds(start: int, end: int, step: int, dim: int) -> tuple[int, int, int]:
    """(start, end, count) after ONNX's adjustment: negatives count from the back, then start
    is clamped to [0, dim] ([0, dim - 1] stepping backwards) and end to [0, dim] ([-1, dim - 1])."""
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start = min(max(start, 0), dim)
        end = min(max(end, 0), dim)
        count = max(-((start - end) // step), 0)
    else:
        start = min(max(start, 0), dim - 1)
        end = min(max(end, -1), dim - 1)
        count = max(-((end - start) // -step), 0)
    return start, end, count


def _slice(start: int, end: int, step: int, count: int) -> slice:
    if count == 0:
        return slice(0, 0)
    return slice(start, end if end >= 0 else None, step)  # end -1: through element 0


class Slice(OpKernel):
    """starts/ends/axes are attributes before opset 10; inputs (with steps) from then on."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        if node.opset < 10:
            if node.attr("starts") is None or node.attr("ends") is None:
                raise self.fail("the starts and ends attributes are required")

    def infer(self, ctx: InferContext) -> None:
        shape = ctx.shape(0)
        if self.node.opset < 10:
            kind = "invalid_model"
            starts, ends = list(self.node.attr("starts")), list(self.node.attr("ends"))
            axes, steps = self.node.attr("axes"), None
        else:
            kind = "invalid_input"
            starts, ends = int_values(ctx, 1), int_values(ctx, 2)
            axes = int_values(ctx, 3) if ctx.has_input(3) else None
            steps = int_values(ctx, 4) if ctx.has_input(4) else None
        n = len(starts)
        axes = list(range(n)) if axes is None else list(axes)
        steps = [1] * n if steps is None else steps
        if not len(ends) == len(axes) == len(steps) == n:
            message = f"starts, ends, axes, steps differ in length: {n}, {len(ends)}, "
            raise self.fail(message + f"{len(axes)}, {len(steps)}", kind)
        if 0 in steps:
            raise self.fail(f"steps {steps} contain 0", kind)
        index = [slice(None)] * len(shape)
        out = list(shape)
        for a, start, end, step in zip(axes_in(self, axes, len(shape), kind), starts, ends, steps):
            start, end, count = effective_bounds(start, end, step, shape[a])
            index[a] = _slice(start, end, step, count)
            out[a] = count
        ctx.set_output(0, ctx.dtype(0), out)
        ctx.prepared = tuple(index)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        np.copyto(outputs[0], inputs[0][ctx.prepared])

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        return functools.partial(np.copyto, outputs[0], inputs[0][ctx.prepared])
