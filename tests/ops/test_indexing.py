"""The indexing family of graphrt-ops-basic: GatherND, ScatterND, Scatter, TensorScatter,
Compress, OneHot, Trilu, EyeLike, ReverseSequence, SpaceToDepth, DepthToSpace.

Each is checked against loops written from the ONNX spec text (or numpy's equivalent) and
onnx's reference evaluator, over every attribute and opset form and every way a kernel runs;
constant inputs making static plans and run-time ones dynamic or checked per run; exact-mode
bits; one model of the family against onnxruntime; bad attributes and inputs failing by kind
through Session.run, naming the node; static steps that allocate nothing.
"""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphrt
from graphrt.attrs import node_info
from graphrt.errors import SessionError
from graphrt.kernel import InferContext, KernelContext, evaluate_node
from graphrt_ops_basic.table import OPERATORS
from tests._models import onnxruntime_limits, ort_session
from tests._versions import ONNX, onnxruntime_release
from tests.ops._tensor import assert_same, ints, onnxruntime_run, reference, session_for
from tests.test_alloc import assert_no_numpy_allocation

OPS = {
    "GatherND",
    "ScatterND",
    "Scatter",
    "TensorScatter",
    "Compress",
    "OneHot",
    "Trilu",
    "EyeLike",
    "ReverseSequence",
    "SpaceToDepth",
    "DepthToSpace",
}
DEFS = {(d.op_type, d.since): d for d in OPERATORS if d.op_type in OPS and d.domain == ""}
RNG = np.random.default_rng(0)
#: The newest ai.onnx opset the installed onnx (the reference evaluator's oracle) knows.
ONNX_OPSET = onnx.defs.onnx_opset_version()


def kernel_for(op: str, opset: int = 21, n_inputs: int = 1, **attrs):
    node = helper.make_node(op, [f"i{k}" for k in range(n_inputs)], ["o0"], **attrs)
    found = [d for d in OPERATORS if d.op_type == op and d.domain == "" and d.covers(opset)]
    return found[-1].factory(node_info(node, opset))


def evaluate(op: str, *inputs, opset: int = 21, **attrs):
    kernel = kernel_for(op, opset, len(inputs), **attrs)
    inputs = [None if x is None else np.asarray(x) for x in inputs]
    return evaluate_node(kernel, inputs, 1)[0]


