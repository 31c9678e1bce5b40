"""The tensor and shape operators of graphrt-ops-basic: onnx's node cases, then focused checks.

Every onnx node case of these operators runs through its kernel (``node_cases.run_case``); a
case that cannot pass would be listed in ``EXPECTED_FAILURES`` with its reason (strict).  The
focused tests pin what the node cases do not see: errors and their kinds, every opset form
(against onnx's reference evaluator where it has one), run-time shape inputs (dynamic nodes),
exact-mode acceptance, and that a static plan of these operators allocates nothing in a
steady-state run; Slice and the gathers and scatters are in test_tensor_indexing.py.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, defs, helper
from onnx.reference import ReferenceEvaluator

import graphrt
from graphrt.attrs import node_info
from graphrt.errors import SessionError
from graphrt.kernel import evaluate_node
from graphrt_ops_basic import views
from tests._numpy_alloc import count_numpy_allocations
from tests._versions import ONNX
from tests.ops._tensor import (
    DEFS,
    FACTORIES,
    OPS,
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
from tests.ops.node_cases import node_case_params, run_case

#: Node cases that cannot pass, with the reason.  Strict: a case that starts passing fails.
EXPECTED_FAILURES: dict[str, str] = {}


NODE_CASES = node_case_params(OPS, EXPECTED_FAILURES)

#: How many node cases of these operators onnx ships, at least (85 up to onnx 1.21, 88 from
#: 1.22 on).
MIN_NODE_CASES = 88 if ONNX >= (1, 22) else 85


def test_every_operator_has_node_cases_and_a_kernel():
    assert set(FACTORIES) == OPS
    covered = {p.values[0].graph.node[0].op_type for p in NODE_CASES}
    assert covered == OPS
    assert len(NODE_CASES) >= MIN_NODE_CASES


@pytest.mark.parametrize(("model", "inputs", "outputs"), NODE_CASES)
def test_onnx_node_case(model, inputs, outputs):
    # 0-d inputs arrive as numpy scalars, which evaluate_node would take for opaque objects
    inputs = [np.asarray(x) if isinstance(x, np.generic) else x for x in inputs]
    run_case(FACTORIES[model.graph.node[0].op_type], model, inputs, outputs)


def test_every_opset_version_onnx_defines_is_covered():
    versions: dict[str, set[int]] = {}
    for schema in defs.get_all_schemas_with_history():
        if schema.domain == "" and schema.name in OPS:
            versions.setdefault(schema.name, set()).add(schema.since_version)
    for op, since in versions.items():
        for v in range(min(since), max(since) + 3):
            assert DEFS[op].covers(v), f"{op} opset {v}"
        assert not DEFS[op].covers(min(since) - 1), op


def test_exact_support_is_declared_for_data_movement():
    exact = {op for op, f in FACTORIES.items() if f.supports_exact}
    assert exact == OPS - {"ScatterElements"}
    assert FACTORIES["NonZero"].outputs_data_dependent


# -- Concat, Split, Transpose, Tile ------------------------------------------------------------


def test_concat_axes_empty_inputs_and_strings():
    a, b = X, X[:, :2] * 2
    want = np.concatenate([a, b], axis=1)
    for axis in (1, -2):
        assert_same(evaluate("Concat", a, b, axis=axis), want)
    empty = np.zeros((3, 0, 5), np.float32)
    assert_same(evaluate("Concat", empty, a, empty, axis=1), a)
    assert evaluate("Concat", empty, empty, axis=0).shape == (6, 0, 5)
    # an empty input that does not fit is left out (onnxruntime's rule), if the rank agrees
    assert_same(evaluate("Concat", a, np.zeros((0, 2, 7), np.float32), b, axis=1), want)
    assert evaluate("Concat", np.zeros((0, 3)), np.zeros((2, 0)), axis=1).shape == (0, 3)


def test_concat_mismatches_raise():
    assert kind_of(lambda: evaluate("Concat", X, X[0], axis=0)) == "invalid_input"
    assert kind_of(lambda: evaluate("Concat", X[:1], X, X[0], axis=0)) == "invalid_input"
    assert kind_of(lambda: evaluate("Concat", X, np.zeros(0, np.float32), axis=0)) == (
        "invalid_input"
    )
    assert kind_of(lambda: evaluate("Concat", X, X[:, :, :2], axis=1)) == "invalid_input"
    assert kind_of(lambda: evaluate("Concat", X, X.astype(np.float64), axis=0)) == "invalid_model"
    assert kind_of(lambda: evaluate("Concat", X, X, axis=3)) == "invalid_model"
    assert kind_of(lambda: evaluate("Concat", np.array(1.0), np.array(2.0), axis=0)) == (
        "invalid_input"
    )
    assert kind_of(lambda: kernel_for("Concat", opset=13, n_inputs=2)) == "invalid_model"


@pytest.mark.parametrize(
    ("opset", "attrs", "extra", "n", "sizes"),
    [
        (1, {"split": [1, 3]}, [], 2, [1, 3]),
        (1, {}, [np.array([3.0, 1.0], np.float32)], 2, [3, 1]),  # opset 1: input of type T
        (1, {}, [], 2, [2, 2]),
        (2, {"split": [2, 1, 1]}, [], 3, [2, 1, 1]),
        (11, {"split": [0, 4]}, [], 2, [0, 4]),
        (11, {}, [], 4, [1, 1, 1, 1]),
        (13, {}, [np.array([1, 0, 3])], 3, [1, 0, 3]),
        (13, {}, [], 2, [2, 2]),
        (18, {"num_outputs": 3}, [], 3, [2, 2, 0]),
        (18, {"num_outputs": 2}, [], 2, [2, 2]),
        (18, {}, [np.array([3, 1])], 2, [3, 1]),
    ],
)
def test_split_every_opset_form(opset, attrs, extra, n, sizes):
    x = X[:, :4]
    outs = evaluate("Split", x, *extra, opset=opset, n_outputs=n, axis=1, **attrs)
    bounds = np.cumsum([0, *sizes])
    for k, out in enumerate(outs):
        assert_same(out, x[:, bounds[k] : bounds[k + 1]])
    if opset > 1:
        want = reference("Split", x, *extra, opset=opset, n_outputs=n, axis=1, **attrs)
        for got, w in zip(outs, want):
            assert_same(got, w)


def test_split_uneven_num_outputs_and_errors():
    x = np.arange(5, dtype=np.int32)
    outs = evaluate("Split", x, opset=18, n_outputs=4, num_outputs=4)
    assert [o.tolist() for o in outs] == [[0, 1], [2, 3], [4], []]
    assert kind_of(lambda: evaluate("Split", x, opset=13, n_outputs=2)) == "invalid_input"
    assert kind_of(lambda: evaluate("Split", x, np.array([2, 2]), opset=13, n_outputs=2)) == (
        "invalid_input"
    )
    assert kind_of(lambda: evaluate("Split", x, opset=11, n_outputs=2, split=[1, 1])) == (
        "invalid_model"
    )
    assert kind_of(lambda: kernel_for("Split", 18, 1, 3, num_outputs=2)) == "invalid_model"
    assert kind_of(lambda: evaluate("Split", x, opset=13, n_outputs=1, axis=1)) == "invalid_model"


def test_transpose_default_reverses_and_bad_perm_is_invalid_model():
    assert_same(evaluate("Transpose", X), X.transpose())
    assert_same(evaluate("Transpose", X, perm=[1, 0, 2]), X.transpose(1, 0, 2))
    assert_same(evaluate("Transpose", np.array(3.0)), np.array(3.0))
    for perm in ([0, 1], [0, 1, 1], [0, 1, 3]):
        assert kind_of(lambda perm=perm: evaluate("Transpose", X, perm=perm)) == "invalid_model"


def test_tile_both_opset_forms():
    for reps in ([1, 2, 3], [2, 1, 1], [0, 1, 2]):
        assert_same(evaluate("Tile", X, np.array(reps)), np.tile(X, reps))
    assert_same(
        evaluate("Tile", np.array(5, np.int8), np.array([], np.int64)), np.array(5, np.int8)
    )
    got = evaluate("Tile", X, np.array(3), np.array(1), opset=1)
    assert_same(got, np.tile(X, [1, 3, 1]))
    assert kind_of(lambda: evaluate("Tile", X, np.array([1, 2]))) == "invalid_input"
    assert kind_of(lambda: evaluate("Tile", X, np.array([1, -1, 1]))) == "invalid_input"


# -- Pad ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_modes_match_numpy(mode):
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    for pads in ([1, 2, 2, 0], [0, 0, 0, 0], [2, 3, 2, 3], [5, 7, 4, 9]):
        got = evaluate("Pad", x, np.array(pads), mode=mode)
        want = np.pad(x, [(pads[0], pads[2]), (pads[1], pads[3])], mode=mode)
        assert_same(got, want)


def test_pad_negative_pads_crop_first():
    """onnxruntime's reading: crop, then pad what is left (values checked against it)."""
    x = np.array([1, 2, 3, 4], np.float32)
    for mode, pads, want in [
        ("constant", [1, -1], [0, 1, 2, 3]),
        ("constant", [-2, 3], [3, 4, 0, 0, 0]),
        ("edge", [2, -2], [1, 1, 1, 2]),
        ("edge", [-2, 3], [3, 4, 4, 4, 4]),
        ("reflect", [1, -1], [2, 1, 2, 3]),
        ("reflect", [-1, 1], [2, 3, 4, 3]),
        ("wrap", [1, -1], [3, 1, 2, 3]),
        ("wrap", [-2, 3], [3, 4, 3, 4, 3]),
        ("constant", [-4, 0], []),
    ]:
        got = evaluate("Pad", x, np.array(pads), mode=mode)
        assert got.tolist() == want, (mode, pads)
    assert kind_of(lambda: evaluate("Pad", x, np.array([-3, -2]))) == "invalid_input"
    assert kind_of(lambda: evaluate("Pad", x, np.array([-4, 1]), mode="edge")) == "invalid_input"


