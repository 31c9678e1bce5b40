"""Sessions: run forms, validation before running, errors by kind and message, lifetime."""

from __future__ import annotations

import os
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphrt
from tests._models import add_chain, init, make_model, mlp, tensor


def _relu_add():
    return make_model(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "b"], ["y"])],
        [tensor("x", shape=["N", 3])],
        [tensor("y", shape=["N", 3])],
        [init("b", np.array([1, 2, 3], np.float32))],
    )


def test_tensor_form_happy_path_and_model_argument_kinds(tmp_path):
    model = _relu_add()
    x = np.array([[-1, 0, 1], [2, -2, 3]], np.float32)
    expected = np.maximum(x, 0) + [1, 2, 3]
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    for source in (model, model.SerializeToString(), str(path), path):
        sess = graphrt.Session(source)
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], expected)
        np.testing.assert_array_equal(sess.run(["y"], {"x": x})[0], expected)
    np.testing.assert_array_equal(graphrt.load(model)(x), expected)


def test_get_inputs_and_outputs_report_names_types_and_symbols():
    sess = graphrt.Session(_relu_add())
    (i,), (o,) = sess.get_inputs(), sess.get_outputs()
    assert (i.name, i.type, i.shape) == ("x", "tensor(float)", ["N", 3])
    assert (o.name, o.type, o.shape) == ("y", "tensor(float)", ["N", 3])


def test_out_arrays_are_checked_and_overwritten():
    sess = graphrt.Session(_relu_add())
    x = np.ones((2, 3), np.float32)
    target = np.full((2, 3), 99, np.float32)
    (got,) = sess.run(None, {"x": x}, out={"y": target})
    assert got is target
    np.testing.assert_array_equal(target, x + [1, 2, 3])
    with pytest.raises(
        graphrt.SessionError,
        match=r"out\['y'\] is tensor\(double\) but the output is tensor\(float\)",
    ):
        sess.run(None, {"x": x}, out={"y": np.zeros((2, 3))})
    with pytest.raises(
        graphrt.SessionError,
        match=r"out\['y'\] has shape \[3, 2\] but the output has shape \[2, 3\]",
    ):
        sess.run(None, {"x": x}, out={"y": np.zeros((3, 2), np.float32)})


@pytest.mark.parametrize(
    ("feed", "message"),
    [
        (
            {"x": np.ones((2, 3), np.float32), "z": 1},
            "unknown input(s) 'z'; the model's inputs are 'x'",
        ),
        ({}, "input 'x' is missing"),
        ({"x": np.ones((2, 3), np.float64)}, "input 'x' must be tensor(float), got tensor(double)"),
        (
            {"x": np.ones((3,), np.float32)},
            "input 'x' must have rank 2 (shape [N, 3]), got shape [3]",
        ),
        (
            {"x": np.ones((2, 4), np.float32)},
            "input 'x' axis 1 must be 3 (shape [N, 3]), got shape [2, 4]",
        ),
    ],
)
def test_bad_inputs_are_refused_before_running(feed, message):
    sess = graphrt.Session(_relu_add())
    with pytest.raises(graphrt.SessionError) as info:
        sess.run(None, feed)
    assert info.value.kind == "invalid_input"
    assert str(info.value) == f"[invalid_input] {message}"
    assert sess.plans_built == 0  # nothing was planned or run


def test_unknown_output_name():
    with pytest.raises(
        graphrt.SessionError, match="unknown output 'q'; the model's outputs are 'y'"
    ):
        graphrt.Session(_relu_add()).run(["q"], {"x": np.ones((1, 3), np.float32)})


def test_inputs_are_never_modified_and_outputs_never_alias():
    # Identity of an input and of a weight: outputs must still be fresh arrays
    w = np.arange(3, dtype=np.float32)
    model = make_model(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Identity", ["w"], ["wy"]),
            helper.make_node("Identity", ["x"], ["xy"]),
        ],
        [tensor("x", shape=[3])],
        [tensor("r", shape=[3]), tensor("wy", shape=[3]), tensor("xy", shape=[3])],
        [init("w", w)],
    )
    sess = graphrt.Session(model)
    x = np.array([-1, 0, 1], np.float32)
    keep = x.copy()
    r1, wy1, xy1 = sess.run(None, {"x": x})
    np.testing.assert_array_equal(x, keep)
    assert not np.shares_memory(xy1, x)
    wy1[:] = 42  # mutating an output must not change the model's weight or later results
    r1[:] = 42
    r2, wy2, _ = sess.run(None, {"x": x})
    np.testing.assert_array_equal(wy2, w)
    np.testing.assert_array_equal(r2, [0, 0, 1])
    assert not np.shares_memory(r1, r2)


