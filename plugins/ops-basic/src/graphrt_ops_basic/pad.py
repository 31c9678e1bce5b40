"""Pad: constant, reflect, edge and wrap padding; negative pads crop.

Negative pads remove elements first and the remaining pads then apply to what is left, as
onnxruntime does (so ``wrap`` and ``reflect`` read the cropped tensor).  Constant mode fills the
output and copies the kept input into its interior.  The other modes are one ``np.take`` per
padded axis with an index array computed in ``infer`` (output position -> input position), so
pads larger than the input are fine (reflect repeats its reflection, as numpy's pad does) and a
run allocates nothing: intermediate results live in scratch arrays.

Before opset 11 the pads (``paddings`` in opset 1) and the value are attributes; from 11 they
are inputs, and opset 18 adds ``axes``; ``wrap`` exists from opset 19.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._values import axes_in, int_values


@dataclasses.dataclass(frozen=True)
class _Plan:
    crop: tuple[slice, ...]  # the kept part of the input
    interior: tuple[slice, ...]  # where it lands in the output (constant mode)
    #: other modes: (axis, input position of every output position, scratch index or None
    #: for the output itself), one per padded axis
    takes: tuple[tuple[int, np.ndarray, int | None], ...] | None
    value: np.ndarray | None  # constant mode: the 0-d fill value, None when it is input 2


class Pad(OpKernel):
    supports_exact = True  # copies and fills only

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.mode = node.attr("mode", "constant")
        modes = ("constant", "reflect", "edge") + (("wrap",) if node.opset >= 19 else ())
        if self.mode not in modes:
            raise self.fail(f"mode must be one of {', '.join(modes)}, got {self.mode!r}")
        self.pads = None
        if node.opset < 11:
            pads = node.attr("paddings" if node.opset == 1 else "pads")
            if pads is None:
                raise self.fail("the pads attribute is required")
            self.pads = list(pads)
        self.value = float(node.attr("value", 0.0))

    def infer(self, ctx: InferContext) -> None:
        dtype, shape = ctx.dtype(0), ctx.shape(0)
        rank = len(shape)
        kind = "invalid_model" if self.pads is not None else "invalid_input"
        pads = self.pads if self.pads is not None else int_values(ctx, 1)
        if self.node.opset >= 18 and ctx.has_input(3):
            axes = axes_in(self, int_values(ctx, 3), rank, "invalid_input")
        else:
            axes = list(range(rank))
        if len(pads) != 2 * len(axes):
            raise self.fail(f"{len(pads)} pads for {len(axes)} axes", kind)
        begin, end = [0] * rank, [0] * rank
        for k, a in enumerate(axes):
            begin[a], end[a] = pads[k], pads[k + len(axes)]
        crop, kept = [], []
        for d, b, e in zip(shape, begin, end):
            lo, hi = max(-b, 0), d - max(-e, 0)
            if hi < lo:
                message = f"pads {pads} remove more than the {d} elements of an axis"
                raise self.fail(message, "invalid_input")
            crop.append(slice(lo, hi))
            kept.append(hi - lo)
        begin = [max(b, 0) for b in begin]
        end = [max(e, 0) for e in end]
        out = [b + k + e for b, k, e in zip(begin, kept, end)]
        ctx.set_output(0, dtype, out)
        interior = tuple(slice(b, b + k) for b, k in zip(begin, kept))
        takes = None if self.mode == "constant" else self._takes(ctx, kept, begin, end)
        value = None
        if self.mode == "constant" and not (self.node.opset >= 11 and ctx.has_input(2)):
            value = _fill_value(dtype, self.value)
        ctx.prepared = _Plan(tuple(crop), interior, takes, value)

    def _takes(self, ctx: InferContext, kept: list[int], begin: list[int], end: list[int]):
        padded = [a for a in range(len(kept)) if begin[a] or end[a]]
        shape = list(kept)
        takes = []
        for a in padded:
            if kept[a] == 0:
                message = f"{self.mode} mode cannot pad an axis with no elements"
                raise self.fail(message, "invalid_input")
            positions = np.arange(-begin[a], kept[a] + end[a], dtype=np.intp)
            shape[a] = len(positions)
            last = a == padded[-1]
            scratch = None if last else ctx.add_scratch(ctx.dtype(0), shape)
            takes.append((a, _source(self.mode, positions, kept[a]), scratch))
        return tuple(takes)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Plan = ctx.prepared
        src, out = inputs[0][p.crop], outputs[0]
        if p.takes is None:
            value = p.value if p.value is not None else _value_input(self, inputs[2])
            np.copyto(out, value)
            np.copyto(out[p.interior], src)
            return
        if not p.takes:
            np.copyto(out, src)
        for axis, index, scratch in p.takes:
            dst = out if scratch is None else ctx.scratch[scratch]
            np.take(src, index, axis=axis, out=dst, mode="clip")
            src = dst


def _source(mode: str, positions: np.ndarray, n: int) -> np.ndarray:
    """Input position (0..n-1) read by each output position (relative to the kept input)."""
    if mode == "edge":
        return np.clip(positions, 0, n - 1)
    if mode == "wrap":
        return positions % n
    if n == 1:  # reflect
        return np.zeros_like(positions)
    period = 2 * (n - 1)
    m = positions % period
    return np.where(m < n, m, period - m)


def _fill_value(dtype: np.dtype, value: float) -> np.ndarray:
    if dtype == np.dtype(object):
        return np.array("" if value == 0 else str(value), dtype=object)
    return np.array(value).astype(dtype)


def _value_input(kernel: OpKernel, value: Any) -> np.ndarray:
    if value.size != 1:
        message = f"constant_value must be one value, got shape {list(value.shape)}"
        raise kernel.fail(message, "invalid_input")
    return value.reshape(())
