"""Cold start against onnxruntime: fresh processes, fresh sessions, and what ``import`` costs.

    python bench/bench_cold_start.py [--threads 1] [--rounds 7] [--parts process,session,imports]

Three parts, each interleaved with onnxruntime in the same run (medians, ratios above 1 mean
graphrt is slower; onnxruntime's spinning workers off, as in bench_interleaved.py):

- process: ``python -c`` that imports the runtime, creates a session from a model file and runs
  it once, launched afresh every round, graphrt and onnxruntime in turn.  The wall and CPU times
  are taken by the parent (interpreter start included); the child reports its own import /
  create / first run split.  Models: light_squeezenet (onnx's light models) and a tiny
  MatMul-Add-Relu model.  Children cache bytecode as an installed package would
  (see :func:`child_env`).
- session: in this process, a new session and its first run, round after round (the plan cache
  belongs to the session, so every round plans again; plugin discovery and imports are paid
  once, in the warm-up round).  Models: light_resnet50 and light_densenet121.
- imports: ``python -X importtime -c "import graphrt"`` (and with a session created on the tiny
  model): the modules with the largest cumulative and self times, and whether the heavy ones
  (onnx's package, ml_dtypes, onnx.reference, scipy) were imported at all.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")

#: Modules whose presence after ``import graphrt`` means a heavy import happened too early.
HEAVY = ("onnx", "onnx.helper", "onnx.reference", "ml_dtypes", "scipy", "onnx.defs")

# The children: everything they do is timed from their first line.  Inputs are random float32
# of the declared shape (symbolic dims = 1), built from the session's own input metadata so the
# child imports nothing but numpy and the runtime.
_GR_CHILD = """
import sys, time
t0 = time.perf_counter()
import numpy as np
t1 = time.perf_counter()
import graphrt
t2 = time.perf_counter()
s = graphrt.Session(sys.argv[1], intra_op_threads=int(sys.argv[2]))
t3 = time.perf_counter()
rng = np.random.default_rng(0)
feed = {i.name: rng.standard_normal([d if isinstance(d, int) and d > 0 else 1 for d in i.shape],
        dtype=np.float32) for i in s.get_inputs()}
t4 = time.perf_counter()
s.run(None, feed)
t5 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2, t5 - t4)
"""

_ORT_CHILD = """
import sys, time
t0 = time.perf_counter()
import numpy as np
t1 = time.perf_counter()
import onnxruntime as ort
t2 = time.perf_counter()
so = ort.SessionOptions()
so.intra_op_num_threads = int(sys.argv[2])
so.inter_op_num_threads = 1
so.log_severity_level = 3
so.add_session_config_entry("session.intra_op.allow_spinning", "0")
s = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
t3 = time.perf_counter()
rng = np.random.default_rng(0)
feed = {i.name: rng.standard_normal([d if isinstance(d, int) and d > 0 else 1 for d in i.shape],
        dtype=np.float32) for i in s.get_inputs()}
t4 = time.perf_counter()
s.run(None, feed)
t5 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2, t5 - t4)
"""


def tiny_model() -> onnx.ModelProto:
    """MatMul + Add + Relu on [1, 16] x [16, 16]: a model whose own cost is nothing."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        [w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def child_env() -> dict[str, str]:
    """The children's environment: bytecode cached, as for an installed package.

    A checkout run with PYTHONDONTWRITEBYTECODE=1 (this machine's default) would compile every
    graphrt module from source in every process, a cost no installed runtime pays; the cache
    goes to a folder of its own (PYTHONPYCACHEPREFIX), so the checkout stays clean.
    """
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "graphrt-bench-pycache")
    return env


def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _child(code: str, path: str, threads: int) -> tuple[float, float, list[float]]:
    """Wall and CPU seconds of one child (interpreter start included), and its own split."""
    cpu0, t0 = _cpu_children(), time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code, path, str(threads)],
        capture_output=True,
        text=True,
        check=False,
        env=child_env(),
    )
    wall, cpu = time.perf_counter() - t0, _cpu_children() - cpu0
    if done.returncode != 0:
        raise RuntimeError(f"child failed on {path}:\n{done.stderr}")
    return wall, cpu, [float(x) for x in done.stdout.split()[-4:]]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}"


