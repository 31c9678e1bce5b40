"""Products followed by a bias and an activation, fused into one node (bit-preserving).

Conv -> [Add per-channel bias] -> [Add Z] -> [activation] => FusedConv (or a Conv with the bias)
Gemm -> [Add bias]             -> [activation]      => FusedGemm (or a Gemm taking the bias)
MatMul -> [Add bias]           -> [activation]      => FusedMatMul

with an activation among Relu, Clip (constant bounds), Sigmoid and Gelu, and at least one of
the bracketed steps; Z is any tensor that is not a constant, added by an Add or a Sum of two
inputs (a residual connection: ResNet's ``Sum(conv, shortcut) -> Relu``).  Every value that
disappears is read by exactly one node and is no graph output; the weight is a float constant
(its shape tells the bias's shape apart).

Why the bits stay: a FusedConv adds Z with the residual Add's own call (its operands in its
order: attribute ``z_first``) after the product and bias, before the activation, as the graph
did.  A Conv or Gemm without a bias of its own adds the Add's constant with one
rounded add after the product, as the Add did (the same ``np.add`` on the same values; float32
and float64 only for Conv, whose narrower types round the product before an Add would);
FusedMatMul adds its bias with the same call; the activation is applied in place with the
calls the activation's own kernel makes (:mod:`graphrt_ops_basic.fused`).  In exact mode only
activations whose fused form is exact (``fused.EXACT_ACTIVATIONS``) are fused, so the pass
never turns a model exact mode runs into one it refuses.  A product that
already has a bias keeps the Add unfused: adding two biases at once would round differently.
"""

from __future__ import annotations

import math

import numpy as np

from graphrt.plugin import PassContext, PassGraph, PassNode

from ._match import (
    GRAPHRT,
    Fusion,
    FusionPass,
    float_constant,
    fusion,
    is_op,
    other_input,
    rewired,
    sole_reader,
)

FUSED = {"Conv": "FusedConv", "Gemm": "FusedGemm", "MatMul": "FusedMatMul"}


def _exact_activations() -> tuple[str, ...]:
    """fused.EXACT_ACTIVATIONS, imported by exact sessions only: the kernels' module is heavy
    and every session creation runs this pass."""
    from ..fused import EXACT_ACTIVATIONS

    return EXACT_ACTIVATIONS


class FuseProductActivation(FusionPass):
    name = "fuse_product_activation"
    min_level = "basic"
    preserves_bits = True
    order = 130

    def starts(self, node: PassNode) -> bool:
        return node.info.domain == "" and node.op_type in FUSED

    def fuse(self, graph: PassGraph, ctx: PassContext, product: PassNode) -> Fusion | None:
        op = product.op_type
        weight = float_constant(graph, product.inputs[1]) if len(product.inputs) > 1 else None
        if weight is None or len(product.outputs) != 1 or (op == "Gemm" and product.info.opset < 7):
            return None
        inputs = list(product.inputs)
        old = [product]
        value = product.outputs[0]
        reader = sole_reader(graph, value)
        takes_bias = op == "MatMul" or len(inputs) < 3 or not inputs[2]
        if takes_bias and is_op(reader, "Add", 7):
            bias = self._bias(graph, product, weight, reader)
            if bias is not None:
                inputs = inputs[:2] + [bias]
                old.append(reader)
                value = reader.outputs[0]
                reader = sole_reader(graph, value)
        residual: dict[str, int] = {}
        summed = is_op(reader, "Add", 7) or (is_op(reader, "Sum", 6) and len(reader.inputs) == 2)
        z = other_input(reader, value) if op == "Conv" and summed else None
        if z and z != value and float_constant(graph, z) is None:
            inputs = inputs[:3] + [""] * (3 - len(inputs)) + [z]
            residual = {"z_first": int(reader.inputs[0] == z)}
            old.append(reader)
            value = reader.outputs[0]
            reader = sole_reader(graph, value)
        act = activation_attrs(graph, reader, value)
        if act is not None and ctx.exact and act["activation"] not in _exact_activations():
            act = None  # left to its own node, which names itself if exact mode refuses it
        if act is not None:
            old.append(reader)
        if len(old) == 1:
            return None
        outputs = list(old[-1].outputs)
        attrs = {} if op == "MatMul" else dict(product.info.attrs)
        if op == "Gemm" and old[1].op_type == "Add":
            attrs["beta"] = 1.0  # the Add's constant, added once as it was
        if act is None and op != "MatMul" and not residual:  # the bias alone: the product takes it
            return old, rewired(product, inputs, outputs, attrs)
        return fusion(ctx, product, FUSED[op], inputs, old, {**attrs, **(act or {}), **residual})

    def _bias(
        self, graph: PassGraph, product: PassNode, weight: np.ndarray, add: PassNode
    ) -> str | None:
        """The name of a bias the product can take from ``add`` without changing the output's
        shape or bits (a new constant when it must be reshaped), else None."""
        c = float_constant(graph, other_input(add, product.outputs[0]) or "")
        if c is None or c.dtype != weight.dtype:
            return None
        op = product.op_type
        if op == "Conv":
            if weight.dtype not in (np.float32, np.float64):
                return None
            m, rank = weight.shape[0], weight.ndim
            if c.ndim > rank:
                return None
            shape = (1,) * (rank - c.ndim) + c.shape
            if any(d != 1 for i, d in enumerate(shape) if i != 1) or shape[1] not in (1, m):
                return None
            value = np.ascontiguousarray(np.broadcast_to(c.reshape(-1), (m,)))
            return graph.add_constant(product.outputs[0] + "_bias", value)
        if op == "Gemm":
            n = weight.shape[0] if product.info.attrs.get("transB", 0) else weight.shape[-1]
            if weight.ndim != 2 or c.ndim > 2 or math.prod(c.shape[:-1]) != 1:
                return None
            return (
                other_input(add, product.outputs[0]) if c.shape[-1:] in ((), (1,), (n,)) else None
            )
        # MatMul: a bias of shape (), (1,) or (N,) never changes the product's shape
        if weight.ndim < 2 or c.shape not in ((), (1,), (weight.shape[-1],)):
            return None
        return other_input(add, product.outputs[0])


def activation_attrs(graph: PassGraph, node: PassNode | None, value: str) -> dict | None:
    """The fused-node attributes applying ``node`` to ``value``, if it is an activation we fuse
    (Relu, Clip with constant bounds, Sigmoid, Gelu) reading ``value`` as its only input."""
    if node is None or not node.inputs or node.inputs[0] != value or len(node.outputs) != 1:
        return None
    if node.info.domain == "" and node.op_type in ("Relu", "Sigmoid") and len(node.inputs) == 1:
        return {"activation": node.op_type}
    if is_op(node, "Clip"):
        return _clip_attrs(graph, node)
    gelu = is_op(node, "Gelu", 20) or (node.info.domain == GRAPHRT and node.op_type == "Gelu")
    if gelu and len(node.inputs) == 1:
        return {"activation": "Gelu", "approximate": node.info.attrs.get("approximate", "none")}
    return None


def _clip_attrs(graph: PassGraph, node: PassNode) -> dict | None:
    bounds = [-math.inf, math.inf]
    if node.info.opset < 11:
        for k, key in enumerate(("min", "max")):
            if node.info.attrs.get(key) is not None:
                bounds[k] = float(node.info.attrs[key])
    else:
        for k, name in enumerate(node.inputs[1:3]):
            if not name:
                continue
            value = float_constant(graph, name)
            if value is None or value.size != 1:
                return None
            bounds[k] = float(value.reshape(()))
    return {"activation": "Clip", "activation_params": bounds}
