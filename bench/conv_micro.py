"""Conv micro-benchmark: graphrt's Conv kernel against onnxruntime on ResNet-50 layer shapes.

    .venv/bin/python bench/conv_micro.py                 # every layer, 50 timed runs each
    .venv/bin/python bench/conv_micro.py --repeat 200 --layers 3x3,1x1

One intra-op thread on both sides and numpy's BLAS held to one thread (threadpoolctl).  For each
layer it prints the best time of: graphrt's bound kernel step (what a plan's run loop calls),
a graphrt session running the one-node model, and an onnxruntime session; the ratios are over
onnxruntime.  Runs alternate between the runtimes, so load on the machine hits all of them;
the minimum is reported because it is the least disturbed by other processes.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--layers", default="", help="comma-separated substrings of layer names")
    args = parser.parse_args()
    wanted = [s for s in args.layers.split(",") if s]
    threadpool_limits(limits=1, user_api="blas")
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    print("| layer | gr kernel ms | gr session ms | ort ms | kernel/ort | session/ort |")
    print("|---|---|---|---|---|---|")
    totals = np.zeros(3)
    for name, shape in LAYERS.items():
        if wanted and not any(s in name for s in wanted):
            continue
        model, node, w, b = conv_model(*shape)
        x = np.random.default_rng(1).standard_normal((1, shape[0], shape[1], shape[1]))
        x = x.astype(np.float32)
        step, y = bound_kernel(node, x, w, b)
        sess = graphrt.Session(model, intra_op_threads=1)
        out = {"y": np.empty(y.shape, np.float32)}
        osess = ort.InferenceSession(
            model.SerializeToString(), so, providers=["CPUExecutionProvider"]
        )
        expected = osess.run(None, {"x": x})[0]
        step()
        np.testing.assert_allclose(y, expected, rtol=1e-3, atol=1e-3)
        times = best_of(
            [
                step,
                functools.partial(sess.run, None, {"x": x}, out=out),
                functools.partial(osess.run, None, {"x": x}),
            ],
            args.repeat,
        )
        totals += times
        k, s, o = times
        print(f"| {name} | {k:.3f} | {s:.3f} | {o:.3f} | {k / o:.2f} | {s / o:.2f} |")
    k, s, o = totals
    print(f"| total | {k:.3f} | {s:.3f} | {o:.3f} | {k / o:.2f} | {s / o:.2f} |")


if __name__ == "__main__":
    main()
