"""ops-controlflow through sessions: bodies reused, errors at creation, threads, sequences.

The backend node cases (test_backend.py) check each operator's semantics; these tests check
what a user of the runtime relies on beyond them.  Oracles are numpy loops written here and
onnxruntime; nothing compares graphrt with its own output.
"""

from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import graphrt
from graphrt.plugins import loaded_plugins
from tests._models import init, make_model, ort_session, tensor

HAVE_CONTROLFLOW = "ops-controlflow" in loaded_plugins()
needs_controlflow = pytest.mark.skipif(
    not HAVE_CONTROLFLOW, reason="graphrt-ops-controlflow is not installed (tox env no-controlflow)"
)

STEP = np.array([0.5, -1.25, 3.0, 0.125], np.float32)


def loop_model(opset: int = 17) -> onnx.ModelProto:
    """acc <- acc + step for M iterations (step read from the outer scope); scan output acc*acc."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["acc_in", "step"], ["acc_out"]),
            helper.make_node("Mul", ["acc_out", "acc_out"], ["sq"]),
        ],
        "loop_body",
        [
            tensor("i", TensorProto.INT64, []),
            tensor("cond_in", TensorProto.BOOL, []),
            tensor("acc_in", shape=[4]),
        ],
        [
            tensor("cond_out", TensorProto.BOOL, []),
            tensor("acc_out", shape=[4]),
            tensor("sq", shape=[4]),
        ],
    )
    return make_model(
        [helper.make_node("Loop", ["M", "", "x"], ["acc", "squares"], body=body)],
        [tensor("M", TensorProto.INT64, []), tensor("x", shape=[4])],
        [tensor("acc", shape=[4]), tensor("squares", shape=["M", 4])],
        [init("step", STEP)],
        opset=opset,
    )


def numpy_loop(m: int, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    acc, squares = x.copy(), []
    for _ in range(m):
        acc = acc + STEP
        squares.append(acc * acc)
    return acc, np.stack(squares) if squares else np.zeros((0,), np.float32)


def scan_model() -> onnx.ModelProto:
    """A running sum over axis 0 of x [T, 3], scanned in reverse, plus each partial sum."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
            helper.make_node("Identity", ["s_out"], ["partial"]),
        ],
        "scan_body",
        [tensor("s_in", shape=[3]), tensor("x_t", shape=[3])],
        [tensor("s_out", shape=[3]), tensor("partial", shape=[3])],
    )
    node = helper.make_node(
        "Scan",
        ["s0", "x"],
        ["total", "partials"],
        body=body,
        num_scan_inputs=1,
        scan_input_directions=[1],
    )
    return make_model(
        [node],
        [tensor("s0", shape=[3]), tensor("x", shape=["T", 3])],
        [tensor("total", shape=[3]), tensor("partials", shape=["T", 3])],
    )


