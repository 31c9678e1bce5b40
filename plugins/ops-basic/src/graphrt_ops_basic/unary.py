"""Element-wise unary operators: one ufunc (or a short numpy recipe) per operator.

Each kernel writes ``out`` in place of its input when the planner allows it, so a chain of
activations needs no new memory.  A recipe of several calls reads its input before it first
writes ``out``; temporaries are scratch arrays asked for in ``infer`` and constants are 0-d
arrays (:func:`constant`), so a run allocates nothing.  numpy's transcendental functions
differ between machines, so exact mode computes Exp, Tanh, Sigmoid and Erf with our own
algorithms (:mod:`._exact_math`, docs/exact-mode.md); Log and Softplus are not exact.
Round (rint, one IEEE operation), IsNaN and IsInf (no arithmetic) are exact.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel, name_of

from . import _exact_math as em
from ._erf import WORK_ARRAYS, compute_dtype, erf_into
from ._util import (
    constant,
    is_float,
    needs_nan_rewrite,
    rewrite_nan,
    zero_of,
    zeros_like_shape,
)


class Unary(OpKernel):
    """out = fn(X); same element type and shape as X."""

    ufunc: ClassVar[Callable[..., Any]]
    in_place_input = 0
    #: ONNX allows the float types only (every version): another type fails in ``infer``, where
    #: numpy would fail in the middle of a run (exp of int32) or compute something else.
    floats_only: ClassVar[bool] = False
    #: ONNX has no bool T (Neg, Sign: numpy fails on a bool mid-run).
    numeric: ClassVar[bool] = False

    def check_type(self, ctx: InferContext) -> None:
        """X's type against ``floats_only`` and ``numeric`` (every infer starts here)."""
        if self.floats_only:
            require_float(self, ctx)
        elif self.numeric and ctx.dtype(0).kind == "b":
            raise self.fail("X must be a numeric tensor, got tensor(bool)", "invalid_input")

    def infer(self, ctx: InferContext) -> None:
        self.check_type(ctx)
        ctx.set_output(0, ctx.dtype(0), ctx.shape(0))
        if self.supports_exact:
            needs_nan_rewrite(ctx, ctx.dtype(0), ctx.shape(0))

    def compute(self, x: np.ndarray, out: np.ndarray) -> None:
        type(self).ufunc(x, out=out)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        self.compute(inputs[0], outputs[0])
        if ctx.exact and isinstance(ctx.prepared, int):
            rewrite_nan(outputs[0], ctx.scratch[ctx.prepared])

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        nan_rewrite = ctx.exact and isinstance(ctx.prepared, int)
        if type(self).compute is Unary.compute and not nan_rewrite:
            return functools.partial(type(self).ufunc, inputs[0], outputs[0])
        return functools.partial(self.run, ctx, inputs, outputs)


class Relu(Unary):
    """max(x, 0): a compare and select, so exact everywhere; NaN passes through.

    Exact mode also adds +0 so that -0 becomes +0 whatever the machine's max does on ties.
    """

    supports_exact = True

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x, out = inputs[0], outputs[0]
        zero = zero_of(x.dtype)
        np.maximum(x, zero, out=out)
        if ctx.exact and x.dtype.kind == "f":
            np.add(out, zero, out=out)  # -0 + +0 = +0; every other value unchanged
            if isinstance(ctx.prepared, int):
                rewrite_nan(out, ctx.scratch[ctx.prepared])

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        if ctx.exact:
            return functools.partial(self.run, ctx, inputs, outputs)
        zeros = zeros_like_shape(inputs[0].dtype, inputs[0].shape)
        return functools.partial(np.maximum, inputs[0], zeros, out=outputs[0])


#: Elements per block of an exact element-wise function (blocks spread over the threads).
EXACT_BLOCK = 1 << 16


@dataclasses.dataclass(frozen=True)
class ExactPlan:
    """Scratch of an exact element-wise function over n flat elements, in blocks."""

    work: tuple[int, ...]  # an ExpWork's arrays
    extra: tuple[int, ...]  # more flat arrays of the compute type
    cast: tuple[int, int] | None  # X and the result in float32 (float16/bfloat16 X)
    n: int
    blocks: int


