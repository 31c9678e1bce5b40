"""QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear (every opset: 10 to 28).

The scale and zero point either are scalars (per tensor), a 1-D tensor along ``axis`` (per
axis) or X's shape with ``ceil(D/block_size)`` along ``axis`` (blocked); each is expanded once
to a shape that broadcasts against X (blocks repeated along the axis), in ``infer`` when it is a
constant.

Quantizing divides in float32 (float64 for double): a float16 or bfloat16 precision (the scale's
type, or ``precision``) rounds the operands and the quotient to it, which float32 does exactly
for these types (its 24 bits are at least twice their significands plus two).  Integer targets
round half to even (``rint``), add the zero point and clip to the type's range; float targets
(float8, float4, float6) add the zero point and convert, clamping to the largest finite value
first when saturating (always for float4 and float6, which hold no infinity).  Dequantizing is
``(x - zero point) * scale`` in float32 (float64 for double), rounded once to the output type.

Every step is an element-wise numpy call or a min/max reduction, so results are the same bits
whatever the thread count: the kernels support exact mode as they are.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel, TensorProto

from ._util import constant, rewrite_nan

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
F16 = np.dtype(np.float16)
#: Integer range of each target the quantizers clip to, by dtype name.
_INT_RANGES = {
    "int8": (-128, 127),
    "uint8": (0, 255),
    "int16": (-32768, 32767),
    "uint16": (0, 65535),
    "int32": (-(2**31), 2**31 - 1),
    "int4": (-8, 7),
    "uint4": (0, 15),
    "int2": (-2, 1),
    "uint2": (0, 3),
}
#: Float targets that hold an infinity or NaN code, so ``saturate=0`` means something for them.
_FLOAT8 = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")


def onnx_dtype(code: int) -> np.dtype | None:
    """numpy dtype of an ONNX element type code (ml_dtypes' types included), None if none."""
    from .cast import onnx_to_numpy

    return onnx_to_numpy(int(code))


def int_range(dtype: np.dtype) -> tuple[int, int] | None:
    """The integer range of a quantized type, None for float targets."""
    return _INT_RANGES.get(np.dtype(dtype).name)


def work_type(dtype: np.dtype) -> np.dtype:
    """float64 for double, float32 for everything else (exact for every narrower type)."""
    return F64 if np.dtype(dtype) == F64 else F32


def float_max(dtype: np.dtype) -> float:
    import ml_dtypes  # a float target other than float32/64 is an ml_dtypes type

    return float(ml_dtypes.finfo(dtype).max)


def param_layout(
    kernel: OpKernel,
    x_shape: Sequence[int],
    p_shape: Sequence[int],
    axis: int,
    block: int,
) -> tuple[str, int]:
    """("tensor" | "axis" | "blocked", normalized axis) for a scale of shape ``p_shape``."""
    rank = len(x_shape)
    if len(p_shape) == 0 or (len(p_shape) == 1 and p_shape[0] == 1 and block <= 0):
        return "tensor", 0
    if not -rank <= axis < max(rank, 1):
        raise kernel.fail(f"axis {axis} is out of range for rank {rank}", "invalid_input")
    axis %= max(rank, 1)
    if block <= 0:
        if len(p_shape) != 1 or p_shape[0] != x_shape[axis]:
            raise kernel.fail(
                f"a per-axis scale must have shape [{x_shape[axis]}] (axis {axis} of "
                f"{list(x_shape)}), got {list(p_shape)}",
                "invalid_input",
            )
        return "axis", axis
    want = list(x_shape)
    want[axis] = -(-x_shape[axis] // block)
    if list(p_shape) != want:
        raise kernel.fail(
            f"a blocked scale for X {list(x_shape)}, axis {axis}, block_size {block} must have "
            f"shape {want}, got {list(p_shape)}",
            "invalid_input",
        )
    return "blocked", axis


def expand(
    p: np.ndarray, x_shape: Sequence[int], layout: tuple[str, int], block: int, dtype: np.dtype
) -> np.ndarray:
    """The parameter in ``dtype`` with a shape broadcasting against X (a 0-d array per tensor)."""
    how, axis = layout
    p = np.asarray(p)
    if how == "tensor":
        out = np.array(p.reshape(()) if p.size == 1 else p, dtype=dtype)
    elif how == "axis":
        shape = [1] * len(x_shape)
        shape[axis] = x_shape[axis]
        out = np.ascontiguousarray(p.reshape(shape), dtype=dtype)
    else:
        rep = np.repeat(p.astype(dtype), block, axis=axis)
        out = np.ascontiguousarray(rep[(slice(None),) * axis + (slice(0, x_shape[axis]),)])
    out.flags.writeable = False
    return out


def _type_attr(kernel: OpKernel, name: str) -> np.dtype | None:
    code = kernel.node.attr(name, 0)
    if not code:
        return None
    dtype = onnx_dtype(code)
    if dtype is None:
        known = code in TensorProto.DataType.values()
        label = TensorProto.DataType.Name(code) if known else code
        raise kernel.fail(f"{name} {label} has no numpy type", "unsupported")
    return dtype


@dataclasses.dataclass(frozen=True)
class _QPlan:
    layout: tuple[str, int]
    scale: np.ndarray | None  # expanded, in the work type, when constant
    zero: np.ndarray | None  # expanded, in the work type, when constant (None: no zero point)
    narrow: np.dtype | None  # float16/bfloat16 precision the quotient is rounded to
    tmp: int  # scratch: X in the work type
    rounded: int | None  # scratch: X in the narrow precision (Dequantize: exact mode's NaN mask)


class _Linear(OpKernel):
    """What QuantizeLinear and DequantizeLinear share: attributes and parameter expansion."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.axis = int(node.attr("axis", 1)) if node.opset >= 13 else 1
        self.block = int(node.attr("block_size", 0)) if node.opset >= 21 else 0
        if self.block < 0:
            raise self.fail(f"block_size must be >= 0, got {self.block}")
        self.output_dtype = _type_attr(self, "output_dtype") if node.opset >= 21 else None

    def _params(
        self, ctx: InferContext, dtype: np.dtype
    ) -> tuple[tuple[str, int], np.ndarray | None, np.ndarray | None]:
        x, s = ctx.shape(0), ctx.shape(1)
        layout = param_layout(self, x, s, self.axis, self.block)
        z = ctx.shape(2) if ctx.has_input(2) else s
        if z != s and not (math.prod(z) == 1 and layout[0] == "tensor"):
            raise self.fail(
                f"the zero point's shape {list(ctx.shape(2))} is not the scale's {list(s)}",
                "invalid_input",
            )
        scale = ctx.known_value(1)
        zero = ctx.known_value(2) if ctx.has_input(2) else None
        if scale is not None:
            scale = expand(scale, x, layout, self.block, dtype)
        if zero is not None:
            zero = expand(zero, x, layout, self.block, dtype)
        return layout, scale, zero

    def _run_params(
        self, ctx: KernelContext, inputs: Sequence[Any], dtype: np.dtype
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Scale and zero point for this run; run-time values are expanded here (allocates)."""
        p: _QPlan = ctx.prepared
        x = inputs[0]
        scale = p.scale
        if scale is None:
            scale = expand(inputs[1], x.shape, p.layout, self.block, dtype)
        zero = p.zero
        if zero is None and len(inputs) > 2 and inputs[2] is not None:
            zero = expand(inputs[2], x.shape, p.layout, self.block, dtype)
        return scale, zero


class QuantizeLinear(_Linear):
    """y = saturate(round(x / scale) + zero_point), to the zero point's (or output_dtype's) type."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.saturate = bool(node.attr("saturate", 1)) if node.opset >= 19 else True
        self.precision = _type_attr(self, "precision")

    def infer(self, ctx: InferContext) -> None:
        x_type = ctx.dtype(0)
        if x_type != np.dtype(np.int32) and x_type.kind != "f" and x_type.name != "bfloat16":
            raise self.fail(f"X must be a float tensor or int32, got {x_type}", "invalid_input")
        zp_type = ctx.dtype(2) if ctx.has_input(2) else None
        out = self.output_dtype or zp_type or np.dtype(np.uint8)
        if zp_type is not None and zp_type != out:
            raise self.fail(f"output_dtype {out} is not the zero point's type {zp_type}")
        if int_range(out) is None and not out.name.startswith(("float8", "float4", "float6")):
            raise self.fail(f"cannot quantize to {out}", "unsupported")
        ctx.set_output(0, out, ctx.shape(0))
        precision = self.precision or ctx.dtype(1)
        wt = work_type(precision)
        narrow = precision if precision not in (F32, F64) else None
        layout, scale, zero = self._params(ctx, wt)
        if narrow is not None and scale is not None:
            scale = _through(scale, narrow)
        tmp = ctx.add_scratch(wt, ctx.shape(0))
        rounded = ctx.add_scratch(narrow, ctx.shape(0)) if narrow is not None else None
        ctx.prepared = _QPlan(layout, scale, zero, narrow, tmp, rounded)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _QPlan = ctx.prepared
        x, y = inputs[0], outputs[0]
        tmp = ctx.scratch[p.tmp]
        scale, zero = self._run_params(ctx, inputs, tmp.dtype)
        with np.errstate(all="ignore"):  # NaN and infinities: clipped or undefined in ONNX
            if p.narrow is not None:
                if p.scale is None:
                    scale = _through(scale, p.narrow)
                narrow = ctx.scratch[p.rounded]
                np.copyto(narrow, x, casting="unsafe")
                np.copyto(tmp, narrow)
                np.divide(tmp, scale, out=tmp)
                np.copyto(narrow, tmp, casting="unsafe")
                np.copyto(tmp, narrow)
            elif x.dtype.kind == "f" and x.dtype.itemsize <= tmp.dtype.itemsize:
                np.divide(x, scale, out=tmp, casting="unsafe")
            else:  # int32 X (opset 25+): converted to the work type first, then divided there
                np.copyto(tmp, x, casting="unsafe")
                np.divide(tmp, scale, out=tmp)
            quantize_into(tmp, zero, y, self.saturate)


def quantize_into(tmp: np.ndarray, zero: np.ndarray | None, y: np.ndarray, saturate: bool) -> None:
    """y = saturate(round(tmp) + zero) for integer targets; for float targets y = tmp + zero,
    clamped to the finite range when saturating; ``tmp`` (the quotient) is overwritten."""
    bounds = int_range(y.dtype)
    wt = tmp.dtype
    if bounds is not None:
        np.rint(tmp, out=tmp)
        if zero is not None:
            np.add(tmp, zero, out=tmp)
        saturate_int(tmp, constant(wt, bounds[0]), constant(wt, bounds[1]))
        np.copyto(y, tmp, casting="unsafe")
        return
    if zero is not None:
        np.add(tmp, zero, out=tmp)
    if saturate or y.dtype.name not in _FLOAT8:
        top = float_max(y.dtype)
        np.clip(tmp, constant(wt, -top), constant(wt, top), out=tmp)
    np.copyto(y, tmp, casting="unsafe")


def saturate_int(v: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> None:
    """Clip ``v`` to [lo, hi] in place; NaN becomes ``lo`` (onnxruntime's result, and a defined
    one: converting NaN to an integer is undefined in C)."""
    np.fmax(v, lo, out=v)
    np.fmin(v, hi, out=v)


def _through(a: np.ndarray, narrow: np.dtype) -> np.ndarray:
    """``a`` rounded to the narrow precision and back (a read-only array of a's type)."""
    out = a.astype(narrow).astype(a.dtype)
    out.flags.writeable = False
    return out


class DequantizeLinear(_Linear):
    """y = (x - zero_point) * scale, in the scale's (or output_dtype's) type."""

    def infer(self, ctx: InferContext) -> None:
        x_type = ctx.dtype(0)
        if ctx.has_input(2) and ctx.dtype(2) != x_type:
            raise self.fail(f"the zero point's type {ctx.dtype(2)} is not X's {x_type}")
        out = self.output_dtype or ctx.dtype(1)
        if out.name == "float8_e8m0fnu":
            raise self.fail("a float8e8m0 scale needs output_dtype", "invalid_model")
        ctx.set_output(0, out, ctx.shape(0))
        wt = work_type(out)
        layout, scale, zero = self._params(ctx, wt)
        tmp = ctx.add_scratch(wt, ctx.shape(0))
        mask = ctx.add_scratch(np.bool_, ctx.shape(0)) if ctx.exact else None
        ctx.prepared = _QPlan(layout, scale, zero, None, tmp, mask)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _QPlan = ctx.prepared
        x, y = inputs[0], outputs[0]
        tmp = ctx.scratch[p.tmp]
        scale, zero = self._run_params(ctx, inputs, tmp.dtype)
        np.copyto(tmp, x, casting="unsafe")
        if zero is not None:
            np.subtract(tmp, zero, out=tmp)
        np.multiply(tmp, scale, out=tmp)
        np.copyto(y, tmp, casting="unsafe")
        if p.rounded is not None and y.dtype in (F32, F64, F16):  # exact mode: canonical NaN
            rewrite_nan(y, ctx.scratch[p.rounded])


@dataclasses.dataclass(frozen=True)
class _DynPlan:
    tmp: int  # scratch: x / scale in float32
    stats: int  # scratch: min, max, scale, zero point (float32), so a run allocates nothing


class DynamicQuantizeLinear(OpKernel):
    """uint8 quantization of float32 X with a scale and zero point from X's range (0 included).

    scale = (max(0, max X) - min(0, min X)) / 255, zero point = round(clip(-min / scale,
    0, 255)), then X is quantized as QuantizeLinear does.  An all-zero (or empty) X gives scale
    1, zero point 0 and Y 0, as onnxruntime does (the formula's 0 would make every later
    division by the scale NaN; onnx's reference takes 1/255).
    """

    supports_exact = True

    def infer(self, ctx: InferContext) -> None:
        if ctx.dtype(0) != F32:
            raise self.fail(f"X must be float32, got {ctx.dtype(0)}", "invalid_input")
        ctx.set_output(0, np.uint8, ctx.shape(0))
        ctx.set_output(1, F32, ())
        ctx.set_output(2, np.uint8, ())
        ctx.prepared = _DynPlan(ctx.add_scratch(F32, ctx.shape(0)), ctx.add_scratch(F32, (4,)))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x = inputs[0]
        y, y_scale, y_zero = outputs[0], outputs[1], outputs[2]
        p: _DynPlan = ctx.prepared
        tmp, stats = ctx.scratch[p.tmp], ctx.scratch[p.stats]
        lo, hi, scale, zero = (stats[i : i + 1].reshape(()) for i in range(4))
        zero_f, top = constant(F32, 0), constant(F32, 255)
        if x.size:
            np.minimum.reduce(x, axis=None, out=lo)
            np.maximum.reduce(x, axis=None, out=hi)
            np.fmin(lo, zero_f, out=lo)  # the range includes 0 (fmin/fmax: NaN ignored)
            np.fmax(hi, zero_f, out=hi)
        else:
            stats.fill(0)
        with np.errstate(all="ignore"):
            np.subtract(hi, lo, out=scale)
            np.divide(scale, top, out=scale)
            if scale.item() == 0 or not math.isfinite(scale.item()):
                y_scale.fill(1 if scale.item() == 0 else scale.item())
                y_zero.fill(0)
                y.fill(0)
                return
            np.divide(lo, scale, out=zero)
            np.subtract(zero_f, zero, out=zero)
            saturate_int(zero, zero_f, top)
            np.rint(zero, out=zero)
            np.copyto(y_scale, scale)
            np.copyto(y_zero, zero, casting="unsafe")
            np.divide(x, scale, out=tmp)
            np.rint(tmp, out=tmp)
            np.add(tmp, zero, out=tmp)
            saturate_int(tmp, zero_f, top)
        np.copyto(y, tmp, casting="unsafe")
