"""Attention (ai.onnx opsets 23, 24 and 25): scaled dot-product attention with its variants.

The pipeline of the spec, on batched products over (batch, heads) and in-place element-wise
steps over the whole score tensor, so no Python loop runs over heads or rows:

    scores = (Q * sqrt(scale)) @ (K * sqrt(scale))^T      (present K: past_key ++ K)
    scores = softcap * tanh(scores / softcap)             (softcap > 0)
    scores = scores + bias                                (attention_mask.py)
    probs  = softmax(scores), fully masked rows zero
    Y      = probs @ V                                    (present V: past_value ++ V)

Layout.  The scores are kept keys-first, ``K @ Q^T`` written into (total_len, batch,
kv_heads, G * q_len): the softmax's reductions over the keys (maximum, sum) then run down
rows as long as all the queries of all heads together, several times faster in numpy than
along a last axis of total_len, and both products read or write the (total_len, G * q_len)
block of each (batch, KV head) with a row stride (BLAS takes any leading dimension at the
same speed).  Group-query
attention needs no repeated K/V: query head ``h`` reads K/V head ``h // G`` (``G = q_heads /
kv_heads``), and the scaled queries are written transposed, (batch, kv_heads, head, G *
q_len), so one batched product per KV head serves its G query heads and reads a contiguous
right operand (OpenBLAS multiplies by a transposed view up to 1.6x slower).  3-D inputs
(batch, seq, heads * size) are the 4-D tensors transposed; they are copied once into the
head-major scratch the products read.

Blocks.  Every (batch, KV head) is independent of the others, so a large attention is cut
into blocks of batches or KV heads (attention_blocks: a power of two of them, from the shapes
only), each with scores of its own contiguous scratch, computed one after the other or on the
intra-op threads.  A block's products are the same BLAS calls as those of the whole batched
product and every other step is element-wise or runs down the keys of one query, so the bits
do not depend on the thread count.

The compute type is float32 (float64 for float64 inputs).  float16 and bfloat16 inputs are
rounded to their type where the spec's function body casts: after scaling Q and K, after the
product, at the softmax input (``softmax_precision``'s type, T1's without it), at each step
of the softmax, and the probabilities before the product with V.  A softmax precision wider
than the compute type is computed in the compute type (the result is rounded to T1 anyway).

``qk_matmul_output`` (output 3) is the raw product (mode 0), after softcap (1), after the bias
(2) or the probabilities (3).  When nothing needs the normalised probabilities (no mode-3
output, no rounding to a narrower type) the division by the row sums moves after the product
with V: one pass over the (q_len, v_head) output instead of one over the (q_len, total)
scores.  Not exact: numpy's exp and BLAS products.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel, TensorProto, from_onnx

from ._util import constant, is_float
from .attention_mask import BiasPlan, build_bias, mask_fits, plan_bias

#: The domain of the node fuse_attention writes: its mask broadcasts as the graph's Add did.
FUSED_DOMAIN = "com.graphrt"


class _Precisions(Mapping):
    """softmax_precision values (TensorProto element types) and their numpy types, looked up
    in graphrt.dtypes when read: bfloat16's imports ml_dtypes, which only its users pay."""

    CODES = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16)

    def __getitem__(self, code: int) -> np.dtype:
        if code not in self.CODES:
            raise KeyError(code)
        return from_onnx(code)

    def __iter__(self) -> Iterator[int]:
        return iter(self.CODES)

    def __len__(self) -> int:
        return len(self.CODES)


PRECISIONS = _Precisions()


def compute_type(*dtypes: np.dtype) -> np.dtype:
    """float64 when any of the types is, else float32."""
    return np.dtype(np.float64 if any(d == np.float64 for d in dtypes) else np.float32)


def narrower(dtype: np.dtype, ct: np.dtype) -> bool:
    """Whether values of ``ct`` must be rounded to ``dtype`` (a narrower float type)."""
    return np.dtype(dtype).itemsize < np.dtype(ct).itemsize


