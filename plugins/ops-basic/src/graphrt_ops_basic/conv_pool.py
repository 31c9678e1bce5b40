"""FusedConvPool (``com.graphrt``): a FusedConv followed by a MaxPool, one node.

fusion/conv_pool.py writes it for ``Conv / FusedConv -> MaxPool`` (CNN stems: light_squeezenet's
3x3/2 convolution and 3x3/2 pool, light_resnet50's 7x7/2 and 3x3/2; VGG's blocks).  The
convolution's attributes are the node's own, as FusedConv's; the MaxPool's carry a ``pool_``
prefix (``pool_kernel_shape``, ``pool_strides``, ``pool_pads``, ``pool_dilations``,
``pool_ceil_mode``, ``pool_auto_pad``, ``pool_storage_order``) and ``pool_opset`` is the
MaxPool's opset.  Its one output is the pool's (a MaxPool with Indices is not fused).

Here the two kernels run in turn through an intermediate array, the convolution's output, so a
fused node gives the pair's bits (exact mode too: each kernel's exact form).  A native path
(graphrt-ops-simd) may instead compute the convolution in bands of rows that the pool reduces
while they are still in cache (:meth:`FusedConvPool.banded`): the stem's output, 3.2 MB in
light_squeezenet, then never goes to memory and back.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._geometry import call_all
from .fused import FusedConv
from .pool import MaxPool

GRAPHRT = "com.graphrt"
#: The MaxPool attributes a FusedConvPool carries, each as ``pool_<name>``.
POOL_ATTRS = (
    "kernel_shape", "strides", "pads", "dilations", "ceil_mode", "auto_pad", "storage_order",
)  # fmt: skip


def conv_node(node: NodeInfo) -> NodeInfo:
    """The FusedConv a FusedConvPool starts with (its name, inputs and own attributes)."""
    attrs = {k: v for k, v in node.attrs.items() if not k.startswith("pool_")}
    mid = (node.outputs[0] + "/conv",)
    return dataclasses.replace(
        node, op_type="FusedConv", domain=GRAPHRT, attrs=attrs, outputs=mid, proto=None
    )


def pool_node(node: NodeInfo) -> NodeInfo:
    """The MaxPool a FusedConvPool ends with (ai.onnx, the opset it was written in)."""
    attrs = {k: node.attrs[f"pool_{k}"] for k in POOL_ATTRS if f"pool_{k}" in node.attrs}
    return dataclasses.replace(
        node, op_type="MaxPool", domain="", opset=int(node.attr("pool_opset", 12)), attrs=attrs,
        inputs=(node.outputs[0] + "/conv",), outputs=node.outputs[:1], proto=None,
    )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class ConvPoolPlan:
    conv: Any  # the FusedConv's plan
    pool: Any  # the MaxPool's plan
    product: int | None  # scratch index of the convolution's output (None: banded)
    pool_scratch: tuple[int, int]  # the MaxPool's scratch: indices [first, end) of this plan
    banded: Any = None  # a native path's plan running both in bands of rows


class FusedConvPool(OpKernel):
    """FusedConv (X, W, B, Z; activation) then MaxPool, with the two kernels of this path."""

    supports_exact = True

    def __init__(
        self, node: NodeInfo, conv: OpKernel | None = None, pool: OpKernel | None = None
    ) -> None:
        super().__init__(node)
        if any(node.outputs[1:]):
            raise self.fail("FusedConvPool has one output (a MaxPool's Indices are not fused)")
        self.conv = conv if conv is not None else FusedConv(conv_node(node))
        self.pool = pool if pool is not None else MaxPool(pool_node(node))

    def infer(self, ctx: InferContext) -> None:
        self.conv.infer(ctx)  # its checks, plan and scratch on this node's context
        conv_plan = ctx.prepared
        dtype, shape = ctx.output_types()[0]
        pooled = InferContext([dtype], [shape], [None], 1, exact=ctx.exact)
        self.pool.infer(pooled)
        pooled_type = pooled.output_types()[0]
        banded = self.banded(ctx, conv_plan, pooled.prepared, shape, pooled_type[1])
        product = None if banded is not None else ctx.add_scratch(dtype, shape)
        first = len(ctx.scratch)
        for scratch_dtype, scratch_shape in pooled.scratch:
            ctx.add_scratch(scratch_dtype, scratch_shape)
        ctx.set_output(0, *pooled_type)
        ctx.prepared = ConvPoolPlan(
            conv_plan, pooled.prepared, product, (first, len(ctx.scratch)), banded
        )

    def banded(
        self,
        ctx: InferContext,
        conv_plan: Any,
        pool_plan: Any,
        conv_shape: tuple[int, ...],
        pool_shape: tuple[int, ...],
    ) -> Any:
        """A plan that runs both in bands of rows, or None (here: always, through the product)."""
        return None

    def bind_banded(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        raise NotImplementedError(f"{type(self).__name__}.bind_banded")

    def bind(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        p: ConvPoolPlan = ctx.prepared
        if p.banded is not None:
            return self.bind_banded(ctx, inputs, outputs)
        product = ctx.scratch[p.product]
        conv_ctx = copy.copy(ctx)
        conv_ctx.prepared = p.conv
        pool_ctx = copy.copy(ctx)
        pool_ctx.prepared = p.pool
        pool_ctx.scratch = ctx.scratch[p.pool_scratch[0] : p.pool_scratch[1]]
        conv = self.conv.bind(conv_ctx, inputs, [product])
        pool = self.pool.bind(pool_ctx, [product], outputs[:1])
        return functools.partial(call_all, [conv, pool])

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        self.bind(ctx, inputs, outputs)()
