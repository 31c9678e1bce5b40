"""Graph passes: rewrites between operator lookup and the first plan (docs/graph-passes.md).

A pass edits a :class:`PassGraph`: the node list in dependency order, constants by name and the
graph's outputs.  It never sees input shapes (shape-dependent work belongs to plans).  Passes run
in ``order``; those above the session's optimization level are skipped, and so is every pass that
does not preserve bits when the session is in exact mode.  Plugins add passes through the
``graphrt_graph_passes`` hook.
"""

from __future__ import annotations

from graphrt.passes.base import LEVELS, GraphPass, PassContext, PassGraph, PassNode
from graphrt.passes.constant_fold import ConstantFolding
from graphrt.passes.cse import EliminateCommonSubexpressions
from graphrt.passes.fold_affine import FoldChannelAffine
from graphrt.passes.fuse_bn import FuseBatchNormIntoConv

__all__ = ["LEVELS", "GraphPass", "PassContext", "PassGraph", "PassNode", "builtin_passes"]


def builtin_passes() -> list[GraphPass]:
    """A fresh instance of every built-in pass (passes may keep state while they run)."""
    return [
        ConstantFolding(),
        EliminateCommonSubexpressions(),
        FuseBatchNormIntoConv(),
        FoldChannelAffine(),
    ]
