"""graphrt against onnxruntime and onnx's ReferenceEvaluator, in one process and one run.

    python bench/bench_models.py                     # everything
    python bench/bench_models.py --models add,mlp    # name filter (substrings, comma-separated)
    python bench/bench_models.py --repeat 50 --no-reference

Models: the nine light_* models shipped in onnx/backend/test/data/light, a chain of 100 Adds
(per-node overhead), an MLP, and "exported-style" models built here with onnx.helper.  A built
model is made only from operators graphrt has at run time; a model graphrt cannot load is
skipped with the reason.  Absolute times depend on the machine: the ratios are the point.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import graphrt
from graphrt.cli_inputs import random_array
from graphrt.errors import SessionError
from graphrt.plugins import snapshot

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
OPSET = 17


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def rss_bytes() -> int:
    """Current resident set size (Linux /proc), else the peak from getrusage."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# -- models --------------------------------------------------------------------------------------


def _w(rng: np.random.Generator, *shape: int) -> np.ndarray:
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
    return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)


def _model(nodes: list, inputs: list, outputs: list, inits: dict[str, np.ndarray]) -> Any:
    graph = helper.make_graph(
        nodes, "bench", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8  # readable by older onnxruntime builds too
    return model


def _vi(name: str, shape: list) -> Any:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def add_chain(n: int = 100, width: int = 64) -> Any:
    """100 small Adds: the cost of one node, not of its arithmetic."""
    nodes = [
        helper.make_node(
            "Add", ["x" if i == 0 else f"v{i - 1}", "c"], [f"v{i}" if i < n - 1 else "y"]
        )
        for i in range(n)
    ]
    c = np.full((1, width), 0.01, np.float32)
    return _model(nodes, [_vi("x", [1, width])], [_vi("y", [1, width])], {"c": c})


def mlp(batch: int = 16, widths: tuple[int, ...] = (256, 512, 512, 256), n_out: int = 10) -> Any:
    """MatMul + Add + Relu layers and a Gemm head."""
    rng = np.random.default_rng(1)
    nodes, inits, prev = [], {}, "x"
    for i in range(len(widths) - 1):
        inits[f"w{i}"] = _w(rng, widths[i], widths[i + 1])
        inits[f"b{i}"] = _w(rng, widths[i + 1])
        nodes += [
            helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]),
            helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
            helper.make_node("Relu", [f"a{i}"], [f"r{i}"]),
        ]
        prev = f"r{i}"
    inits["wo"], inits["bo"] = _w(rng, n_out, widths[-1]), _w(rng, n_out)
    nodes.append(helper.make_node("Gemm", [prev, "wo", "bo"], ["y"], transB=1))
    return _model(nodes, [_vi("x", [batch, widths[0]])], [_vi("y", [batch, n_out])], inits)


def mlp_tiny(batch: int = 1, widths: tuple[int, ...] = (64, 128, 64), n_out: int = 10) -> Any:
    """Gemm + Relu layers at batch 1: a model whose run is almost all per-run fixed cost."""
    rng = np.random.default_rng(5)
    nodes, inits, prev = [], {}, "x"
    dims = (*widths, n_out)
    for i in range(len(dims) - 1):
        inits[f"w{i}"] = _w(rng, dims[i + 1], dims[i])
        inits[f"b{i}"] = _w(rng, dims[i + 1])
        last = i == len(dims) - 2
        nodes.append(
            helper.make_node("Gemm", [prev, f"w{i}", f"b{i}"], ["y" if last else f"g{i}"], transB=1)
        )
        if not last:
            nodes.append(helper.make_node("Relu", [f"g{i}"], [f"r{i}"]))
            prev = f"r{i}"
    return _model(nodes, [_vi("x", [batch, widths[0]])], [_vi("y", [batch, n_out])], inits)


