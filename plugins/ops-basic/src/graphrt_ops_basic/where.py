"""Where: a three-way broadcasting select.  Data movement only, so exact in both modes."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._util import exact_inputs, same_storage


class Where(OpKernel):
    """out = X where condition else Y: Y is copied in, then X over it where condition holds.

    The output may take Y's storage (Y is read first, by the copy that is skipped when the
    output already is Y).
    """

    in_place_input = 2
    supports_exact = True  # bits are copied, never computed

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        exact_inputs(self, ("condition", "X", "Y"))

    def infer(self, ctx: InferContext) -> None:
        if ctx.dtype(0) != np.bool_:
            raise self.fail(f"condition must be bool, got {ctx.dtype(0)}", "invalid_input")
        if ctx.dtype(1) != ctx.dtype(2):
            raise self.fail(
                f"X and Y differ in type: {ctx.dtype(1)} and {ctx.dtype(2)}", "invalid_input"
            )
        shapes = [ctx.shape(i) for i in range(3)]
        try:
            shape = np.broadcast_shapes(*shapes)
        except ValueError:
            message = f"shapes {[list(s) for s in shapes]} cannot be broadcast"
            raise self.fail(message, "invalid_input") from None
        ctx.set_output(0, ctx.dtype(1), shape)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        cond, x, y = inputs
        out = outputs[0]
        if not same_storage(out, y):
            np.copyto(out, y)
        np.copyto(out, x, where=cond)

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        cond, x, y = inputs
        out = outputs[0]
        if same_storage(out, y):
            return functools.partial(np.copyto, out, x, where=cond)
        return functools.partial(self.run, ctx, inputs, outputs)
