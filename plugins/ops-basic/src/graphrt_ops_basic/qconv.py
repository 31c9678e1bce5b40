"""ConvInteger and QLinearConv: ops-basic's float Conv run on exactly representable operands.

X - x_zero_point and W - w_zero_point are copied into a float type in which every partial sum
of a convolution is an exact integer (qmatmul's argument: K = C/group * prod(kernel) terms, each
at most max|x - x_zp| * |w - w_zp|): float32 when the bound ``max|x - x_zp| * max over filters
of sum |w - w_zp|`` (a constant W; else ``K * max|x - x_zp| * max|w - w_zp|``) is below
2**24, float64 below 2**53 (always, in practice), and those float operands go through
:class:`conv.Conv` — its im2col staging, BLAS products and blocking — planned on a context
that shows it the float types.  Padding is +0 in the float domain, which is x_zero_point in
the integer one, as ONNX asks.  The exact integer sums do not depend on the blocking or the
thread count, so exact mode uses the same fast path.

ConvInteger converts the sums to int32; QLinearConv adds its int32 bias exactly (in int32, as
onnxruntime does) and requantizes with ``x_scale * w_scale[m] / y_scale`` as QLinearMatMul does.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo

from . import conv
from ._geometry import Programmed, call_all
from .qmatmul import (
    EXACT32,
    EXACT64,
    INT8_TYPES,
    constant_array,
    multiplier,
    requantize,
    requantize_plan,
    value_bound,
)
from .quantize import F32, F64


class _FloatView:
    """The InferContext conv.Conv plans on: X and W in the compute type, no bias, W's value
    the shifted constant; scratch goes to the real context, outputs are kept here."""

    exact = False

    def __init__(
        self, ctx: InferContext, ct: np.dtype, weight: np.ndarray | None, w_index: int
    ) -> None:
        self._ctx, self._ct, self._weight, self._w = ctx, ct, weight, w_index
        self.prepared: Any = None
        self.out: tuple[np.dtype, tuple[int, ...]] | None = None

    num_inputs = 2

    def has_input(self, i: int) -> bool:
        return i < 2

    def dtype(self, i: int) -> np.dtype:
        return self._ct

    def shape(self, i: int) -> tuple[int, ...]:
        return self._ctx.shape(self._w if i == 1 else i)

    def known_value(self, i: int) -> np.ndarray | None:
        return self._weight if i == 1 else None

    def set_output(self, i: int, dtype: Any, shape: Sequence[int]) -> None:
        self.out = (np.dtype(dtype), tuple(shape))

    def add_scratch(self, dtype: Any, shape: Sequence[int]) -> int:
        return self._ctx.add_scratch(dtype, shape)


class _RunView:
    """The KernelContext conv.Conv's program reads: its plan, the shared scratch, the pool."""

    exact = False

    def __init__(self, ctx: KernelContext, prepared: Any) -> None:
        self.prepared, self.scratch, self._ctx = prepared, ctx.scratch, ctx

    def parallel_for(self, n: int, fn: Callable[[int], None]) -> None:
        self._ctx.parallel_for(n, fn)


@dataclasses.dataclass(frozen=True)
class _Plan:
    conv: Any  # conv.Conv's plan on the float operands
    out: tuple[int, ...]
    x_zero: np.ndarray | None  # in the compute type
    w_zero: np.ndarray | None  # run-time W: (M, 1, ...) in the compute type
    weight: np.ndarray | None  # constant W - w_zero in the compute type
    xf: int  # scratch: X - x_zero
    wf: int | None  # scratch: a run-time W - w_zero
    acc: int  # scratch: the sums in the compute type
    acc32: int | None  # QLinearConv with a bias: the int32 sums
    requant: Any = None  # QLinearConv: qmatmul.Requantize


