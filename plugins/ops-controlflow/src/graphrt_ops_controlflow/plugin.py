"""The hook implementations graphrt finds through this package's entry point."""

from __future__ import annotations

from graphrt import hookimpl
from graphrt.kernel import OpDef


@hookimpl
def graphrt_operators() -> list[OpDef]:
    from .table import OPERATORS

    return list(OPERATORS)
