"""Runs of one session from several Python threads at once, for the tests that check that
kernels keep no per-run state in what plans share (prepared data, the kernel object)."""

from __future__ import annotations

import threading

import numpy as np


def bits(a: np.ndarray) -> np.ndarray:
    """The array's bits as unsigned integers (NaN payloads and -0 compared too)."""
    return np.ascontiguousarray(a).view(np.dtype(f"u{a.dtype.itemsize}"))


def concurrent_mismatches(session, feeds: dict, want: np.ndarray, threads=4, runs=8) -> int:
    """How many of ``threads * runs`` concurrent runs of ``session`` did not give the bits of
    ``want`` (its first output)."""
    wrong = []

    def worker() -> None:
        for _ in range(runs):
            if not np.array_equal(bits(session.run(None, feeds)[0]), bits(want)):
                wrong.append(1)

    workers = [threading.Thread(target=worker) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return len(wrong)
