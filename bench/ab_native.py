"""A/B comparison of two builds of the native plugin (graphrt-ops-simd), interleaved.

A build is either a directory holding an importable ``graphrt_ops_simd`` package with its
compiled ``_native*.so`` (e.g. made by ``pip install --no-deps --target DIR ./plugins/ops-simd``)
or a git revision, which is checked out into a temporary ``git worktree`` (removed afterwards),
built with ``pip install --no-deps --target`` (own temporary CMake build dir, under
``flock /tmp/simd-build.lock``) and cached in ``~/.cache/graphrt-ab/<commit>``, so a second run
reuses it.  Without ``--b``/``--b-rev``, B is the build the virtualenv has installed now::

    .venv/bin/python bench/ab_native.py --a-rev c795459 --models light_shufflenet,mlp
    .venv/bin/python bench/ab_native.py --a /tmp/simd-old --b /tmp/simd-new --mode exact
    .venv/bin/python bench/ab_native.py --a-rev c795459 --micro        # GEMM and conv plans
    .venv/bin/python bench/ab_native.py --a-rev c795459 --build-only   # fill the cache

Each build runs in its own long-lived worker process (this script with ``--worker``, JSON lines
on stdin/stdout) that puts its directory first on ``sys.path`` and drops the editable install's
import redirect, so ``graphrt_ops_simd`` and ``_native`` come from that directory; the worker
checks where they were imported from and the parent prints it.  Everything else (graphrt core,
ops-basic, numpy) is the virtualenv's and the same on both sides, so the table isolates the
plugin.  Each worker builds a session per model (bench_models.py's builders and the light
models), warms up and hashes one run's outputs; then the parent alternates rounds of N runs,
A then B then B then A..., so load on a shared machine falls on both alike.  The table gives
per-run milliseconds (median over rounds of a round's mean, and the fastest single run), B/A of
the medians (below 1: B is faster), whether A's and B's outputs are bit-identical (a hash of one
run's outputs each; the largest difference when not) and how many intermediate values differ
(``Session.run_with_intermediates``: the light models' weights are constants, so their softmax
outputs can agree while the layers under them do not).  ``--micro`` times the native GEMM
(bench/gemm_micro.py's shapes; ``gemm_exact`` with ``--mode exact``) and the fast conv plans
(bench/conv_micro.py's layers) the same way, below the session layer.

Limits: fast-mode bits may differ between builds (a changed kernel choice or tile sums in another
order) and that is not a bug; exact mode (``--mode exact``) promises one operation order, so a
difference there is one.  Both workers share the machine (and its cores with ``--threads`` > 1)
at different moments, not at once.  A revision's Python side of the plugin runs against today's
core: a build too old for the current kernel contract fails to load (its error is printed).
Python code that changed between the builds is compared along with the native code.  The
installed build is the editable install: its Python files are the working tree's as they are now
(uncommitted edits included) and its ``_native`` is whatever was built last, not necessarily HEAD.
It is also built another way (its own build dir, an incremental build), and code layout alone
moves small kernels: the same source ran the depthwise kernel up to 25% apart as the editable
and as a ``--target`` build.  For differences of a few percent, build both sides alike
(``--a-rev`` and ``--b-rev``).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "graphrt-ab")
LOCK = "/tmp/simd-build.lock"
DEFAULT_MODELS = "light_shufflenet,exported_small_cnn"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- building a revision -------------------------------------------------------------------------


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", REPO, *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def build_revision(rev: str, rebuild: bool = False) -> str:
    """The cached ``--target`` directory of ``rev``'s plugins/ops-simd, built when missing."""
    commit = _git("rev-parse", "--verify", f"{rev}^{{commit}}")
    target = os.path.join(CACHE, commit)
    if os.path.isdir(target) and not rebuild:
        log(f"{rev} = {commit[:10]}: cached build {target}")
        return target
    missing = [m for m in ("scikit_build_core", "nanobind") if importlib.util.find_spec(m) is None]
    if missing:  # the build runs without isolation, in this interpreter
        raise SystemExit(
            f"building {rev} needs {' and '.join(missing)} in this environment: "
            f"{sys.executable} -m pip install 'scikit-build-core>=0.10' 'nanobind>=2.0'"
        )
    os.makedirs(CACHE, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="graphrt-ab-")
    tree, build_dir, staging = (os.path.join(tmp, d) for d in ("tree", "build", "target"))
    log(f"{rev} = {commit[:10]}: building in a worktree under {tmp}")
    _git("worktree", "add", "--detach", tree, commit)
    try:
        cmd = [
            "flock", LOCK, sys.executable, "-m", "pip", "install", "-q", "--no-deps",
            "--no-build-isolation", "--target", staging,
            f"--config-settings=build-dir={build_dir}",
            os.path.join(tree, "plugins", "ops-simd"),
        ]  # fmt: skip
        log("  " + " ".join(cmd))
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True)
        log(f"  built in {time.perf_counter() - t0:.0f} s")
        if os.path.isdir(target):
            shutil.rmtree(target)
        os.replace(staging, target)  # whole or absent: an interrupted build is not cached
    finally:
        _git("worktree", "remove", "--force", tree)
        shutil.rmtree(tmp, ignore_errors=True)
    return target


