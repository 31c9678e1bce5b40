"""Intra-op threads, and numpy's BLAS pool kept out of the way.

graphrt parallelises inside kernels itself (``KernelContext.parallel_for``), always over blocks
whose count depends on shapes only, so results never depend on the thread count.  numpy's BLAS
has its own pool whose splitting graphrt cannot see; while any session is open it is limited to
one thread (through threadpoolctl) and restored when the last session closes.
"""

from __future__ import annotations

import collections
import itertools
import os
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["IntraOpPool", "blas_session_closed", "blas_session_opened", "resolve_threads"]

MAX_THREADS = 256


def resolve_threads(requested: int) -> int:
    """0 means one thread per logical core (up to 256)."""
    if requested < 0:
        raise ValueError("intra_op_threads must be 0 (one per core) or a positive number")
    if requested == 0:
        try:
            requested = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            requested = os.cpu_count() or 1
    return max(1, min(requested, MAX_THREADS))


class _Job:
    """One ``parallel_for`` call: items are claimed and counted with ``itertools.count``, whose
    ``next`` is atomic under the GIL, so no lock is taken per item."""

    __slots__ = ("claim", "done", "errors", "finished", "fn", "n")

    def __init__(self, n: int, fn: Callable[[int], None]) -> None:
        self.n = n
        self.fn = fn
        self.claim = itertools.count()
        self.finished = itertools.count()
        self.done = threading.Event()
        self.errors: list[BaseException] = []

    def run(self) -> None:
        """Claim and run items until none is left; the thread finishing the last sets done."""
        n, fn = self.n, self.fn
        while True:
            i = next(self.claim)
            if i >= n:
                return
            try:
                if not self.errors:
                    fn(i)
            except BaseException as exc:
                self.errors.append(exc)
            finally:
                if next(self.finished) == n - 1:
                    self.done.set()


class IntraOpPool:
    """``threads - 1`` persistent workers plus the calling thread; work is claimed item by item.

    A call publishes its job and wakes as many workers as it has items beyond its own first;
    the caller runs items too, so a worker that wakes late finds nothing left and costs nothing.
    Workers outlive calls (no thread start, no future per call: a call costs a few wake-ups),
    and concurrent calls from several threads each get their own job.
    """

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._cond = threading.Condition()
        self._jobs: collections.deque[_Job] = collections.deque()
        self._stopped = False
        self._workers = [
            threading.Thread(target=self._work, name=f"graphrt-intra-op-{k}", daemon=True)
            for k in range(threads - 1)
        ]
        for worker in self._workers:
            worker.start()

    def parallel_for(self, n: int, fn: Callable[[int], None]) -> None:
        if self.threads == 1 or n <= 1 or self._stopped:
            for i in range(n):
                fn(i)
            return
        job = _Job(n, fn)
        with self._cond:
            self._jobs.append(job)
            self._cond.notify(min(self.threads - 1, n - 1))
        job.run()
        job.done.wait()
        with self._cond:
            if job in self._jobs:
                self._jobs.remove(job)
        if job.errors:
            raise job.errors[0]

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                job = self._jobs[0]
            job.run()
            with self._cond:  # every item claimed: the next caller's job comes first
                if self._jobs and self._jobs[0] is job:
                    self._jobs.popleft()
            del job  # an idle worker keeps no kernel's arrays alive

    def shutdown(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()


_blas_lock = threading.Lock()
_blas_sessions = 0
_blas_limiter: Any = None


def blas_session_opened() -> None:
    global _blas_sessions, _blas_limiter
    with _blas_lock:
        _blas_sessions += 1
        if _blas_sessions == 1:
            try:
                from threadpoolctl import threadpool_limits

                _blas_limiter = threadpool_limits(limits=1, user_api="blas")
            except Exception:
                _blas_limiter = None


def blas_session_closed() -> None:
    global _blas_sessions, _blas_limiter
    with _blas_lock:
        _blas_sessions = max(0, _blas_sessions - 1)
        if _blas_sessions == 0 and _blas_limiter is not None:
            try:
                _blas_limiter.restore_original_limits()
            finally:
                _blas_limiter = None
