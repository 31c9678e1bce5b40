"""If: run the chosen branch once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from graphrt.kernel import KernelContext, NodeInfo

from ._body import BodyKernel, scalar


class If(BodyKernel):
    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.then_branch = self.body("then_branch")
        self.else_branch = self.body("else_branch")

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        branch = self.then_branch if scalar(inputs[0], "cond", self) else self.else_branch
        self.emit(ctx, branch.run(self.outer(branch, inputs), ctx))
