"""QLinearAdd and QLinearMul: 8-bit element-wise arithmetic with numpy broadcasting.

onnxruntime computes both in float32 from the integer differences with scale ratios, then
rounds half to even and adds the output zero point; so do these kernels:

* Add: ``rint(a_scale/c_scale * (a - a_zp) + b_scale/c_scale * (b - b_zp)) + c_zp``;
* Mul: ``rint((a - a_zp) * (b - b_zp) * (a_scale * b_scale / c_scale)) + c_zp``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, OpKernel

from ._common import F32, Params, check_8bit, f32, quantize


class _QLinearBinary(OpKernel):
    """Inputs A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point."""

    supports_exact = True  # element-wise numpy operations, one rounding each

    def infer(self, ctx: InferContext) -> None:
        t = check_8bit(self, ctx, 0, 2, 3, 5, 7)
        try:
            shape = np.broadcast_shapes(ctx.shape(0), ctx.shape(3))
        except ValueError as exc:
            raise self.fail(
                f"A {list(ctx.shape(0))} and B {list(ctx.shape(3))} do not broadcast",
                "invalid_input",
            ) from exc
        ctx.set_output(0, t, shape)
        ctx.prepared = Params(self, ctx, (1, 2, 4, 5, 6, 7))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        sa, za, sb, zb, sc, zc = (f32(v) for v in ctx.prepared.values(inputs))
        # (asarray: numpy returns a 0-d result as a scalar, which cannot be an out=)
        a = np.asarray(np.subtract(inputs[0], za, dtype=F32))
        b = np.asarray(np.subtract(inputs[3], zb, dtype=F32))
        with np.errstate(all="ignore"):
            quantize(self.combine(a, b, sa, sb, sc), zc, outputs[0])

    def combine(self, a: np.ndarray, b: np.ndarray, sa: Any, sb: Any, sc: Any) -> np.ndarray:
        raise NotImplementedError


class QLinearAdd(_QLinearBinary):
    def combine(self, a: np.ndarray, b: np.ndarray, sa: Any, sb: Any, sc: Any) -> np.ndarray:
        np.multiply(a, sa / sc, out=a)
        np.multiply(b, sb / sc, out=b)
        return np.add(a, b, dtype=F32)


class QLinearMul(_QLinearBinary):
    def combine(self, a: np.ndarray, b: np.ndarray, sa: Any, sb: Any, sc: Any) -> np.ndarray:
        v = np.asarray(np.multiply(a, b, dtype=F32))
        np.multiply(v, (sa * sb) / sc, out=v)
        return v
