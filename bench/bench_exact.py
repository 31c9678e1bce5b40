"""Exact mode against fast mode on the benchmark models.

    python bench/bench_exact.py                       # every model
    python bench/bench_exact.py --models light_,cnn   # name filter (substrings)
    python bench/bench_exact.py --repeat 5 --threads 2
    python bench/bench_exact.py --models light_resnet50 --kernel-path avx2   # one native path

For each model: whether exact mode loads (else the operators it lacks), the median steady-state
latency in both modes, whether exact outputs are bit-identical with 1 and ``--threads``
intra-op threads, and the largest difference between the two modes' outputs.  The table goes to
stdout.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import numpy as np
import onnx
from bench_models import BUILT, light_models, make_feed

import graphrt
from graphrt.errors import SessionError


def _median_ms(sess: graphrt.Session, feed: dict[str, np.ndarray], repeat: int) -> float:
    sess.run(None, feed)  # the plan and a warm run state
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        sess.run(None, feed)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def bench_one(name: str, model: Any, args: argparse.Namespace) -> list[str]:
    feed = make_feed(model)
    path = {"kernel_path": args.kernel_path} if args.kernel_path else {}
    try:
        exact = graphrt.Session(model, mode="exact", intra_op_threads=1, **path)
    except SessionError as exc:
        missing = ", ".join(exc.operators or []) or exc.kind
        return [name, "no: " + missing, "", "", "", "", ""]
    fast = graphrt.Session(model, intra_op_threads=1, **path)
    fast_ms, exact_ms = _median_ms(fast, feed, args.repeat), _median_ms(exact, feed, args.repeat)
    one = exact.run(None, feed)
    many = graphrt.Session(model, mode="exact", intra_op_threads=args.threads, **path)
    many = many.run(None, feed)
    same = all(a.tobytes() == b.tobytes() for a, b in zip(one, many))
    diff = max(
        float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)), initial=0))
        for a, b in zip(one, fast.run(None, feed))
        if a.dtype.kind == "f"
    )
    return [
        name, "yes", f"{fast_ms:.2f}", f"{exact_ms:.2f}", f"{exact_ms / fast_ms:.1f}",
        "yes" if same else "NO", f"{diff:.3g}",
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="comma-separated name substrings")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--kernel-path", default="", help="numpy or a native path (default auto)")
    args = parser.parse_args(argv)
    wanted = [w for w in args.models.split(",") if w]
    models: dict[str, Any] = {n: f for n, f in BUILT.items() if n != "loop_10000"}
    models.update({n: p for n, p in light_models().items()})
    header = [
        "model",
        "exact loads",
        "fast ms",
        "exact ms",
        "exact/fast",
        "threads same",
        "max diff",
    ]
    rows = []
    for name, make in models.items():
        if wanted and not any(w in name for w in wanted):
            continue
        print(f"{name} ...", file=sys.stderr)
        model = onnx.load(make) if isinstance(make, str) else make()
        rows.append(bench_one(name, model, args))
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
