"""The fuzz worker (``python -m tests.fuzz.worker``): runs the cases its parent sends.

Each model case is loaded with ``graphrt.Session(bytes, ...)`` and run once (twice when the
case asks) on every kernel path it names; the reply says how each ended ("ok" or
"SessionError:<kind>" are the acceptable outcomes; "raw:<type>" is any other exception), whether
the caller's input arrays were modified, the peak resident size and the time.  A native-call
case names a function ``module:function`` to call with its argument; any Python exception is
acceptable there (only a crash is not).

The protocol runs on the original stdout; file descriptor 1 is pointed at stderr so that
anything printed (by Python or native code) cannot corrupt it.
"""

from __future__ import annotations

import faulthandler
import importlib
import os
import pickle
import resource
import struct
import sys
import threading
import time
import traceback
from typing import Any

import numpy as np

_HEADER = struct.Struct("<Q")


def _limit_memory() -> None:
    limit = int(os.environ.get("GRAPHRT_FUZZ_RLIMIT_AS", "0"))
    if limit and "asan" not in os.environ.get("LD_PRELOAD", ""):  # ASan's shadow is huge
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _cache_operator_tables() -> None:
    """Build each operator table once: ``snapshot`` rescans the entry points for every session
    (20-30 ms, by design), and the fuzzed models do not change the installed plugins."""
    import graphrt.session
    from graphrt.plugins import snapshot

    tables: dict[Any, Any] = {}

    def cached(plugins=None, custom_kernels=None, strict=None):
        if custom_kernels:
            return snapshot(plugins, custom_kernels, strict)
        key = (None if plugins is None else tuple(plugins), strict)
        if key not in tables:
            tables[key] = snapshot(plugins, None, strict)
        return tables[key]

    graphrt.session.snapshot = cached


def _memory(key: str) -> int:
    """A size from /proc/self/status in bytes (VmRSS, VmHWM); 0 where there is none."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) << 10
    except OSError:
        pass
    return 0


def _reset_peak() -> int:
    """Start a new peak resident size (Linux: clear_refs 5 resets VmHWM); the current size."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return _memory("VmRSS")


def _warm_up() -> None:
    """Import what the kernels import lazily (ml_dtypes, every plugin module) before the
    first case, so that no case's time includes a first import."""
    import pkgutil

    from graphrt import dtypes

    getattr(dtypes, "load_ml_dtypes", lambda: None)()
    for package in ("graphrt_ops_basic", "graphrt_ops_controlflow", "graphrt_ops_simd"):
        try:
            module = importlib.import_module(package)
        except ImportError:
            continue
        for info in pkgutil.walk_packages(module.__path__, f"{package}."):
            try:
                importlib.import_module(info.name)
            except Exception:  # a module that cannot import is the plugin's own problem
                pass


def _fingerprint(feeds: dict[str, Any] | None) -> dict[str, Any]:
    def one(v: Any) -> Any:
        if isinstance(v, np.ndarray):
            return v.copy()
        if isinstance(v, (list, tuple)):
            return [one(x) for x in v]
        return v

    return {k: one(v) for k, v in (feeds or {}).items()}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray):
        if not isinstance(b, np.ndarray) or a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.dtype.kind == "O":
            return bool(np.all(a == b))
        return a.tobytes() == b.tobytes()
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    return a is b or a == b


