"""One memory budget per session (issue 13): ``max_memory`` bounds plans, constant folding,
dynamic values, Loop/Scan accumulation and native scratch alike.

Every refusal is ``SessionError(kind="resource_exhausted")`` naming what asked, how much and the
budget, and leaves the session usable.  Cases whose old behaviour was to allocate gigabytes run
in a child process whose address space is capped a little above what it holds after start-up,
so a regression fails there instead of taking the machine's memory.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
import tracemalloc

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphrt
from graphrt.session import SessionOptions

T = helper.make_tensor_value_info
MiB = 1 << 20
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Run in a child: the address space is capped at what the process maps after importing graphrt
# plus MARGIN bytes; prints what the code prints.
CHILD = """
import resource, sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper
import graphrt
T = helper.make_tensor_value_info

def mapped():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))

def rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024

limit = mapped() + {margin}
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
"""


def run_child(code: str, margin: int = 3 << 29) -> str:
    if not sys.platform.startswith("linux"):
        pytest.skip("the child caps its address space through /proc and RLIMIT_AS (Linux)")
    source = CHILD.format(margin=margin) + textwrap.dedent(code)
    proc = subprocess.run(
        [sys.executable, "-c", source], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert proc.returncode == 0, f"child ended with {proc.returncode}: {proc.stderr[-3000:]}"
    return proc.stdout


def model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def refused(call, *words: str) -> graphrt.SessionError:
    with pytest.raises(graphrt.SessionError) as info:
        call()
    assert info.value.kind == "resource_exhausted", info.value
    for w in ("max_memory", *words):
        assert w in str(info.value), (w, str(info.value))
    return info.value


def constant_of_shape(n: int, runtime: bool = False) -> onnx.ModelProto:
    """y = ConstantOfShape([n]) of float32 (node 'cos'); ``runtime``: the shape is an input."""
    node = helper.make_node("ConstantOfShape", ["s"], ["y"], name="cos")
    if runtime:
        return model([node], [T("s", TensorProto.INT64, [1])], [T("y", TensorProto.FLOAT, None)])
    shape = numpy_helper.from_array(np.array([n], np.int64), "s")
    return model([node], [], [T("y", TensorProto.FLOAT, None)], [shape])


# -- the option ------------------------------------------------------------------------------------
def test_default_budget_is_the_plan_rule_of_2_gib():
    assert SessionOptions().max_memory == 2**31
    assert graphrt.Session(constant_of_shape(4)).options.max_memory == 2**31


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2G", None])
def test_max_memory_must_be_a_positive_integer(bad):
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(constant_of_shape(4), max_memory=bad)
    assert info.value.kind == "unsupported"
    assert "max_memory" in str(info.value)


# -- static plans ----------------------------------------------------------------------------------
def relu(n: int) -> onnx.ModelProto:
    return model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [T("x", TensorProto.FLOAT, [n])],
        [T("y", TensorProto.FLOAT, [n])],
    )


def test_static_plan_over_a_small_budget_is_refused_and_a_larger_one_runs():
    x = np.linspace(-1, 1, 1 << 18, dtype=np.float32)  # 1 MiB, the output written in place
    small = graphrt.Session(relu(x.size), max_memory=MiB // 2)
    err = refused(lambda: small.run(None, {"x": x}), "slab", "1.0 MiB")
    assert err.node is None  # the plan's, not a node's
    (y,) = graphrt.Session(relu(x.size), max_memory=4 * MiB).run(None, {"x": x})
    np.testing.assert_array_equal(y, np.maximum(x, 0))


def test_plan_over_2_gib_is_refused_without_allocating_anything():
    """A plan made from types alone: 4 GiB of input staging (Relu's output written over it)
    is never allocated."""
    session = graphrt.Session(relu(1 << 30))
    refused(lambda: session.plan_for([(np.float32, (1 << 30,))]), "slab", "4.0 GiB")


# -- constant folding ------------------------------------------------------------------------------
def test_constant_of_shape_of_2_8_gb_is_neither_folded_nor_evaluated_by_the_plan():
    """Session() used to evaluate it (2.8 GB, zero-filled) in the folding pass, and a plan
    without the pass evaluated it again before finding it too large; now both decide from the
    inferred type and the plan refuses the slab."""
    out = run_child(
        """
        shape = numpy_helper.from_array(np.array([700_000_000], np.int64), "s")
        node = helper.make_node("ConstantOfShape", ["s"], ["y"], name="cos")
        graph = helper.make_graph([node], "g", [], [T("y", TensorProto.FLOAT, None)], [shape])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        for level in ("all", "none"):
            before = rss_mib()
            session = graphrt.Session(model, optimization_level=level)
            kept = [n.info.op_type for n in session.graph.nodes]
            try:
                session.run(None, {})
                print(level, "RAN")
            except graphrt.SessionError as e:
                print(level, e.kind, kept, rss_mib() - before)
        """,
        margin=1 << 30,  # less than the value: computing it would fail with MemoryError
    )
    for level in ("all", "none"):
        line = next(x for x in out.splitlines() if x.startswith(level))
        kind, rest = line.split(" ", 2)[1:]
        assert kind == "resource_exhausted", line
        assert "'ConstantOfShape'" in rest, line  # still a node: not folded
        assert int(rest.rsplit(" ", 1)[1]) < 256, line  # MiB of peak memory gained


def test_folding_keeps_what_fits_the_budget_and_leaves_the_rest_to_the_plan():
    small = graphrt.Session(constant_of_shape(1 << 18), max_memory=4 * MiB)  # 1 MiB: folded
    assert small.graph.nodes == []
    (y,) = small.run(None, {})
    np.testing.assert_array_equal(y, np.zeros(1 << 18, np.float32))
    large = graphrt.Session(constant_of_shape(1 << 21), max_memory=4 * MiB)  # 8 MiB: not
    assert [n.info.op_type for n in large.graph.nodes] == ["ConstantOfShape"]
    refused(lambda: large.run(None, {}), "slab")
    roomy = graphrt.Session(constant_of_shape(1 << 21), max_memory=64 * MiB)
    assert roomy.graph.nodes == []


# -- dynamic values --------------------------------------------------------------------------------
def test_dynamic_value_over_the_budget_names_node_request_and_budget():
    session = graphrt.Session(constant_of_shape(0, runtime=True), max_memory=64 * MiB)
    err = refused(
        lambda: session.run(None, {"s": np.array([100_000_000])}),
        "ConstantOfShape node 'cos'",
        "400000000 bytes",
        "64.0 MiB",
    )
    assert err.node == "cos"
    (y,) = session.run(None, {"s": np.array([1_000_000])})  # 4 MB: within the budget
    np.testing.assert_array_equal(y, np.zeros(1_000_000, np.float32))


def test_data_dependent_output_over_the_budget_is_refused():
    """NonZero allocates its output through the run state: 8 MiB of indices over 6 MiB."""
    m = model(
        [helper.make_node("NonZero", ["x"], ["y"], name="nz")],
        [T("x", TensorProto.FLOAT, [1 << 20])],
        [T("y", TensorProto.INT64, None)],
    )
    session = graphrt.Session(m, max_memory=6 * MiB)
    x = np.ones(1 << 20, np.float32)
    err = refused(lambda: session.run(None, {"x": x}), "NonZero node 'nz'")
    assert err.node == "nz"
    x[:] = 0
    x[[3, 7]] = 1
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], [[3, 7]])


def test_a_refused_request_of_10_12_elements_leaves_the_session_usable():
    """The arena used to keep the failed size and fail every later run at its reset."""
    session = graphrt.Session(constant_of_shape(0, runtime=True))
    for _ in range(2):
        refused(lambda: session.run(None, {"s": np.array([10**12])}), "4000000000000 bytes")
        for n in (3, 1000):
            (y,) = session.run(None, {"s": np.array([n])})
            np.testing.assert_array_equal(y, np.zeros(n, np.float32))


def test_memory_error_inside_a_run_is_resource_exhausted_and_does_not_poison():
    """With a budget above the machine, numpy's MemoryError is the limit: reported as
    resource_exhausted, and the next runs succeed."""
    out = run_child(
        """
        node = helper.make_node("ConstantOfShape", ["s"], ["y"], name="cos")
        graph = helper.make_graph(
            [node], "g", [T("s", TensorProto.INT64, [1])], [T("y", TensorProto.FLOAT, None)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        session = graphrt.Session(model, max_memory=2**62)
        for n in (10**12, 3, 10**12, 5):
            try:
                print(n, session.run(None, {"s": np.array([n])})[0].tolist())
            except graphrt.SessionError as e:
                print(n, e.kind, e.node)
        """
    )
    assert out.split("\n")[:4] == [
        "1000000000000 resource_exhausted cos",
        "3 [0.0, 0.0, 0.0]",
        "1000000000000 resource_exhausted cos",
        "5 [0.0, 0.0, 0.0, 0.0, 0.0]",
    ], out


# -- Loop, Scan and bodies -------------------------------------------------------------------------
def endless_loop(scan: bool = True, grow: bool = False) -> onnx.ModelProto:
    """Loop of 2**62 iterations while the input ``cond`` holds; carried x = x + 1 (or, with
    ``grow``, x concatenated with ``big``); with ``scan``, every iteration scans out ``big``."""
    step = (
        helper.make_node("Concat", ["x_in", "big"], ["x_out"], axis=0)
        if grow
        else helper.make_node("Add", ["x_in", "one"], ["x_out"])
    )
    nodes = [helper.make_node("Identity", ["c_in"], ["c_out"]), step]
    outs = [T("c_out", TensorProto.BOOL, []), T("x_out", TensorProto.FLOAT, None)]
    if scan:
        nodes.append(helper.make_node("Identity", ["big"], ["slice"]))
        outs.append(T("slice", TensorProto.FLOAT, None))
    body = helper.make_graph(
        nodes,
        "body",
        [
            T("i", TensorProto.INT64, []),
            T("c_in", TensorProto.BOOL, []),
            T("x_in", TensorProto.FLOAT, None),
        ],
        outs,
        [numpy_helper.from_array(np.ones(1, np.float32), "one")],
    )
    loop = helper.make_node(
        "Loop", ["M", "cond", "x"], ["y"] + (["s"] if scan else []), body=body, name="loop"
    )
    return model(
        [loop],
        [
            T("x", TensorProto.FLOAT, None),
            T("cond", TensorProto.BOOL, []),
            T("big", TensorProto.FLOAT, None),
        ],
        [T("y", TensorProto.FLOAT, None)] + ([T("s", TensorProto.FLOAT, None)] if scan else []),
        [numpy_helper.from_array(np.array(2**62, np.int64), "M")],
    )


def loop_feed(cond: bool, big: int = MiB) -> dict[str, np.ndarray]:
    return {
        "x": np.zeros(1, np.float32),
        "cond": np.array(cond),
        "big": np.ones(big // 4, np.float32),
    }


def test_loop_of_2_62_iterations_with_a_scan_output_ends_in_resource_exhausted():
    """The default budget: the scan output grows 4 MiB an iteration up to 2 GiB, where the run
    is refused (the address space is capped at 3.5 GiB above start-up)."""
    out = run_child(
        """
        sys.path.insert(0, ".")  # the repository's root
        from tests.test_memory_budget import endless_loop, loop_feed
        session = graphrt.Session(endless_loop())
        try:
            session.run(None, loop_feed(True, 4 << 20))
            print("RAN")
        except graphrt.SessionError as e:
            print(e.kind, e.node)
        y, s = session.run(None, loop_feed(False, 4 << 20))
        print(y.tolist(), s.shape)
        """,
        margin=7 << 29,
    )
    assert out.splitlines() == ["resource_exhausted loop", "[0.0] (0,)"], out


def test_loop_scan_output_counts_against_a_small_budget():
    session = graphrt.Session(endless_loop(), max_memory=32 * MiB)
    err = refused(lambda: session.run(None, loop_feed(True)), "Loop node 'loop'")
    assert err.node == "loop"
    y, s = session.run(None, loop_feed(False))
    assert y.tolist() == [0.0] and s.shape == (0,)


def test_loop_carried_value_that_grows_is_refused():
    session = graphrt.Session(endless_loop(scan=False, grow=True), max_memory=32 * MiB)
    refused(lambda: session.run(None, loop_feed(True)), "Loop node 'loop'")
    (y,) = session.run(None, loop_feed(False))
    assert y.tolist() == [0.0]


def scan_model(length: int) -> onnx.ModelProto:
    """Scan over ``length`` scalars; each step scans out the outer value ``big``."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["acc_in", "t"], ["acc_out"]),
            helper.make_node("Identity", ["big"], ["slice"]),
        ],
        "body",
        [T("acc_in", TensorProto.FLOAT, []), T("t", TensorProto.FLOAT, [])],
        [T("acc_out", TensorProto.FLOAT, []), T("slice", TensorProto.FLOAT, None)],
    )
    scan = helper.make_node(
        "Scan", ["acc", "xs"], ["total", "s"], body=body, num_scan_inputs=1, name="scan"
    )
    return model(
        [scan],
        [
            T("acc", TensorProto.FLOAT, []),
            T("xs", TensorProto.FLOAT, [length]),
            T("big", TensorProto.FLOAT, None),
        ],
        [T("total", TensorProto.FLOAT, []), T("s", TensorProto.FLOAT, None)],
    )


def test_scan_outputs_count_against_the_budget():
    session = graphrt.Session(scan_model(1000), max_memory=32 * MiB)
    feed = {
        "acc": np.array(0, np.float32),
        "xs": np.ones(1000, np.float32),
        "big": np.ones(MiB // 4, np.float32),  # 1000 steps of 1 MiB: 1 GB of scan output
    }
    refused(lambda: session.run(None, feed), "Scan node 'scan'")
    feed["big"] = np.arange(4, dtype=np.float32)  # 16 bytes a step: runs
    total, s = session.run(None, feed)
    assert total == 1000 and s.shape == (1000, 4)
    np.testing.assert_array_equal(s[-1], feed["big"])


def test_a_body_counts_from_what_its_caller_holds():
    """A body's 40 MiB fits 48 MiB alone, but not beside the caller's 16 MiB input."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["c_in"], ["c_out"]),
            helper.make_node("ConstantOfShape", ["shape"], ["zeros"], name="cos"),
            helper.make_node("ReduceSum", ["zeros"], ["sum"], keepdims=0),
        ],
        "body",
        [T("i", TensorProto.INT64, []), T("c_in", TensorProto.BOOL, [])],
        [T("c_out", TensorProto.BOOL, []), T("sum", TensorProto.FLOAT, [])],
    )
    nodes = [
        helper.make_node("Loop", ["one", ""], ["sums"], body=body, name="loop"),
        helper.make_node("ReduceMax", ["x"], ["top"], keepdims=0),
    ]
    m = model(
        nodes,
        [T("x", TensorProto.FLOAT, [4 * MiB]), T("shape", TensorProto.INT64, [1])],
        [T("sums", TensorProto.FLOAT, None), T("top", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(np.array(1, np.int64), "one")],
    )
    feed = {"x": np.ones(4 * MiB, np.float32), "shape": np.array([10 * MiB])}
    err = refused(lambda: graphrt.Session(m, max_memory=48 * MiB).run(None, feed), "cos")
    assert "16.0 MiB" in str(err)  # what the caller held
    sums, top = graphrt.Session(m, max_memory=64 * MiB).run(None, feed)
    assert sums.tolist() == [0.0] and top == 1


# -- native scratch --------------------------------------------------------------------------------
def test_native_maxpool_work_buffer_counts_against_the_budget():
    """A 143-byte MaxPool whose pads make the native kernel's per-thread work buffer 144 MiB
    (two planes' padded rows, allocated outside the slab): refused under a 64 MiB budget, run
    under the default."""
    simd = pytest.importorskip("graphrt_ops_simd")
    isa = next((i for i in ("avx512", "avx2") if i in simd._native.available_isas()), None)
    if isa is None:
        pytest.skip("no avx2/avx512 path: MaxPool stays numpy")
    pad = 2**21
    node = helper.make_node(
        "MaxPool", ["x"], ["y"], kernel_shape=[2, 2], pads=[0, pad, 0, pad], strides=[1, pad],
        name="pool",
    )  # fmt: skip
    m = model(
        [node], [T("x", TensorProto.FLOAT, [1, 1, 4, 4])], [T("y", TensorProto.FLOAT, None)],
        opset=13,
    )  # fmt: skip
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    session = graphrt.Session(m, kernel_path=isa, max_memory=64 * MiB, intra_op_threads=1)
    err = refused(lambda: session.run(None, {"x": x}), "native work buffer", "144.0 MiB")
    assert err.node == "pool"
    (y,) = graphrt.Session(m, kernel_path=isa, intra_op_threads=1).run(None, {"x": x})
    (want,) = graphrt.Session(m, kernel_path="numpy").run(None, {"x": x})
    np.testing.assert_array_equal(y, want)


# -- refused before the allocation, not after ------------------------------------------------------
def traced_peak(call) -> tuple[object, int]:
    """``call()``'s result (or the SessionError it raised) and the most bytes traced at once
    while it ran: numpy reports its array buffers to tracemalloc."""
    tracemalloc.start()
    try:
        try:
            result = call()
        except graphrt.SessionError as e:
            result = e
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def doubling_loop() -> onnx.ModelProto:
    """Loop of M iterations whose carried x becomes Concat(x, x): it doubles every iteration."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["c_in"], ["c_out"]),
            helper.make_node("Concat", ["x_in", "x_in"], ["x_out"], axis=0),
        ],
        "body",
        [
            T("i", TensorProto.INT64, []),
            T("c_in", TensorProto.BOOL, []),
            T("x_in", TensorProto.FLOAT, None),
        ],
        [T("c_out", TensorProto.BOOL, []), T("x_out", TensorProto.FLOAT, None)],
    )
    loop = helper.make_node("Loop", ["M", "", "x"], ["y"], body=body, name="loop")
    return model(
        [loop],
        [T("M", TensorProto.INT64, []), T("x", TensorProto.FLOAT, None)],
        [T("y", TensorProto.FLOAT, None)],
    )


@pytest.mark.parametrize("budget_mib", [40, 56])
def test_doubling_loop_is_refused_before_it_holds_more_than_the_budget(budget_mib):
    """The body's slab (input and output: 3x the carried value c) used to be allocated before
    it was checked, its copied-out outputs were counted only after they existed, and every
    iteration's new shape left its idle run state's slab behind: 112 MiB traced under a
    64 MiB budget.  Each of the three alone passes one of these budgets: 40 MiB is between
    c + slab and c + slab + outputs at c = 8 MiB, 56 MiB between the latter and the next
    iteration's c + slab."""
    budget = budget_mib * MiB
    session = graphrt.Session(doubling_loop(), max_memory=budget)
    feed = {"M": np.array(2**62, np.int64), "x": np.ones(1, np.float32)}
    err, peak = traced_peak(lambda: session.run(None, feed))
    assert isinstance(err, graphrt.SessionError), err
    assert err.kind == "resource_exhausted" and err.node == "loop", err
    assert peak <= budget, f"{peak / MiB:.1f} MiB traced under a {budget // MiB} MiB budget"
    (y,) = session.run(None, {"M": np.array(3, np.int64), "x": np.arange(2, dtype=np.float32)})
    np.testing.assert_array_equal(y, np.tile(np.arange(2, dtype=np.float32), 8))


def test_loop_body_slab_is_refused_before_it_is_allocated():
    """A body of static shapes (run on one kept run state) whose 32 MiB slab does not fit a
    40 MiB budget beside the caller's 16 MiB: refused before the slab exists (48 MiB traced
    when it was checked once allocated)."""
    n = 4 * MiB  # float32: 16 MiB
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["c_in"], ["c_out"]),
            helper.make_node("Mul", ["x_in", "x_in"], ["sq"]),
            helper.make_node("Sub", ["sq", "x_in"], ["x_out"]),
        ],
        "body",
        [
            T("i", TensorProto.INT64, []),
            T("c_in", TensorProto.BOOL, []),
            T("x_in", TensorProto.FLOAT, [n]),
        ],
        [T("c_out", TensorProto.BOOL, []), T("x_out", TensorProto.FLOAT, [n])],
    )
    loop = helper.make_node("Loop", ["M", "", "x"], ["y"], body=body, name="loop")
    m = model(
        [loop],
        [T("M", TensorProto.INT64, []), T("x", TensorProto.FLOAT, [n])],
        [T("y", TensorProto.FLOAT, [n])],
    )
    budget = 40 * MiB
    session = graphrt.Session(m, max_memory=budget)
    feed = {"M": np.array(3, np.int64), "x": np.ones(n, np.float32)}
    err, peak = traced_peak(lambda: session.run(None, feed))
    assert isinstance(err, graphrt.SessionError), err
    assert err.kind == "resource_exhausted" and err.node == "loop", err
    assert "the body's plan" in str(err)
    assert peak <= budget, f"{peak / MiB:.1f} MiB traced under a {budget // MiB} MiB budget"
    (y,) = graphrt.Session(m, max_memory=64 * MiB).run(None, feed)
    np.testing.assert_array_equal(y, np.zeros(n, np.float32))  # 1*1 - 1, then 0*0 - 0


