"""Per-layer times inside one model: graphrt's steps against onnxruntime's nodes.

    .venv/bin/python bench/profile_vs_ort.py light_resnet50
    .venv/bin/python bench/profile_vs_ort.py light_inception_v2 --threads 2 --kernel-path avx2

bench_interleaved.py says how far a model is from onnxruntime; this says where.  Both runtimes
profile ``--repeat`` runs of the same input (graphrt's Profiler, onnxruntime's
``enable_profiling``), every node's time is its minimum over the runs (the least disturbed on a
shared machine), and nodes are matched by operator family (Conv and graphrt's FusedConv are one)
and the shapes of their first two inputs.  onnxruntime rewrites the graph (NCHWc convolutions,
BatchNormalization folded, some shapes reported in its blocked layout), so a shape may count a
different number of nodes on each side: rows compare the time per call, scaled by graphrt's
count.  Kernel figures in isolation are bench/conv_micro.py's.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from collections.abc import Iterable

import onnx

import graphrt

sys.path.insert(0, os.path.dirname(__file__))
from bench_models import make_feed, model_path, ort_options

#: graphrt's fused operators, under the family onnxruntime reports them in.
FAMILY = {"FusedConv": "Conv", "FusedGemm": "Gemm", "FusedMatMul": "MatMul"}

Key = tuple[str, str]


def _key(op: str, shapes: Iterable[Iterable[int]]) -> Key:
    dims = ["x".join(str(d) for d in s) for s in list(shapes)[:2]]
    return FAMILY.get(op, op), " ".join(dims)


def _minimums(nodes: Iterable[tuple[str, float, Key]], runs: int) -> dict[Key, list[float]]:
    """(node name, microseconds, key) events of `runs` runs -> key: [nodes, sum of each node's
    minimum, s].  Names need not be unique (light_inception_v2 has 916 nodes and 510 names,
    and onnxruntime's profile keeps them): a name's n-th event of a run is its n-th node."""
    nodes = list(nodes)
    per_run = collections.Counter(name for name, _, _ in nodes)
    seen: collections.Counter[str] = collections.Counter()
    best: dict[tuple[str, int], tuple[float, Key]] = {}
    for name, us, key in nodes:
        node = (name, seen[name] % max(1, per_run[name] // runs))
        seen[name] += 1
        if node not in best or us < best[node][0]:
            best[node] = (us, key)
    table: dict[Key, list[float]] = {}
    for us, key in best.values():
        row = table.setdefault(key, [0, 0.0])
        row[0] += 1
        row[1] += us / 1e6
    return table


def graphrt_nodes(model: onnx.ModelProto, feed: dict, args: argparse.Namespace) -> dict:
    """(family, shapes) -> [nodes, sum of their minimum times in seconds]."""
    sess = graphrt.Session(
        model.SerializeToString(),
        intra_op_threads=args.threads,
        kernel_path=args.kernel_path,
        mode=args.mode,
    )
    for _ in range(3):
        sess.run(None, feed)
    prof = graphrt.Profiler()
    for _ in range(args.repeat):
        sess.run(None, feed, profiler=prof)
    nodes = [
        (e["name"], e["dur"], _key(e["args"]["op_type"], e["args"]["input_shapes"]))
        for e in prof.chrome_trace()["traceEvents"]
        if "input_shapes" in e["args"]  # (not the runs themselves)
    ]
    return _minimums(nodes, args.repeat)


def onnxruntime_nodes(model: onnx.ModelProto, feed: dict, args: argparse.Namespace) -> dict:
    import onnxruntime as ort

    so = ort_options(args.threads)
    so.enable_profiling = True
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    for _ in range(3 + args.repeat):
        sess.run(None, feed)
    runs = 3 + args.repeat
    path = sess.end_profiling()
    with open(path, encoding="utf-8") as f:
        events = json.load(f)
    os.remove(path)
    nodes = [
        (
            e["name"],
            e["dur"],
            _key(
                e["args"]["op_name"],
                [next(iter(d.values())) for d in e["args"].get("input_type_shape", [])],
            ),
        )
        for e in events
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")
    ]
    return _minimums(nodes, runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a light_* model of the onnx package, or an .onnx file")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--kernel-path", default=None, help="graphrt's path (default: auto)")
    parser.add_argument("--mode", default="fast", choices=("fast", "exact"), help="graphrt's mode")
    parser.add_argument("--top", type=int, default=25, help="rows of the per-layer table")
    args = parser.parse_args(argv)
    model = onnx.load(model_path(args.model))
    feed = make_feed(model)
    ours, theirs = graphrt_nodes(model, feed, args), onnxruntime_nodes(model, feed, args)

    families: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for side, table in enumerate((ours, theirs)):
        for (family, _), (_, seconds) in table.items():
            families[family][side] += seconds
    total = [sum(v[i] for v in families.values()) for i in (0, 1)]
    print(f"{args.model}: {args.threads} thread(s), sum of per-node minimums: graphrt "
          f"{total[0] * 1e3:.3f} ms, onnxruntime {total[1] * 1e3:.3f} ms\n")  # fmt: skip
    print("| operator family | graphrt ms | onnxruntime ms | difference ms |")
    print("|---|---|---|---|")
    for family, (a, b) in sorted(families.items(), key=lambda kv: -abs(kv[1][0] - kv[1][1])):
        print(f"| {family} | {a * 1e3:.3f} | {b * 1e3:.3f} | {(a - b) * 1e3:+.3f} |")

    rows = []
    for key in ours.keys() & theirs.keys():
        (n, a), (m, b) = ours[key], theirs[key]
        rows.append(((a / n - b / m) * n, key, n, a / n, b / m))
    rows.sort(key=lambda r: -abs(r[0]))
    print(f"\nper layer, matched by operator family and input shapes (largest {args.top}):\n")
    print("| operator | input shapes | graphrt nodes | graphrt us/call | onnxruntime us/call "
          "| ratio | difference ms |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for diff, (family, dims), n, a, b in rows[: args.top]:
        print(f"| {family} | {dims} | {n} | {a * 1e6:.1f} | {b * 1e6:.1f} | {a / b:.2f} "
              f"| {diff * 1e3:+.3f} |")  # fmt: skip
    for name, table, other in (("graphrt", ours, theirs), ("onnxruntime", theirs, ours)):
        alone = sorted(((s, k, n) for k, (n, s) in table.items() if k not in other), reverse=True)
        largest = "; ".join(f"{f} {d} x{n} {s * 1e3:.3f} ms" for s, (f, d), n in alone[:4])
        print(f"\n{name}'s nodes without a match: {sum(r[0] for r in alone) * 1e3:.3f} ms "
              f"(the largest: {largest})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
