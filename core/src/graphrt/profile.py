"""A bounded profiling collector: per-step times of runs, as a table or a Chrome trace.

    prof = graphrt.Profiler(max_events=100_000)
    sess.run(None, feed, profiler=prof)
    print(prof.summary())
    prof.write_chrome_trace("trace.json")   # chrome://tracing or ui.perfetto.dev

The collector keeps the newest ``max_events`` events (older ones are dropped and counted), so a
long profiling session cannot grow without bound.  Runs with a profiler take a slower loop on run
states of their own (bound without the steady shortcuts of control flow, so that the nodes of
If/Loop/Scan bodies are timed too, one event per node per iteration); runs without one pay
nothing.

In the Chrome trace every executed node is one complete ("X") event, its category the op type
and its args the op type, step kind, plugin, kernel, kernel path, input and output shapes; a
body's nodes are nested in time inside an event per body iteration (category ``iteration``),
itself inside the event of the If/Loop/Scan node that ran it, with the iteration number, the
parent node and the nesting depth in their args.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import threading
import time
from typing import Any

__all__ = ["BodyFrame", "ProfileEvent", "Profiler"]

#: Event kinds that are not nodes: a whole run, one iteration of a body.
RUN, ITERATION = "run", "iteration"


@dataclasses.dataclass(frozen=True)
class ProfileEvent:
    name: str  # node name (or op type when the node has none)
    op_type: str
    kind: str  # static, dynamic, view, assembled; "run" for a whole run, "iteration" for a body's
    start_ns: int
    duration_ns: int
    thread: int
    #: What the trace shows besides (shapes, plugin, kernel; iteration and parent in bodies).
    args: dict[str, Any] | None = None
    #: 0 for the model's own nodes, 1 inside a body, 2 inside a body's body...
    depth: int = 0


class BodyFrame:
    """What a profiled step hands the bodies it runs (through its run state's limits): the
    profiler, the step's node and op type (the parent of their events), their depth, and how
    many times each body ran so far in this step: the iteration number of the next run."""

    __slots__ = ("counts", "depth", "op_type", "parent", "profiler")

    def __init__(self, profiler: Profiler, parent: str, op_type: str, depth: int) -> None:
        self.profiler = profiler
        self.parent = parent
        self.op_type = op_type
        self.depth = depth
        self.counts: dict[int, int] = {}

    def next_iteration(self, body: object) -> int:
        k = self.counts.get(id(body), 0)
        self.counts[id(body)] = k + 1
        return k


class Profiler:
    def __init__(self, max_events: int = 100_000) -> None:
        if max_events < 1:
            raise ValueError("max_events must be positive")
        self._events: collections.deque[ProfileEvent] = collections.deque(maxlen=max_events)
        self._lock = threading.Lock()
        self.dropped = 0
        self._origin = time.perf_counter_ns()

    def record(self, event: ProfileEvent) -> None:
        with self._lock:
            if len(self._events) == self._events.maxlen:
                self.dropped += 1
            self._events.append(event)

    @property
    def events(self) -> list[ProfileEvent]:
        with self._lock:
            return list(self._events)

    def clear(self) -> None:
        with self._lock:
            self._events.clear()
            self.dropped = 0

    def by_operator(self, bodies: bool = False) -> list[tuple[str, int, float, float]]:
        """(op type, calls, total ms, share of all step time), slowest first: the model's own
        nodes, or (``bodies``) the nodes inside If/Loop/Scan bodies, whose time is also part
        of their parent node's."""
        totals: dict[str, list[float]] = {}
        for e in self.events:
            if e.kind in (RUN, ITERATION) or (e.depth > 0) != bodies:
                continue
            t = totals.setdefault(e.op_type, [0, 0.0])
            t[0] += 1
            t[1] += e.duration_ns / 1e6
        grand = sum(t[1] for t in totals.values()) or 1.0
        rows = [(op, int(n), ms, ms / grand) for op, (n, ms) in totals.items()]
        return sorted(rows, key=lambda r: -r[2])

    def summary(self) -> str:
        runs = [e for e in self.events if e.kind == "run"]
        lines = [
            f"{len(runs)} run(s) profiled"
            + (f", {self.dropped} events dropped" if self.dropped else "")
        ]
        lines.append(f"{'operator':<28}{'calls':>8}{'total ms':>12}{'share':>8}")
        for op, n, ms, share in self.by_operator():
            lines.append(f"{op:<28}{n:>8}{ms:>12.3f}{share:>7.1%}")
        inner = self.by_operator(bodies=True)
        if inner:
            lines.append("inside control-flow bodies (part of their If/Loop/Scan's time):")
            for op, n, ms, share in inner:
                lines.append(f"{op:<28}{n:>8}{ms:>12.3f}{share:>7.1%}")
        return "\n".join(lines)

    def chrome_trace(self) -> dict[str, Any]:
        pid = os.getpid()
        trace = [
            {
                "name": e.name,
                "cat": e.kind if e.kind in (RUN, ITERATION) else e.op_type,
                "ph": "X",
                "ts": (e.start_ns - self._origin) / 1000.0,
                "dur": e.duration_ns / 1000.0,
                "pid": pid,
                "tid": e.thread,
                "args": {"op_type": e.op_type, "kind": e.kind, **(e.args or {})},
            }
            for e in self.events
        ]
        return {"traceEvents": trace, "displayTimeUnit": "ms"}

    def write_chrome_trace(self, path: str | os.PathLike) -> None:
        import json  # here, not at the top: ``import graphrt`` imports this module

        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.chrome_trace(), f)
