"""CumSum and CumProd: running sums and products along the axis given by input 1.

``exclusive=1`` leaves each element out of its own result (the first result is the empty
sum 0 or the empty product 1); ``reverse=1`` runs from the end of the axis.  The axis is a
0-d (or one-element) int32/int64 input: a constant is checked once per plan, a run-time one in
every run (the output's shape never depends on it, so the node stays static).

Exact: ``ufunc.accumulate`` is sequential, ``acc = x0; acc = acc + x1; ...`` (``*`` for
CumProd), one rounded operation per step in the element's type, and every result is the
accumulator after its last term -- the canonical order of docs/exact-mode.md, walked from the
end when ``reverse`` is set.  Work is split only across the other axes.  float16 rounds each
step through float32 exactly (float32 has more than twice float16's precision).  NaN results
are rewritten to the canonical NaN.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._util import constant, needs_nan_rewrite, rewrite_nan
from ._values import axis_in
from .search import check_numeric


@dataclasses.dataclass(frozen=True)
class _Plan:
    axis: int | None  # None: read from input 1 in every run
    mask: int | None  # scratch for the NaN rewrite of exact mode


class _Cumulative(OpKernel):
    supports_exact = True
    ufunc: ClassVar[Any]
    #: What an exclusive running result starts from (the empty sum or product).
    empty: ClassVar[int]

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.exclusive = bool(node.attr("exclusive", 0))
        self.reverse = bool(node.attr("reverse", 0))

    def infer(self, ctx: InferContext) -> None:
        dtype, shape = ctx.dtype(0), ctx.shape(0)
        check_numeric(self, dtype)
        if ctx.dtype(1).kind != "i":
            raise self.fail(f"axis must be int32 or int64, got {ctx.dtype(1)}")
        if int(np.prod(ctx.shape(1), dtype=np.int64)) != 1:
            message = f"axis must be one value, got shape {list(ctx.shape(1))}"
            raise self.fail(message, "invalid_input")
        ctx.set_output(0, dtype, shape)
        known = ctx.known_value(1)
        axis = None if known is None else self._axis(known, len(shape))
        mask = ctx.prepared if needs_nan_rewrite(ctx, dtype, shape) else None
        ctx.prepared = _Plan(axis, mask)

    def _axis(self, value: np.ndarray, rank: int) -> int:
        return axis_in(self, int(np.asarray(value).reshape(-1)[0]), rank, "invalid_input")

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Plan = ctx.prepared
        x, out = inputs[0], outputs[0]
        axis = p.axis if p.axis is not None else self._axis(inputs[1], x.ndim)
        if out.size == 0:
            return
        self._step(x, out, axis)()
        if p.mask is not None:
            rewrite_nan(out, ctx.scratch[p.mask])

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        p: _Plan = ctx.prepared
        if p.axis is None or p.mask is not None or outputs[0].size == 0:
            return functools.partial(self.run, ctx, inputs, outputs)
        return self._step(inputs[0], outputs[0], p.axis)

    def _step(self, x: np.ndarray, out: np.ndarray, axis: int) -> Callable[[], None]:
        """The accumulation on views fixed once: slices along ``axis`` reversed for
        ``reverse``, shifted by one for ``exclusive``."""
        n = x.shape[axis]
        lead = (slice(None),) * axis
        accumulate = functools.partial(self.ufunc.accumulate, axis=axis, dtype=out.dtype)
        if not self.exclusive:
            if self.reverse:
                x, out = x[(*lead, slice(None, None, -1))], out[(*lead, slice(None, None, -1))]
            return functools.partial(accumulate, x, out=out)
        if self.reverse:  # out[n-1] is empty, out[j] accumulates x[n-1] .. x[j+1]
            first = out[(*lead, slice(n - 1, n))]
            src, dst = (slice(n - 1, 0, -1), slice(n - 2, None, -1)) if n > 1 else (None, None)
        else:  # out[0] is empty, out[j] accumulates x[0] .. x[j-1]
            first = out[(*lead, slice(0, 1))]
            src, dst = slice(0, n - 1), slice(1, None)
        empty = constant(out.dtype, self.empty)
        if n == 1:
            return functools.partial(np.copyto, first, empty)
        xs, ys = x[(*lead, src)], out[(*lead, dst)]

        def step() -> None:
            np.copyto(first, empty)
            accumulate(xs, out=ys)

        return step


class CumSum(_Cumulative):
    ufunc = np.add
    empty = 0


class CumProd(_Cumulative):
    ufunc = np.multiply
    empty = 1
