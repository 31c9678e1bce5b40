"""Shape, Size, ConstantOfShape, Range, Expand: operators computed from shapes and shape values.

Shape and Size depend on the input's shape only, so their outputs are constants of the plan
(``set_constant_output``) and are never scheduled.  ConstantOfShape, Range and Expand take
their output shape from an input's value (``ctx.value``): a constant input keeps the node
static, a run-time one makes it dynamic.  All of them move or fill data without arithmetic
(Range: see its docstring), so they are exact.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel, from_onnx, to_array

from ._util import is_float, same_types
from ._values import int_values


def _clamp_axis(axis: int, rank: int) -> int:
    """Shape's start/end: negative counts from the back, then clamped to [0, rank]."""
    if axis < 0:
        axis += rank
    return min(max(axis, 0), rank)


class Shape(OpKernel):
    """The int64 dims of the input, sliced by ``start``/``end`` from opset 15."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.start = node.attr("start", 0) if node.opset >= 15 else 0
        self.end = node.attr("end") if node.opset >= 15 else None

    def infer(self, ctx: InferContext) -> None:
        dims = ctx.shape(0)
        rank = len(dims)
        start = _clamp_axis(self.start, rank)
        end = rank if self.end is None else _clamp_axis(self.end, rank)
        ctx.set_constant_output(0, np.array(dims[start:end], dtype=np.int64))


class Size(OpKernel):
    """The input's element count as an int64 scalar."""

    supports_exact = True

    def infer(self, ctx: InferContext) -> None:
        ctx.set_constant_output(0, np.array(math.prod(ctx.shape(0)), dtype=np.int64))


class ConstantOfShape(OpKernel):
    """A tensor of the input's shape filled with ``value`` (default float32 0)."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        value = node.attr("value")
        if value is None:
            value = np.zeros((), np.float32)
        elif not isinstance(value, np.ndarray):
            value = to_array(value)
        if value.size != 1:
            raise self.fail(f"value must have exactly one element, got {value.size}")
        # 0-d: np.copyto broadcasts it without converting a scalar on every call
        self.value = value.reshape(()).copy()
        self.value.flags.writeable = False

    def infer(self, ctx: InferContext) -> None:
        dims = int_values(ctx, 0)
        if any(d < 0 for d in dims):
            raise self.fail(f"shape {dims} has a negative dimension", "invalid_input")
        ctx.set_output(0, self.value.dtype, dims)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        np.copyto(outputs[0], self.value)

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        return functools.partial(np.copyto, outputs[0], self.value)


#: Elements Range computes at a time (512 KiB of int64 indices: cache-sized, and its scratch
#: stays small beside an output of any size).
RANGE_CHUNK = 1 << 16


class Range(OpKernel):
    """start + i * delta for i in [0, n), n = max(ceil((limit - start) / delta), 0).

    Integers: n in exact integer arithmetic; each value in T with wrap-around, which is exact
    because every value lies between start and limit.  Floats: n from one float64 subtraction
    and division (every T value is exact in float64; numpy's arange count), each value as
    ``float(i) * delta + start`` in the compute type: two correctly rounded operations per
    element and no accumulation, so the bits are the same everywhere (hence exact).  float16
    and bfloat16 compute in float32 (``stash_type``, opset 27; the wider type earlier too) and
    round once to T.  ``infer`` counts the elements only; ``run`` computes the values into the
    output :data:`RANGE_CHUNK` at a time, so a 1.7 GB Range holds its output and one chunk,
    not an int64 count array, a converted copy and the output (three times the output, held
    again by the plan's ``prepared``).
    """

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        stash = node.attr("stash_type", 1) if node.opset >= 27 else 1
        try:
            self.stash = from_onnx(stash)
        except KeyError:
            raise self.fail(f"stash_type {stash} is not an element type") from None

    def infer(self, ctx: InferContext) -> None:
        same_types(self, ctx, 3)
        dtype = ctx.dtype(0)
        start, limit, delta = (self._scalar(ctx, i) for i in range(3))
        if dtype.kind in "iu":
            s, lim, d = int(start), int(limit), int(delta)
            if d == 0:
                raise self.fail("delta is 0", "invalid_input")
            n = max(-((s - lim) // d), 0)  # ceil((lim - s) / d)
            work = dtype
        elif is_float(dtype):
            q = (float(limit) - float(start)) / float(delta) if float(delta) else math.nan
            if not math.isfinite(q):
                message = f"start {start}, limit {limit}, delta {delta} give no element count"
                raise self.fail(message, "invalid_input")
            n = max(math.ceil(q), 0)
            work = self.stash if dtype.itemsize < 4 and is_float(self.stash) else dtype
        else:
            raise self.fail(f"unsupported element type {dtype}")
        ctx.set_output(0, dtype, (n,))
        chunk = min(n, RANGE_CHUNK)
        ctx.add_scratch(np.int64, (chunk if n > chunk else 0,))  # a later chunk's i
        if work != dtype:
            ctx.add_scratch(work, (chunk,))  # its values before rounding to T
        first = np.arange(chunk, dtype=np.int64)
        ctx.prepared = (start.astype(work), delta.astype(work), first)

    def _scalar(self, ctx: InferContext, i: int) -> np.ndarray:
        v = np.asarray(ctx.value(i))
        if v.size != 1:
            raise self.fail(
                f"input {i} must be a scalar, got shape {list(v.shape)}", "invalid_input"
            )
        return v.reshape(())

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        start, delta, first = ctx.prepared
        i_chunk = ctx.scratch[0]
        work = ctx.scratch[1] if len(ctx.scratch) > 1 else None
        out = outputs[0]
        n = out.shape[0]
        loop = (delta.dtype,) * 3
        for lo in range(0, n, RANGE_CHUNK):  # in place: a steady-state run allocates nothing
            m = min(RANGE_CHUNK, n - lo)
            i = first[:m]
            if lo:
                i = np.add(i, lo, out=i_chunk[:m])
            dst = out[lo : lo + m]
            values = dst if work is None else work[:m]
            # i cast to the compute type first (integers wrap), as astype would
            np.multiply(i, delta, out=values, signature=loop, casting="unsafe")
            np.add(values, start, out=values)
            if work is not None:
                np.copyto(dst, values, casting="unsafe")  # rounded once to T


class Expand(OpKernel):
    """Broadcast the input and the requested shape both ways (a 1 in the shape keeps the
    input's dim), then copy with numpy's broadcasting."""

    supports_exact = True

    def infer(self, ctx: InferContext) -> None:
        requested = int_values(ctx, 1)
        src = ctx.shape(0)
        if any(d < 0 for d in requested):
            raise self.fail(f"shape {requested} has a negative dimension", "invalid_input")
        try:
            shape = np.broadcast_shapes(src, tuple(requested))
        except ValueError:
            message = f"cannot expand shape {list(src)} to {requested}"
            raise self.fail(message, "invalid_input") from None
        ctx.set_output(0, ctx.dtype(0), shape)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        np.copyto(outputs[0], inputs[0])

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        return functools.partial(np.copyto, outputs[0], inputs[0])
