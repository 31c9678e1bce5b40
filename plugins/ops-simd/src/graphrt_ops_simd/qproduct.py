"""MatMulInteger and QLinearMatMul on the native int8 GEMM (src/native/qgemm.h), and the
DynamicQuantizeLinear that feeds them in a dynamically quantized model.

A constant 2-D int8/uint8 B is packed once per plan with its zero point (per tensor or per
column) in the layout of the path's dot-product instruction (AVX512-VNNI vpdpbusd when the CPU
has it, else vpmaddwd on int16, or scalar C++); A (int8/uint8, any leading dims folded into
rows) is packed per call.  The native sums are exact integers, so the result is the same bits
as ops-basic's float-BLAS product on every path and thread count, and these kernels run in
exact mode as in fast mode.  QLinearMatMul requantizes the int32 sums with ops-basic's own
``requantize`` (float32 multiplier, round half to even, zero point, saturation), so its bits are
ops-basic's too.

Anything else runs the numpy kernel the path wraps: a run-time or batched B, a per-row A zero
point, a depth at which an int32 sum could overflow (ops-basic then keeps the wider sum).

DynamicQuantizeLinear runs ops-basic's formula natively, step by step in float32 (qgemm.cpp:
one pass for the range, one to quantize, instead of numpy's seven): the same bits.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext
from graphrt_ops_basic.qmatmul import (
    Requantize,
    constant_array,
    multiplier,
    requantize,
    requantize_plan,
    row_param,
)

from . import _native
from .kernels import NativeKernel, probe, trial_infer

INT8 = (np.dtype(np.int8), np.dtype(np.uint8))
I32 = np.dtype(np.int32)
F32 = np.dtype(np.float32)
#: Deepest product run natively: k * 255 * 255 stays below 2**31, so no int32 sum wraps (and
#: ops-basic's wider sums convert to the same int32).
MAX_K = (2**31 - 1) // (255 * 255)
#: Paths whose native int8 products run in sessions. The scalar path's C++ int8 GEMM is slower
#: than ops-basic's exact products through float BLAS, and on the scalar path a session with a
#: deep product (300 x 3072 @ 3072 x 64, two threads, the third session in a process) crashed
#: in a pool worker at -O3 (not at -O2, not under ASan; not root-caused): ops-basic's kernels
#: there. Its kernels stay reachable for the tests (tests/simd/test_native_qgemm.py).
NATIVE_ISAS = ("avx2", "avx512")


@dataclasses.dataclass(frozen=True)
class QPlan:
    """A native integer product: A as (rows, k), B packed, the output as ``full``."""

    rows: int
    k: int
    n: int
    full: tuple[int, ...]
    a_shape: tuple[int, ...]  # A as the product reads it (rank >= 2)
    packed: Any  # _native.PackedQB
    a_zero: np.ndarray | None  # a constant A zero point (one value) ...
    a_zero_input: int | None  # ... or the input index of a run-time one
    acc: int | None = None  # QLinearMatMul: int32 scratch of the sums (shape full)
    requant: Requantize | None = None


class _NativeIntegerProduct(NativeKernel):
    """The native product of both kernels; ``A, AZ, B, BZ`` as in ops-basic."""

    plan_type = QPlan
    A, AZ, B, BZ = 0, 2, 1, 3

    def native_plan(self, ctx: InferContext, full: Sequence[int]) -> QPlan | None:
        """The plan when the native kernel can take this node, else None."""
        if self.isa not in NATIVE_ISAS:
            return None
        if ctx.dtype(self.A) not in INT8 or ctx.dtype(self.B) not in INT8:
            return None
        b = ctx.known_value(self.B)
        a_shape = tuple(ctx.shape(self.A))
        if b is None or b.ndim != 2 or len(a_shape) < 1:
            return None
        a2 = (1, *a_shape) if len(a_shape) == 1 else a_shape
        k, n = b.shape
        if k > MAX_K:
            return None
        b_zero = None
        if ctx.has_input(self.BZ):
            b_zero = ctx.known_value(self.BZ)
            if b_zero is None or b_zero.size not in (1, n) or b_zero.ndim > 1:
                return None
            b_zero = np.ascontiguousarray(b_zero.reshape(-1))
        a_zero = a_zero_input = None
        if ctx.has_input(self.AZ):
            if math.prod(ctx.shape(self.AZ)) != 1:
                return None  # per-row zero points: the numpy kernel
            a_zero = ctx.known_value(self.AZ)
            if a_zero is None:
                a_zero_input = self.AZ
            else:
                a_zero = np.ascontiguousarray(a_zero.reshape(1))
                a_zero.flags.writeable = False
        packed = _native.PackedQB(np.ascontiguousarray(b), b_zero, self.isa)
        return QPlan(
            rows=math.prod(a2[:-1]),
            k=k,
            n=n,
            full=tuple(full),
            a_shape=a2,
            packed=packed,
            a_zero=a_zero,
            a_zero_input=a_zero_input,
        )

    def product_call(
        self, ctx: KernelContext, p: QPlan, inputs: Sequence[Any], out: np.ndarray
    ) -> Callable[[], Any]:
        """The native call writing the int32 sums into ``out`` (any shape of rows x n)."""
        x = inputs[self.A]
        a = x.reshape(p.rows, p.k)
        a_zero = p.a_zero
        if p.a_zero_input is not None:
            a_zero = inputs[p.a_zero_input].reshape(1)
        threads = ctx.threads
        out2 = out.reshape(p.rows, p.n)
        if a.size and not np.may_share_memory(a, x):  # the reshape copied: again every run
            return functools.partial(_copying_call, x, p, out2, a_zero, threads)
        return _native.QGemmCall(a, p.packed, out2, a_zero, threads)


def _copying_call(
    x: np.ndarray, p: QPlan, out: np.ndarray, a_zero: np.ndarray | None, threads: int
) -> None:
    _native.QGemmCall(x.reshape(p.rows, p.k), p.packed, out, a_zero, threads)()


def infer_int32(kernel: Any, ctx: InferContext, weight: int) -> None:
    """The infer of an int32 product (MatMulInteger, ConvInteger): the numpy kernel's checks
    and output type (its constant ``weight`` hidden), then the native plan or the fallback."""
    dtype, out = probe(kernel.base, ctx, hidden=(weight,))
    plan = kernel.native_plan(ctx, out) if dtype == I32 else None
    if plan is None:
        return kernel.fallback(ctx)
    ctx.set_output(0, dtype, out)
    ctx.prepared = plan


class MatMulInteger(_NativeIntegerProduct):
    """int32 Y = (A - a_zero_point) @ (B - b_zero_point)."""

    def infer(self, ctx: InferContext) -> None:
        infer_int32(self, ctx, self.B)

    def bind_native(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        return self.product_call(ctx, ctx.prepared, inputs, outputs[0])


class QLinearMatMul(_NativeIntegerProduct):
    """The native int32 sums, requantized by ops-basic's ``requantize``."""

    A, AZ, B, BZ = 0, 2, 3, 5

    def infer(self, ctx: InferContext) -> None:
        dtype, out = probe(self.base, ctx, hidden=(self.B,))
        plan = self.native_plan(ctx, out)
        if plan is None:
            return self.fallback(ctx)
        ctx.set_output(0, dtype, out)
        full = (*plan.a_shape[:-1], plan.n)
        scales = [ctx.known_value(i) for i in (1, 4, 6)]
        mult = None
        if all(s is not None for s in scales):
            mult = multiplier(row_param(scales[0], plan.a_shape), scales[1], scales[2])
        r = requantize_plan(ctx, dtype, mult, ctx.known_value(7), False, full)
        ctx.prepared = dataclasses.replace(
            plan, full=full, acc=ctx.add_scratch(I32, full), requant=r
        )

    def bind_native(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        p: QPlan = ctx.prepared
        acc = ctx.scratch[p.acc]
        call = self.product_call(ctx, p, inputs, acc)
        tmp = ctx.scratch[p.requant.tmp]
        return functools.partial(_requantized, call, acc, tmp, p, inputs, outputs[0])


def _requantized(
    call: Callable[[], Any],
    acc: np.ndarray,
    tmp: np.ndarray,
    p: QPlan,
    inputs: Sequence[Any],
    y: np.ndarray,
) -> None:
    call()
    r = p.requant
    mult = r.multiplier
    if mult is None:
        mult = multiplier(row_param(inputs[1], p.a_shape), inputs[4], inputs[6])
    zero = r.zero if r.zero is not None else constant_array(inputs[7], F32)
    with np.errstate(all="ignore"):
        requantize(acc, mult, zero, r, tmp, y.reshape(p.full))


@dataclasses.dataclass(frozen=True)
class DynamicPlan:
    """A native DynamicQuantizeLinear (nothing to prepare)."""


class DynamicQuantizeLinear(NativeKernel):
    """uint8 codes, scale and zero point of float32 X in one native call."""

    plan_type = DynamicPlan

    def infer(self, ctx: InferContext) -> None:
        trial = trial_infer(self.base, ctx)  # its checks and output types, not its scratch
        for i, (dtype, shape) in enumerate(trial.output_types()):
            ctx.set_output(i, dtype, shape)
        ctx.prepared = DynamicPlan()

    def bind_native(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        y, scale, zero = outputs[:3]
        if not inputs[0].flags.c_contiguous:  # never a slab value: copied per run
            return functools.partial(_dynamic_copying, inputs[0], y, scale, zero, self.isa)
        return functools.partial(_native.dynamic_quantize, inputs[0], y, scale, zero, self.isa)


def _dynamic_copying(x: np.ndarray, *args: Any) -> None:
    _native.dynamic_quantize(np.ascontiguousarray(x), *args)
