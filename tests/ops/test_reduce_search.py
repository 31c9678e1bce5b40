"""The reduce family of graphrt-ops-basic, part 1: ReduceL1/L2/LogSum/LogSumExp/SumSquare,
ArgMax, ArgMin, TopK and Unique (part 2, test_reduce_family.py: CumSum, CumProd, Det, Einsum and
the family as a whole).

Beyond onnx's node cases (tests/test_backend.py): every opset form and attribute against onnx's
reference evaluator or a loop written from the operator's text, ties, NaN and signed zeros in the
selections, each internal path of TopK, run-time k inputs, and errors by kind.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import graphrt
from graphrt_ops_basic import search
from graphrt_ops_basic.unique import _axis_first, _rows
from tests._versions import ONNX
from tests.ops._reduce import (
    ELEMENT_WISE_STEPS,
    REDUCTIONS,
    RNG,
    error,
    evaluate,
    ints,
    one_node_model,
    reference,
    same,
    session,
    spec_top_k,
    top_k_data,
)

# -- reductions ---------------------------------------------------------------------------------


@pytest.mark.parametrize("op", REDUCTIONS)
@pytest.mark.parametrize("axes", [None, [0], [1, -1], [-3, 2], []])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("noop", [0, 1])
def test_reductions_with_axes_input_match_the_reference(op, axes, keepdims, noop):
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    if op == "ReduceLogSum":
        x = np.abs(x) + 0.1
    inputs = [x] if axes is None else [x, np.array(axes, np.int64)]
    attrs = {"keepdims": keepdims, "noop_with_empty_axes": noop}
    got = evaluate(op, *inputs, opset=18, **attrs)
    if ONNX < (1, 20) and noop and not axes:
        # onnx's reference evaluator before 1.20 reduces over every axis here, ignoring
        # noop_with_empty_axes; the spec keeps only the element-wise steps
        want = ELEMENT_WISE_STEPS[op](x)
    else:
        want = reference(op, *inputs, opset=18, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert got.shape == want.shape and got.dtype == np.float32


@pytest.mark.parametrize("op", REDUCTIONS)
@pytest.mark.parametrize("opset", [1, 11, 13])
def test_reductions_with_axes_attribute_match_the_reference(op, opset):
    x = np.abs(RNG.standard_normal((2, 3, 4))).astype(np.float32) + 0.1
    for attrs in ({}, {"axes": [0, 2], "keepdims": 0}, {"axes": [-1]}):
        got = evaluate(op, x, opset=opset, **attrs)
        want = reference(op, x, opset=opset, **attrs)
        np.testing.assert_allclose(got, want, rtol=1e-5)
        assert got.shape == want.shape


def test_noop_with_empty_axes_keeps_the_element_wise_steps():
    x = np.array([[2.0, 3.0], [0.5, 0.25]], np.float32)
    x_neg = -x
    noop = {"noop_with_empty_axes": 1}
    for op, step in ELEMENT_WISE_STEPS.items():
        v = x if op == "ReduceLogSum" else x_neg
        want = step(v)
        for inputs in ([v], [v, np.zeros(0, np.int64)]):
            np.testing.assert_allclose(evaluate(op, *inputs, opset=18, **noop), want, rtol=1e-6)


@pytest.mark.parametrize(
    ("op", "identity"),
    [
        ("ReduceL1", 0.0),
        ("ReduceL2", 0.0),
        ("ReduceSumSquare", 0.0),
        ("ReduceLogSum", -np.inf),
        ("ReduceLogSumExp", -np.inf),
    ],
)
def test_empty_reductions_give_the_identity(op, identity):
    x = np.zeros((2, 0, 3), np.float32)
    got = evaluate(op, x, np.array([1], np.int64), opset=18)
    same(got, np.full((2, 1, 3), identity, np.float32))
    same(evaluate(op, x, np.array([0], np.int64), opset=18), np.zeros((1, 0, 3), np.float32))


def test_log_sum_exp_is_stable_and_handles_infinities():
    x = np.array(
        [[1000, 1000], [-np.inf, -np.inf], [np.inf, 1], [np.nan, 1], [-1000, -1000]], np.float32
    )
    with np.errstate(divide="ignore"):
        got = evaluate("ReduceLogSumExp", x, np.array([1], np.int64), opset=18, keepdims=0)
    want = [1000 + np.log(2), -np.inf, np.inf, np.nan, -1000 + np.log(2)]
    np.testing.assert_allclose(got, np.array(want, np.float32), rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32])
def test_integer_reductions(dtype):
    x = RNG.integers(0 if dtype == np.uint32 else -7, 8, (3, 5)).astype(dtype)
    axes = np.array([1], np.int64)
    wide = x.astype(np.float64)
    same(evaluate("ReduceL1", x, axes, opset=18), np.abs(wide).sum(1, keepdims=True).astype(dtype))
    sq = (wide * wide).sum(1, keepdims=True)
    same(evaluate("ReduceSumSquare", x, axes, opset=18), sq.astype(dtype))
    same(evaluate("ReduceL2", x, axes, opset=18), np.sqrt(sq).astype(dtype))  # truncated


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float64])
def test_narrow_and_wide_floats(dtype):
    x = RNG.standard_normal((4, 6)).astype(dtype)
    wide = x.astype(np.float64)
    for op, fn in [
        ("ReduceL2", lambda v: np.sqrt((v * v).sum(1))),
        ("ReduceLogSumExp", lambda v: np.log(np.exp(v).sum(1))),
        ("ReduceL1", lambda v: np.abs(v).sum(1)),
    ]:
        got = evaluate(op, x, np.array([1], np.int64), opset=18, keepdims=0)
        assert got.dtype == np.dtype(dtype)
        tol = 1e-12 if dtype == np.float64 else 1e-2
        np.testing.assert_allclose(got.astype(np.float64), fn(wide), rtol=tol)


def test_reduction_axes_errors():
    x = np.ones((2, 3), np.float32)
    err = error(lambda: evaluate("ReduceL2", x, np.array([2], np.int64), opset=18))
    assert err.kind == "invalid_input" and "'n'" in str(err)
    err = error(lambda: evaluate("ReduceL2", x, opset=13, axes=[-3]))
    assert err.kind == "invalid_model"


# -- ArgMax, ArgMin -------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("opset", [1, 11, 12, 13])
def test_arg_extremes_match_the_reference(op, opset):
    x = RNG.integers(0, 3, (3, 4, 5)).astype(np.float32)  # many ties
    for axis in (0, 1, -1):
        for keepdims in (0, 1):
            for last in (0, 1) if opset >= 12 else (0,):
                attrs = {"axis": axis, "keepdims": keepdims}
                if opset >= 12:
                    attrs["select_last_index"] = last
                got = evaluate(op, x, opset=opset, **attrs)
                same(got, reference(op, x, opset=opset, **attrs).astype(np.int64))


def test_arg_extremes_take_nan_as_numpy_does():
    x = np.array([[1, np.nan, 3, np.nan]], np.float32)
    same(evaluate("ArgMax", x, axis=1, opset=13), np.array([[1]]))
    same(evaluate("ArgMin", x, axis=1, opset=13), np.array([[1]]))
    same(evaluate("ArgMax", x, axis=1, select_last_index=1, opset=13), np.array([[3]]))


@pytest.mark.parametrize("dtype", [np.int8, np.uint64, np.float16, ml_dtypes.bfloat16, np.bool_])
def test_arg_extremes_of_other_types(dtype):
    x = RNG.integers(0, 2, (4, 6)).astype(dtype)
    want = np.argmax(x.astype(np.float32), axis=1)
    same(evaluate("ArgMax", x, axis=1, keepdims=0, opset=13), want.astype(np.int64))


def test_arg_extreme_errors():
    err = error(lambda: evaluate("ArgMax", np.zeros((2, 0), np.float32), axis=1))
    assert err.kind == "invalid_input" and "empty axis" in str(err)
    assert evaluate("ArgMax", np.zeros((0, 3), np.float32), axis=1).shape == (0, 1)
    assert error(lambda: evaluate("ArgMin", np.zeros((2, 3)), axis=2)).kind == "invalid_model"


# -- TopK -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize(
    ("n", "k", "nan"),
    [  # sorted whole; partitioned (k large, or a NaN); prefiltered
        (7, 3, True),
        (40, 40, True),
        (300, 20, True),
        (1000, 200, False),
        (1000, 20, True),
        (5000, 10, False),
    ],
)
def test_top_k_matches_the_spec_with_ties_nan_and_signed_zeros(largest, n, k, nan):
    x = top_k_data((3, n), np.float32, nan)
    values, indices = evaluate("TopK", x, np.array([k]), n_outputs=2, axis=1, largest=largest)
    want_v, want_i = spec_top_k(x, k, 1, largest)
    same(indices, want_i)
    same(values.view(np.int32), want_v.view(np.int32))  # -0 and +0 kept as they were


@pytest.mark.parametrize("largest", [False, True])
def test_each_top_k_path_agrees_with_the_full_sort(largest):
    for rows in (
        RNG.integers(-3, 3, (4, 2000)).astype(np.int32),  # ties at the boundary
        np.tile(np.arange(2000, dtype=np.float64), (2, 1)),  # sorted: many candidates
        np.zeros((2, 2000), np.float32),  # all equal: prefilter gives up
        RNG.standard_normal((3, 2000)).astype(np.float16),
        RNG.integers(0, 2, (2, 2000)).astype(np.bool_),
    ):
        for k in (1, 7, 60):
            want = search._sorted_first(rows, k, largest)
            got = search._partitioned(search.sort_keys(rows, largest), k)
            same(got, want)
            pre = search._prefiltered(rows, k, largest)
            if pre is not None:
                same(pre, want)


def test_the_prefilter_is_used_on_a_long_axis():
    rows = RNG.standard_normal((2, 10000)).astype(np.float32)
    assert search._prefiltered(rows, 5, True) is not None
    rows[0, 17] = np.nan  # a NaN bounds nothing: the partition path runs instead
    assert search._prefiltered(rows, 5, True) is None
    same(search.top_positions(rows, 5, True)[0, 0], np.intp(17))


@pytest.mark.parametrize(
    "dtype",
    [
        *(np.int8, np.uint8, np.int16, np.int32, np.uint32, np.int64, np.uint64, np.bool_),
        *(np.float16, np.float64, ml_dtypes.bfloat16),
    ],
)
def test_top_k_of_every_type(dtype):
    """Along a long axis (the general paths) and a short one (pairs sorted whole, or argsort
    for 64-bit integers), with values at both ends of the type."""
    x = RNG.integers(0, 100, (2, 3, 500)).astype(dtype)
    if np.dtype(dtype).kind in "iu":
        x[0, :, :2] = [np.iinfo(dtype).min, np.iinfo(dtype).max]
    for largest in (0, 1):
        for axis in (2, 1):
            k = 3 if axis == 1 else 25
            got = evaluate("TopK", x, np.array([k]), n_outputs=2, axis=axis, largest=largest)
            want = spec_top_k(x, k, axis, largest)
            same(got[1], want[1])
            same(got[0], want[0])


@pytest.mark.parametrize("opset", [1, 10, 11])
def test_top_k_opset_forms_match_the_reference(opset):
    x = RNG.integers(0, 5, (3, 6, 4)).astype(np.float32)
    for axis in (-1, 1, 0):
        for attrs in ({}, {"largest": 0, "sorted": 1}, {"largest": 1, "sorted": 0}):
            if opset < 11 and attrs:
                continue
            if opset < 10:
                got = evaluate("TopK", x, opset=opset, n_outputs=2, axis=axis, k=3, **attrs)
                want = reference("TopK", x, opset=opset, n_outputs=2, axis=axis, k=3, **attrs)
            else:
                k = np.array([3], np.int64)
                got = evaluate("TopK", x, k, opset=opset, n_outputs=2, axis=axis, **attrs)
                oracle = dict(attrs)
                if ONNX < (1, 23) and attrs.get("sorted") == 0:
                    # onnx's reference raised for sorted=0 until onnx#8194 (in the 1.23 of the
                    # default env) returned the sorted top k, a conformant order: ask for that.
                    oracle["sorted"] = 1
                want = reference("TopK", x, k, opset=opset, n_outputs=2, axis=axis, **oracle)
            same(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])


def test_top_k_zero_and_whole_axis():
    x = RNG.standard_normal((2, 5)).astype(np.float32)
    values, indices = evaluate("TopK", x, np.array([0]), n_outputs=2)
    assert values.shape == indices.shape == (2, 0)
    values, indices = evaluate("TopK", x, np.array([5]), n_outputs=2, largest=0)
    same(values, np.sort(x, axis=1))


def test_top_k_constant_k_is_static_and_run_time_k_is_dynamic():
    x = RNG.standard_normal((3, 50)).astype(np.float32)
    static = session("TopK", {"x": x}, [ints("k", [4])], n_outputs=2)
    got = static.run(None, {"x": x})
    assert static.cached_plans[0].static
    same(got[1], spec_top_k(x, 4, 1, True)[1])
    dynamic = session("TopK", {"x": x, "k": np.array([4], np.int64)}, n_outputs=2)
    for k in (4, 9):
        got = dynamic.run(None, {"x": x, "k": np.array([k], np.int64)})
        same(got[1], spec_top_k(x, k, 1, True)[1])
        same(got[0], spec_top_k(x, k, 1, True)[0])


def test_top_k_errors():
    x = np.zeros((2, 5), np.float32)
    err = error(lambda: evaluate("TopK", x, np.array([6]), n_outputs=2))
    assert err.kind == "invalid_input" and "'n'" in str(err) and "k = 6" in str(err)
    assert error(lambda: evaluate("TopK", x, np.array([-1]), n_outputs=2)).kind == "invalid_input"
    err = error(lambda: evaluate("TopK", x, np.array([1, 2]), n_outputs=2))
    assert err.kind == "invalid_input"
    assert error(lambda: evaluate("TopK", x, opset=1, n_outputs=2)).kind == "invalid_model"
    err = error(lambda: evaluate("TopK", x, opset=1, n_outputs=2, k=9))
    assert err.kind == "invalid_input"
    sess = session("TopK", {"x": x, "k": np.array([1], np.int64)}, n_outputs=2)
    err = error(lambda: sess.run(None, {"x": x, "k": np.array([7], np.int64)}))
    assert err.kind == "invalid_input" and err.node == "n"


# -- Unique ---------------------------------------------------------------------------------------


def spec_unique(x, axis, sorted_):
    """Unique from its text, one sub-tensor at a time (NaN equal to NaN, -0 to +0)."""
    if axis is None:
        items = [x.reshape(-1)[i : i + 1] for i in range(x.size)]
    else:
        items = [np.take(x, i, axis=axis) for i in range(x.shape[axis])]

    def key(a):
        flat = a.reshape(-1).astype(np.float64)
        return tuple((1, 0.0) if v != v else (0, v + 0.0) for v in flat)

    firsts: dict[tuple, int] = {}
    for i, a in enumerate(items):
        firsts.setdefault(key(a), i)
    groups = sorted(firsts, key=lambda t: t if sorted_ else firsts[t])
    indices = np.array([firsts[g] for g in groups], np.int64)
    inverse = np.array([groups.index(key(a)) for a in items], np.int64)
    counts = np.array([sum(key(a) == g for a in items) for g in groups], np.int64)
    y = np.take(x.reshape(-1) if axis is None else x, indices, axis=0 if axis is None else axis)
    return y, indices, inverse, counts


@pytest.mark.parametrize("sorted_", [0, 1])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_unique_matches_the_spec(sorted_, axis):
    x = RNG.integers(-2, 2, (4, 6, 2)).astype(np.float32)
    x[0, 0, 0] = np.nan
    x[3, 0, 0] = np.nan
    x[1, 1, 1] = -0.0
    attrs = {"sorted": sorted_} if axis is None else {"sorted": sorted_, "axis": axis}
    got = evaluate("Unique", x, n_outputs=4, opset=11, **attrs)
    for g, w in zip(got, spec_unique(x, axis if axis is None else axis % 3, sorted_)):
        np.testing.assert_array_equal(g, w)
        assert g.dtype == w.dtype


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_unique_sorted_matches_the_reference(axis):
    x = RNG.integers(-3, 3, (8, 3)).astype(np.int64)
    attrs = {} if axis is None else {"axis": axis}
    got = evaluate("Unique", x, n_outputs=4, opset=11, **attrs)
    want = reference("Unique", x, n_outputs=4, opset=11, **attrs)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, np.asarray(w).reshape(g.shape))


def test_rows_sort_lexicographically_through_their_bytes():
    for dtype in (np.int8, np.int64, np.uint16, np.float32):
        rows = RNG.integers(-3, 3, (200, 4)).astype(dtype)
        same(_rows(rows, 0).argsort(kind="stable"), np.lexsort(rows.T[::-1]))


@pytest.mark.parametrize(
    "dtype", [np.float32, np.int8, np.bool_, np.uint16, ml_dtypes.bfloat16, np.int64, object]
)
def test_sub_tensors_move_to_the_front_whole(dtype):
    x = RNG.integers(0, 3, (2, 3, 4, 5)).astype(dtype)
    for axis in range(4):
        moved = np.moveaxis(x, axis, 0)
        same(_axis_first(x, axis), moved.reshape(moved.shape[0], -1))


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.bool_, ml_dtypes.bfloat16, object])
def test_unique_sub_tensors_along_every_axis(dtype):
    x = RNG.integers(0, 2, (2, 3, 4, 2)).astype(dtype)
    for axis in range(4):
        got = evaluate("Unique", x, n_outputs=4, opset=11, axis=axis)
        for g, w in zip(got, spec_unique(x, axis, 1)):
            np.testing.assert_array_equal(g, w)


def test_unique_of_other_types_and_shapes():
    strings = np.array(["b", "a", "b", "c"], dtype=object)
    y, idx, inv, counts = evaluate("Unique", strings, n_outputs=4, opset=11)
    assert list(y) == ["a", "b", "c"] and list(idx) == [1, 0, 3] and list(counts) == [1, 2, 1]
    assert list(inv) == [1, 0, 1, 2]
    y, idx, inv, counts = evaluate("Unique", np.zeros((0,), np.float32), n_outputs=4, opset=11)
    assert y.shape == idx.shape == inv.shape == counts.shape == (0,)
    b = np.array([True, False, True])
    same(evaluate("Unique", b, opset=11), np.array([False, True]))
    x = np.zeros((3, 0), np.float32)  # empty sub-tensors: all equal
    y, idx, inv, counts = evaluate("Unique", x, n_outputs=4, opset=11, axis=0)
    assert y.shape == (1, 0) and list(inv) == [0, 0, 0] and list(counts) == [3]


def test_unique_with_only_some_outputs_and_errors():
    x = np.array([3, 1, 3], np.int32)
    sess = graphrt.Session(
        one_node_model("Unique", {"x": x}, (), 11, 1), intra_op_threads=1
    )  # Y only
    same(sess.run(None, {"x": x})[0], np.array([1, 3], np.int32))
    err = error(lambda: evaluate("Unique", np.zeros((2, 2)), n_outputs=4, opset=11, axis=2))
    assert err.kind == "invalid_model" and "'n'" in str(err)
