"""Shared test configuration: expected failures of the backend suite carry their reasons
(strict, except the cases whose expected outputs are random draws)."""

from __future__ import annotations

import re

import pytest


def pytest_collection_modifyitems(config, items):
    module = None
    for item in items:
        if item.module.__name__.endswith("test_backend"):
            module = item.module
            break
    if module is None:
        return
    patterns = [(re.compile(p), why, True) for p, why in module.EXPECTED_FAILURES.items()]
    patterns += [(re.compile(p), why, False) for p, why in module.RANDOM_OUTPUTS.items()]
    for item in items:
        if item.module is not module:
            continue
        for pattern, why, strict in patterns:
            if pattern.search(item.name):
                item.add_marker(pytest.mark.xfail(reason=why, strict=strict))
                break
