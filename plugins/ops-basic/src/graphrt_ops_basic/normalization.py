"""BatchNormalization, InstanceNormalization, LayerNormalization and LRN.

BatchNormalization's prepare step folds scale / sqrt(var + eps) and bias - mean * that into two
per-channel vectors when the parameters are constants, so inference is one multiply and one add.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.kernel import InferContext, KernelContext, OpKernel

from ._util import normalize_axis


@dataclasses.dataclass(frozen=True)
class _Affine:
    scale: np.ndarray | None  # folded multiplier, shaped to broadcast over X
    shift: np.ndarray | None
    shape: tuple[int, ...]  # how the per-channel parameters broadcast over X


class BatchNormalization(OpKernel):
    def _training(self) -> bool:
        if self.node.opset >= 14:
            return bool(self.node.attr("training_mode", 0))
        if self.node.opset < 7:
            return False  # is_test or not, the outputs graphrt computes are the inference ones
        return False

    def infer(self, ctx: InferContext) -> None:
        x = ctx.shape(0)
        if len(x) < 2:
            raise self.fail(f"X must have rank >= 2, got {list(x)}", "invalid_input")
        ctx.set_output(0, ctx.dtype(0), x)
        c = x[1]
        spatial = self.node.attr("spatial", 1) if self.node.opset < 9 else 1
        pshape = (c,) + (1,) * (len(x) - 2) if spatial else tuple(x[1:])
        for i in range(1, 5):
            if int(np.prod(ctx.shape(i))) != int(np.prod(pshape)):
                raise self.fail(
                    f"input {i} has shape {list(ctx.shape(i))}, expected {c} values",
                    "invalid_input",
                )
        if self._training():
            ctx.set_output(1, ctx.dtype(3), ctx.shape(3))
            ctx.set_output(2, ctx.dtype(4), ctx.shape(4))
            ctx.prepared = _Affine(None, None, pshape)
            return
        for i in range(1, ctx.num_outputs):
            ctx.set_output(i, ctx.dtype(0), ctx.shape(min(i + 2, 4)))  # legacy outputs: stats
        values = [ctx.known_value(i) for i in range(1, 5)]
        if all(v is not None for v in values):
            scale, shift = _fold(*values, self.node.attr("epsilon", 1e-5), ctx.dtype(0))
            ctx.prepared = _Affine(scale.reshape(pshape), shift.reshape(pshape), pshape)
        else:
            ctx.prepared = _Affine(None, None, pshape)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Affine = ctx.prepared
        x, y = inputs[0], outputs[0]
        eps = self.node.attr("epsilon", 1e-5)
        if self._training():
            self._train(x, inputs, outputs, p, eps)
            return
        scale, shift = p.scale, p.shift
        if scale is None:
            scale, shift = _fold(*inputs[1:5], eps, x.dtype)
            scale, shift = scale.reshape(p.shape), shift.reshape(p.shape)
        np.multiply(x, scale, out=y)
        np.add(y, shift, out=y)
        for i, src in ((1, 3), (2, 4), (3, 3), (4, 4)):
            if len(outputs) > i and outputs[i] is not None:
                np.copyto(outputs[i], inputs[src].reshape(outputs[i].shape))

    def _train(self, x, inputs, outputs, p: _Affine, eps: float) -> None:
        axes = (0,) + tuple(range(2, x.ndim))
        mean = x.mean(axis=axes, dtype=np.float64)
        var = x.var(axis=axes, dtype=np.float64)
        scale, bias = (np.asarray(v, np.float64).reshape(-1) for v in inputs[1:3])
        s = scale / np.sqrt(var + eps)
        y = x * s.reshape(p.shape) + (bias - mean * s).reshape(p.shape)
        np.copyto(outputs[0], y, casting="unsafe")
        momentum = self.node.attr("momentum", 0.9)
        if len(outputs) > 1 and outputs[1] is not None:
            run_mean = inputs[3] * momentum + mean * (1 - momentum)
            np.copyto(outputs[1], run_mean.reshape(outputs[1].shape), casting="unsafe")
        if len(outputs) > 2 and outputs[2] is not None:
            run_var = inputs[4] * momentum + var * (1 - momentum)
            np.copyto(outputs[2], run_var.reshape(outputs[2].shape), casting="unsafe")


def _fold(scale, bias, mean, var, eps: float, dtype) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel multiplier and shift, computed in float64 and rounded once."""
    s = np.asarray(scale, np.float64) / np.sqrt(np.asarray(var, np.float64) + eps)
    t = np.asarray(bias, np.float64) - np.asarray(mean, np.float64) * s
    return s.astype(dtype), t.astype(dtype)


