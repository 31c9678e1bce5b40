"""Which operators of onnx's backend node cases the installed plugins provide, without running
them: every operator the cases use is in the table, except the deferred ones of
tests/test_backend.py, and each deferred operator really is missing (the list shrinks when the
issue that owns it lands)."""

from __future__ import annotations

import pytest

from graphrt.plugins import snapshot
from tests.ops.node_cases import all_cases
from tests.test_backend import DEFERRED_OPERATORS

_DOMAIN_ALIASES = {"ai.onnx": ""}


def _suite_operators() -> dict[tuple[str, str], dict[int, str]]:
    """(domain, op_type) -> {opset: a case that uses it} over the node cases and their bodies."""
    found: dict[tuple[str, str], dict[int, str]] = {}

    def visit(graph, opsets, case):
        for node in graph.node:
            domain = _DOMAIN_ALIASES.get(node.domain, node.domain)
            opset = opsets.get(domain)
            if opset is not None:
                found.setdefault((domain, node.op_type), {}).setdefault(opset, case)
            for attr in node.attribute:
                for body in [attr.g] if attr.HasField("g") else list(attr.graphs):
                    visit(body, opsets, case)

    for case in all_cases():
        if case.model is None:
            continue
        imports = case.model.opset_import
        opsets = {_DOMAIN_ALIASES.get(o.domain, o.domain): o.version for o in imports}
        local = {(f.domain, f.name) for f in case.model.functions}
        visit(case.model.graph, opsets, case.name)
        for key in local:
            found.pop(key, None)
    return found


def _label(domain: str, op_type: str) -> str:
    return f"{domain}.{op_type}" if domain else op_type


@pytest.fixture(scope="module")
def table():
    return snapshot()


def test_every_operator_of_the_node_cases_is_provided_or_deferred(table):
    missing = []
    for (domain, op_type), opsets in sorted(_suite_operators().items()):
        label = _label(domain, op_type)
        if label in DEFERRED_OPERATORS:
            continue
        for opset, case in sorted(opsets.items()):
            if table.lookup(domain, op_type, opset) is None:
                missing.append(f"{label} (opset {opset}, e.g. {case})")
    assert not missing, "no plugin provides: " + "; ".join(missing)


def test_deferred_operators_are_really_missing(table):
    provided = []
    for label in DEFERRED_OPERATORS:
        domain, _, op_type = label.rpartition(".")
        if table.definitions.get((domain, op_type)):
            provided.append(label)
    assert not provided, f"now provided, drop from DEFERRED_OPERATORS: {', '.join(provided)}"
