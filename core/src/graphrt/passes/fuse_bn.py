"""BatchNormalization folded into the Conv before it (inference only).

Conv(X, W, B) -> BatchNormalization(scale, bias, mean, var) becomes Conv(X, W', B') with
W' = W * s and B' = (B - mean) * s + bias, s = scale / sqrt(var + epsilon), per output channel.
It changes rounding (one multiply fewer per element), so it does not preserve bits and is
skipped in exact mode.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from graphrt.passes.base import GraphPass, PassContext, PassGraph, PassNode


class FuseBatchNormIntoConv(GraphPass):
    name = "fuse_batchnorm_into_conv"
    min_level = "all"
    preserves_bits = False
    order = 50

    def run(self, graph: PassGraph, ctx: PassContext) -> bool:
        producers, readers = value_index(graph)
        owners = count_owners(graph)

        def fuse(bn: PassNode) -> tuple[PassNode, PassNode] | None:
            if bn.op_type != "BatchNormalization":
                return None
            return self._fuse(graph, bn, producers, readers, owners)

        return absorb_producers(graph, fuse, producers, readers)

    def _fuse(
        self,
        graph: PassGraph,
        bn: PassNode,
        producers: dict,
        readers: dict[str, int],
        owners: dict[int, int],
    ) -> tuple[PassNode, PassNode] | None:
        if len([o for o in bn.outputs if o]) != 1 or bn.info.attrs.get("training_mode", 0):
            return None
        if bn.info.opset < 7 and not bn.info.attrs.get("is_test", 0):
            return None  # before opset 7, is_test=0 (the default) is training mode
        if bn.info.attrs.get("spatial", 1) != 1:
            return None
        conv = producers.get(bn.inputs[0])
        if conv is None or conv.op_type != "Conv" or conv.info.domain != bn.info.domain:
            return None
        if readers.get(conv.outputs[0]) != 1 or graph.is_graph_output(conv.outputs[0]):
            return None
        params = [graph.constants.get(x) for x in bn.inputs[1:5]]
        w = graph.constants.get(conv.inputs[1])
        if w is None or any(p is None for p in params):
            return None
        b = graph.constants.get(conv.inputs[2]) if len(conv.inputs) > 2 and conv.inputs[2] else None
        if w.dtype not in (np.float32, np.float64) or len(conv.inputs) > 3:
            return None
        scale, bias, mean, var = (np.asarray(p, dtype=np.float64) for p in params)
        eps = float(bn.info.attrs.get("epsilon", 1e-5))
        s = scale / np.sqrt(var + eps)
        if s.shape != (w.shape[0],):
            return None
        w2 = scaled_weight(graph, conv, conv.inputs[1], w, s, readers, owners)
        b0 = np.zeros(w.shape[0]) if b is None else b.astype(np.float64)
        b2 = ((b0 - mean) * s + bias).astype(w.dtype)
        inputs = [
            conv.inputs[0],
            graph.add_constant(conv.inputs[1] + "_bnfused", w2),
            graph.add_constant((conv.outputs[0] or "conv") + "_bias_bnfused", b2),
        ]
        # The fused node keeps the Conv's NodeInfo (errors still name a node the model has) but
        # writes the BatchNormalization's output.
        info = dataclasses.replace(conv.info, inputs=tuple(inputs), outputs=tuple(bn.outputs))
        return conv, PassNode(info, conv.op_def, inputs, list(bn.outputs))


def value_index(graph: PassGraph) -> tuple[dict[str, PassNode], dict[str, int]]:
    """Who makes and how many nodes read each value, for a pass to keep current through its
    fusions: asking the graph (a scan of every node) per candidate is quadratic in the model."""
    producers = {o: n for n in graph.nodes for o in n.outputs if o}
    readers: dict[str, int] = {}
    for n in graph.nodes:
        for x in dict.fromkeys(n.inputs):  # nodes, as graph.consumers counts them
            readers[x] = readers.get(x, 0) + 1
    return producers, readers


def absorb_producers(
    graph: PassGraph,
    absorb: Callable[[PassNode], tuple[PassNode, PassNode] | None],
    producers: dict[str, PassNode],
    readers: dict[str, int],
) -> bool:
    """Runs ``absorb`` on every node in order; where it returns ``(producer, new)`` (``new``
    being the producer rewritten to write the node's outputs), ``new`` takes the node's slot
    (its readers come after it) and the producer's slot empties.  The index is kept current
    and the node list rebuilt once at the end (a graph.replace per fusion rebuilt it each time).
    """
    nodes: list[PassNode | None] = list(graph.nodes)
    slot = {id(n): i for i, n in enumerate(nodes)}
    changed = False
    for node in list(graph.nodes):
        absorbed = absorb(node)
        if absorbed is None:
            continue
        producer, new = absorbed
        nodes[slot[id(producer)]] = None
        slot[id(new)] = at = slot[id(node)]
        nodes[at] = new
        for x in new.inputs[1:]:  # its new parameters (the producer's input keeps its count)
            readers[x] = readers.get(x, 0) + 1
        producers.update((o, new) for o in new.outputs if o)
        changed = True
    if changed:
        graph.nodes[:] = [n for n in nodes if n is not None]  # the same list, edited
    return changed


def count_owners(graph: PassGraph) -> dict[int, int]:
    """How many constants see each memory owner (an array, or the array a view is of): a
    weight whose owner another constant sees too is never rewritten in place."""
    owners: dict[int, int] = {}
    for v in graph.constants.values():
        if isinstance(v, np.ndarray):
            key = id(_owner(v))
            owners[key] = owners.get(key, 0) + 1
    return owners


def scaled_weight(
    graph: PassGraph,
    node: PassNode,
    name: str,
    w: np.ndarray,
    s: np.ndarray,
    readers: dict[str, int],
    owners: dict[int, int],
) -> np.ndarray:
    """``w`` with its output channels (axis 0) multiplied by the float64 ``s``.

    One pass over the weights: the product in float64, rounded once into w's type (the bits of
    ``(w.astype(f64) * s).astype(w.dtype)``, without two float64 copies of W).  A weight only
    one node reads, whose memory no other constant sees and the session owns (initializers and
    folded values are new arrays) is rewritten in place and dropped from the constants (the
    caller adds the result under a new name): the old one is dead after the fusion, and a large
    model's weights are not written twice into fresh memory.
    """
    owner = _owner(w)
    in_place = (
        readers.get(name) == 1
        and node.inputs.count(name) == 1
        and not graph.is_graph_output(name)
        and isinstance(owner, np.ndarray)
        and owner.base is None
        and owners.get(id(owner)) == 1
        and w.flags.writeable
    )
    out = w if in_place else np.empty_like(w)
    np.multiply(
        w, s.reshape((-1,) + (1,) * (w.ndim - 1)), out=out, dtype=np.float64, casting="unsafe"
    )
    if in_place:
        del graph.constants[name]  # its values are the scaled ones now
    return out


def _owner(a: np.ndarray) -> object:
    """The object whose memory ``a`` is (numpy points a view's base at the owner)."""
    return a if a.base is None else a.base
