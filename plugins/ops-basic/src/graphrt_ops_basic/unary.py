"""Element-wise unary operators: one ufunc (or a short numpy recipe) per operator.

Each kernel writes ``out`` in place of its input when the planner allows it, so a chain of
activations needs no new memory.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from graphrt.kernel import InferContext, KernelContext, OpKernel

from ._util import needs_nan_rewrite, rewrite_nan, zero_of


class Unary(OpKernel):
    """out = fn(X); same element type and shape as X."""

    ufunc: ClassVar[Callable[..., Any]]
    in_place_input = 0

    def infer(self, ctx: InferContext) -> None:
        ctx.set_output(0, ctx.dtype(0), ctx.shape(0))
        if self.supports_exact:
            needs_nan_rewrite(ctx, ctx.dtype(0), ctx.shape(0))

    def compute(self, x: np.ndarray, out: np.ndarray) -> None:
        type(self).ufunc(x, out=out)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        self.compute(inputs[0], outputs[0])
        if ctx.exact and isinstance(ctx.prepared, int):
            rewrite_nan(outputs[0], ctx.scratch[ctx.prepared])

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        if type(self).compute is Unary.compute and not (ctx.exact and isinstance(ctx.prepared, int)):
            return functools.partial(type(self).ufunc, inputs[0], outputs[0])
        return functools.partial(self.run, ctx, inputs, outputs)


class Relu(Unary):
    """max(x, 0): a compare and select, so exact everywhere; NaN passes through.

    Exact mode also adds +0 so that -0 becomes +0 whatever the machine's max does on ties.
    """

    supports_exact = True

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x, out = inputs[0], outputs[0]
        zero = zero_of(x.dtype)
        np.maximum(x, zero, out=out)
        if ctx.exact and x.dtype.kind == "f":
            np.add(out, zero, out=out)  # -0 + +0 = +0; every other value unchanged
            if isinstance(ctx.prepared, int):
                rewrite_nan(out, ctx.scratch[ctx.prepared])

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        if ctx.exact:
            return functools.partial(self.run, ctx, inputs, outputs)
        return functools.partial(np.maximum, inputs[0], zero_of(inputs[0].dtype), out=outputs[0])