def test_closed_session_refuses_runs():
    sess = graphrt.Session(_relu_add())
    sess.close()
    with pytest.raises(graphrt.SessionError) as info:
        sess.run(None, {"x": np.ones((1, 3), np.float32)})
    assert info.value.kind == "closed"


def test_close_lets_runs_in_flight_finish():
    sess = graphrt.Session(add_chain(200, 4096), intra_op_threads=1)
    x = np.zeros((1, 4096), np.float32)
    results, errors = [], []
    started = threading.Event()

    def worker():
        started.set()
        for _ in range(20):
            try:
                results.append(sess.run(None, {"x": x})[0])
            except graphrt.SessionError as exc:
                errors.append(exc.kind)
                return

    t = threading.Thread(target=worker)
    t.start()
    started.wait()
    sess.close()
    t.join()
    assert all(k == "closed" for k in errors)
    for r in results:
        np.testing.assert_array_equal(r, np.full((1, 4096), 100.0, np.float32))


def test_plan_cache_keeps_the_newest_plans():
    sess = graphrt.Session(_relu_add(), max_cached_plans=2)
    for n in (1, 2, 3):
        sess.run(None, {"x": np.ones((n, 3), np.float32)})
    keys = [p.key[0][1] for p in sess.cached_plans]
    assert keys == [(2, 3), (3, 3)]
    sess.run(None, {"x": np.ones((3, 3), np.float32)})
    assert sess.plans_built == 3


def test_cancellation_during_creation_and_run():
    token = graphrt.CancellationToken()
    token.cancel()
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(_relu_add(), cancellation=token)
    assert info.value.kind == "cancelled"
    sess = graphrt.Session(_relu_add())
    with pytest.raises(graphrt.SessionError) as info:
        sess.run(None, {"x": np.ones((1, 3), np.float32)}, cancellation=token)
    assert info.value.kind == "cancelled"


def test_invalid_models_name_what_is_wrong():
    with pytest.raises(graphrt.SessionError, match="not an ONNX model") as info:
        graphrt.Session(b"definitely not protobuf \xff\xff")
    assert info.value.kind == "invalid_model"
    undefined = make_model(
        [helper.make_node("Relu", ["nope"], ["y"], name="r1")],
        [tensor("x", shape=[1])],
        [tensor("y", shape=[1])],
    )
    with pytest.raises(
        graphrt.SessionError, match=r"node 'r1' \(Relu\) has undefined input\(s\) 'nope'"
    ) as info:
        graphrt.Session(undefined)
    assert info.value.node == "r1"
    with pytest.raises(graphrt.SessionError, match="no model file at"):
        graphrt.Session("/no/such/model.onnx")


def test_every_missing_operator_is_listed_at_once():
    model = make_model(
        [
            helper.make_node("Frob", ["x"], ["a"]),
            helper.make_node("Relu", ["a"], ["b"]),
            helper.make_node("Blorp", ["b"], ["y"], domain="com.x"),
            helper.make_node("Frob", ["x"], ["c"]),
        ],
        [tensor("x", shape=[1])],
        [tensor("y", shape=[1]), tensor("c", shape=[1])],
        domains=["com.x"],
    )
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(model)
    assert info.value.kind == "unsupported_operator"
    assert info.value.operators == ["Frob (opset 17)", "com.x.Blorp (opset 1)"]