def test_pad_every_opset_form():
    x = X[0]
    want = np.pad(x, [(1, 0), (2, 1)], constant_values=1.5)
    assert_same(evaluate("Pad", x, opset=1, paddings=[1, 2, 0, 1], value=1.5), want)
    assert_same(evaluate("Pad", x, opset=2, pads=[1, 2, 0, 1], value=1.5), want)
    assert_same(reference("Pad", x, opset=2, pads=[1, 2, 0, 1], value=1.5), want)
    assert_same(evaluate("Pad", x, np.array([1, 2, 0, 1]), np.float32(1.5), opset=11), want)
    got = evaluate("Pad", x, np.array([2, 1]), np.float32(1.5), np.array([-1]), opset=18)
    assert_same(got, np.pad(x, [(0, 0), (2, 1)], constant_values=1.5))
    got = evaluate("Pad", x, np.array([1, 1]), None, np.array([0]), opset=18, mode="edge")
    assert_same(got, np.pad(x, [(1, 1), (0, 0)], mode="edge"))
    s = np.array(["a", "b"], dtype=object)
    assert evaluate("Pad", s, np.array([1, 0])).tolist() == ["", "a", "b"]
    assert kind_of(lambda: kernel_for("Pad", 18, 2, mode="wrap")) == "invalid_model"
    assert kind_of(lambda: kernel_for("Pad", 2)) == "invalid_model"
    assert kind_of(lambda: evaluate("Pad", x, np.array([1, 1]))) == "invalid_input"


