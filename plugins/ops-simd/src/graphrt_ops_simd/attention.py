"""Attention (ai.onnx and com.graphrt's fused node) on one native call, fast mode.

ops-basic's kernel is a handful of batched numpy steps over the whole score tensor (two BLAS
products, the mask, a softmax of several passes); on an encoder's 12 heads of 128 x 128 that is
about three times the arithmetic's cost in memory traffic and calls.  The native kernel
(src/native/attention_driver.inc) computes every (batch, head) in one call on the plugin's
threads: per group of query rows the scores in registers, the mask added as they are stored,
the softmax (a polynomial exp) and the product with V, the division by the row sums last.
Inputs are read through their strides, so 3-D (batch, seq, heads * size) inputs and outputs
need no copy.

It takes the plain case that exporters write, in fast mode: float32 Q, K, V and an additive
float32 mask (or none), no past key/value, no causal or window structure, no softcap, no
softmax precision narrower than float32, only the Y output.  Anything else, and exact mode,
is ops-basic's kernel, planned as if this wrapper did not exist.  A row whose mask is -inf for
every key gives zeros, as ops-basic's does.  Not bit-identical to ops-basic (its own products,
its own exp, the scale applied once to the scores): the fusion that writes the node does not
preserve bits either.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext
from graphrt_ops_basic.attention import FUSED_DOMAIN, head_major

from . import _native
from .kernels import NativeKernel, trial_infer

F32 = np.dtype(np.float32)
#: softmax_precision values that do not narrow a float32 softmax (FLOAT, DOUBLE).
WIDE_PRECISIONS = (None, 1, 11)


@dataclasses.dataclass(frozen=True)
class _Plan:
    hq: int
    hkv: int
    q_len: int
    dv: int
    three_d: bool
    scale: float
    mask_shape: tuple[int, ...] | None  # the mask viewed with 4 axes


class Attention(NativeKernel):
    """Y = softmax(scale * Q K^T + mask) V on the native kernel; the rest on ops-basic's."""

    plan_type = _Plan

    def _native_ok(self) -> bool:
        base, node = self.base, self.node
        extra_outputs = any(node.outputs[1:])
        plain = not (base.causal or base.softcap > 0 or base.left >= 0 or base.right >= 0)
        precision = node.attr("softmax_precision")
        return (
            plain
            and not extra_outputs
            and not base.has_past
            and not base.has_nonpad
            and precision in WIDE_PRECISIONS
        )

    def infer(self, ctx: InferContext) -> None:
        if ctx.exact or not self._native_ok():
            return self.fallback(ctx)
        trial = trial_infer(self.base, ctx)  # ops-basic's checks, errors and output types
        if any(ctx.dtype(i) != F32 for i in range(3)):
            return self.fallback(ctx)
        q, k, v = ctx.shape(0), ctx.shape(1), ctx.shape(2)
        three_d = len(q) == 3
        if three_d:
            hq, hkv = self.base.q_heads, self.base.kv_heads
            q_len, d, kv_len, dv = q[1], q[2] // hq, k[1], v[2] // hkv
        else:
            hq, hkv, q_len, d, kv_len, dv = q[1], k[1], q[2], q[3], k[2], v[3]
        mask_shape = None
        if ctx.has_input(3):
            m = ctx.shape(3)
            mask_shape = (1,) * (4 - len(m)) + tuple(m)
            # ai.onnx pads a short mask with -inf; com.graphrt's broadcasts one key as the Add did
            short = mask_shape[3] != kv_len and not (
                mask_shape[3] == 1 and self.node.domain == FUSED_DOMAIN
            )
            if ctx.dtype(3) != F32 or short:
                return self.fallback(ctx)
        if q_len == 0 or kv_len == 0:
            return self.fallback(ctx)
        for i, found in enumerate(trial.output_types()):
            if found is not None:
                ctx.set_output(i, *found)
        scale = self.base.scale
        if scale is None:
            scale = 1 / math.sqrt(d) if d else 1.0
        ctx.prepared = _Plan(hq, hkv, q_len, dv, three_d, float(scale), mask_shape)

    def bind_native(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        p: _Plan = ctx.prepared
        q = head_major(inputs[0], p.hq)
        k, v = head_major(inputs[1], p.hkv), head_major(inputs[2], p.hkv)
        y = outputs[0]
        if p.three_d:  # (b, q_len, hq * dv) written as (b, hq, q_len, dv) through strides
            y = y.reshape(y.shape[0], p.q_len, p.hq, p.dv).transpose(0, 2, 1, 3)
        mask = None
        if p.mask_shape is not None:
            mask = inputs[3].reshape(p.mask_shape)
        threads = ctx.threads
        return functools.partial(_native.attention, q, k, v, mask, y, p.scale, self.isa, threads)
