"""FlexAttention (ai.onnx.preview, version 1): attention with score and probability modifiers.

    scores = (Q * sqrt(scale)) @ (K * sqrt(scale))^T     in Q's type
    scores = score_mod(scores)                          (a graph attribute, optional)
    probs  = softmax(scores)                            in softmax_precision's type
    probs  = prob_mod(probs)                            (a graph attribute, optional)
    Y      = probs @ V

The modifiers are graphs of one rank-4 input and one output of the same shape and type,
compiled once per node into body sessions (:meth:`NodeInfo.compile_subgraph`, the way If and
Loop compile theirs) and run on the whole score tensor.  The softmax type is
``softmax_precision`` or, by default, float32 (float64 for float64 inputs).  Query heads share
their KV head (query head h reads KV head h // G) with the layout trick of :mod:`.attention`:
no repeated K or V.  A row whose scores are all -inf (masked by score_mod) gives zero
probabilities rather than NaN.  Not exact (numpy's exp, BLAS products).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._util import constant, is_float
from .attention import PRECISIONS, narrower, round_to, softmax_rows

DOMAIN = "ai.onnx.preview"


@dataclasses.dataclass(frozen=True)
class _Plan:
    b: int
    hq: int
    hkv: int
    q_len: int
    kv_len: int
    e: int
    ev: int
    ct: np.dtype  # the products' compute type
    wt: np.dtype  # the softmax's working type
    sd: np.dtype  # softmax_precision's type (the modifiers see it)
    root_q: np.ndarray  # 0-d in T: the factors Q and K are multiplied by
    root_k: np.ndarray
    low: tuple[int, int, int] | None  # T scratch: Q, K scaled; scores (float16/bfloat16 T)
    qs: int
    ks: int
    scores: int  # ct
    work: int | None  # the scores in wt, when wt differs from ct
    soft: tuple[int, int] | None  # sd scratch (scores, rows) when sd is narrower than wt
    red: int
    vw: int | None  # V in wt
    yw: int | None  # Y in wt


class FlexAttention(OpKernel):
    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.scale = node.attr("scale")
        precision = node.attr("softmax_precision")
        if precision is not None and precision not in PRECISIONS:
            raise self.fail(
                f"softmax_precision must be 1 (FLOAT), 10 (FLOAT16), 11 (DOUBLE) or 16 "
                f"(BFLOAT16), got {precision}"
            )
        self.precision = PRECISIONS.get(precision) if precision is not None else None
        self.declared = len(node.inputs)
        self.mods = {name: self._body(name) for name in ("score_mod", "prob_mod")}

    def _body(self, name: str) -> Any:
        graph = self.node.attr(name)
        if graph is None:
            return None
        if self.node.compile_subgraph is None:
            raise self.fail(f"{name} needs a session to compile its graph")
        body = self.node.compile_subgraph(graph)
        if body.num_inputs != 1 or body.num_outputs != 1:
            raise self.fail(
                f"{name} must have one input and one output, got {body.num_inputs} and "
                f"{body.num_outputs}"
            )
        return body

    def infer(self, ctx: InferContext) -> None:
        q, k, v = ctx.shape(0), ctx.shape(1), ctx.shape(2)
        t = ctx.dtype(0)
        if not (len(q) == len(k) == len(v) == 4):
            raise self.fail(
                f"Q, K and V must be 4-D, got {list(q)}, {list(k)}, {list(v)}", "invalid_input"
            )
        if not is_float(t) or ctx.dtype(1) != t or ctx.dtype(2) != t:
            raise self.fail("Q, K and V must have one float type", "invalid_input")
        b, hq, q_len, e = q
        if k[0] != b or v[0] != b or k[1] != v[1] or k[2] != v[2] or k[3] != e:
            raise self.fail(
                f"K {list(k)} and V {list(v)} do not match Q {list(q)}", "invalid_input"
            )
        hkv, kv_len, ev = k[1], k[2], v[3]
        if hkv == 0 or hq % hkv:
            raise self.fail(
                f"the {hq} query heads are not a multiple of the {hkv} key/value heads",
                "invalid_input",
            )
        ctx.set_output(0, t, (b, hq, q_len, ev))
        ct = np.dtype(np.float64 if t == np.float64 else np.float32)
        sd = self.precision or ct
        wt = np.dtype(np.float64 if sd == np.float64 else np.float32)
        scale = self.scale if self.scale is not None else 1 / math.sqrt(e) if e else 1.0
        root = t.type(np.sqrt(np.float32(abs(scale))))
        add = ctx.add_scratch
        scores = (b, hq, q_len, kv_len)
        low = None
        if narrower(t, ct):
            low = (add(t, q), add(t, k), add(t, scores))
        soft = None
        if narrower(sd, wt):
            soft = (add(sd, scores), add(sd, (b, hq, q_len, 1)))
        ctx.prepared = _Plan(
            b, hq, hkv, q_len, kv_len, e, ev, ct, wt, sd,
            constant(t, -root if scale < 0 else root),
            constant(t, root),
            low,
            add(ct, q),
            add(ct, k),
            add(ct, scores),
            add(wt, scores) if wt != ct else None,
            soft,
            add(wt, (b, hq, q_len, 1)),
            add(wt, v) if t != wt else None,
            add(wt, (b, hq, q_len, ev)) if t != wt else None,
        )  # fmt: skip

    def _modify(
        self, name: str, ctx: KernelContext, x: np.ndarray, inputs: Sequence[Any], soft: Any
    ) -> None:
        """x = mod(x) in place; the modifier sees the softmax type (through ``soft``)."""
        body = self.mods[name]
        given = soft if soft is not None else x
        if soft is not None:
            np.copyto(soft, x, casting="unsafe")
        outer = body.outer_values(self.node.outer_inputs, inputs[self.declared :])
        (got,) = body.run([given, *outer], ctx)
        if not isinstance(got, np.ndarray) or got.shape != x.shape:
            shape = getattr(got, "shape", None)
            raise self.fail(
                f"{name} must return a tensor of shape {list(x.shape)}, got {shape}",
                "invalid_model",
            )
        np.copyto(x, got, casting="unsafe")

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Plan = ctx.prepared
        sc = ctx.scratch
        q, k, v = inputs[0], inputs[1], inputs[2]
        qs, ks, scores = sc[p.qs], sc[p.ks], sc[p.scores]
        if p.low is None:
            np.multiply(q, p.root_q, out=qs)
            np.multiply(k, p.root_k, out=ks)
        else:  # scaled in T, as the spec's reference does
            lq, lk = sc[p.low[0]], sc[p.low[1]]
            np.multiply(q, p.root_q, out=lq)
            np.multiply(k, p.root_k, out=lk)
            np.copyto(qs, lq, casting="unsafe")
            np.copyto(ks, lk, casting="unsafe")
        y = outputs[0]
        if p.kv_len == 0 or p.q_len == 0:
            y.fill(0)
            return
        grouped = (p.b, p.hkv, p.hq // p.hkv * p.q_len)
        np.matmul(
            qs.reshape(*grouped, p.e),
            ks.swapaxes(-1, -2),
            out=scores.reshape(*grouped, p.kv_len),
        )
        if p.low is not None:
            round_to(scores, sc[p.low[2]])
        work = scores
        if p.work is not None:
            work = sc[p.work]
            np.copyto(work, scores, casting="unsafe")
        soft = red_soft = None
        if p.soft is not None:
            soft, red_soft = sc[p.soft[0]], sc[p.soft[1]]
            round_to(work, soft)
        if self.mods["score_mod"] is not None:
            self._modify("score_mod", ctx, work, inputs, soft)
        softmax_rows(work, sc[p.red], -1, soft, red_soft)
        if self.mods["prob_mod"] is not None:
            self._modify("prob_mod", ctx, work, inputs, soft)
        vw = v
        if p.vw is not None:
            vw = sc[p.vw]
            np.copyto(vw, v, casting="unsafe")
        yw = sc[p.yw] if p.yw is not None else y
        np.matmul(work.reshape(*grouped, p.kv_len), vw, out=yw.reshape(*grouped, p.ev))
        if p.yw is not None:
            np.copyto(y, yw, casting="unsafe")
