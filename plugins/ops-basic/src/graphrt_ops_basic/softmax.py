"""Softmax, LogSoftmax and Hardmax along one axis.

Before opset 13 the input is coerced to 2-D, ``[prod(shape[:axis]), prod(shape[axis:])]``
(default axis 1), and the operator runs over the second dimension; from 13 it runs over the
single ``axis`` (default -1).  Both are one reduction axis of a view, so one kernel serves all.
The maximum is subtracted first, so exp never overflows; sums go into a scratch array of the
reduced shape and nothing is allocated in a run.

Exact mode (Softmax; Hardmax is exact by construction): the maximum (exact in any order), the
subtraction, our exp (:mod:`._exact_math`), the sum along the axis in ascending index order
(``acc = t0; acc += t1; ...``, vectorised across the other axes) and one division per element.
float16 and bfloat16 compute in float32 and round once.  LogSoftmax needs a log: not exact.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, OpKernel

from . import _exact_math as em
from ._erf import compute_dtype
from ._util import _CANONICAL_NAN, canonical_sum, normalize_axis, rewrite_nan
from .unary import require_float

#: Elements per block of the exact exp (blocks spread over the intra-op threads).
BLOCK = 1 << 16


@dataclasses.dataclass(frozen=True)
class _Plan:
    shape: tuple[int, ...]  # the view the operator runs on (2-D before opset 13)
    axis: int  # its reduction axis
    reduced: int  # scratch index: the view's shape with ``axis`` at 1
    full: int | None  # scratch index of a full-shape temporary (LogSoftmax)
    index: np.ndarray | None  # Hardmax: 0..n-1 along ``axis``, broadcastable
    empty: bool  # nothing to compute
    exact: _ExactSoftmax | None = None


@dataclasses.dataclass(frozen=True)
class _ExactSoftmax:
    work: tuple[int, ...]  # an ExpWork's arrays, one element per element of the view
    values: int | None  # scratch: the view in float32 (float16/bfloat16 X)
    total: int  # scratch: the reduced shape in the compute type
    partial: int  # scratch: the view in the compute type (the sums' partial sums)
    blocks: int  # of the element-wise exp


class _AlongAxis(OpKernel):
    in_place_input = 0
    #: Type of the reduced scratch array (None: the input's).
    reduced_dtype: Any = None
    #: Needs a full-shape temporary (LogSoftmax) / the index ramp (Hardmax).
    needs_full = False
    needs_index = False

    def infer(self, ctx: InferContext) -> None:
        require_float(self, ctx)  # ONNX's float types only (exp of int32 failed in a run)
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

    supports_exact = True

    def infer(self, ctx: InferContext) -> None:
        super().infer(ctx)
        if not ctx.exact:
            return
        p: _Plan = ctx.prepared
        dtype, n = ctx.dtype(0), math.prod(p.shape)
        ct = compute_dtype(dtype)
        reduced = p.shape[: p.axis] + (1,) + p.shape[p.axis + 1 :]
        ctx.prepared = dataclasses.replace(
            p,
            exact=_ExactSoftmax(
                tuple(ctx.add_scratch(d, s) for d, s in em.work_specs(ct, n)),
                ctx.add_scratch(ct, p.shape) if ct != dtype else None,
                ctx.add_scratch(ct, reduced),
                ctx.add_scratch(ct, p.shape),
                max(1, -(-n // BLOCK)),
            ),
        )

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Plan = ctx.prepared
        if p.exact is None or p.empty:
            super().run(ctx, inputs, outputs)
            return
        q = p.exact
        x, out = inputs[0].reshape(p.shape), outputs[0].reshape(p.shape)
        red = ctx.scratch[q.total]
        work = em.make_work([ctx.scratch[i] for i in q.work])
        y = out
        if q.values is not None:
            y = ctx.scratch[q.values]
            np.copyto(y, x, casting="unsafe")
            x = y
        np.maximum.reduce(x, axis=p.axis, keepdims=True, out=red)
        np.subtract(x, red, out=y)  # x is not read after this (y may be its storage)
        flat = y.reshape(-1)

        def block(i: int) -> None:
            s = slice(i * BLOCK, (i + 1) * BLOCK)
            em.exp_into(flat[s], flat[s], work[s])

        ctx.parallel_for(q.blocks, block)
        canonical_sum(y, p.axis, red, ctx.scratch[q.partial])
        np.divide(y, red, out=y)
        if y is not out:
            np.copyto(out, y, casting="unsafe")
        if out.dtype in _CANONICAL_NAN:
            rewrite_nan(out.reshape(-1), work.mask)

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
    """1 at the first maximum along the axis (a NaN counts as the maximum), 0 elsewhere.

    Comparisons only: exact by construction."""

    supports_exact = True

    reduced_dtype = np.intp
    needs_index = True

    def compute(
        self, x: np.ndarray, out: np.ndarray, p: _Plan, red: np.ndarray, full: np.ndarray | None
    ) -> None:
        np.argmax(x, axis=p.axis, keepdims=True, out=red)
        np.equal(p.index, red, out=out, casting="unsafe")
