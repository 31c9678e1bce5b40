"""Constant folding: a node whose inputs are all constants is run once at session creation.

Bit-preserving by construction: the same kernel computes the same bits, only earlier.  Unlike the
plan's constant evaluation there is no size limit, because what is folded here is what the model
would otherwise recompute in every run (ConstantOfShape weights, Shape->Gather chains over
constants).
"""

from __future__ import annotations

import numpy as np

from graphrt.attrs import evaluable_early
from graphrt.errors import SessionError
from graphrt.ir import check_cancelled
from graphrt.kernel import evaluate_node
from graphrt.passes import GraphPass, PassContext, PassGraph


class ConstantFolding(GraphPass):
    name = "constant_folding"
    min_level = "basic"
    preserves_bits = True
    order = 10

    def run(self, graph: PassGraph, ctx: PassContext) -> bool:
        changed = False
        kept = []
        for node in graph.nodes:
            check_cancelled(ctx.cancellation)
            if not self._foldable(node, graph):
                kept.append(node)
                continue
            kernel = ctx.make_kernel(node)
            args = [graph.constants[x] if x else None for x in node.inputs]
            try:
                with np.errstate(all="ignore"):
                    values = evaluate_node(kernel, args, len(node.outputs), exact=ctx.exact)
            except SessionError:
                raise
            except Exception:  # leave it to run time, where the error names the run
                kept.append(node)
                continue
            if any(v is None for v, o in zip(values, node.outputs) if o):
                kept.append(node)
                continue
            for name, value in zip(node.outputs, values):
                if name:
                    graph.constants[name] = value
            changed = True
        graph.nodes = kept
        return changed

    @staticmethod
    def _foldable(node, graph: PassGraph) -> bool:
        if not evaluable_early(node.info):
            return False
        if node.op_type == "Dropout" and len(node.inputs) > 2 and node.inputs[2]:
            return False
        return all((not x) or x in graph.constants for x in node.inputs)
