"""MaxUnpool: scatter each value of X to the flat position its index names; zeros elsewhere.

The indices are flat positions in the tensor of the inferred shape
``(N, C, (in - 1) * stride + kernel - pad_begin - pad_end, ...)`` (what MaxPool's Indices give).
An ``output_shape`` input does not re-interpret them: the inferred block is placed
at the start of every axis of the larger output and the rest is zeros, as onnx's reference
evaluator and backend case ``test_maxunpool_export_with_output_shape`` do.  onnxruntime reads the
indices as flat positions of ``output_shape`` instead; the two agree whenever ``output_shape``
equals the inferred shape.  An index outside the inferred tensor is an invalid input.

Copies and zero fills only: exact.  Repeated indices (overlapping pool windows) keep the last
value written, which MaxPool makes the same value.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._geometry import window_attrs
from ._util import is_float
from ._values import int_values, reshaped


@dataclasses.dataclass(frozen=True)
class _Plan:
    size: int  # elements of the inferred tensor
    inferred: tuple[int, ...]
    block: tuple[slice, ...] | None  # where the inferred block sits in a larger output
    buf: int | None  # scratch (the inferred shape) when the output is larger
    top: int  # scratch: 0-d uint64, the largest index read as unsigned


class MaxUnpool(OpKernel):
    supports_exact = True  # copies and zero fills only

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.attrs = window_attrs(self)
        if self.attrs.kernel_shape is None:
            raise self.fail("kernel_shape is required")

    def infer(self, ctx: InferContext) -> None:
        x, dtype = ctx.shape(0), ctx.dtype(0)
        if not is_float(dtype):
            raise self.fail(f"X must be a float tensor, got {dtype}", "invalid_input")
        if ctx.dtype(1) != np.int64:
            raise self.fail(f"I must be int64, got {ctx.dtype(1)}", "invalid_input")
        if ctx.shape(1) != x:
            message = f"I {list(ctx.shape(1))} and X {list(x)} differ in shape"
            raise self.fail(message, "invalid_input")
        k = self.attrs.kernel_shape
        rank = len(k)
        if len(x) != rank + 2:
            message = f"X {list(x)} must be (N, C) and {rank} spatial axes (kernel_shape)"
            raise self.fail(message, "invalid_input")
        strides = self.attrs.strides or (1,) * rank
        pads = self.attrs.pads or (0,) * (2 * rank)
        if len(strides) != rank or len(pads) != 2 * rank:
            raise self.fail(f"strides {list(strides)} and pads {list(pads)} do not fit {k}")
        spatial = [
            (n - 1) * s + kk - pads[a] - pads[a + rank]
            for a, (n, s, kk) in enumerate(zip(x[2:], strides, k))
        ]
        if any(d < 0 for d in spatial):
            raise self.fail(f"pads {list(pads)} remove the whole output", "invalid_input")
        inferred = (x[0], x[1], *spatial)
        out = inferred
        if ctx.has_input(2):
            if ctx.dtype(2) != np.int64 or len(ctx.shape(2)) != 1:
                message = (
                    f"output_shape must be a 1-D int64 tensor, got {ctx.dtype(2)} "
                    f"{list(ctx.shape(2))}"
                )
                raise self.fail(message, "invalid_input")
            out = tuple(int_values(ctx, 2))
            if len(out) != len(inferred) or any(o < i for o, i in zip(out, inferred)):
                message = (
                    f"output_shape {list(out)} must have rank {len(inferred)} and hold the "
                    f"inferred shape {list(inferred)}"
                )
                raise self.fail(message, "invalid_input")
        ctx.set_output(0, dtype, out)
        larger = out != inferred
        block = tuple(slice(0, i) for i in inferred) if larger else None
        buf = ctx.add_scratch(dtype, inferred) if larger else None
        top = ctx.add_scratch(np.uint64, ())
        size = int(np.prod(inferred, dtype=np.int64))
        ctx.prepared = _Plan(size, inferred, block, buf, top)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        self._scatter(ctx, inputs[0].reshape(-1), inputs[1].reshape(-1), outputs[0])

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        x, indices = inputs[0].reshape(-1), inputs[1].reshape(-1)
        if not (np.shares_memory(x, inputs[0]) and np.shares_memory(indices, inputs[1])):
            return functools.partial(self.run, ctx, inputs, outputs)  # reshapes that copy
        return functools.partial(self._scatter, ctx, x, indices, outputs[0])

    def _scatter(self, ctx: KernelContext, x: np.ndarray, indices: np.ndarray, out) -> None:
        p: _Plan = ctx.prepared
        if indices.size:
            # one reduction checks both ends: a negative index is a huge unsigned one
            top = ctx.scratch[p.top]
            np.amax(indices.view(np.uint64), out=top)
            if int(top) >= p.size:
                bad = int(indices.min()) if int(indices.min()) < 0 else int(indices.max())
                message = f"index {bad} is out of range for an output of {p.size} elements"
                raise self.fail(message, "invalid_input")
        dst = out if p.buf is None else ctx.scratch[p.buf]
        dst.fill(0)
        reshaped(dst, (dst.size,))[indices] = x
        if p.buf is not None:
            out.fill(0)
            np.copyto(out[p.block], dst)
