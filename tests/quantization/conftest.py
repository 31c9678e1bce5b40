"""Tests of graphrt-ops-contrib and of onnxruntime-quantized models: skipped, with the reason,
when graphrt-ops-contrib is not installed (a fixture: pytest refuses a skip raised by a
conftest it loads first)."""

from __future__ import annotations

import importlib.util

import pytest

REASON = "graphrt-ops-contrib (plugins/ops-contrib, import graphrt_ops_contrib) is not installed"
MISSING = importlib.util.find_spec("graphrt_ops_contrib") is None


@pytest.fixture(autouse=True)
def _needs_ops_contrib() -> None:
    if MISSING:
        pytest.skip(REASON)
    from tests._versions import old_oracles

    old = old_oracles()
    if old:
        pytest.skip(old)
