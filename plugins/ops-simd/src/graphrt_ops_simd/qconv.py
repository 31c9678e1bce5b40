"""ConvInteger and QLinearConv as im2col + the native int8 GEMM (qgemm.h, as qproduct.py).

Per plan, each group's constant W (M/group, C/group, kernel...) is packed as B = W^T
(K x M/group, K = C/group * prod(kernel)) with its zero points per output channel, i.e. per
column.  Per run, X is copied into a padded plan scratch whose border holds x_zero_point (ONNX:
padding equals the zero point, so it adds 0 after the subtraction), its windows are gathered by
one numpy copy through a stride-tricks view into ``cols`` (N * P rows, C * prod(kernel) uint8 or
int8 columns, P output positions; group g's K columns are contiguous), and one QGemmCall per
group writes the exact int32 sums (N, P, M/group).  The sums do not depend on the path, blocking
or thread count, so the bits are ops-basic's (graphrt_ops_basic.qconv: exact float sums of the
same integers) in exact mode as in fast mode.  QLinearConv adds its int32 bias in int32 and
requantizes with ops-basic's ``multiplier`` and ``requantize`` (float32, round half to even,
saturation), element for element as ops-basic does, writing Y (N, M, spatial...) through a
transposed view.

Anything else runs the numpy kernel the path wraps: a run-time W or w_zero_point, a depth K at
which an int32 sum could wrap (qproduct.MAX_K), an empty output, and where the numpy kernel is
faster (NATIVE_ISAS, MIN_K: the scalar path, shallow products).  Per run the requantization
(ops-basic's numpy ``requantize``, written through a transposed view of Y) costs more than the
native product on bench/bench_quant.py's CNN layers.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from graphrt.plugin import InferContext, KernelContext
from graphrt_ops_basic._geometry import Window, call_all, resolve
from graphrt_ops_basic.qmatmul import (
    Requantize,
    constant_array,
    multiplier,
    requantize,
    requantize_plan,
)

from . import _native
from .kernels import NativeKernel, probe
from .qproduct import INT8, MAX_K, infer_int32

I32 = np.dtype(np.int32)
F32 = np.dtype(np.float32)
#: Paths whose native GEMM beats ops-basic's float32 BLAS convolution: the scalar C++ int8
#: kernel does not (5.5 ms against about 1 ms for 3136 x 288 @ 288 x 32), so that path keeps
#: the numpy kernel (the same bits).
NATIVE_ISAS = ("avx2", "avx512")
#: ... and from this depth C/group * prod(kernel): below it the channels-last copy, the gather
#: and the transposed requantization cost more than BLAS's whole convolution (a 3-channel 3x3
#: stem at 112x112, stride 2: 0.29 ms natively, 0.21 ms in numpy; bench/bench_quant.py's CNN).
MIN_K = 32


@dataclasses.dataclass(frozen=True)
class QConvPlan:
    """A native integer convolution of 1 or more spatial axes."""

    window: Window
    n: int
    c: int
    m: int
    group: int
    k: int  # depth of one group's product: C/group * prod(kernel)
    out: tuple[int, ...]  # Y's shape
    packed: tuple[Any, ...]  # _native.PackedQB per group
    x_zero: np.ndarray | None  # constant x_zero_point (1 element, X's type) ...
    x_zero_input: int | None  # ... or the input index of a run-time one
    last: int  # scratch: X channels-last (N, spatial..., C), with its border when padded
    cols: int | None  # scratch: (N * P, C * prod(kernel)); None: ``last`` is the matrix
    acc: int  # scratch: int32 sums (group, N, P, M/group)
    requant: Requantize | None = None  # QLinearConv


class _NativeIntegerConv(NativeKernel):
    """The native sums of both kernels; ``X, XZ, W, WZ`` as in ops-basic."""

    plan_type = QConvPlan
    X, XZ, W, WZ = 0, 2, 1, 3

    def native_plan(self, ctx: InferContext, out: Sequence[int]) -> QConvPlan | None:
        """The plan when the native kernel can take this node, else None."""
        if ctx.dtype(self.X) not in INT8 or ctx.dtype(self.W) not in INT8:
            return None
        w = ctx.known_value(self.W)
        xs = tuple(ctx.shape(self.X))
        if w is None or len(xs) < 3 or w.ndim != len(xs) or math.prod(out) == 0:
            return None
        conv = self.base.conv  # ops-basic's float Conv: the parsed attributes
        g = conv.group
        n, c, m = xs[0], xs[1], w.shape[0]
        k = math.prod(w.shape[1:])
        if k > MAX_K or k < MIN_K or self.isa not in NATIVE_ISAS or c % g or m % g:
            return None
        wz = None
        if ctx.has_input(self.WZ):
            wz = ctx.known_value(self.WZ)
            if wz is None or wz.size not in (1, m):
                return None
            wz = np.broadcast_to(wz.reshape(-1), (m,))
        x_zero = x_zero_input = None
        if ctx.has_input(self.XZ):
            if math.prod(ctx.shape(self.XZ)) != 1:
                return None
            x_zero = ctx.known_value(self.XZ)
            if x_zero is None:
                x_zero_input = self.XZ
            else:
                x_zero = np.ascontiguousarray(x_zero.reshape(1))
                x_zero.flags.writeable = False
        win = resolve(self.base, conv.attrs, xs[2:], w.shape[2:])
        rank, mg = len(win.kernel), m // g
        packed = []
        for gi in range(g):  # B's rows in cols' order: taps, then the group's channels
            wg = w[gi * mg : (gi + 1) * mg].transpose(0, *range(2, 2 + rank), 1)
            b = np.ascontiguousarray(wg.reshape(mg, k).T)
            z = None if wz is None else np.ascontiguousarray(wz[gi * mg : (gi + 1) * mg])
            packed.append(_native.PackedQB(b, z, self.isa))
        p = math.prod(win.out)
        ext = [
            max(b + s + e, b + x) for b, s, e, x in zip(win.begin, win.spatial, win.end, win.extent)
        ]
        direct = not win.reads_outside and all(
            kk == 1 and st == 1 for kk, st in zip(win.kernel, win.strides)
        )
        xt = ctx.dtype(self.X)
        return QConvPlan(
            window=win,
            n=n,
            c=c,
            m=m,
            group=g,
            k=k,
            out=tuple(out),
            packed=tuple(packed),
            x_zero=x_zero,
            x_zero_input=x_zero_input,
            last=ctx.add_scratch(xt, (n, *ext, c)),
            cols=None if direct else ctx.add_scratch(xt, (n * p, c * math.prod(win.kernel))),
            acc=ctx.add_scratch(I32, (g, n, p, mg)),
        )

    def sum_calls(
        self, ctx: KernelContext, p: QConvPlan, inputs: Sequence[Any]
    ) -> tuple[list[Callable[[], Any]], np.ndarray]:
        """The calls writing the int32 sums into the (group, N, P, M/group) scratch."""
        x = inputs[self.X]
        win = p.window
        a_zero = p.x_zero
        if p.x_zero_input is not None:
            a_zero = inputs[p.x_zero_input].reshape(1)
        calls: list[Callable[[], Any]] = []
        last = ctx.scratch[p.last]  # X channels-last, with its border
        rank = len(win.kernel)
        to_last = x.transpose(0, *range(2, 2 + rank), 1)
        if win.reads_outside:
            inner = (slice(None),) + tuple(slice(b, b + s) for b, s in zip(win.begin, win.spatial))
            fill = a_zero if a_zero is not None else np.zeros(1, x.dtype)
            calls.append(functools.partial(np.copyto, last, fill.reshape(())))
            calls.append(functools.partial(np.copyto, last[inner], to_last))
        else:
            calls.append(functools.partial(np.copyto, last, to_last))
        if p.cols is None:  # 1x1, stride 1, no padding: X channels-last is the matrix
            cols = last.reshape(-1, p.c)
        else:
            cols = ctx.scratch[p.cols]
            sp = last.strides
            cg = p.c // p.group
            view_shape = (p.n, *win.out, p.group, *win.kernel, cg)
            view_strides = (
                sp[0],
                *(sp[1 + i] * win.strides[i] for i in range(rank)),
                sp[-1] * cg,
                *(sp[1 + i] * win.dilations[i] for i in range(rank)),
                sp[-1],
            )
            calls.append(functools.partial(_gather, last, view_shape, view_strides, cols))
        acc = ctx.scratch[p.acc]
        threads = ctx.threads
        mg = p.m // p.group
        for gi, packed in enumerate(p.packed):
            a = cols[:, gi * p.k : (gi + 1) * p.k]
            out2 = acc[gi].reshape(-1, mg)
            calls.append(_native.QGemmCall(a, packed, out2, a_zero, threads))
        return calls, acc

    def y_view(self, p: QConvPlan, y: np.ndarray) -> np.ndarray:
        """Y (N, M, spatial...) as the sums' (group, N, P, M/group)."""
        mg = p.m // p.group
        return y.reshape(p.n, p.group, mg, -1).transpose(1, 0, 3, 2)


