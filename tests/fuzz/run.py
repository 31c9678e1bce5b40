"""The long fuzz run (``tox -e fuzz``): ``python -m tests.fuzz.run [--minutes M] [--seed S]``.

The default run's strategies with random seeds, round after round over every operator (native
and control-flow operators, the multi-node patterns and mutated models weighted up) until the
time is spent (``GRAPHRT_FUZZ_MINUTES``, default 30).  Findings are deduplicated by operator,
kind and kernel path, each saved for replay; at the end it prints the inputs tried, the time,
the outcomes and every finding grouped by operator, and exits 1 if any finding is fatal.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import sys
import time

from hypothesis import HealthCheck, Phase, given, seed, settings

from .chains import PATTERNS, chain_case
from .harness import Pipeline, Worker
from .known import known_reason
from .models import node_case
from .mutate import mutated_case
from .operators import fuzz_operators

BATCH = 25  # examples per operator per round


def targets() -> list[tuple[str, object, int]]:
    """(name, strategy, weight) for every operator, pattern and mutated family."""
    out = []
    for op in fuzz_operators():
        weight = 3 if op.native or op.control_flow else 1
        out.append((str(op), node_case(op), weight))
        out.append((f"mutated/{op}", mutated_case(node_case(op)), 1 if op.native else 0))
    for pattern in sorted(PATTERNS):
        out.append((f"chain/{pattern}", chain_case(pattern), 3))
    return [t for t in out if t[2] > 0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--minutes", type=float, default=float(os.environ.get("GRAPHRT_FUZZ_MINUTES", "30"))
    )
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--only", default="", help="only targets whose name contains this")
    args = parser.parse_args(argv)
    master = args.seed if args.seed is not None else random.SystemRandom().getrandbits(32)
    rng = random.Random(master)
    print(f"fuzz: seed {master}, {args.minutes:g} minutes", flush=True)
    deadline = time.monotonic() + 60 * args.minutes
    start = time.monotonic()
    worker = Worker()
    pipeline = Pipeline(worker)
    outcomes: collections.Counter[str] = collections.Counter()
    findings: dict[tuple, list] = {}
    tried = runs = rounds = 0
    pool = [t for t in targets() if args.only in t[0]]
    while time.monotonic() < deadline:
        rounds += 1
        order = [t for t in pool for _ in range(t[2])]
        rng.shuffle(order)
        for name, strategy, _ in order:
            if time.monotonic() >= deadline:
                break

            @seed(rng.getrandbits(64))
            @settings(
                max_examples=BATCH,
                database=None,
                deadline=None,
                phases=[Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(case=strategy)
            def one(case):
                nonlocal tried
                if time.monotonic() >= deadline:
                    return
                tried += 1
                for f in pipeline.add(case):
                    findings.setdefault(f.signature(), []).append(f)

            try:
                one()
            except Exception as e:  # a generator bug must not end a 30-minute run silently
                outcomes[f"generator error: {type(e).__name__}"] += 1
                print(f"fuzz: {name}: generator error {type(e).__name__}: {e}", flush=True)
            for f in pipeline.flush():
                findings.setdefault(f.signature(), []).append(f)
            for reply in pipeline.replies:
                for r in reply["paths"].values():
                    runs += 1
                    kind = r["outcome"]
                    outcomes[kind if kind.startswith("SessionError") else kind.split(":")[0]] += 1
            pipeline.replies.clear()
        print(
            f"fuzz: round {rounds}: {tried} inputs, {time.monotonic() - start:.0f} s, "
            f"{len(findings)} distinct findings",
            flush=True,
        )
    worker.dispose()
    return report(tried, runs, time.monotonic() - start, outcomes, findings, worker)


def report(tried, runs, elapsed, outcomes, findings, worker) -> int:
    print("\n== fuzz summary ==")
    print(
        f"inputs tried: {tried} models ({runs} session runs over the kernel paths) in "
        f"{elapsed / 60:.1f} minutes; worker restarts: {worker.restarts}"
    )
    for outcome, count in outcomes.most_common():
        print(f"  {count:7d}  {outcome}")
    # one line per operator, kind and first line of the detail; the kernel paths listed
    groups: dict[tuple[str, str, str], list] = collections.defaultdict(list)
    for group in findings.values():
        f = group[0]
        first = f.detail.strip().splitlines()[0][:160] if f.detail.strip() else ""
        groups[(f.label, f.what, first)].extend(group)
    fatal = 0
    last = None
    for (label, what, first), group in sorted(groups.items()):
        if label != last:
            print(f"\n{label}:")
            last = label
        f = group[0]
        why = known_reason(f)
        tag = "known" if why else ("note" if not f.fatal else "NEW")
        fatal += f.fatal and why is None
        paths = ", ".join(sorted({g.path or "worker" for g in group}))
        print(f"  [{tag}] {what} on {paths} x{len(group)}: {first}")
        print(f"      replay: python -m tests.fuzz.replay {f.saved}")
    print(f"\n{fatal} new fatal finding kind(s)")
    return 1 if fatal else 0


if __name__ == "__main__":
    sys.exit(main())
