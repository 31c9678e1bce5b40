"""Many threads running one session give exactly the serial results."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import graphrt
from tests._models import mlp, small_cnn

THREADS = 8
RUNS = 50


def _inputs(shape_fn, n):
    rng = np.random.default_rng(42)
    return [rng.standard_normal(shape_fn(i)).astype(np.float32) for i in range(n)]


@pytest.mark.parametrize(
    ("make", "shape_fn", "intra"),
    [
        (lambda: mlp(hidden=(64, 48)), lambda i: (1 + i % 5, 24), 1),
        (lambda: mlp(hidden=(64, 48)), lambda i: (1 + (i * 7) % 200, 24), 2),
        (small_cnn, lambda i: (1 + i % 3, 3, 16, 16), 1),
    ],
    ids=["mlp", "mlp-intra2", "cnn"],
)
def test_threads_equal_serial(make, shape_fn, intra):
    sess = graphrt.Session(make(), intra_op_threads=intra)
    xs = _inputs(shape_fn, THREADS * RUNS)
    serial = [sess.run(None, {"x": x})[0] for x in xs]
    results: list = [None] * len(xs)
    errors: list = []
    barrier = threading.Barrier(THREADS)

    def worker(t: int) -> None:
        barrier.wait()
        try:
            for r in range(RUNS):
                i = t * RUNS + r
                results[i] = sess.run(None, {"x": xs[i]})[0]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    for want, got in zip(serial, results):
        assert want.tobytes() == got.tobytes()
    # pooled run states were shared; never more than one per concurrent run per plan
    for states in sess._plans.values():
        assert states.states_created <= THREADS + 1


def test_outputs_are_copied_out_before_the_run_state_returns_to_the_pool(monkeypatch):
    """Another thread may take the state the moment it is released: simulate exactly that."""
    from graphrt.runstate import StatePool

    sess = graphrt.Session(mlp(hidden=(16,)), intra_op_threads=1)
    x, other = _inputs(lambda i: (3, 24), 2)
    want = sess.run(None, {"x": x})[0].copy()
    release = StatePool.release

    def release_then_reuse(states, state):
        release(states, state)
        if not getattr(state, "_reused", False):
            stolen = states.acquire(None)
            stolen._reused = True
            stolen.run([other])  # what a concurrent run would write into the same slab
            release(states, stolen)
            stolen._reused = False

    monkeypatch.setattr(StatePool, "release", release_then_reuse)
    got = sess.run(None, {"x": x})[0]
    assert got.tobytes() == want.tobytes()