# -- the worker ----------------------------------------------------------------------------------


def _use_dir(folder: str) -> None:
    """Import graphrt_ops_simd from ``folder``: first on sys.path, and the editable install's
    meta-path redirect (scikit-build-core's, ahead of the path finder) removed."""
    from importlib.machinery import PathFinder

    sys.path.insert(0, folder)
    for finder in list(sys.meta_path):
        if finder is PathFinder or not hasattr(finder, "find_spec"):
            continue
        try:
            spec = finder.find_spec("graphrt_ops_simd", None)
        except Exception:
            continue
        if spec is not None and not (spec.origin or "").startswith(folder + os.sep):
            sys.meta_path.remove(finder)


def _digest(outputs: list[Any]) -> str:
    import numpy as np

    h = hashlib.sha256()
    for out in outputs:
        a = np.ascontiguousarray(out)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes() if a.dtype != object else repr(a.tolist()).encode())
    return h.hexdigest()[:16]


class Worker:
    """The cases of one build: name -> (callable, outputs)."""

    def __init__(self, folder: str | None) -> None:
        if folder:
            _use_dir(folder)
        sys.path.insert(1 if folder else 0, BENCH)
        import graphrt  # noqa: F401  (the virtualenv's core, after the path is set)
        import graphrt_ops_simd
        from graphrt_ops_simd import _native

        files = {"package": graphrt_ops_simd.__file__, "native": _native.__file__}
        if folder and not all(f.startswith(folder + os.sep) for f in files.values()):
            raise RuntimeError(f"graphrt_ops_simd not imported from {folder}: {files}")
        self.folder = folder
        self.info = {**files, "isas": list(_native.available_isas())}
        self.cases: dict[str, tuple[Any, list[Any]]] = {}

    def load(self, name: str, threads: int, mode: str, kernel_path: str | None) -> dict:
        import onnx
        from bench_models import BUILT, LIGHT_DIR, make_feed

        import graphrt

        path = os.path.join(LIGHT_DIR, f"{name}.onnx")
        if name in BUILT:
            model = BUILT[name]()
        elif os.path.isfile(path):
            model = onnx.load(path)
        else:
            light = sorted(f[:-5] for f in os.listdir(LIGHT_DIR) if f.endswith(".onnx"))
            raise ValueError(f"no model {name!r}; built: {', '.join(BUILT)}; {', '.join(light)}")
        feed = make_feed(model)
        sess = graphrt.Session(
            model.SerializeToString(), intra_op_threads=threads, mode=mode, kernel_path=kernel_path
        )
        plugin = sys.modules.get("graphrt_ops_simd.plugin")
        where = getattr(plugin, "__file__", None)
        if self.folder and (where is None or not where.startswith(self.folder + os.sep)):
            raise RuntimeError(f"the session's ops-simd plugin is {where}, not {self.folder}")
        fn = lambda: sess.run(None, feed)
        reply = self._add(name, fn, fn())
        # Every intermediate too: a light model's constant weights can flatten its outputs.
        kept = sess.run_with_intermediates(None, feed)[1]
        reply["values"] = {k: _digest([v]) for k, v in kept.items() if hasattr(v, "dtype")}
        return reply

    def load_micro(self, name: str, mode: str) -> dict:
        import numpy as np

        rng = np.random.default_rng(0)
        kind, _, shape = name.partition(" ")
        if kind == "gemm":
            import graphrt_ops_simd as simd

            m, k, n = (int(d) for d in shape.split("x"))
            a = rng.standard_normal((m, k)).astype(np.float32)
            b = rng.standard_normal((k, n)).astype(np.float32)
            out = np.empty((m, n), np.float32)
            isa = simd.available_isas()[-1]
            if mode == "exact":
                fn = lambda: simd.gemm_exact(a, b, out, isa)
            else:
                packed = simd.pack_b(b, isa)
                fn = lambda: simd.gemm(a, packed, out)
        else:
            import conv_micro

            layer = conv_micro.LAYERS[shape]
            _, _, w, bias = conv_micro.conv_model(*layer)
            x = rng.standard_normal((1, layer[0], layer[1], layer[1])).astype(np.float32)
            fn, out = conv_micro.native_kernel(layer, x, w, bias)
        fn()
        return self._add(name, fn, [out])

    def _add(self, name: str, fn: Any, outputs: list[Any]) -> dict:
        for _ in range(2):
            fn()
        self.cases[name] = (fn, outputs)
        return {"hash": _digest(outputs)}

    def save(self, name: str, path: str) -> dict:
        import numpy as np

        np.savez(path, *[np.asarray(o) for o in self.cases[name][1]])
        return {}

    def time(self, name: str, n: int) -> dict:
        fn = self.cases[name][0]
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return {"times": times}


