"""LayerNormalization (ai.onnx and com.graphrt's fused node) on one native pass, fast mode.

ops-basic's kernel is about ten numpy passes over the tensor (mean, centring, squares,
reductions, scaling); on a transformer's (128, 384) rows each costs mostly its call, and the
whole is three times onnxruntime's.  The native kernel (``layer_norm`` in
src/native/fast_math.inc) reads each row twice (mean, then the variance of the centred row)
and writes it once, rows spread over the plugin's threads (a row's arithmetic is its own, so
the thread count never changes the bits).

It takes float32 X with constant float32 Scale and B (the weights exporters write) of the
normalized size or one element, and only the Y output; anything else (Mean or InvStdDev wanted,
other types, run-time weights) and exact mode are ops-basic's kernel, planned as if this
wrapper did not exist.  Not bit-identical to ops-basic's fast kernel (its own sums, an FMA in
the affine step); the fusion that writes the node does not preserve bits either.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext
from graphrt_ops_basic._util import normalize_axis

from . import _native
from .kernels import NativeKernel, contiguous_call, trial_infer

F32 = np.dtype(np.float32)


@dataclasses.dataclass(frozen=True)
class _Plan:
    rows: int
    size: int
    scale: np.ndarray  # (size,) or (1,), float32, C-contiguous
    bias: np.ndarray | None
    eps: float


def _weight(value: np.ndarray | None, norm: tuple[int, ...]) -> np.ndarray | None:
    """A constant Scale or B as the kernel's flat vector: all of the normalized shape (after
    leading ones) or one element; None when it is neither."""
    if value is None or value.dtype != F32:
        return None
    size = math.prod(norm)
    shape = tuple(value.shape)
    while shape and shape[0] == 1 and len(shape) > len(norm):
        shape = shape[1:]
    if value.size == 1 or (shape == norm[len(norm) - len(shape) :] and value.size == size):
        return np.ascontiguousarray(value.reshape(-1)[: 1 if value.size == 1 else size])
    return None


class LayerNormalization(NativeKernel):
    """Y = (X - mean) / sqrt(var + epsilon) * Scale + B natively; the rest on ops-basic's."""

    plan_type = _Plan

    def infer(self, ctx: InferContext) -> None:
        node = self.node
        if ctx.exact or any(node.outputs[1:]) or node.attr("stash_type", 1) != 1:
            return self.fallback(ctx)
        trial = trial_infer(self.base, ctx)  # ops-basic's checks, errors and output types
        x = ctx.shape(0)
        axis = normalize_axis(node.attr("axis", -1), len(x))
        norm = tuple(x[axis:])
        scale = _weight(ctx.known_value(1), norm)
        bias = _weight(ctx.known_value(2), norm) if ctx.has_input(2) else None
        if ctx.dtype(0) != F32 or scale is None or (ctx.has_input(2) and bias is None):
            return self.fallback(ctx)
        for i, found in enumerate(trial.output_types()):
            if found is not None:
                ctx.set_output(i, *found)
        eps = float(node.attr("epsilon", 1e-5))
        ctx.prepared = _Plan(math.prod(x[:axis]), math.prod(norm), scale, bias, eps)

    def bind_native(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        p: _Plan = ctx.prepared
        x, y = inputs[0], outputs[0]
        args = (p.scale, p.bias, p.eps, self.isa, ctx.threads)
        return contiguous_call(
            x, y, (p.rows, p.size), lambda a, b: functools.partial(_native.layer_norm, a, b, *args)
        )
