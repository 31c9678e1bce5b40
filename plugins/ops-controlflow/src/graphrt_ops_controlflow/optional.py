"""Optional, OptionalHasElement, OptionalGetElement.  An empty optional is ``None``; a full one
is its value (a tensor or a sequence)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import KernelContext, OpKernel


class _OptionalOp(OpKernel):
    supports_exact = True
    outputs_data_dependent = True


class Optional(_OptionalOp):
    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        value = inputs[0] if inputs else None
        ctx.set_output(0, value)


class OptionalHasElement(_OptionalOp):
    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        present = bool(inputs) and inputs[0] is not None
        ctx.set_output(0, np.array(present, np.bool_))


class OptionalGetElement(_OptionalOp):
    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        if not inputs or inputs[0] is None:
            raise self.fail("the optional is empty", "invalid_input")
        ctx.set_output(0, inputs[0])
