"""The head splits and the head merge around a fused Attention, read as 3-D tensors.

Exporters split each of Q, K and V [batch, seq, heads * size] into heads and merge the context
back with a copy each (four Transposes per attention) that the Attention kernel does not need:

    x4 = Reshape(x3, [b, s, H, D]) -> Transpose(x4, [0, 2, 1, 3]) -> Attention (Q, K or V)
    Y4 -> Transpose(Y4, [0, 2, 1, 3]) -> Reshape(.., [b, s, H * Dv])

com.graphrt.Attention (fuse_attention's node, the ai.onnx kernel) takes 3-D inputs [batch, seq,
heads * size] with ``q_num_heads`` / ``kv_num_heads``, reads them as ``x.reshape(b, s, H,
D).transpose(0, 2, 1, 3)`` (attention.head_major; the native kernel through strides, without
a copy) and writes Y as [batch, q_seq, q_heads * v_size], the merged context.

The splits.  Each split's shape is proven entry by entry: a constant, or a Concat (axis 0 or
-1) of 1-D integer constants and one-element values (``Unsqueeze(Gather(Shape(x), 0-d
constant), [0])`` or ``Gather(Shape(x), [i])``); the last two entries constants H, D >= 1.
The Reshape stays, to [e0, e1, H * D] (a new constant, or a new Concat of the same values):
a row-major Reshape to [e0, e1, H, D] is the Reshape to [e0, e1, H * D] split into [H, D], and
e0, e1 are the same raw entries at the same positions under the same ``allowzero`` (a 0 copies
the same dimension of x3, a -1 infers the same size, a failure fails alike), so whatever x3 is
-- any rank, a last axis split or not -- the kernel reads the heads the Transpose made.
Neither x3's rank nor its dimensions need proving, which a pass without shapes could not do.
A Reshape is a view in ops-basic's plans: no copy.  Q's H is ``q_num_heads``; K's and V's,
which must be equal (the kernel splits both by one count), ``kv_num_heads``.  Nothing else the
kernel does depends on the inputs' rank: the mask is checked and broadcast against (batch,
q_heads, q_len, total) from the shapes alone (attention_mask.mask_fits and plan_bias; the
native kernel views it with 4 axes either way), and past/present K/V and qk_matmul_output are
4-D in both modes (the pass takes a node with none of them).

The merge.  When Y4's only reader is a Transpose [0, 2, 1, 3] whose only reader is a Reshape
(opset 5+) to [m0, m1, Hq * Dv] whose m0 and m1 are each 0 under ``allowzero`` 0 (a copy of
the transposed Y's dimension: Q's batch or sequence) or the same raw entry as Q's split there
under the same ``allowzero``, the Attention writes that Reshape's output and both go.  Else
the Transpose alone becomes ``Reshape(Y3, [0, 0, Hq, Dv])``, the same [batch, q_seq, q_heads,
v_size] values as a view; with no such Transpose, Y4 is that view transposed back.

Only a com.graphrt.Attention of Q, K, V (and a mask), three distinct values, with the Y output
alone and no head attributes; every value that disappears is read by exactly one node and is
no graph output.  Not bit-preserving, as the node it rewrites is not (ops-basic's 3-D path
copies V and Y through scratch: the same values; the native kernel reads strides).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from graphrt.plugin import GraphPass, PassContext, PassGraph, PassNode

from ._match import GRAPHRT, is_op, rewired, sole_reader
from .attention import _fresh

#: One entry of a shape: an int constant, or the name of a one-element run-time value.
_Entry = int | str
HEADS = [0, 2, 1, 3]


@dataclasses.dataclass
class _Split:
    """One of Q, K, V: Reshape(x3, shape) -> Transpose(HEADS) -> the Attention."""

    reshape: PassNode
    transpose: PassNode
    entries: list[_Entry]  # the split's four shape entries
    dtype: np.dtype  # of the shape's constants (int64)

    @property
    def heads(self) -> int:
        return int(self.entries[2])

    @property
    def size(self) -> int:
        return int(self.entries[3])

    @property
    def allowzero(self) -> int:
        return int(self.reshape.info.attrs.get("allowzero", 0))


class FuseAttentionHeads(GraphPass):
    name = "fuse_attention_heads"
    min_level = "all"
    preserves_bits = False
    order = 145

    def run(self, graph: PassGraph, ctx: PassContext) -> bool:
        made: dict[str, str] = {}  # an old 4-entry shape -> its 3-entry one
        changed = False
        for node in list(graph.nodes):
            if node.info.domain == GRAPHRT and node.op_type == "Attention":
                changed |= self._rewrite(graph, node, made)
        return changed

    def _rewrite(self, graph: PassGraph, attn: PassNode, made: dict[str, str]) -> bool:
        attrs = attn.info.attrs
        ins = attn.inputs
        if (
            not 3 <= len(ins) <= 4
            or not all(ins[:3])
            or len(set(ins)) != len(ins)
            or len(attn.outputs) != 1
            or attrs.get("q_num_heads") is not None
            or attrs.get("kv_num_heads") is not None
        ):
            return False
        splits = [_split(graph, x, attn) for x in ins[:3]]
        if any(s is None for s in splits):
            return False
        q, k, v = splits
        if k.heads != v.heads:
            return False
        merge = _merge(graph, attn, q, q.heads * v.size)
        # the splits: Reshape(x3, [e0, e1, H * D]) read directly
        inputs = list(ins)
        for i, s in enumerate(splits):
            shape = made.get(s.reshape.inputs[1])
            if shape is None:
                shape = made[s.reshape.inputs[1]] = _merged_shape(graph, s)
            # a new name: declared shapes (value_info) of the 4-D split no longer hold
            out = _fresh(graph, s.reshape.outputs[0] + "_3d")
            graph.replace(
                [s.reshape],
                rewired(s.reshape, [s.reshape.inputs[0], shape], [out], s.reshape.info.attrs),
            )
            graph.nodes.remove(s.transpose)
            inputs[i] = out
        # Y: the merge's output, or [batch, q_seq, q_heads, v_size] as a view of the 3-D Y
        transpose, reshape = merge
        y4 = attn.outputs[0]
        y3 = reshape.outputs[0] if reshape is not None else _fresh(graph, y4 + "_merged")
        heads = {"q_num_heads": q.heads, "kv_num_heads": k.heads}
        new = rewired(attn, inputs, [y3], {**attrs, **heads})
        graph.replace([attn], new)
        if reshape is not None:
            graph.nodes.remove(transpose)
            graph.nodes.remove(reshape)
            return True
        split = graph.add_constant(y4 + "_heads", np.array([0, 0, q.heads, v.size], q.dtype))
        if transpose is not None:  # Transpose(Y4, [0, 2, 1, 3]) is that view
            view = _named(rewired(q.reshape, [y3, split], transpose.outputs, {}), transpose)
            graph.replace([transpose], view)
            return True
        y4t = _fresh(graph, y4 + "_split")
        at = graph.nodes.index(new) + 1
        graph.nodes[at:at] = [
            _named(rewired(q.reshape, [y3, split], [y4t], {}), q.transpose),
            rewired(q.transpose, [y4t], [y4], {"perm": HEADS}),
        ]
        return True


def _named(node: PassNode, like: PassNode) -> PassNode:
    """``node`` under the name of the node whose work it takes (errors name a model node)."""
    node.info = dataclasses.replace(node.info, name=like.info.name)
    return node


def _split(graph: PassGraph, x4t: str, attn: PassNode) -> _Split | None:
    """The head split computing ``x4t`` (read only by ``attn``), or None."""
    transpose = graph.producer(x4t)
    if (
        not is_op(transpose, "Transpose")
        or len(transpose.inputs) != 1
        or list(transpose.info.attrs.get("perm") or []) != HEADS
        or sole_reader(graph, x4t) is not attn
    ):
        return None
    x4 = transpose.inputs[0]
    reshape = graph.producer(x4)
    if (
        not is_op(reshape, "Reshape", 5)
        or len(reshape.inputs) != 2
        or len(reshape.outputs) != 1
        or reshape.inputs[0] == reshape.inputs[1]
        or sole_reader(graph, x4) is not transpose
    ):
        return None
    found = _entries(graph, reshape.inputs[1])
    if found is None:
        return None
    entries, dtype = found
    if len(entries) != 4 or not all(isinstance(e, int) and e >= 1 for e in entries[2:]):
        return None
    return _Split(reshape, transpose, entries, dtype)


def _merge(
    graph: PassGraph, attn: PassNode, q: _Split, hidden: int
) -> tuple[PassNode | None, PassNode | None]:
    """(Transpose, Reshape) merging Y's heads back into [batch, q_seq, q_heads * v_size] as the
    3-D Attention writes Y: Y4's only reader a Transpose [0, 2, 1, 3] (else None), its
    output's only reader a Reshape to proven entries (else None)."""
    y4 = attn.outputs[0]
    transpose = sole_reader(graph, y4)
    if (
        not is_op(transpose, "Transpose")
        or transpose.inputs != [y4]
        or len(transpose.outputs) != 1
        or list(transpose.info.attrs.get("perm") or []) != HEADS
    ):
        return None, None
    yt = transpose.outputs[0]
    reshape = sole_reader(graph, yt)
    if (
        not is_op(reshape, "Reshape", 5)
        or len(reshape.inputs) != 2
        or reshape.inputs[0] != yt
        or reshape.inputs[1] == yt
        or len(reshape.outputs) != 1
    ):
        return transpose, None
    found = _entries(graph, reshape.inputs[1])
    if found is None or len(found[0]) != 3 or found[0][2] != hidden:
        return transpose, None
    allowzero = int(reshape.info.attrs.get("allowzero", 0))
    for i in (0, 1):
        entry = found[0][i]
        copies = entry == 0 and not allowzero  # the transposed Y's dimension i: Q's
        same = entry == q.entries[i] and type(entry) is type(q.entries[i])
        if not (copies or (same and allowzero == q.allowzero)):
            return transpose, None
    return transpose, reshape