def ort_node(op: str, *inputs, opset: int, **attrs):
    """onnxruntime on one node whose output has the last input's type (a test oracle)."""
    names = [f"i{k}" for k in range(len(inputs))]
    decls = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for n, v in zip(names, inputs)
    ]
    out = helper.make_tensor_value_info("y", decls[-1].type.tensor_type.elem_type, None)
    node = helper.make_node(op, names, ["y"], **attrs)
    graph = helper.make_graph([node], "g", decls, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ort_session(model).run(None, dict(zip(names, inputs)))[0]


def failure(fn) -> SessionError:
    with pytest.raises(SessionError) as err:
        fn()
    return err.value


def kind_of(fn) -> str:
    return failure(fn).kind


def test_table_covers_the_opsets_and_exactness():
    ranges = {d.op_type: d.opset_range for d in DEFS.values()}
    assert ranges["Scatter"] == "9-10" and ranges["TensorScatter"] == "24+"
    assert ranges["GatherND"] == "11+" and ranges["Trilu"] == "14+"
    assert all(d.flag("supports_exact") for d in DEFS.values())
    assert kernel_for("Scatter", 10, 3).supports_exact
    assert not kernel_for("ScatterElements", 11, 3).supports_exact  # reductions: not exact


# -- GatherND -----------------------------------------------------------------------------------


def spec_gather_nd(data, indices, b):
    """The spec's reading: each index tuple of each batch entry names a slice of data."""
    batch = indices.shape[:b]
    out = np.empty(indices.shape[:-1] + data.shape[b + indices.shape[-1] :], data.dtype)
    for pos in np.ndindex(indices.shape[:-1]):
        tup = tuple(int(i) for i in indices[pos])
        out[pos] = data[pos[: len(batch)]][tup]
    return out


@pytest.mark.parametrize("b", [0, 1, 2])
@pytest.mark.parametrize("k", [1, 2])
def test_gather_nd_batch_dims_and_negative_indices(b, k):
    data = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    sizes = data.shape[b : b + k]
    tuples = np.stack([RNG.integers(-s, s, (2, 3, 2)[:b] + (4,)) for s in sizes], -1)
    tuples = tuples.reshape(data.shape[:b] + (2, 2, k))
    want = spec_gather_nd(data, tuples, b)
    assert_same(evaluate("GatherND", data, tuples, batch_dims=b, opset=13), want)
    assert_same(reference("GatherND", data, tuples, batch_dims=b, opset=13), want)
    # run-time indices in a static plan, then constant ones
    feeds = {"x": data, "i": tuples.astype(np.int32)}
    sess = session_for("GatherND", feeds, batch_dims=b, opset=13)
    assert_same(sess.run(None, feeds)[0], want)
    assert sess.cached_plans[0].static
    init = numpy_helper.from_array(tuples, "i")
    sess = session_for("GatherND", {"x": data}, [init], 13, batch_dims=b)
    assert_same(sess.run(None, {"x": data})[0], want)


def test_gather_nd_whole_elements_opset_11_and_strings():
    data = np.arange(12).reshape(3, 4)
    idx = np.array([[[2, -1]], [[0, 0]]])
    assert_same(evaluate("GatherND", data, idx, opset=11), np.array([[11], [0]]))
    words = np.array([["a", "b"], ["c", "d"]], dtype=object)
    assert evaluate("GatherND", words, np.array([[1], [0]])).tolist() == [["c", "d"], ["a", "b"]]
    empty = evaluate("GatherND", data, np.zeros((0, 2), np.int64))
    assert empty.shape == (0,)


@pytest.mark.parametrize("itype", [np.int64, np.int32])
def test_gather_nd_many_run_time_tuples_are_checked_per_axis(itype):
    """Past 64 coordinates the bounds come from numpy reductions; axes of different sizes
    are checked one by one when the overall bounds do not settle it."""
    data = RNG.standard_normal((3, 7, 2)).astype(np.float32)
    tuples = np.stack([RNG.integers(-3, 3, 50), RNG.integers(-7, 7, 50)], -1).astype(itype)
    feeds = {"x": data, "i": tuples}
    sess = session_for("GatherND", feeds, opset=13)
    assert_same(sess.run(None, feeds)[0], spec_gather_nd(data, tuples, 0))
    for axis, bad in ((0, 3), (0, -4), (1, 7), (1, -8)):
        wrong = tuples.copy()
        wrong[17, axis] = bad
        err = failure(lambda w=wrong: sess.run(None, {"x": data, "i": w}))
        assert err.kind == "invalid_input" and f"index {bad} is out of range" in str(err)


def test_gather_nd_errors():
    data = np.zeros((2, 3), np.float32)
    for idx in ([[2, 0]], [[0, -4]], [[0, 3]]):
        err = failure(lambda idx=idx: evaluate("GatherND", data, np.array(idx)))
        assert err.kind == "invalid_input" and "out of range" in str(err)
        assert "GatherND node" in str(err)
    sess = session_for("GatherND", {"x": data, "i": np.zeros((1, 2), np.int64)})
    assert kind_of(lambda: sess.run(None, {"x": data, "i": np.array([[0, 3]])})) == "invalid_input"
    assert kind_of(lambda: evaluate("GatherND", data, np.zeros((1, 3), np.int64))) == (
        "invalid_input"
    )
    wrong_batch = np.zeros((3, 1), np.int64)
    assert kind_of(lambda: evaluate("GatherND", data, wrong_batch, batch_dims=1)) == "invalid_input"
    assert kind_of(lambda: evaluate("GatherND", data, np.zeros((2,), np.int64), batch_dims=1)) == (
        "invalid_input"
    )
    assert kind_of(lambda: kernel_for("GatherND", 13, 2, batch_dims=-1)) == "invalid_model"
    assert kind_of(lambda: evaluate("GatherND", data, np.zeros((1, 1), np.float32))) == (
        "invalid_model"
    )


# -- ScatterND and Scatter ----------------------------------------------------------------------

_FOLD = {
    "none": lambda a, b: b,
    "add": np.add,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
}


def spec_scatter_nd(data, indices, updates, reduction):
    """The spec's loop: output[indices[idx]] = f(output[indices[idx]], updates[idx])."""
    out = data.copy()
    for idx in np.ndindex(indices.shape[:-1]):
        at = tuple(int(i) for i in indices[idx])
        out[at] = _FOLD[reduction](out[at], updates[idx])
    return out


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("k", [0, 1, 2, 3])
def test_scatter_nd_matches_the_spec_loop(reduction, k):
    data = RNG.standard_normal((3, 4, 2)).astype(np.float32)
    n = 5
    lead = data.shape[:k]
    if reduction == "none":  # repeated tuples are undefined without a reduction
        flat = RNG.permutation(int(np.prod(lead)))[:n]
    else:
        flat = RNG.integers(0, int(np.prod(lead)), n)
    if k:
        tuples = np.stack(np.unravel_index(flat, lead), -1).astype(np.int64)
    else:  # one slice, the whole of data
        tuples = np.zeros((1 if reduction == "none" else n, 0), np.int64)
    negative = tuples - np.array(data.shape[:k], np.int64)  # the same places, from the end
    tuples = np.where(RNG.random(tuples.shape) < 0.5, tuples, negative)
    updates = RNG.standard_normal(tuples.shape[:-1] + data.shape[k:]).astype(np.float32)
    want = spec_scatter_nd(data, tuples, updates, reduction)
    got = evaluate("ScatterND", data, tuples, updates, reduction=reduction, opset=18)
    assert_same(got, want)
    if reduction == "none" or (reduction in ("max", "min") and ONNX >= (1, 20)):
        # (onnx 1.19's reference ScatterND max/min fails on slices)
        ref = reference("ScatterND", data, tuples, updates, reduction=reduction, opset=18)
        assert_same(ref, got)
    # in place over data's storage, with run-time indices, as a plan runs it when data dies here
    kernel = kernel_for("ScatterND", 18, 3, reduction=reduction)
    d = data.copy()
    types = [(x.dtype, x.shape) for x in (d, tuples, updates)]
    ictx = InferContext([t[0] for t in types], [t[1] for t in types], [None] * 3, 1)
    kernel.infer(ictx)
    scratch = [np.full(s, 7, dt) for dt, s in ictx.scratch]
    kernel.bind(KernelContext(ictx.prepared, scratch), [d, tuples, updates], [d])()
    assert_same(d, want)


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
def test_scatter_nd_reductions_over_wide_narrow_repeated_and_distinct_slices(reduction):
    """Each way a reduction runs: slices each hit once (gather, combine, scatter), repeated
    wide slices (a step per tuple) and repeated narrow ones (ufunc.at on element offsets)."""
    for width in (3, 70):
        data = RNG.standard_normal((4, width)).astype(np.float32)
        for rows in ([2, 0, 3], [1, 3, 1, 0, 1]):
            tuples = np.array(rows)[:, None]
            updates = RNG.standard_normal((len(rows), width)).astype(np.float32)
            want = spec_scatter_nd(data, tuples, updates, reduction)
            got = evaluate("ScatterND", data, tuples, updates, reduction=reduction, opset=18)
            assert_same(got, want)
            feeds = {"d": data, "i": tuples, "u": updates}
            sess = session_for("ScatterND", feeds, mode="exact", reduction=reduction, opset=18)
            assert_same(sess.run(None, feeds)[0], want)


@pytest.mark.parametrize(
    ("reduction", "shape", "k", "n", "repeat"),
    [
        ("none", (4, 5), 2, 6, False),  # numpy's fancy index over two axes
        ("none", (6, 3, 2), 1, 4, False),
        ("add", (4, 5), 2, 40, True),  # single elements: ufunc.at on the fancy index
        ("mul", (6, 3, 2), 1, 4, False),  # few slices, each once: gather, combine, scatter
        ("max", (6, 3, 2), 1, 9, True),  # repeated narrow slices: ufunc.at on elements
        ("min", (90, 3), 1, 70, False),  # many slices: the row stamps tell them apart
        ("add", (30, 70), 1, 80, True),  # repeated wide slices: a step per tuple
        ("mul", (5, 4, 3), 2, 6, True),  # slices over two axes
    ],
)
@pytest.mark.parametrize("itype", [np.int64, np.int32])
def test_scatter_nd_run_time_indices_take_every_path(reduction, shape, k, n, repeat, itype):
    data = RNG.standard_normal(shape).astype(np.float32)
    lead = int(np.prod(shape[:k]))
    flat = RNG.integers(0, lead, n) if repeat else RNG.permutation(lead)[:n]
    tuples = np.stack(np.unravel_index(flat, shape[:k]), -1)
    tuples = np.where(RNG.random(tuples.shape) < 0.5, tuples, tuples - np.array(shape[:k]))
    tuples = tuples.astype(itype)
    updates = RNG.standard_normal((n,) + shape[k:]).astype(np.float32)
    want = spec_scatter_nd(data, tuples, updates, reduction)
    feeds = {"d": data, "i": tuples, "u": updates}
    for mode in ("fast", "exact"):
        sess = session_for("ScatterND", feeds, mode=mode, reduction=reduction, opset=18)
        for _ in range(2):  # the bound step again
            np.testing.assert_allclose(sess.run(None, feeds)[0], want, rtol=1e-6)
        assert sess.cached_plans[0].static


def test_scatter_nd_opsets_and_errors():
    data = np.zeros((2, 3), np.float32)
    idx, upd = np.array([[1]]), np.ones((1, 3), np.float32)
    # before opset 16 there is no reduction attribute: it is ignored
    want = np.array([[0, 0, 0], [1, 1, 1]], np.float32)
    assert_same(evaluate("ScatterND", data, idx, upd, opset=13, reduction="add"), want)
    assert kind_of(lambda: kernel_for("ScatterND", 16, 3, reduction="max")) == "invalid_model"
    assert kind_of(lambda: kernel_for("ScatterND", 18, 3, reduction="sum")) == "invalid_model"
    assert kind_of(lambda: evaluate("ScatterND", data, np.array([[2]]), upd)) == "invalid_input"
    assert kind_of(lambda: evaluate("ScatterND", data, idx, np.ones((1, 2), np.float32))) == (
        "invalid_input"
    )
    assert kind_of(lambda: evaluate("ScatterND", data, np.zeros((1, 3), np.int64), upd)) == (
        "invalid_input"
    )
    assert kind_of(lambda: evaluate("ScatterND", data, idx, upd.astype(np.float64))) == (
        "invalid_model"
    )
    sess = session_for("ScatterND", {"x": data, "i": idx, "u": upd})
    err = failure(lambda: sess.run(None, {"x": data, "i": np.array([[-3]]), "u": upd}))
    assert err.kind == "invalid_input" and "-3" in str(err)


@pytest.mark.parametrize("opset", [9, 10])
def test_scatter_is_scatter_elements_before_opset_11(opset):
    data = np.zeros((3, 3), np.float32)
    idx = np.array([[1, 0, 2], [0, 2, 1]])
    upd = np.array([[1.0, 1.1, 1.2], [2.0, 2.1, 2.2]], np.float32)
    want = np.array([[2.0, 1.1, 0.0], [1.0, 0.0, 2.2], [0.0, 2.1, 1.2]], np.float32)
    assert_same(evaluate("Scatter", data, idx, upd, opset=opset), want)
    for axis in (1, -1):
        neg = np.array([[-1, 0]])
        got = evaluate("Scatter", data[:1], neg, upd[:1, :2], axis=axis, opset=opset)
        ref = reference("ScatterElements", data[:1], neg, upd[:1, :2], axis=axis, opset=11)
        assert_same(got, ref)  # onnx's reference evaluator has no Scatter
    bad = (data, np.array([[3]]), upd[:1, :1])
    assert kind_of(lambda: evaluate("Scatter", *bad, opset=opset)) == "invalid_input"
    # from opset 11 the name is deprecated: ScatterElements takes over
    assert not any(d.covers(11) for d in OPERATORS if d.op_type == "Scatter")


# -- TensorScatter ------------------------------------------------------------------------------


def spec_tensor_scatter(past, update, write, axis, mode):
    """The pseudocode of the spec."""
    out = past.copy()
    axis %= past.ndim
    size, length = past.shape[axis], update.shape[axis]
    for prefix in np.ndindex(past.shape[:axis]):
        for s in range(length):
            at = int(write[prefix[0]]) + s
            if mode == "circular":
                at %= size
            out[prefix + (at,)] = update[prefix + (s,)]
    return out


@pytest.mark.parametrize("axis", [1, 2, -2, -3])
@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter_matches_the_spec(axis, mode):
    past = RNG.standard_normal((3, 4, 6, 2)).astype(np.float32)
    size = past.shape[axis]
    for length in (1, 2, size):
        shape = list(past.shape)
        shape[axis] = length
        update = RNG.standard_normal(shape).astype(np.float32)
        if mode == "linear":
            write = RNG.integers(0, size - length + 1, 3)
        else:
            write = RNG.integers(0, 2 * size, 3)
        want = spec_tensor_scatter(past, update, write, axis, mode)
        got = evaluate("TensorScatter", past, update, write, axis=axis, mode=mode, opset=24)
        assert_same(got, want)
        if ONNX_OPSET >= 24:  # the installed onnx knows TensorScatter
            ref = reference("TensorScatter", past, update, write, axis=axis, mode=mode, opset=24)
            assert_same(got, ref)
        no_write = evaluate("TensorScatter", past, update, None, axis=axis, mode=mode, opset=24)
        assert_same(no_write, spec_tensor_scatter(past, update, [0] * 3, axis, mode))


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter_equal_write_indices(mode):
    """The whole batch writing at one index is one copy, unless a circular write wraps."""
    past = RNG.standard_normal((3, 2, 5, 4)).astype(np.float32)
    update = RNG.standard_normal((3, 2, 3, 4)).astype(np.float32)
    for w in (0, 2) + ((4, 7) if mode == "circular" else ()):
        write = np.full(3, w, np.int64)
        got = evaluate("TensorScatter", past, update, write, mode=mode, opset=24)
        assert_same(got, spec_tensor_scatter(past, update, write, -2, mode))


def test_tensor_scatter_in_place_and_errors():
    past = np.zeros((2, 4, 3), np.float32)
    update = np.ones((2, 2, 3), np.float32)
    kernel = kernel_for("TensorScatter", 24, 3, mode="circular")
    ictx = InferContext(
        [np.dtype(np.float32)] * 2 + [np.dtype(np.int64)],
        [(2, 4, 3), (2, 2, 3), (2,)],
        [None] * 3,
        1,
    )
    kernel.infer(ictx)
    kernel.run(KernelContext(ictx.prepared), [past, update, np.array([3, 1])], [past])
    assert past[:, :, 0].tolist() == [[1, 0, 0, 1], [0, 1, 1, 0]]

    def ev(write, mode="linear", upd=update, **kw):
        return evaluate("TensorScatter", past, upd, np.array(write), mode=mode, opset=24, **kw)

    for write, mode in (([3, 0], "linear"), ([-1, 0], "linear"), ([-1, 0], "circular")):
        err = failure(lambda w=write, m=mode: ev(w, m))
        assert err.kind == "invalid_input" and "out of range" in str(err)
    assert kind_of(lambda: ev([0, 0], upd=np.ones((2, 5, 3), np.float32))) == "invalid_input"
    assert kind_of(lambda: ev([0, 0], upd=np.ones((2, 2, 2), np.float32))) == "invalid_input"
    assert kind_of(lambda: ev([0, 0], axis=0)) == "invalid_input"
    assert kind_of(lambda: ev([0, 0, 0])) == "invalid_input"
    assert kind_of(lambda: kernel_for("TensorScatter", 24, 2, mode="ring")) == "invalid_model"


# -- Compress -----------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1])
def test_compress_matches_numpy_with_short_and_long_conditions(axis):
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    n = x.size if axis is None else x.shape[axis]
    for length in (0, 1, n - 1, n):
        cond = RNG.random(length) < 0.5
        kw = {} if axis is None else {"axis": axis}
        want = np.compress(cond, x, axis=axis)
        assert_same(evaluate("Compress", x, cond, **kw), want)
        assert_same(reference("Compress", x, cond, opset=11, **kw), want)
    # past the axis: ignored, as onnxruntime does (numpy would refuse the True there)
    cond = np.ones(n + 2, bool)
    assert_same(evaluate("Compress", x, cond, **kw), np.compress(cond[:n], x, axis=axis))


def test_compress_constant_condition_is_static_run_time_one_dynamic():
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    cond = np.array([True, False, True])
    init = numpy_helper.from_array(cond, "c")
    sess = session_for("Compress", {"x": x}, [init], axis=0, opset=11)
    assert_same(sess.run(None, {"x": x})[0], x[[0, 2]])
    assert sess.cached_plans[0].static
    decls = [
        helper.make_tensor_value_info("x", TensorProto.INT64, [3, 4]),
        helper.make_tensor_value_info("c", TensorProto.BOOL, ["n"]),
    ]
    node = helper.make_node("Compress", ["x", "c"], ["y"], axis=1)
    graph = helper.make_graph([node], "g", decls, [helper.make_tensor_value_info("y", 0, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    sess = graphrt.Session(model, intra_op_threads=1)
    for c in ([True, False, True, True], [False], [True, True]):
        c = np.array(c)
        assert_same(sess.run(None, {"x": x, "c": c})[0], np.compress(c, x, axis=1))
    assert not sess.cached_plans[0].static


def test_compress_errors():
    x = np.zeros((2, 3), np.float32)
    assert kind_of(lambda: evaluate("Compress", x, np.array([1, 0]), axis=0)) == "invalid_model"
    assert kind_of(lambda: evaluate("Compress", x, np.array([[True]]), axis=0)) == "invalid_input"
    assert kind_of(lambda: evaluate("Compress", x, np.array([True]), axis=2)) == "invalid_input"


# -- OneHot -------------------------------------------------------------------------------------


def spec_one_hot(indices, depth, values, axis):
    """output[..., k, ...] = on where indices (negative from the end) == k, off elsewhere."""
    idx = np.trunc(indices).astype(np.int64)
    idx = np.where(idx < 0, idx + depth, idx)
    axis = axis % (idx.ndim + 1)
    hit = np.expand_dims(idx, axis) == np.arange(depth).reshape(
        [depth if i == axis else 1 for i in range(idx.ndim + 1)]
    )
    return np.where(hit, values[1], values[0]).astype(values.dtype)


@pytest.mark.parametrize("axis", [-1, 0, 1, 2, -3])
@pytest.mark.parametrize("itype", [np.int64, np.int32, np.uint8, np.float32])
def test_one_hot_every_axis_and_index_type(axis, itype):
    depth = 5
    indices = RNG.integers(-7, 8, (2, 3)).astype(itype)
    if itype == np.float32:
        indices = indices + RNG.random(indices.shape).astype(np.float32) * np.sign(indices)
    values = np.array([-2.0, 3.0], np.float32)
    want = spec_one_hot(indices, depth, values, axis)
    got = evaluate("OneHot", indices, np.array(depth, np.int64), values, axis=axis, opset=11)
    assert_same(got, want)
    # onnx's reference floors negative float indices; before 1.20 it wraps indices past depth
    if itype in (np.int64, np.int32) and ONNX >= (1, 20):
        ref = reference("OneHot", indices, np.array(depth), values, axis=axis, opset=11)
        assert_same(got, ref)
    if itype == np.int64:  # onnxruntime has no (int32 indices, int64 depth) kernel
        pytest.importorskip("onnxruntime")
        ort = ort_node("OneHot", indices, np.array(depth), values, axis=axis, opset=11)
        assert_same(got, ort)


def test_one_hot_float_indices_are_cast_to_int64_first():
    """The spec casts non-integer indices to int64 (truncation), then wraps negative ones."""
    indices = np.array([-3.4, -0.5, 1.7, -5.5, -5.0, 4.9, np.nan], np.float32)
    values = np.array([0.0, 1.0], np.float32)
    got = evaluate("OneHot", indices, np.array(5.0, np.float32), values, opset=11)
    hot = [int(np.argmax(row)) if row.any() else None for row in got]
    assert hot == [2, 0, 1, 0, 0, 4, None]
    pytest.importorskip("onnxruntime")
    if onnxruntime_release() >= (1, 21):  # 1.20 gives no position for these float indices
        want = onnxruntime_run("OneHot", indices[:-1], np.array(5.0, np.float32), values, opset=11)
        assert_same(got[:-1], want)


def test_one_hot_depth_types_strings_and_plans():
    indices = np.array([[0, -1], [4, 1]])
    words = np.array(["off", "on"], dtype=object)
    got = evaluate("OneHot", indices, np.array(2.7, np.float32), words, opset=9)
    assert got.tolist() == [[["on", "off"], ["off", "on"]], [["off", "off"], ["off", "on"]]]
    values = np.array([0, 1], np.int32)
    sess = session_for("OneHot", {"i": indices}, [ints("d", [3]), ints("v", [0, 1])], opset=11)
    assert_same(
        sess.run(None, {"i": indices})[0], spec_one_hot(indices, 3, values.astype(np.int64), -1)
    )
    assert sess.cached_plans[0].static
    sess = session_for("OneHot", {"i": indices, "d": np.array(3)}, [ints("v", [0, 1])], opset=11)
    for d in (1, 4):
        got = sess.run(None, {"i": indices, "d": np.array(d)})[0]
        assert_same(got, spec_one_hot(indices, d, np.array([0, 1]), -1))
    assert not sess.cached_plans[0].static


def test_one_hot_huge_depth_and_uint64_indices():
    """Depths past the lookup tables take the arithmetic path; uint64 indices wrap nowhere."""
    depth = 40000
    indices = np.array([[0, -1, 39999], [-40000, 40000, -40001]])
    values = np.array([0, 7], np.int8)
    for idx in (indices, indices.astype(np.float64) + 0.5 * np.sign(indices)):
        got = evaluate("OneHot", idx, np.array(depth), values, axis=0, opset=11)
        assert_same(got, spec_one_hot(idx, depth, values, 0))
    big = np.array([0, 2, 2**63 + 1, 2**64 - 1], np.uint64)
    got = evaluate("OneHot", big, np.array(3), values, opset=11)
    assert got.tolist() == [[7, 0, 0], [0, 0, 7], [0, 0, 0], [0, 0, 0]]


def spec_one_hot_any(indices, depth, values, axis):
    """spec_one_hot for any index: NaN, infinities and huge floats are outside."""
    x = np.asarray(indices, np.float64) if indices.dtype.kind == "f" else indices
    outside = ~np.isfinite(x) | (np.abs(x) > 2**40) if x.dtype.kind == "f" else x > 2**40
    safe = np.where(outside, depth, x if x.dtype.kind != "u" else x.astype(np.int64))
    return spec_one_hot(safe, depth, values, axis)


@pytest.mark.parametrize("depth", [1, 3, 64, 65, 300])  # a table of rows up to 64, else writes
@pytest.mark.parametrize("itype", [np.int64, np.int32, np.uint64, np.float32, np.float64])
def test_one_hot_table_and_scatter_paths_static_and_dynamic(depth, itype):
    values = np.array([0.5, -2.0], np.float32)
    if itype == np.uint64:
        indices = np.array([[0, depth - 1, depth, 2**64 - 1]], np.uint64)
    else:
        indices = RNG.integers(-depth - 2, depth + 2, (3, 4)).astype(itype)
        if indices.dtype.kind == "f":
            indices[0, :3] = [np.nan, np.inf, -1e30]
            indices[1] += 0.5
    for axis in (-1, 0, 1):
        want = spec_one_hot_any(indices, depth, values, axis)
        init = numpy_helper.from_array(np.array(depth, np.int64), "d")
        static = session_for(
            "OneHot",
            {"i": indices},
            [init, numpy_helper.from_array(values, "v")],
            opset=11,
            axis=axis,
        )
        assert_same(static.run(None, {"i": indices})[0], want)
        assert static.cached_plans[0].static
        feeds = {"i": indices, "d": np.array(depth, np.int64), "v": values}
        dynamic = session_for("OneHot", feeds, opset=11, axis=axis)
        for d in (depth, depth + 1, depth):  # shaped again every run, plans cached by depth
            got = dynamic.run(None, dict(feeds, d=np.array(d, np.int64)))[0]
            assert_same(got, spec_one_hot_any(indices, d, values, axis))


def test_one_hot_errors():
    i = np.array([0, 1])
    v = np.array([0.0, 1.0], np.float32)
    for depth in (np.array(0), np.array(-2), np.array([2, 3]), np.array(np.nan, np.float32)):
        assert kind_of(lambda d=depth: evaluate("OneHot", i, d, v)) == "invalid_input"
    assert kind_of(lambda: evaluate("OneHot", i, np.array(2), v[:1])) == "invalid_input"
    assert kind_of(lambda: evaluate("OneHot", i, np.array(2), v, axis=2)) == "invalid_input"
    assert kind_of(lambda: evaluate("OneHot", i.astype(bool), np.array(2), v)) == "invalid_model"


# -- Trilu and EyeLike --------------------------------------------------------------------------


@pytest.mark.parametrize("upper", [0, 1])
def test_trilu_any_k_batched_keeps_nan_and_in_place(upper):
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    x[0, 0, 1, 1] = np.nan
    x[0, 0, 3, 0] = np.nan
    npf = np.triu if upper else np.tril
    for k in (-(2**62), -5, -1, 0, 1, 3, 6, 2**62):
        want = npf(x, k)
        got = evaluate("Trilu", x, np.array(k), upper=upper, opset=14)
        assert_same(got, want)
        assert_same(reference("Trilu", x, np.array(k), upper=upper, opset=14), want)
    assert_same(evaluate("Trilu", x, upper=upper, opset=14), npf(x))
    # run-time k: a static plan, the mask made every run
    sess = session_for("Trilu", {"x": x, "k": np.array(0)}, upper=upper, opset=14)
    for k in (2, -1):
        assert_same(sess.run(None, {"x": x, "k": np.array(k)})[0], npf(x, k))
    assert sess.cached_plans[0].static
    kernel = kernel_for("Trilu", 14, 2, upper=upper)
    d = x.copy()
    ictx = InferContext([d.dtype, np.dtype(np.int64)], [d.shape, ()], [None, np.array(1)], 1)
    kernel.infer(ictx)
    kernel.run(KernelContext(ictx.prepared), [d, np.array(1)], [d])
    assert_same(d, npf(x, 1))


def test_trilu_types_and_errors():
    b = RNG.random((3, 3)) < 0.5
    assert_same(evaluate("Trilu", b, np.array(1), opset=14), np.triu(b, 1))
    empty = np.zeros((0, 4), np.int64)
    assert_same(evaluate("Trilu", empty, np.array(1), upper=0, opset=14), empty)
    assert kind_of(lambda: evaluate("Trilu", np.zeros(3), opset=14)) == "invalid_input"
    assert kind_of(lambda: evaluate("Trilu", b, np.array([1, 2]), opset=14)) == "invalid_input"
    assert kind_of(lambda: evaluate("Trilu", b, np.array(1.0), opset=14)) == "invalid_model"


def test_eye_like_every_k_and_dtype():
    for shape, k in itertools.product([(3, 5), (5, 3), (4, 4), (0, 3), (1, 1)], range(-6, 7)):
        x = np.zeros(shape, np.int32)
        assert_same(evaluate("EyeLike", x, k=k, opset=9), np.eye(*shape, k=k, dtype=np.int32))
    x = np.zeros((3, 4), np.float32)
    got = evaluate("EyeLike", x, k=1, dtype=TensorProto.BOOL, opset=22)
    assert_same(got, np.eye(3, 4, 1, dtype=bool))
    assert_same(
        reference("EyeLike", x, k=-1, dtype=TensorProto.DOUBLE, opset=9),
        evaluate("EyeLike", x, k=-1, dtype=TensorProto.DOUBLE, opset=9),
    )
    assert kind_of(lambda: evaluate("EyeLike", np.zeros(3))) == "invalid_input"
    assert kind_of(lambda: kernel_for("EyeLike", 9, dtype=12345)) == "invalid_model"


# -- ReverseSequence ----------------------------------------------------------------------------


def spec_reverse_sequence(x, lengths, batch_axis, time_axis):
    out = x.copy()
    for b, n in enumerate(lengths):
        for t in range(n):
            src = [slice(None)] * x.ndim
            dst = [slice(None)] * x.ndim
            src[batch_axis] = dst[batch_axis] = b
            src[time_axis], dst[time_axis] = n - 1 - t, t
            out[tuple(dst)] = x[tuple(src)]
    return out


@pytest.mark.parametrize("batch_axis", [0, 1])
def test_reverse_sequence_both_layouts(batch_axis):
    time_axis = 1 - batch_axis
    x = RNG.standard_normal((5, 6, 3)).astype(np.float32)
    batch, time = x.shape[batch_axis], x.shape[time_axis]
    lengths = RNG.integers(0, time + 1, batch)
    kw = dict(batch_axis=batch_axis, time_axis=time_axis)
    want = spec_reverse_sequence(x, lengths, batch_axis, time_axis)
    assert_same(evaluate("ReverseSequence", x, lengths, opset=10, **kw), want)
    # onnx's reference before 1.20 fails on a length of 0
    if ONNX >= (1, 20) or lengths.min() > 0:
        assert_same(reference("ReverseSequence", x, lengths, opset=10, **kw), want)
    sess = session_for("ReverseSequence", {"x": x, "l": lengths}, opset=10, **kw)
    for _ in range(2):
        lengths = RNG.integers(0, time + 1, batch)
        got = sess.run(None, {"x": x, "l": lengths})[0]
        assert_same(got, spec_reverse_sequence(x, lengths, batch_axis, time_axis))
    assert sess.cached_plans[0].static
    init = ints("l", lengths)
    sess = session_for("ReverseSequence", {"x": x}, [init], opset=10, **kw)
    assert_same(
        sess.run(None, {"x": x})[0], spec_reverse_sequence(x, lengths, batch_axis, time_axis)
    )


def test_reverse_sequence_many_run_time_lengths():
    """Past 64 lengths the bounds come from numpy reductions; int32 lengths too."""
    x = RNG.standard_normal((5, 80)).astype(np.float32)
    lengths = RNG.integers(0, 6, 80).astype(np.int32)
    sess = session_for("ReverseSequence", {"x": x, "l": lengths}, opset=10)
    assert_same(sess.run(None, {"x": x, "l": lengths})[0], spec_reverse_sequence(x, lengths, 1, 0))
    lengths[40] = 6
    err = failure(lambda: sess.run(None, {"x": x, "l": lengths}))
    assert err.kind == "invalid_input" and "sequence length 6" in str(err)


def test_reverse_sequence_errors():
    x = np.zeros((2, 3), np.float32)
    kw = dict(batch_axis=0, time_axis=1)
    for lengths in ([4, 1], [-1, 1]):
        err = failure(lambda n=lengths: evaluate("ReverseSequence", x, np.array(n), **kw))
        assert err.kind == "invalid_input" and "out of range" in str(err)
    assert kind_of(lambda: evaluate("ReverseSequence", x, np.array([1]), **kw)) == "invalid_input"
    assert kind_of(lambda: evaluate("ReverseSequence", x[0], np.array([1, 1]))) == "invalid_input"
    assert kind_of(lambda: kernel_for("ReverseSequence", 10, 2, batch_axis=1, time_axis=1)) == (
        "invalid_model"
    )
    sess = session_for("ReverseSequence", {"x": x, "l": np.array([1, 1])}, opset=10, **kw)
    assert kind_of(lambda: sess.run(None, {"x": x, "l": np.array([1, 5])})) == "invalid_input"


# -- SpaceToDepth and DepthToSpace --------------------------------------------------------------


def spec_depth_to_space(x, b, mode):
    """The spec's numpy formulas."""
    n, c, h, w = x.shape
    if mode == "DCR":
        tmp = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        tmp = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return tmp.reshape(n, c // (b * b), h * b, w * b)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("b", [1, 2, 3])
def test_depth_to_space_and_back(mode, b):
    x = RNG.standard_normal((2, 2 * b * b, 3, 4)).astype(np.float32)
    want = spec_depth_to_space(x, b, mode)
    y = evaluate("DepthToSpace", x, blocksize=b, mode=mode, opset=13)
    assert_same(y, want)
    assert_same(reference("DepthToSpace", x, blocksize=b, mode=mode, opset=13), want)
    # SpaceToDepth in the same mode undoes it (mode from opset 28; DCR before)
    opset = 28 if mode == "CRD" else 13
    assert_same(evaluate("SpaceToDepth", y, blocksize=b, mode=mode, opset=opset), x)
    if ONNX_OPSET >= 28:  # SpaceToDepth's mode arrived with opset 28
        assert_same(reference("SpaceToDepth", y, blocksize=b, mode=mode, opset=28), x)
    if mode == "DCR":
        assert_same(reference("SpaceToDepth", y, blocksize=b, opset=13), x)


def test_depth_moves_before_modes_and_non_contiguous_input():
    x = RNG.standard_normal((1, 8, 2, 3)).astype(np.float32)
    # DepthToSpace opset 1 and SpaceToDepth before 28 know only DCR: a mode attribute is ignored
    assert_same(
        evaluate("DepthToSpace", x, blocksize=2, mode="CRD", opset=1),
        spec_depth_to_space(x, 2, "DCR"),
    )
    y = spec_depth_to_space(x, 2, "DCR")
    assert_same(evaluate("SpaceToDepth", y, blocksize=2, mode="CRD", opset=13), x)
    t = np.ascontiguousarray(x.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)  # a strided view
    assert_same(evaluate("DepthToSpace", t, blocksize=2), spec_depth_to_space(x, 2, "DCR"))
    words = x.astype(str).astype(object)
    assert evaluate("DepthToSpace", words, blocksize=2).tolist() == y.astype(str).tolist()


def test_depth_moves_errors():
    x = np.zeros((1, 6, 4, 4), np.float32)
    assert kind_of(lambda: evaluate("DepthToSpace", x, blocksize=2)) == "invalid_input"
    assert kind_of(lambda: evaluate("SpaceToDepth", x, blocksize=3)) == "invalid_input"
    assert kind_of(lambda: evaluate("SpaceToDepth", x[0], blocksize=2)) == "invalid_input"
    assert kind_of(lambda: kernel_for("DepthToSpace", 13, blocksize=0)) == "invalid_model"
    assert kind_of(lambda: kernel_for("DepthToSpace", 13)) == "invalid_model"
    assert kind_of(lambda: kernel_for("DepthToSpace", 13, blocksize=2, mode="RCD")) == (
        "invalid_model"
    )


# -- exact mode, plans without allocation, onnxruntime -------------------------------------------


def _family_model(opset: int = 21):
    """Every operator of the family but TensorScatter and Scatter, random weights, chained."""
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    r = np.random.default_rng(7)
    inits = [
        numpy_helper.from_array(np.array([[0, 1], [-1, 2], [0, -3]], np.int64), "nd"),
        numpy_helper.from_array(r.standard_normal((4, 4, 6)).astype(np.float32), "base"),
        numpy_helper.from_array(np.array([[1], [-1], [1]], np.int64), "snd"),
        numpy_helper.from_array(np.array([True, False, True, True, False, True]), "cond"),
        numpy_helper.from_array(np.array(5, np.int64), "depth"),
        numpy_helper.from_array(np.array([0.25, -1.5], np.float32), "onoff"),
        # no zero length: onnxruntime 1.20 writes zeros there (1.32 and the spec copy them)
        numpy_helper.from_array(np.array([4, 1, 2, 3], np.int64), "lens"),
    ]
    nodes = [
        helper.make_node("DepthToSpace", ["x"], ["d2s"], blocksize=2, mode="CRD"),
        helper.make_node("Trilu", ["d2s", "k"], ["tri"], upper=0),
        helper.make_node("SpaceToDepth", ["tri"], ["s2d"], blocksize=2),
        helper.make_node("GatherND", ["s2d", "nd"], ["g"]),  # (3, 4, 6)
        helper.make_node("ScatterND", ["base", "snd", "g"], ["sc"], reduction="add"),
        helper.make_node("Compress", ["sc", "cond"], ["cp"], axis=2),  # (4, 4, 4)
        helper.make_node("ReverseSequence", ["cp", "lens"], ["rs"], batch_axis=1, time_axis=0),
        helper.make_node("EyeLike", ["ids"], ["eye"], k=1, dtype=TensorProto.FLOAT),
        helper.make_node("OneHot", ["ids", "depth", "onoff"], ["oh"], axis=1),  # (4, 5, 4)
        helper.make_node("Add", ["rs", "eye"], ["y0"]),
        helper.make_node("MatMul", ["oh", "y0"], ["y1"]),
    ]
    graph = helper.make_graph(
        nodes,
        "indexing",
        [
            helper.make_tensor_value_info("x", f, [1, 16, 4, 6]),
            helper.make_tensor_value_info("k", i64, []),
            helper.make_tensor_value_info("ids", i64, [4, 4]),
        ],
        [helper.make_tensor_value_info(n, f, None) for n in ("y0", "y1")],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _family_feeds():
    r = np.random.default_rng(8)
    return {
        "x": r.standard_normal((1, 16, 4, 6)).astype(np.float32),
        "k": np.array(1, np.int64),
        "ids": r.integers(-6, 6, (4, 4)),
    }


def test_a_model_of_the_family_matches_onnxruntime():
    pytest.importorskip("onnxruntime")
    if onnxruntime_limits()[1] < 21:
        pytest.skip(f"onnxruntime loads opsets up to {onnxruntime_limits()[1]}; the model is 21")
    model, feeds = _family_model(), _family_feeds()
    want = ort_session(model).run(None, feeds)
    got = graphrt.Session(model, intra_op_threads=1).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)


def test_exact_mode_bits_agree_across_threads_and_with_fast_mode():
    model, feeds = _family_model(), _family_feeds()
    one = graphrt.Session(model, mode="exact", intra_op_threads=1).run(None, feeds)
    two = graphrt.Session(model, mode="exact", intra_op_threads=2).run(None, feeds)
    fast = graphrt.Session(model, intra_op_threads=1).run(None, feeds)
    for a, b in zip(one, two):
        assert a.tobytes() == b.tobytes()
    assert one[0].tobytes() == fast[0].tobytes()  # y0 has no product (fast MatMul is BLAS)


def test_exact_scatter_nd_folds_in_index_order_with_canonical_nan_and_zero():
    data = np.array([1.0, -0.0, 5.0, 0.0], np.float32)
    idx = np.array([[0], [0], [1], [3], [2]])
    upd = np.array([1e8, 1.0, 0.0, -0.0, np.nan], np.float32)
    odd_nan = np.array(np.uint32(0x7FC00123)).view(np.float32)
    upd[4] = odd_nan
    bits = {}
    for reduction in ("add", "max", "min"):
        feeds = {"d": data, "i": idx, "u": upd}
        sess = session_for("ScatterND", feeds, mode="exact", opset=18, reduction=reduction)
        got = sess.run(None, feeds)[0]
        bits[reduction] = got.view(np.uint32).tolist()
    # add: (1 + 1e8) + 1 rounds twice in float32, in index order; NaN is the canonical one
    assert bits["add"][0] == np.float32(np.float32(1 + np.float32(1e8)) + 1).view(np.uint32)
    assert bits["add"][2] == 0x7FC00000
    # max/min of -0 and +0 is +0 in the touched places; untouched data keeps its bits
    assert bits["max"][1] == 0 and bits["max"][3] == 0 and bits["min"][1] == 0
    assert bits["max"][2] == bits["min"][2] == 0x7FC00000


# -- the contract: errors through Session.run, steady state without allocation -----------------


def one_node(op, inputs: dict, consts=(), opset=18, session_mode="fast", **attrs):
    """A session of one node named 'the_node' and its feeds; ``inputs`` are the node's inputs
    in order, those named in ``consts`` made initializers."""
    decls = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for n, v in inputs.items()
        if n not in consts
    ]
    inits = [numpy_helper.from_array(v, n) for n, v in inputs.items() if n in consts]
    node = helper.make_node(op, list(inputs), ["y"], name="the_node", **attrs)
    out = helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)
    graph = helper.make_graph([node], "g", decls, [out], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    feeds = {n: v for n, v in inputs.items() if n not in consts}
    return graphrt.Session(model, mode=session_mode, intra_op_threads=1), feeds


def case(name, op, inputs, *expected, consts=(), opset=18, **attrs):
    """A parameter set of the tables below: op, inputs, consts, opset, attrs[, kind]."""
    return pytest.param(op, inputs, consts, opset, attrs, *expected, id=name)


def i64(*rows):
    return np.array(rows, np.int64)


F23, F33, U13 = (
    np.zeros((2, 3), np.float32),
    np.zeros((3, 3), np.float32),
    np.ones((1, 3), np.float32),
)
PAST, STEP = np.zeros((2, 4, 3), np.float32), np.ones((2, 2, 3), np.float32)
ONOFF = np.array([0.0, 1.0], np.float32)
IMAGE = np.zeros((1, 6, 4, 5), np.float32)

BAD = [
    case("gathernd-index-high", "GatherND", {"x": F23, "i": i64([2, 0])}, "invalid_input"),
    case("gathernd-index-low", "GatherND", {"x": F23, "i": i64([0, -4])}, "invalid_input"),
    case("gathernd-constant-index", "GatherND", {"x": F23, "i": i64([-3, 0])}, "invalid_input",
         consts={"i"}),
    case("gathernd-batch-dims", "GatherND", {"x": F23, "i": i64([0], [1])}, "invalid_input",
         batch_dims=2),
    case("gathernd-long-tuples", "GatherND", {"x": F23, "i": i64([0, 0, 0])}, "invalid_input"),
    case("scatternd-index-high", "ScatterND", {"x": F23, "i": i64([2]), "u": U13},
         "invalid_input"),
    case("scatternd-index-low-add", "ScatterND", {"x": F23, "i": i64([-3]), "u": U13},
         "invalid_input", reduction="add"),
    case("scatternd-constant-index", "ScatterND", {"x": F23, "i": i64([2]), "u": U13},
         "invalid_input", consts={"i"}, reduction="max"),
    case("scatternd-long-tuples", "ScatterND", {"x": F23, "i": i64([0, 0, 0]), "u": U13[0, :1]},
         "invalid_input"),
    case("scatternd-updates-shape", "ScatterND", {"x": F23, "i": i64([1]), "u": U13[:, :2]},
         "invalid_input"),
    case("scatternd-reduction", "ScatterND", {"x": F23, "i": i64([1]), "u": U13},
         "invalid_model", reduction="sum"),
    case("scatter-index-high", "Scatter", {"x": F33, "i": i64([3, 0, 0]), "u": U13},
         "invalid_input", opset=10),
    case("scatter-index-low", "Scatter", {"x": F33, "i": i64([0, -4, 0]), "u": U13},
         "invalid_input", opset=10),
    case("scatter-constant-index", "Scatter", {"x": F33, "i": i64([0, 0, 3]), "u": U13},
         "invalid_input", consts={"i"}, opset=10),
    case("tensorscatter-past-the-cache", "TensorScatter", {"p": PAST, "u": STEP, "w": i64(3, 0)},
         "invalid_input", opset=24),
    case("tensorscatter-negative", "TensorScatter", {"p": PAST, "u": STEP, "w": i64(0, -1)},
         "invalid_input", opset=24, mode="circular"),
    case("tensorscatter-mode", "TensorScatter", {"p": PAST, "u": STEP}, "invalid_model",
         opset=24, mode="ring"),
    case("onehot-depth-not-scalar", "OneHot", {"i": i64(0, 1), "d": i64(2, 3), "v": ONOFF},
         "invalid_input", opset=11),
    case("onehot-depth-negative", "OneHot", {"i": i64(0, 1), "d": np.array(-2), "v": ONOFF},
         "invalid_input", consts={"d"}, opset=11),
    case("onehot-depth-infinite", "OneHot", {"i": i64(0, 1), "d": np.array(np.inf), "v": ONOFF},
         "invalid_input", opset=11),
    case("onehot-depth-huge", "OneHot", {"i": i64(0, 1), "d": np.array(2**40), "v": ONOFF},
         "unsupported", opset=11),
    case("onehot-values", "OneHot", {"i": i64(0, 1), "d": np.array(2), "v": U13[0]},
         "invalid_input", opset=11),
    case("trilu-k-not-scalar", "Trilu", {"x": F33, "k": i64(1, 2)}, "invalid_input", opset=14),
    case("eyelike-rank-3", "EyeLike", {"x": np.zeros((2, 3, 4))}, "invalid_input", opset=9),
    case("eyelike-string", "EyeLike", {"x": F33}, "invalid_model", opset=9,
         dtype=TensorProto.STRING),
    case("reversesequence-too-long", "ReverseSequence", {"x": F23, "l": i64(3, 1, 1)},
         "invalid_input", opset=10),
    case("reversesequence-count", "ReverseSequence", {"x": F23, "l": i64(1, 1)},
         "invalid_input", opset=10),
    case("reversesequence-axes", "ReverseSequence", {"x": F23, "l": i64(1, 1, 1)},
         "invalid_model", opset=10, batch_axis=1, time_axis=1),
    case("spacetodepth-sizes", "SpaceToDepth", {"x": IMAGE}, "invalid_input", opset=13,
         blocksize=2),
    case("spacetodepth-mode", "SpaceToDepth", {"x": IMAGE}, "invalid_model", opset=28,
         blocksize=1, mode="RCD"),
    case("depthtospace-channels", "DepthToSpace", {"x": IMAGE}, "invalid_input", opset=13,
         blocksize=2),
    case("depthtospace-mode", "DepthToSpace", {"x": IMAGE}, "invalid_model", opset=13,
         blocksize=1, mode="RCD"),
    case("compress-condition", "Compress", {"x": F23, "c": i64(1, 0)}, "invalid_model",
         opset=11, axis=0),
    case("compress-axis", "Compress", {"x": F23, "c": np.ones(2, bool)}, "invalid_input",
         opset=11, axis=2),
]  # fmt: skip


@pytest.mark.parametrize(("op", "inputs", "consts", "opset", "attrs", "kind"), BAD)
def test_bad_attributes_and_inputs_fail_with_their_kind_naming_the_node(
    op, inputs, consts, opset, attrs, kind
):
    """Never a raw numpy or Python exception: a SessionError of the right kind, naming the
    node, whether the step is static, dynamic or folded."""
    if opset > ONNX_OPSET:
        pytest.skip(f"the installed onnx knows opsets up to {ONNX_OPSET}")

    def run():
        sess, feeds = one_node(op, inputs, consts, opset, **attrs)
        sess.run(None, feeds)

    err = failure(run)
    assert err.kind == kind, str(err)
    assert err.node == "the_node" and f"{op} node 'the_node'" in str(err)


GOOD = [
    case("gathernd-few", "GatherND", {"x": F33, "i": i64([2, -1], [0, 0])}),
    case("gathernd-many-int32", "GatherND",
         {"x": F33, "i": RNG.integers(-3, 3, (40, 2)).astype(np.int32)}),
    case("gathernd-batch", "GatherND", {"x": F33, "i": i64([-1], [1], [0])}, batch_dims=1),
    case("gathernd-constant", "GatherND", {"x": F33, "i": i64([2], [0])}, consts={"i"}),
    case("scatternd-elements", "ScatterND", {"x": F33, "i": i64([2, -1], [0, 0]), "u": ONOFF}),
    case("scatternd-add-elements", "ScatterND", {"x": F33, "i": i64([2, -1], [2, 2]), "u": ONOFF},
         reduction="add"),
    case("scatternd-mul-slices", "ScatterND", {"x": F33, "i": i64([2], [-3]), "u": F23},
         reduction="mul"),
    case("scatternd-max-repeats", "ScatterND", {"x": F33, "i": i64([2], [-1]), "u": F23},
         reduction="max"),
    case("scatternd-min-many", "ScatterND", {"x": np.zeros((80, 3), np.float32),
         "i": RNG.permutation(80)[:70, None], "u": np.ones((70, 3), np.float32)}, reduction="min"),
    case("scatternd-constant", "ScatterND", {"x": F33, "i": i64([1]), "u": U13}, consts={"i"},
         reduction="add"),
    case("scatter", "Scatter", {"x": F33, "i": i64([2, -1, 0]), "u": U13}, opset=10),
    case("scatterelements-add", "ScatterElements", {"x": F33, "i": i64([2, -1, 0]), "u": U13},
         reduction="add"),
    case("tensorscatter-linear", "TensorScatter", {"p": PAST, "u": STEP, "w": i64(2, 0)},
         opset=24),
    case("tensorscatter-circular", "TensorScatter", {"p": PAST, "u": STEP, "w": i64(3, 1)},
         opset=24, mode="circular"),
    case("compress-constant", "Compress", {"x": F33, "c": np.array([True, False, True])},
         consts={"c"}, opset=11),
    case("onehot-table", "OneHot", {"i": i64([1, -1], [5, 0]), "d": np.array(4), "v": ONOFF},
         consts={"d"}, opset=11, axis=0),
    case("onehot-table-float", "OneHot", {"i": np.array([1.5, -1, np.nan], np.float32),
         "d": np.array(4), "v": ONOFF}, consts={"d"}, opset=11),
    case("onehot-scatter", "OneHot", {"i": np.array([[1, -1], [500, 0]], np.int32),
         "d": np.array(100), "v": ONOFF}, consts={"d"}, opset=11, axis=1),
    case("trilu-k", "Trilu", {"x": F33, "k": np.array(1)}, opset=14),
    case("trilu-constant-k", "Trilu", {"x": F33, "k": np.array(-1)}, consts={"k"}, opset=14,
         upper=0),
    case("eyelike", "EyeLike", {"x": F33}, opset=9, k=1),
    case("reversesequence", "ReverseSequence", {"x": F33, "l": i64(3, 1, 0)}, opset=10),
    case("reversesequence-many", "ReverseSequence", {"x": np.zeros((70, 2), np.float32),
         "l": np.ones(70, np.int32)}, opset=10, batch_axis=0, time_axis=1),
    case("spacetodepth", "SpaceToDepth", {"x": IMAGE[..., :4]}, opset=13, blocksize=2),
    case("depthtospace-crd", "DepthToSpace", {"x": IMAGE[:, :4]}, opset=13, blocksize=2,
         mode="CRD"),
]  # fmt: skip


@pytest.mark.parametrize("session_mode", ["fast", "exact"])
@pytest.mark.parametrize(("op", "inputs", "consts", "opset", "attrs"), GOOD)
def test_static_steps_allocate_no_array_data(op, inputs, consts, opset, attrs, session_mode):
    """Where the output shape is known, a steady-state run allocates no numpy array data."""
    if opset > ONNX_OPSET:
        pytest.skip(f"the installed onnx knows opsets up to {ONNX_OPSET}")
    if session_mode == "exact" and op == "ScatterElements":
        pytest.skip("ScatterElements' reductions are not exact")
    sess, feeds = one_node(op, inputs, consts, opset, session_mode, **attrs)
    want = sess.run(None, feeds)[0]
    out = {"y": np.empty(want.shape, want.dtype)}
    for _ in range(2):
        sess.run(None, feeds, out=out)
    assert sess.cached_plans[0].static
    assert_no_numpy_allocation(lambda: sess.run(None, feeds, out=out))
    assert_same(out["y"], want)
