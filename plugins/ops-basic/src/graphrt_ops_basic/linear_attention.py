"""LinearAttention (opset 27): linear attention as its recurrence over the tokens.

Per batch and KV head a state S (d_k, d_v) evolves token by token (``update_rule``):

    linear:       S = S + k (x) v
    gated:        S = exp(g) * S + k (x) v
    delta:        S = S + k (x) beta (v - S^T k)
    gated_delta:  S = exp(g) * S + k (x) beta (v - (exp(g) * S)^T k)
    o = scale * q^T S                                       (scale: 1/sqrt(d_k) by default)

with g the decay (per key dimension or per head) and beta the update rate (per head or one).
The loop runs over tokens only; each step is a few numpy calls over every batch and head at
once.  Query heads share their KV head's state (GQA: query head h reads KV head h // G), so
the read is one batched product of the G query vectors of each KV head with its state.

Inputs are unpacked once into token-major float32 scratch (token, batch, heads, ...), so each
step reads contiguous slices; ``exp(decay)`` is taken once for all tokens.  The computation is
float32 (the spec's reference accumulates in float32 for every type); the output is rounded to
the query's type and present_state to past_state's type (the query's without it).  Not exact
(numpy's exp and BLAS products).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._util import constant, is_float

RULES = ("linear", "gated", "delta", "gated_delta")
F32 = np.dtype(np.float32)


@dataclasses.dataclass(frozen=True)
class _Plan:
    b: int
    t: int
    hkv: int
    g: int  # query heads per KV head
    dk: int
    dv: int
    decay_heads: int  # decay's last dim: hkv * dk (per key dimension) or hkv (per head)
    beta_heads: int  # beta's last dim: hkv or 1
    scale: np.ndarray  # 0-d float32
    q: int  # scratch (t, b, hkv, g, dk)
    k: int  # (t, b, hkv, dk)
    v: int  # (t, b, hkv, dv)
    decay: int | None  # (t, b, hkv, dk | 1): exp(decay)
    beta: int | None  # (t, b, hkv | 1, 1)
    state: int  # (b, hkv, dk, dv)
    outer: int  # (b, hkv, dk, dv)
    update: int  # (b, hkv, 1, dv)
    read: int  # (b, hkv, g, dv)


class LinearAttention(OpKernel):
    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        rule = node.attr("update_rule", "gated_delta")
        self.rule = rule.decode() if isinstance(rule, bytes) else str(rule)
        if self.rule not in RULES:
            raise self.fail(f"update_rule must be one of {', '.join(RULES)}, got {rule!r}")
        self.q_heads, self.kv_heads = node.attr("q_num_heads"), node.attr("kv_num_heads")
        if self.q_heads is None or self.kv_heads is None:
            raise self.fail("the q_num_heads and kv_num_heads attributes are required")
        if self.q_heads <= 0 or self.kv_heads <= 0 or self.q_heads % self.kv_heads:
            raise self.fail(
                f"q_num_heads ({self.q_heads}) must be a positive multiple of kv_num_heads "
                f"({self.kv_heads})"
            )
        self.scale = float(node.attr("scale", 0.0))
        self.gated = self.rule in ("gated", "gated_delta")
        self.delta = self.rule in ("delta", "gated_delta")
        ins = node.inputs
        has = [len(ins) > i and bool(ins[i]) for i in range(6)]
        if self.gated != has[4]:
            need = "needs" if self.gated else "does not take"
            raise self.fail(f"update_rule {self.rule!r} {need} the decay input")
        if self.delta != has[5]:
            need = "needs" if self.delta else "does not take"
            raise self.fail(f"update_rule {self.rule!r} {need} the beta input")

    def infer(self, ctx: InferContext) -> None:
        q, k, v = ctx.shape(0), ctx.shape(1), ctx.shape(2)
        dtype = ctx.dtype(0)
        for i, what in ((0, "query"), (1, "key"), (2, "value"), (4, "decay"), (5, "beta")):
            if ctx.has_input(i) and (ctx.dtype(i) != dtype or len(ctx.shape(i)) != 3):
                raise self.fail(
                    f"{what} must be a 3-D tensor of the query's type {dtype}", "invalid_input"
                )
        if not is_float(dtype):
            raise self.fail(f"query must be a float tensor, got {dtype}", "invalid_input")
        hq, hkv = self.q_heads, self.kv_heads
        b, t = q[0], q[1]
        if k[:2] != (b, t) or v[:2] != (b, t):
            raise self.fail(
                f"query, key and value must share (batch, tokens), got {list(q)}, {list(k)}, "
                f"{list(v)}",
                "invalid_input",
            )
        if q[2] % hq or k[2] % hkv or v[2] % hkv:
            raise self.fail(
                "the hidden sizes must be multiples of their head counts", "invalid_input"
            )
        dk, dv = q[2] // hq, v[2] // hkv
        if k[2] // hkv != dk:
            raise self.fail(f"query has head size {dk} and key {k[2] // hkv}", "invalid_input")
        decay_heads = beta_heads = 0
        if ctx.has_input(4):
            dec = ctx.shape(4)
            if dec[:2] != (b, t) or dec[2] not in (hkv * dk, hkv):
                raise self.fail(
                    f"decay must be [{b}, {t}, {hkv * dk}] or [{b}, {t}, {hkv}], got {list(dec)}",
                    "invalid_input",
                )
            decay_heads = dec[2]
        if ctx.has_input(5):
            beta = ctx.shape(5)
            if beta[:2] != (b, t) or beta[2] not in (hkv, 1):
                raise self.fail(
                    f"beta must be [{b}, {t}, {hkv}] or [{b}, {t}, 1], got {list(beta)}",
                    "invalid_input",
                )
            beta_heads = beta[2]
        state_type = dtype
        if ctx.has_input(3):
            if ctx.shape(3) != (b, hkv, dk, dv):
                raise self.fail(
                    f"past_state must be [{b}, {hkv}, {dk}, {dv}], got {list(ctx.shape(3))}",
                    "invalid_input",
                )
            if not is_float(ctx.dtype(3)):
                raise self.fail("past_state must be a float tensor", "invalid_input")
            state_type = ctx.dtype(3)
        ctx.set_output(0, dtype, (b, t, hq * dv))
        ctx.set_output(1, state_type, (b, hkv, dk, dv))
        g = hq // hkv
        scale = self.scale if self.scale else 1 / math.sqrt(dk) if dk else 1.0
        add = ctx.add_scratch
        per_key = decay_heads != hkv  # decay per key dimension (else one per head)
        ctx.prepared = _Plan(
            b, t, hkv, g, dk, dv, decay_heads, beta_heads,
            constant(F32, scale),
            add(F32, (t, b, hkv, g, dk)),
            add(F32, (t, b, hkv, dk)),
            add(F32, (t, b, hkv, dv)),
            add(F32, (t, b, hkv, dk if per_key else 1)) if decay_heads else None,
            add(F32, (t, b, beta_heads, 1)) if beta_heads else None,
            add(F32, (b, hkv, dk, dv)),
            add(F32, (b, hkv, dk, dv)),
            add(F32, (b, hkv, 1, dv)),
            add(F32, (b, hkv, g, dv)),
        )  # fmt: skip

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Plan = ctx.prepared
        sc = ctx.scratch
        b, t, hkv, g, dk, dv = p.b, p.t, p.hkv, p.g, p.dk, p.dv

        def tokens_first(x: np.ndarray, shape: tuple[int, ...], dst: np.ndarray) -> None:
            """(b, t, ...) packed -> (t, b, ...) float32, one copy."""
            axes = (1, 0) + tuple(range(2, len(shape)))
            np.copyto(dst, x.reshape(shape).transpose(axes), casting="unsafe")

        qs, ks, vs = sc[p.q], sc[p.k], sc[p.v]
        tokens_first(inputs[0], (b, t, hkv, g, dk), qs)
        tokens_first(inputs[1], (b, t, hkv, dk), ks)
        tokens_first(inputs[2], (b, t, hkv, dv), vs)
        decay = beta = None
        if p.decay is not None:
            decay = sc[p.decay]
            tokens_first(inputs[4], (b, t) + decay.shape[2:], decay)
            np.exp(decay, out=decay)
        if p.beta is not None:
            beta = sc[p.beta]
            tokens_first(inputs[5], (b, t, p.beta_heads, 1), beta)
        state, outer, upd, read = sc[p.state], sc[p.outer], sc[p.update], sc[p.read]
        past = inputs[3] if len(inputs) > 3 else None
        if past is not None:
            np.copyto(state, past, casting="unsafe")
        else:
            state.fill(0)
        y = outputs[0].reshape(b, t, hkv, g, dv)
        for i in range(t):
            k_i = ks[i]
            if decay is not None:
                np.multiply(state, decay[i][..., None], out=state)
            if beta is not None:  # the delta rule's correction of v
                np.matmul(k_i[:, :, None, :], state, out=upd)  # S^T k
                np.subtract(vs[i][:, :, None, :], upd, out=upd)
                np.multiply(upd, beta[i][..., None], out=upd)
                u = upd
            else:
                u = vs[i][:, :, None, :]
            np.multiply(k_i[..., None], u, out=outer)
            np.add(state, outer, out=state)
            np.matmul(qs[i], state, out=read)
            np.multiply(read, p.scale, out=y[:, i], casting="unsafe")
        if outputs[1] is not None:
            np.copyto(outputs[1], state, casting="unsafe")
