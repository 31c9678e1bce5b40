"""SwiGLU (opset 28): Y = Swish_alpha(A) * B = (A * sigmoid(alpha * A)) * B.

A and B have one shape and one type; no broadcasting.  The sigmoid is the one of
:class:`.unary.Sigmoid` (from exp(-|v|), which never overflows); float16 and bfloat16 compute
in float32 and round once.  Exact mode: alpha * A, our sigmoid (:mod:`._exact_math`), then the
two products, each one rounded operation, with NaN results canonical.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from . import _exact_math as em
from ._util import _CANONICAL_NAN, constant, is_float, rewrite_nan
from .unary import sigmoid_into


@dataclasses.dataclass(frozen=True)
class _Plan:
    ct: np.dtype
    a: int | None  # scratch: A in ct (float16/bfloat16), then B
    gate: int  # scratch: sigmoid(alpha * A), then Swish(A)
    work: tuple[int, ...]  # fast: two arrays of sigmoid_into; exact: ExpWork + one more


class SwiGLU(OpKernel):
    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.alpha = float(node.attr("alpha", 1.0))

    def infer(self, ctx: InferContext) -> None:
        dtype, shape = ctx.dtype(0), ctx.shape(0)
        if not is_float(dtype):
            raise self.fail(f"A must be a float tensor, got {dtype}", "invalid_input")
        if ctx.dtype(1) != dtype or ctx.shape(1) != shape:
            raise self.fail(
                f"A and B must have one type and shape (no broadcasting), got {dtype} "
                f"{list(shape)} and {ctx.dtype(1)} {list(ctx.shape(1))}",
                "invalid_input",
            )
        ctx.set_output(0, dtype, shape)
        ct = np.dtype(np.float64 if dtype == np.float64 else np.float32)
        n = math.prod(shape)
        if ctx.exact:
            work = tuple(ctx.add_scratch(d, s) for d, s in em.work_specs(ct, n))
            work += (ctx.add_scratch(ct, (n,)),)
        else:
            work = (ctx.add_scratch(ct, (n,)), ctx.add_scratch(ct, (n,)))
        ctx.prepared = _Plan(
            ct,
            ctx.add_scratch(ct, (n,)) if dtype != ct else None,
            ctx.add_scratch(ct, (n,)),
            work,
        )

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Plan = ctx.prepared
        a, b, y = inputs[0].reshape(-1), inputs[1].reshape(-1), outputs[0].reshape(-1)
        if p.a is not None:
            np.copyto(ctx.scratch[p.a], a, casting="unsafe")
            a = ctx.scratch[p.a]
        gate = ctx.scratch[p.gate]
        src = a
        if self.alpha != 1:
            np.multiply(a, constant(p.ct, self.alpha), out=gate)
            src = gate
        work = [ctx.scratch[i] for i in p.work]
        if ctx.exact:
            em.sigmoid_into(src, gate, em.make_work(work[:-1]), work[-1])
        else:
            sigmoid_into(src, gate, *work)
        np.multiply(a, gate, out=gate)
        if p.a is None:
            np.multiply(gate, b, out=y)
        else:  # casts by copies: a mixed-type ufunc would allocate cast buffers
            np.copyto(a, b, casting="unsafe")
            np.multiply(gate, a, out=gate)
            np.copyto(y, gate, casting="unsafe")
        if ctx.exact and y.dtype in _CANONICAL_NAN:
            rewrite_nan(y, work[4])  # the ExpWork's bool mask, free again
