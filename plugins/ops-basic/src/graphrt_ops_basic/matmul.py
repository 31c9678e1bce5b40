"""Matrix products (MatMul, Gemm): the pattern for kernels with a prepare step.

``infer`` does the per-plan work once (output shape, a contiguous copy of a constant weight,
beta*C folded, how the rows are split) and hands it to ``run`` as ``ctx.prepared``.

Fast mode uses numpy's matmul (BLAS, kept at one thread by the session) on row blocks whose
size depends on the shapes only, so the thread count never changes which block computes what.
Exact mode uses :func:`exact_matmul`: the canonical order of docs/exact-mode.md.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, OpKernel

from ._util import needs_nan_rewrite, rewrite_nan, same_types

#: Rows per block when a product is split over intra-op threads.
ROW_BLOCK = 64
#: Columns per block when a fast-mode product with too few rows for row blocks is split: a
#: batch-1 classifier layer is one matrix-vector product that reads the whole weight from
#: memory (light_bvlc_alexnet's 9216 x 4096: 4.1 ms on one thread, 2.9-3.0 in two halves).
COL_BLOCK = 512
#: Multiply-adds from which such a product is split by columns: its weight (6 MiB and more for
#: one row) comes from memory, and two threads read it faster than one (2 threads, weights out
#: of cache: light_resnet50's 2048 x 1000 head 276 -> 238 us, 4096 x 1000 540 -> 325; a 1024 x
#: 1000 one, 1M, lost: 164 -> 176).
COL_SPLIT_THRESHOLD = 3 << 19
#: Below this many multiply-adds a product runs as one block (threads cost more than they save).
PARALLEL_THRESHOLD = 1 << 21
EXACT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
#: Fast mode keeps a constant transB weight as given below this many rows of A (the bits then
#: depend on the row count, an input shape, as BLAS's own kernel choice does anyway).
GEMV_ROWS = 8


def exact_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray, tmp: np.ndarray) -> None:
    """out = a @ b in the canonical order: out[..i, j] = (((p0 + p1) + p2) + ...) + p(K-1).

    Each product p_k = a[.., i, k] * b[.., k, j] is rounded to the element type, then added to
    the running sum in ascending k, one rounded add at a time.  Multiplies and adds are separate
    numpy ufunc calls, so no fused multiply-add can occur.  K = 0 gives +0.  Vectorised across
    every output element (batch, i, j), sequential over k.  ``tmp`` has ``out``'s shape.
    """
    k_dim = a.shape[-1]
    if k_dim == 0:
        out.fill(0)
        return
    if out.dtype.kind in "iub":  # wrap-around integer arithmetic is exact in any order
        np.matmul(a, b, out=out)
        return
    np.multiply(a[..., :, 0:1], b[..., 0:1, :], out=out)
    for k in range(1, k_dim):
        np.multiply(a[..., :, k : k + 1], b[..., k : k + 1, :], out=tmp)
        np.add(out, tmp, out=out)


@dataclasses.dataclass(frozen=True)
class _Prepared:
    a_shape: tuple[int, ...]  # A as the product reads it (rank >= 2)
    b_shape: tuple[int, ...]
    out_shape: tuple[int, ...]  # output before 1-D squeezes, rank >= 2
    b_const: np.ndarray | None  # a constant B: a contiguous copy, or (few rows) B.T's view
    c_scaled: np.ndarray | None  # Gemm: beta * C, folded once when C is constant
    blocks: int  # row blocks, or column blocks with by_columns (1 = one call)
    nan_mask: int | None  # scratch index of the exact-mode NaN mask
    tmp: int | None  # scratch index of the exact product's temporary
    alpha: np.ndarray | None = None  # Gemm: alpha as a 0-d array (a scalar would allocate)
    epilogue: Any = None  # what a fused kernel applies to Y after the product (fused.py)
    b_wide: int | None = None  # scratch index: a half-stored b_const widened per run
    by_columns: bool = False  # blocks of COL_BLOCK output columns (fast mode, few rows)


def _widen_b(ctx: InferContext, p: _Prepared) -> _Prepared:
    """A half-stored constant B (weight_storage) gets a float32 scratch it is widened into."""
    if p.b_const is None or p.b_const.dtype == ctx.dtype(0):
        return p
    return dataclasses.replace(p, b_wide=ctx.add_scratch(ctx.dtype(0), p.b_const.shape))


def _b_of(ctx: KernelContext, p: _Prepared) -> np.ndarray:
    """The constant B as the product reads it: widened into its scratch when half-stored."""
    if p.b_wide is None:
        return p.b_const
    wide = ctx.scratch[p.b_wide]
    np.copyto(wide, p.b_const)
    return wide


class MatMul(OpKernel):
    """numpy matmul semantics: 1-D operands are promoted then squeezed, batch dims broadcast."""

    supports_exact = True
    #: B may be a float16/bfloat16 weight typed float32 (docs/fp16.md): it is widened
    #: (exactly) into plan scratch per run, so the plan keeps no float32 copy of it.
    half_weight_inputs = (1,)

    def infer(self, ctx: InferContext) -> None:
        a, b = ctx.shape(0), ctx.shape(1)
        same_types(self, ctx, 2)
        if len(a) == 0 or len(b) == 0:
            raise self.fail("MatMul does not take scalars", "invalid_input")
        a2 = (1,) + a if len(a) == 1 else a
        b2 = b + (1,) if len(b) == 1 else b
        if a2[-1] != b2[-2]:
            raise self.fail(
                f"inner dimensions differ: A is {list(a)}, B is {list(b)}", "invalid_input"
            )
        try:
            batch = np.broadcast_shapes(a2[:-2], b2[:-2])
        except ValueError as exc:
            raise self.fail(
                f"batch dims of {list(a)} and {list(b)} cannot broadcast", "invalid_input"
            ) from exc
        full = (*batch, a2[-2], b2[-1])
        out = list(full)
        if len(b) == 1:
            out.pop(-1)
        if len(a) == 1:
            out.pop(-1 if len(b) == 1 else -2)
        ctx.set_output(0, ctx.dtype(0), out)
        b_value = ctx.known_value(1)
        b_const = np.ascontiguousarray(b_value.reshape(b2)) if b_value is not None else None
        ctx.prepared = _widen_b(ctx, _prepare(ctx, a2, b2, full, b_const, None, a2[-1]))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Prepared = ctx.prepared
        a = inputs[0].reshape(p.a_shape)
        b = _b_of(ctx, p) if p.b_const is not None else inputs[1].reshape(p.b_shape)
        _product(ctx, p, a, b, outputs[0].reshape(p.out_shape))


class Gemm(OpKernel):
    """Y = alpha * A' @ B' + beta * C: the epilogue is separate multiplies and an add."""

    supports_exact = True
    half_weight_inputs = (1,)  # as MatMul's B

    def infer(self, ctx: InferContext) -> None:
        a, b = ctx.shape(0), ctx.shape(1)
        same_types(self, ctx, 3)
        if len(a) != 2 or len(b) != 2:
            raise self.fail(
                f"A and B must be matrices, got {list(a)} and {list(b)}", "invalid_input"
            )
        ta, tb = self.node.attr("transA", 0), self.node.attr("transB", 0)
        m, k = (a[1], a[0]) if ta else a
        k2, n = (b[1], b[0]) if tb else b
        if k != k2:
            raise self.fail(f"inner dimensions differ: {k} and {k2}", "invalid_input")
        ctx.set_output(0, ctx.dtype(0), (m, n))
        if ctx.has_input(2):
            c_shape = ctx.shape(2)
            if self.node.opset < 7 and not self.node.attr("broadcast", 0) and c_shape != (m, n):
                raise self.fail(f"C must be {[m, n]} without broadcast, got {list(c_shape)}")
            try:
                np.broadcast_shapes(c_shape, (m, n))
            except ValueError as exc:
                raise self.fail(
                    f"C of shape {list(c_shape)} does not broadcast to {[m, n]}", "invalid_input"
                ) from exc
        b_value = ctx.known_value(1)
        b_const = None
        if b_value is not None and tb and m < GEMV_ROWS and not ctx.exact:
            # a classifier head's few rows: BLAS's matrix-vector kernel reads a transposed
            # weight row by row (1 x 2048 @ 2048 x 10: 1.6 us against 2.6 for the copy)
            b_const = np.ascontiguousarray(b_value).T
        elif b_value is not None:
            b_const = np.ascontiguousarray(b_value.T if tb else b_value)
        c_scaled = None
        c_value = ctx.known_value(2) if ctx.has_input(2) else None
        if c_value is not None:
            beta = ctx.dtype(0).type(self.node.attr("beta", 1.0))
            c_scaled = c_value if beta == 1 else np.multiply(c_value, beta).astype(ctx.dtype(0))
        prepared = _prepare(ctx, (m, k), (k, n), (m, n), b_const, c_scaled, k)
        alpha = ctx.dtype(0).type(self.node.attr("alpha", 1.0))
        if alpha != 1:
            prepared = dataclasses.replace(prepared, alpha=np.array(alpha, dtype=ctx.dtype(0)))
        ctx.prepared = _widen_b(ctx, prepared)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Prepared = ctx.prepared
        a, b = self._operands(p, inputs)
        if p.b_wide is not None:
            b = _b_of(ctx, p)
        y = outputs[0]
        _product(ctx, p, a, b, y, finish=False)
        if p.alpha is not None:
            np.multiply(y, p.alpha, out=y)
        if len(inputs) > 2 and inputs[2] is not None:
            c = p.c_scaled
            if c is None:
                beta = y.dtype.type(self.node.attr("beta", 1.0))
                c = inputs[2] if beta == 1 else np.multiply(inputs[2], beta)
            if c.dtype != y.dtype:
                c = c.astype(y.dtype)
            np.add(y, c, out=y)
        if p.nan_mask is not None:
            rewrite_nan(y, ctx.scratch[p.nan_mask])

    def _operands(self, p: _Prepared, inputs: Sequence[Any]) -> tuple[Any, Any]:
        """A and B as the product reads them (transposed views; B's prepared constant)."""
        a = inputs[0].T if self.node.attr("transA", 0) else inputs[0]
        if p.b_const is not None:
            return a, p.b_const
        return a, inputs[1].T if self.node.attr("transB", 0) else inputs[1]

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        return self.product_call(ctx, inputs, outputs)

    def product_call(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], Any]:
        """:meth:`run`'s numpy calls bound once per run state (the same calls: the same bits)
        for a one-block fast-mode product, without ``run``'s attribute reads and branches per
        call; anything else is ``run`` itself.  Fused kernels bind their product through it."""
        p: _Prepared = ctx.prepared
        whole = functools.partial(Gemm.run, self, ctx, inputs, outputs)
        if ctx.exact or p.blocks != 1 or p.alpha is not None or p.nan_mask is not None:
            return whole
        if p.b_wide is not None:  # widened per run: run's calls
            return whole
        a, b = self._operands(p, inputs)
        y = outputs[0]
        if len(inputs) <= 2 or inputs[2] is None:
            return functools.partial(np.matmul, a, b, y)
        c = p.c_scaled
        if c is None:
            if y.dtype.type(self.node.attr("beta", 1.0)) != 1:
                return whole  # beta * C computed per run, as run does
            c = inputs[2]
        if c.dtype != y.dtype:
            return whole
        return functools.partial(_matmul_add, a, b, y, c)


