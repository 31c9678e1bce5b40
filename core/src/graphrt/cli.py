"""The ``graphrt`` command: run, check, ops, explain, profile, new-plugin.

Results go to stdout; progress messages go to stderr (``-q`` silences them).  User errors print
``graphrt: error: <message>`` on stderr and exit with status 2; ``graphrt check`` exits 1 when the
model cannot run in fast mode; a closed stdout (``graphrt ops | head``) exits 141 without a trace.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from collections.abc import Sequence
from typing import Any, TextIO

import numpy as np

from graphrt.cli_inputs import (
    CLIError,
    make_inputs,
    parse_dims,
    session_inputs,
)
from graphrt.cli_models import DEFAULT_MODEL, LIGHT_NOTE, default_model_path, is_light, model_arg
from graphrt.errors import SessionError

__all__ = ["DEFAULT_MODEL", "CLIError", "default_model_path", "main", "make_inputs"]


class Progress:
    """Progress messages on stderr, silent when quiet."""

    def __init__(self, quiet: bool, stream: TextIO | None = None) -> None:
        self.quiet = quiet
        self.stream = stream if stream is not None else sys.stderr
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def say(self, message: str) -> None:
        if not self.quiet:
            print(message, file=self.stream, flush=True)

    def count(self, label: str, done: int, total: int) -> None:
        """A progress line, rewritten in place on a terminal, printed once at the end otherwise."""
        if self.quiet:
            return
        if self._tty:
            end = "\n" if done == total else ""
            print(f"\r{label}: {done}/{total}", end=end, file=self.stream, flush=True)
        elif done == total:
            print(f"{label}: {done}/{total}", file=self.stream, flush=True)


# -- output --------------------------------------------------------------------------------------


def summarize(value: Any, first: int = 5) -> str:
    """``float32 [1, 1000]  min -3.2 max 4.1 mean 0.01  first [0.1, ...]`` for one output."""
    if isinstance(value, list):
        return f"sequence of {len(value)}" + (
            f"; first: {summarize(value[0], first)}" if value else ""
        )
    if value is None:
        return "none (empty optional)"
    arr = np.asarray(value)
    head = f"{arr.dtype.name} {list(arr.shape)}"
    flat = arr.reshape(-1)
    if arr.size and (arr.dtype.kind in "biufc" or arr.dtype.kind == "V"):
        num = flat.astype(np.complex128 if arr.dtype.kind == "c" else np.float64)
        if arr.dtype.kind == "c":
            head += f"  mean {num.mean():.6g}"
        else:
            head += f"  min {num.min():.6g}  max {num.max():.6g}  mean {num.mean():.6g}"
    if arr.size:
        items = ", ".join(_scalar(x) for x in flat[:first])
        head += f"  first [{items}{', ...' if arr.size > first else ''}]"
    return head


def _scalar(x: Any) -> str:
    if isinstance(x, (np.floating, float)) or type(x).__name__ == "bfloat16":
        return f"{float(x):.6g}"
    return str(x.item() if isinstance(x, np.generic) else x)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


# -- sessions ------------------------------------------------------------------------------------


def _plugins(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [p.strip() for p in text.split(",") if p.strip()]


def _session(path: str, args: argparse.Namespace, progress: Progress, **extra: Any) -> Any:
    from graphrt.session import Session

    options = {
        "mode": getattr(args, "mode", "fast"),
        "intra_op_threads": getattr(args, "threads", 0),
        "optimization_level": getattr(args, "optimization_level", "all"),
        "plugins": _plugins(getattr(args, "plugins", None)),
        "check_shapes": getattr(args, "check_shapes", False),
        "kernel_path": getattr(args, "kernel_path", None),
    }
    options.update(extra)
    name = os.path.basename(path)
    progress.say(f"loading {name} and creating a session (mode {options['mode']})...")
    return Session(path, **options)


# -- commands ------------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace, progress: Progress) -> int:
    path, label = model_arg(args.model)
    print(f"model: {label}")
    _import_for_session(path)
    t0 = time.perf_counter()
    sess = _session(path, args, progress)
    created = time.perf_counter() - t0
    with sess:
        feed, given = session_inputs(sess, args.input, args.inputs, parse_dims(args.dim), args.seed)
        for d in sess.get_inputs():
            how = "given" if d.name in given else f"random, seed {args.seed}"
            declared = f"declared {_dims_text(d.shape)}, " if d.shape is not None else ""
            print(f"input  {d.name}: {summarize(feed[d.name])}  ({declared}{how})")
        progress.say("planning and running once...")
        t0 = time.perf_counter()
        outputs = sess.run(None, feed)
        first = time.perf_counter() - t0
        times = []
        for i in range(args.repeat):
            t0 = time.perf_counter()
            sess.run(None, feed)
            times.append(time.perf_counter() - t0)
            progress.count("steady-state runs", i + 1, args.repeat)
        for meta, value in zip(sess.get_outputs(), outputs):
            print(f"output {meta.name}: {summarize(value)}")
        if is_light(path):
            print(LIGHT_NOTE)
        if args.save:
            arrays = {m.name: v for m, v in zip(sess.get_outputs(), outputs)}
            np.savez(args.save, **{k: v for k, v in arrays.items() if isinstance(v, np.ndarray)})
            print(f"tensor outputs saved to {args.save}")
        threads = sess.threads
        print(
            f"session: {_ms(created)} to create (imports excluded); mode {args.mode}, "
            f"{threads} intra-op thread(s), kernel path {sess.kernel_path}"
        )
        print(f"first run (incl. plan): {_ms(first)}")
        if times:
            print(
                f"steady state: median {_ms(statistics.median(times))} over {len(times)} runs "
                f"(min {_ms(min(times))}, max {_ms(max(times))})"
            )
    return 0


def _import_for_session(path: str) -> None:
    """Import what making the session will, before it is timed: the session modules, and onnx
    for a model file in a text format (a binary .onnx is read without importing onnx)."""
    import graphrt.session  # noqa: F401
    from graphrt import proto

    if os.path.splitext(path)[1].lower() not in proto._BINARY_EXTENSIONS:  # proto.load_model's
        import onnx  # noqa: F401


def _walk_nodes(graph: Any) -> Any:
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.g is not None and attr.HasField("g"):
                yield from _walk_nodes(attr.g)
            for g in attr.graphs:
                yield from _walk_nodes(g)


def _dims_text(dims: Any) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _declared(d: Any) -> str:
    """``x tensor(float) [N, 3]``: a declared value with its symbols, as the model states it."""
    shape = "" if d.dims is None else " " + _dims_text(d.dims)
    return f"{d.name} {d.type}{shape}"


def cmd_check(args: argparse.Namespace, progress: Progress) -> int:
    from graphrt.errors import PluginError
    from graphrt.ir import decl, read_model
    from graphrt.plugins import snapshot

    path, label = model_arg(args.model)
    progress.say(f"loading {os.path.basename(path)}...")
    proto, _ = read_model(path)
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in proto.opset_import}
    functions = {(f.domain, f.name) for f in proto.functions}
    table = snapshot(_plugins(args.plugins))
    print(f"model: {label}")
    print("opsets: " + ", ".join(f"{d or 'ai.onnx'} {v}" for d, v in sorted(opsets.items())))
    print(f"plugins: {', '.join(table.plugins) or 'none'}")
    inits = {t.name for t in proto.graph.initializer}
    for label_, values in (("inputs", proto.graph.input), ("outputs", proto.graph.output)):
        shown = [_declared(decl(v)) for v in values if v.name not in inits]
        print(f"{label_}: " + ("; ".join(shown) or "none"))

    counts: dict[tuple[str, str], int] = {}
    for node in _walk_nodes(proto.graph):
        key = ("" if node.domain == "ai.onnx" else node.domain, node.op_type)
        counts[key] = counts.get(key, 0) + 1
    rows = [["operator", "nodes", "provided by", "exact"]]
    for (domain, op), n in sorted(counts.items()):
        name = f"{domain}.{op}" if domain else op
        opset = opsets.get(domain)
        if (domain, op) in functions:
            rows.append([name, str(n), "model-local function", "-"])
            continue
        try:
            found = None if opset is None else table.lookup(domain, op, opset)
        except PluginError as exc:
            rows.append([name, str(n), f"TIE: {exc.args[0]}", "-"])
            continue
        if found is None:
            where = "MISSING" if opset is not None else f"MISSING (domain {domain!r} not imported)"
            rows.append([f"{name} (opset {opset})", str(n), where, "-"])
        else:
            exact = "yes" if found.flag("supports_exact") else "no"
            rows.append([f"{name} (opset {opset})", str(n), found.plugin, exact])
    _print_table(rows)

    runnable = True
    try:
        sess = _session(path, args, progress, mode="fast")
    except SessionError as exc:
        runnable = False
        if exc.kind == "unsupported_operator" and exc.operators:
            print(f"missing operators ({len(exc.operators)}):")
            for op in exc.operators:
                print(f"  {op}")
        else:
            print(f"fast mode: cannot load: {exc}")
        print("fast mode: not runnable")
        print("exact mode: unknown until the model loads in fast mode")
        return 1
    with sess:
        print(f"fast mode: runnable ({len(sess.graph.nodes)} nodes after passes)")
        _check_plan(sess, args)
    try:
        with _session(path, args, progress, mode="exact") as exact:
            print("exact mode: available")
            _check_plan(exact, args)
    except SessionError as exc:
        if exc.kind == "exact_mode_unavailable":
            print(f"exact mode: unavailable for {len(exc.operators)} operator(s):")
            for op in exc.operators:
                print(f"  {op}")
        else:
            print(f"exact mode: unavailable: {exc}")
    return 0 if runnable else 1


def _check_plan(sess: Any, args: argparse.Namespace) -> None:
    """Try a plan for the declared shapes (symbolic dims from --dim, else 1); informational."""
    dims = parse_dims(args.dim)
    types = []
    for d in sess.get_inputs():
        if d.kind != "tensor" or d.shape is None or d.dtype is None:
            print(f"plan: not tried (input {d.name!r} has no declared tensor type and shape)")
            return
        shape = [
            dims.get(x, 1) if isinstance(x, str) else (x if isinstance(x, int) and x > 0 else 1)
            for x in d.shape
        ]
        types.append((d.dtype, tuple(shape)))
    try:
        plan = sess.plan_for(types)
    except SessionError as exc:
        print(f"plan for the declared shapes (symbolic dims = 1 unless --dim): failed: {exc}")
        return
    from graphrt.explain import native_summary

    dynamic = sum(1 for s in plan.steps if s.kind == "dynamic")
    print(
        f"plan for the declared shapes: {len(plan.steps)} steps ({dynamic} dynamic), "
        f"slab {plan.memory.size} bytes"
    )
    print(f"  {native_summary(plan)}")


def cmd_ops(args: argparse.Namespace, progress: Progress) -> int:
    from graphrt.plugins import plugin_failures, snapshot

    progress.say("loading plugins...")
    table = snapshot(_plugins(args.plugins))
    failures = plugin_failures()
    rows = [["operator", "domain", "plugin", "opsets", "priority", "flags"]]
    defs = sorted(table.all_definitions(), key=lambda d: (d.domain, d.op_type, d.since, d.plugin))
    shown = 0
    for d in defs:
        if args.filter and args.filter.lower() not in d.op_type.lower():
            continue
        flags = []
        if d.flag("supports_exact"):
            flags.append("exact")
        ip = d.flag("in_place_input")
        if ip is not None:
            flags.append(f"in-place(input {ip})")
        if d.flag("view_of_input"):
            flags.append("view")
        if d.flag("outputs_data_dependent"):
            flags.append("data-dependent")
        rows.append(
            [
                d.op_type,
                d.domain or "ai.onnx",
                d.plugin,
                d.opset_range,
                str(d.priority),
                ", ".join(flags) or "-",
            ]
        )
        shown += 1
    _print_table(rows)
    print(f"{shown} operator definition(s) from plugins: {', '.join(table.plugins) or 'none'}")
    _print_paths(table)
    ties = _ties(table)
    if ties:
        print(f"ties ({len(ties)}): sessions using these operators fail until one plugin wins")
        for t in ties:
            print(f"  {t}")
    if failures:
        print(f"plugins that failed to load ({len(failures)}):")
        for name, why in sorted(failures.items()):
            print(f"  {name}: {why}")
    return 0


def _print_paths(table: Any) -> None:
    """The kernel paths of the installed plugins, and the one a session with "auto" gets."""
    from graphrt.paths import BASE_PATH, ENV_VAR, choose_path, path_available

    paths = sorted(table.paths, key=lambda p: -p.rank)
    if not paths:
        print(f"kernel paths: {BASE_PATH} only")
        return
    print("kernel paths:")
    for p in paths:
        state = "available" if path_available(p) else "not available on this machine"
        ops = ", ".join(sorted(f"{domain}.{op}" if domain else op for domain, op in p.kernels))
        print(f"  {p.name} (rank {p.rank}, plugin {p.plugin}): {state}; {ops}")
    print(f"  {BASE_PATH}: always available (the operator table's own kernels)")
    best = choose_path(list(table.paths), "auto")
    print(f"auto picks: {best.name if best else BASE_PATH}")
    forced = os.environ.get(ENV_VAR)
    if forced:
        print(f"{ENV_VAR}={forced}: sessions without kernel_path= use it")


def _ties(table: Any) -> list[str]:
    ties = []
    for (domain, op), defs in sorted(table.definitions.items()):
        for i, a in enumerate(defs):
            for b in defs[i + 1 :]:
                if a.plugin != b.plugin and a.priority == b.priority and a.overlaps(b):
                    ties.append(
                        f"{domain or 'ai.onnx'}::{op}: {a.plugin!r} ({a.opset_range}) and "
                        f"{b.plugin!r} ({b.opset_range}), priority {a.priority}"
                    )
    return ties


def cmd_explain(args: argparse.Namespace, progress: Progress) -> int:
    from graphrt.explain import explain

    path, label = model_arg(args.model)
    sess = _session(path, args, progress)
    with sess:
        feed = make_inputs(
            sess, inputs=args.input, npz=args.inputs, dims=parse_dims(args.dim), seed=args.seed
        )
        progress.say("planning...")
        plan = sess.plan_for([feed[d.name] for d in sess.get_inputs()])
        print(f"model: {label}")
        print(explain(plan), end="")
    return 0


def cmd_profile(args: argparse.Namespace, progress: Progress) -> int:
    from graphrt.profile import Profiler

    path, label = model_arg(args.model)
    sess = _session(path, args, progress)
    with sess:
        feed = make_inputs(
            sess, inputs=args.input, npz=args.inputs, dims=parse_dims(args.dim), seed=args.seed
        )
        progress.say("planning and warming up...")
        sess.run(None, feed)
        prof = Profiler(max_events=args.max_events)
        for i in range(args.repeat):
            sess.run(None, feed, profiler=prof)
            progress.count("profiled runs", i + 1, args.repeat)
        print(f"model: {label}")
        print(prof.summary())
        if args.trace:
            prof.write_chrome_trace(args.trace)
            print(f"Chrome trace written to {args.trace} (open in ui.perfetto.dev)")
        if args.memory_plot:
            from graphrt.memplot import plot_memory

            plan = sess.plan_for([feed[d.name] for d in sess.get_inputs()])
            try:
                plot_memory(plan, args.memory_plot)
            except ImportError as exc:  # matplotlib is an optional extra
                raise CLIError(str(exc)) from None
            print(f"memory plot (slab timeline) written to {args.memory_plot}")
    return 0


def _print_table(rows: list[list[str]]) -> None:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())


# -- parser --------------------------------------------------------------------------------------


def _add_session_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mode", choices=("fast", "exact"), default="fast", help="numeric mode")
    p.add_argument(
        "--threads", type=int, default=0, metavar="T", help="intra-op threads (0 = one per core)"
    )
    p.add_argument("--plugins", metavar="A,B", help="use only these plugins ('' for none)")
    p.add_argument("--optimization-level", choices=("none", "basic", "all"), default="all")
    p.add_argument("--check-shapes", action="store_true", help="check shape annotations")
    _add_kernel_path(p)


def _add_kernel_path(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--kernel-path",
        metavar="PATH",
        help="auto (default), numpy, or a native path (scalar, avx2, avx512); see graphrt ops",
    )


def _add_input_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="a .npy input")
    p.add_argument("--inputs", metavar="FILE.npz", help="inputs from an .npz archive, by name")
    p.add_argument("--dim", action="append", metavar="SYMBOL=N", help="symbolic dim (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")


def cmd_new_plugin(args: argparse.Namespace, progress: Progress) -> int:
    from graphrt.newplugin import NewPluginError, create_plugin, plugin_names

    try:
        names = plugin_names(args.name)
        target = create_plugin(args.name, args.dir)
    except NewPluginError as exc:
        raise CLIError(str(exc)) from None
    print(f"created {names.dist} (import {names.package}, plugin {names.plugin}) in {target}")
    print(f"next: pip install -e '{target}[test]' && cd {target} && pytest")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from graphrt import __version__

    parser = argparse.ArgumentParser(prog="graphrt", description="Run and inspect ONNX models.")
    parser.add_argument("--version", action="version", version=f"graphrt {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    common = argparse.ArgumentParser(add_help=False)  # -q after the command works too
    common.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("run", parents=[common], help="run a model on given or random inputs")
    p.add_argument(
        "model",
        nargs="?",
        metavar="MODEL",
        help=f"a .onnx file, or a model shipped with onnx by name (default: {DEFAULT_MODEL})",
    )
    _add_input_options(p)
    _add_session_options(p)
    p.add_argument("--repeat", type=int, default=10, metavar="R", help="timed runs (10)")
    p.add_argument("--save", metavar="FILE.npz", help="save the outputs")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "check", parents=[common], help="missing operators and exact-mode availability"
    )
    p.add_argument("model", metavar="MODEL", help="a .onnx file, or a model shipped with onnx")
    p.add_argument("--plugins", metavar="A,B", help="use only these plugins")
    p.add_argument(
        "--dim", action="append", metavar="SYMBOL=N", help="symbolic dim sizes for the trial plan"
    )
    _add_kernel_path(p)
    p.set_defaults(func=cmd_check)

    p = sub.add_parser(
        "ops", parents=[common], help="every operator with its plugin, opsets and flags"
    )
    p.add_argument("filter", nargs="?", help="only operators whose name contains this")
    p.add_argument("--plugins", metavar="A,B", help="use only these plugins")
    p.set_defaults(func=cmd_ops)

    p = sub.add_parser("explain", parents=[common], help="the plan: schedule, slab offsets, reuse")
    p.add_argument("model", metavar="MODEL")
    _add_input_options(p)
    _add_session_options(p)
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser(
        "profile", parents=[common], help="per-operator times; a Chrome trace; a memory plot"
    )
    p.add_argument(
        "model",
        nargs="?",
        metavar="MODEL",
        help=f"a .onnx file, or a model shipped with onnx by name (default: {DEFAULT_MODEL})",
    )
    _add_input_options(p)
    _add_session_options(p)
    p.add_argument("--repeat", type=int, default=10, metavar="R", help="profiled runs (10)")
    p.add_argument(
        "--trace",
        metavar="FILE.json",
        help="write a Chrome/Perfetto trace: one event per node (and per body iteration)",
    )
    p.add_argument(
        "--memory-plot",
        metavar="FILE.png",
        help="draw the slab timeline (needs matplotlib: pip install graphrt[plot])",
    )
    p.add_argument("--max-events", type=int, default=100_000, help="events kept (newest)")
    p.set_defaults(func=cmd_profile)

    p = sub.add_parser(
        "new-plugin", parents=[common], help="create a plugin distribution to start from"
    )
    p.add_argument("name", metavar="NAME", help="e.g. 'audio': graphrt-ops-audio")
    p.add_argument("--dir", metavar="DIR", help="where (default ./graphrt-ops-NAME)")
    p.set_defaults(func=cmd_new_plugin)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``graphrt`` console script; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse already printed
        return exc.code if isinstance(exc.code, int) else 2
    if getattr(args, "repeat", 0) < 0:
        return _error("--repeat must be >= 0")
    progress = Progress(args.quiet)
    previous = warnings.showwarning

    def show(message: Any, category: Any, *rest: Any, **kw: Any) -> None:
        print(f"graphrt: warning: {message}", file=sys.stderr)

    warnings.showwarning = show
    try:
        return args.func(args, progress)
    except SessionError as exc:
        return _error(str(exc))
    except CLIError as exc:
        return _error(str(exc))
    except KeyboardInterrupt:
        print("graphrt: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`graphrt ops | head`): stop quietly, as a shell tool would,
        # and point stdout at /dev/null so the interpreter's final flush cannot raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    finally:
        warnings.showwarning = previous


def _error(message: str) -> int:
    print(f"graphrt: error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
