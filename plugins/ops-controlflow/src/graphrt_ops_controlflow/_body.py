"""What every control-flow kernel shares: compiled bodies and how outer values reach them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.kernel import KernelContext, NodeInfo, OpKernel
from graphrt.limits import ARRAY_OVERHEAD, value_nbytes


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


class Held:
    """What a loop keeps between iterations (carried values, scan slices so far), counted
    against the run's memory budget as it grows, so a Loop of 2**62 iterations with a scan
    output ends in ``resource_exhausted`` instead of taking the machine's memory."""

    def __init__(self, ctx: KernelContext) -> None:
        self.ctx = ctx
        self.nbytes = 0

    def set(self, nbytes: int) -> None:
        """Now holding ``nbytes``: charge the growth, give back the shrinkage."""
        if nbytes > self.nbytes:
            self.ctx.charge(nbytes - self.nbytes, "the values its iterations keep")
        elif nbytes < self.nbytes:
            self.ctx.release(self.nbytes - nbytes)
        self.nbytes = nbytes

    def hand_over(self, outputs: Sequence[Any]) -> None:
        """Before the outputs are emitted: tensors are counted again by ``set_output``, so
        only what it does not count (sequences) stays charged here."""
        self.set(sum(value_nbytes(v) for v in outputs if not isinstance(v, np.ndarray)))


def kept_nbytes(values: Sequence[Any]) -> int:
    """:func:`graphrt.limits.value_nbytes` of every value (tensors inline: once an iteration)."""
    n = 0
    for v in values:
        n += v.nbytes + ARRAY_OVERHEAD if type(v) is np.ndarray else value_nbytes(v)
    return n


def scalar(x: Any, what: str, kernel: OpKernel) -> Any:
    if not isinstance(x, np.ndarray) or x.size != 1:
        raise kernel.fail(f"{what} must be a tensor of one element", "invalid_input")
    return x.reshape(()).item()


def empty_like_declared(body: Any, index: int) -> np.ndarray:
    """An empty [0] tensor of the type a body output declares (float32 when undeclared)."""
    decl = body.graph.outputs[index]
    return np.zeros((0,), dtype=decl.dtype if decl.dtype is not None else np.float32)
