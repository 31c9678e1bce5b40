"""The hook implementations graphrt finds through this package's entry point."""

from __future__ import annotations

from graphrt.plugin import GraphPass, OpDef, hookimpl


@hookimpl
def graphrt_operators() -> list[OpDef]:
    from .table import OPERATORS

    return list(OPERATORS)


@hookimpl
def graphrt_graph_passes() -> list[GraphPass]:
    from .qdq import FuseQDQ

    return [FuseQDQ()]
