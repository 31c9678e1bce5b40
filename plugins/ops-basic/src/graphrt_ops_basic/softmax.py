"""Softmax, LogSoftmax and Hardmax along one axis.

Before opset 13 the input is coerced to 2-D, ``[prod(shape[:axis]), prod(shape[axis:])]``
(default axis 1), and the operator runs over the second dimension; from 13 it runs over the
single ``axis`` (default -1).  Both are one reduction axis of a view, so one kernel serves all.
The maximum is subtracted first, so exp never overflows; sums go into a scratch array of the
reduced shape and nothing is allocated in a run.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.kernel import InferContext, KernelContext, OpKernel

from ._util import normalize_axis


@dataclasses.dataclass(frozen=True)
class _Plan:
    shape: tuple[int, ...]  # the view the operator runs on (2-D before opset 13)
    axis: int  # its reduction axis
    reduced: int  # scratch index: the view's shape with ``axis`` at 1
    full: int | None  # scratch index of a full-shape temporary (LogSoftmax)
    index: np.ndarray | None  # Hardmax: 0..n-1 along ``axis``, broadcastable
    empty: bool  # nothing to compute


class _AlongAxis(OpKernel):
    in_place_input = 0
    #: Type of the reduced scratch array (None: the input's).
    reduced_dtype: Any = None
    #: Needs a full-shape temporary (LogSoftmax) / the index ramp (Hardmax).
    needs_full = False
    needs_index = False

    def infer(self, ctx: InferContext) -> None:
        dtype, shape = ctx.dtype(0), ctx.shape(0)
        ctx.set_output(0, dtype, shape)
        legacy = self.node.opset < 13
        try:
            axis = normalize_axis(self.node.attr("axis", 1 if legacy else -1), len(shape))
        except ValueError as exc:
            raise self.fail(str(exc)) from None
        if legacy:
            view = (math.prod(shape[:axis]), math.prod(shape[axis:]))
            axis = 1
        else:
            view = tuple(shape)
        reduced = view[:axis] + (1,) + view[axis + 1 :]
        index = None
        if self.needs_index:
            ramp = (view[axis],) + (1,) * (len(view) - axis - 1)
            index = np.arange(view[axis], dtype=np.intp).reshape(ramp)
        ctx.prepared = _Plan(
            view,
            axis,
            ctx.add_scratch(self.reduced_dtype or dtype, reduced),
            ctx.add_scratch(dtype, view) if self.needs_full else None,
            index,
            math.prod(view) == 0,
        )

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Plan = ctx.prepared
        if p.empty:
            return
        x, out = inputs[0].reshape(p.shape), outputs[0].reshape(p.shape)
        full = ctx.scratch[p.full] if p.full is not None else None
        self.compute(x, out, p, ctx.scratch[p.reduced], full)

    def compute(
        self, x: np.ndarray, out: np.ndarray, p: _Plan, red: np.ndarray, full: np.ndarray | None
    ) -> None:
        raise NotImplementedError


class Softmax(_AlongAxis):
    """exp(x - max) / sum(exp(x - max))."""

    def compute(
        self, x: np.ndarray, out: np.ndarray, p: _Plan, red: np.ndarray, full: np.ndarray | None
    ) -> None:
        np.maximum.reduce(x, axis=p.axis, keepdims=True, out=red)
        np.subtract(x, red, out=out)  # x is not read after this (out may be its storage)
        np.exp(out, out=out)
        np.add.reduce(out, axis=p.axis, keepdims=True, out=red)
        np.divide(out, red, out=out)


class LogSoftmax(_AlongAxis):
    """(x - max) - log(sum(exp(x - max)))."""

    needs_full = True

    def compute(
        self, x: np.ndarray, out: np.ndarray, p: _Plan, red: np.ndarray, full: np.ndarray | None
    ) -> None:
        np.maximum.reduce(x, axis=p.axis, keepdims=True, out=red)
        np.subtract(x, red, out=out)
        np.exp(out, out=full)
        np.add.reduce(full, axis=p.axis, keepdims=True, out=red)
        np.log(red, out=red)
        np.subtract(out, red, out=out)


class Hardmax(_AlongAxis):
    """1 at the first maximum along the axis (a NaN counts as the maximum), 0 elsewhere."""

    reduced_dtype = np.intp
    needs_index = True

    def compute(
        self, x: np.ndarray, out: np.ndarray, p: _Plan, red: np.ndarray, full: np.ndarray | None
    ) -> None:
        np.argmax(x, axis=p.axis, keepdims=True, out=red)
        np.equal(p.index, red, out=out, casting="unsafe")
