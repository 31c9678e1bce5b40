"""Operators whose output is input 0 reinterpreted with another shape.

``view_of_input`` kernels are never run: the planner gives the output the input's storage with
the shape ``infer`` stated, and keeps the source alive as long as the view.  Reshape is the
pattern; Flatten, Squeeze, Unsqueeze and Identity differ only in how the shape is computed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from graphrt.plugin import InferContext, OpKernel

from ._util import normalize_axis


class View(OpKernel):
    view_of_input = True
    supports_exact = True  # no arithmetic: the bits are the input's

    def infer(self, ctx: InferContext) -> None:
        ctx.set_output(0, ctx.dtype(0), self.target_shape(ctx))

    def target_shape(self, ctx: InferContext) -> Sequence[int]:
        raise NotImplementedError


class Identity(View):
    def target_shape(self, ctx: InferContext) -> Sequence[int]:
        return ctx.shape(0)


class Reshape(View):
    """Opset 1-4 read ``shape`` from an attribute, later ones from input 1 (often a constant)."""

    def target_shape(self, ctx: InferContext) -> Sequence[int]:
        if self.node.opset < 5:
            requested = list(self.node.attr("shape", []))
        else:
            requested = [int(v) for v in np.asarray(ctx.value(1)).reshape(-1)]
        src = ctx.shape(0)
        allowzero = self.node.attr("allowzero", 0)
        out = []
        for i, d in enumerate(requested):
            if d == 0 and not allowzero:
                if i >= len(src):
                    raise self.fail(f"shape entry {i} is 0 but the input has rank {len(src)}")
                d = src[i]
            out.append(d)
        total = math.prod(src)
        if out.count(-1) > 1:
            raise self.fail(f"shape {requested} has more than one -1")
        if -1 in out:
            known = math.prod(d for d in out if d != -1)
            if known == 0 or total % known:
                raise self.fail(f"cannot reshape {list(src)} to {requested}", "invalid_input")
            out[out.index(-1)] = total // known
        if math.prod(out) != total or any(d < 0 for d in out):
            raise self.fail(f"cannot reshape {list(src)} to {requested}", "invalid_input")
        return out


class Flatten(View):
    def target_shape(self, ctx: InferContext) -> Sequence[int]:
        src = ctx.shape(0)
        axis = self.node.attr("axis", 1)
        axis = axis + len(src) if axis < 0 else axis
        if not 0 <= axis <= len(src):
            raise self.fail(f"axis {self.node.attr('axis')} is out of range for rank {len(src)}")
        return (math.prod(src[:axis]), math.prod(src[axis:]))


class Squeeze(View):
    """Axes come from an attribute before opset 13 and from input 1 since."""

    def target_shape(self, ctx: InferContext) -> Sequence[int]:
        src = ctx.shape(0)
        axes = _axes(self, ctx)
        if axes is None:
            return tuple(d for d in src if d != 1)
        axes = {normalize_axis(a, len(src)) for a in axes}
        for a in axes:
            if src[a] != 1:
                raise self.fail(f"cannot squeeze axis {a} of extent {src[a]}", "invalid_input")
        return tuple(d for i, d in enumerate(src) if i not in axes)


class Unsqueeze(View):
    def target_shape(self, ctx: InferContext) -> Sequence[int]:
        src = list(ctx.shape(0))
        axes = _axes(self, ctx) or []
        rank = len(src) + len(axes)
        axes = sorted(normalize_axis(a, rank) for a in axes)
        if len(set(axes)) != len(axes):
            raise self.fail(f"repeated axes {axes}")
        for a in axes:
            src.insert(a, 1)
        return src


def _axes(kernel: OpKernel, ctx: InferContext) -> list[int] | None:
    if kernel.node.opset < 13:
        axes = kernel.node.attr("axes")
        return None if axes is None else list(axes)
    if not ctx.has_input(1):
        return None
    return [int(a) for a in np.asarray(ctx.value(1)).reshape(-1)]