def _matmul_add(a: np.ndarray, b: np.ndarray, y: np.ndarray, c: np.ndarray) -> None:
    np.matmul(a, b, y)
    np.add(y, c, y)


def _prepare(
    ctx: InferContext,
    a_shape: tuple[int, ...],
    b_shape: tuple[int, ...],
    out_shape: tuple[int, ...],
    b_const: np.ndarray | None,
    c_scaled: np.ndarray | None,
    k: int,
) -> _Prepared:
    rows = out_shape[-2]
    work = int(np.prod(out_shape, dtype=np.int64)) * max(k, 1)
    blocks, by_columns = 1, False
    if work >= PARALLEL_THRESHOLD and len(out_shape) == 2 and rows > ROW_BLOCK:
        blocks = -(-rows // ROW_BLOCK)
    elif work >= COL_SPLIT_THRESHOLD and len(out_shape) == 2 and rows <= ROW_BLOCK:
        if not ctx.exact and out_shape[-1] > COL_BLOCK:
            blocks, by_columns = -(-out_shape[-1] // COL_BLOCK), True
    dtype = ctx.dtype(0)
    nan_mask = tmp = None
    if ctx.exact:
        if dtype in EXACT_DTYPES:  # integer products are exact by construction
            tmp = ctx.add_scratch(dtype, out_shape)
            ctx.prepared = None
            if needs_nan_rewrite(ctx, dtype, out_shape):
                nan_mask = ctx.prepared
    return _Prepared(
        a_shape, b_shape, out_shape, b_const, c_scaled, blocks, nan_mask, tmp, by_columns=by_columns
    )


def _product(
    ctx: KernelContext,
    p: _Prepared,
    a: np.ndarray,
    b: np.ndarray,
    out: np.ndarray,
    finish: bool = True,
) -> None:
    if ctx.exact and p.tmp is not None:
        tmp = ctx.scratch[p.tmp]
        if p.blocks == 1:
            exact_matmul(a, b, out, tmp)
        else:

            def block(i: int) -> None:
                r = slice(i * ROW_BLOCK, (i + 1) * ROW_BLOCK)
                exact_matmul(a[r], b, out[r], tmp[r])

            ctx.parallel_for(p.blocks, block)
        if finish and p.nan_mask is not None:
            rewrite_nan(out, ctx.scratch[p.nan_mask])
        return
    if p.blocks == 1:
        np.matmul(a, b, out=out)
        return
    if p.by_columns:  # the blocks depend on the shapes only: so do the bits

        def column_block(i: int) -> None:
            c = slice(i * COL_BLOCK, (i + 1) * COL_BLOCK)
            np.matmul(a, b[:, c], out=out[:, c])

        ctx.parallel_for(p.blocks, column_block)
        return

    def fast_block(i: int) -> None:
        r = slice(i * ROW_BLOCK, (i + 1) * ROW_BLOCK)
        np.matmul(a[r], b, out=out[r])

    ctx.parallel_for(p.blocks, fast_block)
