"""Conv micro-benchmark: graphrt's Conv kernels against onnxruntime on real layer shapes.

    .venv/bin/python bench/conv_micro.py                 # ResNet-50 layers, 50 timed runs each
    .venv/bin/python bench/conv_micro.py --repeat 200 --layers 3x3,1x1
    .venv/bin/python bench/conv_micro.py --model light_squeezenet   # every conv of a model
    .venv/bin/python bench/conv_micro.py --model light_resnet50 --kernels  # each native kernel
    .venv/bin/python bench/conv_micro.py --model light_resnet50 --isa avx2  # a path the CPU has

One intra-op thread on both sides and numpy's BLAS held to one thread (threadpoolctl).  For each
layer it prints the best time of: ops-basic's bound numpy kernel step (what a plan's run loop
calls), the native kernel of graphrt-ops-simd (its ConvPlan on the best ISA, staged and run,
when the plugin is installed), a graphrt session running the one-node model (which picks one
of the two), and an onnxruntime session; ratios are over onnxruntime, and ``--model`` weights
each shape by how often the model has it.  Runs alternate between the runtimes, so load on the
machine hits all of them; the minimum is reported because it is the least disturbed by other
processes.  ``--kernels`` times each of the native plan's kernels (packed, direct, lanes,
stream, winograd) on each layer instead: the figures behind its automatic choice.
plugins/ops-simd/README.md has both.
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from threadpoolctl import threadpool_limits

import graphrt
from graphrt.attrs import node_info
from graphrt.kernel import InferContext, KernelContext
from graphrt_ops_basic.conv import Conv

#: name -> (input channels, input extent, output channels, kernel, stride, pad, group)
LAYERS = {
    "7x7/2 3->64 224": (3, 224, 64, 7, 2, 3, 1),
    "3x3 64->64 56": (64, 56, 64, 3, 1, 1, 1),
    "1x1 256->64 56": (256, 56, 64, 1, 1, 0, 1),
    "3x3/2 128->128 56": (128, 56, 128, 3, 2, 1, 1),
    "1x1/2 256->512 56": (256, 56, 512, 1, 2, 0, 1),
    "3x3 256->256 14": (256, 14, 256, 3, 1, 1, 1),
    "3x3 512->512 7": (512, 7, 512, 3, 1, 1, 1),
    "1x1 2048->512 7": (2048, 7, 512, 1, 1, 0, 1),
}


def conv_model(cin: int, size: int, cout: int, k: int, s: int, p: int, group: int):
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((cout, cin // group, k, k)) / np.sqrt(cin * k * k / group)).astype(
        np.float32
    )
    b = rng.standard_normal(cout).astype(np.float32)
    node = helper.make_node(
        "Conv", ["x", "w", "b"], ["y"], strides=[s, s], pads=[p] * 4, group=group
    )
    graph = helper.make_graph(
        [node],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, node, w, b


def model_layers(name: str) -> dict[str, tuple[tuple[int, ...], int]]:
    """Every Conv of an onnx-shipped light model: its LAYERS-style shape and how often."""
    import os

    import onnx
    from onnx import shape_inference

    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    model = shape_inference.infer_shapes(onnx.load(os.path.join(path, f"{name}.onnx")))
    graph = model.graph
    shapes = {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in [*graph.value_info, *graph.input]
    }
    shapes.update({t.name: list(t.dims) for t in graph.initializer})
    found: dict[str, tuple[tuple[int, ...], int]] = {}
    for node in graph.node:
        if node.op_type != "Conv":
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        x, w = shapes[node.input[0]], shapes[node.input[1]]
        layer = (
            x[1],
            x[2],
            w[0],
            w[2],
            attrs.get("strides", [1])[0],
            attrs.get("pads", [0])[0],
            attrs.get("group", 1),
        )
        label = f"{w[2]}x{w[2]}/{layer[4]} {x[1]}->{w[0]} {x[2]}"
        found[label] = (layer, found.get(label, (layer, 0))[1] + 1)
    return found


def native_isa(wanted: str | None) -> str | None:
    """The ISA the native columns use: --isa, else the best the CPU has (None without ops-simd)."""
    try:
        from graphrt_ops_simd import _native
    except ImportError:
        return None
    have = _native.available_isas()
    if wanted is not None and wanted not in have:
        raise SystemExit(f"--isa {wanted}: this CPU has {', '.join(have)}")
    return wanted or have[-1]


def native_kernel(
    shape: tuple[int, ...],
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray,
    kernel: str = "auto",
    isa: str | None = None,
    threads: int = 1,
):
    """The ops-simd native convolution on `isa` (default the best), a bound call (None
    without it)."""
    isa = native_isa(isa)
    if isa is None:
        return None
    from graphrt_ops_simd import _native

    _, size, cout, k, s, p, group = shape
    out = (size + 2 * p - k) // s + 1
    plan = _native.conv_plan(
        w, group, list(x.shape), [s, s], [1, 1], [p, p], [out, out], isa, kernel
    )
    work = np.empty(plan.work_floats, np.float32)
    y = np.empty((1, cout, out, out), np.float32)

    # bound once, as a session's step binds it (a whole call: the Winograd kernel's per-thread
    # transform and products)
    return _native.ConvCall(plan, x, work, y, b, "none", threads), y


def bound_kernel(node, x: np.ndarray, w: np.ndarray, b: np.ndarray) -> tuple[Callable, np.ndarray]:
    """The kernel as a plan runs it: infer with constant W and B, then one bound step."""
    kernel = Conv(node_info(node, 17))
    ictx = InferContext([x.dtype, w.dtype, b.dtype], [x.shape, w.shape, b.shape], [None, w, b], 1)
    kernel.infer(ictx)
    (dtype, shape), *_ = ictx.output_types()
    y = np.empty(shape, dtype)
    kctx = KernelContext(prepared=ictx.prepared, scratch=[np.empty(s, d) for d, s in ictx.scratch])
    return kernel.bind(kctx, [x, w, b], [y]), y


def best_of(fns: list[Callable[[], object]], repeat: int) -> list[float]:
    """Alternating runs of every function; the best time of each, in milliseconds."""
    for fn in fns:
        fn()
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t)
    return [b * 1e3 for b in best]


#: The native plan's kernels, as conv_plan(kernel=...) names them.
NATIVE_KERNELS = ("packed", "direct", "lanes", "stream", "winograd")


def chosen_layers(args: argparse.Namespace) -> dict[str, tuple[tuple[int, ...], int]]:
    """The model's layers (or the built-in ones) whose names contain one of --layers."""
    layers = model_layers(args.model) if args.model else {k: (v, 1) for k, v in LAYERS.items()}
    wanted = [s for s in args.layers.split(",") if s]
    return {k: v for k, v in layers.items() if not wanted or any(s in k for s in wanted)}


