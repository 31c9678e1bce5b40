"""Operators that move data without arithmetic: Concat, Gather, Slice, Transpose, Split, Tile,
Pad, GatherElements, NonZero.  All are exact: the output bits are input bits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.kernel import InferContext, KernelContext, OpKernel

from ._util import normalize_axis

INT64_MAX = np.iinfo(np.int64).max


class _Movement(OpKernel):
    supports_exact = True


class Concat(_Movement):
    def infer(self, ctx: InferContext) -> None:
        shapes = [ctx.shape(i) for i in range(ctx.num_inputs) if ctx.has_input(i)]
        rank = len(shapes[0])
        if any(len(s) != rank for s in shapes):
            raise self.fail(f"inputs have different ranks: {[list(s) for s in shapes]}", "invalid_input")
        axis = normalize_axis(self.node.attr("axis", 1 if self.node.opset < 4 else 0), rank)
        for s in shapes[1:]:
            if any(a != b for i, (a, b) in enumerate(zip(s, shapes[0])) if i != axis):
                raise self.fail(
                    f"shapes {[list(s) for s in shapes]} differ outside axis {axis}", "invalid_input"
                )
        out = list(shapes[0])
        out[axis] = sum(s[axis] for s in shapes)
        ctx.set_output(0, ctx.dtype(0), out)
        ctx.prepared = axis

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        parts = [x for x in inputs if x is not None]
        np.concatenate(parts, axis=ctx.prepared, out=outputs[0])


class Gather(_Movement):
    def infer(self, ctx: InferContext) -> None:
        data, idx = ctx.shape(0), ctx.shape(1)
        axis = normalize_axis(self.node.attr("axis", 0), len(data))
        ctx.set_output(0, ctx.dtype(0), data[:axis] + idx + data[axis + 1 :])
        ctx.prepared = (axis, ctx.add_scratch(np.int64, idx))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        data, idx = inputs
        axis, scratch = ctx.prepared
        n = data.shape[axis]
        fixed = _checked_indices(self, idx, n, ctx.scratch[scratch])
        np.take(data, fixed, axis=axis, out=outputs[0])


def _checked_indices(kernel: OpKernel, idx: np.ndarray, n: int, out: np.ndarray) -> np.ndarray:
    """Indices in [0, n): negative ones count from the end; anything else is an input error."""
    if idx.size and (idx.min() < -n or idx.max() >= n):
        bad = idx[(idx < -n) | (idx >= n)].reshape(-1)[0]
        raise kernel.fail(f"index {int(bad)} is out of range for an axis of {n}", "invalid_input")
    np.copyto(out, idx, casting="unsafe")
    np.add(out, n, out=out, where=out < 0)
    return out


class GatherElements(_Movement):
    def infer(self, ctx: InferContext) -> None:
        rank = len(ctx.shape(0))
        if len(ctx.shape(1)) != rank:
            raise self.fail("data and indices must have the same rank", "invalid_input")
        ctx.set_output(0, ctx.dtype(0), ctx.shape(1))
        axis = normalize_axis(self.node.attr("axis", 0), rank)
        ctx.prepared = (axis, ctx.add_scratch(np.int64, ctx.shape(1)))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        data, idx = inputs
        axis, scratch = ctx.prepared
        fixed = _checked_indices(self, idx, data.shape[axis], ctx.scratch[scratch])
        outputs[0][...] = np.take_along_axis(data, fixed, axis=axis)


@dataclasses.dataclass(frozen=True)
class _Slices:
    index: tuple[slice, ...]


class Slice(_Movement):
    """Opset 1-9 read starts/ends/axes attributes; later ones inputs, with optional steps."""

    def infer(self, ctx: InferContext) -> None:
        shape = ctx.shape(0)
        if self.node.opset < 10:
            starts = list(self.node.attr("starts", []))
            ends = list(self.node.attr("ends", []))
            axes = self.node.attr("axes")
            steps = [1] * len(starts)
        else:
            starts = [int(v) for v in np.asarray(ctx.value(1)).reshape(-1)]
            ends = [int(v) for v in np.asarray(ctx.value(2)).reshape(-1)]
            axes = (
                [int(v) for v in np.asarray(ctx.value(3)).reshape(-1)] if ctx.has_input(3) else None
            )
            steps = (
                [int(v) for v in np.asarray(ctx.value(4)).reshape(-1)]
                if ctx.has_input(4)
                else [1] * len(starts)
            )
        axes = list(range(len(starts))) if axes is None else list(axes)
        if not (len(starts) == len(ends) == len(axes) == len(steps)):
            raise self.fail("starts, ends, axes and steps must have the same length", "invalid_input")
        index = [slice(None)] * len(shape)
        for start, end, axis, step in zip(starts, ends, axes, steps):
            axis = normalize_axis(axis, len(shape))
            if step == 0:
                raise self.fail("steps must not be 0", "invalid_input")
            index[axis] = _clamped(start, end, step, shape[axis])
        out = tuple(len(range(*s.indices(n))) for s, n in zip(index, shape))
        ctx.set_output(0, ctx.dtype(0), out)
        ctx.prepared = _Slices(tuple(index))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        np.copyto(outputs[0], inputs[0][ctx.prepared.index])


def _clamped(start: int, end: int, step: int, n: int) -> slice:
    """ONNX's rule: negative values count from the end, then clamp to the axis (by direction)."""
    start = start + n if start < 0 else start
    end = end + n if end < 0 else end
    if step > 0:
        start = min(max(start, 0), n)
        end = min(max(end, 0), n)
        return slice(start, end, step)
    start = min(max(start, -1), n - 1)
    end = min(max(end, -1), n - 1)
    return slice(start, None if end < 0 else end, step)


