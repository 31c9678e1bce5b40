"""Inference BatchNormalization, and com.graphrt's FusedBatchNormalization (the Relu after it),
on one native pass over memory, fast mode.

ops-basic's kernel folds the per-channel scale s = scale / sqrt(var + eps) and shift
t = bias - mean * s once at plan time (float64, rounded once to float32), then makes two numpy
passes, y = x * s and y += t, and a Relu after it a third: DenseNet's 62 batch norms no Conv
absorbs (Concat -> BatchNormalization -> Relu -> Conv) were a tenth of its run.  The native
kernel (src/native/affine_driver.inc) reads X once and writes Y once: y = fma(x, s[c], t[c]),
then max(0, y), vectorised along each channel's H*W plane, the planes spread over the plugin's
threads (an element's arithmetic is its own: the same bits for any thread count).  Y may be X's
storage.

It takes float32 X of rank >= 2 with constant parameters (ops-basic's plan folded them) and
only the Y output, and an activation that is none or Relu; anything else (training, run-time
parameters, other types, the scalar path in fast mode) is ops-basic's kernel, planned as if
this wrapper did not exist.  Not bit-identical to ops-basic's fast kernel (one rounding where
it has two); the fusion that writes FusedBatchNormalization does not preserve bits either.

Exact mode (every native path, the scalar one too): the same pass with ops-basic's exact
arithmetic, y = x * a then y = y + b (each rounded, the constants folded as ops-basic folds
them) and a NaN made the canonical one: ops-basic's bits in one pass where its numpy kernel
made four (the product, the sum, the NaN mask and its rewrite: light_resnet50's 53 batch
norms in exact mode: 6.6 -> 0.9 ms a run).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext
from graphrt_ops_basic.norm import _BatchPlan

from . import _native
from .kernels import NativeKernel, contiguous_call, trial_infer

F32 = np.dtype(np.float32)
#: Paths whose fast mode uses the native kernel (the scalar path is for exact mode).
FAST_ISAS = frozenset({"avx2", "avx512"})


@dataclasses.dataclass(frozen=True)
class _Plan:
    shape: tuple[int, int, int]  # (N, C, H*W): X as the kernel reads it
    scale: np.ndarray  # (C,) float32, C-contiguous
    shift: np.ndarray
    activation: str  # "none" or "relu"
    exact: bool = False  # exact mode: the product and the sum each rounded, NaN canonical


class BatchNormalization(NativeKernel):
    """BatchNormalization (or FusedBatchNormalization) natively; the rest on ops-basic's."""

    plan_type = _Plan
    in_place_input = 0

    def infer(self, ctx: InferContext) -> None:
        act = getattr(self.base, "act", None)  # FusedBatchNormalization's Activation
        kind = act.kind if act is not None else ""
        x = ctx.shape(0)
        if (
            (ctx.exact and kind)
            or (not ctx.exact and self.isa not in FAST_ISAS)
            or ctx.dtype(0) != F32
            or len(x) < 2
            or ctx.num_outputs > 1
            or getattr(self.base, "training", True)
            or kind not in ("", "Relu")
        ):
            return self.fallback(ctx)
        trial = trial_infer(self.base, ctx)  # ops-basic's checks, errors, folded parameters
        plan = trial.prepared
        channels = x[1]
        if (
            not isinstance(plan, _BatchPlan)
            or not isinstance(plan.a, np.ndarray)
            or plan.a.dtype != F32
            or plan.shape != (channels,) + (1,) * (len(x) - 2)
        ):
            return self.fallback(ctx)
        ctx.set_output(0, *trial.output_types()[0])
        ctx.prepared = _Plan(
            (x[0], channels, math.prod(x[2:])),
            np.ascontiguousarray(plan.a.reshape(-1)),
            np.ascontiguousarray(plan.b.reshape(-1)),
            "relu" if kind == "Relu" else "none",
            ctx.exact,
        )

    def bind_native(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        p: _Plan = ctx.prepared
        x, y = inputs[0], outputs[0]
        threads = ctx.threads
        # (a ChannelAffineCall checks its arguments once, per run state)
        return contiguous_call(
            x,
            y,
            p.shape,
            lambda a, b: _native.ChannelAffineCall(
                a, b, p.scale, p.shift, p.activation, self.isa, threads, p.exact
            ),
        )
