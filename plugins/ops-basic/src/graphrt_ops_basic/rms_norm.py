"""RMSNormalization (opset 23): y = x / sqrt(mean(x^2) + epsilon) * scale.

The mean runs over the axes from ``axis`` on, so X is a (rows, n) view and the statistics are
one value per row.  The computation (stage one in the spec's words) runs in float32, or in
float64 for float64 inputs or ``stash_type`` 11 (DOUBLE); float16 and bfloat16 are converted
once and Y is rounded once to scale's type.  Scale broadcasts to the normalized shape.

Fast mode sums each row's squares with one ``einsum`` (no temporary).  Exact mode squares
into scratch and sums each row in ascending element order (``acc = t0; acc += t1; ...``,
vectorised across rows); the rest is one rounded operation per element: the mean is the sum
divided by n, then ``+ epsilon``, ``sqrt`` (IEEE, correctly rounded), ``x / rms`` and
``* scale``.  NaN results are canonical.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel, TensorProto

from ._util import _CANONICAL_NAN, canonical_sum, constant, is_float, normalize_axis, rewrite_nan

#: stash_type values: the float element types (the statistics' type is at least float32).
STASH_TYPES = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16}


@dataclasses.dataclass(frozen=True)
class _Plan:
    rows: int
    n: int
    norm: tuple[int, ...]  # the normalized shape (scale broadcasts to it)
    ct: np.dtype
    values: int | None  # scratch (rows, n) in ct when X is not of the compute type
    quotient: int | None  # scratch (rows, n) in ct for x / rms when Y is not of the compute type
    scale: np.ndarray | int | None  # scale in ct: a constant, a scratch index, or None (as is)
    stats: int  # scratch (rows, 1) in ct
    squares: int | None  # exact mode: (rows, n) squares
    nan: int | None  # exact mode: NaN mask of Y


class RMSNormalization(OpKernel):
    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.eps = float(node.attr("epsilon", 1e-5))
        stash = node.attr("stash_type", 1)
        if stash not in STASH_TYPES:
            raise self.fail(f"stash_type must be a float element type, got {stash}")
        self.wide = stash == TensorProto.DOUBLE

    def infer(self, ctx: InferContext) -> None:
        x, dtype = ctx.shape(0), ctx.dtype(0)
        if not is_float(dtype) or not is_float(ctx.dtype(1)):
            raise self.fail(
                f"X and scale must be float tensors, got {dtype} and {ctx.dtype(1)}",
                "invalid_input",
            )
        if not x:
            raise self.fail("X must have at least one dimension", "invalid_input")
        try:
            axis = normalize_axis(self.node.attr("axis", -1), len(x))
        except ValueError as exc:
            raise self.fail(str(exc)) from None
        norm = tuple(x[axis:])
        scale = ctx.shape(1)
        try:
            if len(scale) > len(norm) or np.broadcast_shapes(scale, norm) != norm:
                raise ValueError
        except ValueError:
            raise self.fail(
                f"scale of shape {list(scale)} does not broadcast to the normalized shape "
                f"{list(norm)}",
                "invalid_input",
            ) from None
        ctx.set_output(0, ctx.dtype(1), x)
        wide = self.wide or dtype == np.float64
        ct = np.dtype(np.float64 if wide else np.float32)
        rows, n = math.prod(x[:axis]), math.prod(norm)
        nan = None
        if ctx.exact and ctx.dtype(1) in _CANONICAL_NAN:
            nan = ctx.add_scratch(np.bool_, x)
        values = ctx.add_scratch(ct, (rows, n)) if dtype != ct else None
        quotient = values
        if quotient is None and ctx.dtype(1) != ct:
            quotient = ctx.add_scratch(ct, (rows, n))
        scale_ct = None
        if ctx.dtype(1) != ct:
            known = ctx.known_value(1)
            scale_ct = known.astype(ct) if known is not None else ctx.add_scratch(ct, scale)
        ctx.prepared = _Plan(
            rows,
            n,
            norm,
            ct,
            values,
            quotient,
            scale_ct,
            ctx.add_scratch(ct, (rows, 1)),
            ctx.add_scratch(ct, (rows, n)) if ctx.exact else None,
            nan,
        )

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Plan = ctx.prepared
        if p.rows * p.n == 0:
            return
        x = inputs[0].reshape(p.rows, p.n)
        if p.values is not None:
            v = ctx.scratch[p.values]
            np.copyto(v, x, casting="unsafe")
            x = v
        stat = ctx.scratch[p.stats]
        if p.squares is not None:
            sq = ctx.scratch[p.squares]
            np.multiply(x, x, out=sq)
            canonical_sum(sq, 1, stat)
        else:
            np.einsum("ij,ij->i", x, x, out=stat[:, 0])
        np.divide(stat, constant(p.ct, p.n), out=stat)
        np.add(stat, constant(p.ct, self.eps), out=stat)
        np.sqrt(stat, out=stat)
        scale = inputs[1]
        if isinstance(p.scale, int):
            np.copyto(ctx.scratch[p.scale], scale, casting="unsafe")
            scale = ctx.scratch[p.scale]
        elif p.scale is not None:
            scale = p.scale
        y = outputs[0].reshape(p.rows, *p.norm)
        if p.quotient is not None:
            tmp = ctx.scratch[p.quotient]
            np.divide(x, stat, out=tmp)
            np.multiply(tmp.reshape(p.rows, *p.norm), scale, out=y, casting="unsafe")
        else:
            np.divide(x, stat, out=y.reshape(p.rows, p.n))
            np.multiply(y, scale, out=y)
        if p.nan is not None:
            rewrite_nan(outputs[0], ctx.scratch[p.nan])
