"""Scaled dot-product attention written as primitives, fused into one Attention node.

    scores = MatMul(Q, Kt)              Kt = Transpose(K', perm of 4 axes) [-> Mul/Div c]
    scores = scores / c  or  * c        (either operand order of the Mul; optional)
    scores = scores + mask              (either order; optional)
    probs  = Softmax(scores, last axis) [-> Identity ...]  (an inference Dropout, after
    Y      = MatMul(probs, V)                              eliminate_inference_dropout)

as PyTorch's exporters write it on 4-D [batch, heads, seq, head] tensors: BERT's eager
attention (``Transpose(k, [0, 2, 3, 1])``, the head split and the key's transposition merged,
then a Div by sqrt(d)) and ``scaled_dot_product_attention`` (Q and the transposed K each
multiplied by sqrt(scale)).  Every constant factor met on the way -- on Q, on K before or after
its Transpose, on the scores -- goes into Attention's ``scale`` (their product, any finite
nonzero value: a pass does not know d, and the kernel takes any scale).  The key the kernel
reads is K' with the last two axes of the perm swapped back: K' itself when that is the
identity (``[0, 1, 3, 2]``), else a new Transpose (``[0, 2, 1, 3]`` for BERT's), which takes
the old one's place.

What is proven before fusing: the Transpose's four axes make Kt 4-D; Q and V are 4-D by
their producers (a Transpose of four axes, a Reshape to a constant shape of four elements, or
a scalar Mul/Div of such); the softmax runs over the last axis (``axis`` -1 or 3; before opset
13 the 2-D coercion at axis 3 of a 4-D tensor is the same); factors are float constants of
one element (at most 4-D, as the scores are); every value that disappears is read by exactly
one node and is no graph output.  The result is ``com.graphrt.Attention`` at every opset: the
ai.onnx kernel, except that a mask with one key broadcasts over every key as the Add did
(ai.onnx Attention pads a short mask with -inf), so the fused node computes what the graph did.

Where the fused node still differs: a row whose mask is -inf everywhere gives zeros rather than
NaN (exporters write finfo.min, not -inf, so such rows stay finite either way).  The kernel
scales Q and K and reorders the softmax (attention.py), so the pass does not preserve bits.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from graphrt.plugin import PassContext, PassGraph, PassNode

from ._match import GRAPHRT, Fusion, FusionPass, fusion, is_op, other_input, sole_reader

#: What the scores (or the key) come from: the nodes that go, [Q, K] (or K), the scale, and
#: the new Transpose of the key (if any).
_Found = tuple[list[PassNode], list[str], float, list[PassNode]]
_Key = tuple[list[PassNode], str, float, list[PassNode]]


class FuseAttention(FusionPass):
    name = "fuse_attention"
    min_level = "all"
    preserves_bits = False
    order = 140

    def starts(self, node: PassNode) -> bool:
        return is_op(node, "Softmax")

    def run(self, graph: PassGraph, ctx: PassContext) -> bool:
        gone: set[int] = set()
        for node in list(graph.nodes):
            if id(node) in gone or not self.starts(node):
                continue
            found = self._match(graph, ctx, node)
            if found is None:
                continue
            (old, new), extra = found
            graph.replace(old, new)
            for n in extra:  # the key's new Transpose, just before the Attention node
                graph.nodes.insert(graph.nodes.index(new), n)
            gone.update(id(n) for n in old)
        return bool(gone)

    def fuse(self, graph: PassGraph, ctx: PassContext, node: PassNode) -> Fusion | None:
        found = self._match(graph, ctx, node)
        return None if found is None else found[0]

    def _match(
        self, graph: PassGraph, ctx: PassContext, softmax: PassNode
    ) -> tuple[Fusion, list[PassNode]] | None:
        if not _last_axis(softmax):
            return None
        # downwards: [Identity ...] -> MatMul(probs, V)
        old = [softmax]
        value = softmax.outputs[0]
        reader = sole_reader(graph, value)
        while is_op(reader, "Identity") and len(reader.inputs) == 1:
            old.append(reader)
            value = reader.outputs[0]
            reader = sole_reader(graph, value)
        if not is_op(reader, "MatMul") or reader.inputs[0] != value or reader.inputs[1] == value:
            return None
        pv, v = reader, reader.inputs[1]
        if not _rank4(graph, v):
            return None
        # upwards: [Add mask] <- [scale] <- MatMul(Q, Kt)
        scores = softmax.inputs[0]
        found = None
        producer = graph.producer(scores)
        if is_op(producer, "Add", 7) and sole_reader(graph, scores) is softmax:
            for k in (0, 1):
                mask = producer.inputs[1 - k]
                if not _mask(graph, mask):
                    continue
                head = self._scores(graph, producer.inputs[k], producer, mask)
                if head is not None:
                    found = head, mask, producer
                    break
        if found is None:
            head = self._scores(graph, scores, softmax, "")
            if head is None:
                return None
            found = head, "", None
        (before, inputs, scale, extra), mask, add = found
        if add is not None:
            before.append(add)
        old = before + old + [pv]
        inputs = inputs + [v] + ([mask] if mask else [])
        anchor = next(n for n in before if is_op(n, "MatMul"))
        made = fusion(ctx, anchor, "Attention", inputs, old, {"scale": scale}, (GRAPHRT,))
        return None if made is None else (made, extra)

    def _scores(self, graph: PassGraph, scores: str, reader: PassNode, mask: str) -> _Found | None:
        """The nodes computing ``scores`` (read only by ``reader``) from Q and K: the nodes,
        [Q, K], the scale, the new Transpose of K (if any)."""
        if sole_reader(graph, scores) is not reader or mask == scores:
            return None
        peeled = _peel_factor(graph, scores)
        if peeled is None:
            return None
        node, scale, nodes = peeled
        if not is_op(node, "MatMul") or len(node.inputs) != 2:
            return None
        qk = node
        q, kt = qk.inputs
        if q == kt or mask in (q, kt):
            return None
        # Q: a pre-scaled Q gives its factor when the product is its only reader
        pre = graph.producer(q)
        factor = _factor(graph, pre, q)
        if factor is not None and sole_reader(graph, q) is qk and _rank4(graph, factor[0]):
            scale *= factor[1]
            nodes.append(pre)
            q = factor[0]
        if not _rank4(graph, q):
            return None
        key = self._key(graph, kt, qk)
        if key is None:
            return None
        k_nodes, k, k_scale, extra = key
        return nodes + k_nodes + [qk], [q, k], scale * k_scale, extra

    def _key(self, graph: PassGraph, kt: str, qk: PassNode) -> _Key | None:
        """K from the transposed key ``kt``: [Mul/Div c] <- Transpose <- [Mul/Div c] <- K'."""
        if sole_reader(graph, kt) is not qk:
            return None
        peeled = _peel_factor(graph, kt)
        if peeled is None:
            return None
        node, scale, nodes = peeled
        if not is_op(node, "Transpose") or len(node.inputs) != 1:
            return None
        perm = node.info.attrs.get("perm")
        if perm is None or sorted(perm) != [0, 1, 2, 3]:
            return None
        transpose, k = node, node.inputs[0]
        nodes.append(transpose)
        pre = graph.producer(k)
        factor = _factor(graph, pre, k, max_ndim=0)  # 0-d: the factor keeps K's rank
        if factor is None:
            factor = _factor(graph, pre, k)
            factor = factor if factor is not None and _rank4(graph, factor[0]) else None
        if factor is not None and sole_reader(graph, k) is transpose:
            scale *= factor[1]
            nodes.append(pre)
            k = factor[0]
        perm = [perm[0], perm[1], perm[3], perm[2]]
        extra: list[PassNode] = []
        if perm != [0, 1, 2, 3]:
            out = _fresh(graph, k + "_attention_key")
            info = dataclasses.replace(
                transpose.info,
                attrs={"perm": perm},
                inputs=(k,),
                outputs=(out,),
                proto=None,
            )
            extra.append(PassNode(info, transpose.op_def, [k], [out]))
            k = out
        return list(reversed(nodes)), k, scale, extra


