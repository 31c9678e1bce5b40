"""Observed runs: a run state's program rewrapped for one run, to time every step into a
profiler or to copy out what every step made.

Both swap the run state's program (and its step index, which names a failing step) for the run
and put them back after it.  The state is the run's own, taken from a pool, so nothing is
shared between threads; the ordinary program is never touched, so runs that observe nothing
pay nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from graphrt.ir import check_cancelled
from graphrt.plan import ASSEMBLED, VIEW, Step
from graphrt.profile import ITERATION, RUN, BodyFrame, ProfileEvent, Profiler
from graphrt.values import copy_value

__all__ = ["run_observed", "run_profiled"]


def _step_groups(state: Any) -> list[list[Any]]:
    """The program's calls of each plan step: none for a view or an assembled value, else the
    kernel's call first, then the step's shape check and debug poisoning if any."""
    groups: list[list[Any]] = [[] for _ in state.plan.steps]
    for f, i in zip(state.program, state.step_index):
        groups[i].append(f)
    return groups


def _swapped(state: Any, program: list[Any], index: list[int], run: Callable[[], Any]) -> Any:
    saved = state.program, state.step_index
    state.program, state.step_index = program, index
    try:
        return run()
    finally:
        state.program, state.step_index = saved


def _shape(x: Any) -> Any:
    """A value's shape for the trace: a tensor's dims, ``sequence[n]``, or its type's name."""
    if isinstance(x, np.ndarray):
        return list(x.shape)
    if x is None:
        return None
    if isinstance(x, list):
        return f"sequence[{len(x)}]"
    return type(x).__name__


def run_profiled(
    state: Any,
    feeds: list[Any],
    profiler: Profiler,
    token: Any = None,
    bindings: dict | None = None,
    parent: BodyFrame | None = None,
    iteration: int = 0,
) -> list[Any]:
    """Run ``state`` once, one event per plan step into ``profiler`` and one for the whole run
    (``parent``: the step of the enclosing run this body iteration belongs to; then the whole
    is an ``iteration`` event).  Every step hands the bodies it runs a :class:`BodyFrame`
    through the state's limits, so that they are profiled too (see graphrt.subgraph)."""
    plan = state.plan
    tid = threading.get_ident()
    depth = 0 if parent is None else parent.depth
    where: dict[str, Any] = {}
    if parent is not None:
        where = {"parent": parent.parent, "iteration": iteration, "depth": depth}
    path = plan.graph.kernel_path
    program = [
        _timed(state, st, calls, profiler, token, tid, depth, {**where, "kernel_path": path})
        for st, calls in zip(plan.steps, _step_groups(state))
    ]
    marked = state.limits.profiler  # True on a profiled state: put back after the run
    start = time.perf_counter_ns()
    try:
        return _swapped(
            state, program, list(range(len(program))), lambda: state.run(feeds, bindings)
        )
    finally:
        end = time.perf_counter_ns()
        state.limits.profiler = marked
        if parent is None:
            profiler.record(ProfileEvent(RUN, RUN, RUN, start, end - start, tid))
        else:
            name = f"{parent.parent} iteration {iteration}"
            event = ProfileEvent(
                name, parent.op_type, ITERATION, start, end - start, tid, where, depth
            )
            profiler.record(event)


def _timed(
    state: Any,
    st: Step,
    calls: list[Any],
    profiler: Profiler,
    token: Any,
    tid: int,
    depth: int,
    where: dict[str, Any],
) -> Callable[[], None]:
    """One step's calls as one timed call (a view's, which has none, as an instant)."""
    from graphrt.explain import runs_on  # here: ordinary runs never need it

    node = st.node
    info = node.info
    name, op, kind = info.name or info.op_type, info.op_type, st.kind
    fixed = {"plugin": node.plugin, "kernel": type(node.kernel).__name__, "runs": runs_on(st)}
    fixed.update(where)
    ins, outs = node.inputs, node.outputs
    values, limits = state.values, state.limits

    def call() -> None:
        if token is not None:
            check_cancelled(token)
        args = dict(fixed)
        args["input_shapes"] = [_shape(values[v]) if v >= 0 else None for v in ins]
        limits.profiler = BodyFrame(profiler, name, op, depth + 1)
        t0 = time.perf_counter_ns()
        for f in calls:
            f()
        t1 = time.perf_counter_ns()
        args["output_shapes"] = [_shape(values[v]) if v >= 0 else None for v in outs]
        profiler.record(ProfileEvent(name, op, kind, t0, t1 - t0, tid, args, depth))

    return call


def run_observed(state: Any, feeds: list[Any], token: Any = None) -> tuple[list[Any], dict]:
    """Run ``state`` once, copying every value a step makes right after the step (before any
    later step can reuse its memory or write over it in place): (the run's outputs, as
    :meth:`RunState.run` returns them, {value id: copy}).  Values the plan folded into
    constants are included; graph inputs and initializers are not."""
    plan = state.plan
    graph = plan.graph
    values = state.values
    kept: dict[int, Any] = {}
    inputs = set(graph.input_ids)
    for v, c in plan.constants.items():
        if v < len(graph.names) and v not in inputs:
            if graph.names[v] not in graph.initializer_names:
                kept[v] = copy_value(c)
    program: list[Any] = []
    index: list[int] = []
    for i, (st, calls) in enumerate(zip(plan.steps, _step_groups(state))):
        made = [v for v in st.node.outputs if v >= 0]

        def keep(made: list[int] = made) -> None:
            for v in made:
                kept[v] = copy_value(values[v])

        # right after the kernel's call: a debug plan poisons a dead output's block next
        first = 0 if st.kind in (VIEW, ASSEMBLED) else 1
        for f in [*calls[:first], keep, *calls[first:]]:
            program.append(f)
            index.append(i)
    results = _swapped(state, program, index, lambda: state.run(feeds, token=token))
    return results, kept