# -- shape operators ----------------------------------------------------------------------------


def test_shape_start_end_and_size():
    for opset, attrs, want in [
        (13, {}, [3, 4, 5]),
        (15, {"start": -2}, [4, 5]),
        (15, {"start": 1, "end": -1}, [4]),
        (15, {"start": -10, "end": 10}, [3, 4, 5]),
        (15, {"start": 2, "end": 1}, []),
    ]:
        got = evaluate("Shape", X, opset=opset, **attrs)
        assert_same(got, np.array(want, np.int64))
    assert_same(evaluate("Size", X), np.array(60, np.int64))
    assert_same(evaluate("Shape", np.array(1.0)), np.zeros(0, np.int64))
    assert_same(evaluate("Size", np.zeros((3, 0))), np.array(0, np.int64))


def test_constant_of_shape():
    assert_same(evaluate("ConstantOfShape", np.array([2, 3])), np.zeros((2, 3), np.float32))
    value = helper.make_tensor("v", TensorProto.INT32, [1], [7])
    got = evaluate("ConstantOfShape", np.array([2, 0, 1]), value=value)
    assert_same(got, np.full((2, 0, 1), 7, np.int32))
    assert_same(evaluate("ConstantOfShape", np.array([], np.int64)), np.array(0, np.float32))
    assert kind_of(lambda: evaluate("ConstantOfShape", np.array([2, -1]))) == "invalid_input"
    two = helper.make_tensor("v", TensorProto.FLOAT, [2], [1, 2])
    assert kind_of(lambda: kernel_for("ConstantOfShape", value=two)) == "invalid_model"


