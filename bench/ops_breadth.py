"""Operators of the breadth issue against onnxruntime: each operator's largest backend case
scaled up about 100x in elements, one-node models, graphrt and onnxruntime run in turn.

    python bench/ops_breadth.py [--threads 1] [--rounds 20] [--families math,resample] [--ops TopK]

Cases come from bench/breadth/<family>.py (``cases()``).  The table reports the medians and the
ratio gr/ort; the bar is 3x.  Outputs are compared too (a case whose results differ is marked),
so a fast but wrong kernel cannot pass unnoticed.  Absolute times on a shared machine are noise;
the ratios are what to read.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import pkgutil
import sys

import numpy as np

import graphrt

sys.path.insert(0, os.path.dirname(__file__))
import breadth
from bench_check_shapes import alternate

#: The ratio the issue allows.
BAR = 3.0


def families() -> list[str]:
    modules = pkgutil.iter_modules(breadth.__path__)
    return sorted(m.name for m in modules if not m.name.startswith("_"))


def _ort_session(data: bytes, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    # Spinning workers would steal the core graphrt's next turn needs (bench_interleaved.py).
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def _agree(ours: list, theirs: list) -> bool:
    for a, b in zip(ours, theirs):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return False
        if a.dtype.kind in "fc":
            if not np.allclose(a, b, rtol=1e-3, atol=1e-4, equal_nan=True):
                return False
        elif a.dtype.kind in "biu" and not np.array_equal(a, b):
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--families", help="comma-separated family modules of bench/breadth")
    parser.add_argument("--ops", help="comma-separated substrings of case names")
    args = parser.parse_args(argv)

    chosen = args.families.split(",") if args.families else families()
    print(f"| case | gr ms | ort ms | gr/ort | agree |  (threads {args.threads})")
    print("|---|---|---|---|---|")
    worst = 0.0
    for family in chosen:
        module = importlib.import_module(f"breadth.{family}")
        for case in module.cases():
            if args.ops and not any(k in case.name for k in args.ops.split(",")):
                continue
            data = case.model.SerializeToString()
            ours = graphrt.Session(data, intra_op_threads=args.threads)
            try:
                theirs = _ort_session(data, args.threads)
            except Exception as exc:  # onnxruntime lacks the operator or opset
                print(f"| {case.name} | | | onnxruntime refused: {type(exc).__name__} | |")
                continue
            names = [o.name for o in case.model.graph.output]
            agree = _agree(ours.run(names, case.feed), theirs.run(names, case.feed))
            t_gr, t_ort = alternate(
                [
                    functools.partial(ours.run, names, case.feed),
                    functools.partial(theirs.run, names, case.feed),
                ],
                args.rounds,
            )
            ratio = t_gr / t_ort
            worst = max(worst, ratio)
            flag = " **over**" if ratio > BAR else ""
            print(
                f"| {case.name} | {t_gr * 1e3:.3f} | {t_ort * 1e3:.3f} | {ratio:.2f}{flag} "
                f"| {'yes' if agree else 'NO'} |"
            )
    print(f"\nworst ratio {worst:.2f} (bar {BAR})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
