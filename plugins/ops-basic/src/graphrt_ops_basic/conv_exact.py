"""Conv in exact mode: every output element summed in the canonical order (docs/exact-mode.md).

For output element y[n, m, o...] of group gi (m in gi's M/group output channels) the terms are

    t(c, tap) = W[m, c, tap] * Xpad[n, gi * C/group + c, o * stride + tap * dilation]

for c = 0 .. C/group - 1 (outer) and the kernel taps in row-major order (inner), padding
included (its value is +0).  They are added in that order, ``acc = t0; acc = acc + t1; ...``,
each product rounded before it is added, then ``y = acc + B[m]`` (when there is a bias).  NaN
results are rewritten to the canonical quiet NaN.

The numpy path runs one multiply into a temporary and one add into the accumulator per
reduction index, each over every output element of an image at once (vectorised across
outputs, never across the reduction); images, cut into runs of output rows when large
(``UNIT_ELEMENTS``), are the units spread over the intra-op threads.
float16 and bfloat16 compute in float32 (X staged into float32) and round once at the end.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext

from ._geometry import Staging, Window, call_all, staging
from ._util import _CANONICAL_NAN, rewrite_nan


@dataclasses.dataclass(frozen=True)
class ExactConvPlan:
    w: Window
    st: Staging
    group: int
    compute: np.dtype
    weight: np.ndarray | None  # (M, C/group * prod(kernel)) in the compute type, when constant
    bias: np.ndarray | None  # (M,) in the compute type, when constant
    buf: int | None  # scratch: X staged (padded, converted)
    acc: int | None  # scratch: Y in the compute type when Y's type differs
    tmp: int  # scratch: one reduction index's products, Y's shape in the compute type
    nan_mask: int | None  # scratch: the canonical-NaN rewrite's mask
    epilogue: Any = None  # what a fused kernel applies to Y after the product (fused.py)


#: Output elements from which an image is cut into several units (runs of output rows) for the
#: intra-op threads; smaller units cost more in numpy call overhead than cache and threads save.
UNIT_ELEMENTS = 1 << 18


def _units(n: int, m: int, out: Sequence[int]) -> list[tuple[slice, ...]]:
    """Index tuples into (N, group, M/group, *out): one image and a run of rows of the first
    output axis each.  The split depends on the shapes only."""
    row = m * math.prod(out[1:])
    rows = max(1, -(-UNIT_ELEMENTS // max(row, 1)))
    every = (slice(None), slice(None))
    return [
        (slice(i, i + 1), *every, slice(lo, min(lo + rows, out[0])))
        for i in range(n)
        for lo in range(0, out[0], rows)
    ]


def prepare(ctx: InferContext, w: Window, group: int, compute: np.dtype) -> ExactConvPlan:
    """The exact plan of a Conv whose shapes ``Conv.infer`` has checked (Y is already set)."""
    x, dtype = ctx.shape(0), ctx.dtype(0)
    n, c, m = x[0], x[1], ctx.shape(1)[0]
    st = staging(w, split=False, copy=compute != dtype)
    out = (n, m, *w.out)
    weight = ctx.known_value(1)
    if weight is not None:
        weight = np.ascontiguousarray(weight.reshape(m, -1), dtype=compute)
    bias = ctx.known_value(2) if ctx.has_input(2) else None
    if bias is not None:
        bias = np.ascontiguousarray(bias.reshape(m), dtype=compute)
    return ExactConvPlan(
        w, st, group, compute, weight, bias,
        ctx.add_scratch(compute, st.shape(n, c)) if st.copy else None,
        ctx.add_scratch(compute, out) if compute != dtype else None,
        ctx.add_scratch(compute, out),
        ctx.add_scratch(np.bool_, out) if dtype in _CANONICAL_NAN else None,
    )  # fmt: skip


def program(
    ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
) -> Callable[[], None]:
    """Every numpy call of one exact run, on views made once."""
    p: ExactConvPlan = ctx.prepared
    x, y = inputs[0], outputs[0]
    n, m = y.shape[:2]
    c, g, rank = x.shape[1], p.group, len(p.w.out)
    cg, mg = c // g, m // g
    calls: list[Callable[[], Any]] = []
    weight = p.weight if p.weight is not None else inputs[1].reshape(m, -1)
    bias = p.bias
    if bias is None and len(inputs) > 2 and inputs[2] is not None:
        bias = inputs[2].reshape(m)
    buf = ctx.scratch[p.buf] if p.buf is not None else None
    if buf is not None:
        calls += p.st.fill_calls(p.w, x, buf, 0)
    src = p.st.source(x, buf)
    acc = y if p.acc is None else ctx.scratch[p.acc]
    tmp = ctx.scratch[p.tmp]
    kprod = math.prod(p.w.kernel)
    # W[gi * mg + j, c, tap] as (1, g, mg, 1...) columns; X's tap views as (g, 1, *out) per image
    w4 = weight.reshape(g, mg, cg, kprod)
    spread = (1,) * rank
    taps = [p.st.tap_view(p.w, src, t) for t in range(kprod)]  # (N, C, *out)
    terms = [
        (taps[t][:, ci::cg][:, :, None], w4[:, :, ci, t].reshape(1, g, mg, *spread))
        for ci in range(cg)
        for t in range(kprod)
    ]
    acc5, tmp5 = acc.reshape(n, g, mg, *p.w.out), tmp.reshape(n, g, mg, *p.w.out)
    units = _units(n, m, p.w.out)

    def unit(j: int) -> None:
        at = units[j]  # (image, rows of the first output axis)
        a, b = acc5[at], tmp5[at]
        if not terms:  # no input channels: an empty sum
            a.fill(0)
            return
        (x0, w0), rest = terms[0], terms[1:]
        np.multiply(x0[at], w0, out=a)
        for xv, wv in rest:
            np.multiply(xv[at], wv, out=b)
            np.add(a, b, out=a)

    calls.append(functools.partial(ctx.parallel_for, len(units), unit))
    if bias is not None:
        b = bias.reshape(1, m, *spread)
        calls.append(functools.partial(np.add, acc, b, out=y, casting="unsafe"))
    elif acc is not y:
        calls.append(functools.partial(np.copyto, y, acc, "unsafe"))
    if p.nan_mask is not None:
        calls.append(functools.partial(rewrite_nan, y, ctx.scratch[p.nan_mask]))
    return functools.partial(call_all, calls)