def _entries(graph: PassGraph, name: str) -> tuple[list[_Entry], np.dtype] | None:
    """The entries of the 1-D integer shape ``name``: a constant, or a Concat (axis 0) of
    1-D constants and proven one-element values; and the type of its constants."""
    value = _int_vector(graph, name)
    if value is not None:
        return [int(e) for e in value], value.dtype
    concat = graph.producer(name)
    if (
        not is_op(concat, "Concat", 4)
        or concat.info.attrs.get("axis") not in (0, -1)
        or not concat.inputs
    ):
        return None
    entries: list[_Entry] = []
    dtype = np.dtype(np.int64)
    for part in concat.inputs:
        value = _int_vector(graph, part)
        if value is not None:
            entries += [int(e) for e in value]
            dtype = value.dtype
        elif _one_element(graph, part):
            entries.append(part)
        else:
            return None
    return entries, dtype


def _int_vector(graph: PassGraph, name: str) -> np.ndarray | None:
    value = graph.constants.get(name) if name else None
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "iu" or value.ndim != 1:
        return None
    return value


def _one_element(graph: PassGraph, name: str) -> bool:
    """``name`` is 1-D with one element by its producers: Unsqueeze(scalar, [0]) or
    Gather(1-D, one-element 1-D constant index), the scalar Gather(1-D, 0-d constant index)
    and the 1-D a Shape."""
    node = graph.producer(name) if name else None
    if node is None or not node.inputs or node.outputs[0] != name:
        return False
    if is_op(node, "Unsqueeze"):
        if node.info.opset < 13:
            axes = node.info.attrs.get("axes")
            axes = None if axes is None or len(node.inputs) != 1 else list(axes)
        else:
            found = _int_vector(graph, node.inputs[1]) if len(node.inputs) == 2 else None
            axes = None if found is None else found.tolist()
        return axes in ([0], [-1]) and _gathered(graph, node.inputs[0], 0)
    return _gathered(graph, name, 1)


