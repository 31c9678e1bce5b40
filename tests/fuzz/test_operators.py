"""Every operator of the installed plugins on generated models, in a worker process.

Each model must end in a result or a ``graphrt.SessionError`` on every kernel path (numpy, and
"auto" and "scalar" where the native plugin replaces the kernel): a crash, a hang, a raw
exception or an unbounded allocation fails the test, naming the saved case to replay.  The
default run is derandomized (a fixed seed per test) and bounded; ``tox -e fuzz`` runs the same
strategies with random seeds for as long as asked (tests/fuzz/run.py).
"""

from __future__ import annotations

import os
import warnings

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from .chains import PATTERNS, chain_case
from .harness import Pipeline
from .known import known_reason
from .models import node_case
from .mutate import mutated_case
from .operators import fuzz_operators

#: Examples per operator in the default run (native operators: three times as many).
EXAMPLES = int(os.environ.get("GRAPHRT_FUZZ_EXAMPLES", "6"))
OPERATORS = fuzz_operators()


def fixed_seed(examples: int):
    return settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )


def run_all(worker, strategy, examples: int) -> None:
    """Run every example; fail once at the end with every finding (each saved for replay)
    that is not a known, reported one (those are shown as warnings)."""
    pipeline = Pipeline(worker)
    findings = []

    @fixed_seed(examples)
    @given(case=strategy)
    def one(case):
        findings.extend(pipeline.add(case))

    one()
    findings.extend(pipeline.flush())
    findings = [f for f in findings if f.fatal]
    for f in findings:
        why = known_reason(f)
        if why is not None:
            warnings.warn(f"known fuzz finding ({why}): {f}", stacklevel=1)
    new = [f for f in findings if known_reason(f) is None]
    assert not new, "\n\n".join(map(str, new))


@pytest.mark.parametrize("op", OPERATORS, ids=str)
def test_operator(fuzz_worker, op) -> None:
    run_all(fuzz_worker, node_case(op), EXAMPLES * (3 if op.native or op.control_flow else 1))


@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_chain(fuzz_worker, pattern) -> None:
    run_all(fuzz_worker, chain_case(pattern), 3 * EXAMPLES)


@pytest.mark.parametrize(
    "op",
    [
        o
        for o in OPERATORS
        if o.native
        or o.op_type in ("Relu", "Add", "Reshape", "Loop", "If", "Gather", "Resize", "Slice")
    ],
    ids=str,
)
def test_mutated_model(fuzz_worker, op) -> None:
    run_all(fuzz_worker, mutated_case(node_case(op)), EXAMPLES)
