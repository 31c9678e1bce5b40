"""Control-flow bodies planned like top-level graphs (issue 14).

A body whose shapes repeat runs one cached static plan on one kept run state: plans are built
once per shape (the bodies' counters), steady iterations allocate no array data (the count of
numpy allocations does not grow with the trip count), and an If whose branches agree is a
static step.  The fast paths hand values over in place, so the tests also build the bodies
where that is delicate (carried values swapped through views and reused slab blocks, an outer
value's block reused, a condition that stops early) and compare with numpy written here.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import graphrt
from graphrt.plugins import loaded_plugins
from tests._models import init, make_model, ort_session, tensor
from tests._numpy_alloc import count_numpy_allocations
from tests.test_cancellation import CountingToken

pytestmark = pytest.mark.skipif(
    "ops-controlflow" not in loaded_plugins(),
    reason="graphrt-ops-controlflow is not installed (tox env no-controlflow)",
)

BOOL, INT64 = TensorProto.BOOL, TensorProto.INT64
STEP = np.array([0.5, -1.25, 3.0, 0.125], np.float32)
HALF = np.full(4, 0.5, np.float32)


def body_named(sess: graphrt.Session, suffix: str):
    (body,) = [b for (node, name), b in _bodies(sess.graph) if name == suffix]
    return body


def _bodies(graph):
    for key, body in graph.bodies.items():
        yield key, body
        yield from _bodies(body.graph)


def stats(sess: graphrt.Session) -> dict[str, dict]:
    return {row["body"].rsplit(".", 1)[-1]: row for row in sess.body_stats()}


def loop_if_model(width: int = 4) -> onnx.ModelProto:
    """acc + step on even iterations, acc * 0.5 on odd ones (an If in the body), for M
    iterations; the scan output is acc * acc."""
    then_g = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "step"], ["t"])], "then", [], [tensor("t", shape=[4])]
    )
    else_g = helper.make_graph(
        [helper.make_node("Mul", ["acc_in", "half"], ["e"])], "else", [], [tensor("e", shape=[4])]
    )
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Mod", ["i", "two"], ["parity"]),
            helper.make_node("Equal", ["parity", "zero"], ["even"]),
            helper.make_node("If", ["even"], ["acc_out"], then_branch=then_g, else_branch=else_g),
            helper.make_node("Mul", ["acc_out", "acc_out"], ["sq"]),
        ],
        "body",
        [tensor("i", INT64, []), tensor("cond_in", BOOL, []), tensor("acc_in", shape=[width])],
        [tensor("cond_out", BOOL, []), tensor("acc_out", shape=[width]), tensor("sq", shape=[4])],
    )
    return make_model(
        [helper.make_node("Loop", ["M", "", "x"], ["y", "squares"], body=body)],
        [tensor("M", INT64, []), tensor("x", shape=[width])],
        [tensor("y", shape=[width]), tensor("squares", shape=["M", width])],
        [
            init("two", np.array(2, np.int64)),
            init("zero", np.array(0, np.int64)),
            init("step", STEP),
            init("half", HALF),
        ],
    )


def numpy_loop_if(m: int, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    acc, squares = x.copy(), []
    for i in range(m):
        acc = acc + STEP if i % 2 == 0 else acc * HALF
        squares.append(acc * acc)
    return acc, np.stack(squares)


def rnn_model(hidden: int = 8, seed: int = 0) -> tuple[onnx.ModelProto, dict]:
    """h' = Tanh(x_t W + h R + b), every h' scanned out."""
    rng = np.random.default_rng(seed)
    w = {k: rng.standard_normal((hidden, hidden)).astype(np.float32) / 3 for k in "WR"}
    w["b"] = rng.standard_normal(hidden).astype(np.float32)
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["x_t", "W"], ["xw"]),
            helper.make_node("MatMul", ["h_in", "R"], ["hr"]),
            helper.make_node("Add", ["xw", "hr"], ["s"]),
            helper.make_node("Add", ["s", "b"], ["pre"]),
            helper.make_node("Tanh", ["pre"], ["h_out"]),
            helper.make_node("Identity", ["h_out"], ["y_t"]),
        ],
        "rnn_body",
        [tensor("h_in", shape=[1, hidden]), tensor("x_t", shape=[1, hidden])],
        [tensor("h_out", shape=[1, hidden]), tensor("y_t", shape=[1, hidden])],
    )
    node = helper.make_node("Scan", ["h0", "x"], ["h", "ys"], body=body, num_scan_inputs=1)
    m = make_model(
        [node],
        [tensor("h0", shape=[1, hidden]), tensor("x", shape=["T", 1, hidden])],
        [tensor("h", shape=[1, hidden]), tensor("ys", shape=["T", 1, hidden])],
        [init(k, v) for k, v in w.items()],
    )
    return m, w


def numpy_rnn(w: dict, h0: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    h, ys = h0.astype(np.float64), []
    for x_t in x:
        h = np.tanh(x_t @ w["W"] + h @ w["R"] + w["b"])
        ys.append(h)
    return h, np.stack(ys)


# -- plans built once per shape ---------------------------------------------------------------


def test_loop_with_an_if_builds_each_body_plan_once_and_runs_them_static():
    sess = graphrt.Session(loop_if_model(), intra_op_threads=1)
    x = np.array([1, -2, 3, 0.5], np.float32)
    for m in (7, 7, 12):  # the trip count changes nothing in the bodies' shapes
        y, squares = sess.run(None, {"M": np.array(m, np.int64), "x": x})
        want_y, want_sq = numpy_loop_if(m, x)
        np.testing.assert_allclose(y, want_y, rtol=1e-6)
        np.testing.assert_allclose(squares, want_sq, rtol=1e-6)
    rows = stats(sess)
    assert rows["body"]["runs"] == 26
    assert rows["then"]["runs"] == 4 + 4 + 6 and rows["else"]["runs"] == 3 + 3 + 6
    for name in ("body", "then", "else"):
        assert rows[name]["plans_built"] == 1, rows[name]
    assert rows["body"]["run_states_created"] == 1
    (plan,) = body_named(sess, "body").cached_plans
    assert plan.static  # the If is a static step of the body's plan
    assert [s.kind for s in plan.steps if s.node.info.op_type == "If"] == ["static"]


def test_new_carried_shapes_build_one_more_plan_each():
    sess = graphrt.Session(loop_if_model(width=4), intra_op_threads=1)
    sess.run(None, {"M": np.array(3, np.int64), "x": np.ones(4, np.float32)})
    sess.run(None, {"M": np.array(5, np.int64), "x": np.ones(4, np.float32)})
    assert stats(sess)["body"]["plans_built"] == 1


def test_scan_rnn_builds_one_plan_and_matches_numpy_and_onnxruntime():
    m, w = rnn_model()
    sess = graphrt.Session(m, intra_op_threads=1)
    rng = np.random.default_rng(1)
    h0 = rng.standard_normal((1, 8)).astype(np.float32)
    for steps in (50, 50, 9):
        x = rng.standard_normal((steps, 1, 8)).astype(np.float32)
        h, ys = sess.run(None, {"h0": h0, "x": x})
        want_h, want_ys = numpy_rnn(w, h0, x)
        np.testing.assert_allclose(h, want_h, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(ys, want_ys, rtol=1e-5, atol=1e-5)
    (row,) = sess.body_stats()
    assert row["runs"] == 109 and row["plans_built"] == 1 and row["run_states_created"] == 1
    pytest.importorskip("onnxruntime")
    theirs = ort_session(m).run(None, {"h0": h0, "x": x})
    np.testing.assert_allclose(h, theirs[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ys, theirs[1], rtol=1e-5, atol=1e-5)


def test_if_whose_branches_agree_is_a_static_step_planned_once():
    then_g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["t"])], "then", [], [tensor("t", shape=[4])]
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"])], "else", [], [tensor("e", shape=[4])]
    )
    m = make_model(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
        [tensor("c", BOOL, []), tensor("x", shape=[4])],
        [tensor("y", shape=[4])],
    )
    sess = graphrt.Session(m, intra_op_threads=1)
    x = np.array([1, -2, 3, -4], np.float32)
    for c in (True, False, True, False):
        (y,) = sess.run(None, {"c": np.array(c), "x": x})
        np.testing.assert_array_equal(y, np.maximum(x, 0) if c else -x)
    (plan,) = sess.cached_plans
    assert plan.static
    rows = stats(sess)
    assert rows["then"]["plans_built"] == rows["else"]["plans_built"] == 1
    assert rows["then"]["runs"] == rows["else"]["runs"] == 2


def test_if_whose_branches_differ_in_shape_stays_dynamic_and_runs():
    then_g = helper.make_graph(
        [helper.make_node("Concat", ["x", "x"], ["t"], axis=0)], "then", [], [tensor("t")]
    )
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [tensor("e")])
    m = make_model(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
        [tensor("c", BOOL, []), tensor("x", shape=[3])],
        [tensor("y")],
    )
    sess = graphrt.Session(m, intra_op_threads=1)
    x = np.array([1, 2, 3], np.float32)
    np.testing.assert_array_equal(sess.run(None, {"c": np.array(True), "x": x})[0], [1, 2, 3] * 2)
    np.testing.assert_array_equal(sess.run(None, {"c": np.array(False), "x": x})[0], -x)
    (plan,) = sess.cached_plans
    assert not plan.static


# -- no allocation per iteration --------------------------------------------------------------


def allocations(sess: graphrt.Session, feed: dict) -> int:
    sess.run(None, feed)  # plans and run states made
    with count_numpy_allocations() as counter:
        sess.run(None, feed)
    return counter.count


def test_steady_loop_iterations_allocate_nothing():
    """The count of numpy data allocations of a run does not grow with the trip count."""
    sess = graphrt.Session(loop_if_model(), intra_op_threads=1)
    x = np.ones(4, np.float32)
    few = allocations(sess, {"M": np.array(10, np.int64), "x": x})
    many = allocations(sess, {"M": np.array(2000, np.int64), "x": x})
    assert many == few, f"{many - few} more allocations for 1990 more iterations"


def test_steady_scan_steps_allocate_nothing():
    m, _ = rnn_model()
    sess = graphrt.Session(m, intra_op_threads=1)
    h0 = np.zeros((1, 8), np.float32)
    few = allocations(sess, {"h0": h0, "x": np.ones((10, 1, 8), np.float32)})
    many = allocations(sess, {"h0": h0, "x": np.ones((1000, 1, 8), np.float32)})
    assert many == few, f"{many - few} more allocations for 990 more steps"


# -- values handed over in place ----------------------------------------------------------------


def fibonacci_model() -> onnx.ModelProto:
    """(a, b) <- (b, a + b): a's output is a view of b's input, and a + b may take a's block."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["c_in"], ["c_out"]),
            helper.make_node("Identity", ["b_in"], ["a_out"]),
            helper.make_node("Add", ["a_in", "b_in"], ["b_out"]),
        ],
        "body",
        [
            tensor("i", INT64, []),
            tensor("c_in", BOOL, []),
            tensor("a_in", INT64, [2]),
            tensor("b_in", INT64, [2]),
        ],
        [tensor("c_out", BOOL, []), tensor("a_out", INT64, [2]), tensor("b_out", INT64, [2])],
    )
    return make_model(
        [helper.make_node("Loop", ["M", "", "a", "b"], ["fa", "fb"], body=body)],
        [tensor("M", INT64, []), tensor("a", INT64, [2]), tensor("b", INT64, [2])],
        [tensor("fa", INT64, [2]), tensor("fb", INT64, [2])],
    )