class Transpose(_Movement):
    def infer(self, ctx: InferContext) -> None:
        shape = ctx.shape(0)
        perm = self.node.attr("perm") or list(reversed(range(len(shape))))
        if sorted(perm) != list(range(len(shape))):
            raise self.fail(f"perm {perm} is not a permutation of {len(shape)} axes")
        ctx.set_output(0, ctx.dtype(0), [shape[p] for p in perm])
        ctx.prepared = tuple(perm)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        np.copyto(outputs[0], inputs[0].transpose(ctx.prepared))


class Split(_Movement):
    def infer(self, ctx: InferContext) -> None:
        shape = ctx.shape(0)
        axis = normalize_axis(self.node.attr("axis", 0), len(shape))
        n_out = ctx.num_outputs
        if self.node.opset >= 13 and ctx.has_input(1):
            sizes = [int(v) for v in np.asarray(ctx.value(1)).reshape(-1)]
        elif self.node.opset < 13 and self.node.attr("split"):
            sizes = list(self.node.attr("split"))
        elif self.node.opset < 2 and ctx.has_input(1):
            sizes = [int(v) for v in np.asarray(ctx.value(1)).reshape(-1)]
        else:
            parts = self.node.attr("num_outputs", n_out) if self.node.opset >= 18 else n_out
            chunk = -(-shape[axis] // parts)
            sizes = [min(chunk, max(shape[axis] - i * chunk, 0)) for i in range(parts)]
        if sum(sizes) != shape[axis] or len(sizes) != n_out:
            raise self.fail(f"split {sizes} does not divide axis {axis} of {list(shape)}", "invalid_input")
        bounds = np.cumsum([0, *sizes]).tolist()
        for i, size in enumerate(sizes):
            out = list(shape)
            out[axis] = size
            ctx.set_output(i, ctx.dtype(0), out)
        ctx.prepared = (axis, bounds)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        axis, bounds = ctx.prepared
        x = inputs[0]
        for i, out in enumerate(outputs):
            if out is not None:
                index = [slice(None)] * x.ndim
                index[axis] = slice(bounds[i], bounds[i + 1])
                np.copyto(out, x[tuple(index)])


class Tile(_Movement):
    def infer(self, ctx: InferContext) -> None:
        reps = [int(v) for v in np.asarray(ctx.value(1)).reshape(-1)]
        shape = ctx.shape(0)
        if len(reps) != len(shape) or any(r < 0 for r in reps):
            raise self.fail(f"repeats {reps} do not fit shape {list(shape)}", "invalid_input")
        ctx.set_output(0, ctx.dtype(0), [s * r for s, r in zip(shape, reps)])
        ctx.prepared = tuple(reps)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x, out = inputs[0], outputs[0]
        # view the output as (r0, s0, r1, s1, ...) and broadcast x into it: no temporary
        split = []
        for r, s in zip(ctx.prepared, x.shape):
            split += [r, s]
        np.copyto(out.reshape(split), x.reshape([d for s in x.shape for d in (1, s)]))


class Pad(_Movement):
    def infer(self, ctx: InferContext) -> None:
        shape = ctx.shape(0)
        rank = len(shape)
        if self.node.opset < 11:
            pads = list(self.node.attr("pads", self.node.attr("paddings", [])))
            value = self.node.attr("value", 0.0)
        else:
            pads = [int(v) for v in np.asarray(ctx.value(1)).reshape(-1)]
            value = ctx.value(2).reshape(()) if ctx.has_input(2) else 0
        axes = list(range(rank))
        if self.node.opset >= 18 and ctx.has_input(3):
            axes = [normalize_axis(int(a), rank) for a in np.asarray(ctx.value(3)).reshape(-1)]
        if len(pads) != 2 * len(axes):
            raise self.fail(f"pads {pads} must have {2 * len(axes)} entries", "invalid_input")
        full = [(0, 0)] * rank
        for i, a in enumerate(axes):
            full[a] = (pads[i], pads[i + len(axes)])
        out = [s + b + e for s, (b, e) in zip(shape, full)]
        if any(d < 0 for d in out):
            raise self.fail(f"pads {pads} remove more than {list(shape)} holds", "invalid_input")
        mode = self.node.attr("mode", "constant")
        if mode not in ("constant", "reflect", "edge", "wrap"):
            raise self.fail(f"unknown mode {mode!r}")
        ctx.set_output(0, ctx.dtype(0), out)
        ctx.prepared = (full, mode, np.asarray(value, dtype=ctx.dtype(0)))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        full, mode, value = ctx.prepared
        x = inputs[0]
        # negative pads crop first; numpy pads the rest
        crop = tuple(slice(max(-b, 0), x.shape[i] - max(-e, 0)) for i, (b, e) in enumerate(full))
        grow = [(max(b, 0), max(e, 0)) for b, e in full]
        x = x[crop]
        if mode == "constant":
            padded = np.pad(x, grow, mode="constant", constant_values=value)
        else:
            padded = np.pad(x, grow, mode={"reflect": "reflect", "edge": "edge", "wrap": "wrap"}[mode])
        np.copyto(outputs[0], padded)


class NonZero(_Movement):
    outputs_data_dependent = True

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x = inputs[0]
        where = np.nonzero(x) if x.ndim else np.nonzero(x.reshape(1))
        rank = max(x.ndim, 1) if x.ndim else 1
        out = ctx.allocate_output(0, np.int64, (rank, where[0].size))
        for i, w in enumerate(where[: out.shape[0]]):
            out[i] = w
