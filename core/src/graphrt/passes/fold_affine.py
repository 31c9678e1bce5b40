"""Per-channel constant Mul/Add/Sub/Div folded into the Conv or BatchNormalization before them.

Caffe2-era exports (the onnx package's inception_v2 and densenet121) write each batch norm as
BatchNormalization followed by a ``Mul`` and an ``Add`` by per-channel constants: after
fuse_batchnorm_into_conv, ``Conv -> Mul -> Add -> Relu`` still made three passes over each
activation before the Relu could join the Conv.  Here the constants go into the producer's
parameters instead (float64 arithmetic, rounded once):

* Conv(X, W, B) then ``* v`` -> Conv(X, W * v, B * v); ``/ v`` likewise with ``1 / v``;
  ``+ v`` -> Conv(X, W, B + v); ``- v`` -> B - v.
* BatchNormalization(scale, bias, mean, var) then ``* v`` -> scale * v, bias * v; ``+ v`` ->
  bias + v (and ``/``, ``-`` as above).

``v`` must broadcast as one value per channel (axis 1) without changing the output's shape, so
the output's rank must be known: a Conv's is its weight's; a BatchNormalization's is found by
walking back through rank-keeping operators to a Conv or a pool.  It changes rounding, so it
runs in fast mode only, like the BatchNormalization fold.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from graphrt.passes.base import GraphPass, PassContext, PassGraph, PassNode
from graphrt.passes.fuse_bn import absorb_producers, count_owners, scaled_weight, value_index

#: Element-wise operators that fold, and whether the constant may be either operand.
_FOLDABLE = {"Mul": True, "Add": True, "Sub": False, "Div": False}
#: Operators whose output has their first input's rank (for finding a BatchNormalization's).
#: (Not the broadcasting binary operators: an operand of higher rank raises theirs.)
_SAME_RANK = frozenset(
    {"BatchNormalization", "Relu", "LeakyRelu", "Sigmoid", "Clip", "Identity", "Dropout",
     "Concat", "Tanh", "PRelu", "Elu", "Selu", "HardSigmoid"}
)  # fmt: skip
_POOLS = frozenset({"MaxPool", "AveragePool", "LpPool"})


class FoldChannelAffine(GraphPass):
    name = "fold_channel_affine"
    min_level = "all"
    preserves_bits = False
    order = 55  # after fuse_batchnorm_into_conv (50): a Conv's BatchNormalization is gone

    def run(self, graph: PassGraph, ctx: PassContext) -> bool:
        producers, readers = value_index(graph)
        owners = count_owners(graph)
        return absorb_producers(
            graph,
            lambda node: self._fold(graph, node, producers, readers, owners),
            producers,
            readers,
        )

    def _fold(
        self,
        graph: PassGraph,
        node: PassNode,
        producers: dict[str, PassNode],
        readers: dict[str, int],
        owners: dict[int, int],
    ) -> tuple[PassNode, PassNode] | None:
        either = _FOLDABLE.get(node.op_type)
        if either is None or node.info.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
            return None
        if len(node.outputs) != 1 or not node.outputs[0]:
            return None
        x, c = node.inputs
        if either and x in graph.constants and c not in graph.constants:
            x, c = c, x
        value = graph.constants.get(c)
        prod = producers.get(x)
        if value is None or prod is None or x == c or x in graph.constants:
            return None
        if readers.get(x) != 1 or graph.is_graph_output(x) or prod.info.domain != node.info.domain:
            return None
        if prod.op_type == "Conv":
            return self._into_conv(graph, node, prod, value, readers, owners)
        if prod.op_type == "BatchNormalization" and _inference_bn(prod):
            return self._into_bn(graph, node, prod, value, producers)
        return None

    def _into_conv(
        self,
        graph: PassGraph,
        node: PassNode,
        conv: PassNode,
        value: np.ndarray,
        readers: dict[str, int],
        owners: dict[int, int],
    ) -> tuple[PassNode, PassNode] | None:
        w = graph.constants.get(conv.inputs[1]) if len(conv.inputs) > 1 else None
        if w is None or w.dtype not in (np.float32, np.float64) or len(conv.inputs) > 3:
            return None
        has_bias = len(conv.inputs) > 2 and bool(conv.inputs[2])
        b = graph.constants.get(conv.inputs[2]) if has_bias else None
        if (has_bias and b is None) or value.dtype != w.dtype:
            return None
        v = _channel_vector(value, w.ndim, w.shape[0])
        if v is None:
            return None
        bias = np.zeros(w.shape[0]) if b is None else b.astype(np.float64)
        weight_name = conv.inputs[1]
        if node.op_type in ("Mul", "Div"):
            s = v if node.op_type == "Mul" else _reciprocal(v)
            if s is None:
                return None
            weight_name = graph.add_constant(
                conv.inputs[1] + "_scaled",
                scaled_weight(graph, conv, conv.inputs[1], w, s, readers, owners),
            )
            bias = bias * s
        else:
            bias = bias + v if node.op_type == "Add" else bias - v
        bias_name = graph.add_constant(node.outputs[0] + "_bias", bias.astype(w.dtype))
        return conv, _retarget(conv, [conv.inputs[0], weight_name, bias_name], node.outputs)

    def _into_bn(
        self,
        graph: PassGraph,
        node: PassNode,
        bn: PassNode,
        value: np.ndarray,
        producers: dict[str, PassNode],
    ) -> tuple[PassNode, PassNode] | None:
        params = [graph.constants.get(x) for x in bn.inputs[1:5]]
        if len(bn.inputs) < 5 or any(p is None for p in params):
            return None
        scale, bias = params[0], params[1]
        if scale.ndim != 1 or value.dtype != scale.dtype or bias.dtype != scale.dtype:
            return None
        rank = _rank(bn.inputs[0], graph, producers)
        v = None if rank is None else _channel_vector(value, rank, scale.shape[0])
        if v is None:
            return None
        scale64, bias64 = scale.astype(np.float64), bias.astype(np.float64)
        if node.op_type in ("Mul", "Div"):
            s = v if node.op_type == "Mul" else _reciprocal(v)
            if s is None:
                return None
            scale64, bias64 = scale64 * s, bias64 * s
        else:
            bias64 = bias64 + v if node.op_type == "Add" else bias64 - v
        hint = node.outputs[0]
        inputs = [
            bn.inputs[0],
            graph.add_constant(hint + "_scale", scale64.astype(scale.dtype)),
            graph.add_constant(hint + "_bias", bias64.astype(scale.dtype)),
            *bn.inputs[3:5],
        ]
        return bn, _retarget(bn, inputs, node.outputs)


def _retarget(prod: PassNode, inputs: list[str], outputs: list[str]) -> PassNode:
    """The producer with new parameters, writing the folded node's output (its NodeInfo kept:
    errors still name a node the model has)."""
    info = dataclasses.replace(prod.info, inputs=tuple(inputs), outputs=tuple(outputs))
    return PassNode(info, prod.op_def, list(inputs), list(outputs))


def _inference_bn(bn: PassNode) -> bool:
    attrs = bn.info.attrs
    if len([o for o in bn.outputs if o]) != 1 or attrs.get("training_mode", 0):
        return False
    if bn.info.opset < 7 and not attrs.get("is_test", 0):
        return False  # before opset 7, is_test=0 (the default) is training mode
    return attrs.get("spatial", 1) == 1


def _channel_vector(value: np.ndarray, rank: int, channels: int) -> np.ndarray | None:
    """``value`` as one float64 per channel, if it broadcasts so against an output of ``rank``
    dimensions with ``channels`` on axis 1 (and leaves that output's shape alone)."""
    if rank < 2 or value.ndim > rank or value.size not in (1, channels):
        return None
    shape = (1,) * (rank - value.ndim) + value.shape
    if shape[0] != 1 or shape[1] not in (1, channels) or any(d != 1 for d in shape[2:]):
        return None
    return np.broadcast_to(value.astype(np.float64).reshape(-1), (channels,))


def _reciprocal(v: np.ndarray) -> np.ndarray | None:
    return None if not np.all(v != 0) else 1.0 / v


def _rank(name: str, graph: PassGraph, producers: dict[str, PassNode]) -> int | None:
    """The rank of a value, from the operators before it (None where unknown)."""
    for _ in range(256):  # a chain this long without a Conv or a pool: give up
        node = producers.get(name)
        if node is None:
            return None
        if node.op_type == "Conv" and len(node.inputs) > 1:
            w = graph.constants.get(node.inputs[1])
            return None if w is None else w.ndim
        if node.op_type in _POOLS:
            kernel = node.info.attrs.get("kernel_shape")
            return None if kernel is None else len(kernel) + 2
        if node.op_type not in _SAME_RANK or node.info.domain not in ("", "ai.onnx"):
            return None
        if not node.inputs:
            return None
        name = node.inputs[0]
    return None
