"""Compress: the slices (or, without an axis, the elements) where a boolean condition holds.

The output's length is the condition's count of True, so ``infer`` reads the condition's value:
a constant condition makes a static step whose kept positions are found once per plan, a
run-time one a dynamic node shaped in every run.  A condition shorter than the axis drops the
rest; entries past the axis are ignored, as onnxruntime does (numpy.compress would refuse a
True there).  A selection of elements: exact.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._values import axis_in


class Compress(OpKernel):
    """``take`` of the positions where condition[:n] is True along ``axis`` (or flattened).

    A run-time condition makes a dynamic node whose ``infer`` runs every run: it finds the
    positions with one ``nonzero`` and little else.
    """

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.axis = node.attr("axis")

    def infer(self, ctx: InferContext) -> None:
        if ctx.dtype(1).kind != "b":
            raise self.fail(f"condition must be bool, got {ctx.dtype(1)}")
        if len(ctx.shape(1)) != 1:
            message = f"condition must have rank 1, got shape {list(ctx.shape(1))}"
            raise self.fail(message, "invalid_input")
        shape = ctx.shape(0)
        if self.axis is None:
            axis, n = None, math.prod(shape)
        else:
            axis = axis_in(self, self.axis, len(shape), "invalid_input")
            n = shape[axis]
        condition = ctx.value(1)
        kept = (condition if len(condition) <= n else condition[:n]).nonzero()[0]
        out = (kept.size,) if axis is None else shape[:axis] + (kept.size,) + shape[axis + 1 :]
        ctx.set_output(0, ctx.dtype(0), out)
        ctx.prepared = (axis, kept)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        axis, kept = ctx.prepared
        x = inputs[0]
        if axis is None:
            x.reshape(-1).take(kept, out=outputs[0], mode="clip")
        else:
            x.take(kept, axis=axis, out=outputs[0], mode="clip")

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        """A constant condition: the bare ``take`` (on a flat view made once)."""
        axis, kept = ctx.prepared
        x = inputs[0]
        if axis is not None:
            return functools.partial(x.take, kept, axis=axis, out=outputs[0], mode="clip")
        if not x.flags.c_contiguous:  # a reshape would copy: flatten every run
            return functools.partial(self.run, ctx, inputs, outputs)
        return functools.partial(x.reshape(-1).take, kept, out=outputs[0], mode="clip")
