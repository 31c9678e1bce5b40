"""The API of graph passes: the graph a pass edits, its context and the pass base class.

Its own module so that the built-in passes (``constant_fold``, ``fuse_bn``) import it without
importing the package that lists them: the import graph stays one way.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from graphrt.kernel import NodeInfo, OpDef

__all__ = ["LEVELS", "GraphPass", "PassContext", "PassGraph", "PassNode"]

#: Optimization levels in increasing order.
LEVELS = ("none", "basic", "all")


@dataclasses.dataclass(eq=False)
class PassNode:
    """A node as passes see it; nodes compare by identity (a graph may hold two equal ones,
    and comparing NodeInfo field by field made every ``in``/``index`` on the node list slow)."""

    info: NodeInfo
    op_def: OpDef
    inputs: list[str]
    outputs: list[str]

    @property
    def op_type(self) -> str:
        return self.info.op_type


@dataclasses.dataclass
class PassContext:
    exact: bool
    level: str
    #: Builds the kernel of a node (for passes that evaluate nodes, like constant folding).
    make_kernel: Callable[[PassNode], Any]
    #: Resolves an operator to the session's winning definition (None if missing).
    lookup: Callable[[str, str], OpDef | None]
    cancellation: Any = None
    #: The session's memory budget (bytes): constant folding keeps what it folds within it.
    max_memory: int = 2**31
    #: ``kernel_flags(node, kernel)``: the flags a node built by ``make_kernel`` runs under
    #: (its OpDef's; a kernel path's kernel's own planning flags).  None: the OpDef's.
    kernel_flags: Callable[[PassNode, Any], Any] | None = None
    #: The session's kernel path (``"numpy"`` or a kernel path's name, as ``graphrt explain``
    #: prints it): a plugin's pass may rewrite for its own path's kernels (ops-simd's blocked
    #: layout on avx512) and leave the graph alone on any other.
    kernel_path: str = "numpy"


class PassGraph:
    """The mutable, shape-free graph passes edit."""

    def __init__(
        self,
        nodes: list[PassNode],
        constants: dict[str, np.ndarray],
        inputs: list[str],
        outputs: list[str],
    ) -> None:
        self.nodes = nodes
        self.constants = constants
        self.inputs = inputs
        self.outputs = outputs
        self._names = itertools.count()

    def consumers(self, name: str) -> list[PassNode]:
        return [n for n in self.nodes if name in n.inputs]

    def producer(self, name: str) -> PassNode | None:
        for n in self.nodes:
            if name in n.outputs:
                return n
        return None

    def is_graph_output(self, name: str) -> bool:
        return name in self.outputs

    def add_constant(self, hint: str, value: np.ndarray) -> str:
        name = f"{hint}__graphrt{next(self._names)}"
        while name in self.constants:
            name = f"{hint}__graphrt{next(self._names)}"
        self.constants[name] = value
        return name

    def replace(self, old: list[PassNode], new: PassNode) -> None:
        """Put ``new`` where the last of ``old`` stood (dependency order is kept)."""
        gone = {id(n) for n in old}
        index = max(i for i, n in enumerate(self.nodes) if id(n) in gone)
        self.nodes[index] = new
        gone.discard(id(new))
        self.nodes[:] = [n for n in self.nodes if id(n) not in gone]  # the same list, edited

    def remove_dead(self) -> int:
        """Drop nodes no path leads from to a graph output; returns how many."""
        needed = set(self.outputs)
        keep: list[PassNode] = []
        for n in reversed(self.nodes):
            if not needed.isdisjoint(n.outputs):  # "" (an absent output) is never needed
                keep.append(n)
                needed.update(n.inputs)
                needed.discard("")
        keep.reverse()
        removed = len(self.nodes) - len(keep)
        self.nodes = keep
        live_inputs = {x for n in keep for x in n.inputs} | set(self.outputs)
        for name in [c for c in self.constants if c not in live_inputs]:
            del self.constants[name]
        return removed


class GraphPass:
    """Base of every pass: a name, the lowest level that runs it, whether it preserves bits."""

    name: ClassVar[str] = ""
    min_level: ClassVar[str] = "basic"
    preserves_bits: ClassVar[bool] = True
    order: ClassVar[int] = 100

    def run(self, graph: PassGraph, ctx: PassContext) -> bool:
        """Rewrite ``graph`` in place; return True when anything changed."""
        raise NotImplementedError

    def selected(self, level: str, exact: bool) -> bool:
        if LEVELS.index(level) < LEVELS.index(self.min_level):
            return False
        return self.preserves_bits or not exact