def _gathered(graph: PassGraph, name: str, ndim: int) -> bool:
    """``name`` = Gather(Shape(x), constant index) with an index of ``ndim`` dims and one
    element (a 0-d index gives a 0-d value, a [1] index a 1-D value of one element)."""
    node = graph.producer(name)
    if not is_op(node, "Gather") or len(node.inputs) != 2 or node.outputs[0] != name:
        return False
    index = graph.constants.get(node.inputs[1])
    if (
        not isinstance(index, np.ndarray)
        or index.dtype.kind not in "iu"
        or index.ndim != ndim
        or index.size != 1
        or node.info.attrs.get("axis", 0) not in (0, -1)
    ):
        return False
    return is_op(graph.producer(node.inputs[0]), "Shape")


def _merged_shape(graph: PassGraph, s: _Split) -> str:
    """A shape value [e0, e1, H * D] of the split's first two entries: a new constant, or a new
    Concat of the same values placed right after the split's own Concat."""
    entries = [*s.entries[:2], s.heads * s.size]
    old = s.reshape.inputs[1]
    if all(isinstance(e, int) for e in entries):
        return graph.add_constant(old + "_merged", np.array(entries, s.dtype))
    parts: list[str] = []
    run: list[int] = []
    for e in [*entries, None]:
        if isinstance(e, int):
            run.append(e)
            continue
        if run:
            parts.append(graph.add_constant(old + "_part", np.array(run, s.dtype)))
            run = []
        if e is not None:
            parts.append(e)
    concat = graph.producer(old)
    assert concat is not None  # _entries found the entries there
    out = _fresh(graph, old + "_merged")
    graph.nodes.insert(graph.nodes.index(concat) + 1, rewired(concat, parts, [out], {"axis": 0}))
    return out