class _IntegerConv(Programmed):
    supports_exact = True
    X, XZ, W, WZ = 0, 2, 1, 3

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.conv = conv.Conv(node)

    def _zero(self, ctx: InferContext, i: int) -> np.ndarray | None:
        return ctx.known_value(i) if ctx.has_input(i) else None

    def prepare_conv(self, ctx: InferContext, bias: bool = False) -> _Plan:
        x_t, w_t = ctx.dtype(self.X), ctx.dtype(self.W)
        if x_t not in INT8_TYPES or w_t not in INT8_TYPES:
            raise self.fail(f"X and W must be int8 or uint8, got {x_t} and {w_t}", "unsupported")
        wshape = ctx.shape(self.W)
        if len(wshape) < 3:
            raise self.fail(f"W must be (M, C/group, kernel...), got {list(wshape)}")
        m = wshape[0]
        xz, wz, w = self._zero(ctx, self.XZ), self._zero(ctx, self.WZ), ctx.known_value(self.W)
        for i, want in ((self.XZ, 1), (self.WZ, m)):
            if ctx.has_input(i) and math.prod(ctx.shape(i)) not in (1, want):
                raise self.fail(f"input {i} (a zero point) must have 1 or {want} elements")
        k = math.prod(wshape[1:])
        x_bound = value_bound(x_t, xz if xz is not None or not ctx.has_input(self.XZ) else None)
        w_known = w is not None and (wz is not None or not ctx.has_input(self.WZ))
        wzc = None if wz is None else _per_channel(wz, len(wshape))
        if w_known:  # a filter's sum of |w| bounds its sums over any window
            shifted = w.astype(F64) - (0 if wzc is None else wzc)
            l1 = np.abs(shifted).reshape(m, -1).sum(axis=1)
            bound = x_bound * int(l1.max()) if l1.size else 0
        else:
            w_bound = value_bound(w_t, wz if wz is not None or not ctx.has_input(self.WZ) else None)
            bound = k * x_bound * w_bound
        if bound >= EXACT64:
            raise self.fail(f"sums of {k} terms may exceed 2**53", "unsupported")
        ct = F32 if bound < EXACT32 else F64
        weight = None
        if w_known:
            weight = np.ascontiguousarray(shifted.reshape(m, -1), dtype=ct)
            weight.flags.writeable = False
        view = _FloatView(ctx, ct, weight, self.W)
        self.conv.infer(view)
        out = view.out[1]
        return _Plan(
            view.prepared, out,
            constant_array(xz, ct) if xz is not None else None,
            constant_array(wzc, ct) if wzc is not None and not w_known else None,
            weight,
            ctx.add_scratch(ct, ctx.shape(self.X)),
            None if w_known else ctx.add_scratch(ct, wshape),
            ctx.add_scratch(ct, out),
            ctx.add_scratch(np.int32, out) if bias else None,
        )  # fmt: skip

    def conv_calls(
        self, ctx: KernelContext, p: _Plan, inputs: Sequence[Any]
    ) -> tuple[list[Callable[[], Any]], np.ndarray]:
        """The calls computing the exact sums into the float accumulator (returned)."""
        calls: list[Callable[[], Any]] = []
        xf, acc = ctx.scratch[p.xf], ctx.scratch[p.acc]
        x, x_zero = inputs[self.X], p.x_zero
        if x_zero is not None:
            calls.append(functools.partial(np.subtract, x, x_zero, out=xf))
        elif _given(inputs, self.XZ):  # read when the step runs: bind sees no values yet
            calls.append(functools.partial(_shift, x, inputs[self.XZ], xf))
        else:
            calls.append(functools.partial(np.copyto, xf, x, "unsafe"))
        weight = p.weight
        if weight is None:
            w, wf, w_zero = inputs[self.W], ctx.scratch[p.wf], p.w_zero
            if w_zero is not None:
                calls.append(functools.partial(np.subtract, w, w_zero, out=wf))
            elif _given(inputs, self.WZ):
                calls.append(functools.partial(_shift, w, inputs[self.WZ], wf))
            else:
                calls.append(functools.partial(np.copyto, wf, w, "unsafe"))
            weight = wf
        if p.conv is not None and acc.size:
            calls.append(self.conv.program(_RunView(ctx, p.conv), [xf, weight], [acc]))
        return calls, acc


