"""Element-wise activations with attributes (LeakyRelu, Elu, Selu, HardSigmoid), Clip, and the
math family's PRelu, Celu, Shrink, Softsign, ThresholdedRelu, HardSwish, Mish and Swish.

Each is a short recipe of ufunc calls with 0-d constants of the input's type (``constant``),
reading X before it first writes ``out`` (which may be X's storage).  Elu, Selu and Celu use
expm1, which keeps the small negative values accurate where exp(x) - 1 would cancel.  PRelu,
Shrink, Softsign, ThresholdedRelu and HardSwish are single IEEE operations, comparisons and
selects, so exact (docs/exact-mode.md); the others use numpy's exp, log or tanh and are not.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._geometry import call_all
from ._util import (
    constant,
    is_float,
    needs_nan_rewrite,
    rewrite_nan,
    same_storage,
    same_types,
    zero_of,
)
from .unary import require_float


class Activation(OpKernel):
    """Same type and shape as X; a scratch array of X's shape when ``needs_scratch``."""

    in_place_input = 0
    needs_scratch = False

    def infer(self, ctx: InferContext) -> None:
        ctx.set_output(0, ctx.dtype(0), ctx.shape(0))
        if self.needs_scratch:
            ctx.prepared = ctx.add_scratch(ctx.dtype(0), ctx.shape(0))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        tmp = ctx.scratch[ctx.prepared] if self.needs_scratch else None
        self.compute(inputs[0], outputs[0], tmp)

    def compute(self, x: np.ndarray, out: np.ndarray, tmp: np.ndarray | None) -> None:
        raise NotImplementedError


class FloatActivation(Activation):
    """An Activation over the float types only: another type fails in ``infer``."""

    def infer(self, ctx: InferContext) -> None:
        require_float(self, ctx)
        super().infer(ctx)


class LeakyRelu(FloatActivation):
    """x for x >= 0, alpha x below: max(x, alpha x) when alpha <= 1, else min."""

    needs_scratch = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.alpha = float(node.attr("alpha", 0.01))
        self.pick = np.maximum if self.alpha <= 1 else np.minimum

    def compute(self, x: np.ndarray, out: np.ndarray, tmp: np.ndarray | None) -> None:
        np.multiply(x, constant(x.dtype, self.alpha), out=tmp)
        self.pick(x, tmp, out=out)


class Elu(FloatActivation):
    """x for x > 0, alpha (exp(x) - 1) otherwise, as max(x, 0) + alpha expm1(min(x, 0))."""

    needs_scratch = True
    default_alpha = 1.0
    gamma: float | None = None

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.alpha = float(node.attr("alpha", self.default_alpha))
        if self.gamma is not None:
            self.gamma = float(node.attr("gamma", self.gamma))

    def compute(self, x: np.ndarray, out: np.ndarray, tmp: np.ndarray | None) -> None:
        zero = constant(x.dtype, 0)
        np.minimum(x, zero, out=tmp)
        np.expm1(tmp, out=tmp)
        np.multiply(tmp, constant(x.dtype, self.alpha), out=tmp)
        np.maximum(x, zero, out=out)
        np.add(out, tmp, out=out)
        if self.gamma is not None:
            np.multiply(out, constant(x.dtype, self.gamma), out=out)


class Selu(Elu):
    """gamma * Elu(x) with Selu's own defaults (the float32 values of the spec)."""

    default_alpha = 1.67326319217681884765625
    gamma = 1.05070102214813232421875