def _last_axis(softmax: PassNode) -> bool:
    """Softmax over the last axis of a 4-D tensor (a rank the pattern proves)."""
    if len(softmax.inputs) != 1 or len(softmax.outputs) != 1:
        return False
    default = -1 if softmax.info.opset >= 13 else 1
    return softmax.info.attrs.get("axis", default) in (-1, 3)


def _scalar(graph: PassGraph, name: str, max_ndim: int) -> float | None:
    """A finite nonzero float constant of one element and at most ``max_ndim`` dims."""
    value = graph.constants.get(name) if name else None
    if (
        value is None
        or not isinstance(value, np.ndarray)
        or value.dtype.kind != "f"
        or value.size != 1
        or value.ndim > max_ndim
    ):
        return None
    f = float(value.reshape(()))
    return f if math.isfinite(f) and f != 0 else None


def _peel_factor(graph: PassGraph, value: str) -> tuple[PassNode, float, list[PassNode]] | None:
    """What computes ``value``, past an optional constant Mul/Div: (that producer, the factor,
    [the Mul/Div node] or []); None when the Mul/Div's operand has another reader."""
    node = graph.producer(value)
    factor = _factor(graph, node, value)
    if factor is None:
        return node, 1.0, []
    inner, scale = factor
    if sole_reader(graph, inner) is not node:
        return None
    return graph.producer(inner), scale, [node]


