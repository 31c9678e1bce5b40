"""Concat, Split, Transpose, Tile: operators that rearrange whole tensors.

Each writes into the planned output arrays with one numpy copy per output; ``bind`` builds the
source views (a transposed or sliced input, a tiled output view) once per run state, so a static
step is one ``np.copyto`` call.  Pure data movement: exact in both modes.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._util import same_types
from ._values import axis_in, int_scalar, int_values, reshaped


class Concat(OpKernel):
    """np.concatenate into the output; ``axis`` defaults to 1 before opset 4, required after.

    Every input must have the same rank, and all dims but the axis's must agree, except that
    an input without elements may differ in them: it adds nothing and is left out (as in
    onnxruntime; exporters produce such inputs in shape computations).
    """

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        axis = node.attr("axis", 1 if node.opset < 4 else None)
        if axis is None:
            raise self.fail("the axis attribute is required")
        self.axis = axis

    def infer(self, ctx: InferContext) -> None:
        if ctx.num_inputs == 0:
            raise self.fail("needs at least one input")
        same_types(self, ctx, ctx.num_inputs)
        shapes = [ctx.shape(i) for i in range(ctx.num_inputs)]
        ref = next((s for s in shapes if 0 not in s), shapes[0])
        if len(ref) == 0:
            raise self.fail("0-d tensors cannot be concatenated", "invalid_input")
        axis = axis_in(self, self.axis, len(ref))
        fits = [all(a == b for k, (a, b) in enumerate(zip(s, ref)) if k != axis) for s in shapes]
        ranks_agree = all(len(s) == len(ref) for s in shapes)
        if not ranks_agree or not all(ok or 0 in s for ok, s in zip(fits, shapes)):
            message = f"shapes {[list(s) for s in shapes]} differ in rank or outside axis {axis}"
            raise self.fail(message, "invalid_input")
        used = tuple(i for i, ok in enumerate(fits) if ok)
        out = list(ref)
        out[axis] = sum(shapes[i][axis] for i in used)
        ctx.set_output(0, ctx.dtype(0), out)
        ctx.prepared = (axis, used)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        axis, used = ctx.prepared
        np.concatenate([inputs[i] for i in used], axis=axis, out=outputs[0])

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        axis, used = ctx.prepared
        parts = tuple(inputs[i] for i in used)
        return functools.partial(np.concatenate, parts, axis=axis, out=outputs[0])

    def assembled_offsets(
        self, input_shapes: Sequence[tuple[int, ...]], output_shape: tuple[int, ...]
    ) -> list[int] | None:
        """With only unit dimensions before the axis (a batch of one, channels), each input is
        one contiguous run of the output; empty inputs are left to the kernel."""
        axis = self.axis + len(output_shape) if self.axis < 0 else self.axis
        if not 0 <= axis < len(output_shape) or math.prod(output_shape[:axis]) != 1:
            return None
        sizes = [math.prod(s) for s in input_shapes]
        if 0 in sizes or sum(sizes) != math.prod(output_shape):
            return None
        return [sum(sizes[:i]) for i in range(len(sizes))]


class Transpose(OpKernel):
    """A copy of the input's transposed view; ``perm`` defaults to the reversed axes."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        perm = node.attr("perm")
        self.perm = None if perm is None else tuple(perm)

    def infer(self, ctx: InferContext) -> None:
        shape = ctx.shape(0)
        rank = len(shape)
        perm = tuple(range(rank - 1, -1, -1)) if self.perm is None else self.perm
        if sorted(perm) != list(range(rank)):
            raise self.fail(f"perm {list(perm)} is not a permutation of {rank} axes")
        ctx.set_output(0, ctx.dtype(0), [shape[p] for p in perm])
        ctx.prepared = perm

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        np.copyto(outputs[0], inputs[0].transpose(ctx.prepared))

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        return functools.partial(np.copyto, outputs[0], inputs[0].transpose(ctx.prepared))


