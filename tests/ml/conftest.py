"""Tests of the ai.onnx.ml plugin: skipped, with the reason, when graphrt-ops-ml is not installed.

A fixture rather than a module-level skip here: pytest refuses a skip raised by a conftest
it loads first (``pytest tests/ml``).  Test modules that import graphrt_ops_ml themselves
should also start with ``pytest.importorskip("graphrt_ops_ml", reason=REASON)``.
"""

from __future__ import annotations

import importlib.util

import pytest

REASON = "graphrt-ops-ml (plugins/ops-ml, import graphrt_ops_ml) is not installed"
MISSING = importlib.util.find_spec("graphrt_ops_ml") is None


@pytest.fixture(autouse=True)
def _needs_ops_ml() -> None:
    if MISSING:
        pytest.skip(REASON)
    from tests._versions import old_oracles

    old = old_oracles()
    if old:
        pytest.skip(old)