def worker_main(folder: str) -> int:
    """JSON lines: one request in, one reply out; stdout is kept for them alone."""
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything printed (Python or native) goes to stderr
    sys.stdout = sys.stderr

    def reply(obj: dict) -> None:
        proto.write(json.dumps(obj) + "\n")
        proto.flush()

    try:
        worker = Worker(os.path.abspath(folder) if folder else None)
    except Exception as e:
        reply({"error": f"{type(e).__name__}: {e}"})
        return 1
    reply(worker.info)
    for line in sys.stdin:
        request = json.loads(line)
        op = request.pop("op")
        if op == "quit":
            break
        try:
            reply(getattr(worker, op)(**request))
        except Exception as e:
            reply({"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"})
    return 0


# -- the parent ----------------------------------------------------------------------------------


class Client:
    """One build's worker process."""

    def __init__(self, label: str, folder: str | None) -> None:
        self.label = label
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", folder or ""]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.info = self._read()
        if "error" in self.info:
            raise SystemExit(f"build {label} ({folder or 'installed'}): {self.info['error']}")

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"worker {self.label} exited (code {self.proc.wait()})")
        return json.loads(line)

    def call(self, op: str, **kwargs: Any) -> dict:
        self.proc.stdin.write(json.dumps({"op": op, **kwargs}) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
            self.proc.stdin.close()
            self.proc.wait(30)


def micro_cases(mode: str) -> list[str]:
    """gemm_micro's small and BERT shapes, conv_micro's layers (when importable; fast mode)."""
    sys.path.insert(0, BENCH)
    cases = []
    try:
        import gemm_micro

        cases += [f"gemm {m}x{k}x{n}" for m, k, n in gemm_micro.SMALL + gemm_micro.BERT]
    except ImportError as e:
        log(f"--micro: no GEMM cases ({e})")
    if mode == "exact":
        log("--micro --mode exact: no conv cases (conv_micro.native_kernel is the fast plan)")
        return cases
    try:
        import conv_micro

        cases += [f"conv {name}" for name in conv_micro.LAYERS]
    except ImportError as e:
        log(f"--micro: no conv cases ({e})")
    return cases


def compare_outputs(a: Client, b: Client, name: str) -> str:
    """The largest difference between A's and B's outputs (they hash differently)."""
    import numpy as np

    with tempfile.TemporaryDirectory() as tmp:
        paths = [os.path.join(tmp, f"{c.label}.npz") for c in (a, b)]
        for c, path in zip((a, b), paths):
            if "error" in c.call("save", name=name, path=path):
                return "no"
        with np.load(paths[0]) as fa, np.load(paths[1]) as fb:
            diffs = []
            for key in fa.files:
                x, y = fa[key], fb[key]
                if x.shape != y.shape:
                    return f"no (shapes {x.shape} vs {y.shape})"
                if x.dtype.kind in "fc":
                    diffs.append(float(np.max(np.abs(x.astype(np.float64) - y), initial=0.0)))
        return f"no (max abs diff {max(diffs, default=0.0):.3g})"


def measure(a: Client, b: Client, name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Interleaved rounds of one case; per-run seconds of each build."""
    if args.micro:
        loaded = [c.call("load_micro", name=name, mode=args.mode) for c in (a, b)]
    else:
        kw = {"threads": args.threads, "mode": args.mode, "kernel_path": args.kernel_path}
        loaded = [c.call("load", name=name, **kw) for c in (a, b)]
    errors = [f"{c.label}: {r['error']}" for c, r in zip((a, b), loaded) if "error" in r]
    if errors:
        return {"name": name, "error": "; ".join(errors)}
    n = args.iterations
    if n <= 0:  # about 50 ms of work per round
        probe = min(a.call("time", name=name, n=3)["times"])
        n = max(1, min(1000, int(0.05 / max(probe, 1e-7))))
    rounds: dict[str, list[float]] = {"A": [], "B": []}
    fastest = {"A": float("inf"), "B": float("inf")}
    for r in range(args.rounds):
        for c in (a, b) if r % 2 == 0 else (b, a):
            times = c.call("time", name=name, n=n)["times"]
            rounds[c.label].append(sum(times) / n)
            fastest[c.label] = min(fastest[c.label], *times)
    same = "yes" if loaded[0]["hash"] == loaded[1]["hash"] else compare_outputs(a, b, name)
    values = "-"
    if "values" in loaded[0]:
        va, vb = loaded[0]["values"], loaded[1]["values"]
        common = sorted(set(va) & set(vb))
        differ = [k for k in common if va[k] != vb[k]]
        values = f"{len(differ)}/{len(common)}" + (f" (e.g. {differ[0]})" if differ else "")
    return {
        "name": name,
        "n": n,
        "values": values,
        **{f"{k}_med": statistics.median(v) for k, v in rounds.items()},
        **{f"{k}_min": v for k, v in fastest.items()},
        "same": same,
    }


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4g}"


def table(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        "| case | runs/round | A ms (median) | A ms (min) | B ms (median) | B ms (min) | B/A "
        "| outputs A = B (bits) | intermediates differing |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['name']} | - | - | - | - | - | - | {row['error']} | - |")
            continue
        ratio = row["B_med"] / row["A_med"]
        lines.append(
            f"| {row['name']} | {row['n']} | {_ms(row['A_med'])} | {_ms(row['A_min'])} "
            f"| {_ms(row['B_med'])} | {_ms(row['B_min'])} | {ratio:.2f} | {row['same']} "
            f"| {row['values']} |"
        )
    return "\n".join(lines)


def resolve(label: str, folder: str | None, rev: str | None, rebuild: bool) -> str | None:
    if folder and rev:
        raise SystemExit(f"--{label.lower()} and --{label.lower()}-rev: give one")
    if rev:
        return build_revision(rev, rebuild)
    if folder:
        folder = os.path.abspath(folder)
        if not os.path.isdir(os.path.join(folder, "graphrt_ops_simd")):
            raise SystemExit(f"{folder} holds no graphrt_ops_simd package")
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", help="directory holding build A's graphrt_ops_simd")
    parser.add_argument("--a-rev", help="git revision to build A from (cached)")
    parser.add_argument("--b", help="directory holding build B (default: the installed build)")
    parser.add_argument("--b-rev", help="git revision to build B from (cached)")
    parser.add_argument("--rebuild", action="store_true", help="rebuild cached revisions")
    parser.add_argument("--build-only", action="store_true", help="build the revisions, stop")
    parser.add_argument("--models", default=DEFAULT_MODELS, help="comma-separated model names")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads")
    parser.add_argument("--rounds", type=int, default=20, help="rounds per build")
    parser.add_argument("--iterations", type=int, default=0, help="runs per round (0: ~50 ms)")
    parser.add_argument("--mode", choices=("fast", "exact"), default="fast")
    parser.add_argument("--kernel-path", help="graphrt kernel path (default: auto)")
    parser.add_argument("--micro", action="store_true", help="native GEMM and conv plans")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is not None:
        return worker_main(args.worker)
    if not (args.a or args.a_rev):
        parser.error("build A: --a DIR or --a-rev REV")
    dirs = [
        resolve("A", args.a, args.a_rev, args.rebuild),
        resolve("B", args.b, args.b_rev, args.rebuild),
    ]
    if args.build_only:
        return 0
    clients = [Client(label, d) for label, d in zip("AB", dirs)]
    try:
        for c, d in zip(clients, dirs):
            log(f"{c.label}: {d or 'the installed build'}; package {c.info['package']}")
            log(f"   _native {c.info['native']} (ISAs {', '.join(c.info['isas'])})")
        names = micro_cases(args.mode) if args.micro else [m for m in args.models.split(",") if m]
        rows = []
        for name in names:
            log(f"{name}...")
            rows.append(measure(*clients, name, args))
    finally:
        for c in clients:
            c.close()
    what = "native plans" if args.micro else f"{args.threads} intra-op thread(s)"
    print(f"A/B, {what}, {args.mode} mode, {args.rounds} interleaved rounds per build\n")
    print(table(rows, args))
    for c, d in zip(clients, dirs):
        print(f"\n{c.label}: {d or 'installed build'} ({c.info['native']})", end="")
    print()
    if args.mode == "fast":
        print("\nfast mode: outputs may differ in bits between builds; exact mode should not.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
