"""Each native conv kernel on every layer of a model, timed inside the model as it runs.

    .venv/bin/python bench/conv_rules.py light_squeezenet
    .venv/bin/python bench/conv_rules.py light_resnet50 --threads 2 --rounds 20
    .venv/bin/python bench/conv_rules.py light_inception_v2 --kernel-path avx2 --tuning split512

"auto"'s rules (conv_choice.cpp) are measured numbers; a new CPU turns some of them.  This says
which, where bench/conv_micro.py --kernels cannot: a layer alone keeps its weights, input and
output in cache from call to call, inside a model they come from L3 or memory.  One session
runs auto's choices; for each other kernel one session forces it on every layer that can take
it (conv_plan(kernel=...); the rest stay auto).  The sessions and onnxruntime run in turn, round
after round, each graphrt run under the profiler, so every layer sees a model's cache state,
onnxruntime's runs in between included (as bench/bench_interleaved.py).  Per layer: the median
of its step's times under each kernel; rows where a kernel beat auto's by more than
``--margin`` are marked.  Exact mode's choices are not measured (its kernels differ).
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
from typing import Any

import onnx

import graphrt

sys.path.insert(0, os.path.dirname(__file__))
from bench_models import make_feed, model_path, ort_session

#: conv_plan's kernel names, auto's alternatives.
KERNELS = ("direct", "lanes", "packed", "stream", "winograd")

LayerKey = tuple[tuple[int, ...], tuple[int, ...]]


class ForcedPlans:
    """conv_plan with the rule set forced, and the kernel too while ``kernel`` is set.  Per
    layer (x shape, w shape): auto's choice (``chosen``) and the kernels forced on it
    (``forced``; a kernel the geometry or ISA refuses leaves the layer to auto)."""

    def __init__(self, tuning: str) -> None:
        from graphrt_ops_simd import _native

        self.native = _native
        self.original = _native.conv_plan
        self.kernel: str | None = None
        self.tuning = tuning
        self.chosen: dict[LayerKey, str] = {}
        self.forced: dict[str, set[LayerKey]] = collections.defaultdict(set)

    def __enter__(self) -> ForcedPlans:
        self.native.conv_plan = self._plan
        return self

    def __exit__(self, *exc: object) -> None:
        self.native.conv_plan = self.original

    def _plan(self, w: Any, group: int, x_shape: list[int], *rest: Any) -> Any:
        # (strides, dilations, begin, out, isa, kernel, exact[, tuning]), as conv_exact passes
        args = list(rest[:7]) + [self.tuning]
        if args[6]:  # exact mode: its own kernels, untouched
            return self.original(w, group, x_shape, *rest)
        key = (tuple(x_shape), tuple(w.shape))
        if self.kernel is not None:
            try:
                plan = self.original(w, group, x_shape, *args[:5], self.kernel, *args[6:])
            except ValueError:  # not for this geometry or ISA
                pass
            else:
                self.forced[self.kernel].add(key)
                return plan
        plan = self.original(w, group, x_shape, *args[:5], "auto", *args[6:])
        if self.kernel is None:
            self.chosen[key] = plan.kernel
        return plan


def node_times(profiler: graphrt.Profiler) -> dict[str, tuple[LayerKey, list[float]]]:
    """Conv and FusedConv steps: name -> (its layer, its durations in microseconds)."""
    times: dict[str, tuple[LayerKey, list[float]]] = {}
    for e in profiler.chrome_trace()["traceEvents"]:
        args = e.get("args", {})
        if args.get("op_type") in ("Conv", "FusedConv"):
            x, w = (tuple(s) for s in args["input_shapes"][:2])
            times.setdefault(e["name"], ((x, w), []))[1].append(e["dur"])
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a light_* model of the onnx package, or an .onnx file")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--kernel-path", default=None, help="graphrt's path (default: auto)")
    parser.add_argument(
        "--tuning", default="auto", help="the avx512 rule set: auto, split512 or full512"
    )
    parser.add_argument(
        "--margin", type=float, default=0.03, help="mark kernels faster than auto's by this"
    )
    parser.add_argument("--no-ort", action="store_true", help="leave onnxruntime's runs out")
    args = parser.parse_args(argv)
    model = onnx.load(model_path(args.model))
    data, feed = model.SerializeToString(), make_feed(model)

    def session() -> graphrt.Session:
        s = graphrt.Session(data, intra_op_threads=args.threads, kernel_path=args.kernel_path)
        s.run(None, feed)  # (plans are made at the first run)
        return s

    with ForcedPlans(args.tuning) as forced:
        sessions = {"auto": session()}
        for kernel in KERNELS:
            forced.kernel = kernel
            sessions[kernel] = session()
        forced.kernel = None
    runs: list[Any] = []
    if not args.no_ort:
        ref = ort_session(data, args.threads)
        runs.append(lambda: ref.run(None, feed))
    profilers = {name: graphrt.Profiler() for name in sessions}
    for _ in range(args.rounds):
        for name, s in sessions.items():
            s.run(None, feed, profiler=profilers[name])
            for run in runs:
                run()
    times = {name: node_times(p) for name, p in profilers.items()}
    auto = times["auto"]
    print(
        f"{args.model}, {args.threads} thread(s), tuning {args.tuning}: each Conv step's median "
        f"of {args.rounds} rounds in turn (us), under auto's choice and each kernel forced "
        f"(- where the layer cannot take it; * faster than auto's by {args.margin:.0%})\n"
    )
    print(f"| step | x | w | auto picks | auto | {' | '.join(KERNELS)} | best |")
    print("|---" * (len(KERNELS) + 6) + "|")
    total = collections.Counter()
    marked = 0
    rows = sorted(auto.items(), key=lambda kv: -statistics.median(kv[1][1]))
    for node, (layer, durations) in rows:
        t_auto = statistics.median(durations)
        picks = forced.chosen.get(layer, "?")
        best = (picks, t_auto)
        cells = []
        for kernel in KERNELS:
            if layer not in forced.forced[kernel]:
                cells.append("-")
                continue
            t = statistics.median(times[kernel][node][1])
            faster = t < t_auto * (1 - args.margin) and kernel != picks
            marked += faster
            cells.append(f"{t:.1f}{'*' if faster else ''}")
            if t < best[1]:
                best = (kernel, t)
        total["auto"] += t_auto
        total["best"] += best[1]
        dims = ["x".join(map(str, d)) for d in layer]
        print(f"| {node} | {dims[0]} | {dims[1]} | {picks} | {t_auto:.1f} | {' | '.join(cells)} "
              f"| {best[0]} |")  # fmt: skip
    print(
        f"\nConv steps: auto {total['auto'] / 1e3:.3f} ms, each step's best kernel "
        f"{total['best'] / 1e3:.3f} ms; {marked} step(s) marked"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