class Split(OpKernel):
    """Consecutive parts along ``axis``; every opset's way of giving their lengths.

    Lengths come from the ``split`` attribute (opsets 1-12), the ``split`` input (opset 1 and
    13+), or are equal: the extent must divide evenly before opset 18; from 18 ``num_outputs``
    parts of ceil(extent / n), the last ones shorter (possibly empty).  ``prepared`` holds one
    index tuple per output.
    """

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.axis = node.attr("axis", 0)
        split = node.attr("split") if node.opset < 13 else None
        self.split = None if split is None else list(split)
        self.num_outputs = node.attr("num_outputs") if node.opset >= 18 else None
        if self.num_outputs is not None and self.num_outputs != len(node.outputs):
            message = f"num_outputs is {self.num_outputs} but the node has {len(node.outputs)}"
            raise self.fail(message)

    def infer(self, ctx: InferContext) -> None:
        shape = ctx.shape(0)
        axis = axis_in(self, self.axis, len(shape))
        extent = shape[axis]
        n = ctx.num_outputs
        sizes, kind = self._sizes(ctx, extent, n)
        if len(sizes) != n or any(s < 0 for s in sizes) or sum(sizes) != extent:
            message = f"split {sizes} does not cut an extent of {extent} into {n} parts"
            raise self.fail(message, kind)
        lead = (slice(None),) * axis
        index = []
        offset = 0
        for i, size in enumerate(sizes):
            ctx.set_output(i, ctx.dtype(0), shape[:axis] + (size,) + shape[axis + 1 :])
            index.append(lead + (slice(offset, offset + size),))
            offset += size
        ctx.prepared = tuple(index)

    def _sizes(self, ctx: InferContext, extent: int, n: int) -> tuple[list[int], str]:
        if self.split is not None:
            return self.split, "invalid_model"
        if ctx.has_input(1):
            return int_values(ctx, 1), "invalid_input"
        if self.num_outputs is not None:
            chunk = -(-extent // n)
            return [min(chunk, max(extent - i * chunk, 0)) for i in range(n)], "invalid_input"
        if extent % n:
            raise self.fail(
                f"an extent of {extent} does not split into {n} equal parts", "invalid_input"
            )
        return [extent // n] * n, "invalid_input"

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x = inputs[0]
        for out, index in zip(outputs, ctx.prepared):
            if out is not None:
                np.copyto(out, x[index])

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        x = inputs[0]
        pairs = tuple((out, x[i]) for out, i in zip(outputs, ctx.prepared) if out is not None)
        return functools.partial(_copy_pairs, pairs)


def _copy_pairs(pairs: tuple[tuple[np.ndarray, np.ndarray], ...]) -> None:
    for dst, src in pairs:
        np.copyto(dst, src)


class Tile(OpKernel):
    """out[..., r_k * d_k + j, ...] = x[..., j, ...]: one broadcasting copy.

    The output viewed as (r0, d0, r1, d1, ...) receives the input viewed as (1, d0, 1, d1, ...),
    so nothing is allocated.  Opset 1 repeats ``tiles`` times along ``axis`` (both inputs);
    opset 6 takes one repeat count per axis.
    """

    supports_exact = True

    def infer(self, ctx: InferContext) -> None:
        shape = ctx.shape(0)
        rank = len(shape)
        if self.node.opset < 6:
            tiles = int_scalar(self, ctx, 1, "tiles")
            axis = axis_in(self, int_scalar(self, ctx, 2, "axis"), rank, "invalid_input")
            repeats = [tiles if k == axis else 1 for k in range(rank)]
        else:
            repeats = int_values(ctx, 1)
        if len(repeats) != rank or any(r < 0 for r in repeats):
            message = f"repeats {repeats} must be {rank} counts >= 0"
            raise self.fail(message, "invalid_input")
        ctx.set_output(0, ctx.dtype(0), [d * r for d, r in zip(shape, repeats)])
        tiled = tuple(v for d, r in zip(shape, repeats) for v in (r, d))
        source = tuple(v for d in shape for v in (1, d))
        ctx.prepared = (tiled, source)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        tiled, source = ctx.prepared
        np.copyto(reshaped(outputs[0], tiled), inputs[0].reshape(source))

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        tiled, source = ctx.prepared
        return functools.partial(np.copyto, reshaped(outputs[0], tiled), inputs[0].reshape(source))
