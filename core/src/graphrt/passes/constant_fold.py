"""Constant folding: a node whose inputs are all constants is run once at session creation.

Bit-preserving by construction: the same kernel computes the same bits, only earlier.  Unlike the
plan's constant evaluation there is no 64 KiB rule, because what is folded here is what the model
would otherwise recompute in every run (ConstantOfShape weights, Shape->Gather chains over
constants).  What is folded stays in memory for the session's life, so it is bounded by the
session's ``max_memory``: the outputs a node's ``infer`` states are counted before they are
computed, and a node whose outputs would take the folded constants past the budget is left in
the graph (a run-time value, which a plan refuses with ``resource_exhausted`` if it can never
fit).  A 139-byte model cannot make ``Session()`` allocate gigabytes.
"""

from __future__ import annotations

import numpy as np

from graphrt.attrs import evaluable_early
from graphrt.errors import SessionError
from graphrt.ir import check_cancelled
from graphrt.kernel import evaluate_node
from graphrt.limits import RunLimits
from graphrt.passes.base import GraphPass, PassContext, PassGraph


class ConstantFolding(GraphPass):
    name = "constant_folding"
    min_level = "basic"
    preserves_bits = True
    order = 10

    def run(self, graph: PassGraph, ctx: PassContext) -> bool:
        changed = False
        kept = []
        room = ctx.max_memory  # what folded constants may still take
        # one errstate for the whole pass (entered per node, it cost as much as a small fold)
        with np.errstate(all="ignore"):
            for node in graph.nodes:
                check_cancelled(ctx.cancellation)
                if not self._foldable(node, graph):
                    kept.append(node)
                    continue
                kernel = ctx.make_kernel(node)
                args = [graph.constants[x] if x else None for x in node.inputs]
                try:
                    values = evaluate_node(
                        kernel,
                        args,
                        len(node.outputs),
                        exact=ctx.exact,
                        limits=RunLimits(max(room, 0)),
                        flags=(
                            ctx.kernel_flags(node, kernel)
                            if ctx.kernel_flags is not None
                            else node.op_def.kernel_flags
                        ),
                    )
                except SessionError as exc:
                    if exc.kind != "resource_exhausted":
                        raise
                    kept.append(node)  # too large to keep: computed by the plan or refused there
                    continue
                except Exception:  # leave it to run time, where the error names the run
                    kept.append(node)
                    continue
                if any(v is None for v, o in zip(values, node.outputs) if o):
                    kept.append(node)
                    continue
                for name, value in zip(node.outputs, values):
                    if name:
                        graph.constants[name] = value
                        if isinstance(value, np.ndarray) and value.flags.owndata:  # not a view
                            room -= value.nbytes
                changed = True
        graph.nodes = kept
        return changed

    @staticmethod
    def _foldable(node, graph: PassGraph) -> bool:
        # constant inputs first: a dict lookup each, where evaluable_early walks attributes
        if not all((not x) or x in graph.constants for x in node.inputs):
            return False
        if node.op_type == "Dropout" and len(node.inputs) > 2 and node.inputs[2]:
            return False
        return evaluable_early(node.info)