def _gather(
    src: np.ndarray, shape: tuple[int, ...], strides: tuple[int, ...], cols: np.ndarray
) -> None:
    """im2col: every window of ``src`` as a row of ``cols`` (per group: taps, then channels)."""
    view = as_strided(src, shape, strides, writeable=False)
    np.copyto(cols.reshape(shape), view)


class ConvInteger(_NativeIntegerConv):
    """int32 Y = conv(X - x_zero_point, W - w_zero_point) natively."""

    def infer(self, ctx: InferContext) -> None:
        infer_int32(self, ctx, self.W)

    def bind_native(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        p: QConvPlan = ctx.prepared
        calls, acc = self.sum_calls(ctx, p, inputs)
        calls.append(functools.partial(np.copyto, self.y_view(p, outputs[0]), acc))
        return functools.partial(call_all, calls)


class QLinearConv(_NativeIntegerConv):
    """The native int32 sums, plus the int32 bias, requantized by ops-basic's ``requantize``."""

    X, XZ, W, WZ = 0, 2, 3, 5

    def infer(self, ctx: InferContext) -> None:
        dtype, out = probe(self.base, ctx, hidden=(self.W,))
        plan = self.native_plan(ctx, out)
        if plan is None:
            return self.fallback(ctx)
        ctx.set_output(0, dtype, out)
        scales = [ctx.known_value(i) for i in (1, 4, 6)]
        mult = None
        if all(s is not None for s in scales):
            mult = multiplier(scales[0], _per_out(scales[1], plan), scales[2])
        acc_shape = (plan.group, plan.n, math.prod(plan.window.out), plan.m // plan.group)
        r = requantize_plan(ctx, dtype, mult, ctx.known_value(7), False, acc_shape)
        ctx.prepared = dataclasses.replace(plan, requant=r)

    def bind_native(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        p: QConvPlan = ctx.prepared
        calls, acc = self.sum_calls(ctx, p, inputs)
        r = p.requant
        if r.multiplier is not None and r.zero is not None:
            # constant scales and zero point: bias, cast, scale, round, clip and the write into
            # Y in one native pass (qgemm.h's requant: ops-basic's operations, the same bits)
            has_bias = len(inputs) > 8 and inputs[8] is not None
            calls.append(
                functools.partial(
                    _native.requantize_i32, acc,
                    np.ascontiguousarray(inputs[8]).reshape(-1) if has_bias else None,
                    np.ascontiguousarray(r.multiplier, dtype=F32).reshape(-1),
                    float(r.zero), float(r.lo), float(r.hi), self.y_view(p, outputs[0]),
                    self.isa,
                )
            )  # fmt: skip
            return functools.partial(call_all, calls)
        tmp = ctx.scratch[p.requant.tmp]
        if len(inputs) > 8 and inputs[8] is not None:
            # the int32 bias added in int32 (numpy's int32 loop, wrapping as ops-basic's add),
            # each sum then cast to float32 on its way out: one pass instead of two
            bias = inputs[8].reshape(p.group, 1, 1, p.m // p.group)
            calls.append(functools.partial(np.add, acc, bias, out=tmp, dtype=I32))
            acc = tmp
        y = self.y_view(p, outputs[0])
        calls.append(functools.partial(_requantized, acc, tmp, p, inputs, y))
        return functools.partial(call_all, calls)


def _per_out(scale: Any, p: QConvPlan) -> np.ndarray:
    """w_scale of 1 or M elements against the sums (group, N, P, M/group)."""
    s = np.asarray(scale)
    return s.reshape(p.group, 1, 1, p.m // p.group) if s.size > 1 else s.reshape(())


def _requantized(
    acc: np.ndarray, tmp: np.ndarray, p: QConvPlan, inputs: Sequence[Any], y: np.ndarray
) -> None:
    r = p.requant
    mult = r.multiplier
    if mult is None:
        mult = multiplier(inputs[1], _per_out(inputs[4], p), inputs[6])
    zero = r.zero if r.zero is not None else constant_array(inputs[7], F32)
    with np.errstate(all="ignore"):
        requantize(acc, mult, zero, r, tmp, y)
