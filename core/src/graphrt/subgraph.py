"""Bodies of If, Loop, Scan and SequenceMap: nested sessions compiled once per node.

A body is compiled when its node's kernel is built (so a body that cannot compile fails the
model at creation), in the session's mode, kernel path and operator table, without graph
passes.  Running it makes or reuses an :class:`~graphrt.plan.ExecutionPlan` for the actual input
types and shapes and takes a run state from the pool kept beside that plan, so a Loop of many
iterations with steady shapes builds one plan and reuses one run state.

A caller running a body many times on a static plan (a Loop's iterations, a Scan's steps, an If
branch bound into its step) keeps one run state with :class:`SteadyRun`: it writes what changes
into the state's input arrays and runs the bound program, with no plan lookup, no copies of the
outputs and no allocation per run.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.compiled import CompiledGraph
from graphrt.ir import check_cancelled
from graphrt.limits import ARRAY_OVERHEAD, value_nbytes
from graphrt.plan import ExecutionPlan, ValueType, build_plan
from graphrt.runstate import RunState, StatePool, kernel_failure
from graphrt.values import copy_value

__all__ = ["BodySession", "SteadyRun"]

MAX_BODY_PLANS = 16
_OBJECT = (np.dtype(object), ())
_CHECKED = "check_shapes"


def _nbytes(values: Sequence[Any]) -> int:
    n = 0
    for v in values:
        n += v.nbytes + ARRAY_OVERHEAD if type(v) is np.ndarray else value_nbytes(v)
    return n


class BodySession:
    """A compiled body: ``run(inputs + outer values) -> outputs``, thread-safe like a Session."""

    def __init__(self, graph: CompiledGraph, n_inputs: int, outer: tuple[str, ...]) -> None:
        self.graph = graph
        #: Declared inputs of the body (before the outer-scope values).
        self.num_inputs = n_inputs
        #: Names of enclosing values the body reads, in the order ``run`` expects them.
        self.outer_names = outer
        self.num_outputs = len(graph.outputs)
        #: Plans by input signature, each with the pool of its idle run states.
        self._plans: dict[tuple, StatePool] = {}
        self._lock = threading.Lock()
        #: Plans built for this body; steady shapes mean it stays at 1 however many runs.
        self.plans_built = 0
        self._runs = itertools.count()
        self._single = 0  # runs through run() and bound calls
        self._bulk = 0  # runs counted by SteadyRun.close

    @property
    def exact(self) -> bool:
        return self.graph.exact

    @property
    def runs(self) -> int:
        """Times the body ran (each iteration of a loop counts)."""
        return self._single + self._bulk

    def plan_for(
        self, values: Sequence[Any], check_shapes: bool = False, cancellation: Any = None
    ) -> ExecutionPlan:
        """The plan for these inputs (then outer values): made once per signature, cached."""
        return self._states_for(values, check_shapes, cancellation).plan

    def _states_for(
        self, values: Sequence[Any], check_shapes: bool = False, cancellation: Any = None
    ) -> StatePool:
        # The key is built on every iteration of a loop: dtype objects and shapes, nothing more.
        key = tuple((v.dtype, v.shape) if isinstance(v, np.ndarray) else _OBJECT for v in values)
        states = self._plans.get(key + (_CHECKED,) if check_shapes else key)
        if states is not None:
            return states
        return self._states_for_types(list(key), check_shapes, cancellation)

    def plan_for_types(
        self,
        types: Sequence[tuple[np.dtype, tuple[int, ...]]],
        check_shapes: bool = False,
        cancellation: Any = None,
    ) -> ExecutionPlan:
        """The plan for inputs (then outer values) of these element types and shapes: made
        once per signature and cached (:attr:`plans_built` counts the ones made)."""
        return self._states_for_types(types, check_shapes, cancellation).plan

    def _states_for_types(
        self,
        types: Sequence[tuple[np.dtype, tuple[int, ...]]],
        check_shapes: bool = False,
        cancellation: Any = None,
    ) -> StatePool:
        key = tuple((np.dtype(d), tuple(s)) for d, s in types)
        if check_shapes:
            key += (_CHECKED,)
        states = self._plans.get(key)
        if states is not None:
            return states
        with self._lock:
            states = self._plans.get(key)
            if states is None:
                plan = build_plan(
                    self.graph,
                    types,
                    check_shapes=check_shapes,
                    body=True,
                    cancellation=cancellation,
                )
                plans = dict(self._plans)
                for other in plans.values():  # a new shape: the slabs kept for old ones go
                    other.drop_idle()
                while len(plans) >= MAX_BODY_PLANS:
                    del plans[next(iter(plans))]
                plans[key] = states = StatePool(plan)
                self._plans = plans
                self.plans_built += 1
        return states

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
        self._single = next(self._runs) + 1
        values = [np.asarray(v) if isinstance(v, np.generic) else v for v in values]
        pool = getattr(ctx, "pool", None)
        bindings = getattr(ctx, "shape_bindings", None)
        states = self._states_for(values, check_shapes=bindings is not None, cancellation=token)
        node = getattr(ctx, "node", None)
        if limits is not None:  # before a new run state allocates the slab, not after
            if limits.profiler is not None:  # a profiled run's step: time the body's nodes
                return self._run_profiled(states, values, ctx, limits, bindings)
            limits.admit(states.plan.slab_size, node, "the body's plan")
        state = states.acquire(pool)
        try:
            state.limits.enter(limits, self.graph.max_memory, ctx)
            results = state.run(list(values), bindings)
            if limits is not None:  # the copies handed out, beside the body's slab and arena
                state.limits.charge(_nbytes(results), node, "the body's outputs")
            return [copy_value(r) for r in results]
        finally:
            states.release(state)

    def _run_profiled(
        self, states: StatePool, values: list[Any], ctx: Any, limits: Any, bindings: Any
    ) -> list[Any]:
        """:meth:`run` inside a profiled run: on a profiled run state of the body, its steps
        recorded as an iteration of the calling step (``limits.profiler``, a BodyFrame)."""
        frame, node = limits.profiler, ctx.node
        limits.admit(states.plan.slab_size, node, "the body's plan")
        state = states.acquire_profiled(getattr(ctx, "pool", None))
        try:
            state.limits.enter(limits, self.graph.max_memory, ctx)
            if getattr(frame, "profiler", None) is None:  # not inside a step: nothing to record
                results = state.run(list(values), bindings)
            else:
                iteration = frame.next_iteration(self)
                results = state.run_profiled(
                    list(values), frame.profiler, limits.token, bindings, frame, iteration
                )
            state.limits.charge(_nbytes(results), node, "the body's outputs")
            return [copy_value(r) for r in results]
        finally:
            states.release_profiled(state)

    def steady(self, values: Sequence[Any], ctx: Any = None) -> SteadyRun | None:
        """A kept run state for running this body again and again from ``values`` (inputs then
        outer values, written into it here), or None when their plan is not static (dynamic
        steps, shape checks): then each run goes through :meth:`run`.  The caller ends it with
        :meth:`SteadyRun.close`."""
        bindings = getattr(ctx, "shape_bindings", None)
        limits = getattr(ctx, "limits", None)
        check_cancelled(None if limits is None else limits.token)
        if bindings is not None or (limits is not None and limits.profiler is not None):
            return None  # (profiled: every run through run(), where the profiler sees it)
        values = [np.asarray(v) if isinstance(v, np.generic) else v for v in values]
        states = self._states_for(values, cancellation=None if limits is None else limits.token)
        plan = states.plan
        if not plan.static or plan.shape_checks is not None:
            return None
        if limits is not None:  # before a new run state allocates the slab, not after
            limits.admit(plan.slab_size, getattr(ctx, "node", None), "the body's plan")
        run = SteadyRun(self, states, states.acquire(getattr(ctx, "pool", None)), ctx)
        for dst, src in zip(run.inputs, values):
            dst[...] = src
        return run

    def bound(self, values: Sequence[Any], ctx: Any) -> Any:
        """For a kernel's ``bind``: a call running this body on ``values`` and returning its
        outputs (arrays of a run state kept for the caller's run state: valid until the next
        call), or None when their plan is not static.  ``values`` must be the caller's fixed
        arrays (slab views, constants): they are read again at every call."""
        if getattr(ctx, "shape_bindings", None) is not None:
            return None
        limits = getattr(ctx, "limits", None)
        if limits is not None and limits.profiler is not None:
            return None  # a profiled run state: every run through run(), to be timed
        states = self._states_for(values)
        plan = states.plan
        if not plan.static or plan.shape_checks is not None:
            return None
        run = SteadyRun(self, states, states.acquire(getattr(ctx, "pool", None)), ctx)
        pairs = [(dst, src) for dst, src in zip(run.inputs, values) if dst is not src]
        runs = self._runs
        enter, program, outputs = run.enter, run.run, run.outputs

        def call() -> list[Any]:
            enter()
            for dst, src in pairs:
                dst[...] = src
            program()
            self._single = next(runs) + 1
            return outputs

        return call

    def count_runs(self, n: int) -> None:
        with self._lock:
            self._bulk += n

    @property
    def cached_plans(self) -> list[ExecutionPlan]:
        """The plans made for this body so far (one per input signature it met)."""
        return [states.plan for states in self._plans.values()]

    def states_created(self) -> int:
        """Run states made by this body's cached plans (pooled states are reused, not made)."""
        return sum(states.states_created for states in self._plans.values())

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


