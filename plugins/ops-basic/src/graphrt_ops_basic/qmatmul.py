"""MatMulInteger and QLinearMatMul: exact integer products computed by float BLAS.

numpy's integer matmul has no BLAS, so the operands, zero points subtracted, are copied into a
float type whose products and sums are exact: every partial sum of a row of A times a column of
B is an integer no larger than sum_k |a_ik| * |b_kj|, and float32 (float64) holds every integer
up to 2**24 (2**53) exactly, whatever order and fused multiply-adds BLAS uses.  So the result
is the exact integer product — the same bits for any blocking, thread count or BLAS — and exact
mode needs nothing else.  The type is chosen per plan from bounds:

* ``max|a - a_zp| * max_j sum_k |b_kj - b_zp|`` below 2**24 for a constant B (trained weights
  are far from all extreme: BERT's K = 768 products pass), or ``K * max|a - a_zp| *
  max|b - b_zp|`` for a run-time B (the types' ranges, or the constant zero points): float32;
* a constant B whose bound is larger: float32 when, this run, every row's
  ``sum_k |a_ik| * max_j |b_kj|`` is below 2**24 (checked with a float32 matrix-vector product
  and a 1% margin, far more than its rounding error for K < 2**13), otherwise float64 —
  activations quantized by DynamicQuantizeLinear sit near their zero point, so BERT's K = 3072
  products nearly always pass;
* float64 while the bound is below 2**53; beyond (never in practice) numpy's int64 matmul.

QLinearMatMul then requantizes as onnxruntime does: the int32 sum is converted to float32,
multiplied by ``a_scale * b_scale / y_scale`` (float32), rounded half to even, offset by the
output zero point and clipped to the output type.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, OpKernel

from ._util import constant
from .quantize import F32, F64, int_range, saturate_int

#: Largest integers float32 and float64 hold exactly (every smaller one too).
EXACT32 = 2**24
EXACT64 = 2**53
#: The run-time check's bound: a float32 estimate within K * 2**-24 of the true bound.
CHECK_LIMIT = 0.99 * EXACT32
CHECK_MAX_K = 2**13
#: Rows per block when a product is split over intra-op threads (shapes alone decide).
ROW_BLOCK = 64
PARALLEL_THRESHOLD = 1 << 21
INT8_TYPES = (np.dtype(np.int8), np.dtype(np.uint8))


def value_bound(dtype: np.dtype, zero: np.ndarray | None) -> int:
    """Largest |v - zero| over the type's values, for a known zero point (else any in range)."""
    lo, hi = int_range(dtype)
    if zero is None:
        return hi - lo
    z = np.asarray(zero, dtype=np.int64)
    return int(max(hi - z.min(), z.max() - lo)) if z.size else hi - lo


def product_type(bound: int, k: int, b_known: bool) -> str:
    """The compute type for sums bounded by ``bound``: f4, checked (float32 after a run-time
    check, else float64), f8 or i8."""
    if bound < EXACT32:
        return "f4"
    if b_known and k < CHECK_MAX_K:
        return "checked"
    return "f8" if bound < EXACT64 else "i8"


def matmul_shapes(
    kernel: OpKernel, a: Sequence[int], b: Sequence[int]
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], list[int]]:
    """(A as 2+-D, B as 2+-D, the full output, the output after 1-D squeezes): numpy's rules."""
    if len(a) == 0 or len(b) == 0:
        raise kernel.fail("the operands must not be scalars", "invalid_input")
    a2 = (1, *a) if len(a) == 1 else tuple(a)
    b2 = (*b, 1) if len(b) == 1 else tuple(b)
    if a2[-1] != b2[-2]:
        raise kernel.fail(
            f"inner dimensions differ: A is {list(a)}, B is {list(b)}", "invalid_input"
        )
    try:
        batch = np.broadcast_shapes(a2[:-2], b2[:-2])
    except ValueError as exc:
        raise kernel.fail(f"batch dims of {list(a)} and {list(b)} differ", "invalid_input") from exc
    full = (*batch, a2[-2], b2[-1])
    out = list(full)
    if len(b) == 1:
        out.pop(-1)
    if len(a) == 1:
        out.pop(-1 if len(b) == 1 else -2)
    return a2, b2, full, out


