"""Dropout: a copy at inference, random zeroing only when opset 12's training_mode asks for it.

graphrt runs models for inference, so ``is_test=0`` of opsets 1-6 is treated as test mode, like
opsets 7-11 where the runtime decides.  From opset 12 a true ``training_mode`` input applies
``output = scale * data * mask`` with ``scale = 1 / (1 - ratio)`` and mask elements kept with
probability ``1 - ratio``, drawn from numpy's ``Generator`` (PCG64) seeded with the ``seed``
attribute in every run, so a seeded node draws the same mask each time (fresh entropy when the
seed is absent: such a model has no reproducible output, and exact mode refuses it).  The mask
output is bool from opset 10 and of the data's type (ones and zeros) before.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._util import constant, same_storage


@dataclasses.dataclass(frozen=True)
class _Training:
    ratio: float
    draws: int  # scratch index: uniform [0, 1) draws, float64, the data's shape
    keep: int  # scratch index: the bool mask


class Dropout(OpKernel):
    in_place_input = 0
    #: A copy at inference; in training a seeded PCG64 stream and one rounded multiply.
    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        seed = node.attr("seed")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise self.fail(f"seed must be an integer, got {seed!r}")
        # PCG64's entropy is a non-negative integer: a negative int64 seed as its 64 bits
        self.seed = None if seed is None else seed & 0xFFFF_FFFF_FFFF_FFFF

    def infer(self, ctx: InferContext) -> None:
        dtype, shape = ctx.dtype(0), ctx.shape(0)
        ctx.set_output(0, dtype, shape)
        ctx.set_output(1, np.bool_ if self.node.opset >= 10 else dtype, shape)
        ctx.prepared = None
        if self.node.opset < 12 or not ctx.has_input(2) or not bool(ctx.value(2).reshape(-1)[0]):
            return
        ratio = float(ctx.value(1).reshape(-1)[0]) if ctx.has_input(1) else 0.5
        if not 0 <= ratio <= 1:
            raise self.fail(f"ratio must be in [0, 1], got {ratio}", "invalid_input")
        if ratio == 0:
            return
        if ctx.exact and self.seed is None:
            raise self.fail(
                "training-mode Dropout without a seed has no reproducible output",
                "exact_mode_unavailable",
            )
        ctx.prepared = _Training(
            ratio, ctx.add_scratch(np.float64, shape), ctx.add_scratch(np.bool_, shape)
        )

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x, out = inputs[0], outputs[0]
        mask = outputs[1] if len(outputs) > 1 else None
        plan: _Training | None = ctx.prepared
        if plan is None:
            if not same_storage(out, x):
                np.copyto(out, x)
            if mask is not None:
                mask.fill(1)
            return
        draws, keep = ctx.scratch[plan.draws], ctx.scratch[plan.keep]
        np.random.default_rng(self.seed).random(out=draws)
        np.greater_equal(draws, plan.ratio, out=keep)
        scale = 0.0 if plan.ratio >= 1 else 1.0 / (1.0 - plan.ratio)
        np.multiply(x, constant(x.dtype, scale), out=out)
        np.multiply(out, keep, out=out)
        if mask is not None:
            np.copyto(mask, keep)

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        if ctx.prepared is None and (len(outputs) < 2 or outputs[1] is None):
            if same_storage(outputs[0], inputs[0]):
                return _nothing  # in place: the output already is the input
            return functools.partial(np.copyto, outputs[0], inputs[0])
        return functools.partial(self.run, ctx, inputs, outputs)


def _nothing() -> None:
    pass
