"""Variadic element-wise operators (Sum, Max, Min, Mean): a left fold of one ufunc.

Any number of inputs broadcast together (numpy's rule; opsets before 8 required equal shapes,
a special case).  The fold runs in input order, ``out = ((x0 op x1) op x2) ...``, writing ``out``
from the first call on, so ``out`` may be input 0's storage.  When input 0 appears again later
in the list, that storage is still read after the first write; the fold then runs in a scratch
array and is copied out at the end.

That fold is the canonical order of docs/exact-mode.md, so Sum and Mean (the fold, then one
division) are exact: exact mode only adds the canonical-NaN rewrite.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from graphrt.plugin import InferContext, KernelContext, OpKernel

from ._util import _CANONICAL_NAN, constant, rewrite_nan, same_types
from .unary import require_float


class Variadic(OpKernel):
    """out = ufunc(...ufunc(ufunc(x0, x1), x2)..., xn); one input is copied."""

    ufunc: ClassVar[Callable[..., Any]]
    in_place_input = 0
    #: ONNX allows the float types only (Sum, Mean): another type fails here (Mean's division
    #: of an int32 sum failed in the middle of a run).
    floats_only: ClassVar[bool] = False

    def infer(self, ctx: InferContext) -> None:
        if ctx.num_inputs == 0:
            raise self.fail("needs at least one input")
        same_types(self, ctx, ctx.num_inputs)
        if self.floats_only:
            require_float(self, ctx, "the inputs")
        shapes = [ctx.shape(i) for i in range(ctx.num_inputs)]
        try:
            shape = np.broadcast_shapes(*shapes)
        except ValueError:
            message = f"shapes {[list(s) for s in shapes]} cannot be broadcast"
            raise self.fail(message, "invalid_input") from None
        dtype = ctx.dtype(0)
        ctx.set_output(0, dtype, shape)
        names = self.node.inputs
        reread = len(names) > 2 and names[0] in names[2:]
        nan = None
        if ctx.exact and self.supports_exact and dtype in _CANONICAL_NAN:
            nan = ctx.add_scratch(np.bool_, shape)
        ctx.prepared = (ctx.add_scratch(dtype, shape) if reread else None, nan)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        out = outputs[0]
        scratch, nan = ctx.prepared
        acc = out if scratch is None else ctx.scratch[scratch]
        if len(inputs) == 1:
            np.copyto(acc, inputs[0])
        else:
            self.ufunc(inputs[0], inputs[1], out=acc)
            for x in inputs[2:]:
                self.ufunc(acc, x, out=acc)
        self.finish(acc, len(inputs))
        if acc is not out:
            np.copyto(out, acc)
        if nan is not None:
            rewrite_nan(out, ctx.scratch[nan])

    def finish(self, acc: np.ndarray, n: int) -> None:
        """A last step on the folded value (Mean divides)."""

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        plain = type(self).finish is Variadic.finish and ctx.prepared[1] is None
        if len(inputs) == 2 and plain:
            return functools.partial(self.ufunc, inputs[0], inputs[1], out=outputs[0])
        return functools.partial(self.run, ctx, inputs, outputs)


class Sum(Variadic):
    ufunc = np.add
    supports_exact = True
    floats_only = True


class Max(Variadic):
    """NaN propagates (numpy maximum), as in onnxruntime."""

    ufunc = np.maximum


class Min(Variadic):
    ufunc = np.minimum


class Mean(Variadic):
    """The sum in input order, then one division by the count."""

    ufunc = np.add
    supports_exact = True
    floats_only = True

    def finish(self, acc: np.ndarray, n: int) -> None:
        np.divide(acc, constant(acc.dtype, n), out=acc)
