"""Cancellation reaches every loop (issue 13): import, folding, planning, every step, and every
iteration of If/Loop/Scan/SequenceMap bodies.  A cancelled call raises
``SessionError(kind="cancelled")`` promptly and leaves the session usable.
"""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphrt
from graphrt.ir import import_model
from graphrt.kernel import KernelContext
from graphrt.limits import RunLimits
from tests.test_memory_budget import endless_loop, loop_feed, model, scan_model

T = helper.make_tensor_value_info


class CountingToken:
    """A token that reads as cancelled from its ``after``-th check on (None: never); with
    ``where``, only checks made from that module count (and can cancel)."""

    def __init__(self, after: int | None = None, where: str | None = None) -> None:
        self.after = after
        self.where = where
        self.checks = 0

    @property
    def cancelled(self) -> bool:
        # frame 0: this property, 1: graphrt.ir.check_cancelled, 2: the loop checking
        if self.where is not None and not sys._getframe(2).f_code.co_filename.endswith(self.where):
            return False
        self.checks += 1
        return self.after is not None and self.checks >= self.after


def cancelled_after(seconds: float, call) -> tuple[graphrt.SessionError | None, float]:
    """Run ``call(token)`` in a daemon thread, cancel the token after ``seconds``; the error it
    raised and how long it took.  A run the token does not reach would never end: the thread
    is given 60 s, then the test fails (and the thread is left spinning)."""
    token = graphrt.CancellationToken()
    outcome: list = []

    def target() -> None:
        start = time.perf_counter()
        try:
            call(token)
            outcome.append((None, time.perf_counter() - start))
        except graphrt.SessionError as exc:
            outcome.append((exc, time.perf_counter() - start))

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    time.sleep(seconds)
    token.cancel()
    worker.join(60)
    assert outcome, "the run did not end within 60 s of its cancellation"
    return outcome[0]


def test_loop_of_2_62_iterations_is_cancelled_promptly_and_the_session_stays_usable():
    session = graphrt.Session(endless_loop(scan=False), intra_op_threads=1)
    feed = loop_feed(True, 16)
    err, took = cancelled_after(0.2, lambda tok: session.run(None, feed, cancellation=tok))
    assert err is not None and err.kind == "cancelled", err
    assert took < 5, f"the run took {took:.2f} s to stop"  # a liveness bound, not a speed one
    (y,) = session.run(None, loop_feed(False, 16))
    assert y.tolist() == [0.0]
    finite = graphrt.CancellationToken()  # and a later run with a token that is never set
    (y,) = session.run(None, loop_feed(False, 16), cancellation=finite)
    assert y.tolist() == [0.0]