def round_to(a: np.ndarray, tmp: np.ndarray) -> None:
    """a = a rounded to tmp's (narrower) type, through tmp."""
    np.copyto(tmp, a, casting="unsafe")
    np.copyto(a, tmp, casting="unsafe")


@functools.lru_cache(maxsize=16)
def _finfo_constant(dtype: np.dtype, name: str) -> np.ndarray:
    """np.finfo(dtype).<name> as a read-only 0-d array, looked up once: numpy 1's finfo
    properties (``tiny``, ``min``) build small arrays on every access."""
    return constant(dtype, getattr(np.finfo(dtype), name))


def exp_rows(s: np.ndarray, red: np.ndarray, axis: int, low: np.ndarray | None = None) -> None:
    """s = exp(s - max(s)) along ``axis``, in place (the softmax's numerators).

    A row of -inf only (fully masked) gives zeros, not NaN: its maximum is raised to the
    type's lowest finite value, so every exp is 0.  fmax ignores NaN in the maximum; such a
    row still comes out NaN (its differences are).  ``low``: round each step to its type.
    """
    np.fmax.reduce(s, axis=axis, keepdims=True, out=red)
    np.maximum(red, _finfo_constant(s.dtype, "min"), out=red)
    np.subtract(s, red, out=s)
    if low is not None:
        round_to(s, low)
    np.exp(s, out=s)
    if low is not None:
        round_to(s, low)


def row_sums(s: np.ndarray, red: np.ndarray, axis: int, red_low: np.ndarray | None = None) -> None:
    """red = the sums of the numerators along ``axis``, a zero sum (a fully masked row) raised
    to the smallest normal, which no other row's sum is below (a row's maximum contributes
    exp(0) = 1); ``red_low``: the sums rounded to its type first."""
    np.add.reduce(s, axis=axis, keepdims=True, out=red)
    if red_low is not None:
        round_to(red, red_low)
    np.maximum(red, _finfo_constant(s.dtype, "tiny"), out=red)


def softmax_rows(
    s: np.ndarray,
    red: np.ndarray,
    axis: int = -1,
    low: np.ndarray | None = None,
    red_low: np.ndarray | None = None,
) -> None:
    """s = softmax(s) along ``axis``, in place; red has s's shape with that axis 1.

    Fully masked rows give zeros.  With ``low`` and ``red_low`` (scratch of a narrower type)
    every step's result is rounded to that type, as a softmax computed in it would be.
    """
    exp_rows(s, red, axis, low)
    row_sums(s, red, axis, red_low)
    np.divide(s, red, out=s)
    if low is not None:
        round_to(s, low)


#: Attention of at least this many multiply-adds (Q K^T's) is cut into blocks of batches and
#: KV heads, at most MAX_BLOCKS of them, about this much work each.
BLOCK_WORK = 1 << 21
MAX_BLOCKS = 16


