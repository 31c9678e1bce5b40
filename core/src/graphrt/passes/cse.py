"""Common subexpression elimination: of two nodes that compute the same thing, one is kept.

Two nodes are the same computation when they run the same operator definition with equal
attributes on the same inputs: the same values, or constants of equal dtype, shape and bytes
(folded ``ConstantOfShape`` weights have names of their own and equal contents).  The later
node's outputs then name the earlier node's, and the later node goes.  Bit-preserving: the
kept node's kernel is the one the removed node would have run, on the same arguments.

Random operators, nodes with subgraphs and ``Dropout`` (its ``training_mode`` may be a
run-time true) are never merged, and neither is a node whose outputs include a graph output
(the graph's output names must stay).  Constants are hashed only when two nodes agree on
everything else, so a model without duplicates pays for no weight's bytes.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from graphrt.attrs import evaluable_early
from graphrt.ir import check_cancelled
from graphrt.passes.base import GraphPass, PassContext, PassGraph, PassNode

#: Constants up to this many bytes go into a node's key as they are (index and shape
#: constants: many nodes read one value with small constants that differ).
_INLINE_BYTES = 256


class _Unhashable(Exception):
    """An attribute or constant this pass does not compare: the node is left alone."""


def _frozen(value: Any) -> Any:
    """A hashable stand-in for an attribute value that is equal exactly when the values are."""
    if isinstance(value, (bool, int, str, bytes)) or value is None:
        return value
    if isinstance(value, float):
        if math.isnan(value):
            raise _Unhashable  # NaN != NaN: never equal, so never merged
        return ("f", value)
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return ("o", value.shape, tuple(_frozen(v) for v in value.ravel().tolist()))
        return ("a", value.dtype.str, value.shape, np.ascontiguousarray(value).tobytes())
    if isinstance(value, np.generic):
        return _frozen(value.item())
    if isinstance(value, (list, tuple)):
        return ("l", tuple(_frozen(v) for v in value))
    if isinstance(value, dict):
        return ("d", tuple(sorted((k, _frozen(v)) for k, v in value.items())))
    raise _Unhashable


class EliminateCommonSubexpressions(GraphPass):
    name = "eliminate_common_subexpressions"
    min_level = "basic"
    preserves_bits = True
    order = 20  # after constant folding: folded weights are constants by then

    def run(self, graph: PassGraph, ctx: PassContext) -> bool:
        renamed: dict[str, str] = {}
        digests: dict[str, bytes] = {}
        # Nodes grouped by what is cheap to compare (the definition and the inputs that are
        # not constants); attributes and small constants key a group only once it has two
        # members, and large constants are hashed only for nodes whose keys agree: a model
        # without twins pays a tuple per node (light_densenet121's pass: 12 -> 2 ms).
        groups: dict[Any, _Group] = {}
        outputs = set(graph.outputs)
        kept: list[PassNode] = []
        for node in graph.nodes:
            check_cancelled(ctx.cancellation)
            if any(x in renamed for x in node.inputs):
                node.inputs = [renamed.get(x, x) for x in node.inputs]
            info = node.info
            if info.op_type == "Dropout" or not evaluable_early(info):
                kept.append(node)
                continue
            cheap = (
                id(node.op_def),
                info.opset,
                tuple(None if x in graph.constants else x for x in node.inputs),
                len(node.outputs),
            )
            mine = _Seen(node)
            group = groups.get(cheap)
            if group is None:
                groups[cheap] = _Group(mine)
                kept.append(node)
                continue
            twin = None
            if not outputs.intersection(node.outputs):
                twin = group.twin_of(mine, graph, digests)
            if twin is None:
                group.add(mine, graph)
                kept.append(node)
                continue
            renamed.update(
                (dup, first) for dup, first in zip(node.outputs, twin.node.outputs) if dup
            )
        if len(kept) == len(graph.nodes):
            return False
        graph.nodes[:] = kept
        return True


_UNSET = object()


class _Seen:
    """A node kept so far, with its full key and its constants' digests once asked for."""

    __slots__ = ("_digests", "_key", "node")

    def __init__(self, node: PassNode) -> None:
        self.node = node
        self._key: Any = _UNSET
        self._digests: tuple[bytes, ...] | None = None

    def key(self, graph: PassGraph) -> Any:
        if self._key is _UNSET:
            self._key = _key(self.node, graph)
        return self._key

    def digests(self, graph: PassGraph, cache: dict[str, bytes]) -> tuple[bytes, ...]:
        if self._digests is None:
            self._digests = _digests(self.node, graph, cache)
        return self._digests


class _Group:
    """The kept nodes that share a cheap key, filed by their full keys once there are two."""

    __slots__ = ("_by_key", "_first")

    def __init__(self, first: _Seen) -> None:
        self._first = first
        self._by_key: dict[Any, list[_Seen]] | None = None

    def _keyed(self, graph: PassGraph) -> dict[Any, list[_Seen]]:
        if self._by_key is None:
            self._by_key = {}
            self._file(self._first, graph)
        return self._by_key

    def _file(self, seen: _Seen, graph: PassGraph) -> None:
        key = seen.key(graph)
        if key is not None:
            self._keyed(graph).setdefault(key, []).append(seen)

    def twin_of(self, mine: _Seen, graph: PassGraph, cache: dict[str, bytes]) -> _Seen | None:
        """A kept node computing what ``mine`` computes, if any."""
        key = mine.key(graph)
        if key is None:
            return None
        for seen in self._keyed(graph).get(key, ()):
            if seen.digests(graph, cache) == mine.digests(graph, cache):
                return seen
        return None

    def add(self, mine: _Seen, graph: PassGraph) -> None:
        self._file(mine, graph)  # (files the first member too, the first time)


def _key(node: PassNode, graph: PassGraph) -> Any:
    """Everything two nodes must share before their constants' bytes are compared (None: never
    merged)."""
    info = node.info
    inputs: list[Any] = []
    try:
        attrs = _frozen(info.attrs)
        for x in node.inputs:
            if x in graph.constants:
                value = graph.constants[x]
                if not isinstance(value, np.ndarray):
                    return None
                if value.nbytes <= _INLINE_BYTES or value.dtype == object:
                    inputs.append(("c", _frozen(value)))
                else:
                    inputs.append(("C", value.dtype.str, value.shape))
            else:
                inputs.append(x)
    except _Unhashable:
        return None
    shape = tuple(bool(o) for o in node.outputs)
    return (id(node.op_def), info.domain, info.op_type, info.opset, attrs, tuple(inputs), shape)


def _digests(node: PassNode, graph: PassGraph, cache: dict[str, bytes]) -> tuple[bytes, ...]:
    """Digests of the node's large constant inputs (the small ones are in its key)."""
    import hashlib  # here: 2.8 ms of a fresh process's first session, most never digest

    found = []
    for x in node.inputs:
        value = graph.constants.get(x)
        if isinstance(value, np.ndarray) and value.nbytes > _INLINE_BYTES:
            if x not in cache:
                data = np.ascontiguousarray(value).reshape(-1).view(np.uint8)
                cache[x] = hashlib.blake2b(data, digest_size=32).digest()
            found.append(cache[x])
    return tuple(found)