def row_param(p: np.ndarray, a_shape: Sequence[int]) -> np.ndarray:
    """A's scale or zero point broadcasting against A: a 1-D per-row [M] becomes (M, 1)."""
    p = np.asarray(p)
    if p.ndim == 1 and p.size > 1 and len(a_shape) >= 2 and p.size == a_shape[-2]:
        return p.reshape(-1, 1)
    return p


@dataclasses.dataclass(frozen=True)
class _Plan:
    how: str  # product_type
    a_shape: tuple[int, ...]
    b_shape: tuple[int, ...]
    full: tuple[int, ...]
    flat: bool  # B is 2-D: A's batch folds into rows
    blocks: int
    a_zero: np.ndarray | None  # in the compute type, broadcasting against A (None: absent)
    b_zero: np.ndarray | None  # when B is not constant
    b_const: np.ndarray | None  # B - b_zero in the compute type, when constant
    b_rows: np.ndarray | None  # checked: max_j |B - b_zero| per k, float32
    af: int  # scratch: A - a_zero
    bf: int | None  # scratch: a run-time B - b_zero
    acc: int  # scratch: the product in the compute type
    absa: int | None  # checked: |A - a_zero|
    est: int | None  # checked: the per-row bound estimates, then their maximum
    azs: int | None = None  # scratch: a run-time scalar A zero point in the compute type
    scales: Any = None  # QLinearMatMul: the requantization plan