def _external_model(tmp_path, location: str):
    t = numpy_helper.from_array(np.ones(4, np.float32), "w")
    t.data_location = TensorProto.EXTERNAL
    t.ClearField("raw_data")
    for k, v in (("location", location), ("offset", "0"), ("length", "16")):
        e = t.external_data.add()
        e.key, e.value = k, v
    model = make_model(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        [tensor("x", shape=[4])],
        [tensor("y", shape=[4])],
        [t],
    )
    (tmp_path / "model").mkdir(exist_ok=True)
    path = tmp_path / "model" / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def test_external_data_loads_from_the_model_folder(tmp_path):
    path = _external_model(tmp_path, "weights.bin")
    (tmp_path / "model" / "weights.bin").write_bytes(np.full(4, 2, np.float32).tobytes())
    y = graphrt.Session(path).run(None, {"x": np.ones(4, np.float32)})[0]
    np.testing.assert_array_equal(y, [3, 3, 3, 3])


@pytest.mark.parametrize("location", ["../secret.bin", "/etc/passwd", "link.bin"])
def test_external_data_escaping_the_folder_is_refused(tmp_path, location):
    (tmp_path / "secret.bin").write_bytes(np.ones(4, np.float32).tobytes())
    path = _external_model(tmp_path, location)
    os.symlink(tmp_path / "secret.bin", tmp_path / "model" / "link.bin")
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(path)
    assert info.value.kind == "invalid_model"
    assert location in str(info.value)


def test_options_are_validated():
    for bad, kind in (
        ({"mode": "turbo"}, "unsupported"),
        ({"optimization_level": "max"}, "unsupported"),
        ({"max_cached_plans": 0}, "unsupported"),
        ({"weight_storage": "int4"}, "unsupported"),
    ):
        with pytest.raises(graphrt.SessionError) as info:
            graphrt.Session(_relu_add(), **bad)
        assert info.value.kind == kind


def test_weight_storage_rounds_weights():
    model = mlp()
    x = np.random.default_rng(1).standard_normal((3, 24)).astype(np.float32)
    full = graphrt.Session(model).run(None, {"x": x})[0]
    half = graphrt.Session(model, weight_storage="float16").run(None, {"x": x})[0]
    bf = graphrt.Session(model, weight_storage="bfloat16").run(None, {"x": x})[0]
    assert not np.array_equal(full, half)
    np.testing.assert_allclose(half, full, rtol=5e-2, atol=5e-2)
    np.testing.assert_allclose(bf, full, rtol=2e-1, atol=2e-1)


