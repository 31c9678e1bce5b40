"""QLinearSoftmax: softmax of the dequantized input, quantized to the output's scale.

onnxruntime tabulates exp((code - max code) * x_scale) in fixed point and divides by the
row's sum; the float64 evaluation here is within one output unit of it (the softmax of
quantized values depends only on the code differences, so x_zero_point does not enter).
``opset`` < 13 coerces the input to 2-D at ``axis`` (softmax over every later axis).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._common import F32, Params, check_8bit, f32, quantize


class QLinearSoftmax(OpKernel):
    """Inputs X, X_scale, x_zero_point, y_scale, y_zero_point; attributes axis, opset."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.opset = int(node.attr("opset", 13))
        self.axis = int(node.attr("axis", -1 if self.opset >= 13 else 1))

    def infer(self, ctx: InferContext) -> None:
        t = check_8bit(self, ctx, 0, 2, 4)
        rank = len(ctx.shape(0))
        if not -rank <= self.axis < max(rank, 1):
            raise self.fail(f"axis {self.axis} is out of range for rank {rank}", "invalid_input")
        ctx.set_output(0, t, ctx.shape(0))
        ctx.prepared = (Params(self, ctx, (1, 2, 3, 4)), self.axis % max(rank, 1))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p, axis = ctx.prepared
        sx, _, sy, zy = (f32(v) for v in p.values(inputs))
        x = inputs[0]
        axes: Any = axis if self.opset >= 13 else tuple(range(axis, x.ndim))
        v = x.astype(np.float64)
        v -= v.max(axis=axes, keepdims=True)
        np.exp(v * float(sx), out=v)
        v /= v.sum(axis=axes, keepdims=True)
        y = (v / float(sy)).astype(F32)
        quantize(y, zy, outputs[0])
