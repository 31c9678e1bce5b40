"""Broadcasting element-wise binary operators: the pattern every such family copies.

Each operator is a subclass naming its ufunc; one kernel covers every opset version (before
opset 7, ``broadcast=1`` with ``axis`` aligns B to A from ``axis`` instead of numpy's rule).
``bind`` returns the bare ufunc call, so a static step costs one numpy call per run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from graphrt.kernel import InferContext, KernelContext, OpKernel

from ._util import needs_nan_rewrite, rewrite_nan


class Binary(OpKernel):
    """out = ufunc(A, B) with numpy broadcasting; the output keeps A's element type."""

    ufunc: ClassVar[Callable[..., Any]]
    in_place_input = 0
    #: Comparisons return bool; arithmetic returns A's type.
    result_dtype: ClassVar[Any] = None

    def infer(self, ctx: InferContext) -> None:
        a, b = ctx.shape(0), ctx.shape(1)
        b = self._legacy_b_shape(a, b)
        try:
            shape = np.broadcast_shapes(a, b)
        except ValueError:
            raise self.fail(f"shapes {list(a)} and {list(b)} cannot be broadcast", "invalid_input")
        dtype = self.result_dtype or ctx.dtype(0)
        ctx.set_output(0, dtype, shape)
        needs_nan_rewrite(ctx, dtype, shape)

    def _legacy_b_shape(self, a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
        """Opset < 7 broadcast attribute: B's dims line up with A's starting at ``axis``."""
        if self.node.opset >= 7 or not self.node.attr("broadcast", 0) or len(b) == 0:
            return tuple(b)
        axis = self.node.attr("axis", len(a) - len(b))
        axis = axis + len(a) if axis < 0 else axis
        return tuple(b) + (1,) * (len(a) - axis - len(b))

    def _b(self, b: np.ndarray, a_shape: Sequence[int]) -> np.ndarray:
        shape = self._legacy_b_shape(a_shape, b.shape)
        return b if shape == b.shape else b.reshape(shape)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        a, b = inputs
        self.ufunc(a, self._b(b, a.shape), out=outputs[0])
        if ctx.exact and isinstance(ctx.prepared, int):
            rewrite_nan(outputs[0], ctx.scratch[ctx.prepared])

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        a, b = inputs
        if ctx.exact and isinstance(ctx.prepared, int):
            return functools.partial(self.run, ctx, inputs, outputs)
        return functools.partial(self.ufunc, a, self._b(b, a.shape), outputs[0])


class Add(Binary):
    ufunc = np.add
    supports_exact = True  # one correctly rounded operation per element


class Sub(Binary):
    ufunc = np.subtract
    supports_exact = True


class Mul(Binary):
    ufunc = np.multiply
    supports_exact = True