def plan_exact(ctx: InferContext, dtype: np.dtype, n: int, extra: int = 0) -> ExactPlan:
    """Ask for the scratch of :func:`run_exact` (float16 and bfloat16 compute in float32)."""
    ct = compute_dtype(dtype)
    work = tuple(ctx.add_scratch(d, s) for d, s in em.work_specs(ct, n))
    more = tuple(ctx.add_scratch(ct, (n,)) for _ in range(extra))
    cast = None
    if ct != dtype:
        cast = (ctx.add_scratch(ct, (n,)), ctx.add_scratch(ct, (n,)))
    return ExactPlan(work, more, cast, n, max(1, -(-n // EXACT_BLOCK)))


def run_exact(
    ctx: KernelContext,
    p: ExactPlan,
    fn: Callable[..., None],
    x: np.ndarray,
    out: np.ndarray,
) -> None:
    """out = fn(x) block by block: ``fn(x, out, ExpWork, *extra)`` on flat slices."""
    x, out = x.reshape(-1), out.reshape(-1)
    work = em.make_work([ctx.scratch[i] for i in p.work])
    extra = [ctx.scratch[i] for i in p.extra]
    if p.cast is not None:
        xin, res = (ctx.scratch[i] for i in p.cast)
        np.copyto(xin, x, casting="unsafe")
        x, final, out = xin, out, res
    size = EXACT_BLOCK

    def block(i: int) -> None:
        s = slice(i * size, (i + 1) * size)
        fn(x[s], out[s], work[s], *(e[s] for e in extra))

    ctx.parallel_for(p.blocks, block)
    if p.cast is not None:
        np.copyto(final, out, casting="unsafe")


class _Exact(Unary):
    """Fast mode: numpy's ufunc.  Exact mode: ``exact`` from :mod:`._exact_math`."""

    supports_exact = True
    exact: ClassVar[Callable[..., None]]
    extra = 0
    floats_only = True  # (Tanh, Exp, Sigmoid)

    def infer(self, ctx: InferContext) -> None:
        self.check_type(ctx)
        ctx.set_output(0, ctx.dtype(0), ctx.shape(0))
        if ctx.exact:
            ctx.prepared = plan_exact(ctx, ctx.dtype(0), math.prod(ctx.shape(0)), self.extra)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        if ctx.exact:
            run_exact(ctx, ctx.prepared, type(self).exact, inputs[0], outputs[0])
        else:
            self.compute(inputs[0], outputs[0])

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        if ctx.exact:
            return functools.partial(self.run, ctx, inputs, outputs)
        return super().bind(ctx, inputs, outputs)


class Tanh(_Exact):
    ufunc = np.tanh
    exact = em.tanh_into


class Sqrt(Unary):
    ufunc = np.sqrt
    floats_only = True
    supports_exact = True  # one correctly rounded (or exact) IEEE operation


class Exp(_Exact):
    ufunc = np.exp
    exact = em.exp_into


class Log(Unary):
    ufunc = np.log
    floats_only = True


class Neg(Unary):
    ufunc = np.negative
    numeric = True
    supports_exact = True  # one correctly rounded (or exact) IEEE operation


class Abs(Unary):
    ufunc = np.absolute
    supports_exact = True  # one correctly rounded (or exact) IEEE operation


class Reciprocal(Unary):
    ufunc = np.reciprocal
    floats_only = True
    supports_exact = True  # one correctly rounded (or exact) IEEE operation


class Floor(Unary):
    ufunc = np.floor
    floats_only = True
    supports_exact = True  # one correctly rounded (or exact) IEEE operation


class Ceil(Unary):
    ufunc = np.ceil
    floats_only = True
    supports_exact = True  # one correctly rounded (or exact) IEEE operation


class Sign(Unary):
    ufunc = np.sign
    numeric = True
    supports_exact = True  # one correctly rounded (or exact) IEEE operation


class Not(Unary):
    ufunc = np.logical_not
    supports_exact = True  # one correctly rounded (or exact) IEEE operation

    def infer(self, ctx: InferContext) -> None:
        if ctx.dtype(0).kind != "b":  # (numpy's logical_not of a float wrote 0.0 and 1.0)
            raise self.fail(
                f"X must be a bool tensor, got {name_of(ctx.dtype(0))}", "invalid_input"
            )
        super().infer(ctx)


class Softplus(Unary):
    """log(1 + exp(x)) as logaddexp(x, 0): no overflow for large x, no log(1) rounding."""

    floats_only = True

    def compute(self, x: np.ndarray, out: np.ndarray) -> None:
        np.logaddexp(x, constant(x.dtype, 0), out=out)


class Sigmoid(_Exact):
    """1 / (1 + exp(-x)) from e = exp(-|x|), which never overflows.

    sigmoid(x) = 1 / (1 + e) for x >= 0 and e / (1 + e) for x < 0: both are accurate to a few
    ulp, and sigmoid(-1000) is 0 without an overflow on the way.  The numerator is
    max(e, sign(x)), as e <= 1 (and e = 1 at x = 0): a select without a mask, which numpy
    runs several times faster than a masked copy.  Exact mode: the same formula with our exp
    (:func:`._exact_math.sigmoid_into`).
    """

    exact = em.sigmoid_into
    extra = 1

    def infer(self, ctx: InferContext) -> None:
        super().infer(ctx)
        if ctx.exact:
            return
        dtype, shape = ctx.dtype(0), ctx.shape(0)
        ctx.prepared = (ctx.add_scratch(dtype, shape), ctx.add_scratch(dtype, shape))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        if ctx.exact:
            run_exact(ctx, ctx.prepared, em.sigmoid_into, inputs[0], outputs[0])
        else:
            sigmoid_into(inputs[0], outputs[0], *(ctx.scratch[i] for i in ctx.prepared))

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        return functools.partial(self.run, ctx, inputs, outputs)


def sigmoid_into(x: np.ndarray, out: np.ndarray, e: np.ndarray, num: np.ndarray) -> None:
    """out = sigmoid(x) (see :class:`Sigmoid`); ``e`` and ``num`` are scratch of x's shape and
    type, ``out`` may be x's storage."""
    np.sign(x, out=num)  # into a scratch array: numpy's sign is slow in place
    np.absolute(x, out=e)  # the last read of x (out may be its storage)
    np.negative(e, out=e)
    np.exp(e, out=e)
    np.maximum(e, num, out=num)  # 1 where x > 0, e elsewhere; NaN stays NaN
    np.add(e, constant(x.dtype, 1), out=e)
    np.divide(num, e, out=out)


@dataclasses.dataclass(frozen=True)
class ErfPlan:
    """Scratch of :func:`erf_into` for a flat tensor of ``n`` elements, cut in blocks of
    ``BLOCK`` elements (independent outputs, spread over the intra-op threads); the block count
    depends on the size only."""

    BLOCK: ClassVar[int] = 1 << 16

    work: tuple[int, ...]  # scratch indices: WORK_ARRAYS flat arrays of the compute type
    mask: int  # a flat bool array
    top: int  # one compute-type element per block
    blocks: int
    exp_work: tuple[int, ...] = ()  # exact mode: an ExpWork's arrays (see _exact_math)

    @classmethod
    def ask(cls, ctx: InferContext, n: int, dtype: np.dtype, exact: bool = False) -> ErfPlan:
        work_type = compute_dtype(dtype)
        work = tuple(ctx.add_scratch(work_type, (n,)) for _ in range(WORK_ARRAYS))
        blocks = block_count(n)
        mask = ctx.add_scratch(np.bool_, (n,))
        exp_work = ()
        if exact:
            exp_work = tuple(ctx.add_scratch(d, s) for d, s in em.work_specs(work_type, n))
        top = ctx.add_scratch(work_type, (blocks,))
        return cls(work, mask, top, blocks, exp_work)

    @staticmethod
    def block(i: int) -> slice:
        return slice(i * ErfPlan.BLOCK, (i + 1) * ErfPlan.BLOCK)

    def arrays(self, ctx: KernelContext, i: int) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
        """Block i's work arrays, mask and top element: the last arguments of erf_into."""
        s = self.block(i)
        top = ctx.scratch[self.top][i : i + 1].reshape(())
        return [ctx.scratch[k][s] for k in self.work], ctx.scratch[self.mask][s], top

    def each(self, ctx: KernelContext, fn: Callable[[int], None]) -> None:
        for_blocks(ctx, self.blocks, fn)


def block_count(n: int) -> int:
    """Blocks of ErfPlan.BLOCK elements covering n (at least one)."""
    return max(1, -(-n // ErfPlan.BLOCK))


def for_blocks(ctx: KernelContext, blocks: int, fn: Callable[[int], None]) -> None:
    """fn(i) for every block, over the intra-op threads when there are several."""
    if blocks == 1:
        fn(0)
    else:
        ctx.parallel_for(blocks, fn)


class Erf(Unary):
    """Our own erf (Cody's rational approximations, see ``_erf``); numpy has none.

    float16 and bfloat16 are computed in float32.  Large tensors are cut in blocks
    (:class:`ErfPlan`) spread over the intra-op threads.  Exact mode: the same operations with
    our exp (:func:`._exact_math.exp_into`) and canonical NaN.
    """

    supports_exact = True

    def infer(self, ctx: InferContext) -> None:
        ctx.set_output(0, ctx.dtype(0), ctx.shape(0))
        ctx.prepared = ErfPlan.ask(ctx, math.prod(ctx.shape(0)), ctx.dtype(0), ctx.exact)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        plan: ErfPlan = ctx.prepared
        x, out = inputs[0].reshape(-1), outputs[0].reshape(-1)
        exp_work = em.make_work([ctx.scratch[i] for i in plan.exp_work]) if plan.exp_work else None

        def block(i: int) -> None:
            s = plan.block(i)
            if exp_work is None:
                erf_into(x[s], out[s], *plan.arrays(ctx, i))
            else:
                em.erf_exact_into(x[s], out[s], *plan.arrays(ctx, i), exp_work[s])

        plan.each(ctx, block)

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        return functools.partial(self.run, ctx, inputs, outputs)


# -- rounding and tests of the float classes (the math family) ---------------------------------


def require_float(
    kernel: OpKernel, ctx: InferContext, what: str = "X", integers: bool = False
) -> None:
    """ONNX's type constraint on input 0 (floats, or ``integers`` too), checked in ``infer``:
    another type fails with a message naming the node, where numpy would fail in the middle of
    a run or compute in another type."""
    dtype = ctx.dtype(0)
    if not (is_float(dtype) or (integers and dtype.kind in "iu")):
        kind = "numeric" if integers else "float"
        raise kernel.fail(f"{what} must be a {kind} tensor, got {name_of(dtype)}", "invalid_input")


class FloatUnary(Unary):
    """A Unary over the float types only."""

    floats_only = True


class Round(FloatUnary):
    """Round half to even: numpy's rint (roundToIntegralTiesToEven), integral values, +-0,
    +-inf and NaN unchanged.  Exact: one IEEE operation, NaN made canonical."""

    ufunc = np.rint
    supports_exact = True


class _FloatTest(OpKernel):
    """A bool tensor of X's shape from a float class test: exact (no arithmetic at all)."""

    supports_exact = True

    def infer(self, ctx: InferContext) -> None:
        require_float(self, ctx)
        ctx.set_output(0, np.bool_, ctx.shape(0))


class IsNaN(_FloatTest):
    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        np.isnan(inputs[0], out=outputs[0])

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        return functools.partial(np.isnan, inputs[0], out=outputs[0])


class IsInf(_FloatTest):
    """+-inf (both by default), +inf only or -inf only; neither detected gives all False.

    One side is ``x == +-inf``: the float8 types without an infinity compare with their NaN
    (the conversion of inf) and give False, as they should.
    """

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        flags = []
        for name in ("detect_positive", "detect_negative"):
            value = node.attr(name, 1)
            if value not in (0, 1):
                raise self.fail(f"{name} must be 0 or 1, got {value!r}")
            flags.append(bool(value))
        sides = {(True, True): "both", (True, False): "+", (False, True): "-"}
        self.sides = sides.get(tuple(flags), "none")

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        self.bind(ctx, inputs, outputs)()

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        x, out = inputs[0], outputs[0]
        if self.sides == "both":
            return functools.partial(np.isinf, x, out=out)
        if self.sides == "none":
            return functools.partial(out.fill, False)
        inf = constant(x.dtype, math.inf if self.sides == "+" else -math.inf)
        return functools.partial(np.equal, x, inf, out=out)
