"""QLinearGlobalAveragePool and QLinearAveragePool (NCHW, or NHWC with ``channels_last``).

The global pool sums the codes exactly (int64), as onnxruntime does in int32, then
requantizes ``(sum - n * x_zp) * (x_scale / (y_scale * n))`` in float32, rounded half to even.
The windowed pool dequantizes, runs ops-basic's float AveragePool kernel (every padding and
count_include_pad rule is its) and quantizes the result, as onnxruntime's kernel does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel, evaluate_node
from graphrt_ops_basic.pool import AveragePool

from ._common import F32, Params, check_8bit, f32, quantize


class QLinearGlobalAveragePool(OpKernel):
    """Inputs X, x_scale, x_zero_point, y_scale, y_zero_point."""

    supports_exact = True  # an exact integer sum, then one float32 multiply

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.channels_last = bool(node.attr("channels_last", 0))

    def infer(self, ctx: InferContext) -> None:
        t = check_8bit(self, ctx, 0, 2, 4)
        x = ctx.shape(0)
        if len(x) < 3:
            raise self.fail(f"X must be (N, C, spatial...), got {list(x)}", "invalid_input")
        if self.channels_last:
            out, axes = (x[0], *([1] * (len(x) - 2)), x[-1]), tuple(range(1, len(x) - 1))
        else:
            out, axes = (*x[:2], *([1] * (len(x) - 2))), tuple(range(2, len(x)))
        ctx.set_output(0, t, out)
        ctx.prepared = (Params(self, ctx, (1, 2, 3, 4)), axes, int(np.prod([x[a] for a in axes])))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p, axes, n = ctx.prepared
        sx, zx, sy, zy = (f32(v) for v in p.values(inputs))
        total = np.sum(inputs[0], axis=axes, keepdims=True, dtype=np.int64)
        v = (total - np.int64(zx) * n).astype(F32)
        with np.errstate(all="ignore"):
            np.multiply(v, sx / (sy * np.float32(n)), out=v)
            quantize(v, zy, outputs[0])


_POOL_ATTRS = ("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides")


class QLinearAveragePool(OpKernel):
    """Inputs X, x_scale, x_zero_point, y_scale, y_zero_point; AveragePool's attributes."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.channels_last = bool(node.attr("channels_last", 0))
        attrs = {k: v for k, v in node.attrs.items() if k in _POOL_ATTRS}
        info = dataclasses.replace(
            node, op_type="AveragePool", domain="", opset=19, attrs=attrs, proto=None
        )
        self.pool = AveragePool(info)

    def _float(self, x: np.ndarray) -> np.ndarray:
        if self.channels_last:
            x = np.moveaxis(x, -1, 1)
        y = evaluate_node(self.pool, [np.ascontiguousarray(x)], 1)[0]
        return np.moveaxis(y, 1, -1) if self.channels_last else y

    def infer(self, ctx: InferContext) -> None:
        t = check_8bit(self, ctx, 0, 2, 4)
        x = ctx.shape(0)
        probe = self._float(np.zeros(x, F32))  # the output shape, checked by the float kernel
        ctx.set_output(0, t, probe.shape)
        ctx.prepared = Params(self, ctx, (1, 2, 3, 4))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        sx, zx, sy, zy = (f32(v) for v in ctx.prepared.values(inputs))
        x = (inputs[0].astype(F32) - zx) * sx
        with np.errstate(all="ignore"):
            y = np.asarray(self._float(x), F32) / sy
            quantize(y, zy, outputs[0])
