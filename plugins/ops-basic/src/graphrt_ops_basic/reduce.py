"""ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd: one ufunc's reduce over axes.

``axes`` is an attribute before ``axes_input_since`` (13 for ReduceSum, 18 for the others) and
an optional input from then on, where ``noop_with_empty_axes=1`` makes absent or empty axes
mean "return the input" instead of "reduce everything".  A reduction over no elements gives the
operator's identity: 0, 1, -inf (or the type's minimum, False) for Max, +inf (maximum, True)
for Min; ReduceMean of nothing is NaN (0 / 0).  Not exact: numpy sums pairwise.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from graphrt.kernel import InferContext, KernelContext, OpKernel

from ._util import constant, is_float, normalize_axis, same_storage


@dataclasses.dataclass(frozen=True)
class _Plan:
    axes: tuple[int, ...] | None  # None: copy the input (noop_with_empty_axes)
    keepdims: bool
    count: int  # elements per output element
    identity: Any  # what an empty reduction gives (None: the ufunc's own)


class Reduce(OpKernel):
    ufunc: ClassVar[Callable[..., Any]]
    axes_input_since: ClassVar[int] = 18

    def infer(self, ctx: InferContext) -> None:
        dtype, shape = ctx.dtype(0), ctx.shape(0)
        rank = len(shape)
        axes = self._axes(ctx)
        keepdims = bool(self.node.attr("keepdims", 1))
        if not axes:
            noop = self.node.opset >= self.axes_input_since
            if noop and self.node.attr("noop_with_empty_axes", 0):
                ctx.set_output(0, dtype, shape)
                ctx.prepared = _Plan(None, keepdims, 1, None)
                return
            axes = list(range(rank))
        try:
            axes = sorted({normalize_axis(a, rank, "axes entry") for a in axes})
        except ValueError as exc:
            from_input = self.node.opset >= self.axes_input_since
            raise self.fail(str(exc), "invalid_input" if from_input else "invalid_model") from None
        if keepdims:
            out_shape = [1 if i in axes else d for i, d in enumerate(shape)]
        else:
            out_shape = [d for i, d in enumerate(shape) if i not in axes]
        ctx.set_output(0, dtype, out_shape)
        count = math.prod(shape[a] for a in axes)
        identity = self.identity(dtype) if count == 0 else None
        ctx.prepared = _Plan(tuple(axes), keepdims, count, identity)

    def _axes(self, ctx: InferContext) -> list[int] | None:
        if self.node.opset < self.axes_input_since:
            axes = self.node.attr("axes")
            return None if axes is None else list(axes)
        if not ctx.has_input(1):
            return None
        return [int(a) for a in np.asarray(ctx.value(1)).reshape(-1)]

    def identity(self, dtype: np.dtype) -> Any:
        return None

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Plan = ctx.prepared
        x, out = inputs[0], outputs[0]
        if p.axes is None:
            if not same_storage(out, x):
                np.copyto(out, x)
        elif out.size == 0:
            pass
        elif p.identity is not None:
            out.fill(p.identity)
        else:
            self.ufunc.reduce(x, axis=p.axes, keepdims=p.keepdims, out=out)
            self.finish(out, p.count)

    def finish(self, out: np.ndarray, count: int) -> None:
        """A last step on the reduced values (ReduceMean divides)."""

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        p: _Plan = ctx.prepared
        plain = p.axes is not None and p.identity is None and outputs[0].size
        if plain and type(self).finish is Reduce.finish:
            return functools.partial(
                self.ufunc.reduce, inputs[0], axis=p.axes, keepdims=p.keepdims, out=outputs[0]
            )
        return functools.partial(self.run, ctx, inputs, outputs)


class ReduceSum(Reduce):
    ufunc = np.add
    axes_input_since = 13

    def identity(self, dtype: np.dtype) -> Any:
        return 0


class ReduceMean(Reduce):
    """The sum, then one division by the count (truncating for integer types)."""

    ufunc = np.add

    def identity(self, dtype: np.dtype) -> Any:
        return np.nan if is_float(dtype) else 0

    def finish(self, out: np.ndarray, count: int) -> None:
        if is_float(out.dtype):
            np.divide(out, constant(out.dtype, count), out=out)
        else:
            np.copyto(out, np.trunc(out / count), casting="unsafe")


class ReduceProd(Reduce):
    ufunc = np.multiply

    def identity(self, dtype: np.dtype) -> Any:
        return 1


class ReduceMax(Reduce):
    """NaN propagates; bool (opset 20) reduces with logical or."""

    ufunc = np.maximum

    def identity(self, dtype: np.dtype) -> Any:
        if dtype == np.bool_:
            return False
        return -np.inf if is_float(dtype) else np.iinfo(dtype).min


class ReduceMin(Reduce):
    ufunc = np.minimum

    def identity(self, dtype: np.dtype) -> Any:
        if dtype == np.bool_:
            return True
        return np.inf if is_float(dtype) else np.iinfo(dtype).max
