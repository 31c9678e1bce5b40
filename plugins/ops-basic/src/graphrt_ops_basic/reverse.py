"""ReverseSequence: reverse the first sequence_lens[b] time steps of each batch entry.

The input is viewed as rows of (batch, time) or (time, batch) order, each row the trailing
axes; output row (b, t) reads row (b, L_b - 1 - t) for t < L_b and (b, t) after.  Those row
numbers are computed vectorised (once per plan for constant lengths, in scratch arrays every
run for run-time ones) and the rows copied with one ``np.take``: exact.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo

from ._steps import FEW, BoundStep
from ._util import constant
from ._values import reshaped


@dataclasses.dataclass(frozen=True)
class _Plan:
    batch: int
    time: int
    width: int  # elements per row (the trailing axes)
    steps: np.ndarray  # (1, time) intp: t
    after: np.ndarray  # (1, time) intp: t + 1
    first: np.ndarray  # batch-major (batch, 1) b * time; time-major (1, batch) b
    rows: np.ndarray | None  # constant lengths: the finished rows
    scratch: tuple[int, ...] | None  # lengths (B, 1), source, mask, rows, min, max


class ReverseSequence(BoundStep):
    """Batch and time are axes 0 and 1 (``batch_axis``/``time_axis``, either order)."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.batch_axis = node.attr("batch_axis", 1)
        self.time_axis = node.attr("time_axis", 0)
        if {self.batch_axis, self.time_axis} != {0, 1}:
            message = (
                f"batch_axis and time_axis must be 0 and 1 in some order, got "
                f"{self.batch_axis} and {self.time_axis}"
            )
            raise self.fail(message)

    def infer(self, ctx: InferContext) -> None:
        shape = ctx.shape(0)
        if len(shape) < 2:
            raise self.fail(f"input must have rank >= 2, got shape {list(shape)}", "invalid_input")
        if ctx.dtype(1).kind != "i":
            raise self.fail(f"sequence_lens must be integers, got {ctx.dtype(1)}")
        batch, time = shape[self.batch_axis], shape[self.time_axis]
        if ctx.shape(1) != (batch,):
            message = f"sequence_lens {list(ctx.shape(1))} must have shape [{batch}]"
            raise self.fail(message, "invalid_input")
        ctx.set_output(0, ctx.dtype(0), shape)
        steps = np.arange(time, dtype=np.intp).reshape(1, time)
        if self.batch_axis == 0:
            first = (np.arange(batch, dtype=np.intp) * time).reshape(batch, 1)
        else:
            first = np.arange(batch, dtype=np.intp).reshape(1, batch)
        width = math.prod(shape[2:])
        known = ctx.known_value(1)
        if known is not None:
            lengths = np.asarray(known).astype(np.intp).reshape(batch, 1)
            if batch:
                self._check(int(lengths.min()), int(lengths.max()), time)
            source = np.where(steps < lengths, lengths - 1 - steps, steps)
            rows = self._rows(source, first, np.empty(batch * time, np.intp))
            ctx.prepared = _Plan(batch, time, width, steps, steps + 1, first, rows, None)
            return
        scratch = (
            ctx.add_scratch(np.intp, (batch, 1)),
            ctx.add_scratch(np.intp, (batch, time)),
            ctx.add_scratch(np.bool_, (batch, time)),
            ctx.add_scratch(np.intp, (batch * time,)),
            ctx.add_scratch(ctx.dtype(1), ()),
            ctx.add_scratch(ctx.dtype(1), ()),
        )
        ctx.prepared = _Plan(batch, time, width, steps, steps + 1, first, None, scratch)

    def _check(self, lo: int, hi: int, time: int) -> None:
        if lo < 0 or hi > time:
            bad = lo if lo < 0 else hi
            raise self.fail(f"sequence length {bad} is out of range [0, {time}]", "invalid_input")

    def _rows(self, source: np.ndarray, first: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Row numbers of the input, in output row order, from the (batch, time) sources."""
        if self.batch_axis == 0:
            np.add(source, first, out=reshaped(rows, source.shape))
        else:
            view = reshaped(rows, source.shape[::-1])
            np.multiply(source.T, constant(np.dtype(np.intp), first.size), out=view)
            np.add(view, first, out=view)
        return rows

    def step(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        """One ``take`` of the input's rows (a bare call for constant lengths), after the rows
        of run-time lengths are checked and made in scratch."""
        p: _Plan = ctx.prepared
        shape = (p.batch * p.time, p.width)
        table, out = inputs[0].reshape(shape), reshaped(outputs[0], shape)
        if p.rows is not None:
            return functools.partial(table.take, p.rows, axis=0, out=out, mode="clip")
        lengths, source, keep, rows, lo, hi = (ctx.scratch[i] for i in p.scratch)
        given = inputs[1].reshape(lengths.shape)
        few = lengths.size <= FEW

        def call() -> None:
            if few:
                found = given.reshape(-1).tolist()
                if found:
                    self._check(min(found), max(found), p.time)
            else:
                np.minimum.reduce(given, axis=None, out=lo)
                np.maximum.reduce(given, axis=None, out=hi)
                self._check(int(lo), int(hi), p.time)
            np.copyto(lengths, given)
            np.subtract(lengths, p.after, out=source)  # L - 1 - t
            np.less_equal(lengths, p.steps, out=keep)  # t >= L: unchanged
            np.copyto(source, p.steps, where=keep)
            self._rows(source, p.first, rows)
            table.take(rows, axis=0, out=out, mode="clip")

        return call