def if_model(then_op: str = "Relu", then_domain: str = "") -> onnx.ModelProto:
    then_g = helper.make_graph(
        [helper.make_node(then_op, ["x"], ["t"], domain=then_domain)],
        "then",
        [],
        [tensor("t", shape=[4])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"])], "else", [], [tensor("e", shape=[4])]
    )
    domains = (then_domain,) if then_domain else ()
    return make_model(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
        [tensor("c", TensorProto.BOOL, []), tensor("x", shape=[4])],
        [tensor("y", shape=[4])],
        domains=domains,
    )


# -- bodies are compiled once and reused -------------------------------------------------------


@needs_controlflow
def test_loop_of_10000_iterations_builds_one_plan_and_reuses_its_run_state():
    sess = graphrt.Session(loop_model(), intra_op_threads=1)
    x = np.array([1, 2, 3, 4], np.float32)
    acc, squares = sess.run(None, {"M": np.array(10_000, np.int64), "x": x})
    want_acc, want_sq = numpy_loop(10_000, x)
    np.testing.assert_array_equal(acc, want_acc)
    np.testing.assert_array_equal(squares, want_sq)

    (first,) = sess.body_stats()
    assert first["body"] == ".loop_body" or first["body"].endswith("loop_body")
    assert first["runs"] == 10_000
    assert first["plans_built"] == 1
    assert first["run_states_created"] == 1

    sess.run(None, {"M": np.array(10_000, np.int64), "x": x})  # steady state
    (second,) = sess.body_stats()
    assert second["runs"] == 20_000
    assert second["plans_built"] == 1
    assert second["run_states_created"] == 1
    sess.close()


@needs_controlflow
@pytest.mark.parametrize("m", [0, 1, 7])
def test_loop_matches_numpy_and_onnxruntime(m):
    pytest.importorskip("onnxruntime")
    model = loop_model()
    x = np.array([1, -2, 3, 0.5], np.float32)
    feed = {"M": np.array(m, np.int64), "x": x}
    got = graphrt.Session(model).run(None, feed)
    want_acc, want_sq = numpy_loop(m, x)
    np.testing.assert_array_equal(got[0], want_acc)
    ref = ort_session(model)
    ort_out = ref.run(None, feed)
    np.testing.assert_array_equal(got[0], ort_out[0])
    if m:
        np.testing.assert_array_equal(got[1], want_sq)
        np.testing.assert_array_equal(got[1], ort_out[1])
    else:
        assert got[1].size == 0 and got[1].dtype == np.float32


@needs_controlflow
def test_scan_reverse_direction_matches_numpy():
    x = np.arange(15, dtype=np.float32).reshape(5, 3) * 0.25
    s0 = np.array([1, 0, -1], np.float32)
    total, partials = graphrt.Session(scan_model()).run(None, {"s0": s0, "x": x})
    running, want = s0.copy(), []
    for t in reversed(range(5)):
        running = running + x[t]
        want.append(running)
    np.testing.assert_array_equal(total, running)
    # scan outputs are stacked in iteration order (forward), the first from x[T-1]
    np.testing.assert_array_equal(partials, np.stack(want))
    pytest.importorskip("onnxruntime")
    ref = ort_session(scan_model())
    for a, b in zip((total, partials), ref.run(None, {"s0": s0, "x": x})):
        np.testing.assert_array_equal(a, b)


# -- errors at creation ------------------------------------------------------------------------


@needs_controlflow
def test_if_branch_with_a_missing_operator_fails_at_creation_naming_it():
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(if_model("FrobnicateTensor", "com.example.missing"))
    assert info.value.kind == "unsupported_operator"
    assert info.value.operators == ["com.example.missing.FrobnicateTensor (opset 1)"]
    assert "com.example.missing.FrobnicateTensor (opset 1)" in str(info.value)


@needs_controlflow
def test_exact_session_over_a_loop_whose_body_is_not_exact_names_the_operator():
    model = loop_model()
    body = model.graph.node[0].attribute[0].g
    body.node[1].op_type = "Log"  # acc_out = Log(acc_in, step) is not valid; fix inputs
    del body.node[1].input[1]
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(model, mode="exact")
    assert info.value.kind == "exact_mode_unavailable"
    assert "Log (opset 17)" in info.value.operators
    assert "Loop (opset 17)" not in info.value.operators


@needs_controlflow
def test_exact_session_over_an_exact_loop_body_runs_bit_identically():
    x = np.array([1, 2, 3, 4], np.float32)
    feed = {"M": np.array(100, np.int64), "x": x}
    outs = [
        graphrt.Session(loop_model(), mode="exact", intra_op_threads=t).run(None, feed)
        for t in (1, 2, 4)
    ]
    for other in outs[1:]:
        for a, b in zip(outs[0], other):
            assert a.tobytes() == b.tobytes()
    np.testing.assert_array_equal(outs[0][0], numpy_loop(100, x)[0])


def test_without_controlflow_plugin_loop_if_scan_are_unsupported_operators():
    """What the no-controlflow tox env shows for real, here through the session allow-list."""
    for model, op in ((loop_model(), "Loop"), (scan_model(), "Scan"), (if_model(), "If")):
        with pytest.raises(graphrt.SessionError) as info:
            graphrt.Session(model, plugins=["ops-basic"])
        assert info.value.kind == "unsupported_operator"
        assert f"{op} (opset 17)" in info.value.operators


@pytest.mark.skipif(HAVE_CONTROLFLOW, reason="only where ops-controlflow is not installed")
def test_installed_without_controlflow_loop_is_an_unsupported_operator():
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(loop_model())
    assert info.value.kind == "unsupported_operator"
    assert info.value.operators == ["Loop (opset 17)"]


# -- threads -----------------------------------------------------------------------------------


@needs_controlflow
@pytest.mark.parametrize("intra", [1, 2])
def test_eight_threads_of_loop_and_scan_runs_equal_serial(intra):
    rng = np.random.default_rng(3)
    loop_sess = graphrt.Session(loop_model(), intra_op_threads=intra)
    scan_sess = graphrt.Session(scan_model(), intra_op_threads=intra)
    cases = []
    for k in range(40):
        if k % 2:
            feed = {
                "M": np.array(int(rng.integers(0, 30)), np.int64),
                "x": rng.standard_normal(4).astype(np.float32),
            }
            cases.append((loop_sess, feed))
        else:
            t = int(rng.integers(1, 9))
            feed = {
                "s0": rng.standard_normal(3).astype(np.float32),
                "x": rng.standard_normal((t, 3)).astype(np.float32),
            }
            cases.append((scan_sess, feed))
    serial = [sess.run(None, feed) for sess, feed in cases]
    failures: list[str] = []
    barrier = threading.Barrier(8)

    def worker(tid: int) -> None:
        barrier.wait()
        for rep in range(5):
            for k in range((tid + rep) % len(cases), len(cases), 3):
                sess, feed = cases[k]
                got = sess.run(None, feed)
                for a, b in zip(got, serial[k]):
                    if a.tobytes() != b.tobytes() or a.shape != b.shape:
                        failures.append(f"thread {tid} case {k}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


# -- sequences and optionals at the graph boundary ----------------------------------------------


def _seq(name, elem=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_sequence_value_info(name, elem, shape)


def _opt(name, elem=TensorProto.FLOAT, shape=None):
    t = helper.make_optional_type_proto(helper.make_tensor_type_proto(elem, shape))
    return helper.make_value_info(name, t)


def sequence_model() -> onnx.ModelProto:
    """seq in -> its length, its concatenation, and x split into a sequence of rows."""
    return make_model(
        [
            helper.make_node("SequenceLength", ["s"], ["n"]),
            helper.make_node("ConcatFromSequence", ["s"], ["cat"], axis=0),
            helper.make_node("SplitToSequence", ["cat"], ["rows"], axis=0, keepdims=0),
        ],
        [_seq("s", shape=None)],
        [tensor("n", TensorProto.INT64, []), tensor("cat", shape=None), _seq("rows")],
    )


@needs_controlflow
def test_sequence_inputs_and_outputs_are_python_lists():
    sess = graphrt.Session(sequence_model())
    (inp,) = sess.get_inputs()
    assert (inp.name, inp.kind, inp.type) == ("s", "sequence", "seq(tensor(float))")
    kinds = [(o.name, o.kind, o.type) for o in sess.get_outputs()]
    assert kinds == [
        ("n", "tensor", "tensor(int64)"),
        ("cat", "tensor", "tensor(float)"),
        ("rows", "sequence", "seq(tensor(float))"),
    ]
    parts = [np.full((2, 3), 1.5, np.float32), np.arange(3, dtype=np.float32).reshape(1, 3)]
    n, cat, rows = sess.run(None, {"s": parts})
    assert n.dtype == np.int64 and int(n) == 2
    np.testing.assert_array_equal(cat, np.concatenate(parts))
    assert isinstance(rows, list) and len(rows) == 3
    for row, want in zip(rows, np.concatenate(parts)):
        np.testing.assert_array_equal(row, want)
    rows[0][0] = 99  # outputs are the caller's, never the run state's
    again = sess.run(["rows"], {"s": parts})[0]
    assert again[0][0] == 1.5


@needs_controlflow
def test_sequence_input_errors_say_what_to_pass():
    sess = graphrt.Session(sequence_model())
    with pytest.raises(graphrt.SessionError) as info:
        sess.run(None, {"s": np.zeros((2, 3), np.float32)})
    assert info.value.kind == "invalid_input"
    assert str(info.value) == (
        "[invalid_input] input 's' is seq(tensor(float)): pass a list of arrays, not ndarray"
    )
    with pytest.raises(graphrt.SessionError) as info:
        sess.run(None, {"s": [np.zeros(3, np.float32), np.zeros(3, np.int32)]})
    assert str(info.value) == (
        "[invalid_input] input 's[1]' must be tensor(float) (declared seq(tensor(float))), "
        "got tensor(int32)"
    )


@needs_controlflow
def test_optional_inputs_accept_none_and_outputs_return_none():
    model = make_model(
        [
            helper.make_node("OptionalHasElement", ["o"], ["has"]),
            helper.make_node("Identity", ["o"], ["same"]),
        ],
        [_opt("o", shape=[2])],
        [tensor("has", TensorProto.BOOL, []), _opt("same", shape=[2])],
        opset=18,
    )
    sess = graphrt.Session(model)
    assert [(a.kind, a.type) for a in sess.get_inputs()] == [
        ("optional", "optional(tensor(float))")
    ]
    has, same = sess.run(None, {"o": None})
    assert bool(has) is False and same is None
    has, same = sess.run(None, {"o": np.array([1, 2], np.float32)})
    assert bool(has) is True
    np.testing.assert_array_equal(same, [1, 2])
    has, same = sess.run(None, {})  # an omitted optional input is an empty one
    assert bool(has) is False and same is None


# -- model-local functions ---------------------------------------------------------------------


def function_model(inner_op: str = "Mul") -> onnx.ModelProto:
    """y = Scale(AddTwice(x, b), alpha=3): functions with an attribute and a nested call."""
    add_twice = helper.make_function(
        "local",
        "AddTwice",
        ["a", "b"],
        ["c"],
        [
            helper.make_node("Add", ["a", "b"], ["t"]),
            helper.make_node("Add", ["t", "b"], ["c"]),
        ],
        [helper.make_opsetid("", 17)],
    )
    alpha_ref = helper.make_attribute_ref("value_float", TensorProto.FLOAT)
    alpha_ref.name = "value_float"
    alpha_ref.ref_attr_name = "alpha"
    const = helper.make_node("Constant", [], ["k"])
    const.attribute.append(alpha_ref)
    scale = helper.make_function(
        "local",
        "Scale",
        ["x", "b"],
        ["y"],
        [
            helper.make_node("AddTwice", ["x", "b"], ["s"], domain="local"),
            const,
            helper.make_node(inner_op, ["s", "k"], ["y"]),
        ],
        [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
        attributes=["alpha"],
    )
    return make_model(
        [helper.make_node("Scale", ["x", "b"], ["y"], domain="local", alpha=3.0)],
        [tensor("x", shape=[3]), tensor("b", shape=[3])],
        [tensor("y", shape=[3])],
        domains=("local",),
        functions=[add_twice, scale],
    )


def test_model_local_functions_with_attributes_and_nested_calls():
    x = np.array([1, 2, 3], np.float32)
    b = np.array([0.5, 0.25, -1], np.float32)
    (y,) = graphrt.Session(function_model()).run(None, {"x": x, "b": b})
    np.testing.assert_array_equal(y, ((x + b) + b) * np.float32(3))


def test_function_body_with_a_missing_operator_is_reported_like_any_other():
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(function_model("Hypotenuse"))
    assert info.value.kind == "unsupported_operator"
    assert info.value.operators == ["Hypotenuse (opset 17)"]


@needs_controlflow
def test_loop16_seq_none_matches_onnx_expected_output_directly():
    """The backend runner cannot compare this case (a 0-d first element): compare it here."""
    from tests.ops.node_cases import all_cases  # onnx's node cases, collected once

    (case,) = [c for c in all_cases() if c.name == "test_loop16_seq_none"]
    (inputs, (expected,)) = case.data_sets[0]
    sess = graphrt.Session(case.model)
    feed = {d.name: v for d, v in zip(sess.get_inputs(), inputs)}
    (got,) = sess.run(None, feed)
    assert isinstance(got, list) and len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_array_equal(g, e)
