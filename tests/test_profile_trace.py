"""Profiling and visibility: the Chrome/Perfetto trace (one event per node, per body iteration),
the memory plot, and every intermediate value of a run.

Oracles: the plan's own schedule (what ran), onnxruntime with the intermediates added as graph
outputs (their values), numpy (the loop's results); nothing compares graphrt with a copy of its
own earlier output.
"""

from __future__ import annotations

import inspect
import itertools
import json
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import graphrt
from graphrt.cli import main
from graphrt.plugins import loaded_plugins
from tests._models import init, make_model, mlp, ort_session, tensor

needs_controlflow = pytest.mark.skipif(
    "ops-controlflow" not in loaded_plugins(),
    reason="graphrt-ops-controlflow is not installed (tox env no-controlflow)",
)


def _save(model: onnx.ModelProto, tmp_path, name: str = "model.onnx") -> str:
    path = str(tmp_path / name)
    onnx.save(model, path)
    return path


def _nodes(events: list[dict]) -> list[dict]:
    return [e for e in events if e["cat"] not in ("run", "iteration")]


def _within(inner: dict, outer: dict) -> bool:
    # ts and dur are microseconds as floats: allow a rounding slack of a nanosecond
    return (
        inner["ts"] >= outer["ts"] - 1e-3
        and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + 1e-3
    )


def reuse_model() -> onnx.ModelProto:
    """A chain whose slab blocks are reused (and written in place) many times over, with a
    view (Reshape), a Concat whose inputs may be written straight into it, and a folded
    Constant: every value is overwritten before the run ends unless it is copied out."""
    nodes = [
        helper.make_node("Constant", [], ["c"], value=helper.make_tensor("c", 1, [6], [0.5] * 6)),
        helper.make_node("Add", ["x", "c"], ["a"], name="add"),
        helper.make_node("Reshape", ["a", "shape"], ["r"], name="reshape"),
        helper.make_node("Neg", ["r"], ["n"], name="neg"),
        helper.make_node("Exp", ["n"], ["e"], name="exp"),
        helper.make_node("Concat", ["n", "e"], ["p"], axis=0, name="concat"),
        helper.make_node("Tanh", ["p"], ["t"], name="tanh"),
        helper.make_node("Relu", ["t"], ["u"], name="relu"),
        helper.make_node("Mul", ["u", "u"], ["m"], name="mul"),
        helper.make_node("Sub", ["m", "t"], ["s"], name="sub"),
        helper.make_node("Abs", ["s"], ["b"], name="abs"),
        helper.make_node("Sigmoid", ["b"], ["y"], name="sigmoid"),
    ]
    return make_model(
        nodes,
        [tensor("x", shape=[4, 6])],
        [tensor("y", shape=[12, 4])],
        [init("shape", np.array([6, 4], np.int64))],
    )