def _flatten_head(src: str, features: int, n_out: int, rng: Any, inits: dict) -> list:
    """What exporters emit for ``x.view(x.size(0), -1)`` followed by a Linear layer."""
    inits["axis0"] = np.array(0, np.int64)
    inits["minus1"] = np.array([-1], np.int64)
    inits["fc_w"], inits["fc_b"] = _w(rng, n_out, features), _w(rng, n_out)
    return [
        helper.make_node("Shape", [src], ["shp"]),
        helper.make_node("Gather", ["shp", "axis0"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "unsq_axes"], ["batch1"]),
        helper.make_node("Concat", ["batch1", "minus1"], ["new_shape"], axis=0),
        helper.make_node("Reshape", [src, "new_shape"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["y"], transB=1),
    ]


def flatten_mlp(batch: int = 8) -> Any:
    """An exported-style MLP on a [N, 16, 8, 8] input: Shape->Gather->...->Reshape->Gemm."""
    rng = np.random.default_rng(2)
    inits: dict[str, np.ndarray] = {"unsq_axes": np.array([0], np.int64)}
    nodes = [helper.make_node("Relu", ["x"], ["r"])]
    nodes += _flatten_head("r", 16 * 8 * 8, 10, rng, inits)
    return _model(nodes, [_vi("x", [batch, 16, 8, 8])], [_vi("y", [batch, 10])], inits)


def small_cnn(batch: int = 1) -> Any:
    """Conv/Relu/MaxPool twice, then the exported flatten head."""
    rng = np.random.default_rng(3)
    inits: dict[str, np.ndarray] = {"unsq_axes": np.array([0], np.int64)}
    inits.update(c1_w=_w(rng, 16, 3, 3, 3), c1_b=_w(rng, 16))
    inits.update(c2_w=_w(rng, 32, 16, 3, 3), c2_b=_w(rng, 32))
    nodes = [
        helper.make_node("Conv", ["x", "c1_w", "c1_b"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "c2_w", "c2_b"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
    ]
    nodes += _flatten_head("p2", 32 * 8 * 8, 10, rng, inits)
    return _model(nodes, [_vi("x", [batch, 3, 32, 32])], [_vi("y", [batch, 10])], inits)


def transformer_block(seq: int = 64, dim: int = 128, heads: int = 4) -> Any:
    """Self-attention and a feed-forward layer, with residuals (MatMul/Add/Softmax/Transpose)."""
    rng = np.random.default_rng(4)
    dh = dim // heads
    inits = {
        "heads_shape": np.array([1, seq, heads, dh], np.int64),
        "model_shape": np.array([1, seq, dim], np.int64),
        "scale": np.array(1 / np.sqrt(dh), np.float32),
    }
    nodes = []
    for p in "qkvo":
        inits[f"w{p}"], inits[f"b{p}"] = _w(rng, dim, dim), _w(rng, dim)
    for p in "qkv":
        nodes += [
            helper.make_node("MatMul", ["x", f"w{p}"], [f"{p}0"]),
            helper.make_node("Add", [f"{p}0", f"b{p}"], [f"{p}1"]),
            helper.make_node("Reshape", [f"{p}1", "heads_shape"], [f"{p}2"]),
        ]
    nodes += [
        helper.make_node("Transpose", ["q2"], ["q"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k2"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["v2"], ["v"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["q", "kt"], ["scores0"]),
        helper.make_node("Mul", ["scores0", "scale"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["attn"], axis=-1),
        helper.make_node("MatMul", ["attn", "v"], ["ctx0"]),
        helper.make_node("Transpose", ["ctx0"], ["ctx1"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ctx1", "model_shape"], ["ctx"]),
        helper.make_node("MatMul", ["ctx", "wo"], ["o0"]),
        helper.make_node("Add", ["o0", "bo"], ["o1"]),
        helper.make_node("Add", ["o1", "x"], ["h"]),
    ]
    inits["f1_w"], inits["f1_b"] = _w(rng, dim, 4 * dim), _w(rng, 4 * dim)
    inits["f2_w"], inits["f2_b"] = _w(rng, 4 * dim, dim), _w(rng, dim)
    nodes += [
        helper.make_node("MatMul", ["h", "f1_w"], ["f0"]),
        helper.make_node("Add", ["f0", "f1_b"], ["f1"]),
        helper.make_node("Relu", ["f1"], ["f2"]),
        helper.make_node("MatMul", ["f2", "f2_w"], ["f3"]),
        helper.make_node("Add", ["f3", "f2_b"], ["f4"]),
        helper.make_node("Add", ["f4", "h"], ["y"]),
    ]
    return _model(nodes, [_vi("x", [1, seq, dim])], [_vi("y", [1, seq, dim])], inits)


def bert_encoder(layers: int = 4, hidden: int = 256, seq: int = 128, heads: int = 4) -> Any:
    """A BERT-like encoder as exporters write it: LayerNormalization, Erf-GELU, batch ``N``."""
    rng = np.random.default_rng(5)
    dh = hidden // heads
    inits: dict[str, np.ndarray] = {
        "heads_shape": np.array([0, seq, heads, dh], np.int64),
        "model_shape": np.array([0, seq, hidden], np.int64),
        "scale": np.array(1 / np.sqrt(dh), np.float32),
        "sqrt2": np.array(np.sqrt(2.0), np.float32),
        "one": np.array(1.0, np.float32),
        "half": np.array(0.5, np.float32),
    }
    nodes: list = []
    prev = "x"
    for k in range(layers):
        p = f"l{k}_"

        def w(name: str, *shape: int, p: str = p) -> str:
            inits[p + name] = _w(rng, *shape)
            return p + name

        for q in "qkv":
            nodes += [
                helper.make_node("MatMul", [prev, w(f"w{q}", hidden, hidden)], [p + q + "0"]),
                helper.make_node("Add", [p + q + "0", w(f"b{q}", hidden)], [p + q + "1"]),
                helper.make_node("Reshape", [p + q + "1", "heads_shape"], [p + q + "2"]),
            ]
        nodes += [
            helper.make_node("Transpose", [p + "q2"], [p + "q"], perm=[0, 2, 1, 3]),
            helper.make_node("Transpose", [p + "k2"], [p + "kt"], perm=[0, 2, 3, 1]),
            helper.make_node("Transpose", [p + "v2"], [p + "v"], perm=[0, 2, 1, 3]),
            helper.make_node("MatMul", [p + "q", p + "kt"], [p + "s0"]),
            helper.make_node("Mul", [p + "s0", "scale"], [p + "s"]),
            helper.make_node("Softmax", [p + "s"], [p + "attn"], axis=-1),
            helper.make_node("MatMul", [p + "attn", p + "v"], [p + "c0"]),
            helper.make_node("Transpose", [p + "c0"], [p + "c1"], perm=[0, 2, 1, 3]),
            helper.make_node("Reshape", [p + "c1", "model_shape"], [p + "c"]),
            helper.make_node("MatMul", [p + "c", w("wo", hidden, hidden)], [p + "o0"]),
            helper.make_node("Add", [p + "o0", w("bo", hidden)], [p + "o1"]),
            helper.make_node("Add", [p + "o1", prev], [p + "r1"]),
        ]
        inits[p + "g1"], inits[p + "be1"] = np.ones(hidden, np.float32), _w(rng, hidden)
        inits[p + "g2"], inits[p + "be2"] = np.ones(hidden, np.float32), _w(rng, hidden)
        nodes += [
            helper.make_node(
                "LayerNormalization", [p + "r1", p + "g1", p + "be1"], [p + "h"], axis=-1
            ),
            helper.make_node("MatMul", [p + "h", w("wf1", hidden, 4 * hidden)], [p + "f0"]),
            helper.make_node("Add", [p + "f0", w("fb1", 4 * hidden)], [p + "f1"]),
            # GELU as exporters write it: 0.5 * x * (1 + erf(x / sqrt(2)))
            helper.make_node("Div", [p + "f1", "sqrt2"], [p + "g0"]),
            helper.make_node("Erf", [p + "g0"], [p + "g1e"]),
            helper.make_node("Add", [p + "g1e", "one"], [p + "g2e"]),
            helper.make_node("Mul", [p + "f1", p + "g2e"], [p + "g3"]),
            helper.make_node("Mul", [p + "g3", "half"], [p + "gelu"]),
            helper.make_node("MatMul", [p + "gelu", w("wf2", 4 * hidden, hidden)], [p + "f3"]),
            helper.make_node("Add", [p + "f3", w("fb2", hidden)], [p + "f4"]),
            helper.make_node("Add", [p + "f4", p + "h"], [p + "r2"]),
            helper.make_node(
                "LayerNormalization",
                [p + "r2", p + "g2", p + "be2"],
                ["y" if k == layers - 1 else p + "out"],
                axis=-1,
            ),
        ]
        prev = p + "out"
    return _model(nodes, [_vi("x", ["N", seq, hidden])], [_vi("y", ["N", seq, hidden])], inits)


def run_time_product(a_shape: tuple[int, ...], b_shape: tuple[int, ...], const_a: bool) -> Any:
    """One MatMul whose B is a graph input (A too, unless ``const_a``: W @ X with W a
    constant), the products fast mode packs B for at every run (ops-simd's dynamic_b_native)."""
    rng = np.random.default_rng(0)
    a = _w(rng, *a_shape)
    inputs = [] if const_a else [_vi("a", list(a_shape))]
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y"])]
    return _model(nodes, [*inputs, _vi("b", list(b_shape))], [_vi("y", None)],
                  {"a": a} if const_a else {})  # fmt: skip


def matmul_dynamic() -> Any:
    return run_time_product((512, 512), (512, 512), False)


def matmul_wx() -> Any:
    return run_time_product((1000, 512), (512, 169), True)


def matmul_heads() -> Any:
    return run_time_product((12, 128, 64), (12, 64, 128), False)


LOOP_ITERATIONS = 10_000


def loop_10000(iterations: int = LOOP_ITERATIONS) -> Any:
    """A Loop over a 3-node body: what one iteration costs (body plan and run state reused)."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["acc_in", "step"], ["acc_out"]),
            helper.make_node("Mul", ["acc_out", "acc_out"], ["sq"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            _vi("acc_in", [16]),
        ],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), _vi("acc_out", [16])]
        + [_vi("sq", [16])],
    )
    inits = {"M": np.array(iterations, np.int64), "step": np.full(16, 0.001, np.float32)}
    nodes = [helper.make_node("Loop", ["M", "", "x"], ["y", "squares"], body=body)]
    return _model(nodes, [_vi("x", [16])], [_vi("y", [16]), _vi("squares", [None, 16])], inits)


#: Built models whose time is better read per iteration than per node.
ITERATIONS = {"loop_10000": LOOP_ITERATIONS}

BUILT: dict[str, Callable[[], Any]] = {
    "add_chain_100": add_chain,
    "mlp": mlp,
    "mlp_tiny": mlp_tiny,
    "exported_flatten_mlp": flatten_mlp,
    "exported_small_cnn": small_cnn,
    "exported_transformer_block": transformer_block,
    "bert_encoder_4x256": bert_encoder,
    "loop_10000": loop_10000,
    "matmul_dynamic_512": matmul_dynamic,
    "matmul_wx_1000x512x169": matmul_wx,
    "matmul_heads_12x128x64": matmul_heads,
}


def model_path(name: str) -> str:
    """An .onnx file as given, else the light model of that name in the onnx package."""
    return name if name.endswith(".onnx") else os.path.join(LIGHT_DIR, f"{name}.onnx")


def light_models() -> dict[str, str]:
    if not os.path.isdir(LIGHT_DIR):
        return {}
    names = sorted(f for f in os.listdir(LIGHT_DIR) if f.endswith(".onnx"))
    return {f[: -len(".onnx")]: os.path.join(LIGHT_DIR, f) for f in names}


def available_ops() -> set[str]:
    """ai.onnx operator types the installed plugins define right now."""
    return {op for (domain, op) in snapshot().definitions if domain in ("", "ai.onnx")}


def ort_options(threads: int) -> Any:
    """onnxruntime's session options for timing beside graphrt: ``threads`` intra-op threads,
    one inter-op thread, no warnings, and no spinning: onnxruntime's workers spin for a while
    after each run, and alternated with graphrt that spinning takes the core graphrt's second
    thread needs (off, onnxruntime alone is as fast: 41.1 vs 41.6 ms, light_resnet50, two
    threads)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return so


def ort_session(data: bytes, threads: int) -> Any:
    """An onnxruntime CPU session of the serialized model with :func:`ort_options`."""
    import onnxruntime as ort

    return ort.InferenceSession(data, ort_options(threads), providers=["CPUExecutionProvider"])


def make_feed(model: Any, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic random inputs from the declared shapes (symbolic dims = 1)."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feed = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = tuple(d.dim_value if d.dim_value > 0 else 1 for d in tt.shape.dim)
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        feed[vi.name] = random_array(dtype, shape, rng)
    return feed


# -- measuring -----------------------------------------------------------------------------------


def timed(fn: Callable[[], Any], repeat: int, warmup: int = 1, budget: float | None = None) -> dict:
    """Median of ``repeat`` calls after ``warmup`` calls; stops early past ``budget`` seconds."""
    start = time.perf_counter()
    for _ in range(warmup):
        fn()
    times: list[float] = []
    wanted = max(1, repeat)
    for _ in range(wanted):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if budget is not None and time.perf_counter() - start > budget:
            break
    return {
        "median": statistics.median(times),
        "min": min(times),
        "runs": len(times),
        "cut": len(times) < wanted,
    }


def bench_one(name: str, model: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Every figure of one model; raises SessionError when graphrt cannot load or run it."""
    import onnxruntime as ort

    data = model.SerializeToString()
    feed = make_feed(model)
    row: dict[str, Any] = {"model": name, "nodes": len(model.graph.node)}

    gc.collect()
    rss0 = rss_bytes()
    t0 = time.perf_counter()
    sess = graphrt.Session(data, intra_op_threads=args.threads)
    row["gr_create"] = time.perf_counter() - t0
    try:
        t0 = time.perf_counter()
        ours = sess.run(None, feed)
        row["gr_first"] = time.perf_counter() - t0
        row["gr"] = timed(lambda: sess.run(None, feed), args.repeat)
        row["gr_rss"] = rss_bytes() - rss0
        tracemalloc.start()
        tracemalloc.reset_peak()
        sess.run(None, feed)
        row["gr_peak"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        row["out_bytes"] = sum(o.nbytes for o in ours if isinstance(o, np.ndarray))

        gc.collect()
        rss0 = rss_bytes()
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3  # no warnings about unused initializers
        t0 = time.perf_counter()
        ort_sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        row["ort_create"] = time.perf_counter() - t0
        theirs = ort_sess.run(None, feed)
        row["ort"] = timed(lambda: ort_sess.run(None, feed), args.repeat)
        row["ort_rss"] = rss_bytes() - rss0
        row["max_diff"] = max(
            (float(np.max(np.abs(a.astype(np.float64) - b))) for a, b in zip(ours, theirs)),
            default=0.0,
        )

        if not args.no_reference:  # while the graphrt session is open numpy's BLAS has 1 thread
            from onnx.reference import ReferenceEvaluator

            t0 = time.perf_counter()
            evaluator = ReferenceEvaluator(model)
            row["ref_create"] = time.perf_counter() - t0
            row["ref"] = timed(
                lambda: evaluator.run(None, feed),
                args.reference_repeat,
                warmup=0,
                budget=args.reference_budget,
            )
    finally:
        sess.close()
    return row


def warm_up(args: argparse.Namespace) -> None:
    """Import and plugin-loading costs out of the first model's creation times."""
    import onnxruntime as ort

    model = add_chain(2, 4)
    feed = make_feed(model)
    with graphrt.Session(model.SerializeToString(), intra_op_threads=args.threads) as sess:
        sess.run(None, feed)
    ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feed
    )
    if not args.no_reference:
        from onnx.reference import ReferenceEvaluator

        ReferenceEvaluator(model).run(None, feed)


# -- report --------------------------------------------------------------------------------------


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e3:.3f}" if seconds < 0.1 else f"{seconds * 1e3:.1f}"


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.2f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def table(rows: list[dict[str, Any]]) -> str:
    head = [
        "model", "nodes", "create gr ms", "create ort ms", "create ref ms", "gr 1st run ms",
        "gr ms", "ort ms", "ref ms", "gr/ort", "ref/gr", "gr µs/node",
        "gr peak KiB (tracemalloc)", "RSS Δ gr MiB", "RSS Δ ort MiB", "max abs diff gr vs ort",
    ]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        gr = r["gr"]["median"]
        ort = r.get("ort", {}).get("median")
        ref = r.get("ref", {}).get("median")
        ref_cell = _ms(ref)
        if "ref" in r and r["ref"]["cut"]:
            ref_cell += f" ({r['ref']['runs']} run(s), budget)"
        cells = [
            r["model"], str(r["nodes"]), _ms(r["gr_create"]), _ms(r.get("ort_create")),
            _ms(r.get("ref_create")), _ms(r["gr_first"]), _ms(gr), _ms(ort), ref_cell,
            _ratio(gr, ort), _ratio(ref, gr), f"{gr / max(1, r['nodes']) * 1e6:.1f}",
            f"{r['gr_peak'] / 1024:.1f}", _mib(r["gr_rss"]), _mib(r.get("ort_rss")),
            f"{r.get('max_diff', float('nan')):.2e}",
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="comma-separated substrings of model names to keep")
    parser.add_argument("--repeat", type=int, default=20, help="timed runs per runtime")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads for both")
    parser.add_argument("--no-reference", action="store_true", help="skip ReferenceEvaluator")
    parser.add_argument("--reference-repeat", type=int, default=3, help="timed reference runs")
    parser.add_argument(
        "--reference-budget", type=float, default=30.0, help="seconds per model for the reference"
    )
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    args = parser.parse_args(argv)

    ops = available_ops()
    candidates: list[tuple[str, Callable[[], Any]]] = [
        (name, lambda p=path: onnx.load(p)) for name, path in light_models().items()
    ]
    candidates += list(BUILT.items())
    if args.models:
        keep = [s.strip() for s in args.models.split(",") if s.strip()]
        candidates = [(n, f) for n, f in candidates if any(k in n for k in keep)]
    if args.list:
        print("\n".join(n for n, _ in candidates))
        return 0

    import onnxruntime as ort

    print(
        f"graphrt {graphrt.__version__}, onnxruntime {ort.__version__}, onnx {onnx.__version__}, "
        f"numpy {np.__version__}, Python {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs; intra-op threads {args.threads}; timed runs {args.repeat} "
        f"(reference {args.reference_repeat}); times in ms, medians after warm-up\n"
    )
    warm_up(args)
    rows, skipped = [], []
    for name, build in candidates:
        model = build()
        used = {n.op_type for n in model.graph.node if n.domain in ("", "ai.onnx")}
        missing = sorted(used - ops)
        if missing and name in BUILT:
            skipped.append((name, f"graphrt has no {', '.join(missing)} yet"))
            log(f"skip {name}: graphrt has no {', '.join(missing)} yet")
            continue
        log(f"benchmarking {name} ({len(model.graph.node)} nodes)...")
        try:
            rows.append(bench_one(name, model, args))
        except SessionError as exc:
            skipped.append((name, str(exc)))
            log(f"skip {name}: {exc}")
        except Exception as exc:  # a kernel bug must not end the whole run
            skipped.append((name, f"failed: {type(exc).__name__}: {exc}"))
            log(f"skip {name}: failed: {type(exc).__name__}: {exc}")
    if rows:
        print(table(rows))
        for r in rows:
            n = ITERATIONS.get(r["model"])
            if n and "ort" in r:
                gr, ort_t = r["gr"]["median"] / n, r["ort"]["median"] / n
                print(
                    f"\n{r['model']}: {gr * 1e6:.2f} µs per iteration in graphrt, "
                    f"{ort_t * 1e6:.2f} µs in onnxruntime (gr/ort {gr / ort_t:.2f})"
                )
    else:
        print("(no model could be benchmarked)")
    if skipped:
        print("\nskipped:")
        for name, why in skipped:
            print(f"- {name}: {why}")
    print(
        "\ngr/ort > 1: graphrt slower than onnxruntime; ref/gr > 1: graphrt faster than the "
        "reference evaluator. Peak = tracemalloc peak of one steady-state graphrt run (numpy "
        "buffers included); RSS Δ = resident memory growth from session creation through the "
        "timed runs (rough)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