def attention_blocks(b: int, hkv: int, work: int) -> tuple[tuple[int, int, int, int], ...]:
    """The (b0, b1, h0, h1) blocks of batches and KV heads a run computes one by one or on the
    intra-op threads: every (batch, KV head) is independent of the others.  A power of two of
    them (about BLOCK_WORK multiply-adds each, at most MAX_BLOCKS), the first the largest; the
    blocks depend on the shapes only, so the bits do not depend on the thread count."""
    target = min(MAX_BLOCKS, work // BLOCK_WORK)
    if target <= 1 or b * hkv == 1:
        return ((0, b, 0, hkv),)
    target = 1 << (target.bit_length() - 1)
    if target <= b:  # whole batches
        step = -(-b // target)
        return tuple((i, min(b, i + step), 0, hkv) for i in range(0, b, step))
    step = -(-hkv // min(hkv, target // b))  # KV heads per block within each batch
    return tuple((i, i + 1, h, min(hkv, h + step)) for i in range(b) for h in range(0, hkv, step))


def head_major(x: np.ndarray, heads: int) -> np.ndarray:
    """(batch, seq, heads * size) viewed as (batch, heads, seq, size); 4-D inputs as they are."""
    if x.ndim == 4:
        return x
    b, s, hidden = x.shape
    return x.reshape(b, s, heads, hidden // heads).transpose(0, 2, 1, 3)


def keys_first5(x: np.ndarray, hkv: int, g: int) -> np.ndarray:
    """A keys-first (total | 1, b | 1, q_heads | 1, q_len) array as 5-D (total | 1, b | 1,
    hkv | 1, g | 1, q_len), the shape of the scores' (total, b, hkv, g, q_len) view."""
    t, b, h, q = x.shape
    return x.reshape(t, b, 1, 1, q) if h == 1 else x.reshape(t, b, hkv, g, q)


@dataclasses.dataclass(frozen=True)
class _Plan:
    b: int
    hq: int
    hkv: int
    q_len: int
    kv_len: int
    past: int
    d: int
    dv: int
    three_d: bool
    ct: np.dtype
    sqrt_q: np.ndarray  # 0-d, T1: the factors Q and K are multiplied by
    sqrt_k: np.ndarray
    qs: int  # scratch: scaled Q transposed, (b, hkv, d, g * q_len) in ct
    ks: int  # scratch: scaled present K (b, hkv, total, d) in ct
    scores: int  # (total, b, hkv, g * q_len) in ct, keys first (blocks: (n, total, bb, hh, ..))
    red: int  # (1, b, hkv, g * q_len) (blocks: (n, 1, bb, hh, g * q_len))
    #: Divide Y by the row sums after the product with V (no normalised probabilities needed).
    late_division: bool
    vs: int | None  # present V in ct when V cannot be read as it is
    yh: int | None  # Y in ct, (b, hkv, g * q_len, dv), when Y cannot be written directly
    low_q: tuple[int, int] | None  # T1 scratch of Q's and K's shapes (float16/bfloat16)
    low_scores: int | None  # T1 scratch of the scores' shape (float16/bfloat16 T1)
    #: Scratch of the softmax type (scores' shape, rows' shape) when narrower than ct
    soft_round: tuple[int, int] | None
    bias: BiasPlan | None
    #: (b0, b1, h0, h1) blocks of batches and KV heads, run one by one or on the intra-op
    #: threads (from the shapes only: attention_blocks)
    blocks: tuple[tuple[int, int, int, int], ...]


class Attention(OpKernel):
    """Inputs Q, K, V, attn_mask, past_key, past_value, nonpad_kv_seqlen (opset 24 on);
    outputs Y, present_key, present_value, qk_matmul_output."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        attr = node.attr
        self.scale = attr("scale")
        self.causal = bool(attr("is_causal", 0))
        self.q_heads = attr("q_num_heads")
        self.kv_heads = attr("kv_num_heads")
        self.softcap = float(attr("softcap", 0.0))
        self.mode = int(attr("qk_matmul_output_mode", 0))
        precision = attr("softmax_precision")
        windowed = node.opset >= 25
        self.left = int(attr("left_window_size", -1)) if windowed else -1
        self.right = int(attr("right_window_size", -1)) if windowed else -1
        if self.mode not in (0, 1, 2, 3):
            raise self.fail(f"qk_matmul_output_mode must be 0, 1, 2 or 3, got {self.mode}")
        if precision is not None and precision not in PRECISIONS:
            raise self.fail(
                f"softmax_precision must be 1 (FLOAT), 10 (FLOAT16), 11 (DOUBLE) or 16 "
                f"(BFLOAT16), got {precision}"
            )
        self.precision = PRECISIONS.get(precision) if precision is not None else None
        if not self.softcap >= 0:
            raise self.fail(f"softcap must be >= 0, got {self.softcap}")
        if self.left < -1 or self.right < -1:
            raise self.fail(
                f"left_window_size and right_window_size must be -1 or >= 0, got "
                f"{self.left} and {self.right}"
            )
        for name, v in (("q_num_heads", self.q_heads), ("kv_num_heads", self.kv_heads)):
            if v is not None and v <= 0:
                raise self.fail(f"{name} must be positive, got {v}")
        ins, outs = node.inputs, node.outputs
        self.has_past = len(ins) > 4 and bool(ins[4])
        if self.has_past != (len(ins) > 5 and bool(ins[5])):
            raise self.fail("past_key and past_value must be given together")
        self.has_nonpad = len(ins) > 6 and bool(ins[6])
        if self.has_nonpad and self.has_past:
            raise self.fail("nonpad_kv_seqlen cannot be used with past_key and past_value")
        self.wants_present_v = len(outs) > 2 and bool(outs[2])
        self.wants_probs = self.mode == 3 and len(outs) > 3 and bool(outs[3])

    # -- planning --------------------------------------------------------------------------
    def _check(self, ok: bool, message: str, kind: str = "invalid_input") -> None:
        if not ok:
            raise self.fail(message, kind)

    def _shapes(self, ctx: InferContext) -> tuple[int, ...]:
        """(b, hq, hkv, q_len, kv_len, past, d, dv) from the inputs, validated."""
        q, k, v = ctx.shape(0), ctx.shape(1), ctx.shape(2)
        check = self._check
        check(
            len(q) == len(k) == len(v) and len(q) in (3, 4),
            f"Q, K and V must all be 3-D or all 4-D, got {list(q)}, {list(k)}, {list(v)}",
        )
        for i, what in ((0, "Q"), (1, "K"), (2, "V")):
            check(is_float(ctx.dtype(i)), f"{what} must be a float tensor, got {ctx.dtype(i)}")
        check(
            ctx.dtype(0) == ctx.dtype(1),
            f"Q and K must have one type, got {ctx.dtype(0)} and {ctx.dtype(1)}",
        )
        if len(q) == 3:
            hq, hkv = self.q_heads, self.kv_heads
            check(
                hq is not None and hkv is not None,
                "3-D inputs need the q_num_heads and kv_num_heads attributes",
                "invalid_model",
            )
            for x, h, what in ((q, hq, "Q"), (k, hkv, "K"), (v, hkv, "V")):
                check(x[2] % h == 0, f"{what}'s hidden size {x[2]} is not a multiple of {h} heads")
            b, q_len, d = q[0], q[1], q[2] // hq
            kv_len, dk, dv = k[1], k[2] // hkv, v[2] // hkv
            batches, kv_lens = (q[0], k[0], v[0]), (k[1], v[1])
        else:
            check(
                self.node.opset < 25 or (self.q_heads is None and self.kv_heads is None),
                "q_num_heads and kv_num_heads must not be given for 4-D inputs",
                "invalid_model",
            )
            b, hq, q_len, d = q
            hkv, kv_len, dk, dv = k[1], k[2], k[3], v[3]
            check(v[1] == hkv, f"K has {hkv} heads and V {v[1]}")
            for name, want, have in (("q", hq, self.q_heads), ("kv", hkv, self.kv_heads)):
                check(
                    have is None or have == want,
                    f"{name}_num_heads is {have} but the input has {want} heads",
                )
            batches, kv_lens = (q[0], k[0], v[0]), (k[2], v[2])
        check(len(set(batches)) == 1, f"Q, K and V have batch sizes {list(batches)}")
        check(kv_lens[0] == kv_lens[1], f"K and V have sequence lengths {list(kv_lens)}")
        check(dk == d, f"Q's head size is {d} and K's {dk}")
        check(
            hkv > 0 and hq % hkv == 0,
            f"the {hq} query heads are not a multiple of the {hkv} key/value heads",
        )
        past = 0
        if self.has_past:
            pk, pv = ctx.shape(4), ctx.shape(5)
            check(
                len(pk) == 4 and pk[:2] == (b, hkv) and pk[3] == d,
                f"past_key must be [{b}, {hkv}, past, {d}], got {list(pk)}",
            )
            check(
                len(pv) == 4 and pv[:3] == pk[:3] and pv[3] == dv,
                f"past_value must be [{b}, {hkv}, {pk[2]}, {dv}], got {list(pv)}",
            )
            check(ctx.dtype(4) == ctx.dtype(0), "past_key must have Q's type")
            check(ctx.dtype(5) == ctx.dtype(2), "past_value must have V's type")
            past = pk[2]
        if self.has_nonpad:
            check(
                ctx.shape(6) == (b,) and ctx.dtype(6) == np.int64,
                f"nonpad_kv_seqlen must be int64 of shape [{b}], got {ctx.dtype(6)} "
                f"{list(ctx.shape(6))}",
            )
        return b, hq, hkv, q_len, kv_len, past, d, dv

    def infer(self, ctx: InferContext) -> None:
        b, hq, hkv, q_len, kv_len, past, d, dv = self._shapes(ctx)
        t1, t2 = ctx.dtype(0), ctx.dtype(2)
        total, g = past + kv_len, hq // hkv
        three_d = len(ctx.shape(0)) == 3
        ctx.set_output(0, t1, (b, q_len, hq * dv) if three_d else (b, hq, q_len, dv))
        ctx.set_output(1, t1, (b, hkv, total, d))
        ctx.set_output(2, t2, (b, hkv, total, dv))
        ctx.set_output(3, t1, (b, hq, q_len, total))
        mask_shape = mask_dtype = None
        if ctx.has_input(3):
            mask_shape, mask_dtype = ctx.shape(3), ctx.dtype(3)
            why = mask_fits(mask_shape, (b, hq, q_len, total))
            self._check(why is None, why or "")
        ct = compute_type(t1, t2)
        scale = self.scale if self.scale is not None else 1 / math.sqrt(d) if d else 1.0
        root = t1.type(math.sqrt(abs(scale)))
        add = ctx.add_scratch
        blocks = attention_blocks(b, hkv, b * hq * q_len * total * d)
        if len(blocks) == 1:
            scores, rows = (total, b, hkv, g * q_len), (1, b, hkv, g * q_len)
        else:  # one (total, bb, hh, g * q_len) part per block: each contiguous
            bb, hh = blocks[0][1] - blocks[0][0], blocks[0][3] - blocks[0][2]
            scores = (len(blocks), total, bb, hh, g * q_len)
            rows = (len(blocks), 1, bb, hh, g * q_len)
        low = narrower(t1, ct)
        low_scores = add(t1, scores) if low else None
        soft = self.precision if self.precision is not None else t1
        soft_round = None
        if narrower(soft, ct):
            soft_round = (low_scores if soft == t1 else add(soft, scores), add(soft, rows))
        late = not self.wants_probs and not low and soft_round is None
        y_direct = not three_d and t1 == ct
        v_direct = t2 == ct and not three_d and (not past or self.wants_present_v)
        ctx.prepared = _Plan(
            b, hq, hkv, q_len, kv_len, past, d, dv, three_d, ct,
            constant(t1, -root if scale < 0 else root),
            constant(t1, root),
            add(ct, (b, hkv, d, g * q_len)),
            add(ct, (b, hkv, total, d)),
            add(ct, scores),
            add(ct, rows),
            late,
            None if v_direct else add(ct, (b, hkv, total, dv)),
            None if y_direct else add(ct, (b, hkv, g * q_len, dv)),
            (add(t1, (b, hq, q_len, d)), add(t1, (b, hkv, total, d))) if low else None,
            low_scores,
            soft_round,
            plan_bias(
                ctx, ct, b, q_len, total, past, mask_shape, mask_dtype, self.has_nonpad,
                self.causal, self.left, self.right, self.node.domain == FUSED_DOMAIN,
            ),
            blocks,
        )  # fmt: skip

    # -- running ---------------------------------------------------------------------------
    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Plan = ctx.prepared
        sc = ctx.scratch
        ins = list(inputs) + [None] * (7 - len(inputs))
        y, present_k, present_v, qk_out = (list(outputs) + [None] * 4)[:4]
        k4, v4 = head_major(ins[1], p.hkv), head_major(ins[2], p.hkv)
        past_k, past_v = ins[4], ins[5]
        for dst, old, new in ((present_k, past_k, k4), (present_v, past_v, v4)):
            if dst is not None:
                _concat(dst, old, new, p.past)
        if p.past + p.kv_len == 0 or p.q_len == 0:  # every row is fully masked
            y.fill(0)
            if qk_out is not None:
                qk_out.fill(0)
            return
        # what every block shares: the scaled keys, the values, the bias
        if p.low_q is None:
            _scale_concat(sc[p.ks], past_k, k4, p.past, p.sqrt_k)
        else:  # float16/bfloat16: scaled in T1, as the spec's body does
            lk = sc[p.low_q[1]]
            _scale_concat(lk, past_k, k4, p.past, p.sqrt_k)
            np.copyto(sc[p.ks], lk, casting="unsafe")
        if p.vs is None:
            vv = present_v if p.past else v4
        else:
            vv = sc[p.vs]
            _concat(vv, past_v, v4, p.past)
        bias = masked = None
        if p.bias is not None:
            bias, masked = build_bias(p.bias, sc, ins[3], ins[6], p.q_len)
        g = p.hq // p.hkv
        run = _Run(
            p,
            sc,
            head_major(ins[0], p.hq),
            vv,
            y,
            None if qk_out is None else qk_out.reshape(p.b, p.hkv, g, p.q_len, -1),
            None if bias is None else keys_first5(bias, p.hkv, g),
            None if masked is None else keys_first5(masked, p.hkv, g),
        )
        if len(p.blocks) == 1:
            self._block(run, 0)
        else:
            ctx.parallel_for(len(p.blocks), functools.partial(self._block, run))

    def _block(self, r: _Run, i: int) -> None:
        """Batches b0..b1 and KV heads h0..h1 (with their query heads), from the scores to Y.

        The products of a block are the (batch, KV head) products of the whole batched
        product, and every other step works element by element or down the keys of each
        query, so a block computes the bits the whole would."""
        p, sc = r.plan, r.scratch
        g = p.hq // p.hkv
        b0, b1, h0, h1 = p.blocks[i]
        bh = (slice(b0, b1), slice(h0, h1))

        def part(index: int) -> np.ndarray:  # the block's own scores-shaped scratch
            a = sc[index]
            return a if len(p.blocks) == 1 else a[i][:, : b1 - b0, : h1 - h0]

        heads = (slice(b0, b1), slice(h0 * g, h1 * g))  # the query heads of KV heads h0..h1
        # the scaled queries transposed, (bb, hh, d, g * q_len): BLAS multiplies by a
        # contiguous right operand faster than by a transposed view
        qs = sc[p.qs][bh]
        q5 = r.q4[heads].reshape(b1 - b0, h1 - h0, g, p.q_len, p.d)
        qs5 = qs.reshape(b1 - b0, h1 - h0, p.d, g, p.q_len).transpose(0, 1, 3, 4, 2)
        if p.low_q is None:
            np.multiply(q5, p.sqrt_q, out=qs5)
        else:  # float16/bfloat16: scaled in T1, as the spec's body does
            lq = sc[p.low_q[0]][heads]
            np.multiply(r.q4[heads], p.sqrt_q, out=lq)
            np.copyto(qs5, lq.reshape(q5.shape), casting="unsafe")
        s = part(p.scores)  # (total, bb, hh, g * q_len): keys first
        np.matmul(sc[p.ks][bh], qs, out=s.transpose(1, 2, 0, 3))
        s5 = s.reshape(s.shape[:3] + (g, p.q_len))
        mode = self.mode if r.qk5 is not None else -1
        qk = None if r.qk5 is None else r.qk5[bh].transpose(4, 0, 1, 2, 3)
        low = None if p.low_scores is None else part(p.low_scores)
        if low is not None:
            round_to(s, low)
        if mode == 0:
            np.copyto(qk, s5, casting="unsafe")
        if self.softcap > 0:
            cap = constant(p.ct, self.softcap)
            np.divide(s, cap, out=s)
            np.tanh(s, out=s)
            np.multiply(s, cap, out=s)
        if mode == 1:
            np.copyto(qk, s5, casting="unsafe")
        if r.bias5 is not None:
            np.add(s5, _part(r.bias5, b0, b1, h0, h1), out=s5)
        if mode == 2:
            np.copyto(qk, s5, casting="unsafe")
        red = part(p.red)
        if p.soft_round is None:
            exp_rows(s, red, 0)
            if not p.late_division:
                row_sums(s, red, 0)
                np.divide(s, red, out=s)
        else:  # the softmax runs on values of softmax_precision's type
            soft, soft_red = part(p.soft_round[0]), part(p.soft_round[1])
            round_to(s, soft)
            softmax_rows(s, red, 0, soft, soft_red)
        if r.masked5 is not None:
            np.copyto(s5, constant(p.ct, 0), where=_part(r.masked5, b0, b1, h0, h1))
        if mode == 3:
            np.copyto(qk, s5, casting="unsafe")
        if low is not None and (p.soft_round is None or p.soft_round[0] != p.low_scores):
            round_to(s, low)  # the probabilities in T1 before the product with V
        if p.late_division:
            row_sums(s, red, 0)
        self._output(p, sc, r, s, red, bh)

    @staticmethod
    def _output(
        p: _Plan,
        sc: Sequence[np.ndarray],
        r: _Run,
        s: np.ndarray,
        red: np.ndarray,
        bh: tuple[slice, slice],
    ) -> None:
        """Y = probs @ V for the block (then / the row sums when the division comes late)."""
        g = p.hq // p.hkv
        yh = sc[p.yh] if p.yh is not None else r.y
        grouped = yh.reshape(p.b, p.hkv, g * p.q_len, p.dv)[bh]
        np.matmul(s.transpose(1, 2, 3, 0), r.vv[bh], out=grouped)
        sums = red[0][..., None]  # (bb, hh, g * q_len, 1)
        if p.yh is None:
            if p.late_division:
                np.divide(grouped, sums, out=grouped)
            return
        # Y from the (b, hkv, g, q_len, dv) result: 3-D Y as (b, q_len, hkv, g, dv) transposed
        if p.three_d:
            dst = r.y.reshape(p.b, p.q_len, p.hkv, g, p.dv).transpose(0, 2, 3, 1, 4)
        else:
            dst = r.y.reshape(p.b, p.hkv, g, p.q_len, p.dv)
        dst = dst[bh]
        src = grouped.reshape(dst.shape)
        if p.late_division:
            np.divide(src, sums.reshape(dst.shape[:-1] + (1,)), out=dst, casting="unsafe")
        else:
            np.copyto(dst, src, casting="unsafe")


def _part(x: np.ndarray, b0: int, b1: int, h0: int, h1: int) -> np.ndarray:
    """A keys-first 5-D (total | 1, b | 1, hkv | 1, g | 1, q_len) array's part for batches
    b0..b1 and KV heads h0..h1 (a broadcast dimension stays whole)."""
    whole = slice(None)
    return x[
        :, slice(b0, b1) if x.shape[1] > 1 else whole, slice(h0, h1) if x.shape[2] > 1 else whole
    ]


@dataclasses.dataclass(frozen=True)
class _Run:
    """What one run's blocks share."""

    plan: _Plan
    scratch: Sequence[np.ndarray]
    q4: np.ndarray  # Q as (b, hq, q_len, d) (a view; 3-D Q transposed)
    vv: np.ndarray  # present V in the compute type, (b, hkv, total, dv)
    y: np.ndarray
    qk5: np.ndarray | None  # qk_matmul_output as (b, hkv, g, q_len, total)
    bias5: np.ndarray | None  # keys first, 5-D (keys_first5)
    masked5: np.ndarray | None


def _concat(dst: np.ndarray, past: np.ndarray | None, new: np.ndarray, n_past: int) -> None:
    """dst = past ++ new along the sequence axis (axis 2)."""
    if n_past:
        np.copyto(dst[:, :, :n_past], past, casting="unsafe")
    np.copyto(dst[:, :, n_past:], new, casting="unsafe")


def _scale_concat(
    dst: np.ndarray, past: np.ndarray | None, new: np.ndarray, n_past: int, factor: np.ndarray
) -> None:
    """dst = (past ++ new) * factor along the sequence axis (axis 2)."""
    if n_past:
        np.multiply(past, factor, out=dst[:, :, :n_past])
    np.multiply(new, factor, out=dst[:, :, n_past:])
