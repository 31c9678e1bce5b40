"""RotaryEmbedding (opset 23): rotary positional embeddings (RoPE).

The first ``rotary_embedding_dim`` values of each head (all of them by default) form pairs
``(x1, x2)``, either the two halves of that span or, ``interleaved``, its even and odd values;
each pair turns by its position's angle:

    real = cos * x1 - sin * x2        imag = sin * x1 + cos * x2

cos and sin come from the caches, indexed by ``position_ids`` (caches of shape
(max_position + 1, rotary_dim / 2)) or, without them, already per token (batch, seq,
rotary_dim / 2).  The rest of each head is copied.  Inputs are 4-D (batch, heads, seq, head)
or 3-D (batch, seq, heads * head) with ``num_heads``; both are rotated as views, no transpose.

The rotation runs as ``y = x * C + swap(x) * S`` over the rotated span at once, with tables C
(each pair's cos at both its places) and S (-sin at x1's place, sin at x2's) per token, and
``swap(x)`` the pair partners exchanged (one copy of the halves swapped, or two products of
the even and odd places): full-width products and one sum instead of six half-width calls
(a half-split pair's halves are short runs numpy cannot merge into long loops).  The bits are
the formula's: ``a - b`` is ``a + (-b)`` and sums and products commute in IEEE arithmetic.
Interleaved float32/float64 pairs in fast mode are complex numbers instead: one complex
product by ``cos + i sin`` (numpy's complex loop may fuse a multiply-add, so exact mode keeps
the real form).  The tables are built once per plan from constant caches (gathered by
position per run), else per run from the caches.

Fast mode computes in X's type, as the spec's algorithm does (numpy computes float16 and
bfloat16 operations in float32 and rounds each once).  Exact mode (docs/exact-mode.md): every
product and sum one IEEE operation in float32/float64, in the formula's order; float16 and
bfloat16 are converted to float32, computed there and rounded once to X's type (so no
result depends on whether a machine has native half-precision arithmetic); NaN results are
canonical.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._util import _CANONICAL_NAN, is_float, rewrite_nan

COMPLEX = {
    np.dtype(np.float32): np.dtype(np.complex64),
    np.dtype(np.float64): np.dtype(np.complex128),
}


def tables(
    cos: np.ndarray, sin: np.ndarray, interleaved: bool, c: np.ndarray, s: np.ndarray | None
) -> None:
    """C and S of the module docstring from cos and sin (..., half) into c and s (..., 2 half);
    or, ``s`` None, the complex table cos + i sin into c (..., half)."""
    if s is None:
        np.copyto(c.real, cos)
        np.copyto(c.imag, sin)
        return
    half = cos.shape[-1]
    if interleaved:
        c1, c2, s1, s2 = c[..., 0::2], c[..., 1::2], s[..., 0::2], s[..., 1::2]
    else:
        c1, c2, s1, s2 = c[..., :half], c[..., half:], s[..., :half], s[..., half:]
    np.copyto(c1, cos, casting="unsafe")  # copies cast (a mixed-type ufunc would buffer)
    np.copyto(c2, cos, casting="unsafe")
    np.copyto(s1, sin, casting="unsafe")
    np.negative(s1, out=s1)
    np.copyto(s2, sin, casting="unsafe")


@dataclasses.dataclass(frozen=True)
class _Plan:
    view: tuple[int, int, int, int]  # X as (batch, seq, heads, head) or (batch, heads, seq, head)
    seq_axis: int  # 1 for 3-D inputs, 2 for 4-D
    rot: int  # rotary_embedding_dim
    complex: np.dtype | None  # interleaved pairs as complex numbers (fast mode)
    fixed: tuple[np.ndarray, np.ndarray | None] | None  # tables built from constant caches
    gathered: tuple[int, int] | None  # scratch (batch, seq, rot/2): cos and sin by position
    table: tuple[int, int | None]  # scratch (batch, seq, rot): C and S; complex: (.., rot/2)
    tmp: int | None  # scratch: the view with rot in the last axis
    positions: int  # cache rows (for the range check of position_ids)
    extremes: tuple[int, int] | None  # scratch: 0-d int64, the smallest and largest position
    wide: tuple[int, int] | None  # exact float16/bfloat16: X and Y in float32 (view shape)
    nan: int | None  # exact mode: mask of the canonical-NaN rewrite


class RotaryEmbedding(OpKernel):
    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.interleaved = bool(node.attr("interleaved", 0))
        self.rot_dim = int(node.attr("rotary_embedding_dim", 0))
        self.heads = node.attr("num_heads")
        if self.rot_dim < 0:
            raise self.fail(f"rotary_embedding_dim must be >= 0, got {self.rot_dim}")
        if self.heads is not None and self.heads <= 0:
            raise self.fail(f"num_heads must be positive, got {self.heads}")

    def infer(self, ctx: InferContext) -> None:
        x, dtype = ctx.shape(0), ctx.dtype(0)
        if not is_float(dtype):
            raise self.fail(f"X must be a float tensor, got {dtype}", "invalid_input")
        if ctx.dtype(1) != dtype or ctx.dtype(2) != dtype:
            raise self.fail("cos_cache and sin_cache must have X's type", "invalid_input")
        if len(x) == 4:
            b, h, s, d = x
            view, seq_axis = tuple(x), 2
        elif len(x) == 3:
            if self.heads is None:
                raise self.fail("a 3-D input needs the num_heads attribute")
            b, s, hidden = x
            h = self.heads
            if hidden % h:
                raise self.fail(
                    f"hidden size {hidden} is not a multiple of num_heads {h}", "invalid_input"
                )
            d = hidden // h
            view, seq_axis = (b, s, h, d), 1
        else:
            raise self.fail(f"X must be 3-D or 4-D, got {list(x)}", "invalid_input")
        rot = self.rot_dim or d
        if rot > d or rot % 2:
            raise self.fail(
                f"the rotary dimension {rot} must be even and at most the head size {d}",
                "invalid_input",
            )
        half = rot // 2
        cos, sin = ctx.shape(1), ctx.shape(2)
        if cos != sin:
            raise self.fail(
                f"cos_cache {list(cos)} and sin_cache {list(sin)} differ", "invalid_input"
            )
        by_position = ctx.has_input(3)
        positions = 0
        if by_position:
            pos = ctx.shape(3)
            if ctx.dtype(3) != np.int64 or pos != (b, s):
                raise self.fail(
                    f"position_ids must be int64 [{b}, {s}], got {list(pos)}", "invalid_input"
                )
            if len(cos) != 2 or cos[1] != half:
                raise self.fail(
                    f"the caches must be [positions, {half}], got {list(cos)}", "invalid_input"
                )
            positions = cos[0]
        elif cos != (b, s, half):
            raise self.fail(
                f"without position_ids the caches must be [{b}, {s}, {half}], got {list(cos)}",
                "invalid_input",
            )
        ctx.set_output(0, dtype, x)
        cplx = COMPLEX.get(dtype) if self.interleaved and not ctx.exact else None
        wide = None
        ct = dtype  # the type the rotation is computed in
        if ctx.exact and dtype.itemsize < 4:
            ct = np.dtype(np.float32)
            wide = (ctx.add_scratch(ct, view), ctx.add_scratch(ct, view))
        fixed = gathered = None
        known = ctx.known_value(1), ctx.known_value(2)
        if known[0] is not None and known[1] is not None:
            if cplx is not None:
                fixed = (np.empty(cos, cplx), None)
            else:
                fixed = (np.empty(cos[:-1] + (rot,), ct), np.empty(cos[:-1] + (rot,), ct))
            tables(known[0], known[1], self.interleaved, *fixed)
            for t in fixed:
                if t is not None:
                    t.flags.writeable = False
        elif by_position:
            gathered = (ctx.add_scratch(dtype, (b, s, half)), ctx.add_scratch(dtype, (b, s, half)))
        if cplx is not None:
            table = (ctx.add_scratch(cplx, (b, s, half)), None)
            tmp = None
        else:
            table = (ctx.add_scratch(ct, (b, s, rot)), ctx.add_scratch(ct, (b, s, rot)))
            tmp = ctx.add_scratch(ct, view[:3] + (rot,))
        nan = None
        if ctx.exact and dtype in _CANONICAL_NAN:
            nan = ctx.add_scratch(np.bool_, x)
        extremes = None
        if by_position:
            extremes = (ctx.add_scratch(np.int64, ()), ctx.add_scratch(np.int64, ()))
        ctx.prepared = _Plan(
            view, seq_axis, rot, cplx, fixed, gathered, table, tmp, positions, extremes, wide, nan
        )

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Plan = ctx.prepared
        sc = ctx.scratch
        x, y = inputs[0].reshape(p.view), outputs[0].reshape(p.view)
        final = y
        if p.wide is not None:  # exact float16/bfloat16: computed in float32, rounded once
            x, y = sc[p.wide[0]], sc[p.wide[1]]
            np.copyto(x, inputs[0].reshape(p.view), casting="unsafe")
        c_tab = sc[p.table[0]]
        s_tab = sc[p.table[1]] if p.table[1] is not None else None
        pos = inputs[3] if len(inputs) > 3 else None
        if pos is not None and pos.size:  # (pos.min() would allocate its result)
            lo, hi = sc[p.extremes[0]], sc[p.extremes[1]]
            np.minimum.reduce(pos, axis=None, out=lo)
            np.maximum.reduce(pos, axis=None, out=hi)
            if int(lo) < 0 or int(hi) >= p.positions:
                raise self.fail(
                    f"position_ids must lie in [0, {p.positions}), got values from {int(lo)} "
                    f"to {int(hi)}",
                    "invalid_input",
                )
        if p.fixed is not None:
            if pos is None:
                c_tab, s_tab = p.fixed
            else:  # in range: clip never acts (and, unlike "raise", does not buffer)
                for src, dst in zip(p.fixed, (c_tab, s_tab)):
                    if src is not None:
                        np.take(src, pos, axis=0, out=dst, mode="clip")
        else:
            cos, sin = inputs[1], inputs[2]
            if pos is not None:
                cos, sin = sc[p.gathered[0]], sc[p.gathered[1]]
                np.take(inputs[1], pos, axis=0, out=cos, mode="clip")
                np.take(inputs[2], pos, axis=0, out=sin, mode="clip")
            tables(cos, sin, self.interleaved, c_tab, s_tab)
        axis = 1 if p.seq_axis == 2 else 2  # the tables broadcast over the heads axis
        c_tab = np.expand_dims(c_tab, axis)
        rot, half = p.rot, p.rot // 2
        xr, yr = x[..., :rot], y[..., :rot]
        if p.complex is not None:
            np.multiply(xr.view(p.complex), c_tab, out=yr.view(p.complex))
        else:
            s_tab = np.expand_dims(s_tab, axis)
            tmp = sc[p.tmp]
            if self.interleaved:  # tmp[even] = x[odd] * S[even], tmp[odd] = x[even] * S[odd]
                np.multiply(xr[..., 1::2], s_tab[..., 0::2], out=tmp[..., 0::2])
                np.multiply(xr[..., 0::2], s_tab[..., 1::2], out=tmp[..., 1::2])
            else:  # the halves swapped, then one product
                halves = xr.shape[:-1] + (2, half)
                np.copyto(tmp.reshape(halves), xr.reshape(halves)[..., ::-1, :])
                np.multiply(tmp, s_tab, out=tmp)
            np.multiply(xr, c_tab, out=yr)
            np.add(yr, tmp, out=yr)
        if rot < p.view[3]:
            np.copyto(y[..., rot:], x[..., rot:])
        if y is not final:
            np.copyto(final, y, casting="unsafe")
        if p.nan is not None:
            rewrite_nan(outputs[0], sc[p.nan])
