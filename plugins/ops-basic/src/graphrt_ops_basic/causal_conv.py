"""CausalConvWithState (opset 27): a stateful causal depthwise 1-D convolution.

The input (batch, channels, length) is prefixed by the carried state (batch, channels, k - 1)
(zeros without ``past_state``); each channel is convolved with its own k taps over that
sequence with no padding, so output position l sees positions l .. l + k - 1 of the padded
sequence, the last of which is input position l.  ``present_state`` is the last k - 1 values
of the padded sequence (including past state or zeros when the input is shorter than k - 1).
An optional bias per channel, then the optional SiLU (``silu`` or ``swish``: y * sigmoid(y)).

One vectorised multiply-add per tap over all batches, channels and positions, taps in
ascending order: ``acc = w0 * x0; acc = acc + w1 * x1; ...``, the bias added last, every
product rounded before it is added -- the canonical order of docs/exact-mode.md, so exact.
float16 and bfloat16 compute in float32 and the convolution is rounded to the input type
before the activation (computed in float32 too), as the spec's reference does.  Exact mode
takes the sigmoid from :mod:`._exact_math`; NaN results are canonical.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from . import _exact_math as em
from ._util import _CANONICAL_NAN, is_float, rewrite_nan
from .unary import sigmoid_into

ACTIVATIONS = ("none", "silu", "swish")


@dataclasses.dataclass(frozen=True)
class _Plan:
    b: int
    c: int
    length: int
    k: int
    ct: np.dtype
    padded: int  # scratch (b, c, k - 1 + length) in ct
    acc: int  # scratch (b, c, length) in ct
    tmp: int  # scratch (b, c, length) in ct
    weight: int  # scratch (c, k) in ct
    work: tuple[int, ...]  # the sigmoid's arrays (fast: two; exact: an ExpWork and one more)
    nan: int | None  # exact mode: NaN mask of the output (b * c * length)


class CausalConvWithState(OpKernel):
    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        act = node.attr("activation", "none")
        self.activation = act.decode() if isinstance(act, bytes) else str(act)
        if self.activation not in ACTIVATIONS:
            raise self.fail(f"activation must be 'none', 'silu' or 'swish', got {act!r}")
        self.silu = self.activation != "none"

    def infer(self, ctx: InferContext) -> None:
        x, w, dtype = ctx.shape(0), ctx.shape(1), ctx.dtype(0)
        if not is_float(dtype):
            raise self.fail(f"input must be a float tensor, got {dtype}", "invalid_input")
        if len(x) != 3:
            raise self.fail(
                f"input must be (batch, channels, length), got {list(x)}", "invalid_input"
            )
        b, c, length = x
        if len(w) != 3 or w[0] != c or w[1] != 1 or w[2] < 1:
            raise self.fail(f"weight must be [{c}, 1, k], got {list(w)}", "invalid_input")
        k = w[2]
        for i, what in ((1, "weight"), (2, "bias"), (3, "past_state")):
            if ctx.has_input(i) and ctx.dtype(i) != dtype:
                raise self.fail(f"{what} must have the input's type {dtype}", "invalid_input")
        if ctx.has_input(2) and ctx.shape(2) != (c,):
            raise self.fail(f"bias must be [{c}], got {list(ctx.shape(2))}", "invalid_input")
        if ctx.has_input(3) and ctx.shape(3) != (b, c, k - 1):
            raise self.fail(
                f"past_state must be [{b}, {c}, {k - 1}], got {list(ctx.shape(3))}",
                "invalid_input",
            )
        ctx.set_output(0, dtype, x)
        ctx.set_output(1, dtype, (b, c, k - 1))
        ct = np.dtype(np.float64 if dtype == np.float64 else np.float32)
        add = ctx.add_scratch
        n = b * c * length
        work: tuple[int, ...] = ()
        if self.silu:
            if ctx.exact:
                work = tuple(add(d, s) for d, s in em.work_specs(ct, n)) + (add(ct, (n,)),)
            else:
                work = (add(ct, (n,)), add(ct, (n,)))
        nan = add(np.bool_, (n,)) if ctx.exact and dtype in _CANONICAL_NAN else None
        ctx.prepared = _Plan(
            b, c, length, k, ct,
            add(ct, (b, c, k - 1 + length)),
            add(ct, (b, c, length)),
            add(ct, (b, c, length)),
            add(ct, (c, k)),
            work,
            nan,
        )  # fmt: skip

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Plan = ctx.prepared
        x = inputs[0]
        bias = inputs[2] if len(inputs) > 2 else None
        past = inputs[3] if len(inputs) > 3 else None
        sc = ctx.scratch
        padded, acc, tmp, w = sc[p.padded], sc[p.acc], sc[p.tmp], sc[p.weight]
        lead = p.k - 1
        if past is not None:
            np.copyto(padded[:, :, :lead], past, casting="unsafe")
        else:
            padded[:, :, :lead] = 0
        np.copyto(padded[:, :, lead:], x, casting="unsafe")
        if outputs[1] is not None:
            np.copyto(outputs[1], padded[:, :, p.length :], casting="unsafe")
        y = outputs[0]
        if math.prod(x.shape) == 0:
            return
        np.copyto(w, inputs[1].reshape(p.c, p.k), casting="unsafe")
        np.multiply(padded[:, :, : p.length], w[:, 0:1], out=acc)
        for t in range(1, p.k):
            np.multiply(padded[:, :, t : t + p.length], w[:, t : t + 1], out=tmp)
            np.add(acc, tmp, out=acc)
        if bias is not None:
            np.add(acc, bias[:, None], out=acc, casting="unsafe")
        if not self.silu:
            np.copyto(y, acc, casting="unsafe")
        else:
            if y.dtype != p.ct:  # the convolution rounded to the input type first
                np.copyto(y, acc, casting="unsafe")
                np.copyto(acc, y, casting="unsafe")
            flat = acc.reshape(-1)
            gate = tmp.reshape(-1)
            work = [sc[i] for i in p.work]
            if ctx.exact:
                em.sigmoid_into(flat, gate, em.make_work(work[:-1]), work[-1])
            else:
                sigmoid_into(flat, gate, *work)
            np.multiply(flat, gate, out=y.reshape(-1), casting="unsafe")
        if p.nan is not None:
            rewrite_nan(y.reshape(-1), sc[p.nan])
