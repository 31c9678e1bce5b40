"""The ``graphrt`` command line: run, check, ops, explain, and its error handling."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import helper

import graphrt
from graphrt.cli import default_model_path, main
from graphrt.explain import plan_report
from graphrt.plugins import snapshot
from tests._models import init, make_model, mlp, tensor


def _save(model: onnx.ModelProto, tmp_path, name: str = "model.onnx") -> str:
    path = str(tmp_path / name)
    onnx.save(model, path)
    return path


def _mlp_reference(x: np.ndarray, model: onnx.ModelProto) -> np.ndarray:
    w = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    h = x
    for i in range(2):
        h = np.maximum(h @ w[f"w{i}"] + w[f"b{i}"], 0)
    return 0.5 * h @ w["wo"].T + 2.0 * w["bo"]


def _two_input_model() -> onnx.ModelProto:
    """y = (a + b) * a - c, z = relu(b)."""
    nodes = [
        helper.make_node("Add", ["a", "b"], ["s"], name="add"),
        helper.make_node("Mul", ["s", "a"], ["p"], name="mul"),
        helper.make_node("Sub", ["p", "c"], ["y"], name="sub"),
        helper.make_node("Relu", ["b"], ["z"], name="relu"),
    ]
    return make_model(
        nodes,
        [tensor("a", shape=["N", 3]), tensor("b", shape=["N", 3])],
        [tensor("y", shape=["N", 3]), tensor("z", shape=["N", 3])],
        [init("c", np.array([1.0, 2.0, 3.0], np.float32))],
    )


# -- run -----------------------------------------------------------------------------------------


def test_run_random_inputs_from_declared_shapes(tmp_path, capsys):
    model = mlp()
    path = _save(model, tmp_path)
    out = str(tmp_path / "out.npz")
    rc = main(["run", path, "--dim", "N=3", "--repeat", "3", "--seed", "7", "--save", out])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert f"model: {path}" in captured.out
    assert "input  x: float32 [3, 24]" in captured.out
    assert "(declared [N, 24], random, seed 7)" in captured.out
    assert re.search(
        r"output y: float32 \[3, 10\]  min \S+  max \S+  mean \S+  first \[", captured.out
    )
    assert "first run (incl. plan):" in captured.out
    assert "over 3 runs" in captured.out
    assert "creating a session" in captured.err  # progress goes to stderr
    # the random input is the documented one: normal float32 from default_rng(seed)
    x = np.random.default_rng(7).standard_normal((3, 24)).astype(np.float32)
    with np.load(out) as saved:
        np.testing.assert_allclose(saved["y"], _mlp_reference(x, model), rtol=1e-5, atol=1e-5)

    # deterministic: the same command prints the same outputs
    assert main(["run", path, "--dim", "N=3", "--repeat", "0", "--seed", "7", "-q"]) == 0
    again = capsys.readouterr()
    line = next(x for x in captured.out.splitlines() if x.startswith("output y"))
    assert line in again.out
    assert again.err == ""  # -q: no progress


def test_run_npy_and_npz_inputs_match_numpy(tmp_path, capsys):
    path = _save(_two_input_model(), tmp_path)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal((4, 3)).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    out = str(tmp_path / "out.npz")
    args = ["run", path, "--input", f"a={tmp_path / 'a.npy'}", "--input", f"b={tmp_path / 'b.npy'}"]
    rc = main([*args, "--repeat", "1", "--save", out, "-q"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "input  a: float32 [4, 3]" in captured.out and "(declared [N, 3], given)" in captured.out
    y = (a + b) * a - np.array([1, 2, 3], np.float32)
    with np.load(out) as saved:
        np.testing.assert_allclose(saved["y"], y, rtol=1e-6)
        np.testing.assert_array_equal(saved["z"], np.maximum(b, 0))
    assert f"min {float(y.min()):.6g}" in captured.out
    assert f"max {float(np.maximum(b, 0).max()):.6g}" in captured.out

    # the same inputs from one .npz archive, a overridden by --input
    np.savez(tmp_path / "in.npz", a=np.zeros_like(a), b=b)
    rc = main(
        ["run", path, "--inputs", str(tmp_path / "in.npz"), "--input", f"a={tmp_path / 'a.npy'}"]
        + ["--repeat", "0", "--save", out, "-q"]
    )
    assert rc == 0, capsys.readouterr().err
    with np.load(out) as saved:
        np.testing.assert_allclose(saved["y"], y, rtol=1e-6)


def test_run_default_model_when_its_operators_exist(capsys):
    model = onnx.load(default_model_path())
    table = snapshot()
    missing = sorted(
        {n.op_type for n in model.graph.node if table.lookup("", n.op_type, 9) is None}
    )
    if missing:
        pytest.skip(f"light_resnet50 needs operators not written yet: {', '.join(missing)}")
    assert main(["run", "--repeat", "1", "-q"]) == 0
    out = capsys.readouterr().out
    assert "light_resnet50 (default model" in out
    assert "float32 [1, 1000]" in out


# -- check ---------------------------------------------------------------------------------------


def test_check_lists_every_missing_operator(tmp_path, capsys):
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("FrobnicateXYZ", ["r"], ["f"]),
        helper.make_node("WibbleQQ", ["f"], ["y"]),
    ]
    path = _save(make_model(nodes, [tensor("x", shape=[2])], [tensor("y", shape=[2])]), tmp_path)
    rc = main(["check", path, "-q"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "missing operators (2):" in out
    assert "  FrobnicateXYZ (opset 17)" in out
    assert "  WibbleQQ (opset 17)" in out
    assert re.search(r"Relu \(opset 17\)\s+1\s+ops-basic", out)
    assert "fast mode: not runnable" in out


def test_check_runnable_model_exits_0(tmp_path, capsys):
    path = _save(mlp(), tmp_path)
    rc = main(["check", path, "--dim", "N=2", "-q"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "fast mode: runnable" in out
    assert "plan for the declared shapes:" in out
    assert "exact mode:" in out


def test_check_reports_exact_mode_unavailable(tmp_path, capsys):
    pytest.importorskip("graphrt_ops_example")
    node = helper.make_node("Scale", ["x"], ["y"], domain="com.example", factor=2.0)
    model = make_model(
        [node], [tensor("x", shape=[3])], [tensor("y", shape=[3])], domains=["com.example"]
    )
    rc = main(["check", _save(model, tmp_path), "-q"])
    out = capsys.readouterr().out
    assert rc == 0  # runnable in fast mode
    assert "exact mode: unavailable for 1 operator(s):" in out
    assert "  com.example.Scale (opset 1)" in out


# -- ops -----------------------------------------------------------------------------------------


def test_ops_lists_operators_with_plugin_and_flags(capsys):
    assert main(["ops", "-q"]) == 0
    out = capsys.readouterr().out
    add = [line.split() for line in out.splitlines() if line.split()[:1] == ["Add"]]
    assert add, out
    assert add[0][1:4] == ["ai.onnx", "ops-basic", "1+"]
    assert "in-place(input" in " ".join(add[0])
    assert re.search(r"^Reshape\s+ai\.onnx\s+ops-basic.*\bview\b", out, re.M)
    assert "operator definition(s) from plugins:" in out

    assert main(["ops", "Add", "--plugins", "ops-basic", "-q"]) == 0
    filtered = capsys.readouterr().out
    assert "Add" in filtered and "Relu" not in filtered and "ops-example" not in filtered


def test_ops_reports_ties(capsys):
    class Dup:
        @graphrt.hookimpl
        def graphrt_operators(self):
            from graphrt_ops_basic.binary import Add

            return [graphrt.OpDef("Add", Add)]

    graphrt.register_plugin(Dup(), "dup-test")
    try:
        assert main(["ops", "Add", "-q"]) == 0
    finally:
        graphrt.unregister_plugin("dup-test")
    out = capsys.readouterr().out
    assert "ties (1)" in out
    tie = next(line for line in out.splitlines() if line.startswith("  ai.onnx::Add:"))
    assert "'ops-basic' (1+)" in tie and "'dup-test' (1+)" in tie and "priority 0" in tie


# -- explain -------------------------------------------------------------------------------------


def test_explain_prints_schedule_offsets_and_slab(tmp_path, capsys):
    model = mlp()
    path = _save(model, tmp_path)
    # unfused, so that the MLP keeps its Add/Relu chain (fusion: tests/test_fusion.py)
    assert main(["explain", path, "--dim", "N=5", "-q", "--optimization-level", "none"]) == 0
    out = capsys.readouterr().out

    sess = graphrt.Session(path, optimization_level="none")
    plan = sess.plan_for([np.zeros((5, 24), np.float32)])
    mem = plan.memory
    saving = 100 * (1 - mem.size / mem.total_bytes)
    assert f"slab: {mem.size} bytes" in out
    assert f"for {mem.total_bytes} bytes" in out and f"saving {saving:.1f}%" in out
    assert "plan for x: float32[5, 24]" in out
    names = plan.graph.names
    for v, off in mem.offsets.items():
        if v < len(names):
            assert re.search(rf"^  {off}\s+\d+\s+{re.escape(names[v])}\s", out, re.M), names[v]
    for i, step in enumerate(plan.steps):
        info = step.node.info
        op = f"{info.domain}.{info.op_type}" if info.domain else info.op_type
        assert re.search(rf"^  {i}\s+\S+\s+{re.escape(op)}\s+{step.kind}\s", out, re.M)
    for _out, src in mem.in_place:
        assert f"in place of {names[src]}" in out
    assert mem.in_place, "the MLP's Add/Relu chain should reuse memory in place"


def test_explain_views_folded_constants_and_dynamic(tmp_path, capsys):
    nodes = [
        helper.make_node("Add", ["shape_a", "shape_b"], ["shape"], name="shape_sum"),
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "shape"], ["y"], name="flat"),
    ]
    model = make_model(
        nodes,
        [tensor("x", shape=[2, 3])],
        [tensor("y", shape=[6])],
        [init("shape_a", np.array([5], np.int64)), init("shape_b", np.array([1], np.int64))],
    )
    path = _save(model, tmp_path)
    assert main(["explain", path, "--optimization-level", "none", "-q"]) == 0
    out = capsys.readouterr().out
    assert "constants folded at plan time (1)" in out
    assert "  shape: int64[1]" in out
    assert re.search(r"flat\s+Reshape\s+view\s+-\s+y: float32\[6\] @\d+\s+view of r", out)
    assert "dynamic nodes (0)" in out

    report = plan_report(
        graphrt.Session(path, optimization_level="none").plan_for([np.zeros((2, 3), np.float32)])
    )
    assert [s["kind"] for s in report["steps"]] == ["static", "view"]
    assert [s["runs"] for s in report["steps"]] == ["numpy", "-"]
    assert report["constants_folded"][0]["name"] == "shape"
    views = [v for v in report["slab"]["values"] if v["role"] == "view"]
    assert views and views[0]["view_of"] == "r"


# -- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "/no/such/model.onnx"], "no such model file"),
        (["explain", "{model}", "--input", "a=/no/such.npy"], "no such file"),
        (["run", "{model}", "--input", "a={ints}", "--input", "b={ints}"], "[invalid_input]"),
        (["run", "{model}", "--dim", "N"], "--dim expects SYMBOL=SIZE"),
        (["run", "{model}", "--input", "q={ints}"], "not an input of the model"),
        (["run", "{bad}"], "[unsupported_operator]"),
        (["ops", "--plugins", "no-such-plugin"], "no-such-plugin"),
    ],
)
def test_user_errors_exit_2_with_a_clean_message(tmp_path, capsys, args, message):
    model = _save(_two_input_model(), tmp_path)
    bad_nodes = [helper.make_node("NoSuchOp", ["x"], ["y"])]
    bad = _save(
        make_model(bad_nodes, [tensor("x", shape=[1])], [tensor("y", shape=[1])]), tmp_path, "b"
    )
    ints = str(tmp_path / "ints.npy")
    np.save(ints, np.ones((2, 3), np.int64))
    argv = [a.format(model=model, bad=bad, ints=ints) for a in args]
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("graphrt: error: ")
    assert message in last


def test_usage_errors_exit_2(capsys):
    assert main(["frobnicate"]) == 2
    assert main([]) == 2
    assert "usage: graphrt" in capsys.readouterr().err
    assert main(["--help"]) == 0


def test_profile_prints_operator_times_and_writes_a_trace(tmp_path, capsys):
    import json

    import onnx

    from graphrt.cli import main
    from tests._models import mlp

    path = tmp_path / "mlp.onnx"
    onnx.save(mlp(), path)
    trace = tmp_path / "trace.json"
    assert (
        main(["profile", str(path), "--dim", "N=3", "--repeat", "4", "--trace", str(trace), "-q"])
        == 0
    )
    out = capsys.readouterr().out
    assert "4 run(s) profiled" in out and "MatMul" in out and "Gemm" in out
    events = json.loads(trace.read_text())["traceEvents"]
    assert sum(e["name"] == "run" for e in events) == 4


def _conv_bn_relu(tmp_path) -> str:
    rng = np.random.default_rng(0)
    inits = [init("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32))]
    inits += [init(n, np.full(4, v, np.float32)) for n, v in zip("sbmv", (1, 0, 0, 1))]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"], name="bn"),
        helper.make_node("Relu", ["n"], ["y"], name="relu"),
    ]
    model = make_model(nodes, [tensor("x", shape=[1, 3, 8, 8])], [tensor("y")], inits)
    return _save(model, tmp_path)


def test_explain_and_check_say_which_steps_run_natively_per_mode(tmp_path, capsys):
    """Exact mode on a native path: every step native (the scalar path's exact Conv,
    BatchNormalization and Relu); fast mode on that path: its numpy kernels (the scalar path
    runs exact kernels only); on the numpy path every step is numpy; ``check`` gives the count
    for each mode."""
    pytest.importorskip("graphrt_ops_simd", reason="graphrt-ops-simd is not installed")
    path = _conv_bn_relu(tmp_path)
    args = ["explain", path, "--optimization-level", "none", "-q"]
    assert main([*args, "--mode", "exact", "--kernel-path", "scalar"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^  0\s+conv\s+Conv\s+static\s+native\s", out, re.M), out
    assert re.search(r"^  1\s+bn\s+BatchNormalization\s+static\s+native\s", out, re.M), out
    assert "3 of 3 steps run natively (kernel path scalar); numpy: none" in out
    assert main([*args, "--mode", "fast", "--kernel-path", "scalar"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^  1\s+bn\s+BatchNormalization\s+static\s+numpy\s", out, re.M), out
    assert "BatchNormalization x1" in out and "Relu x1" in out
    assert main([*args, "--mode", "exact", "--kernel-path", "numpy"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^  0\s+conv\s+Conv\s+static\s+numpy\s", out, re.M), out
    assert "0 of 3 steps run natively (kernel path numpy); numpy: Conv x1" in out

    assert main(["check", path, "--kernel-path", "scalar", "-q"]) == 0
    out = capsys.readouterr().out
    fast, exact = out.split("exact mode: available")
    assert "steps run natively (kernel path scalar)" in fast
    assert "3 of 3 steps run natively (kernel path scalar)" in exact
