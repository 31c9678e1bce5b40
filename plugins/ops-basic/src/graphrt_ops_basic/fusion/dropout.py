"""Dropout at inference becomes Identity (bit-preserving, level basic).

graphrt runs models for inference: a Dropout of opsets 1-11, or of opset 12 on without a
training_mode input or with a constant false one, copies its input (dropout.py) and fills its
mask with ones.  When nothing reads the mask, the node is replaced by an Identity, which ops-basic
plans as a view of its input: no copy and no mask per run.  The values are the input's either
way, so bits are preserved.
"""

from __future__ import annotations

import dataclasses

from graphrt.plugin import PassContext, PassGraph, PassNode

from ._match import Fusion, FusionPass, is_op


class EliminateInferenceDropout(FusionPass):
    name = "eliminate_inference_dropout"
    min_level = "basic"
    preserves_bits = True
    order = 100

    def starts(self, node: PassNode) -> bool:
        return is_op(node, "Dropout") and bool(node.inputs) and bool(node.outputs)

    def fuse(self, graph: PassGraph, ctx: PassContext, node: PassNode) -> Fusion | None:
        if not _inference(graph, node):
            return None
        mask = node.outputs[1] if len(node.outputs) > 1 else ""
        if mask and (graph.consumers(mask) or graph.is_graph_output(mask)):
            return None
        op_def = ctx.lookup("", "Identity")
        if op_def is None:
            return None
        inputs, outputs = [node.inputs[0]], [node.outputs[0]]
        info = dataclasses.replace(
            node.info,
            op_type="Identity",
            attrs={},
            inputs=tuple(inputs),
            outputs=tuple(outputs),
            proto=None,
        )
        return [node], PassNode(info, op_def, inputs, outputs)


def _inference(graph: PassGraph, node: PassNode) -> bool:
    """Whether the node runs in inference mode (what dropout.py decides, from the graph)."""
    if node.info.opset < 12 or len(node.inputs) < 3 or not node.inputs[2]:
        return True
    mode = graph.constants.get(node.inputs[2])
    return mode is not None and mode.size == 1 and not bool(mode.reshape(-1)[0])