def _factor(
    graph: PassGraph, node: PassNode | None, out: str, max_ndim: int = 4
) -> tuple[str, float] | None:
    """(x, f) when ``node`` computes ``out = x * f`` (a Mul with a constant, either order, or
    a Div by one), the constant of one element and at most ``max_ndim`` dims: up to 4 where x
    is 4-D (a constant of one element and at most 4 dims keeps a 4-D shape), 0 where only
    ``out``'s rank is known (a 0-d factor keeps any rank)."""
    if node is None or len(node.inputs) != 2 or node.outputs[0] != out:
        return None
    if is_op(node, "Div", 7):
        c = _scalar(graph, node.inputs[1], max_ndim)
        return (node.inputs[0], 1.0 / c) if c is not None and node.inputs[0] else None
    if is_op(node, "Mul", 7):
        for k in (0, 1):
            c = _scalar(graph, node.inputs[1 - k], max_ndim)
            x = other_input(node, node.inputs[1 - k])
            if c is not None and x and graph.constants.get(x) is None:
                return x, c
    return None


def _rank4(graph: PassGraph, name: str, depth: int = 4) -> bool:
    """Whether ``name`` is 4-D by its producer: a Transpose of four axes, a Reshape to a
    constant shape of four elements, an Identity or a scalar Mul/Div of such."""
    node = graph.producer(name)
    if node is None or depth == 0:
        return False
    if is_op(node, "Transpose"):
        perm = node.info.attrs.get("perm")
        return perm is not None and len(perm) == 4
    if is_op(node, "Reshape", 5) and len(node.inputs) == 2:
        shape = graph.constants.get(node.inputs[1])
        return shape is not None and shape.ndim == 1 and shape.size == 4
    if is_op(node, "Identity"):
        return _rank4(graph, node.inputs[0], depth - 1)
    factor = _factor(graph, node, name)
    return factor is not None and _rank4(graph, factor[0], depth - 1)


def _mask(graph: PassGraph, name: str) -> bool:
    """Whether ``name`` can be Attention's attn_mask: computed at run time, or a float
    constant of 1 to 4 dims (Attention takes no 0-d mask)."""
    if not name:
        return False
    value = graph.constants.get(name)
    return value is None or (value.dtype.kind == "f" and 1 <= value.ndim <= 4)


def _fresh(graph: PassGraph, hint: str) -> str:
    """A value name no node, constant or graph input/output uses."""
    used = set(graph.constants) | set(graph.inputs) | set(graph.outputs)
    for n in graph.nodes:
        used.update(n.inputs)
        used.update(n.outputs)
    name, k = hint, 0
    while name in used:
        k += 1
        name = f"{hint}{k}"
    return name
