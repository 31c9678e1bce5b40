"""ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd: one ufunc's reduce over axes.

``axes`` is an attribute before ``axes_input_since`` (13 for ReduceSum, 18 for the others) and
an optional input from then on, where ``noop_with_empty_axes=1`` makes absent or empty axes
mean "return the input" instead of "reduce everything".  A reduction over no elements gives the
operator's identity: 0, 1, -inf (or the type's minimum, False) for Max, +inf (maximum, True)
for Min; ReduceMean of nothing is 0 (the specification leaves it undefined; onnxruntime gives
0, and so does graphrt).  Not exact: numpy sums pairwise.

ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum and ReduceLogSumExp add element-wise steps
before and after the sum (:class:`_Composite`); with ``noop_with_empty_axes`` only the steps
run.  Empty sums give 0 (L1, L2, SumSquare) or -inf (LogSum, LogSumExp).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from graphrt.plugin import InferContext, KernelContext, OpKernel

from ._util import constant, is_float, normalize_axis, same_storage, zero_of
from ._values import reshaped
from .search import check_numeric


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
        return 0  # undefined in the specification: onnxruntime's 0 rather than 0 / 0

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


# -- reductions with steps before and after the sum --------------------------------------------


@dataclasses.dataclass(frozen=True)
class _CompositePlan:
    axes: tuple[int, ...]  # () for noop_with_empty_axes: the steps still apply (Square, Log)
    keep: tuple[int, ...]  # the output's shape with the reduced axes kept at 1
    identity: Any  # what an empty reduction gives, or None
    work: int | None  # scratch: the input's shape in the compute type (|x|, x*x, exp)
    acc: int | None  # scratch: ``keep`` in the compute type when it differs from the output's
    shift: tuple[int, int] | None  # scratch: ``keep``, ReduceLogSumExp's maximum and a mask


def compute_type(dtype: np.dtype, integer_float: bool) -> np.dtype:
    """float16/bfloat16 compute in float32 (rounded once at the end); integers in float64 where
    a square root or a logarithm follows (``integer_float``), else in their own type."""
    dtype = np.dtype(dtype)
    if is_float(dtype):
        return dtype if dtype in (np.float32, np.float64) else np.dtype(np.float32)
    return np.dtype(np.float64) if integer_float else dtype


class _Composite(Reduce):
    """``after(sum(before(x)))`` over the axes: ReduceL1, ReduceL2, ReduceSumSquare,
    ReduceLogSum, ReduceLogSumExp.

    ``noop_with_empty_axes`` reduces over no axis, so only the steps remain (ReduceSumSquare
    squares, ReduceLogSum takes the log), as the operators' text says.  The work runs in the
    compute type (:func:`compute_type`): ``before`` reads the input and writes its step into a
    scratch array in that type (one pass, the cast included), the sum reads the input itself
    when there is no step, and the result is rounded once into the output.
    """

    ufunc = np.add
    #: Integer inputs compute in float64 (a square root or logarithm follows the sum).
    integer_float: ClassVar[bool] = False
    #: The input goes through an element-wise step before the sum.
    transforms: ClassVar[bool] = True
    #: Subtracts the maximum first (ReduceLogSumExp).
    shifts: ClassVar[bool] = False

    def infer(self, ctx: InferContext) -> None:
        check_numeric(self, ctx.dtype(0))
        super().infer(ctx)
        p: _Plan = ctx.prepared
        dtype, shape = ctx.dtype(0), ctx.shape(0)
        axes = () if p.axes is None else p.axes
        keep = tuple(1 if i in axes else d for i, d in enumerate(shape))
        ct = compute_type(dtype, self.integer_float)
        work = ctx.add_scratch(ct, shape) if self.transforms else None
        acc = ctx.add_scratch(ct, keep) if ct != dtype else None
        shift = None
        if self.shifts:
            shift = (ctx.add_scratch(ct, keep), ctx.add_scratch(np.bool_, keep))
        ctx.prepared = _CompositePlan(axes, keep, p.identity, work, acc, shift)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _CompositePlan = ctx.prepared
        x, out = inputs[0], outputs[0]
        if out.size == 0:
            return
        out = reshaped(out, p.keep)
        if p.identity is not None:
            out.fill(p.identity)
            return
        acc = out if p.acc is None else ctx.scratch[p.acc]
        shift = None if p.shift is None else [ctx.scratch[i] for i in p.shift]
        terms = x if p.work is None else self.before(x, ctx.scratch[p.work], shift, p.axes)
        np.add.reduce(terms, axis=p.axes, keepdims=True, out=acc, dtype=acc.dtype)
        self.after(acc, shift)
        if acc is not out:
            np.copyto(out, acc, casting="unsafe")

    def before(
        self, x: np.ndarray, work: np.ndarray, shift: list | None, axes: tuple[int, ...]
    ) -> np.ndarray:
        """The element-wise step of x, computed in work's type into work; returns the terms."""
        return x

    def after(self, acc: np.ndarray, shift: list | None) -> None:
        """The step on the sums, in place."""

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        return functools.partial(self.run, ctx, inputs, outputs)

    def identity(self, dtype: np.dtype) -> Any:
        return 0


class ReduceL1(_Composite):
    """sum(|x|)."""

    def before(
        self, x: np.ndarray, work: np.ndarray, shift: list | None, axes: tuple[int, ...]
    ) -> np.ndarray:
        if x.dtype.kind == "u" and work.dtype == x.dtype:
            return x
        return np.abs(x, out=work, dtype=work.dtype)


class ReduceSumSquare(_Composite):
    """sum(x * x)."""

    def before(
        self, x: np.ndarray, work: np.ndarray, shift: list | None, axes: tuple[int, ...]
    ) -> np.ndarray:
        return np.multiply(x, x, out=work, dtype=work.dtype)


class ReduceL2(ReduceSumSquare):
    """sqrt(sum(x * x)); integer inputs truncate the root."""

    integer_float = True

    def after(self, acc: np.ndarray, shift: list | None) -> None:
        np.sqrt(acc, out=acc)


class ReduceLogSum(_Composite):
    """log(sum(x)); the sum of nothing is 0, so an empty reduction gives -inf."""

    integer_float = True
    transforms = False

    def identity(self, dtype: np.dtype) -> Any:
        return -np.inf if is_float(dtype) else np.iinfo(dtype).min

    def after(self, acc: np.ndarray, shift: list | None) -> None:
        np.log(acc, out=acc)


class ReduceLogSumExp(ReduceLogSum):
    """log(sum(exp(x - m))) + m with m the maximum, so exp never overflows; a maximum that is
    not finite (all -inf, some +inf, NaN) shifts by 0 instead, which gives -inf, +inf, NaN."""

    transforms = True
    shifts = True

    def before(
        self, x: np.ndarray, work: np.ndarray, shift: list | None, axes: tuple[int, ...]
    ) -> np.ndarray:
        m, mask = shift
        np.maximum.reduce(x, axis=axes, keepdims=True, out=m, dtype=m.dtype)
        np.isfinite(m, out=mask)
        np.logical_not(mask, out=mask)
        np.copyto(m, zero_of(m.dtype), where=mask)
        np.subtract(x, m, out=work, dtype=work.dtype)
        return np.exp(work, out=work)

    def after(self, acc: np.ndarray, shift: list | None) -> None:
        np.log(acc, out=acc)
        np.add(acc, shift[0], out=acc)
