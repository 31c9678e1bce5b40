"""QLinearSigmoid and QLinearLeakyRelu: f(dequantize(x)) quantized, through a 256-entry table.

onnxruntime builds the same table (every input code dequantized, f applied in float32,
quantized half to even); it is built once in ``infer`` when the scales and zero points are
constants, else per run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._common import F32, Params, check_8bit, f32, quantize, table_lookup


def build_table(
    dtype: np.dtype, x_scale: Any, x_zero: Any, y_scale: Any, y_zero: Any, fn: Any
) -> np.ndarray:
    """table[code] = quantize(fn(dequantize(code))), indexed by the code's bits as uint8."""
    codes = np.arange(256, dtype=np.uint8).view(dtype)
    v = (codes.astype(F32) - f32(x_zero)) * f32(x_scale)
    with np.errstate(all="ignore"):
        v = np.asarray(fn(v), F32) / f32(y_scale)
        out = np.empty(256, dtype)
        quantize(v.astype(F32), f32(y_zero), out)
    return out


class _Lookup(OpKernel):
    """Inputs X, X_scale, X_zero_point, Y_scale, Y_zero_point."""

    def fn(self, v: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def infer(self, ctx: InferContext) -> None:
        t = check_8bit(self, ctx, 0, 2, 4)
        ctx.set_output(0, t, ctx.shape(0))
        p = Params(self, ctx, (1, 2, 3, 4))
        table = build_table(t, *p.known, self.fn) if p.all_known else None
        ctx.prepared = (p, t, table)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p, t, table = ctx.prepared
        if table is None:
            table = build_table(t, *p.values(inputs), self.fn)
        table_lookup(inputs[0], table, outputs[0])


class QLinearSigmoid(_Lookup):
    def fn(self, v: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-v))


class QLinearLeakyRelu(_Lookup):
    supports_exact = True  # a table of one multiply each (Sigmoid's exp is not exact: no flag)

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.alpha = np.float32(node.attr("alpha", 0.01))

    def fn(self, v: np.ndarray) -> np.ndarray:
        return np.where(v >= 0, v, v * self.alpha)
