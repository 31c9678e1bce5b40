"""Slice, Gather, GatherElements and ScatterElements of graphrt-ops-basic: ONNX's clamping
corners of Slice (random cases against an element-by-element reading of the spec), negative
and out-of-range indices, every opset form, run-time starts (a dynamic node), ScatterElements'
reductions against a loop, and errors with their kinds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphrt.errors import SessionError
from graphrt.kernel import InferContext, KernelContext
from tests._versions import ONNX
from tests.ops._tensor import (
    X,
    assert_same,
    evaluate,
    ints,
    kernel_for,
    kind_of,
    onnxruntime_run,
    reference,
    session_for,
)

# -- Slice --------------------------------------------------------------------------------------


def spec_slice_indices(start: int, end: int, step: int, dim: int) -> list[int]:
    """The elements ONNX's Slice (opset 13 text) selects along one axis, one by one."""
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    else:
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    out, i = [], start
    while (step > 0 and i < end) or (step < 0 and i > end):
        out.append(i)
        i += step
    return out


def spec_slice(x, starts, ends, axes, steps):
    for s, e, a, k in zip(starts, ends, axes, steps):
        x = np.take(x, spec_slice_indices(s, e, k, x.shape[a]), axis=a)
    return x


BOUND = st.one_of(st.integers(-12, 12), st.sampled_from([2**63 - 1, -(2**63), 2**31 - 1, -(2**31)]))


@st.composite
def slice_cases(draw):
    shape = draw(st.lists(st.integers(0, 6), min_size=1, max_size=3))
    rank = len(shape)
    axes = draw(st.permutations(range(rank)).map(list))[: draw(st.integers(1, rank))]
    axes = [a - rank if draw(st.booleans()) else a for a in axes]  # negative axes too
    n = len(axes)
    starts = draw(st.lists(BOUND, min_size=n, max_size=n))
    ends = draw(st.lists(BOUND, min_size=n, max_size=n))
    steps = draw(st.lists(st.integers(-4, 4).filter(bool), min_size=n, max_size=n))
    dtype = draw(st.sampled_from([np.int64, np.int32]))
    return shape, starts, ends, axes, steps, dtype


@settings(max_examples=300, deadline=None)
@given(slice_cases())
def test_slice_matches_the_spec_for_random_bounds(case):
    shape, starts, ends, axes, steps, dtype = case
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    if dtype == np.int32:  # int32 inputs: the extremes clipped into range
        starts = [min(max(i, -(2**31)), 2**31 - 1) for i in starts]
        ends = [min(max(i, -(2**31)), 2**31 - 1) for i in ends]
    args = [np.array(v, dtype) for v in (starts, ends, axes, steps)]
    got = evaluate("Slice", x, *args, opset=13)
    want = spec_slice(x, starts, ends, [a % len(shape) for a in axes], steps)
    assert_same(got, want)


def test_slice_negative_starts_ends_and_steps():
    x = np.arange(10, dtype=np.int64)
    for (s, e, k), want in [
        ((-3, 100, 1), [7, 8, 9]),
        ((-1, -100, -1), list(range(9, -1, -1))),
        ((-1, -100, -3), [9, 6, 3, 0]),
        ((100, -100, -2), [9, 7, 5, 3, 1]),
        ((-100, -200, -1), [0]),  # ONNX clamps start to 0 (Python's slicing gives [])
        ((-100, 0, -1), []),
        ((2, 2, 1), []),
        ((0, -1, 4), [0, 4, 8]),
        ((2**63 - 1, -(2**63), -1), list(range(9, -1, -1))),
    ]:
        got = evaluate("Slice", x, *[np.array([v]) for v in (s, e, 0, k)], opset=13)
        assert got.tolist() == want, (s, e, k)


