"""graphrt.testing: a pytest plugin that checks an operator plugin keeps the kernel contract.

Shipped with the core and registered through the ``pytest11`` entry point, it does nothing
unless asked: ``pytest --graphrt-plugin ops-NAME`` adds tests for every operator the plugin
provides (its table's lines and its kernel paths' kernels):

- ``test_backend_case``: onnx's backend node cases of the operator, compared as onnx's runner
  compares them;
- ``test_contract``: per sample input, the promises the kernel's flags make (the failure message
  starts with the promise): ``reference`` (the author's reference function), ``exact``
  (``supports_exact``: the same bits over 1/2/4 intra-op threads and every kernel path),
  ``in_place`` (``in_place_input``: output written over the input gives what separate buffers
  give), ``view`` (``view_of_input``), ``data_dependent`` (``outputs_data_dependent``),
  ``thread_safety`` (8 threads on one session) and ``steady_state`` (no numpy allocation in a
  static plan's steady-state run).

Samples and references come from the author: a ``pytest_graphrt_cases(plugin)`` hook in a
conftest.py returning :class:`Case` objects.  Operators without one use the inputs of their
onnx backend cases.  ``pytest_graphrt_known_failures(plugin)`` maps test-id regexes to reasons
(strict xfail).  The same checks are a fixture, ``graphrt_contract``, for an author's own tests.
See docs/plugins.md, "6. Testing: graphrt.testing".

Without ``--graphrt-plugin`` it adds options, two hook specifications and a fixture, and imports
nothing beyond ``import graphrt`` (a subpackage's parent is imported with it): no session, no
onnx, no plugin.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from graphrt.testing.cases import Case

__all__ = ["Case", "Contract"]


class _Hooks:
    """The hooks an author's conftest.py may implement (pytest collects them by name)."""

    def pytest_graphrt_cases(self, plugin: str) -> list[Case]:
        """Sample inputs and references for operators of ``plugin`` (a list of Case)."""

    def pytest_graphrt_known_failures(self, plugin: str) -> Mapping[str, str]:
        """Test-id regex -> reason: those generated tests are marked strict xfail."""


def pytest_addhooks(pluginmanager: Any) -> None:
    pluginmanager.add_hookspecs(_Hooks)


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("graphrt", "graphrt plugin contract checks (graphrt.testing)")
    group.addoption(
        "--graphrt-plugin",
        action="append",
        default=[],
        metavar="NAME",
        help="generate contract tests for every operator of this graphrt plugin (repeatable)",
    )
    group.addoption(
        "--graphrt-only",
        action="store_true",
        help="collect only the generated contract tests (not testpaths or the paths given)",
    )
    group.addoption(
        "--graphrt-ops",
        default="",
        metavar="A,B",
        help="only these operators (op_type or domain.op_type)",
    )
    group.addoption(
        "--graphrt-samples",
        type=int,
        default=2,
        metavar="N",
        help="samples per operator for the contract checks (2)",
    )
    group.addoption(
        "--graphrt-backend-cases",
        type=int,
        default=-1,
        metavar="N",
        help="onnx backend cases per operator (-1: all, 0: none)",
    )
    group.addoption(
        "--graphrt-checks",
        default="",
        metavar="A,B",
        help="only these contract checks (reference, exact, in_place, view, data_dependent, "
        "thread_safety, steady_state)",
    )


def pytest_configure(config: Any) -> None:
    """With --graphrt-plugin, collect the generated tests besides the others (alone with
    --graphrt-only)."""
    if not config.getoption("graphrt_plugin", None):
        return
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_generated.py")
    if config.getoption("graphrt_only"):
        config.args[:] = [here]
    elif not any(os.path.abspath(a.split("::")[0]) == here for a in config.args):
        config.args.append(here)


class Contract:
    """The contract checks for use in an author's own tests (the ``graphrt_contract`` fixture).

    ``check(plugin, op_type, cases=[...])`` runs every check that applies to the operator on
    its samples (``cases``, else its onnx backend cases) and returns the names of the checks
    run; a broken promise raises an AssertionError naming it.
    """

    def __init__(self, config: Any = None) -> None:
        self._config = config

    def operators(self, plugin: str) -> list[Any]:
        from graphrt.testing.contract import operators_of

        return operators_of(plugin)

    def check(
        self,
        plugin: str,
        op_type: str,
        *,
        domain: str | None = None,
        cases: Sequence[Case] = (),
        checks: Sequence[str] | None = None,
        samples: int = 2,
    ) -> list[str]:
        from graphrt.testing import contract

        ops = [
            op
            for op in contract.operators_of(plugin)
            if op.op_type == op_type and domain in (None, op.domain)
        ]
        if not ops:
            raise contract.ContractError(f"plugin {plugin!r} provides no operator {op_type!r}")
        done: list[str] = []
        for op in ops:
            for sample in contract.samples_for(op, list(cases), samples):
                for name in contract.applicable_checks(op, sample, checks):
                    contract.run_check(name, op, sample)
                    done.append(f"{op.label}/{sample.name}/{name}")
        return done


@pytest.fixture
def graphrt_contract(request: Any) -> Contract:
    """graphrt.testing's contract checks, for a plugin author's own tests."""
    return Contract(request.config)