def _per_channel(zero: Any, rank: int) -> np.ndarray:
    """A zero point of 1 or M elements as (M or 1, 1, ...) against W (M, C/group, kernel...)."""
    z = np.asarray(zero)
    return z.reshape((-1,) + (1,) * (rank - 1)) if z.size > 1 else z.reshape(())


def _shift(v: np.ndarray, zero: np.ndarray, out: np.ndarray) -> None:
    """out = v - zero, a run-time zero point of 1 element or one per leading index."""
    np.subtract(v, _per_channel(zero, v.ndim).astype(out.dtype), out=out)


def _given(inputs: Sequence[Any], i: int) -> bool:
    return len(inputs) > i and inputs[i] is not None


class ConvInteger(_IntegerConv):
    """int32 Y = conv(X - x_zero_point, W - w_zero_point), Conv's attributes."""

    def infer(self, ctx: InferContext) -> None:
        p = self.prepare_conv(ctx)
        ctx.set_output(0, np.int32, p.out)
        ctx.prepared = p

    def program(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        calls, acc = self.conv_calls(ctx, ctx.prepared, inputs)
        calls.append(functools.partial(np.copyto, outputs[0], acc, "unsafe"))
        return functools.partial(call_all, calls)


class QLinearConv(_IntegerConv):
    """Quantized Conv: x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
    y_zero_point, B (int32); w_scale and w_zero_point per tensor or per output channel."""

    X, XZ, W, WZ = 0, 2, 3, 5

    def infer(self, ctx: InferContext) -> None:
        bias = ctx.num_inputs > 8 and ctx.has_input(8)
        p = self.prepare_conv(ctx, bias)
        out_type = ctx.dtype(7)
        if out_type not in INT8_TYPES:
            raise self.fail(f"y must be int8 or uint8, got {out_type}", "unsupported")
        if bias and ctx.shape(8) != (p.out[1],):
            raise self.fail(f"B must have shape [{p.out[1]}], got {list(ctx.shape(8))}")
        ctx.set_output(0, out_type, p.out)
        scales = [ctx.known_value(i) for i in (1, 4, 6)]
        mult = None
        if all(s is not None for s in scales):
            mult = multiplier(scales[0], _per_out(scales[1], len(p.out)), scales[2])
        f32 = ctx.scratch[p.acc][0] == F32 and not bias
        ctx.prepared = dataclasses.replace(
            p, requant=requantize_plan(ctx, out_type, mult, ctx.known_value(7), f32, p.out)
        )

    def program(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        p: _Plan = ctx.prepared
        r = p.requant
        calls, acc = self.conv_calls(ctx, p, inputs)
        tmp = ctx.scratch[r.tmp] if r.tmp is not None else None
        if p.acc32 is not None:  # int32 sums plus the int32 bias, then float32
            acc32 = ctx.scratch[p.acc32]
            bias = inputs[8].reshape((-1,) + (1,) * (len(p.out) - 2))
            calls.append(functools.partial(np.copyto, acc32, acc, "unsafe"))
            calls.append(functools.partial(np.add, acc32, bias, out=acc32))
            acc = acc32
        calls.append(functools.partial(_requantize, acc, inputs, r, tmp, outputs[0]))
        return functools.partial(call_all, calls)


def _requantize(acc: np.ndarray, inputs: Sequence[Any], r: Any, tmp: Any, y: np.ndarray) -> None:
    """Requantize with the plan's constants, or this run's scales and zero point."""
    mult = r.multiplier
    if mult is None:
        mult = multiplier(inputs[1], _per_out(inputs[4], y.ndim), inputs[6])
    zero = r.zero if r.zero is not None else constant_array(inputs[7], F32)
    with np.errstate(all="ignore"):
        requantize(acc, mult, zero, r, tmp, y)


def _per_out(scale: Any, rank: int) -> np.ndarray:
    """w_scale of 1 or M elements against Y (N, M, spatial...)."""
    s = np.asarray(scale)
    return s.reshape((-1,) + (1,) * (rank - 2)) if s.size > 1 else s.reshape(())