def test_slice_axes_default_and_negative_and_empty_axis():
    got = evaluate("Slice", X, np.array([1, 1]), np.array([3, -1]), opset=13)
    assert_same(got, X[1:3, 1:-1])
    got = evaluate("Slice", X, np.array([-2]), np.array([0]), np.array([-1]), np.array([-1]))
    assert_same(got, X[:, :, 3:0:-1])
    empty = np.zeros((0, 3), np.float32)
    got = evaluate("Slice", empty, np.array([5]), np.array([-9]), np.array([0]), np.array([-1]))
    assert got.shape == (0, 3)


def test_slice_before_opset_10_reads_attributes():
    for opset in (1, 9):
        kw = dict(starts=[0, -3], ends=[2, 100], axes=[0, 2])
        got = evaluate("Slice", X, opset=opset, **kw)
        assert_same(got, X[0:2, :, -3:])
        assert_same(got, reference("Slice", X, opset=opset, **kw))
    got = evaluate("Slice", X, opset=1, starts=[1], ends=[1000])
    assert_same(got, X[1:])


def test_slice_errors():
    a = np.array
    assert kind_of(lambda: evaluate("Slice", X, a([0]), a([1]), a([0]), a([0]))) == "invalid_input"
    assert kind_of(lambda: evaluate("Slice", X, a([0, 0]), a([1]))) == "invalid_input"
    assert (
        kind_of(lambda: evaluate("Slice", X, a([0, 0]), a([1, 1]), a([1, -2]))) == "invalid_input"
    )
    assert kind_of(lambda: evaluate("Slice", X, a([0]), a([1]), a([3]))) == "invalid_input"
    assert kind_of(lambda: kernel_for("Slice", opset=9, starts=[0])) == "invalid_model"


def test_slice_with_run_time_starts_is_dynamic_and_constant_starts_static():
    x = X.copy()
    starts = np.array([-2], np.int64)
    sess = session_for("Slice", {"x": x, "s": starts}, [ints("e", [-100]), ints("a", [2])], 13)
    for s in ([-2], [4], [0]):
        s = np.array(s, np.int64)
        y = sess.run(None, {"x": x, "s": s})[0]
        assert_same(y, spec_slice(x, [s[0]], [-100], [2], [1]))
    assert not sess.cached_plans[0].static
    sess = session_for(
        "Slice", {"x": x}, [ints("s", [-1]), ints("e", [-100]), ints("a", [2]), ints("k", [-2])]
    )
    assert_same(sess.run(None, {"x": x})[0], x[:, :, ::-2])
    assert sess.cached_plans[0].static


# -- Gather, GatherElements, ScatterElements ----------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
@pytest.mark.parametrize("itype", [np.int64, np.int32])
def test_gather_any_axis_negative_and_scalar_indices(axis, itype):
    n = X.shape[axis]
    for idx in (np.array([[0, -1], [n - 1, -n]]), np.array(-1), np.array(1), np.array([], int)):
        idx = idx.astype(itype)
        got = evaluate("Gather", X, idx, axis=axis)
        assert_same(got, np.take(X, idx, axis=axis))
    if ONNX >= (1, 23):
        assert_same(got, reference("Gather", X, idx, axis=axis, opset=13))
    else:  # onnx's reference Gather before 1.23 gives shape (0,) for any empty indices
        assert_same(got, onnxruntime_run("Gather", X, idx, axis=axis, opset=13))


def test_gather_out_of_range_index_is_invalid_input():
    for idx in ([0, 3], [-4], [2**40]):
        with pytest.raises(SessionError) as err:
            evaluate("Gather", X, np.array(idx))
        assert err.value.kind == "invalid_input"
        assert "out of range" in str(err.value)
    # run-time indices in a static plan: checked in every run, through bind
    sess = session_for("Gather", {"x": X, "i": np.array([0, 1])}, axis=1)
    assert_same(sess.run(None, {"x": X, "i": np.array([-4, 3])})[0], X[:, [0, 3]])
    assert sess.cached_plans[0].static
    with pytest.raises(SessionError) as err:
        sess.run(None, {"x": X, "i": np.array([0, 4])})
    assert err.value.kind == "invalid_input"
    # constant indices: checked when the plan is made
    with pytest.raises(SessionError) as err:
        session_for("Gather", {"x": X}, [ints("i", [5])], axis=1).run(None, {"x": X})
    assert err.value.kind == "invalid_input"


