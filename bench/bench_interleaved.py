"""graphrt (auto kernel path and numpy-only) against onnxruntime, timed run by run in turn.

    python bench/bench_interleaved.py [--threads 1] [--rounds 20] [--models resnet50,bert]

bench_models.py times one runtime after the other; on a shared machine a burst of other work
then falls on one of them only.  Here the three sessions of a model run in alternation, round
after round, so noise falls on all alike; the figures are medians and their ratios.
onnxruntime's spinning workers are turned off (see below), or they would steal graphrt's
second core in the next turn.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable
from typing import Any

import onnx

import graphrt

sys.path.insert(0, os.path.dirname(__file__))
from bench_check_shapes import alternate
from bench_models import (
    LIGHT_DIR,
    add_chain,
    bert_encoder,
    flatten_mlp,
    light_models,
    make_feed,
    matmul_dynamic,
    matmul_heads,
    matmul_wx,
    mlp,
    mlp_tiny,
    ort_session,
    small_cnn,
)
from ort_avx2 import nchwc_block

#: Rounds for models whose run is a few microseconds (more rounds, same wall time).
SHORT = {"add_chain_100": 20, "mlp_tiny": 50, "exported_flatten_mlp": 50, "exported_small_cnn": 20}


def models() -> dict[str, Callable[[], Any]]:
    def light(name: str) -> Callable[[], Any]:
        return lambda: onnx.load(os.path.join(LIGHT_DIR, f"{name}.onnx"))

    return {
        "add_chain_100": add_chain,
        "mlp_tiny": mlp_tiny,
        "exported_flatten_mlp": flatten_mlp,
        "exported_small_cnn": small_cnn,
        "mlp": mlp,
        **{name: light(name) for name in sorted(light_models())},
        "bert_encoder_4x256": bert_encoder,
        "matmul_dynamic_512": matmul_dynamic,
        "matmul_wx_1000x512x169": matmul_wx,
        "matmul_heads_12x128x64": matmul_heads,
    }


def _ms(seconds: float) -> str:
    """Milliseconds, with a fourth decimal for the runs of a few microseconds."""
    return f"{seconds * 1e3:.4f}" if seconds < 1e-4 else f"{seconds * 1e3:.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--models", help="comma-separated substrings of model names")
    parser.add_argument(
        "--path", default=None, help="graphrt's kernel path (avx2 on an AVX-512 machine, say)"
    )
    parser.add_argument("--no-numpy", action="store_true", help="leave out the numpy-path column")
    args = parser.parse_args(argv)
    import onnxruntime as ort

    origin, block = nchwc_block()
    kernels = {16: "AVX-512F", 8: "AVX2 or AVX"}.get(block, "no NCHWc")
    print(f"# onnxruntime {ort.__version__} ({origin}): NCHWc blocks of {block}, {kernels} kernels")
    print(
        "| model | threads | gr ms (auto) | gr ms (numpy) | ort ms | gr/ort (auto) "
        "| gr/ort (numpy) | auto path |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, build in models().items():
        if args.models and not any(k in name for k in args.models.split(",")):
            continue
        model = build()
        data, feed = model.SerializeToString(), make_feed(model)
        theirs = ort_session(data, args.threads)
        auto = graphrt.Session(data, intra_op_threads=args.threads, kernel_path=args.path)
        sessions = [auto, theirs]
        if not args.no_numpy:
            plain = graphrt.Session(data, intra_op_threads=args.threads, kernel_path="numpy")
            sessions.insert(1, plain)
        times = alternate(
            [functools.partial(s.run, None, feed) for s in sessions],
            args.rounds * SHORT.get(name, 1),
        )
        t_auto, t_ort = times[0], times[-1]
        t_plain = times[1] if not args.no_numpy else float("nan")
        print(
            f"| {name} | {args.threads} | {_ms(t_auto)} | {_ms(t_plain)} | "
            f"{_ms(t_ort)} | {t_auto / t_ort:.2f} | {t_plain / t_ort:.2f} | "
            f"{auto.kernel_path} |",
            flush=True,
        )
        auto.close()
        if not args.no_numpy:
            plain.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