def compare_kernels(args: argparse.Namespace) -> None:
    """Each native kernel (direct, stream and winograd where the geometry allows, lanes where
    the ISA has it)."""
    layers = chosen_layers(args)
    heads = " | ".join(f"{k} ms" for k in NATIVE_KERNELS)
    print(f"| layer | count | {heads} | auto picks |")
    print("|---" * (len(NATIVE_KERNELS) + 3) + "|")
    for name, (shape, count) in layers.items():
        _, _, w, b = conv_model(*shape)
        x = np.random.default_rng(1).standard_normal((1, shape[0], shape[1], shape[1]))
        x = x.astype(np.float32)
        runs = {}
        for kernel in NATIVE_KERNELS:
            try:
                found = native_kernel(shape, x, w, b, kernel, args.isa, args.threads)
            except ValueError:  # not for these strides, or not on this ISA
                continue
            if found is None:
                raise SystemExit("graphrt-ops-simd is not installed")
            runs[kernel] = found[0]
        times = dict(zip(runs, best_of(list(runs.values()), args.repeat)))
        cells = [f"{times[k] * count:.3f}" if k in times else "-" for k in NATIVE_KERNELS]
        from graphrt_ops_simd import _native

        isa = native_isa(args.isa)
        out = (shape[1] + 2 * shape[5] - shape[3]) // shape[4] + 1
        plan = _native.conv_plan(
            w, shape[6], list(x.shape), [shape[4]] * 2, [1, 1], [shape[5]] * 2, [out, out], isa
        )
        print(f"| {name} | {count} | {' | '.join(cells)} | {plan.kernel} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--layers", default="", help="comma-separated substrings of layer names")
    parser.add_argument("--model", help="every Conv of this light model (e.g. light_resnet50)")
    parser.add_argument("--kernels", action="store_true", help="time each native kernel")
    parser.add_argument(
        "--threads", type=int, default=1, help="the plugin's threads for --kernels (default 1)"
    )
    parser.add_argument(
        "--isa", help="the native kernel path (default the best the CPU has; avx2 on AVX-512)"
    )
    args = parser.parse_args()
    if args.kernels:
        return compare_kernels(args)
    layers = chosen_layers(args)
    threadpool_limits(limits=1, user_api="blas")
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    print(
        "| layer | count | numpy ms | native ms | session ms | ort ms | numpy/ort | native/ort "
        "| session/ort |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    totals = np.zeros(4)
    for name, (shape, count) in layers.items():
        model, node, w, b = conv_model(*shape)
        x = np.random.default_rng(1).standard_normal((1, shape[0], shape[1], shape[1]))
        x = x.astype(np.float32)
        step, y = bound_kernel(node, x, w, b)
        native = native_kernel(shape, x, w, b, isa=args.isa)
        sess = graphrt.Session(model, intra_op_threads=1, kernel_path=args.isa)
        out = {"y": np.empty(y.shape, np.float32)}
        osess = ort.InferenceSession(
            model.SerializeToString(), so, providers=["CPUExecutionProvider"]
        )
        expected = osess.run(None, {"x": x})[0]
        step()
        np.testing.assert_allclose(y, expected, rtol=1e-3, atol=1e-3)
        fns = [step, functools.partial(sess.run, None, {"x": x}, out=out)]
        fns.append(functools.partial(osess.run, None, {"x": x}))
        if native is not None:
            native[0]()
            np.testing.assert_allclose(native[1], expected, rtol=1e-3, atol=1e-3)
            fns.insert(1, native[0])
        times = best_of(fns, args.repeat)
        if native is None:
            times.insert(1, float("nan"))
        times = [t * count for t in times]
        totals += times
        k, n, s, o = times
        print(
            f"| {name} | {count} | {k:.3f} | {n:.3f} | {s:.3f} | {o:.3f} | {k / o:.2f} "
            f"| {n / o:.2f} | {s / o:.2f} |"
        )
    k, n, s, o = totals
    print(
        f"| total | | {k:.3f} | {n:.3f} | {s:.3f} | {o:.3f} | {k / o:.2f} | {n / o:.2f} "
        f"| {s / o:.2f} |"
    )


if __name__ == "__main__":
    main()
