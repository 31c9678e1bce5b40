"""What every control-flow kernel shares: compiled bodies and how outer values reach them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.kernel import KernelContext, NodeInfo, OpKernel


class BodyKernel(OpKernel):
    """A kernel that owns compiled bodies; exact when its bodies are (the core checks them)."""

    supports_exact = True
    outputs_data_dependent = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.declared = len(node.inputs)

    def body(self, name: str) -> Any:
        graph = self.node.attr(name)
        if graph is None:
            raise self.fail(f"the {name!r} attribute (a graph) is missing")
        return self.node.compile_subgraph(graph)

    def outer(self, body: Any, inputs: Sequence[Any]) -> list[Any]:
        """The outer-scope values ``body`` reads, from those after the declared inputs."""
        return body.outer_values(self.node.outer_inputs, inputs[self.declared :])

    @staticmethod
    def emit(ctx: KernelContext, values: Sequence[Any]) -> None:
        for i, v in enumerate(values):
            ctx.set_output(i, v)


def scalar(x: Any, what: str, kernel: OpKernel) -> Any:
    if not isinstance(x, np.ndarray) or x.size != 1:
        raise kernel.fail(f"{what} must be a tensor of one element", "invalid_input")
    return x.reshape(()).item()


def empty_like_declared(body: Any, index: int) -> np.ndarray:
    """An empty [0] tensor of the type a body output declares (float32 when undeclared)."""
    decl = body.graph.outputs[index]
    return np.zeros((0,), dtype=decl.dtype if decl.dtype is not None else np.float32)
