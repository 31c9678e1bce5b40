"""weight_storage on an encoder (4 layers, hidden 512, vocabulary 16384): memory, time per run.

    python bench/bench_weight_storage.py                 # original, float16, bfloat16, ort
    python bench/bench_weight_storage.py --repeat 50 --threads 2

Each row is measured in a fresh process: the model is loaded into memory first (as a
ModelProto), then RSS is read before the session is made, after it is made and after the
first run; the time per run is the median of ``--repeat`` runs.  onnxruntime (float32 weights)
is the last row, for scale.  Absolute figures depend on the machine (and its load): compare
rows of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

_CHILD = r"""
import json, os, statistics, sys, time
import ml_dtypes  # its import (~8 MiB, bfloat16 storage needs it) is not weight memory
import numpy as np

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

path, storage, feed_path, repeat, threads = sys.argv[1:6]
repeat, threads = int(repeat), int(threads)
feed = dict(np.load(feed_path).items())
if storage == "onnxruntime":
    import onnxruntime as ort
    data = open(path, "rb").read()
    before = rss()
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    s = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
else:
    import graphrt
    from graphrt import proto
    model = proto.load_model(path)
    before = rss()
    s = graphrt.Session(model, weight_storage=storage, intra_op_threads=threads)
created = rss()
y = s.run(None, feed)[0]
ran = rss()
times = []
for _ in range(repeat):
    t0 = time.perf_counter()
    s.run(None, feed)
    times.append(time.perf_counter() - t0)
np.save(sys.argv[6], y)
print(json.dumps({"created": created - before, "ran": ran - before,
                  "ms": 1e3 * statistics.median(times)}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=64)
    args = parser.parse_args(argv)
    import numpy as np
    import onnx

    from tests._transformers import encoder_feed, minilm_encoder

    vocab = 16384
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "encoder.onnx")
        onnx.save(minilm_encoder(layers=4, hidden=512, heads=8, vocab=vocab), path)
        feed_path = os.path.join(tmp, "feed.npz")
        np.savez(feed_path, **encoder_feed(args.batch, args.seq, vocab=vocab))
        rows, outputs = [], {}
        for storage in ("original", "float16", "bfloat16", "onnxruntime"):
            out = os.path.join(tmp, f"{storage}.npy")
            done = subprocess.run(
                [sys.executable, "-c", _CHILD, path, storage, feed_path, str(args.repeat),
                 str(args.threads), out],
                capture_output=True, text=True, check=False,
                env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
            )  # fmt: skip
            if done.returncode != 0:
                print(f"{storage}: failed\n{done.stderr}", file=sys.stderr)
                continue
            rows.append((storage, json.loads(done.stdout.strip().splitlines()[-1])))
            outputs[storage] = np.load(out)
    mib = 1 << 20
    base = dict(rows).get("original")
    ort_ms = dict(rows).get("onnxruntime", {}).get("ms")
    print(f"encoder 4 x 512, batch {args.batch} x seq {args.seq}, {args.threads} thread(s)")
    print(f"{'storage':<12} {'RSS made':>9} {'after run':>10} {'vs orig':>8} {'ms/run':>8} "
          f"{'vs ort':>7} {'max |d|':>9}")  # fmt: skip
    for storage, r in rows:
        ratio = r["ran"] / base["ran"] if base else float("nan")
        vs_ort = r["ms"] / ort_ms if ort_ms else float("nan")
        diff = float(np.abs(outputs[storage] - outputs["original"]).max()) if base else 0.0
        print(
            f"{storage:<12} {r['created'] / mib:>8.1f}M {r['ran'] / mib:>9.1f}M {ratio:>8.2f} "
            f"{r['ms']:>8.2f} {vs_ort:>7.2f} {diff:>9.2e}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
