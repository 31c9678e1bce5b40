"""Replay a saved fuzz case: ``python -m tests.fuzz.replay CASE.pkl [--here] [--show]``.

By default the case runs in a fresh worker process (a crash or hang is reported, not
suffered); ``--here`` runs it in this process (for a debugger or a full traceback) and
``--show`` prints the model, the inputs and the options first.
"""

from __future__ import annotations

import argparse
import pickle
import sys

import numpy as np


def describe(case) -> str:
    import onnx
    import onnx.printer

    lines = [
        f"label: {case.label}",
        f"paths: {case.paths}",
        f"options: {case.options}",
        f"cancel_after: {case.cancel_after}, twice: {case.twice}",
    ]
    if case.call is not None:
        lines.append(f"call: {case.call[0]}({case.call[1]!r})")
        return "\n".join(lines)
    for name, value in (case.feeds or {}).items():
        if isinstance(value, np.ndarray):
            lines.append(f"input {name}: {value.dtype} {list(value.shape)}")
        else:
            lines.append(f"input {name}: {type(value).__name__} {value!r:.200}")
    try:
        model = onnx.load_from_string(case.model)
        lines.append(onnx.printer.to_text(model.graph))
        lines.append(f"opsets: {[(o.domain, o.version) for o in model.opset_import]}")
    except Exception as e:  # mutated bytes need not parse
        lines.append(f"model does not parse: {e}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("case")
    parser.add_argument("--here", action="store_true", help="run in this process")
    parser.add_argument("--show", action="store_true", help="print the case first")
    args = parser.parse_args(argv)
    with open(args.case, "rb") as f:
        case = pickle.load(f)
    if args.show:
        print(describe(case))
    if args.here:
        from .worker import run_call, run_model

        if case.call is not None:
            print(run_call(case))
            return 0
        for path in case.paths:
            r = run_model(case, path)
            print(path, r["outcome"], f"{r['elapsed']:.3f} s")
            if r.get("detail"):
                print(r["detail"])
        return 0
    from .harness import Worker, verdicts

    worker = Worker()
    reply, failure = worker.run(case)
    worker.dispose()
    if failure is not None:
        print(failure)
        return 1
    for path, r in reply["paths"].items():
        print(path, r["outcome"], f"{r['elapsed']:.3f} s", (r.get("detail") or "")[:2000])
    found = verdicts(case, reply)
    for f in found:
        print("finding:", f)
    return 1 if any(f.fatal for f in found) else 0


if __name__ == "__main__":
    sys.exit(main())