def range_model(elem: int) -> onnx.ModelProto:
    """Range of start, limit and delta given at run time (a dynamic step)."""
    return model(
        [helper.make_node("Range", ["a", "b", "c"], ["y"], name="range")],
        [T(k, elem, []) for k in "abc"],
        [T("y", elem, None)],
        opset=11,
    )


def test_range_holds_its_output_and_a_chunk_not_an_int64_copy():
    """A 64 MiB float32 Range used to count in an int64 array (128 MiB) and convert it (another
    64 MiB) before writing the output; now the output, the session's copy of it and one
    chunk of work.  The values are start + i * delta in float32, chunks notwithstanding."""
    n = 16 << 20
    feed = {k: np.array(v, np.float32) for k, v in zip("abc", (-3.0, -3.0 + n * 0.25, 0.25))}
    session = graphrt.Session(range_model(TensorProto.FLOAT))
    (y,), peak = traced_peak(lambda: session.run(None, feed))
    assert y.shape == (n,)
    assert peak < 2 * y.nbytes + 4 * MiB, f"{peak / MiB:.1f} MiB traced for 64 MiB"
    i = np.arange(n, dtype=np.int64).astype(np.float32)
    np.testing.assert_array_equal(y, i * np.float32(0.25) + np.float32(-3.0))


