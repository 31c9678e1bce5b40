"""Transformer and recurrent models against onnxruntime, timed run by run in turn (issue 12).

    python bench/bench_transformers.py [--threads 1,2] [--rounds 20] [--models minilm,lstm]

The models are the exporter-shaped ones of tests/_transformers.py with random weights: a
6-layer, 384-hidden, 12-head MiniLM encoder (decomposed LayerNorm, attention and GELU, an
additive mask) at batch 1, sequence 128, and single-layer batch-first LSTM and GRU exports
(hidden 64, 128, 256; input as wide as the hidden state) at batch 1, sequence 50.  graphrt and
onnxruntime sessions of a model run in alternation, round after round, so noise on this shared
machine falls on both alike (bench_check_shapes.alternate); the figures are medians.
onnxruntime runs at its default optimization level (its own attention, LayerNorm and GELU
fusions) with spinning workers off, as bench_interleaved.py explains.  The bar column is the
issue's acceptance bar: 1.1x for the encoder, 1.5x for the recurrent models.

On a machine that sets OPENBLAS_CORETYPE or OPENBLAS_L2_SIZE (which change the kernels
numpy's OpenBLAS picks), compare with a run under ``env -u OPENBLAS_CORETYPE -u
OPENBLAS_L2_SIZE``: onnxruntime has its own GEMM and does not read them.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import graphrt

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
from bench_check_shapes import alternate  # noqa: E402
from bench_models import ort_session  # noqa: E402

from tests._transformers import encoder_feed, minilm_encoder, rnn_export  # noqa: E402


def cases() -> dict[str, tuple[Callable[[], Any], Callable[[], dict], float]]:
    """name -> (model builder, feed builder, the issue's bar for gr/ort)."""
    vocab = 30522
    found: dict[str, tuple[Callable[[], Any], Callable[[], dict], float]] = {
        "minilm_6x384_seq128": (
            functools.partial(
                minilm_encoder, layers=6, hidden=384, heads=12, vocab=vocab, max_positions=512
            ),
            functools.partial(encoder_feed, 1, 128, vocab, padded=False),
            1.1,
        )
    }
    rng = np.random.default_rng(1)
    for op in ("LSTM", "GRU"):
        for hidden in (64, 128, 256):
            x = rng.standard_normal((1, 50, hidden)).astype(np.float32)
            found[f"{op.lower()}_h{hidden}_seq50"] = (
                functools.partial(rnn_export, op, hidden, hidden),
                lambda x=x: {"x": x},
                1.5,
            )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--models", help="comma-separated substrings of model names")
    args = parser.parse_args(argv)
    import onnxruntime as ort

    blas = {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if k in os.environ}
    print(f"onnxruntime {ort.__version__}, numpy {np.__version__}, OpenBLAS env {blas or 'unset'}")
    print()
    print("| model | threads | gr ms | ort ms | gr/ort | bar | within | gr path |")
    print("|---|---|---|---|---|---|---|---|")
    for name, (build, make_feed, bar) in cases().items():
        if args.models and not any(k in name for k in args.models.split(",")):
            continue
        model = build()
        data, feed = model.SerializeToString(), make_feed()
        for threads in (int(t) for t in args.threads.split(",")):
            theirs = ort_session(data, threads)
            ours = graphrt.Session(data, intra_op_threads=threads)
            got, want = ours.run(None, feed)[0], theirs.run(None, feed)[0]
            np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
            t_gr, t_ort = alternate(
                [functools.partial(s.run, None, feed) for s in (ours, theirs)], args.rounds
            )
            ratio = t_gr / t_ort
            print(
                f"| {name} | {threads} | {t_gr * 1e3:.3f} | {t_ort * 1e3:.3f} | {ratio:.2f} | "
                f"{bar} | {'yes' if ratio <= bar else 'no'} | {ours.kernel_path} |",
                flush=True,
            )
            ours.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