@pytest.mark.parametrize(
    ("start", "limit", "delta"),
    [(3, 9, 3), (10, 4, -2), (0, 10, 1), (5, 5, 1), (5, 0, 1), (-7, 8, 5), (0, 1, 100)],
)
@pytest.mark.parametrize("dtype", [np.int16, np.int32, np.int64, np.float32, np.float64])
def test_range_matches_arange(start, limit, delta, dtype):
    args = [np.array(v, dtype) for v in (start, limit, delta)]
    assert_same(evaluate("Range", *args, opset=11), np.arange(*args, dtype=dtype))


def test_range_counts_and_values_follow_the_spec():
    # integers: exact count, values wrap in T only in between (int16 start + i * delta)
    got = evaluate("Range", *[np.array(v, np.int16) for v in (-30000, 30000, 7)])
    assert_same(got, np.array(range(-30000, 30000, 7), np.int16))
    # floats: the count from a float64 division, each value start + i * delta (no drift);
    # float32(0.3) / float32(0.1) is 3.0000000745 in float64: 4 elements, as onnxruntime and
    # onnx's reference give (a float32 division would round to 3.0 and give 3)
    f = np.float32
    got = evaluate("Range", f(0), f(0.3), f(0.1))
    assert_same(got, np.array([0, 0.1, 0.2, 0.3], np.float32))
    args = np.array(f(0)), np.array(f(0.3)), np.array(f(0.1))
    if ONNX >= (1, 20):
        assert_same(got, reference("Range", *args, opset=11))
    else:  # onnx's reference Range before 1.20 counts in float32 (np.arange of the 0-d inputs)
        assert_same(got, onnxruntime_run("Range", *args, opset=11))
    got = evaluate("Range", f(1), f(1 + 2**20 * 0.1), f(0.1))
    i = np.arange(len(got), dtype=np.int64).astype(np.float32)
    assert_same(got, i * f(0.1) + f(1))
    # float16 and bfloat16 compute in float32 and round once (stash_type, opset 27)
    h = np.float16
    got = evaluate("Range", h(2048), h(2060), h(1), opset=27)
    assert_same(got, np.arange(2048, 2060, dtype=np.float32).astype(np.float16))
    bf = ml_dtypes.bfloat16
    got = evaluate("Range", *[np.array(v, bf) for v in (0, 3, 0.5)], opset=27)
    assert_same(got, np.arange(0, 3, 0.5, dtype=np.float32).astype(bf))
    for bad in [(0, 5, 0), (0, np.inf, 1)]:
        args = [np.array(v, np.float32) for v in bad]
        assert kind_of(lambda args=args: evaluate("Range", *args)) == "invalid_input"
    assert kind_of(lambda: evaluate("Range", np.int64(0), np.int64(5), np.int64(0))) == (
        "invalid_input"
    )
    assert kind_of(lambda: evaluate("Range", np.int64(0), np.int32(5), np.int64(1))) == (
        "invalid_model"
    )


