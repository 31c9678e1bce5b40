"""Steady state allocates no numpy array data (seed 000, section 4), measured with tracemalloc."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from onnx import helper

import graphrt
from tests._models import add_chain, light_model, make_model, mlp, small_cnn, tensor
from tests._numpy_alloc import count_numpy_allocations


def numpy_domain_bytes_kept(fn, repeat: int = 3) -> int:
    """Bytes of numpy array data ``fn`` allocated and still holds (tracemalloc, numpy's domain)."""
    fn()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(repeat):
            fn()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    filt = [tracemalloc.DomainFilter(inclusive=True, domain=np.lib.tracemalloc_domain)]
    diff = after.filter_traces(filt).compare_to(before.filter_traces(filt), "lineno")
    return sum(max(0, s.size_diff) for s in diff)


def assert_no_numpy_allocation(fn, repeat: int = 3) -> None:
    kept = numpy_domain_bytes_kept(fn, repeat)
    assert kept == 0, f"{kept} bytes of numpy array data allocated and kept"
    with count_numpy_allocations() as counter:  # transient allocations too
        for _ in range(repeat):
            fn()
    assert counter.count == 0, f"{counter.count} numpy data allocations ({counter.bytes} bytes)"


@pytest.mark.parametrize(
    ("make", "shape"),
    [
        (lambda: small_cnn(channels=16), (2, 3, 16, 16)),
        (lambda: mlp(hidden=(256, 128)), (4, 24)),
        (lambda: add_chain(100), (1, 64)),
    ],
    ids=["cnn", "mlp", "add-chain"],
)
def test_static_steady_state_allocates_no_array_data(make, shape):
    sess = graphrt.Session(make(), intra_op_threads=1)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    out_name = sess.get_outputs()[0].name
    out = {out_name: np.empty(sess.run(None, {"x": x})[0].shape, np.float32)}
    feed = {"x": x}
    for _ in range(3):  # warm the plan and the run-state pool
        sess.run(None, feed, out=out)
    assert sess.cached_plans[0].static
    assert_no_numpy_allocation(lambda: sess.run(None, feed, out=out))


def test_exact_mode_cnn_steady_state_allocates_no_array_data():
    """Exact Conv, BatchNormalization, pools, Softmax and the canonical-NaN rewrites too."""
    sess = graphrt.Session(small_cnn(channels=16), mode="exact", intra_op_threads=1)
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
    out = {sess.get_outputs()[0].name: np.empty((2, 10), np.float32)}
    for _ in range(3):
        sess.run(None, {"x": x}, out=out)
    assert_no_numpy_allocation(lambda: sess.run(None, {"x": x}, out=out))


@pytest.mark.parametrize("op", ["Exp", "Tanh", "Sigmoid", "Erf", "Softmax", "Relu"])
def test_exact_mode_element_wise_steady_state_allocates_no_array_data(op):
    model = make_model(
        [helper.make_node(op, ["x"], ["y"])], [tensor("x", shape=[4, 300])], [tensor("y")]
    )
    sess = graphrt.Session(model, mode="exact", intra_op_threads=1)
    feed = {"x": np.random.default_rng(1).standard_normal((4, 300)).astype(np.float32)}
    out = {"y": np.empty((4, 300), np.float32)}
    for _ in range(3):
        sess.run(None, feed, out=out)
    assert_no_numpy_allocation(lambda: sess.run(None, feed, out=out))


def test_light_resnet50_steady_state_allocates_nothing():
    sess = graphrt.Session(light_model("resnet50"), intra_op_threads=1)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    name = sess.get_inputs()[0].name
    out = {sess.get_outputs()[0].name: np.empty((1, 1000), np.float32)}
    for _ in range(2):
        sess.run(None, {name: x}, out=out)
    assert_no_numpy_allocation(lambda: sess.run(None, {name: x}, out=out), repeat=1)


def test_the_measurement_sees_allocations():
    """The probes must fail when numpy does allocate (else the tests above prove nothing)."""
    kept = []
    assert numpy_domain_bytes_kept(lambda: kept.append(np.ones(100))) >= 3 * 800
    with pytest.raises(AssertionError, match="numpy data allocations"):
        assert_no_numpy_allocation(lambda: np.empty(1024, np.float32).fill(0))