@pytest.mark.parametrize(
    ("elem", "dtype", "start", "limit", "delta"),
    [
        (TensorProto.FLOAT16, np.float16, 1.5, 600.0, 2.0**-9),  # float32, rounded once to T
        (TensorProto.INT32, np.int32, -(2**31) + 10, -(2**31) + 10 + 1000 * 300_005, 1000),
    ],
)
def test_range_values_across_chunks_follow_the_formula(elem, dtype, start, limit, delta):
    """start + i * delta over several of the kernel's chunks (it computes 2**16 at a time):
    float16 computed in float32 and rounded once; int32's i * delta passes 2**31 and wraps,
    and start brings it back (the oracle computes in int64, where nothing wraps)."""
    feed = {"a": np.array(start, dtype), "b": np.array(limit, dtype), "c": np.array(delta, dtype)}
    (y,) = graphrt.Session(range_model(elem)).run(None, feed)
    n = math.ceil((float(limit) - float(start)) / float(delta))
    assert y.shape == (n,) and n > 4 << 16
    i = np.arange(n, dtype=np.int64)
    if dtype == np.float16:
        want = (i.astype(np.float32) * np.float32(delta) + np.float32(start)).astype(dtype)
    else:
        want = (i * delta + start).astype(dtype)
    np.testing.assert_array_equal(y, want)


def test_a_slab_over_the_budget_names_the_node_of_its_largest_value():
    """Huge pads make a Conv's output the plan's giant: the plan's refusal names that node."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="small"),
        helper.make_node("Conv", ["r", "w"], ["y"], name="padded", group=4, pads=[2**40, 0, 0, 0]),
    ]
    w = onnx.numpy_helper.from_array(np.ones((4, 1, 3, 3), np.float32), "w")
    m = model(
        nodes,
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [w],
    )
    sess = graphrt.Session(m)
    err = refused(lambda: sess.run(None, {"x": np.ones((1, 4, 8, 8), np.float32)}), "slab")
    assert "the largest made by Conv node 'padded'" in str(err), str(err)
