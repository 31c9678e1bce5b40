"""A bounded profiling collector: per-step times of runs, as a table or a Chrome trace.

    prof = graphrt.Profiler(max_events=100_000)
    sess.run(None, feed, profiler=prof)
    print(prof.summary())
    prof.write_chrome_trace("trace.json")   # chrome://tracing or ui.perfetto.dev

The collector keeps the newest ``max_events`` events (older ones are dropped and counted), so a
long profiling session cannot grow without bound.  Runs with a profiler take a slower loop; runs
without one pay nothing.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import threading
import time
from typing import Any

__all__ = ["ProfileEvent", "Profiler"]


@dataclasses.dataclass(frozen=True)
class ProfileEvent:
    name: str  # node name (or op type when the node has none)
    op_type: str
    kind: str  # static, dynamic, or "run" for a whole run
    start_ns: int
    duration_ns: int
    thread: int


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

    def by_operator(self) -> list[tuple[str, int, float, float]]:
        """(op type, calls, total ms, share of all step time), slowest first."""
        totals: dict[str, list[float]] = {}
        for e in self.events:
            if e.kind == "run":
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
        return "\n".join(lines)

    def chrome_trace(self) -> dict[str, Any]:
        pid = os.getpid()
        trace = [
            {
                "name": e.name,
                "cat": e.op_type if e.kind != "run" else "run",
                "ph": "X",
                "ts": (e.start_ns - self._origin) / 1000.0,
                "dur": e.duration_ns / 1000.0,
                "pid": pid,
                "tid": e.thread,
                "args": {"op_type": e.op_type, "kind": e.kind},
            }
            for e in self.events
        ]
        return {"traceEvents": trace, "displayTimeUnit": "ms"}

    def write_chrome_trace(self, path: str | os.PathLike) -> None:
        import json  # here, not at the top: ``import graphrt`` imports this module

        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.chrome_trace(), f)