def test_expand_broadcasts_both_ways():
    x = np.arange(3, dtype=np.float32).reshape(3, 1)
    assert_same(evaluate("Expand", x, np.array([2, 1, 6])), np.broadcast_to(x, (2, 3, 6)))
    assert_same(evaluate("Expand", x, np.array([1])), x)  # a shorter shape keeps x's dims
    assert_same(evaluate("Expand", x, np.array([3, 0])), np.zeros((3, 0), np.float32))


def test_expand_and_reshape_errors_are_invalid_input():
    x = np.zeros((3, 4), np.float32)
    assert kind_of(lambda: evaluate("Expand", x, np.array([2, 4]))) == "invalid_input"
    assert kind_of(lambda: evaluate("Expand", x, np.array([-1, 4]))) == "invalid_input"
    reshape = lambda shape: evaluate_node(
        views.Reshape(node_info(helper.make_node("Reshape", ["x", "s"], ["y"]), 14)),
        [x, np.array(shape)],
        1,
    )
    assert reshape([2, 6])[0].shape == (2, 6)
    for bad in ([5, -1], [7, 2], [3, 4, 2]):
        assert kind_of(lambda bad=bad: reshape(bad)) == "invalid_input"


# -- NonZero ------------------------------------------------------------------------------------


def test_nonzero_row_major_and_scalars():
    x = np.array([[1, 0, 3], [0, 0, -1]], np.int32)
    assert_same(evaluate("NonZero", x), np.array(np.nonzero(x), np.int64))
    assert evaluate("NonZero", np.array(5.0)).shape == (0, 1)
    assert evaluate("NonZero", np.array(0.0)).shape == (0, 0)
    assert evaluate("NonZero", np.zeros((2, 0), bool)).shape == (2, 0)
    sess = session_for("NonZero", {"x": x})
    assert_same(sess.run(None, {"x": x})[0], np.array(np.nonzero(x), np.int64))
    assert_same(sess.run(None, {"x": x * 0})[0], np.zeros((2, 0), np.int64))


# -- plans: shape chains, exact mode, no allocation ----------------------------------------------