def test_gather_elements_negative_indices_and_errors():
    rng = np.random.default_rng(3)
    for axis in (0, 1, 2, -1):
        n = X.shape[axis]
        shape = [2, 3, 4]
        idx = rng.integers(-n, n, shape)
        got = evaluate("GatherElements", X, idx, axis=axis)
        # indices smaller than data off the axis read data's leading corner
        corner = tuple(slice(0, s) if k != axis % 3 else slice(None) for k, s in enumerate(shape))
        want = np.take_along_axis(X[corner], idx % n, axis=axis % 3)
        assert_same(got, want)
        sess = session_for("GatherElements", {"x": X, "i": idx}, axis=axis)
        assert_same(sess.run(None, {"x": X, "i": idx})[0], want)
    full = rng.integers(-3, 3, X.shape)
    assert_same(evaluate("GatherElements", X, full), reference("GatherElements", X, full, opset=13))
    for idx in (np.full((1, 1, 1), 3), np.full((1, 1, 1), -4)):
        assert kind_of(lambda idx=idx: evaluate("GatherElements", X, idx)) == "invalid_input"
    assert kind_of(lambda: evaluate("GatherElements", X, np.zeros((4, 1, 1), int), axis=1)) == (
        "invalid_input"
    )
    assert kind_of(lambda: evaluate("GatherElements", X, np.zeros((1, 1), int))) == "invalid_input"


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements_matches_a_loop(reduction):
    rng = np.random.default_rng(5)
    data = rng.standard_normal((3, 4)).astype(np.float32)
    for axis in (0, 1, -1):
        n = data.shape[axis]
        idx = rng.integers(-n, n, (2, 3))
        if reduction == "none":  # repeated indices are undefined without a reduction
            idx = np.array([[0, -1, 1], [1, 0, 2]] if axis == 0 else [[0, -1, 1], [3, 0, -2]])
        upd = rng.standard_normal((2, 3)).astype(np.float32)
        want = data.copy()
        for i in range(2):
            for j in range(3):
                at = (idx[i, j] % n, j) if axis == 0 else (i, idx[i, j] % n)
                f = {
                    "none": lambda a, b: b,
                    "add": np.add,
                    "mul": np.multiply,
                    "max": np.maximum,
                    "min": np.minimum,
                }[reduction]
                want[at] = f(want[at], upd[i, j])
        got = evaluate("ScatterElements", data, idx, upd, axis=axis, reduction=reduction)
        assert_same(got, want)
        # in place over data's storage, as a plan runs it when data dies here
        kernel = kernel_for("ScatterElements", 18, 3, axis=axis, reduction=reduction)
        d = data.copy()
        ictx = InferContext(
            [d.dtype, idx.dtype, upd.dtype], [d.shape, idx.shape, upd.shape], [None] * 3, 1
        )
        kernel.infer(ictx)
        scratch = [np.full(s, 7, dt) for dt, s in ictx.scratch]
        kernel.bind(KernelContext(ictx.prepared, scratch), [d, idx, upd], [d])()
        assert_same(d, want)


def test_scatter_elements_errors_and_old_reductions():
    data = np.zeros((2, 2), np.float32)
    assert kind_of(lambda: kernel_for("ScatterElements", 16, 3, reduction="max")) == (
        "invalid_model"
    )
    bad = (data, np.array([[2]]), np.ones((1, 1), np.float32))
    assert kind_of(lambda: evaluate("ScatterElements", *bad, opset=18)) == "invalid_input"
    mismatch = (data, np.array([[0]]), np.ones((1, 2), np.float32))
    assert kind_of(lambda: evaluate("ScatterElements", *mismatch)) == "invalid_input"
