"""What ``check_shapes=True`` costs on a run, against the same session options without it.

    python bench/bench_check_shapes.py [--repeat 30] [--models resnet50,bert]

Each model is measured as shipped and with every intermediate annotated by onnx's shape
inference (the worst case: a check after every step).  The two sessions are timed in
alternating rounds so that machine noise falls on both alike; the figure is the ratio of the
medians.  onnxruntime is timed in the same run for scale.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx

import graphrt

sys.path.insert(0, os.path.dirname(__file__))
from bench_models import LIGHT_DIR, bert_encoder, make_feed


def models() -> dict[str, Callable[[], Any]]:
    return {
        "light_resnet50": lambda: onnx.load(os.path.join(LIGHT_DIR, "light_resnet50.onnx")),
        "bert_encoder_4x256": bert_encoder,
    }


def annotated(model: Any) -> Any:
    """Every intermediate given a value_info by shape inference (symbolic batch kept)."""
    return onnx.shape_inference.infer_shapes(model)


def alternate(fns: list[Callable[[], Any]], rounds: int) -> list[float]:
    times: list[list[float]] = [[] for _ in fns]
    for f in fns:
        f()
    for _ in range(rounds):
        for k, f in enumerate(fns):
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--models", help="comma-separated substrings of model names")
    args = parser.parse_args(argv)
    import onnxruntime as ort

    rows = []
    for name, build in models().items():
        if args.models and not any(k in name for k in args.models.split(",")):
            continue
        for variant, model in (("as shipped", build()), ("all annotated", annotated(build()))):
            data = model.SerializeToString()
            feed = make_feed(model)
            off = graphrt.Session(data, intra_op_threads=1)
            on = graphrt.Session(data, intra_op_threads=1, check_shapes=True)
            checks = on.plan_for(list(feed.values())).shape_checks
            n_checks = 0 if checks is None else (
                len(checks.inputs) + len(checks.before)
                + sum(len(c) for c in checks.after_step.values())
            )  # fmt: skip
            so = ort.SessionOptions()
            so.intra_op_num_threads = 1
            so.log_severity_level = 3
            ref = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
            t_off, t_on, t_ort = alternate(
                [
                    lambda s=off, f=feed: s.run(None, f),
                    lambda s=on, f=feed: s.run(None, f),
                    lambda r=ref, f=feed: r.run(None, f),
                ],
                args.repeat,
            )
            np.testing.assert_array_equal(off.run(None, feed)[0], on.run(None, feed)[0])
            rows.append((name, variant, n_checks, t_off, t_on, t_ort))
            off.close()
            on.close()
    print("| model | annotations | values checked | off ms | on ms | overhead | ort ms |")
    print("|---|---|---|---|---|---|---|")
    for name, variant, n, t_off, t_on, t_ort in rows:
        print(
            f"| {name} | {variant} | {n} | {t_off * 1e3:.2f} | {t_on * 1e3:.2f} | "
            f"{(t_on / t_off - 1) * 100:+.1f}% | {t_ort * 1e3:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