class InstanceNormalization(OpKernel):
    def infer(self, ctx: InferContext) -> None:
        x = ctx.shape(0)
        if len(x) < 3:
            raise self.fail(f"X must be (N, C, spatial...), got {list(x)}", "invalid_input")
        ctx.set_output(0, ctx.dtype(0), x)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x, scale, bias = inputs
        axes = tuple(range(2, x.ndim))
        mean = x.mean(axis=axes, keepdims=True)
        var = x.var(axis=axes, keepdims=True)
        shape = (1, -1) + (1,) * (x.ndim - 2)
        eps = x.dtype.type(self.node.attr("epsilon", 1e-5))
        y = (x - mean) / np.sqrt(var + eps) * scale.reshape(shape) + bias.reshape(shape)
        np.copyto(outputs[0], y, casting="unsafe")


class LayerNormalization(OpKernel):
    """Normalises over the axes from ``axis`` on; outputs Mean and InvStdDev optionally."""

    def infer(self, ctx: InferContext) -> None:
        x = ctx.shape(0)
        axis = normalize_axis(self.node.attr("axis", -1), len(x))
        ctx.set_output(0, ctx.dtype(0), x)
        stat = tuple(x[:axis]) + (1,) * (len(x) - axis)
        stash = np.dtype(np.float32) if self.node.attr("stash_type", 1) == 1 else ctx.dtype(0)
        ctx.set_output(1, stash, stat)
        ctx.set_output(2, stash, stat)
        ctx.prepared = axis

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x, scale = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        axes = tuple(range(ctx.prepared, x.ndim))
        stash = np.float32 if self.node.attr("stash_type", 1) == 1 else x.dtype
        xs = x.astype(stash)
        mean = xs.mean(axis=axes, keepdims=True)
        var = ((xs - mean) ** 2).mean(axis=axes, keepdims=True)
        inv = 1 / np.sqrt(var + stash(self.node.attr("epsilon", 1e-5)))
        y = ((xs - mean) * inv).astype(x.dtype) * scale
        if bias is not None:
            y = y + bias
        np.copyto(outputs[0], y, casting="unsafe")
        if len(outputs) > 1 and outputs[1] is not None:
            np.copyto(outputs[1], mean, casting="unsafe")
        if len(outputs) > 2 and outputs[2] is not None:
            np.copyto(outputs[2], inv, casting="unsafe")


class LRN(OpKernel):
    """y = x / (bias + alpha / size * sum of squares over nearby channels) ** beta."""

    def infer(self, ctx: InferContext) -> None:
        x = ctx.shape(0)
        if len(x) < 3:
            raise self.fail(f"X must be (N, C, spatial...), got {list(x)}", "invalid_input")
        if not self.node.attr("size"):
            raise self.fail("size is required")
        ctx.set_output(0, ctx.dtype(0), x)
        dt = ctx.dtype(0)
        size = self.node.attr("size")
        consts = (
            np.array(self.node.attr("alpha", 1e-4) / size, dt),
            np.array(self.node.attr("bias", 1.0), dt),
            np.array(self.node.attr("beta", 0.75), dt),
        )
        ctx.prepared = (ctx.add_scratch(dt, x), ctx.add_scratch(dt, x), consts)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x, y = inputs[0], outputs[0]
        sq_i, acc_i, (alpha, bias, beta) = ctx.prepared
        sq, acc = ctx.scratch[sq_i], ctx.scratch[acc_i]
        np.multiply(x, x, out=sq)
        size = self.node.attr("size")
        before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
        c = x.shape[1]
        np.copyto(acc, sq)
        for off in range(-before, after + 1):
            if off == 0 or abs(off) >= c:
                continue
            if off > 0:
                np.add(acc[:, : c - off], sq[:, off:], out=acc[:, : c - off])
            else:
                np.add(acc[:, -off:], sq[:, : c + off], out=acc[:, -off:])
        np.multiply(acc, alpha, out=acc)
        np.add(acc, bias, out=acc)
        np.power(acc, beta, out=acc)
        np.divide(x, acc, out=y)
