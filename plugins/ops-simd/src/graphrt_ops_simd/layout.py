"""blocked_layout: on avx512, convolution chains kept in blocks of channels (:mod:`.blocked`).

The lanes convolution writing planes transposes every tile it stores; between two convolutions
of a chain the next one reads the same values back broadcast by broadcast, so the blocks the
tile already holds serve as they are.  light_squeezenet's fire modules (1x1 squeeze, 1x1 and
3x3 expand, Concat, MaxPool) are such a chain from its first squeeze to its classifier.

A region is a connected set of nodes through values they would keep blocked:

* convolutions the blocked kernel takes: Conv or FusedConv with a constant 4-D float weight,
  one group, no residual Z, no activation or Relu (their X may be planes: they start a region);
* 2-D MaxPools (no Indices) and Concats along axis 1 of such values, each part but the last a
  whole number of blocks (a part's padding lanes would land among the channels), and the
  Identity views of them.

A region is rewritten only when nothing outside it reads its values but GlobalAveragePool
(which becomes BlockedGlobalAveragePool, writing planes) and it holds at least
``MIN_CONVOLUTIONS``: a reorder back to planes costs about the transposes the blocks save.
Shape-free, as every pass: channel counts come from the constant weights.  The convolutions
become the lanes kernel's, whatever kernel auto would have chosen for planes, so the bits
differ from the planar graph's (fast mode's licence; exact mode never runs this pass).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from graphrt.plugin import GraphPass, PassContext, PassGraph, PassNode

GRAPHRT = "com.graphrt"
#: The channels of a block on the paths this pass rewrites for (the lanes kernel's vector).
#: avx2's 8-channel tiles lost on the 3x3 layers blocked (light_squeezenet's 16->64 on 55 x 55:
#: 439 us against Winograd's 300 on planes), so only avx512 blocks.
BLOCK = {"avx512": 16}
#: The fewest convolutions of a region worth rewriting.
MIN_CONVOLUTIONS = 2
OPS = ("BlockedConv", "BlockedMaxPool", "BlockedGlobalAveragePool")


def _conv_channels(graph: PassGraph, node: PassNode) -> int | None:
    """The output channels of a convolution the blocked kernel takes, else None."""
    if (node.info.domain, node.op_type) not in (("", "Conv"), (GRAPHRT, "FusedConv")):
        return None
    attrs = node.info.attrs
    weight = graph.constants.get(node.inputs[1]) if len(node.inputs) > 1 else None
    if (
        not isinstance(weight, np.ndarray)
        or weight.dtype.kind != "f"
        or weight.ndim != 4
        or attrs.get("group", 1) != 1
        or (len(node.inputs) > 3 and node.inputs[3])
        or (attrs.get("activation", "") or "") not in ("", "Relu")
        or attrs.get("activation_params")
        or len(node.outputs) != 1
    ):
        return None
    return int(weight.shape[0])


def _is_op(node: PassNode, op_type: str) -> bool:
    return node.info.domain == "" and node.op_type == op_type


@dataclasses.dataclass
class _Region:
    nodes: list[PassNode] = dataclasses.field(default_factory=list)
    pools: list[PassNode] = dataclasses.field(default_factory=list)  # GlobalAveragePool readers
    open: bool = False  # a value read outside it (or a graph output)


class BlockedLayout(GraphPass):
    name = "blocked_layout"
    min_level = "all"
    preserves_bits = False
    order = 200  # after every fusion: it rewrites the fused convolutions and pools

    def run(self, graph: PassGraph, ctx: PassContext) -> bool:
        block = BLOCK.get(ctx.kernel_path)
        if block is None or any(ctx.lookup(GRAPHRT, op) is None for op in OPS):
            return False
        channels: dict[str, int] = {}  # value -> channels, for values that would be blocked
        region_of: dict[str, int] = {}  # value -> region (union-find root by smallest id)
        parent: list[int] = []

        def find(r: int) -> int:
            while parent[r] != r:
                parent[r] = parent[parent[r]]
                r = parent[r]
            return r

        def join(values: list[str]) -> int:
            roots = sorted({find(region_of[v]) for v in values if v in region_of})
            if not roots:
                parent.append(len(parent))
                return parent[-1]
            for r in roots[1:]:
                parent[r] = roots[0]
            return roots[0]

        members: list[PassNode] = []  # in graph order
        for node in graph.nodes:
            out = node.outputs[0] if node.outputs else ""
            m = _conv_channels(graph, node)
            if m is not None:
                c = m
                linked = [node.inputs[0]]
            elif (
                _is_op(node, "MaxPool")
                and node.inputs[0] in channels
                and len(node.info.attrs.get("kernel_shape", ())) == 2
                and not any(node.outputs[1:])
            ):
                c = channels[node.inputs[0]]
                linked = [node.inputs[0]]
            elif _is_op(node, "Identity") and node.inputs and node.inputs[0] in channels:
                c = channels[node.inputs[0]]  # a view: as blocked as what it shows
                linked = [node.inputs[0]]
            elif (
                _is_op(node, "Concat")
                and node.info.attrs.get("axis") == 1
                and node.inputs
                and all(v in channels for v in node.inputs)
                and all(channels[v] % block == 0 for v in node.inputs[:-1])
            ):
                c = sum(channels[v] for v in node.inputs)
                linked = list(node.inputs)
            else:
                continue
            channels[out] = c
            region_of[out] = join(linked)
            members.append(node)
        if not members:
            return False
        regions: dict[int, _Region] = {}
        for node in members:
            regions.setdefault(find(region_of[node.outputs[0]]), _Region()).nodes.append(node)
        member_ids = {id(node) for node in members}
        for value, r in region_of.items():
            region = regions[find(r)]
            if graph.is_graph_output(value):
                region.open = True
            for reader in graph.consumers(value):
                conv = _conv_channels(graph, reader) is not None
                if id(reader) in member_ids and not (conv and value in reader.inputs[1:]):
                    continue  # read by a member (as a convolution's X: its W and B are planar)
                if _is_op(reader, "GlobalAveragePool") and reader.inputs == [value]:
                    region.pools.append(reader)
                else:
                    region.open = True
        changed = False
        for region in regions.values():
            convs = sum(1 for n in region.nodes if _conv_channels(graph, n) is not None)
            if region.open or convs < MIN_CONVOLUTIONS:
                continue
            for node in region.nodes:
                new = self._blocked(graph, ctx, node, block, channels)
                if new is not None:
                    graph.replace([node], new)
            for node in region.pools:
                attrs = {"block": block, "channels": channels[node.inputs[0]]}
                graph.replace([node], _renamed(ctx, node, "BlockedGlobalAveragePool", attrs))
            changed = True
        return changed

    @staticmethod
    def _blocked(
        graph: PassGraph, ctx: PassContext, node: PassNode, block: int, channels: dict[str, int]
    ) -> PassNode | None:
        """A member's blocked node (a Concat stays itself: it joins blocks as it joined planes;
        an Identity shows them)."""
        if _is_op(node, "Concat") or _is_op(node, "Identity"):
            return None
        attrs = dict(node.info.attrs)
        attrs["block"] = block
        if _is_op(node, "MaxPool"):
            return _renamed(ctx, node, "BlockedMaxPool", attrs)
        attrs["x_blocked"] = int(node.inputs[0] in channels)
        return _renamed(ctx, node, "BlockedConv", attrs, inputs=node.inputs[:3])


def _renamed(
    ctx: PassContext,
    node: PassNode,
    op_type: str,
    attrs: dict[str, Any],
    inputs: list[str] | None = None,
) -> PassNode:
    """``node`` as the com.graphrt operator ``op_type`` (its name and outputs kept: errors and
    ``graphrt explain`` name the node the model has)."""
    op_def = ctx.lookup(GRAPHRT, op_type)
    inputs = list(node.inputs if inputs is None else inputs)
    info = dataclasses.replace(
        node.info, op_type=op_type, domain=GRAPHRT, attrs=attrs, inputs=tuple(inputs), proto=None
    )
    return PassNode(info, op_def, inputs, list(node.outputs))