def part_process(paths: dict[str, str], threads: int, rounds: int) -> None:
    print("\n## Whole process: `python -c` import + session + one run (fresh process each round)\n")
    print(
        "| model | gr wall ms | ort wall ms | gr/ort wall | gr/ort CPU | gr import numpy / "
        "graphrt / create / 1st run ms | ort import numpy / onnxruntime / create / 1st run ms |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, path in paths.items():
        walls: dict[str, list[float]] = {"gr": [], "ort": []}
        cpus: dict[str, list[float]] = {"gr": [], "ort": []}
        parts: dict[str, list[list[float]]] = {"gr": [], "ort": []}
        _child(_GR_CHILD, path, threads)  # page cache warm for both (files, shared objects)
        _child(_ORT_CHILD, path, threads)
        for _ in range(rounds):
            for key, code in (("gr", _GR_CHILD), ("ort", _ORT_CHILD)):
                wall, cpu, split = _child(code, path, threads)
                walls[key].append(wall)
                cpus[key].append(cpu)
                parts[key].append(split)
        med = {k: statistics.median(v) for k, v in walls.items()}
        cpu = {k: statistics.median(v) for k, v in cpus.items()}
        split = {
            k: " / ".join(_ms(statistics.median(c)) for c in zip(*v)) for k, v in parts.items()
        }
        print(
            f"| {name} | {_ms(med['gr'])} | {_ms(med['ort'])} | {med['gr'] / med['ort']:.2f} | "
            f"{cpu['gr'] / cpu['ort']:.2f} | {split['gr']} | {split['ort']} |",
            flush=True,
        )


def _feed(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    inits = {t.name for t in model.graph.initializer}
    feed = {}
    for vi in model.graph.input:
        if vi.name not in inits:
            dims = [d.dim_value if d.dim_value > 0 else 1 for d in vi.type.tensor_type.shape.dim]
            feed[vi.name] = rng.standard_normal(dims, dtype=np.float32)
    return feed


def part_session(names: list[str], threads: int, rounds: int) -> None:
    import onnxruntime as ort

    import graphrt

    print("\n## In process: new session + first run (fresh session each round)\n")
    print(
        "| model | gr create ms | gr 1st run ms | ort create ms | ort 1st run ms | "
        "create gr/ort | 1st run gr/ort | create+run gr/ort |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in names:
        model = onnx.load(os.path.join(LIGHT_DIR, f"{name}.onnx"))
        data, feed = model.SerializeToString(), _feed(model)
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")

        def gr(data: bytes = data, feed: dict = feed) -> tuple[float, float]:
            t0 = time.perf_counter()
            s = graphrt.Session(data, intra_op_threads=threads)
            t1 = time.perf_counter()
            s.run(None, feed)
            t2 = time.perf_counter()
            s.close()
            return t1 - t0, t2 - t1

        def theirs(data: bytes = data, feed: dict = feed, so: Any = so) -> tuple[float, float]:
            t0 = time.perf_counter()
            s = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
            t1 = time.perf_counter()
            s.run(None, feed)
            t2 = time.perf_counter()
            return t1 - t0, t2 - t1

        gr()  # warm-up: imports, plugin discovery, first-touch of kernel modules
        theirs()
        times: dict[str, list[tuple[float, float]]] = {"gr": [], "ort": []}
        for _ in range(rounds):
            times["gr"].append(gr())
            times["ort"].append(theirs())
        c = {k: statistics.median(t[0] for t in v) for k, v in times.items()}
        r = {k: statistics.median(t[1] for t in v) for k, v in times.items()}
        both = {k: statistics.median(t[0] + t[1] for t in v) for k, v in times.items()}
        print(
            f"| {name} | {_ms(c['gr'])} | {_ms(r['gr'])} | {_ms(c['ort'])} | {_ms(r['ort'])} | "
            f"{c['gr'] / c['ort']:.2f} | {r['gr'] / r['ort']:.2f} | "
            f"{both['gr'] / both['ort']:.2f} |",
            flush=True,
        )


def importtime(code: str) -> tuple[list[tuple[int, int, str]], set[str]]:
    """(self µs, cumulative µs, module) rows of ``-X importtime`` for ``code``, and the
    heavy modules it left in sys.modules (run twice: the first fills the bytecode cache)."""
    subprocess.run([sys.executable, "-c", code], check=True, env=child_env())
    probe = f"{code}\nimport sys\nprint(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env=child_env(),
    )
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, cum, mod = line[len("import time:") :].split("|")
        rows.append((int(own), int(cum), mod.rstrip()))
    heavy = {m for m in done.stdout.strip().split(",") if m}
    return rows, heavy


def part_imports(tiny_path: str, top: int) -> None:
    cases = {
        "import graphrt": "import graphrt",
        "import graphrt + Session(tiny)": (
            f"import graphrt\ngraphrt.Session({tiny_path!r}, intra_op_threads=1)"
        ),
        "import onnxruntime": "import onnxruntime",
    }
    for title, code in cases.items():
        rows, heavy = importtime(code)
        total = sum(own for own, _, _ in rows)
        print(f"\n## `python -X importtime`: {title} (total {total / 1e3:.1f} ms of imports)\n")
        print(f"heavy modules imported: {', '.join(sorted(heavy)) or 'none'}\n")
        print("| module | self ms | cumulative ms |")
        print("|---|---|---|")
        # Imports at the first two levels (what the runtime imports directly, and what those
        # pull in) by cumulative time, then the worst self times at any depth.
        shallow = [r for r in rows if not r[2].startswith("     ")]
        for own, cum, mod in sorted(shallow, key=lambda r: -r[1])[:top]:
            print(f"| {mod.strip()} | {own / 1e3:.1f} | {cum / 1e3:.1f} |")
        print("\nlargest self times:\n")
        for own, cum, mod in sorted(rows, key=lambda r: -r[0])[:top]:
            print(f"- {mod.strip()}: {own / 1e3:.1f} ms (cumulative {cum / 1e3:.1f})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--parts", default="process,session,imports")
    parser.add_argument("--top", type=int, default=12, help="rows per importtime table")
    args = parser.parse_args(argv)
    parts = args.parts.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        tiny = os.path.join(tmp, "tiny_mlp.onnx")
        onnx.save(tiny_model(), tiny)
        if "process" in parts:
            paths = {
                "light_squeezenet": os.path.join(LIGHT_DIR, "light_squeezenet.onnx"),
                "tiny_mlp": tiny,
            }
            part_process(paths, args.threads, args.rounds)
        if "session" in parts:
            part_session(["light_resnet50", "light_densenet121"], args.threads, args.rounds)
        if "imports" in parts:
            part_imports(tiny, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