def test_happy_path_with_several_inputs_and_outputs():
    model = make_model(
        [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Mul", ["a", "b"], ["p"])],
        [tensor("a", shape=[2]), tensor("b", shape=[2])],
        [tensor("s", shape=[2]), tensor("p", shape=[2])],
    )
    m = graphrt.load(model)
    s, p = m(np.array([1, 2], np.float32), np.array([3, 4], np.float32))
    np.testing.assert_array_equal(s, [4, 6])
    np.testing.assert_array_equal(p, [3, 8])
    with pytest.raises(graphrt.SessionError, match=r"takes 2 input\(s\) \(a, b\), got 1"):
        m(np.ones(2, np.float32))


def test_backend_runs_like_onnxruntimes():
    import graphrt.backend as backend

    rep = backend.prepare(_relu_add())
    (y,) = rep.run([np.ones((1, 3), np.float32)])
    np.testing.assert_array_equal(y, [[2, 3, 4]])
    node = helper.make_node("Add", ["a", "b"], ["c"])
    (c,) = backend.run_node(node, [np.ones(2, np.float32), np.ones(2, np.float32)])
    np.testing.assert_array_equal(c, [2, 2])


def test_inspect_keeps_every_intermediate():
    # every value of the graph the passes left: unfused, so the Add/Relu chain stays
    sess = graphrt.Session(mlp(), optimization_level="none")
    x = np.random.default_rng(2).standard_normal((3, 24)).astype(np.float32)
    values = sess.inspect({"x": x})
    np.testing.assert_array_equal(values["r0"], np.maximum(values["a0"], 0))
    np.testing.assert_array_equal(values["y"], sess.run(None, {"x": x})[0])
    assert not np.shares_memory(values["a0"], values["r0"])


def test_profiler_is_bounded_and_writes_a_chrome_trace(tmp_path):
    import json

    sess = graphrt.Session(mlp(), optimization_level="none")  # 7 steps, nothing fused
    prof = graphrt.Profiler(max_events=20)
    for _ in range(5):
        sess.run(None, {"x": np.ones((2, 24), np.float32)}, profiler=prof)
    assert len(prof.events) == 20 and prof.dropped == 5 * 8 - 20  # 7 steps + 1 run event each
    ops = {row[0] for row in prof.by_operator()}
    assert ops <= {"MatMul", "Add", "Relu", "Gemm"} and "Gemm" in ops
    path = tmp_path / "trace.json"
    prof.write_chrome_trace(path)
    trace = json.loads(path.read_text())["traceEvents"]
    assert trace and all(e["ph"] == "X" and e["dur"] >= 0 for e in trace)


# -- dynamic steps: infer again only when what it read changes ---------------------------------


class _CountingRepeat:
    """com.t.Repeat(x, n): x tiled n times along axis 0; counts its infer calls."""

    calls = 0

    def __new__(cls, node):
        from graphrt.kernel import OpKernel

        class Repeat(OpKernel):
            def infer(self, ctx):
                _CountingRepeat.calls += 1
                n = int(ctx.value(1))
                ctx.set_output(0, ctx.dtype(0), (ctx.shape(0)[0] * n, *ctx.shape(0)[1:]))
                ctx.prepared = n

            def run(self, ctx, inputs, outputs):
                np.copyto(outputs[0], np.concatenate([inputs[0]] * ctx.prepared))

        return Repeat(node)


def _repeat_model():
    node = helper.make_node("Repeat", ["x", "n"], ["y"], domain="com.t")
    return make_model(
        [node],
        [tensor("x", shape=[2, 3]), tensor("n", TensorProto.INT64, [])],
        [tensor("y")],
        domains=["com.t"],
    )


def test_a_dynamic_step_infers_again_only_when_a_value_it_read_changes():
    _CountingRepeat.calls = 0
    sess = graphrt.Session(_repeat_model(), custom_kernels={("com.t", "Repeat"): _CountingRepeat})
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for n in (2, 2, 2, 3, 3, 2, 1, 1):
        (y,) = sess.run(None, {"x": x, "n": np.array(n, np.int64)})
        np.testing.assert_array_equal(y, np.concatenate([x] * n))
    assert _CountingRepeat.calls == 5  # 2, 3, 2, 1: each change infers once (+1 at planning)


@pytest.mark.parametrize("threads", [1, 2])
def test_dynamic_steps_follow_changing_run_time_values(threads):
    """Run-time k, depth and shape: each run's result follows its own values, also when the
    same values come back and when runs alternate between pooled run states."""
    nodes = [
        helper.make_node("TopK", ["x", "k"], ["vals", "idx"]),
        helper.make_node("OneHot", ["idx", "depth", "onoff"], ["hot"]),
        helper.make_node("Reshape", ["vals", "shape"], ["flat"]),
    ]
    model = make_model(
        nodes,
        [
            tensor("x", shape=[2, 6]),
            tensor("k", TensorProto.INT64, [1]),
            tensor("depth", TensorProto.INT64, []),
            tensor("shape", TensorProto.INT64, [1]),
        ],
        [tensor("hot"), tensor("flat")],
        [init("onoff", np.array([0.0, 1.0], np.float32))],
        opset=13,
    )
    sess = graphrt.Session(model, intra_op_threads=threads)
    x = np.random.default_rng(0).standard_normal((2, 6)).astype(np.float32)
    order = np.argsort(-x, axis=1, kind="stable")
    for k, depth in [(2, 6), (2, 6), (3, 6), (3, 8), (2, 6), (1, 7), (1, 7)]:
        feed = {
            "x": x,
            "k": np.array([k], np.int64),
            "depth": np.array(depth, np.int64),
            "shape": np.array([2 * k], np.int64),
        }
        hot, flat = sess.run(None, feed)
        assert hot.shape == (2, k, depth)
        np.testing.assert_array_equal(np.argmax(hot, axis=-1), order[:, :k])
        np.testing.assert_array_equal(flat, np.take_along_axis(x, order[:, :k], 1).reshape(-1))
