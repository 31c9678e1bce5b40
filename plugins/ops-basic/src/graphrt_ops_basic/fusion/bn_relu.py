"""Inference BatchNormalization followed by a Relu, fused into one com.graphrt node.

BatchNormalization(X, scale, B, mean, var) -> Relu => FusedBatchNormalization(activation=Relu)

for a BatchNormalization no Conv absorbed (fuse_batchnorm_into_conv, order 50, runs first; so
does fold_channel_affine, order 55, which turns DenseNet's BatchNormalization -> Mul -> Add into
one BatchNormalization): DenseNet's Concat -> BatchNormalization -> Relu -> Conv.  The fused
node is one pass over memory on a native path (graphrt_ops_simd.batchnorm) instead of the
affine pass and the Relu pass.  The four parameters must be constants (the per-channel scale
and shift are then folded once, at plan time), the node an inference one (one output, spatial),
and its output read by the Relu alone and no graph output.

The numpy kernel of the fused node makes the very calls of the two nodes, but a native path
computes the affine step with a fused multiply-add: the pass does not preserve bits and, like
the BatchNormalization fold, runs in fast mode at level "all" only.
"""

from __future__ import annotations

from graphrt.plugin import PassContext, PassGraph, PassNode

from ._match import Fusion, FusionPass, float_constant, fusion, is_op, sole_reader


class FuseBatchNormActivation(FusionPass):
    name = "fuse_batchnorm_activation"
    min_level = "all"
    preserves_bits = False
    order = 60  # after fuse_batchnorm_into_conv (50) and fold_channel_affine (55)

    def starts(self, node: PassNode) -> bool:
        return node.info.domain == "" and node.op_type == "BatchNormalization"

    def fuse(self, graph: PassGraph, ctx: PassContext, bn: PassNode) -> Fusion | None:
        attrs = bn.info.attrs
        if len(bn.inputs) != 5 or len([o for o in bn.outputs if o]) != 1 or not bn.outputs[0]:
            return None
        if attrs.get("training_mode", 0) or attrs.get("spatial", 1) != 1:
            return None
        if bn.info.opset < 7 and not attrs.get("is_test", 0):
            return None  # before opset 7, is_test=0 (the default) is training mode
        if any(float_constant(graph, name) is None for name in bn.inputs[1:5]):
            return None
        relu = sole_reader(graph, bn.outputs[0])
        if not is_op(relu, "Relu") or relu.inputs != [bn.outputs[0]] or len(relu.outputs) != 1:
            return None
        fused = {"epsilon": float(attrs.get("epsilon", 1e-5)), "activation": "Relu"}
        return fusion(ctx, bn, "FusedBatchNormalization", bn.inputs, [bn, relu], fused)
