"""Trilu and EyeLike: matrices defined by their diagonals.

Trilu keeps the elements on one side of diagonal k of each matrix (the last two axes) and sets
the others to zero: a copy, then zero copied where a (rows, cols) mask says, broadcast over the
batch.  The mask compares each element's ``col - row`` (computed once per plan) with k, so a
run-time k costs one comparison per run.  EyeLike fills zeros and writes ones on a strided view
of diagonal k.  Both only copy values: exact.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, from_onnx

from ._steps import BoundStep
from ._util import constant, same_storage, zero_of
from ._values import reshaped


class Trilu(BoundStep):
    """``upper=1``: keep col - row >= k; ``upper=0``: keep col - row <= k (k defaults to 0)."""

    supports_exact = True
    in_place_input = 0

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.upper = bool(node.attr("upper", 1))

    def infer(self, ctx: InferContext) -> None:
        shape = ctx.shape(0)
        if len(shape) < 2:
            raise self.fail(f"input must have rank >= 2, got shape {list(shape)}", "invalid_input")
        ctx.set_output(0, ctx.dtype(0), shape)
        rows, cols = shape[-2:]
        offset = np.arange(cols, dtype=np.int64) - np.arange(rows, dtype=np.int64)[:, None]
        k = None
        if ctx.has_input(1):
            if ctx.dtype(1).kind != "i":
                raise self.fail(f"k must be an integer, got {ctx.dtype(1)}")
            if len(ctx.shape(1)) > 1 or math.prod(ctx.shape(1)) != 1:
                message = f"k must be one value, got shape {list(ctx.shape(1))}"
                raise self.fail(message, "invalid_input")
            k = ctx.known_value(1)
        else:
            k = np.zeros((), np.int64)
        if k is None:  # run-time k: the mask is made in every run
            ctx.prepared = (offset, ctx.add_scratch(np.bool_, (rows, cols)))
        else:
            k = int(np.asarray(k).reshape(()))
            drop = offset < k if self.upper else offset > k
            ctx.prepared = (drop, None)

    def step(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        """Copy (skipped in place), then zero where the mask says; a run-time k makes the mask
        first.  In place with a constant k: the one bare ``copyto``."""
        drop, scratch = ctx.prepared
        x, out = inputs[0], outputs[0]
        zero = zero_of(out.dtype)
        copy = not same_storage(out, x)
        if scratch is None and not copy:
            return functools.partial(np.copyto, out, zero, where=drop)
        offset = compare = k = None
        if scratch is not None:  # drop: offset < k (upper) or offset > k (lower)
            offset, drop, k = drop, ctx.scratch[scratch], inputs[1].reshape(())
            compare = np.less if self.upper else np.greater

        def call() -> None:
            if compare is not None:
                compare(offset, k, out=drop)
            if copy:
                np.copyto(out, x)
            np.copyto(out, zero, where=drop)

        return call


class EyeLike(BoundStep):
    """A matrix of the input's shape: ones at [i, i + k], zeros elsewhere; type ``dtype`` or
    the input's."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.k = int(node.attr("k", 0))
        code = node.attr("dtype")
        self.dtype = None
        if code is not None:
            try:
                self.dtype = from_onnx(code)
            except KeyError:
                raise self.fail(f"dtype {code} is not a tensor element type") from None

    def infer(self, ctx: InferContext) -> None:
        shape = ctx.shape(0)
        if len(shape) != 2:
            raise self.fail(f"input must have rank 2, got shape {list(shape)}", "invalid_input")
        dtype = self.dtype if self.dtype is not None else ctx.dtype(0)
        if dtype.hasobject:
            raise self.fail(f"the output must be numbers or bool, not {dtype}")
        ctx.set_output(0, dtype, shape)
        rows, cols = shape
        first = max(0, -self.k)  # the first row the diagonal crosses
        count = max(0, min(rows, cols - self.k) - first)
        start = first * cols + first + self.k
        ctx.prepared = slice(start, start + count * (cols + 1), cols + 1) if count else None

    def step(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        """Zeros, then ones on a strided view of the diagonal made once."""
        out = outputs[0]
        fill = functools.partial(np.copyto, out, zero_of(out.dtype))
        if ctx.prepared is None:
            return fill
        diagonal = reshaped(out, (out.size,))[ctx.prepared]
        one = constant(out.dtype, 1)

        def call() -> None:
            fill()
            np.copyto(diagonal, one)

        return call
