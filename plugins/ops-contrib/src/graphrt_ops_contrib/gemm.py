"""QGemm, MatMulIntegerToFloat and DynamicQuantizeMatMul: ops-basic's exact integer product
(``qmatmul._IntegerProduct``: the integer sums through float BLAS, exact by its bounds), then
onnxruntime's output stage.

* QGemm: ``acc = (A' - a_zp) @ (B' - b_zp) + C`` (int32 C added exactly, before any scale,
  as onnxruntime adds it to its int32 sums), then ``float32(acc) * (alpha * a_scale *
  b_scale / y_scale)`` requantized half to even, or, without y_scale, ``float32(acc) * (alpha
  * a_scale * b_scale)`` as float32.  b_scale and b_zero_point are per tensor or per column.
* MatMulIntegerToFloat: ``float32(acc) * (a_scale * b_scale) + bias``.
* DynamicQuantizeMatMul: A quantized to uint8 by ops-basic's DynamicQuantizeLinear (the same
  range rule onnxruntime uses), then as MatMulIntegerToFloat.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, evaluate_node
from graphrt_ops_basic.qmatmul import _IntegerProduct, matmul_shapes
from graphrt_ops_basic.quantize import DynamicQuantizeLinear

from ._common import F32, INT8_TYPES, f32, quantize

F64 = np.dtype(np.float64)


class _View:
    """The InferContext the integer product plans on: some inputs seen with another type,
    shape or value (a transposed operand, the uint8 codes of a float input); scratch goes to
    the real context."""

    exact = False

    def __init__(self, ctx: InferContext, over: dict[int, tuple[Any, Any, Any]]) -> None:
        self._ctx, self._over = ctx, over

    @property
    def num_inputs(self) -> int:
        return max(self._ctx.num_inputs, *(i + 1 for i in self._over))

    def has_input(self, i: int) -> bool:
        return i in self._over or self._ctx.has_input(i)

    def dtype(self, i: int) -> np.dtype:
        return np.dtype(self._over[i][0]) if i in self._over else self._ctx.dtype(i)

    def shape(self, i: int) -> tuple[int, ...]:
        return tuple(self._over[i][1]) if i in self._over else self._ctx.shape(i)

    def known_value(self, i: int) -> np.ndarray | None:
        return self._over[i][2] if i in self._over else self._ctx.known_value(i)

    def add_scratch(self, dtype: Any, shape: Sequence[int]) -> int:
        return self._ctx.add_scratch(dtype, shape)


def _transposed(ctx: InferContext, i: int) -> tuple[Any, Any, Any]:
    shape = ctx.shape(i)
    if len(shape) != 2:
        raise ValueError(f"input {i} must be 2-D, got {list(shape)}")
    value = ctx.known_value(i)
    return ctx.dtype(i), shape[::-1], None if value is None else value.T


def _to_f32(acc: np.ndarray) -> np.ndarray:
    return acc if acc.dtype == F32 else acc.astype(F32)


class QGemm(_IntegerProduct):
    """Inputs A, a_scale, a_zero_point, B, b_scale, b_zero_point, C (int32), y_scale,
    y_zero_point; attributes alpha, transA, transB."""

    A, AZ, B, BZ = 0, 2, 3, 5

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.alpha = float(node.attr("alpha", 1.0))
        self.trans_a = bool(node.attr("transA", 0))
        self.trans_b = bool(node.attr("transB", 0))

    def infer(self, ctx: InferContext) -> None:
        over = {}
        try:
            if self.trans_a:
                over[0] = _transposed(ctx, 0)
            if self.trans_b:
                over[3] = _transposed(ctx, 3)
        except ValueError as exc:
            raise self.fail(str(exc), "invalid_input") from exc
        view = _View(ctx, over)
        if len(view.shape(0)) != 2 or len(view.shape(3)) != 2:
            raise self.fail("A and B must be 2-D", "invalid_input")
        p = self.prepare_product(view)
        _, _, full, _ = matmul_shapes(self, view.shape(0), view.shape(3))
        quantized = ctx.num_inputs > 7 and ctx.has_input(7)
        if quantized:
            out_type = ctx.dtype(8) if ctx.num_inputs > 8 and ctx.has_input(8) else ctx.dtype(0)
            if out_type not in INT8_TYPES:
                raise self.fail(f"y_zero_point must be int8 or uint8, got {out_type}")
        else:
            out_type = F32
        ctx.set_output(0, out_type, full)
        bias = ctx.num_inputs > 6 and ctx.has_input(6)
        if bias:
            try:
                np.broadcast_shapes(ctx.shape(6), full)
            except ValueError as exc:
                raise self.fail(
                    f"C {list(ctx.shape(6))} does not broadcast to {list(full)}"
                ) from exc
        known = [ctx.known_value(i) if ctx.has_input(i) else None for i in (1, 4, 7)]
        scale = None
        if all(k is not None for k in known[:2]) and (not quantized or known[2] is not None):
            scale = self._scale(*known)
        ctx.prepared = dataclasses.replace(p, scales=(scale, bias, quantized))

    def _scale(self, a_scale: Any, b_scale: Any, y_scale: Any) -> np.ndarray:
        s = f32(self.alpha) * f32(a_scale) * f32(b_scale).reshape(-1)
        if s.size == 1:
            s = s.reshape(())
        return (s / f32(y_scale) if y_scale is not None else s).astype(F32)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p = ctx.prepared
        scale, bias, quantized = p.scales
        ins = list(inputs)
        if self.trans_a:
            ins[0] = inputs[0].T
        if self.trans_b:
            ins[3] = inputs[3].T
        acc = self.product(ctx, p, ins)
        if bias:
            acc = _to_f32(acc.astype(F64) + inputs[6])  # exact integers, rounded once
        else:
            acc = acc.astype(F32)  # a copy: the product's scratch is not ours to scale
        if scale is None:
            scale = self._scale(inputs[1], inputs[4], inputs[7] if quantized else None)
        with np.errstate(all="ignore"):
            np.multiply(acc, scale, out=acc)
            if quantized:
                zero = inputs[8] if len(inputs) > 8 and inputs[8] is not None else 0
                quantize(acc, f32(zero), outputs[0])
            else:
                np.copyto(outputs[0], acc)


def _broadcasts_to(shape: Sequence[int], target: tuple[int, ...]) -> bool:
    try:
        return np.broadcast_shapes(tuple(shape), target) == target
    except ValueError:
        return False


class MatMulIntegerToFloat(_IntegerProduct):
    """Inputs A, B, a_scale, b_scale, a_zero_point, b_zero_point, bias (float)."""

    A, AZ, B, BZ = 0, 4, 1, 5

    def infer(self, ctx: InferContext) -> None:
        self.plan_float(ctx, ctx, 2, 3, 6)

    def plan_float(self, view: Any, ctx: InferContext, sa: int, sb: int, bias: int) -> None:
        p = self.prepare_product(view)
        b_shape = view.shape(self.B)
        out = matmul_shapes(self, view.shape(self.A), b_shape)[3]
        # per tensor, or per column of B (a 1-D B has one column); the bias broadcasts to Y
        columns = b_shape[-1] if len(b_shape) >= 2 else 1
        if math.prod(ctx.shape(sb)) not in (1, columns):
            raise self.fail(
                f"b_scale {list(ctx.shape(sb))} must hold 1 value or one per column of B "
                f"({columns})",
                "invalid_input",
            )
        if ctx.has_input(bias) and not _broadcasts_to(ctx.shape(bias), tuple(out)):
            raise self.fail(
                f"bias {list(ctx.shape(bias))} does not broadcast to Y {list(out)}",
                "invalid_input",
            )
        out_type = ctx.dtype(sb)
        ctx.set_output(0, out_type, out)
        ctx.prepared = dataclasses.replace(p, scales=(sa, sb, bias, tuple(out)))

    def finish(
        self, scales: tuple, acc: np.ndarray, a_scale: Any, inputs: Sequence[Any], outputs: Any
    ) -> None:
        """Y = float32(acc) * (a_scale * b_scale) [+ bias]."""
        _, sb, bias, out = scales
        v = acc.astype(F32)
        with np.errstate(all="ignore"):
            np.multiply(v, f32(a_scale) * np.asarray(inputs[sb], F32), out=v)
            if len(inputs) > bias and inputs[bias] is not None:
                np.add(v, inputs[bias], out=v)
        np.copyto(outputs[0], v.reshape(out), casting="unsafe")

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p = ctx.prepared
        acc = self.product(ctx, p, inputs)
        self.finish(p.scales, acc, inputs[p.scales[0]], inputs, outputs)


class DynamicQuantizeMatMul(MatMulIntegerToFloat):
    """Inputs A (float32), B, b_scale, b_zero_point, bias."""

    #: the product reads [A codes, B, -, b_zero_point, -, A's zero point]
    A, AZ, B, BZ = 0, 5, 1, 3

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        info = dataclasses.replace(
            node, op_type="DynamicQuantizeLinear", domain="", opset=11, attrs={}, proto=None
        )
        self.dql = DynamicQuantizeLinear(info)

    def infer(self, ctx: InferContext) -> None:
        if ctx.dtype(0) != F32:
            raise self.fail(f"A must be float32, got {ctx.dtype(0)}", "invalid_input")
        view = _View(ctx, {0: (np.uint8, ctx.shape(0), None), 5: (np.uint8, (), None)})
        self.plan_float(view, ctx, -1, 2, 4)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p = ctx.prepared
        codes, a_scale, a_zero = evaluate_node(self.dql, [inputs[0]], 3)
        bz = inputs[3] if len(inputs) > 3 else None
        acc = self.product(ctx, p, [codes, inputs[1], None, bz, None, a_zero])
        self.finish(p.scales, acc, a_scale, inputs, outputs)