class _IntegerProduct(OpKernel):
    """The exact integer product (A - a_zero) @ (B - b_zero) of both kernels."""

    supports_exact = True
    #: input indices of A, A's zero point, B, B's zero point
    A, AZ, B, BZ = 0, 2, 1, 3

    def _zero(self, ctx: InferContext, i: int) -> np.ndarray | None:
        return ctx.known_value(i) if ctx.has_input(i) else None

    def prepare_product(self, ctx: InferContext) -> _Plan:
        a_t, b_t = ctx.dtype(self.A), ctx.dtype(self.B)
        if a_t not in INT8_TYPES or b_t not in INT8_TYPES:
            raise self.fail(f"A and B must be int8 or uint8, got {a_t} and {b_t}", "unsupported")
        for i, t in ((self.AZ, a_t), (self.BZ, b_t)):
            if ctx.has_input(i) and ctx.dtype(i) != t:
                raise self.fail(f"input {i} (a zero point) must be {t}, got {ctx.dtype(i)}")
        a2, b2, full, _ = matmul_shapes(self, ctx.shape(self.A), ctx.shape(self.B))
        k = a2[-1]
        az, bz, b = self._zero(ctx, self.AZ), self._zero(ctx, self.BZ), ctx.known_value(self.B)
        b_known = b is not None and (bz is not None or not ctx.has_input(self.BZ))
        a_bound = value_bound(a_t, az if az is not None or not ctx.has_input(self.AZ) else None)
        b_rows = None
        if b_known:
            bf64 = b.reshape(b2).astype(F64) - (0 if bz is None else np.asarray(bz, F64))
            absb = np.abs(bf64)
            b_rows = absb.max(axis=tuple(i for i in range(bf64.ndim) if i != bf64.ndim - 2))
            # a column's sum of |b| bounds its products with any A row of values <= a_bound
            bound = a_bound * int(absb.sum(axis=-2).max()) if absb.size else 0
        else:
            b_bound = value_bound(b_t, bz if bz is not None or not ctx.has_input(self.BZ) else None)
            bound = k * a_bound * b_bound
        how = product_type(bound, k, b_known)
        ct = {"f4": F32, "checked": F32, "f8": F64, "i8": np.dtype(np.int64)}[how]
        b_const = b_zero = None
        if b_known:
            b_const = np.ascontiguousarray(bf64, dtype=ct)
            b_const.flags.writeable = False
        elif bz is not None:
            b_zero = constant_array(bz, ct)
        a_zero = constant_array(row_param(az, a2), ct) if az is not None else None
        flat = len(b2) == 2
        rows = int(np.prod(a2[:-1], dtype=np.int64)) if flat else full[-2]
        work = int(np.prod(full, dtype=np.int64)) * max(k, 1)
        blocks = -(-rows // ROW_BLOCK) if flat and work >= PARALLEL_THRESHOLD else 1
        checked = how == "checked"
        azs = None
        if az is None and ctx.has_input(self.AZ) and math.prod(ctx.shape(self.AZ)) == 1:
            azs = ctx.add_scratch(ct, ())
        return _Plan(
            how, a2, b2, full, flat, max(blocks, 1), a_zero, b_zero, b_const,
            b_rows.astype(F32) if checked else None,
            ctx.add_scratch(ct, a2),
            None if b_known else ctx.add_scratch(ct, b2),
            ctx.add_scratch(ct, full),
            ctx.add_scratch(F32, a2) if checked else None,
            ctx.add_scratch(F32, (rows_of(a2) + 1,)) if checked else None,
            azs,
        )  # fmt: skip

    def product(self, ctx: KernelContext, p: _Plan, inputs: Sequence[Any]) -> np.ndarray:
        """The exact product this run, in the compute type (float64 after a failed check)."""
        af = ctx.scratch[p.af]
        a = inputs[self.A].reshape(p.a_shape)
        a_zero = p.a_zero
        if a_zero is None and _given(inputs, self.AZ):
            if p.azs is not None:  # DynamicQuantizeLinear's zero point: into a 0-d scratch
                a_zero = ctx.scratch[p.azs]
                np.copyto(a_zero, inputs[self.AZ].reshape(()), casting="unsafe")
            else:
                a_zero = row_param(inputs[self.AZ], p.a_shape).astype(af.dtype)
        if a_zero is not None:
            np.subtract(a, a_zero, out=af, casting="unsafe")
        else:
            np.copyto(af, a, casting="unsafe")
        b = p.b_const
        if b is None:
            b = ctx.scratch[p.bf]
            b_zero = p.b_zero
            if b_zero is None and _given(inputs, self.BZ):
                b_zero = np.asarray(inputs[self.BZ]).astype(b.dtype)
            braw = inputs[self.B].reshape(p.b_shape)
            if b_zero is not None:
                np.subtract(braw, b_zero, out=b, casting="unsafe")
            else:
                np.copyto(b, braw, casting="unsafe")
        acc = ctx.scratch[p.acc]
        if p.how == "checked":
            absa, est = ctx.scratch[p.absa], ctx.scratch[p.est]
            np.abs(af, out=absa)
            np.matmul(absa, p.b_rows, out=est.reshape(-1)[:-1].reshape(p.a_shape[:-1]))
            top = est[-1:].reshape(())
            np.maximum.reduce(est[:-1], axis=None, out=top)  # no allocation, unlike est.max()
            if est.size > 1 and not top.item() < CHECK_LIMIT:
                # rare: this run's values could round in float32 (allocates float64 copies)
                return np.matmul(af.astype(F64), b.astype(F64))
        _blocked_matmul(ctx, p, af, b, acc)
        return acc


def rows_of(shape: Sequence[int]) -> int:
    """Rows of a matrix stack: the product of every extent but the last."""
    return int(np.prod(shape[:-1], dtype=np.int64))


def _blocked_matmul(ctx: KernelContext, p: _Plan, a: np.ndarray, b: np.ndarray, out: np.ndarray):
    if p.blocks == 1:
        np.matmul(a, b, out=out)
        return
    a_rows = a.reshape(-1, a.shape[-1])
    o_rows = out.reshape(-1, out.shape[-1])

    def block(i: int) -> None:
        r = slice(i * ROW_BLOCK, (i + 1) * ROW_BLOCK)
        np.matmul(a_rows[r], b, out=o_rows[r])

    ctx.parallel_for(p.blocks, block)


def _given(inputs: Sequence[Any], i: int) -> bool:
    return len(inputs) > i and inputs[i] is not None


def constant_array(value: Any, dtype: np.dtype) -> np.ndarray:
    """A read-only copy in ``dtype`` (0-d for one element)."""
    arr = np.asarray(value)
    arr = np.array(arr.reshape(()) if arr.size == 1 and arr.ndim <= 1 else arr, dtype=dtype)
    arr.flags.writeable = False
    return arr


class MatMulInteger(_IntegerProduct):
    """int32 Y = (A - a_zero_point) @ (B - b_zero_point), numpy's matmul shapes."""

    def infer(self, ctx: InferContext) -> None:
        p = self.prepare_product(ctx)
        _, _, _, out = matmul_shapes(self, ctx.shape(0), ctx.shape(1))
        ctx.set_output(0, np.int32, out)
        ctx.prepared = p

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Plan = ctx.prepared
        acc = self.product(ctx, p, inputs)
        np.copyto(outputs[0].reshape(p.full), acc, casting="unsafe")


@dataclasses.dataclass(frozen=True)
class Requantize:
    """y = clip(rint(float32(acc) * multiplier) + zero, type range), onnxruntime's order."""

    multiplier: np.ndarray | None  # float32, when every scale is constant
    zero: np.ndarray | None  # float32, when constant
    lo: np.ndarray
    hi: np.ndarray
    tmp: int | None  # scratch: float32 acc, when the product is not float32


def multiplier(a_scale: Any, b_scale: Any, y_scale: Any) -> np.ndarray:
    """a_scale * b_scale / y_scale as float32 (read-only), each step rounded to the scales'
    type when narrower (float16, bfloat16: QLinearMatMul 21), as onnx's reference does."""
    a, b, y = np.asarray(a_scale), np.asarray(b_scale), np.asarray(y_scale)
    narrow = a.dtype if a.dtype not in (F32, F64) else None
    m = a.astype(F32) * b.astype(F32)
    if narrow is not None:
        m = m.astype(narrow).astype(F32)
    m = np.asarray(np.divide(m, y.astype(F32)))
    m = np.array(m.astype(narrow) if narrow is not None else m, dtype=F32)
    m.flags.writeable = False
    return m


def requantize(
    acc: np.ndarray,
    mult: np.ndarray,
    zero: np.ndarray | None,
    r: Requantize,
    tmp: np.ndarray | None,
    y: np.ndarray,
) -> None:
    """Write the requantized ``acc`` (exact integers, any float type) into ``y``."""
    if acc.dtype != F32:
        np.copyto(tmp, acc, casting="unsafe")
        acc = tmp
    np.multiply(acc, mult, out=acc)
    np.rint(acc, out=acc)
    if zero is not None:
        np.add(acc, zero, out=acc)
    saturate_int(acc, r.lo, r.hi)
    np.copyto(y, acc, casting="unsafe")


def requantize_plan(
    ctx: InferContext,
    out_type: np.dtype,
    mult: np.ndarray | None,
    zero: Any,
    acc_f32: bool,
    shape: Sequence[int],
) -> Requantize:
    """The requantization of a product of ``shape``; a float32 scratch unless ``acc_f32``."""
    lo, hi = int_range(out_type)
    z = constant_array(zero, F32) if zero is not None else None
    tmp = None if acc_f32 else ctx.add_scratch(F32, shape)
    return Requantize(mult, z, constant(F32, lo), constant(F32, hi), tmp)


class QLinearMatMul(_IntegerProduct):
    """Quantized matmul: inputs a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale,
    y_zero_point; scales per tensor, per row of A or per column of B."""

    A, AZ, B, BZ = 0, 2, 3, 5

    def infer(self, ctx: InferContext) -> None:
        p = self.prepare_product(ctx)
        out_type = ctx.dtype(7)
        if out_type not in INT8_TYPES:
            raise self.fail(f"y must be int8 or uint8, got {out_type}", "unsupported")
        _, _, _, out = matmul_shapes(self, ctx.shape(0), ctx.shape(3))
        ctx.set_output(0, out_type, out)
        scales = [ctx.known_value(i) for i in (1, 4, 6)]
        mult = None
        if all(s is not None for s in scales):
            mult = multiplier(row_param(scales[0], p.a_shape), scales[1], scales[2])
        r = requantize_plan(
            ctx, out_type, mult, ctx.known_value(7), p.how in ("f4", "checked"), p.full
        )
        ctx.prepared = dataclasses.replace(p, scales=r)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Plan = ctx.prepared
        r: Requantize = p.scales
        acc = self.product(ctx, p, inputs)
        mult = r.multiplier
        if mult is None:
            mult = multiplier(row_param(inputs[1], p.a_shape), inputs[4], inputs[6])
        zero = r.zero if r.zero is not None else constant_array(inputs[7], F32)
        tmp = ctx.scratch[r.tmp] if r.tmp is not None else None
        if acc.dtype == F64 and tmp is None:  # a failed check: float64 this run
            tmp = np.empty(acc.shape, F32)
        with np.errstate(all="ignore"):
            requantize(acc, mult, zero, r, tmp, outputs[0].reshape(p.full))
