"""A convolution and the MaxPool reading it, fused into one node (bit-preserving).

Conv / FusedConv -> MaxPool => FusedConvPool

for a 2-D convolution (a constant 4-D weight) whose output only the MaxPool reads and is no
graph output, and a 2-D MaxPool (``kernel_shape`` of two) with one output (no Indices).  The
fused node runs the convolution's kernel and then the pool's, or a native path runs them in
bands of rows with the same arithmetic (:mod:`graphrt_ops_basic.conv_pool`), so the bits are the
pair's in either mode.  Runs after fuse_product_activation (130), so the convolution has its
bias, residual and activation already.
"""

from __future__ import annotations

from graphrt.plugin import PassContext, PassGraph, PassNode

from ._match import GRAPHRT, Fusion, FusionPass, float_constant, fusion, sole_reader


class FuseConvPool(FusionPass):
    name = "fuse_conv_pool"
    min_level = "basic"
    preserves_bits = True
    order = 135  # after fuse_product_activation (130)

    def starts(self, node: PassNode) -> bool:
        return (node.info.domain, node.op_type) in (("", "Conv"), (GRAPHRT, "FusedConv"))

    def fuse(self, graph: PassGraph, ctx: PassContext, conv: PassNode) -> Fusion | None:
        weight = float_constant(graph, conv.inputs[1]) if len(conv.inputs) > 1 else None
        if weight is None or weight.ndim != 4 or len(conv.outputs) != 1:
            return None
        pool = sole_reader(graph, conv.outputs[0])
        if (
            pool is None
            or pool.info.domain != ""
            or pool.op_type != "MaxPool"
            or pool.inputs != [conv.outputs[0]]
            or any(pool.outputs[1:])
            or len(pool.info.attrs.get("kernel_shape", ())) != 2
        ):
            return None
        attrs = dict(conv.info.attrs)
        attrs.update({f"pool_{k}": v for k, v in pool.info.attrs.items()})
        attrs["pool_opset"] = pool.info.opset
        return fusion(ctx, conv, "FusedConvPool", conv.inputs, [conv, pool], attrs)