class SteadyRun:
    """One run state of a static body plan, kept while its caller runs the body again and again.

    The caller writes what changes into :attr:`inputs` (the state's staging arrays: assign in
    place), calls :meth:`run` and reads :attr:`outputs` (the state's own arrays, valid until the
    next run: copy what must outlive it).  Nothing is planned, looked up, copied out or
    allocated per run; the caller's cancellation token is checked at every run and the memory
    budget when the state is taken and at :meth:`enter` (call it again after the caller's
    holdings grew).  :meth:`close` gives the state back and counts the runs.
    """

    def __init__(self, body: BodySession, states: StatePool, state: RunState, ctx: Any) -> None:
        self.body = body
        self.plan = plan = states.plan
        self._states = states
        self.state: RunState | None = state
        self.ctx = ctx
        self.caller = getattr(ctx, "limits", None)
        graph = plan.graph
        #: The staging arrays of the body's inputs (then outer values), in order.
        self.inputs: list[np.ndarray] = list(state.inputs)
        #: The body's outputs: arrays of the run state (or constants), fixed for its life.
        self.outputs: list[Any] = [state.values[v] for v in graph.output_ids]
        #: Element types and shapes of inputs and outputs (None: not a tensor).
        self.input_types: list[ValueType | None] = [plan.types.get(v) for v in graph.input_ids]
        self.output_types: list[ValueType | None] = [plan.types.get(v) for v in graph.output_ids]
        #: Per input: whether its staging array still holds what was written into it after a
        #: run (no later value of the plan takes its slab block): such an input that does not
        #: change (an outer value) is written once, the others before every run.
        self.lasting: list[bool] = _lasting(plan)
        #: The bound steps, called in order by :meth:`run`.
        self.program: list[Any] = state.program
        #: The caller's cancellation token (set by :meth:`enter`).
        self.token: Any = None
        state.arena.reset()  # nothing dynamic is held by a static plan's run
        self.enter()

    def enter(self) -> None:
        """Start from what the caller holds now (the body's slab must fit beside it)."""
        limits = self.state.limits
        limits.enter(self.caller, self.body.graph.max_memory, self.ctx)
        self.token = limits.token

    def run(self) -> None:
        """Run the program once on what the inputs hold now.

        A caller's hot loop may inline this: check :attr:`token`, call every function of
        :attr:`program`, and raise :meth:`failure` of an exception one of them raised.
        """
        if self.token is not None:
            check_cancelled(self.token)
        try:
            for f in self.program:
                f()
        except Exception as exc:
            raise self.failure(exc, f) from exc

    def failure(self, exc: BaseException, f: Any) -> BaseException:
        """What an exception raised by ``f``, a function of :attr:`program`, becomes."""
        index = next((i for i, g in enumerate(self.program) if g is f), 0)
        return kernel_failure(self.plan.steps[self.state.step_index[index]].node, exc)

    def passes_through(self, output: int, input: int) -> bool:
        """Whether output ``output`` is input ``input`` unchanged (itself or a view of it)."""
        graph = self.plan.graph
        out, src = graph.output_ids[output], graph.input_ids[input]
        return out == src or self.plan.memory.root.get(out) == src

    def close(self, runs: int = 0) -> None:
        """Give the run state back; ``runs``: how many times the body ran (its counter)."""
        if self.state is None:
            return
        self.body.count_runs(runs)
        self._states.release(self.state)
        self.state = None


def _lasting(plan: ExecutionPlan) -> list[bool]:
    mem = plan.memory
    blocks = [(mem.offsets[v], mem.offsets[v] + n, v) for v, n in mem.sizes.items() if n]
    lasting = []
    for vid in plan.graph.input_ids:
        start = mem.offsets.get(vid)
        if start is None:
            lasting.append(vid in plan.constants)
            continue
        end = start + mem.sizes.get(vid, 0)
        lasting.append(not any(lo < end and start < hi and v != vid for lo, hi, v in blocks))
    return lasting
