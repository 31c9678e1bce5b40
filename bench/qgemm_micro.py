"""MatMulInteger (uint8 A x int8 constant B, per-tensor zero points) against onnxruntime, one
thread each, interleaved; then a dynamically quantized layer (DynamicQuantizeLinear of float32
X, MatMulInteger on its codes and zero point: onnxruntime.quantization's pattern).

    python bench/qgemm_micro.py [--rounds 30] [--isa avx512]

Each round times every contender once per shape, in turn (so a machine busy with other work
slows them alike); prints the median and best microseconds per call and the ratio to
onnxruntime.  Contenders: onnxruntime (its VNNI/AVX2 kernels), graphrt's ops-basic numpy kernel
(float BLAS), graphrt's simd path (the native int8 GEMM, src/native/qgemm.h) and the bare native
call (QGemmCall, no session).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper
from threadpoolctl import threadpool_limits

import graphrt
from graphrt_ops_simd import _native

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests._models import ort_session

SHAPES = [(128, 768, 768), (128, 768, 3072), (128, 3072, 768), (1, 768, 768)]
LAYERS = [(128, 768, 768), (128, 768, 3072)]


def model(m: int, k: int, n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    inits = [
        numpy_helper.from_array(b, "b"),
        numpy_helper.from_array(np.array(0, np.int8), "bz"),
    ]
    node = helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])
    graph = helper.make_graph(
        [node],
        "qgemm",
        [
            helper.make_tensor_value_info("a", TensorProto.UINT8, (m, k)),
            helper.make_tensor_value_info("az", TensorProto.UINT8, ()),
        ],
        [helper.make_tensor_value_info("y", TensorProto.INT32, (m, n))],
        inits,
    )
    feeds = {
        "a": rng.integers(0, 256, (m, k)).astype(np.uint8),
        "az": np.array(rng.integers(0, 256), np.uint8),
    }
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), feeds, b


def layer(m: int, k: int, n: int, seed: int = 0):
    """DynamicQuantizeLinear -> MatMulInteger, X (m, k) float32, B (k, n) int8 constant."""
    rng = np.random.default_rng(seed)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["a", "s", "az"]),
        helper.make_node("MatMulInteger", ["a", "b", "az"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "layer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (m, k))],
        [helper.make_tensor_value_info("y", TensorProto.INT32, (m, n))],
        [numpy_helper.from_array(b, "b")],
    )
    feeds = {"x": rng.standard_normal((m, k)).astype(np.float32)}
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), feeds


def sessions(onnx_model, feeds: dict, isa: str) -> dict[str, Callable[[], object]]:
    """onnxruntime, graphrt's numpy path and its ``isa`` path, one thread each (same results)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    ort_sess = ort_session(onnx_model, opts)
    numpy_sess = graphrt.Session(onnx_model, kernel_path="numpy", intra_op_threads=1)
    simd_sess = graphrt.Session(onnx_model, kernel_path=isa, intra_op_threads=1)
    want = ort_sess.run(None, feeds)[0]
    for sess in (numpy_sess, simd_sess):
        np.testing.assert_array_equal(sess.run(None, feeds)[0], want)
    return {
        "onnxruntime": lambda: ort_sess.run(None, feeds),
        "graphrt numpy": lambda: numpy_sess.run(None, feeds),
        f"graphrt {isa}": lambda: simd_sess.run(None, feeds),
    }


def contenders(m: int, k: int, n: int, isa: str) -> tuple[dict[str, Callable[[], object]], dict]:
    onnx_model, feeds, b = model(m, k, n)
    fns = sessions(onnx_model, feeds, isa)
    packed = _native.PackedQB(b, np.zeros(1, np.int8), isa)
    out = np.empty((m, n), np.int32)
    call = _native.QGemmCall(feeds["a"], packed, out, feeds["az"].reshape(1), 1)
    call()
    np.testing.assert_array_equal(out, fns["onnxruntime"]()[0])
    return {**fns, f"native {packed.isa}": call}, feeds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--isa", default=_native.available_isas()[-1])
    args = parser.parse_args()
    cases = [
        (f"MatMulInteger {m}x{k} @ {k}x{n}", m * k * n, contenders(m, k, n, args.isa)[0])
        for m, k, n in SHAPES
    ]
    cases += [
        (f"DynamicQuantizeLinear + MatMulInteger {m}x{k} @ {k}x{n}", m * k * n,
         sessions(*layer(m, k, n), args.isa))
        for m, k, n in LAYERS
    ]  # fmt: skip
    with threadpool_limits(1):
        for title, macs, fns in cases:
            times: dict[str, list[float]] = {name: [] for name in fns}
            reps = max(1, int(2e7 // macs))
            for fn in fns.values():
                fn()
            for _ in range(args.rounds):
                for name, fn in fns.items():
                    t0 = time.perf_counter()
                    for _ in range(reps):
                        fn()
                    times[name].append((time.perf_counter() - t0) / reps * 1e6)
            base = statistics.median(times["onnxruntime"])
            print(f"{title} (median / best us, x onnxruntime median)")
            for name, ts in times.items():
                med = statistics.median(ts)
                print(f"  {name:22s} {med:9.1f} {min(ts):9.1f}  {med / base:5.2f}x")


if __name__ == "__main__":
    main()