def _with_outputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """The model with these values added as graph outputs (types from onnx's inference)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v for v in inferred.graph.value_info}
    extended = onnx.ModelProto()
    extended.CopyFrom(model)
    for name in names:
        extended.graph.output.append(types[name])
    return extended


# -- the trace -----------------------------------------------------------------------------------


def test_cli_trace_has_one_complete_event_per_executed_node(tmp_path, capsys):
    model = reuse_model()  # static steps, a view, maybe an assembled Concat
    path = _save(model, tmp_path)
    trace = tmp_path / "trace.json"
    assert main(["profile", path, "--repeat", "2", "--trace", str(trace), "-q"]) == 0
    assert f"Chrome trace written to {trace}" in capsys.readouterr().out
    events = json.loads(trace.read_text())["traceEvents"]
    assert all(e["ph"] == "X" for e in events)

    sess = graphrt.Session(model)
    plan = sess.plan_for([np.zeros((4, 6), np.float32)])
    runs = [e for e in events if e["cat"] == "run"]
    nodes = _nodes(events)
    assert len(runs) == 2
    assert len(nodes) == 2 * len(plan.steps)  # every node of the plan, every run
    for run in runs:
        mine = [e for e in nodes if _within(e, run)]
        # in schedule order, one per step, not overlapping
        assert [e["args"]["op_type"] for e in mine] == [s.node.info.op_type for s in plan.steps]
        assert all(a["ts"] + a["dur"] <= b["ts"] + 1e-3 for a, b in itertools.pairwise(mine))
    by_name = {e["name"]: e for e in nodes}
    for e in nodes:
        assert e["cat"] == e["args"]["op_type"]
        assert isinstance(e["ts"], float) and e["dur"] >= 0
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert e["args"]["plugin"] and e["args"]["kernel"] and e["args"]["kernel_path"]
    # shapes as the model states them
    assert by_name["add"]["args"]["input_shapes"] == [[4, 6], [6]]
    assert by_name["reshape"]["args"]["output_shapes"] == [[6, 4]]
    assert by_name["concat"]["args"]["input_shapes"] == [[6, 4], [6, 4]]
    assert by_name["sigmoid"]["args"]["output_shapes"] == [[12, 4]]


def test_profiled_run_gives_the_same_results_and_leaves_the_normal_path_alone():
    sess = graphrt.Session(reuse_model(), mode="exact")
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    (plain,) = sess.run(None, {"x": x})
    prof = graphrt.Profiler()
    (profiled,) = sess.run(None, {"x": x}, profiler=prof)
    np.testing.assert_array_equal(profiled, plain)  # exact mode: the same bits
    (again,) = sess.run(None, {"x": x})
    np.testing.assert_array_equal(again, plain)
    assert sum(e.kind == "run" for e in prof.events) == 1


def test_shape_checks_and_debug_poisoning_are_part_of_their_node_event():
    # a step's check and its poisoning after it are program calls of their own: still one
    # event per node
    model = mlp()
    sess = graphrt.Session(model, optimization_level="none", check_shapes=True, debug=True)
    x = np.ones((3, 24), np.float32)
    prof = graphrt.Profiler()
    sess.run(None, {"x": x}, profiler=prof)
    steps = sess.plan_for([x]).steps
    assert len(_nodes(prof.chrome_trace()["traceEvents"])) == len(steps)


def loop_if_model() -> onnx.ModelProto:
    """acc <- acc + 1 on even iterations, acc * 0.5 on odd ones (an If in the Loop's body);
    the scan output is acc after each iteration."""
    then_g = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "one"], ["t"], name="plus_one")],
        "even",
        [],
        [tensor("t", shape=[3])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Mul", ["acc_in", "half"], ["h"], name="halve")],
        "odd",
        [],
        [tensor("h", shape=[3])],
    )
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going"),
            helper.make_node("Mod", ["i", "two"], ["parity"], name="parity"),
            helper.make_node("Equal", ["parity", "zero"], ["even"], name="is_even"),
            helper.make_node(
                "If", ["even"], ["acc_out"], then_branch=then_g, else_branch=else_g, name="branch"
            ),
            helper.make_node("Identity", ["acc_out"], ["seen"], name="emit"),
        ],
        "loop_body",
        [
            tensor("i", TensorProto.INT64, []),
            tensor("cond_in", TensorProto.BOOL, []),
            tensor("acc_in", shape=[3]),
        ],
        [
            tensor("cond_out", TensorProto.BOOL, []),
            tensor("acc_out", shape=[3]),
            tensor("seen", shape=[3]),
        ],
    )
    return make_model(
        [helper.make_node("Loop", ["M", "", "x"], ["acc", "all"], body=body, name="loop")],
        [tensor("M", TensorProto.INT64, []), tensor("x", shape=[3])],
        [tensor("acc", shape=[3]), tensor("all", shape=["M", 3])],
        [
            init("one", np.float32(1)),
            init("half", np.float32(0.5)),
            init("two", np.int64(2)),
            init("zero", np.int64(0)),
        ],
    )


def _numpy_loop_if(m: int, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    acc, seen = x.copy(), []
    for i in range(m):
        acc = acc + np.float32(1) if i % 2 == 0 else acc * np.float32(0.5)
        seen.append(acc)
    return acc, np.stack(seen)


@needs_controlflow
def test_trace_has_events_for_body_nodes_per_iteration_nested_in_their_parent(tmp_path):
    m = 5
    sess = graphrt.Session(loop_if_model(), intra_op_threads=1)
    feed = {"M": np.array(m, np.int64), "x": np.array([1, 2, 3], np.float32)}
    sess.run(None, feed)  # the steady path first: profiling must not be hidden by it
    prof = graphrt.Profiler()
    acc, seen = sess.run(None, feed, profiler=prof)
    want_acc, want_seen = _numpy_loop_if(m, feed["x"])
    np.testing.assert_array_equal(acc, want_acc)
    np.testing.assert_array_equal(seen, want_seen)

    path = tmp_path / "trace.json"
    prof.write_chrome_trace(path)
    events = json.loads(path.read_text())["traceEvents"]
    (loop,) = [e for e in events if e["name"] == "loop"]
    assert loop["cat"] == "Loop" and "iteration" not in loop["args"]
    iterations = [e for e in events if e["cat"] == "iteration" and e["args"]["parent"] == "loop"]
    assert sorted(e["args"]["iteration"] for e in iterations) == list(range(m))
    assert all(_within(e, loop) for e in iterations)

    body_nodes = ["keep_going", "parity", "is_even", "branch", "emit"]
    for it in iterations:
        k = it["args"]["iteration"]
        inside = [e for e in _nodes(events) if e["args"].get("parent") == "loop"]
        mine = [e for e in inside if e["args"]["iteration"] == k]
        assert sorted(e["name"] for e in mine) == sorted(body_nodes)
        assert all(_within(e, it) and e["args"]["depth"] == 1 for e in mine)
        # the If inside: its taken branch, one level deeper, inside the If's event
        (branch,) = [e for e in mine if e["name"] == "branch"]
        deeper = [e for e in _nodes(events) if e["args"].get("depth") == 2 and _within(e, branch)]
        assert [e["name"] for e in deeper] == ["plus_one" if k % 2 == 0 else "halve"]
        assert deeper[0]["args"]["parent"] == "branch" and deeper[0]["args"]["iteration"] == 0

    # the summary keeps the model's own nodes apart from the bodies' (their time is the Loop's)
    assert [row[0] for row in prof.by_operator()] == ["Loop"]
    inner = {row[0]: row[1] for row in prof.by_operator(bodies=True)}
    assert inner["Mod"] == m and inner["If"] == m
    assert inner.get("Add", 0) == (m + 1) // 2 and inner.get("Mul", 0) == m // 2
    assert "inside control-flow bodies" in prof.summary()

    # and the ordinary runs afterwards still take the steady path, with the right answer
    np.testing.assert_array_equal(sess.run(None, feed)[1], want_seen)


@needs_controlflow
def test_scan_steps_are_iterations_of_the_trace():
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"], name="accumulate")],
        "scan_body",
        [tensor("s_in", shape=[2]), tensor("x_t", shape=[2])],
        [tensor("s_out", shape=[2])],
    )
    model = make_model(
        [helper.make_node("Scan", ["s0", "x"], ["s"], body=body, num_scan_inputs=1, name="scan")],
        [tensor("s0", shape=[2]), tensor("x", shape=[4, 2])],
        [tensor("s", shape=[2])],
    )
    sess = graphrt.Session(model)
    prof = graphrt.Profiler()
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    (s,) = sess.run(None, {"s0": np.zeros(2, np.float32), "x": x}, profiler=prof)
    np.testing.assert_array_equal(s, x.sum(axis=0))
    adds = [e for e in prof.events if e.name == "accumulate"]
    assert [e.args["iteration"] for e in adds] == [0, 1, 2, 3]
    assert all(e.args["parent"] == "scan" and e.args["input_shapes"] == [[2], [2]] for e in adds)


# -- the memory plot -----------------------------------------------------------------------------


def test_memory_plot_is_a_png(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the memory plot needs matplotlib (graphrt[plot])")
    path = _save(reuse_model(), tmp_path)
    png = tmp_path / "memory.png"
    assert main(["profile", path, "--repeat", "1", "--memory-plot", str(png), "-q"]) == 0
    assert "memory plot" in capsys.readouterr().out
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000


@needs_controlflow
def test_memory_plot_draws_values_outside_the_slab_too(tmp_path):
    pytest.importorskip("matplotlib", reason="the memory plot needs matplotlib (graphrt[plot])")
    from graphrt.memplot import dynamic_lifetimes, plot_memory

    sess = graphrt.Session(loop_if_model())
    plan = sess.plan_for([np.array(3, np.int64), np.zeros(3, np.float32)])
    # the Loop's outputs are shaped at run time: made by the one step, outputs to the end
    assert dynamic_lifetimes(plan) == [("acc", 0, 0), ("all", 0, 0)]
    plot_memory(plan, tmp_path / "loop.png")
    assert (tmp_path / "loop.png").read_bytes()[:4] == b"\x89PNG"


def test_memory_plot_without_matplotlib_names_the_extra(tmp_path, capsys, monkeypatch):
    import sys

    for name in ("matplotlib", "matplotlib.figure", "matplotlib.patches", "matplotlib.ticker"):
        monkeypatch.setitem(sys.modules, name, None)  # import fails as if not installed
    path = _save(reuse_model(), tmp_path)
    png = tmp_path / "memory.png"
    assert main(["profile", path, "--repeat", "1", "--memory-plot", str(png), "-q"]) == 2
    err = capsys.readouterr().err
    assert "matplotlib" in err and "pip install graphrt[plot]" in err
    assert not png.exists()


# -- every intermediate --------------------------------------------------------------------------


def _check_intermediates(sess: graphrt.Session, model: onnx.ModelProto, x: np.ndarray) -> dict:
    outputs, values = sess.run_with_intermediates(None, {"x": x})
    made = [o for n in model.graph.node for o in n.output]
    assert sorted(values) == sorted(made)  # every node's value, the Constant's included
    oracle = ort_session(_with_outputs(model, [n for n in made if n != "y"]))
    names = [o.name for o in oracle.get_outputs()]
    want = dict(zip(names, oracle.run(None, {"x": x})))
    for name in made:
        np.testing.assert_allclose(values[name], want[name], rtol=1e-6, atol=1e-6, err_msg=name)
    np.testing.assert_array_equal(outputs[0], values["y"])
    return values


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_run_with_intermediates_returns_copies_of_every_value(mode):
    model = reuse_model()
    sess = graphrt.Session(model, mode=mode, optimization_level="none")
    x = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    plan = sess.plan_for([x])
    ids, offsets = plan.graph.ids, plan.memory.offsets
    at = [offsets[ids[n]] for n in ("a", "n", "t", "u", "m", "s", "b") if ids[n] in offsets]
    # the case this is about: blocks shared over time, so the slab alone could not show them
    assert len(set(at)) < len(at)
    values = _check_intermediates(sess, model, x)
    held = {k: v.copy() for k, v in values.items()}
    sess.run_with_intermediates(None, {"x": -x})  # another run reuses the slab...
    sess.run(None, {"x": x + 1})
    for k, v in values.items():  # ...but what was returned is the caller's
        np.testing.assert_array_equal(v, held[k], err_msg=k)
    for a in values.values():
        assert sum(np.shares_memory(a, b) for b in values.values()) == 1


def test_run_with_intermediates_with_the_default_passes():
    # fused nodes are gone: the values are those of the graph as the passes left it
    model = mlp()
    sess = graphrt.Session(model)
    x = np.random.default_rng(3).standard_normal((5, 24)).astype(np.float32)
    (y,), values = sess.run_with_intermediates(["y"], {"x": x})
    np.testing.assert_array_equal(y, sess.run(None, {"x": x})[0])
    assert "y" in values and "x" not in values and not set(values) & {"w0", "b0", "wo"}
    names = [n for n in values if n != "y"]
    oracle = ort_session(_with_outputs(model, names))
    want = dict(zip([o.name for o in oracle.get_outputs()], oracle.run(None, {"x": x})))
    for name in values:
        np.testing.assert_allclose(values[name], want[name], rtol=1e-5, atol=1e-5, err_msg=name)


def test_run_with_intermediates_is_thread_safe():
    model = reuse_model()
    sess = graphrt.Session(model, optimization_level="none")
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((4, 6)).astype(np.float32) for _ in range(4)]
    want = [ort_session(_with_outputs(model, ["t"])).run(["t"], {"x": x})[0] for x in xs]
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            for _ in range(25):
                _, values = sess.run_with_intermediates(None, {"x": xs[k]})
                np.testing.assert_allclose(values["t"], want[k], rtol=1e-6, atol=1e-6)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_the_ordinary_run_keeps_onnxruntimes_signature():
    params = inspect.signature(graphrt.Session.run).parameters
    assert list(params) == ["self", "output_names", "input_feed", "out", "cancellation", "profiler"]
    sess = graphrt.Session(mlp())
    result = sess.run(None, {"x": np.ones((2, 24), np.float32)})
    assert type(result) is list and len(result) == 1