class HardSigmoid(FloatActivation):
    """max(0, min(1, alpha x + beta))."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.alpha = float(node.attr("alpha", 0.2))
        self.beta = float(node.attr("beta", 0.5))

    def compute(self, x: np.ndarray, out: np.ndarray, tmp: np.ndarray | None) -> None:
        dt = x.dtype
        np.multiply(x, constant(dt, self.alpha), out=out)
        np.add(out, constant(dt, self.beta), out=out)
        np.clip(out, constant(dt, 0), constant(dt, 1), out=out)


@dataclasses.dataclass(frozen=True)
class _Bounds:
    low: np.ndarray | None  # 0-d, X's type; None: no bound (or read from the input at run time)
    high: np.ndarray | None
    low_input: bool  # read the bound from input 1 / 2 in run (not a constant)
    high_input: bool


class Clip(OpKernel):
    """min(max(x, low), high): a low bound above the high one gives ``high`` everywhere.

    Bounds are attributes before opset 11 (absent: none; opset 6's defaults are +-FLT_MAX,
    no bound for any value) and optional scalar inputs from 11, integer types from 12.
    """

    in_place_input = 0

    def infer(self, ctx: InferContext) -> None:
        dtype = ctx.dtype(0)
        ctx.set_output(0, dtype, ctx.shape(0))
        if self.node.opset < 11:
            lo, hi = self.node.attr("min"), self.node.attr("max")
            ctx.prepared = _Bounds(clip_bound(dtype, lo), clip_bound(dtype, hi), False, False)
            return
        bounds = []
        for i in (1, 2):
            if not ctx.has_input(i):
                bounds.append((None, False))
                continue
            if ctx.dtype(i) != dtype or math.prod(ctx.shape(i)) != 1:
                raise self.fail(
                    f"input {i} must be one value of X's type, got a {ctx.dtype(i)} tensor of "
                    f"shape {list(ctx.shape(i))}",
                    "invalid_input",
                )
            value = ctx.known_value(i)
            bounds.append((None, True) if value is None else (clip_bound(dtype, value), False))
        (lo, lo_in), (hi, hi_in) = bounds
        ctx.prepared = _Bounds(lo, hi, lo_in, hi_in)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        b: _Bounds = ctx.prepared
        lo = inputs[1].reshape(()) if b.low_input else b.low
        hi = inputs[2].reshape(()) if b.high_input else b.high
        clip_into(inputs[0], lo, hi, outputs[0])

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        b: _Bounds = ctx.prepared
        if b.low_input or b.high_input:
            return functools.partial(self.run, ctx, inputs, outputs)
        return functools.partial(clip_into, inputs[0], b.low, b.high, outputs[0])


def clip_into(x: np.ndarray, lo: np.ndarray | None, hi: np.ndarray | None, out: np.ndarray) -> None:
    """out = Clip(x) between 0-d bounds (None: no bound); ``out`` may be x's storage."""
    if lo is None and hi is None:
        np.copyto(out, x)
    elif hi is None:
        np.maximum(x, lo, out=out)
    elif lo is None:
        np.minimum(x, hi, out=out)
    else:
        np.clip(x, lo, hi, out=out)


def clip_bound(dtype: np.dtype, value: Any) -> np.ndarray | None:
    """The bound as a read-only 0-d array of X's type (FLT_MAX becomes inf in float16)."""
    if value is None:
        return None
    with np.errstate(over="ignore"):
        arr = np.asarray(value).reshape(()).astype(dtype)
    arr.flags.writeable = False
    return arr


# -- more activations (the math family) --------------------------------------------------------


class _ExactActivation(FloatActivation):
    """A recipe of single IEEE operations (exact, docs/exact-mode.md): NaN results are made
    canonical in exact mode; ``ctx.prepared`` is then (tmp, mask) scratch indices."""

    supports_exact = True

    def infer(self, ctx: InferContext) -> None:
        super().infer(ctx)
        tmp = ctx.prepared
        if needs_nan_rewrite(ctx, ctx.dtype(0), ctx.shape(0)):
            ctx.prepared = (tmp, ctx.prepared)
        else:
            ctx.prepared = (tmp, None)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        tmp, mask = ctx.prepared
        self.compute(inputs[0], outputs[0], None if tmp is None else ctx.scratch[tmp])
        if mask is not None:
            rewrite_nan(outputs[0], ctx.scratch[mask])


class Softsign(_ExactActivation):
    """x / (1 + |x|): three correctly rounded operations, so exact."""

    needs_scratch = True

    def compute(self, x: np.ndarray, out: np.ndarray, tmp: np.ndarray | None) -> None:
        np.absolute(x, out=tmp)
        np.add(tmp, constant(x.dtype, 1), out=tmp)
        np.divide(x, tmp, out=out)


class HardSwish(_ExactActivation):
    """x * max(0, min(1, x / 6 + 0.5)) as x * HardSigmoid(x) with alpha = 1/6 rounded to X's
    type (float32 0.16666667, the spec's value): a multiply, an add, a clamp to [0, 1] and a
    multiply, each one IEEE operation, so exact (the clamped value is never -0)."""

    needs_scratch = True

    def compute(self, x: np.ndarray, out: np.ndarray, tmp: np.ndarray | None) -> None:
        dt = x.dtype
        np.multiply(x, constant(dt, 1 / 6), out=tmp)
        np.add(tmp, constant(dt, 0.5), out=tmp)
        np.clip(tmp, constant(dt, 0), constant(dt, 1), out=tmp)  # NaN stays NaN
        np.multiply(x, tmp, out=out)