def test_carried_values_swapped_through_views_are_handed_over_intact():
    sess = graphrt.Session(fibonacci_model(), intra_op_threads=1)
    a, b = np.array([0, 2], np.int64), np.array([1, 1], np.int64)
    fa, fb = sess.run(None, {"M": np.array(30, np.int64), "a": a, "b": b})
    want_a, want_b = a.copy(), b.copy()
    for _ in range(30):
        want_a, want_b = want_b, want_a + want_b
    np.testing.assert_array_equal(fa, want_a)
    np.testing.assert_array_equal(fb, want_b)


def test_an_outer_value_whose_block_the_body_reuses_is_written_again_each_iteration():
    """Neg(v) runs in place over v's input area: v must be there again next iteration."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["c_in"], ["c_out"]),
            helper.make_node("Neg", ["v"], ["nv"]),
            helper.make_node("Add", ["x_in", "nv"], ["x_out"]),
        ],
        "body",
        [tensor("i", INT64, []), tensor("c_in", BOOL, []), tensor("x_in", shape=[3])],
        [tensor("c_out", BOOL, []), tensor("x_out", shape=[3])],
    )
    m = make_model(
        [helper.make_node("Loop", ["M", "", "x"], ["y"], body=body)],
        [tensor("M", INT64, []), tensor("x", shape=[3]), tensor("v", shape=[3])],
        [tensor("y", shape=[3])],
    )
    sess = graphrt.Session(m, intra_op_threads=1)
    v = np.array([1, 2, 3], np.float32)
    (y,) = sess.run(None, {"M": np.array(5, np.int64), "x": np.zeros(3, np.float32), "v": v})
    np.testing.assert_array_equal(y, -5 * v)


def counting_loop(with_m: bool) -> onnx.ModelProto:
    """Runs while i < stop - 1 (at most M times when given); scans out [i, i*i]."""
    body = helper.make_graph(
        [
            helper.make_node("Sub", ["stop", "one"], ["last"]),
            helper.make_node("Less", ["i", "last"], ["c_out"]),
            helper.make_node("Mul", ["i", "i"], ["sq"]),
            helper.make_node("Unsqueeze", ["i", "axes"], ["i1"]),
            helper.make_node("Unsqueeze", ["sq", "axes"], ["sq1"]),
            helper.make_node("Concat", ["i1", "sq1"], ["row"], axis=0),
            helper.make_node("Add", ["n_in", "one"], ["n_out"]),
        ],
        "body",
        [tensor("i", INT64, []), tensor("c_in", BOOL, []), tensor("n_in", INT64, [])],
        [tensor("c_out", BOOL, []), tensor("n_out", INT64, []), tensor("row", INT64, [2])],
    )
    inputs = ["M" if with_m else "", "c", "n"]
    return make_model(
        [helper.make_node("Loop", inputs, ["count", "rows"], body=body)],
        [tensor("M", INT64, []), tensor("c", BOOL, []), tensor("n", INT64, [])]
        + [tensor("stop", INT64, [])],
        [tensor("count", INT64, []), tensor("rows", INT64, [None, 2])],
        [init("one", np.array(1, np.int64)), init("axes", np.array([0], np.int64))],
    )


@pytest.mark.parametrize(
    ("with_m", "m", "stop"), [(False, 0, 150), (True, 1000, 70), (True, 40, 70)]
)
def test_loop_ending_on_its_condition_or_count_stacks_every_slice(with_m, m, stop):
    """No trip count (the scan array doubles), a condition ending before M, M ending first."""
    sess = graphrt.Session(counting_loop(with_m), intra_op_threads=1)
    feed = {
        "M": np.array(m, np.int64),
        "c": np.array(True),
        "n": np.array(0, np.int64),
        "stop": np.array(stop, np.int64),
    }
    count, rows = sess.run(None, feed)
    n = min(m, stop) if with_m else stop
    assert count == n
    i = np.arange(n, dtype=np.int64)
    np.testing.assert_array_equal(rows, np.stack([i, i * i], axis=1))


def test_scan_reversed_output_on_axis_1_matches_numpy():
    body = helper.make_graph(
        [
            helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
            helper.make_node("Mul", ["s_out", "x_t"], ["y_t"]),
        ],
        "body",
        [tensor("s_in", shape=[3]), tensor("x_t", shape=[3])],
        [tensor("s_out", shape=[3]), tensor("y_t", shape=[3])],
    )
    node = helper.make_node(
        "Scan",
        ["s0", "x"],
        ["s", "ys"],
        body=body,
        num_scan_inputs=1,
        scan_input_axes=[1],
        scan_output_directions=[1],
        scan_output_axes=[1],
    )
    m = make_model(
        [node],
        [tensor("s0", shape=[3]), tensor("x", shape=[3, 5])],
        [tensor("s", shape=[3]), tensor("ys", shape=[3, 5])],
    )
    x = np.arange(15, dtype=np.float32).reshape(3, 5) / 7
    s0 = np.array([1, -1, 0.5], np.float32)
    s, ys = graphrt.Session(m, intra_op_threads=1).run(None, {"s0": s0, "x": x})
    acc, want = s0.copy(), []
    for t in range(5):
        acc = acc + x[:, t]
        want.append(acc * x[:, t])
    np.testing.assert_allclose(s, acc, rtol=1e-6)
    np.testing.assert_allclose(ys, np.stack(want[::-1], axis=1), rtol=1e-6)


# -- cancellation -----------------------------------------------------------------------------


def test_steady_loop_checks_the_token_at_every_iteration():
    sess = graphrt.Session(loop_if_model(), intra_op_threads=1)
    feed = {"M": np.array(40, np.int64), "x": np.ones(4, np.float32)}
    token = CountingToken(where="loop.py")
    sess.run(None, feed, cancellation=token)
    assert token.checks >= 40
    token = CountingToken(after=25, where="loop.py")
    with pytest.raises(graphrt.SessionError) as info:
        sess.run(None, feed, cancellation=token)
    assert info.value.kind == "cancelled" and token.checks == 25
    y, _ = sess.run(None, feed)  # the session stays usable: the state went back to its pool
    np.testing.assert_allclose(y, numpy_loop_if(40, feed["x"])[0], rtol=1e-6)
    assert stats(sess)["body"]["run_states_created"] == 1
