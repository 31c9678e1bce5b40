"""Bodies of If, Loop, Scan and SequenceMap: nested sessions compiled once per node.

A body is compiled when its node's kernel is built (so a body that cannot compile fails the
model at creation), in the session's mode, kernel path and operator table, without graph
passes.  Running it makes or reuses an :class:`~graphrt.plan.ExecutionPlan` for the actual input
types and shapes and takes a run state from that plan's pool, so a Loop of many iterations with
steady shapes builds one plan and reuses one run state.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.compiled import CompiledGraph
from graphrt.ir import check_cancelled
from graphrt.plan import ExecutionPlan, build_plan

__all__ = ["BodySession", "copy_value", "value_type"]

MAX_BODY_PLANS = 16
_OBJECT = (np.dtype(object), ())
_CHECKED = "check_shapes"


def value_type(x: Any) -> tuple[np.dtype, tuple[int, ...]]:
    """The plan key of one value: tensors by type and shape, sequences and optionals as objects."""
    if isinstance(x, np.ndarray):
        return x.dtype, x.shape
    return np.dtype(object), ()


def copy_value(x: Any) -> Any:
    """A value the caller owns: never a view of a run state's slab or of model weights."""
    if type(x) is np.ndarray:
        return x.copy()
    if isinstance(x, np.ndarray):
        return np.array(x, copy=True)
    if isinstance(x, list):
        return [copy_value(v) for v in x]
    return x


class BodySession:
    """A compiled body: ``run(inputs + outer values) -> outputs``, thread-safe like a Session."""

    def __init__(self, graph: CompiledGraph, n_inputs: int, outer: tuple[str, ...]) -> None:
        self.graph = graph
        #: Declared inputs of the body (before the outer-scope values).
        self.num_inputs = n_inputs
        #: Names of enclosing values the body reads, in the order ``run`` expects them.
        self.outer_names = outer
        self.num_outputs = len(graph.outputs)
        self._plans: dict[tuple, ExecutionPlan] = {}
        self._lock = threading.Lock()
        #: Plans built for this body; steady shapes mean it stays at 1 however many runs.
        self.plans_built = 0
        self._runs = itertools.count()
        self.runs = 0

    @property
    def exact(self) -> bool:
        return self.graph.exact

    def plan_for(
        self, values: Sequence[Any], check_shapes: bool = False, cancellation: Any = None
    ) -> ExecutionPlan:
        # The key is built on every iteration of a loop: dtype objects and shapes, nothing more.
        key = tuple((v.dtype, v.shape) if isinstance(v, np.ndarray) else _OBJECT for v in values)
        if check_shapes:
            key += (_CHECKED,)
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        types = [value_type(v) for v in values]
        with self._lock:
            plan = self._plans.get(key)
            if plan is None:
                plan = build_plan(
                    self.graph,
                    types,
                    check_shapes=check_shapes,
                    body=True,
                    cancellation=cancellation,
                )
                plans = dict(self._plans)
                while len(plans) >= MAX_BODY_PLANS:
                    del plans[next(iter(plans))]
                plans[key] = plan
                self._plans = plans
                self.plans_built += 1
        return plan

    def run(self, values: Sequence[Any], ctx: Any = None) -> list[Any]:
        """Run the body on its inputs followed by the outer values; outputs are the caller's.

        ``ctx`` is the calling kernel's :class:`~graphrt.kernel.KernelContext`: the body runs
        on its intra-op pool and, when the session checks shapes, shares its binding map.  It
        runs inside the caller's run: the caller's cancellation token is checked here, once
        per iteration of a loop, and the body's memory counts against the caller's budget
        from what the caller already holds.
        """
        limits = getattr(ctx, "limits", None)
        token = None if limits is None else limits.token
        if token is not None:
            check_cancelled(token)
        self.runs = next(self._runs) + 1
        values = [np.asarray(v) if isinstance(v, np.generic) else v for v in values]
        pool = getattr(ctx, "pool", None)
        bindings = getattr(ctx, "shape_bindings", None)
        plan = self.plan_for(values, check_shapes=bindings is not None, cancellation=token)
        state = plan.acquire(pool)
        try:
            state.limits.enter(limits, self.graph.max_memory, ctx)
            results = state.run(list(values), bindings)
            return [copy_value(r) for r in results]
        finally:
            plan.release(state)

    def states_created(self) -> int:
        """Run states made by this body's cached plans (pooled states are reused, not made)."""
        return sum(p.states_created for p in self._plans.values())

    def stats(self, path: str) -> list[dict[str, Any]]:
        """Counters of this body and of the bodies nested in it, each named by its path."""
        rows = [
            {
                "body": path,
                "runs": self.runs,
                "plans_built": self.plans_built,
                "run_states_created": self.states_created(),
            }
        ]
        for (node, attr), inner in self.graph.bodies.items():
            rows += inner.stats(f"{path}/{node}.{attr}")
        return rows

    def outer_values(self, node_outer: Sequence[str], given: Sequence[Any]) -> list[Any]:
        """Pick this body's outer values from those its node received (in the node's order)."""
        by_name = dict(zip(node_outer, given))
        return [by_name[name] for name in self.outer_names]