class Celu(FloatActivation):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1)), with expm1 for the small negative
    values; computed as written, so any non-zero alpha (and overflow to inf) behaves."""

    needs_scratch = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.alpha = float(node.attr("alpha", 1.0))
        if self.alpha == 0:
            raise self.fail("alpha must not be 0")

    def compute(self, x: np.ndarray, out: np.ndarray, tmp: np.ndarray | None) -> None:
        dt = x.dtype
        alpha, zero = constant(dt, self.alpha), constant(dt, 0)
        np.divide(x, alpha, out=tmp)
        np.expm1(tmp, out=tmp)
        np.multiply(tmp, alpha, out=tmp)
        np.minimum(tmp, zero, out=tmp)
        np.maximum(x, zero, out=out)
        np.add(out, tmp, out=out)


class Mish(FloatActivation):
    """x * tanh(softplus(x)), softplus as logaddexp(x, 0) (no overflow for large x)."""

    needs_scratch = True

    def compute(self, x: np.ndarray, out: np.ndarray, tmp: np.ndarray | None) -> None:
        np.logaddexp(x, constant(x.dtype, 0), out=tmp)
        np.tanh(tmp, out=tmp)
        np.multiply(x, tmp, out=out)


class Swish(FloatActivation):
    """x * sigmoid(alpha x) (opset 24) as x / (1 + exp(-alpha x)): four calls.

    Where exp overflows (alpha x below about -88 in float32) the quotient is x / inf = -0,
    the limit; x = -inf gives NaN either way (-inf * 0 in the spec's form).
    """

    needs_scratch = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.alpha = float(node.attr("alpha", 1.0))

    def compute(self, x: np.ndarray, out: np.ndarray, tmp: np.ndarray | None) -> None:
        np.multiply(x, constant(x.dtype, -self.alpha), out=tmp)
        np.exp(tmp, out=tmp)
        np.add(tmp, constant(x.dtype, 1), out=tmp)
        np.divide(x, tmp, out=out)


class ThresholdedRelu(FloatActivation):
    """x where x > alpha, else +0 (NaN too: it is not above alpha).

    As bits: ``y = bits(x) & m`` with ``m`` all ones where x > alpha and 0 elsewhere (the
    comparison's bools subtracted from 0 as unsigned integers: 0 - 1 is all ones).  Three
    calls, none of them a masked copy, and -inf or NaN below the threshold give +0 where
    ``x * (x > alpha)`` would give NaN.  Bits copied or cleared: exact, and no NaN comes out.
    """

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.alpha = float(node.attr("alpha", 1.0))

    def infer(self, ctx: InferContext) -> None:
        super().infer(ctx)
        dtype, shape = ctx.dtype(0), ctx.shape(0)
        unsigned = np.dtype(f"u{dtype.itemsize}")
        ctx.prepared = (ctx.add_scratch(np.bool_, shape), ctx.add_scratch(unsigned, shape))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        self.bind(ctx, inputs, outputs)()

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        x, out = inputs[0], outputs[0]
        above, mask = (ctx.scratch[i] for i in ctx.prepared)
        calls = [
            functools.partial(np.greater, x, constant(x.dtype, self.alpha), out=above),
            functools.partial(np.subtract, zero_of(mask.dtype), above, out=mask, dtype=mask.dtype),
            functools.partial(np.bitwise_and, x.view(mask.dtype), mask, out=out.view(mask.dtype)),
        ]
        return functools.partial(call_all, calls)


@dataclasses.dataclass(frozen=True)
class _ShrinkPlan:
    low: int  # scratch masks (X's shape): x < -lambd, x > lambd
    high: int
    tmp: int  # scratch (X's shape) in the compute type: x + bias
    res: int | None  # integer X: the result in float64 before the conversion
    bounds: tuple[np.ndarray, np.ndarray] | None  # integer X: its range, as float64 values
    nan: int | None  # exact mode: mask of the canonical-NaN rewrite
    consts: tuple[np.ndarray, ...]  # -lambd, lambd, bias, 0 in the compute type


class Shrink(OpKernel):
    """x + bias where x < -lambd, x - bias where x > lambd, 0 elsewhere (NaN included).

    Floats compute in X's type; integers in float64 and convert back (truncating), as the
    float attributes ask, saturating to the type's range (ONNX leaves a result out of range
    undefined, and machines convert such floats differently).  Exact: comparisons, selects,
    one add or subtract per element and, for integers, a clamp and a conversion.
    """

    in_place_input = 0
    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.lambd = float(node.attr("lambd", 0.5))
        self.bias = float(node.attr("bias", 0.0))

    def infer(self, ctx: InferContext) -> None:
        dtype, shape = ctx.dtype(0), ctx.shape(0)
        require_float(self, ctx, integers=True)
        ctx.set_output(0, dtype, shape)
        ct = dtype if is_float(dtype) else np.dtype(np.float64)
        consts = tuple(constant(ct, v) for v in (-self.lambd, self.lambd, self.bias, 0))
        low, high = ctx.add_scratch(np.bool_, shape), ctx.add_scratch(np.bool_, shape)
        tmp = ctx.add_scratch(ct, shape)
        res = ctx.add_scratch(ct, shape) if ct != dtype else None
        bounds = integer_bounds(dtype) if res is not None else None
        nan = ctx.prepared if needs_nan_rewrite(ctx, dtype, shape) else None
        ctx.prepared = _ShrinkPlan(low, high, tmp, res, bounds, nan, consts)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _ShrinkPlan = ctx.prepared
        x, out = inputs[0], outputs[0]
        low, high, tmp = ctx.scratch[p.low], ctx.scratch[p.high], ctx.scratch[p.tmp]
        res = out if p.res is None else ctx.scratch[p.res]
        neg, pos, bias, zero = p.consts
        if p.res is not None:  # integers: x in float64 first (no mixed-type loops)
            np.copyto(tmp, x, casting="unsafe")
            x = tmp
        np.less(x, neg, out=low)
        np.greater(x, pos, out=high)
        if p.res is None:  # floats: out (res) may be X's storage, so x + bias comes first
            np.add(x, bias, out=tmp)
            np.subtract(x, bias, out=res)
        else:  # integers: x is tmp, so x - bias comes first
            np.subtract(x, bias, out=res)
            np.add(x, bias, out=tmp)
        np.copyto(res, tmp, where=low)
        np.logical_or(low, high, out=low)
        np.logical_not(low, out=low)
        np.copyto(res, zero, where=low)
        if p.bounds is not None:
            np.clip(res, *p.bounds, out=res)
            np.copyto(out, res, casting="unsafe")
        if p.nan is not None:
            rewrite_nan(out, ctx.scratch[p.nan])


def integer_bounds(dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """The range of an integer type as float64 values that convert into it (2^63 - 1 has no
    float64: the largest float64 below 2^63 stands for it)."""
    info = np.iinfo(dtype)
    low, high = np.float64(info.min), np.float64(info.max)
    if int(high) > info.max:
        high = np.nextafter(high, 0)
    return constant(np.float64, float(low)), constant(np.float64, float(high))


@dataclasses.dataclass(frozen=True)
class _PReluPlan:
    slope_shape: tuple[int, ...]  # slope viewed so that it broadcasts to X
    below: int  # scratch mask (X's shape): x < 0
    tmp: int  # scratch (X's shape and type): slope * x
    nan: int | None  # exact mode: mask of the canonical-NaN rewrite


class PRelu(OpKernel):
    """x where x >= 0, slope * x where x < 0; slope broadcasts to X one way (opset 7 on).

    Before opset 7 the slope was "shared across channels" when of size 1, else one value per
    channel (axis 1, as the Caffe-style exporters of that time wrote it): a slope of shape [C]
    lines up with X's axis 1; other shapes must broadcast to X one way.  A select of X or one
    rounded product: exact.
    """

    in_place_input = 0
    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        if len(node.inputs) < 2 or not node.inputs[1]:
            raise self.fail("takes X and slope: the slope input is missing")

    def infer(self, ctx: InferContext) -> None:
        same_types(self, ctx, 2)
        dtype, x, s = ctx.dtype(0), ctx.shape(0), ctx.shape(1)
        require_float(self, ctx, integers=True)
        shape = self._slope_shape(tuple(x), tuple(s))
        ctx.set_output(0, dtype, x)
        below, tmp = ctx.add_scratch(np.bool_, x), ctx.add_scratch(dtype, x)
        nan = ctx.prepared if needs_nan_rewrite(ctx, dtype, x) else None
        ctx.prepared = _PReluPlan(shape, below, tmp, nan)

    def _slope_shape(self, x: tuple[int, ...], s: tuple[int, ...]) -> tuple[int, ...]:
        if self.node.opset < 7:
            if math.prod(s) == 1:
                return ()
            if len(s) == 1 and len(x) >= 2 and s[0] == x[1]:
                return (s[0],) + (1,) * (len(x) - 2)
        try:
            if len(s) <= len(x) and np.broadcast_shapes(x, s) == x:
                return s
        except ValueError:
            pass
        message = f"slope of shape {list(s)} does not broadcast to X's shape {list(x)}"
        raise self.fail(message, "invalid_input")

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _PReluPlan = ctx.prepared
        x, slope, out = inputs[0], inputs[1], outputs[0]
        below, tmp = ctx.scratch[p.below], ctx.scratch[p.tmp]
        np.less(x, zero_of(x.dtype), out=below)
        np.multiply(x, slope.reshape(p.slope_shape), out=tmp)
        if not same_storage(x, out):
            np.copyto(out, x)
        np.copyto(out, tmp, where=below)
        if p.nan is not None:
            rewrite_nan(out, ctx.scratch[p.nan])
