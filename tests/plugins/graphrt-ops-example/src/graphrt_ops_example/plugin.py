"""Two operators in the domain ``com.example``, registered through graphrt's entry point.

``Scale`` multiplies by its ``factor`` attribute; ``Twice`` doubles.  Tests check that an
installed plugin is found through the entry point and used by a session.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, OpDef, OpKernel, hookimpl

DOMAIN = "com.example"


class Scale(OpKernel):
    in_place_input = 0

    def infer(self, ctx: InferContext) -> None:
        ctx.set_output(0, ctx.dtype(0), ctx.shape(0))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        factor = inputs[0].dtype.type(self.node.attr("factor", 1.0))
        np.multiply(inputs[0], factor, out=outputs[0])


class Twice(Scale):
    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        np.add(inputs[0], inputs[0], out=outputs[0])


@hookimpl
def graphrt_operators() -> list[OpDef]:
    return [
        OpDef("Scale", Scale, domain=DOMAIN),
        OpDef("Twice", Twice, domain=DOMAIN),
    ]
