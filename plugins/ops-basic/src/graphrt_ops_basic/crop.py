"""CenterCropPad: crop or zero-pad chosen axes to target extents, keeping the input centred.

Per axis, an input longer than its target loses ``(d - t) // 2`` elements at the start (the
window shifts towards the start when the difference is odd); a shorter one gets ``(t - d) // 2``
zeros before it and the rest after.  A run fills the padded borders with zeros and copies the
kept block once: copies and fills only, so the kernel is exact.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._typed_attrs import typed_attr
from ._values import axes_in, int_values


@dataclasses.dataclass(frozen=True)
class _Plan:
    source: tuple[slice, ...]  # the kept block of the input
    target: tuple[slice, ...]  # where it lands in the output
    pads: bool  # whether any output element lies outside the kept block


class CenterCropPad(OpKernel):
    supports_exact = True  # copies and zero fills only

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.axes = typed_attr(self, "axes", None, "ints")

    def infer(self, ctx: InferContext) -> None:
        if ctx.dtype(1) not in (np.int32, np.int64) or len(ctx.shape(1)) != 1:
            message = f"shape must be a 1-D int32 or int64 tensor, got {ctx.dtype(1)}"
            raise self.fail(f"{message} {list(ctx.shape(1))}", "invalid_input")
        shape = ctx.shape(0)
        rank = len(shape)
        if self.axes is None:
            axes = list(range(rank))
        else:
            axes = axes_in(self, self.axes, rank, "invalid_model")
        target = int_values(ctx, 1)
        if len(target) != len(axes):
            message = f"shape has {len(target)} values for {len(axes)} axes"
            raise self.fail(message, "invalid_input")
        if any(t < 0 for t in target):
            raise self.fail(f"shape {target} has a negative extent", "invalid_input")
        out = list(shape)
        source = [slice(None)] * rank
        dest = [slice(None)] * rank
        for a, t in zip(axes, target):
            d = shape[a]
            out[a] = t
            if t < d:
                lo = (d - t) // 2
                source[a] = slice(lo, lo + t)
            elif t > d:
                lo = (t - d) // 2
                dest[a] = slice(lo, lo + d)
        ctx.set_output(0, ctx.dtype(0), out)
        pads = any(t > shape[a] for a, t in zip(axes, target))
        ctx.prepared = _Plan(tuple(source), tuple(dest), pads)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Plan = ctx.prepared
        out = outputs[0]
        if p.pads:
            out.fill("" if out.dtype == np.dtype(object) else 0)
        np.copyto(out[p.target], inputs[0][p.source])
