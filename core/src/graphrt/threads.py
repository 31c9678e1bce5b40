"""Intra-op threads, and numpy's BLAS pool kept out of the way.

graphrt parallelises inside kernels itself (``KernelContext.parallel_for``), always over blocks
whose count depends on shapes only, so results never depend on the thread count.  numpy's BLAS
has its own pool whose splitting graphrt cannot see; while any session is open it is limited to
one thread (through threadpoolctl) and restored when the last session closes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
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


class IntraOpPool:
    """``threads - 1`` workers plus the calling thread; work is claimed block by block."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._executor = (
            ThreadPoolExecutor(max_workers=threads - 1, thread_name_prefix="graphrt-intra-op")
            if threads > 1
            else None
        )

    def parallel_for(self, n: int, fn: Callable[[int], None]) -> None:
        if self._executor is None or n <= 1:
            for i in range(n):
                fn(i)
            return
        lock = threading.Lock()
        next_block = [0]
        errors: list[BaseException] = []

        def worker() -> None:
            while True:
                with lock:
                    i = next_block[0]
                    next_block[0] += 1
                if i >= n or errors:
                    return
                try:
                    fn(i)
                except BaseException as exc:
                    errors.append(exc)
                    return

        helpers = min(self.threads - 1, n - 1)
        futures = [self._executor.submit(worker) for _ in range(helpers)]
        worker()
        for f in futures:
            f.result()
        if errors:
            raise errors[0]

    def shutdown(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False)


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