def _chain_model():
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("Slice", ["t", "s0", "e0", "a0", "k0"], ["s"]),
        helper.make_node("Pad", ["s", "pads"], ["p"], mode="reflect"),
        helper.make_node("Pad", ["p", "pads"], ["p2"]),
        helper.make_node("Concat", ["p2", "p2"], ["cc"], axis=-1),
        helper.make_node("Gather", ["cc", "gi"], ["g"], axis=1),
        helper.make_node("Gather", ["g", "idx"], ["g2"], axis=3),
        helper.make_node("Tile", ["g2", "reps"], ["tl"]),
        helper.make_node("Expand", ["tl", "eshape"], ["ex"]),
        helper.make_node("Split", ["ex", "spl"], ["sp0", "sp1"], axis=1),
        helper.make_node("Transpose", ["sp1"], ["y1"]),
        helper.make_node("GatherElements", ["sp0", "ge"], ["y2"], axis=0),
        helper.make_node("Shape", ["ex"], ["shp"]),
        helper.make_node(
            "ConstantOfShape", ["shp"], ["cos"], value=helper.make_tensor("v", f, [1], [2.0])
        ),
        helper.make_node("Add", ["cos", "ex"], ["y3"]),
        helper.make_node("Range", ["r0", "r1", "r2"], ["y4"]),  # > 64 KiB: a static step
    ]
    inits = [
        ints("s0", [1, -2]),
        ints("e0", [100, -100]),
        ints("a0", [1, 2]),
        ints("k0", [1, -1]),
        ints("pads", [0, 1, 2, 0, 0, 3, 1, 0]),
        ints("gi", [0, -1, 2]),
        ints("reps", [1, 1, 2, 1]),
        ints("eshape", [2, 1, 1, 1, 1]),
        ints("spl", [1, 1]),
        helper.make_tensor("r0", f, [], [0.0]),
        helper.make_tensor("r1", f, [], [10000.0]),
        helper.make_tensor("r2", f, [], [0.5]),
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [
            helper.make_tensor_value_info("x", f, [2, 3, 8, 8]),
            helper.make_tensor_value_info("idx", i64, [4]),
            helper.make_tensor_value_info("ge", i64, [1, 1, 3, 26, 4]),
        ],
        [helper.make_tensor_value_info(n, f, None) for n in ["y1", "y2", "y3", "y4"]],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _chain_feeds():
    rng = np.random.default_rng(0)
    return {
        "x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32),
        "idx": np.array([0, -1, 1, 2]),
        "ge": rng.integers(-2, 2, (1, 1, 3, 26, 4)),
    }


def test_static_plan_allocates_nothing_in_the_steady_state():
    # no graph passes: constant inputs reach the plan (folding would fold Range away)
    sess = graphrt.Session(_chain_model(), intra_op_threads=1, optimization_level="none")
    feeds = _chain_feeds()
    want = ReferenceEvaluator(_chain_model()).run(None, feeds)
    out = {n: np.empty(w.shape, w.dtype) for n, w in zip(["y1", "y2", "y3", "y4"], want)}
    for _ in range(3):
        sess.run(None, feeds, out=out)
    plan = sess.cached_plans[0]
    assert plan.static
    assert {s.node.info.op_type for s in plan.steps} >= {"Slice", "Pad", "Gather", "Range"}
    with count_numpy_allocations() as counter:
        for _ in range(3):
            sess.run(None, feeds, out=out)
    assert counter.count == 0, f"{counter.count} numpy allocations ({counter.bytes} bytes)"
    for name, w in zip(["y1", "y2", "y3", "y4"], want):
        np.testing.assert_array_equal(out[name], w)


def test_exact_mode_accepts_the_data_movement_operators():
    sess = graphrt.Session(_chain_model(), mode="exact", intra_op_threads=1)
    feeds = _chain_feeds()
    fast = graphrt.Session(_chain_model(), intra_op_threads=1).run(None, feeds)
    for got, want in zip(sess.run(None, feeds), fast):
        np.testing.assert_array_equal(got, want)
    data = np.zeros((2, 2), np.float32)
    with pytest.raises(SessionError) as err:
        session_for(
            "ScatterElements",
            {"d": data, "i": np.zeros((1, 2), np.int64), "u": data[:1]},
            mode="exact",
        )
    assert err.value.kind == "exact_mode_unavailable"


def test_shape_subgraph_folds_and_run_time_shapes_go_dynamic():
    """Shape -> ConstantOfShape is planned statically; Expand by a fed shape is dynamic."""
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Shape", ["x"], ["shp"], start=1),
        helper.make_node("ConstantOfShape", ["shp"], ["z"]),
        helper.make_node("Expand", ["x", "target"], ["e"]),
        helper.make_node("Add", ["e", "z"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", f, [3, 4]),
            helper.make_tensor_value_info("target", TensorProto.INT64, [3]),
        ],
        [helper.make_tensor_value_info("y", f, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    sess = graphrt.Session(model)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for target in ([2, 1, 1], [1, 3, 4], [5, 1, 4]):
        y = sess.run(None, {"x": x, "target": np.array(target)})[0]
        assert_same(y, np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(target))))
    kinds = {s.node.info.op_type: s.kind for s in sess.cached_plans[0].steps}
    assert kinds["Expand"] == "dynamic"
    assert "ConstantOfShape" not in kinds or kinds["ConstantOfShape"] != "dynamic"
