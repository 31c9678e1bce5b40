"""Native SGEMM (graphrt-ops-simd) against numpy's BLAS, one thread each.

    python bench/gemm_micro.py [--isa avx512] [--repeat 5]

Shapes: the BERT-like encoder's products (M x K @ K x N) and light_resnet50's convolutions as
im2col products (weight M x K @ columns K x S, batch 1).  "packed" times the fast GEMM on a B
packed beforehand (a constant weight); "+pack" includes packing B in every call (a run-time B,
the im2col columns).  Prints microseconds (best of --repeat) and the speed-up over numpy.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from threadpoolctl import threadpool_limits

import graphrt_ops_simd as simd
from graphrt_ops_basic.matmul import exact_matmul

BERT = [(128, 256, 256), (128, 256, 1024), (128, 1024, 256)]
#: ops-basic's exact_matmul (a numpy loop over K) is timed up to this many multiply-adds.
EXACT_NUMPY_MAX = 1 << 25
#: Small products (tests/_models.py mlp-like layers), where call overhead decides.
SMALL = [(4, 24, 32), (8, 64, 64), (16, 64, 64), (32, 128, 128), (4, 256, 128)]


def resnet_shapes() -> list[tuple[int, int, int]]:
    """(M, K, S) of every distinct Conv of light_resnet50 as an im2col product, batch 1."""
    import onnx

    from graphrt.cli import default_model_path

    model = onnx.shape_inference.infer_shapes(onnx.load(default_model_path()))
    dims = {}
    for v in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output):
        dims[v.name] = [d.dim_value for d in v.type.tensor_type.shape.dim]
    dims.update({t.name: list(t.dims) for t in model.graph.initializer})
    shapes = []
    for node in model.graph.node:
        if node.op_type != "Conv" or node.output[0] not in dims:
            continue
        m, cg, *kernel = dims[node.input[1]]
        out = dims[node.output[0]]
        shape = (m, cg * int(np.prod(kernel)), int(np.prod(out[2:])))
        if shape not in shapes:
            shapes.append(shape)
    return shapes


def best(fn: Callable[[], object], repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times) * 1e6  # microseconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--isa", default=simd.available_isas()[-1])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--small-repeat", type=int, default=200)
    parser.add_argument("--no-resnet", action="store_true")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = [("small", s) for s in SMALL] + [("bert", s) for s in BERT]
    if not args.no_resnet:
        rows += [("resnet50", s) for s in resnet_shapes()]
    print(
        f"isa {args.isa}; microseconds, best of {args.repeat} ({args.small_repeat} small); "
        "x = numpy / native"
    )
    print(
        f"{'model':9} {'M x K @ K x N':>22} {'numpy':>8} {'packed':>8} {'+pack':>8} "
        f"{'exact':>8} {'exact np':>9} {'x packed':>9} {'x +pack':>8}"
    )
    with threadpool_limits(limits=1, user_api="blas"):
        for label, shape in rows:
            repeat = args.small_repeat if label == "small" else args.repeat
            t_np, t_packed, t_pack, t_exact, t_exact_np = measure(shape, args.isa, repeat, rng)
            m, k, n = shape
            print(
                f"{label:9} {f'{m}x{k} @ {k}x{n}':>22} {t_np:8.1f} {t_packed:8.1f} "
                f"{t_pack:8.1f} {t_exact:8.1f} {t_exact_np:9.1f} {t_np / t_packed:9.2f} "
                f"{t_np / t_pack:8.2f}"
            )


def measure(
    shape: tuple[int, int, int], isa: str, repeat: int, rng: np.random.Generator
) -> tuple[float, float, float, float, float]:
    """Microseconds of numpy, packed fast, pack + fast, native exact and numpy exact."""
    m, k, n = shape
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    out = np.empty((m, n), np.float32)
    packed = simd.pack_b(b, isa)
    tmp = np.empty_like(out)
    t_exact_np = float("nan")
    if m * k * n <= EXACT_NUMPY_MAX:
        t_exact_np = best(lambda: exact_matmul(a, b, out, tmp), max(1, min(repeat, 20) // 2))
    return (
        best(lambda: np.matmul(a, b, out=out), repeat),
        best(lambda: simd.gemm(a, packed, out), repeat),
        best(lambda: (packed.repack(b), simd.gemm(a, packed, out)), repeat),
        best(lambda: simd.gemm_exact(a, b, out, isa), max(1, repeat // 2)),
        t_exact_np,
    )


if __name__ == "__main__":
    main()