def test_a_loop_nested_in_a_loop_body_is_cancelled():
    inner = endless_loop(scan=False).graph.node[0]
    outer_body = helper.make_graph(
        [helper.make_node("Identity", ["d_in"], ["d_out"]), inner],
        "outer_body",
        [T("j", TensorProto.INT64, []), T("d_in", TensorProto.BOOL, [])],
        [T("d_out", TensorProto.BOOL, []), T("y", TensorProto.FLOAT, None)],
    )
    m = model(
        [helper.make_node("Loop", ["one", "cond"], ["ys"], body=outer_body, name="outer")],
        [
            T("x", TensorProto.FLOAT, None),
            T("cond", TensorProto.BOOL, []),
            T("big", TensorProto.FLOAT, None),
        ],
        [T("ys", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(np.array(1, np.int64), "one"),
            numpy_helper.from_array(np.array(2**62, np.int64), "M"),
        ],
    )
    session = graphrt.Session(m, intra_op_threads=1)
    err, took = cancelled_after(
        0.2, lambda tok: session.run(None, loop_feed(True, 16), cancellation=tok)
    )
    assert err is not None and err.kind == "cancelled", err
    assert took < 5, f"the run took {took:.2f} s to stop"


def test_scan_over_a_long_input_is_cancelled_between_iterations():
    n = 10**6
    session = graphrt.Session(scan_model(n), intra_op_threads=1)
    feed = {
        "acc": np.array(0, np.float32),
        "xs": np.ones(n, np.float32),
        "big": np.zeros(1, np.float32),
    }
    err, took = cancelled_after(0.2, lambda tok: session.run(None, feed, cancellation=tok))
    assert err is not None and err.kind == "cancelled", err
    assert took < 5, f"the run took {took:.2f} s to stop"
    small = {**feed, "xs": np.ones(3, np.float32)}
    total, _ = graphrt.Session(scan_model(3)).run(None, small)
    assert total == 3


def if_model() -> onnx.ModelProto:
    def branch(name: str, op: str) -> onnx.GraphProto:
        return helper.make_graph(
            [helper.make_node(op, ["x"], ["y"])], name, [], [T("y", TensorProto.FLOAT, None)]
        )

    node = helper.make_node(
        "If", ["c"], ["y"], then_branch=branch("then", "Neg"), else_branch=branch("else", "Abs"),
        name="if",
    )  # fmt: skip
    return model(
        [node],
        [T("c", TensorProto.BOOL, []), T("x", TensorProto.FLOAT, [2])],
        [T("y", TensorProto.FLOAT, None)],
    )


def test_if_branch_checks_the_token_of_the_run_it_belongs_to():
    session = graphrt.Session(if_model())
    (node,) = session.graph.nodes
    x = np.array([1.0, -2.0], np.float32)
    limits = RunLimits()
    ctx = KernelContext(node=node.info, limits=limits)
    node.kernel.run(ctx, [np.array(True), x], [None])
    np.testing.assert_array_equal(ctx.allocated[0], -x)
    limits.token = CountingToken(after=1)
    with pytest.raises(graphrt.SessionError) as info:
        node.kernel.run(KernelContext(node=node.info, limits=limits), [np.array(True), x], [None])
    assert info.value.kind == "cancelled"


def test_body_iterations_check_the_token_once_each():
    """50 iterations of a Loop's body, run as the Loop runs it: the token is read at each."""
    session = graphrt.Session(endless_loop(scan=False))
    m = session.graph.nodes[0]
    body = m.kernel.loop_body
    token = CountingToken()
    limits = RunLimits()
    limits.token = token
    ctx = KernelContext(node=m.info, limits=limits)
    x = np.zeros(1, np.float32)
    for i in range(50):
        x = body.run([np.array(i), np.array(True), x], ctx)[1]
    assert token.checks >= 50 and x.tolist() == [50.0]


def chain_of_foldable_nodes(n: int) -> onnx.ModelProto:
    nodes = [helper.make_node("Neg", [f"c{i}"], [f"c{i + 1}"]) for i in range(n)]
    nodes.append(helper.make_node("Add", ["x", f"c{n}"], ["y"]))
    return model(
        nodes,
        [T("x", TensorProto.FLOAT, [2])],
        [T("y", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.ones(2, np.float32), "c0")],
    )


def test_constant_folding_checks_the_token_per_node():
    m = chain_of_foldable_nodes(300)
    token = CountingToken(where="constant_fold.py")
    graphrt.Session(m, cancellation=token)
    assert token.checks >= 300  # once per node the pass visits
    with pytest.raises(graphrt.SessionError) as info:  # cancelled part-way through folding
        graphrt.Session(m, cancellation=CountingToken(after=100, where="constant_fold.py"))
    assert info.value.kind == "cancelled"


def test_import_checks_the_token_in_its_loops():
    inits = [numpy_helper.from_array(np.ones(1, np.float32), f"w{i}") for i in range(2000)]
    m = model(
        [helper.make_node("Identity", ["x"], ["y"])],
        [T("x", TensorProto.FLOAT, [1])],
        [T("y", TensorProto.FLOAT, [1])],
        inits,
    )
    token = CountingToken(where="ir.py")
    import_model(m, token)
    assert token.checks >= 2000  # once per initializer at least
    with pytest.raises(graphrt.SessionError) as info:
        import_model(m, CountingToken(after=1000, where="ir.py"))
    assert info.value.kind == "cancelled"


def test_planning_checks_the_token_and_caches_no_plan():
    session = graphrt.Session(chain_of_foldable_nodes(3), optimization_level="none")
    token = graphrt.CancellationToken()
    token.cancel()
    x = np.ones(2, np.float32)
    with pytest.raises(graphrt.SessionError) as info:
        session.run(None, {"x": x}, cancellation=token)
    assert info.value.kind == "cancelled"
    assert session.plans_built == 0
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], x - 1)