def _describe(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return (str(value.dtype), value.shape)
    if isinstance(value, list):
        return ("seq", [_describe(v) for v in value])
    return None if value is None else type(value).__name__


def derived_feeds(session: Any, seed: int) -> dict[str, Any] | None:
    """Inputs for a model the worker has not seen (mutated bytes): from its declarations,
    symbolic dims as 2; None when a declared input would be too large to make."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, Any] = {}
    for arg in session.get_inputs():
        if arg.kind != "tensor" or arg.dtype is None:
            feeds[arg.name] = [] if arg.kind == "sequence" else None
            continue
        shape = [d if isinstance(d, int) and d >= 0 else 2 for d in (arg.shape or [])]
        if any(d > 1 << 20 for d in shape) or np.prod(shape, dtype=np.float64) > 1 << 20:
            return None
        dtype = np.dtype(arg.dtype)
        if dtype.kind == "O":
            feeds[arg.name] = np.full(shape, "a", object)
        elif dtype.kind in "iub":
            feeds[arg.name] = rng.integers(0, 3, shape).astype(dtype)
        else:
            feeds[arg.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def run_model(case: Any, path: str) -> dict[str, Any]:
    import graphrt

    token = graphrt.CancellationToken() if case.cancel_after else None
    timer = threading.Timer(case.cancel_after, token.cancel) if token is not None else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    report: dict[str, Any] = {}
    start = time.perf_counter()
    feeds = case.feeds
    before = None
    try:
        session = graphrt.Session(case.model, kernel_path=path, cancellation=token, **case.options)
        if feeds is None:
            feeds = derived_feeds(session, case.seed)
            if feeds is None:
                report["outcome"] = "skipped: declared inputs too large"
                return report
        before = _fingerprint(feeds)
        for _ in range(2 if case.twice else 1):
            results = session.run(None, feeds, cancellation=token)
        report["outcome"] = "ok"
        report["outputs"] = [_describe(r) for r in results]
    except graphrt.SessionError as e:
        report["outcome"] = f"SessionError:{e.kind}"
        report["detail"] = str(e)[:400]
    except BaseException as e:  # everything else is what the fuzz looks for
        report["outcome"] = f"raw:{type(e).__name__}"
        trace = traceback.format_exc()[-8000:]
        report["detail"] = f"{type(e).__name__}: {str(e)[:400]}\n{trace}"
    finally:
        if timer is not None:
            timer.cancel()
        report["elapsed"] = time.perf_counter() - start
    if before is not None:
        changed = [k for k in before if not _same(before[k], feeds[k])]
        if changed:
            report["inputs_modified"] = changed
    return report


def run_call(case: Any) -> dict[str, Any]:
    target, argument = case.call
    module, name = target.split(":")
    start = time.perf_counter()
    try:
        getattr(importlib.import_module(module), name)(argument)
        outcome = "ok"
    except Exception as e:  # a Python exception from a native call is a clean refusal
        outcome = f"raised:{type(e).__name__}: {str(e)[:200]}"
    return {"outcome": outcome, "elapsed": time.perf_counter() - start}


def main() -> None:
    _limit_memory()
    channel_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    channel_in = sys.stdin.buffer

    def send(obj: Any) -> None:
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        channel_out.write(_HEADER.pack(len(data)) + data)
        channel_out.flush()

    try:
        import graphrt  # noqa: F401

        _cache_operator_tables()
        _warm_up()
    except Exception as e:  # tests/simd's native calls need no session; report and go on
        print(f"fuzz worker: graphrt unavailable: {e}", file=sys.stderr)
    timeout = float(os.environ.get("GRAPHRT_FUZZ_TIMEOUT", "10"))
    send({"ready": True, "pid": os.getpid()})
    while True:
        head = channel_in.read(_HEADER.size)
        if len(head) < _HEADER.size:
            return
        (size,) = _HEADER.unpack(head)
        case = pickle.loads(channel_in.read(size))
        # a hang's stack goes to stderr, which the parent quotes, just before it is killed
        faulthandler.dump_traceback_later(max(timeout - 1.0, 0.5))
        if case.call is not None:
            reply = {"paths": {"call": run_call(case)}}
            faulthandler.cancel_dump_traceback_later()
            send(reply)
            continue
        base = _reset_peak()
        paths = {path: run_model(case, path) for path in case.paths}
        peak = _memory("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
        for r in paths.values():
            r["base_rss"], r["peak_rss"] = base, peak
        rss = _memory("VmRSS")
        faulthandler.cancel_dump_traceback_later()
        send({"paths": paths, "restart": rss > (1 << 30)})


if __name__ == "__main__":
    main()
