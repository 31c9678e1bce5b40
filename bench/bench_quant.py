"""Quantized models against onnxruntime on the same quantized model, timed in turn (issue 17).

    python bench/bench_quant.py [--threads 1] [--rounds 20] [--models encoder,cnn]

The models are quantized here by ``onnxruntime.quantization``: a 4-layer, 256-hidden, 4-head
encoder (tests/_transformers.py) quantized dynamically (DynamicQuantizeLinear + MatMulInteger,
which onnxruntime fuses into its DynamicQuantizeMatMul), run at batch 1, sequence 128; and a
small ResNet-like CNN (six 3x3 convolutions, 32 to 128 channels, two residual adds, global
average pool, Gemm head; input 1x3x112x112) quantized statically with a seeded calibration
reader, in QOperator form (QLinearConv, QLinearAdd, QLinearGlobalAveragePool, QGemm) and QDQ
form (which both runtimes fuse into integer products).  The graphrt and onnxruntime sessions
of a model run in alternation, round after round, so noise on this shared machine falls on
both alike (bench_check_shapes.alternate); figures are medians.  onnxruntime runs at its
default optimization level with spinning workers off.  The bar is the issue's: 1.2x.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import graphrt

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
from bench_check_shapes import alternate  # noqa: E402
from bench_models import ort_session  # noqa: E402

from tests._transformers import encoder_feed, minilm_encoder  # noqa: E402

BAR = 1.2


def resnet_like(seed: int = 0) -> onnx.ModelProto:
    """Conv stem, two residual blocks, two strided convs, global pool and a Gemm head."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def conv(x: str, c_in: int, c_out: int, stride: int = 1, relu: bool = True) -> str:
        k = len(inits)
        w = (rng.standard_normal((c_out, c_in, 3, 3)) * np.sqrt(2 / (9 * c_in))).astype(np.float32)
        inits.extend(
            [numpy_helper.from_array(w, f"w{k}"),
             numpy_helper.from_array(rng.standard_normal(c_out).astype(np.float32) * 0.1, f"b{k}")]
        )  # fmt: skip
        y = f"c{k}"
        nodes.append(
            helper.make_node(
                "Conv", [x, f"w{k}", f"b{k}"], [y], pads=[1, 1, 1, 1], strides=[stride, stride]
            )
        )
        if relu:
            nodes.append(helper.make_node("Relu", [y], [f"{y}r"]))
            y = f"{y}r"
        return y

    def block(x: str, c: int) -> str:
        y = conv(conv(x, c, c), c, c, relu=False)
        nodes.append(helper.make_node("Add", [x, y], [f"{y}a"]))
        nodes.append(helper.make_node("Relu", [f"{y}a"], [f"{y}ar"]))
        return f"{y}ar"

    h = conv("x", 3, 32, stride=2)
    h = block(h, 32)
    h = conv(h, 32, 64, stride=2)
    h = block(h, 64)
    h = conv(h, 64, 128, stride=2)
    nodes += [
        helper.make_node("GlobalAveragePool", [h], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1),
    ]
    inits += [
        numpy_helper.from_array((rng.standard_normal((10, 128)) * 0.1).astype(np.float32), "wf"),
        numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "bf"),
    ]
    graph = helper.make_graph(
        nodes,
        "resnet_like",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 112, 112])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _quantized(tmp: str, name: str, model: onnx.ModelProto, how: str) -> bytes:
    from onnxruntime import quantization as q

    src, dst = os.path.join(tmp, f"{name}.onnx"), os.path.join(tmp, f"{name}_{how}.onnx")
    onnx.save(model, src)
    if how == "dynamic":
        q.quantize_dynamic(src, dst)
    else:

        class Reader(q.CalibrationDataReader):
            def __init__(self) -> None:
                rng = np.random.default_rng(0)
                shape = (1, 3, 112, 112)
                self.data = iter(
                    [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(4)]
                )

            def get_next(self) -> dict | None:
                return next(self.data, None)

        q.quantize_static(
            src, dst, Reader(), quant_format=getattr(q.QuantFormat, how), per_channel=True
        )
    with open(dst, "rb") as f:
        return f.read()


def cases(tmp: str) -> dict[str, tuple[Callable[[], bytes], Callable[[], dict]]]:
    vocab = 30522
    encoder = functools.partial(
        minilm_encoder, layers=4, hidden=256, heads=4, vocab=vocab, max_positions=512
    )
    image = np.random.default_rng(1).standard_normal((1, 3, 112, 112)).astype(np.float32)
    return {
        "encoder_4x256_seq128_dynamic": (
            lambda: _quantized(tmp, "encoder", encoder(), "dynamic"),
            functools.partial(encoder_feed, 1, 128, vocab, padded=False),
        ),
        "cnn_112_static_qoperator": (
            lambda: _quantized(tmp, "cnn", resnet_like(), "QOperator"),
            lambda: {"x": image},
        ),
        "cnn_112_static_qdq": (
            lambda: _quantized(tmp, "cnn", resnet_like(), "QDQ"),
            lambda: {"x": image},
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", default="1", help="comma-separated thread counts")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--models", help="comma-separated substrings of model names")
    args = parser.parse_args(argv)
    import onnxruntime as ort

    load = os.getloadavg()[0]
    print(f"onnxruntime {ort.__version__}, numpy {np.__version__}, load average {load:.2f}")
    print()
    print("| model | threads | gr ms | ort ms | gr/ort | bar | within | gr path | max diff |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, (build, make_feed) in cases(tmp).items():
            if args.models and not any(k in name for k in args.models.split(",")):
                continue
            data, feed = build(), make_feed()
            for threads in (int(t) for t in args.threads.split(",")):
                theirs = ort_session(data, threads)
                ours = graphrt.Session(data, intra_op_threads=threads)
                got, want = ours.run(None, feed)[0], theirs.run(None, feed)[0]
                diff = float(np.abs(got.astype(np.float64) - want).max())
                t_gr, t_ort = alternate(
                    [functools.partial(s.run, None, feed) for s in (ours, theirs)], args.rounds
                )
                ratio = t_gr / t_ort
                print(
                    f"| {name} | {threads} | {t_gr * 1e3:.3f} | {t_ort * 1e3:.3f} | "
                    f"{ratio:.2f} | {BAR} | {'yes' if ratio <= BAR else 'no'} | "
                    f"{ours.kernel_path} | {diff:.2e} |",
                    flush=True,
                )
                ours.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
