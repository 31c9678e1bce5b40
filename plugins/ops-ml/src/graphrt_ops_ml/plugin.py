"""The hook implementations graphrt finds through this package's entry point."""

from __future__ import annotations

from graphrt.plugin import OpDef, hookimpl


@hookimpl
def graphrt_operators() -> list[OpDef]:
    from .table import OPERATORS

    return list(OPERATORS)
