"""The tests ``pytest --graphrt-plugin NAME`` adds (graphrt.testing collects this file).

Parametrized at collection from the plugin's operators, the author's ``pytest_graphrt_cases``
and onnx's backend node cases; see graphrt.testing.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

from graphrt.testing import contract

_KEY = pytest.StashKey[dict]()


@dataclasses.dataclass
class _Item:
    id: str
    op: contract.Operator
    sample: Any  # a Sample, or a backend case (made into a sample when run)
    check: str

    def run(self) -> None:
        if self.check == "no_samples":
            pytest.skip(
                f"{self.op.label}: no sample inputs (onnx has no backend case of it): register "
                f"a graphrt.testing.Case in a pytest_graphrt_cases hook"
            )
        if self.check == "backend":
            sample = contract._backend_sample(self.sample)
            if not sample.deterministic:
                pytest.skip(f"{self.op.label} draws random values: onnx's recorded draw differs")
            contract.check_backend(self.op, sample)
        else:
            contract.run_check(self.check, self.op, self.sample)


def _split(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _wanted(op: contract.Operator, only: list[str]) -> bool:
    if not only:
        return True
    name = f"{op.domain}.{op.op_type}" if op.domain else op.op_type
    return op.op_type in only or name in only


def _params(config: Any) -> dict[str, list[Any]]:
    cached = config.stash.get(_KEY, None)
    if cached is not None:
        return cached
    only = _split(config.getoption("graphrt_ops"))
    checks = _split(config.getoption("graphrt_checks")) or None
    n_samples = config.getoption("graphrt_samples")
    n_backend = config.getoption("graphrt_backend_cases")
    out: dict[str, list[Any]] = {"backend": [], "contract": []}
    for plugin in config.getoption("graphrt_plugin"):
        cases = [c for result in config.hook.pytest_graphrt_cases(plugin=plugin) for c in result]
        known: dict[str, str] = {}
        for result in config.hook.pytest_graphrt_known_failures(plugin=plugin):
            known.update(result)
        ops = [op for op in contract.operators_of(plugin) if _wanted(op, only)]
        items: list[_Item] = []
        for op in ops:
            prefix = f"{plugin}:{op.label}:{op.since}"
            if n_backend != 0 and op.opdef is not None:
                found = contract.backend_cases(op)
                found = found if n_backend < 0 else found[:n_backend]
                items += [_Item(f"{prefix}:{c.name}", op, c, "backend") for c in found]
            samples = contract.samples_for(op, cases, n_samples)
            for sample in samples:
                for name in contract.applicable_checks(op, sample, checks):
                    items.append(_Item(f"{prefix}:{sample.name}:{name}", op, sample, name))
            if not samples:
                items.append(_Item(f"{prefix}:no-samples", op, None, "no_samples"))
        for item in items:
            marks = [
                pytest.mark.xfail(reason=why, strict=True)
                for pattern, why in known.items()
                if re.search(pattern, item.id)
            ]
            group = "backend" if item.check == "backend" else "contract"
            out[group].append(pytest.param(item, id=item.id, marks=marks[:1]))
    config.stash[_KEY] = out
    return out


def pytest_generate_tests(metafunc: Any) -> None:
    if "graphrt_item" not in metafunc.fixturenames:
        return
    group = "backend" if metafunc.function.__name__ == "test_backend_case" else "contract"
    params = _params(metafunc.config)[group]
    metafunc.parametrize("graphrt_item", params or [pytest.param(None, marks=_none(group))])


def _none(group: str) -> Any:
    return pytest.mark.skip(reason=f"no {group} tests for the operators selected")


def test_backend_case(graphrt_item: _Item) -> None:
    graphrt_item.run()


def test_contract(graphrt_item: _Item) -> None:
    graphrt_item.run()
