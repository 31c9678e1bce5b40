"""OneHot: each index becomes a row of ``depth`` values, on_value at the index, off elsewhere.

``depth`` sets the output shape, so ``infer`` reads it (a constant: a static step; a run-time
value: a dynamic node, shaped again in every run, so its plan is cached per shape and depth).
Indices of any numeric type become integers (floats truncated toward zero, as onnxruntime
does); an index in [-depth, -1] counts from the end, one outside [-depth, depth - 1] gives a
row of off_value.  Float indices are clamped to [-depth - 1, depth] first (NaN to the low end),
so what a machine makes of casting NaN or 1e30 to an integer never matters.  Only copies:
exact.

Up to ``_TABLE_DEPTH``, each index picks its whole output row from a table of 2 * depth + 2
rows made from the two values (a row per index in [-depth - 1, depth], the two ends all
off_value; kept per value pair): one ``np.take``, plus a transposed copy when ``axis`` is not
the last.  Larger depths fill off_value and write one value per index at its flat offset
(off_value, which changes nothing, for an index outside).  A dynamic node's costs are mostly
per array and per call, so it asks one scratch and caches what it can.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import ALIGN, MAX_SLAB, InferContext, KernelContext, NodeInfo, OpKernel

from ._util import constant
from ._values import axis_in

#: Depths up to this pick whole rows from a (2 * depth + 2, depth) table; past it, the table
#: would cost more than the scatter.
_TABLE_DEPTH = 64


@dataclasses.dataclass(frozen=True)
class _Plan:
    depth: int
    #: How indices become table rows or positions: "shift" (integers, table: index + depth +
    #: 1, read with mode="clip"), "clamp" (into [-depth - 1, depth]), "cap" (uint64: <= depth).
    kind: str
    bounds: tuple[np.ndarray, ...]  # 0-d: the shift; the low and high clamp; the uint64 cap
    hot: np.ndarray | None  # table depths: (2 * depth + 2, depth) intp, 1 where on_value goes
    #: ``axis`` not last: the output's axes in the order of the table's pick (indices', depth).
    order: tuple[int, ...] | None
    scatter: tuple[np.ndarray, ...] | None  # else: depth, stride, row starts
    #: The run's arrays (dtype, shape, byte offset), in this order: intp rows like the indices
    #: (the row or clamped index; float64 room to clamp float indices; the scatter's offsets
    #: and quarters), picked rows (``order``) or the scatter's chosen values, a table of object
    #: values.  A dynamic node pays for each scratch array in every run, so numbers take one
    #: scratch of bytes holding all (objects cannot live in bytes: a scratch each).
    arrays: tuple[tuple[np.dtype, tuple[int, ...], int], ...]
    nbytes: int


def _plan(shape: tuple[int, ...], axis: int, depth: int, index: np.dtype, value: np.dtype) -> _Plan:
    """Everything but a run's arrays (a dynamic node reuses it while depth is unchanged: the
    runtime keeps a dynamic step's last infer result)."""
    intp, f64, u64 = np.dtype(np.intp), np.dtype(np.float64), np.dtype(np.uint64)
    table = depth <= _TABLE_DEPTH
    if index.kind == "f":  # clamped as float64, then truncated
        kind, bounds = "clamp", (constant(f64, -depth - 1), constant(f64, depth))
    elif index == u64:  # never negative: capped at depth, itself an index outside
        kind, bounds = "cap", (constant(u64, depth),)
    elif table:  # any index outside is clipped to an end row, all off_value
        kind, bounds = "shift", (constant(intp, depth + 1),)
    else:
        kind, bounds = "clamp", (constant(intp, -depth - 1), constant(intp, depth))
    rows = (2 if index.kind == "f" else 1) if table else 3
    arrays = [(intp, (rows,) + shape)]
    hot = order = scatter = None
    if table:
        hot = _hot(depth, kind == "shift")
        rank = len(shape)
        if axis < rank:  # picked rows (indices' shape, depth), moved into place by a copy
            arrays.append((value, shape + (depth,)))
            order = tuple(range(axis)) + tuple(range(axis + 1, rank + 1)) + (axis,)
        if value.hasobject:  # (numbers take a table shared by every run with these values)
            arrays.append((value, hot.shape))
    else:
        pre, post = math.prod(shape[:axis]), math.prod(shape[axis:])
        starts = np.arange(pre * post, dtype=np.intp)
        starts += (starts // max(post, 1)) * ((depth - 1) * post)  # p*post + q -> p*D*post + q
        starts = starts.reshape(shape)
        starts.flags.writeable = False
        scatter = (constant(intp, depth), constant(intp, post), starts)
        arrays.append((value, shape))
    layout, nbytes = [], 0
    for dtype, dims in arrays:
        layout.append((dtype, dims, nbytes))
        nbytes += -(-math.prod(dims) * dtype.itemsize // ALIGN) * ALIGN
    return _Plan(depth, kind, bounds, hot, order, scatter, tuple(layout), nbytes)


@functools.lru_cache(maxsize=16)
def _hot(depth: int, shifted: bool) -> np.ndarray:
    """Row r: 1 at the position of index r (r - (2 * depth + 2) past depth), all 0 in the rows
    depth and depth + 1 of indices outside, read with ``mode="wrap"``; ``shifted`` rolls it so
    that row index + depth + 1 is read with ``mode="clip"`` (rows of indices outside at both
    ends).  Left writeable, shared though it is: np.take copies read-only indices every call."""
    hot = np.zeros((2 * depth + 2, depth), np.intp)
    k = np.arange(depth)
    hot[k, k] = 1  # indices 0 .. depth - 1
    hot[depth + 2 + k, k] = 1  # indices -depth .. -1
    return np.roll(hot, depth + 1, axis=0) if shifted else hot


@functools.lru_cache(maxsize=64)
def _table(depth: int, shifted: bool, dtype: np.dtype, values: bytes) -> np.ndarray:
    """The table of values for one (off_value, on_value) pair: read only, shared by runs."""
    hot = _hot(depth, shifted)
    table = np.frombuffer(values, dtype).take(hot)
    table.flags.writeable = False
    return table


class OneHot(OpKernel):
    """output[..., k, ...] (k on ``axis``) = on_value if indices[...] == k (mod depth) else off."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.axis = node.attr("axis", -1)

    def infer(self, ctx: InferContext) -> None:
        index, value = ctx.dtype(0), ctx.dtype(2)
        for what, dtype in (("indices", index), ("depth", ctx.dtype(1))):
            if dtype.kind not in "iuf":
                raise self.fail(f"{what} must be numeric, got {dtype}")
        if ctx.shape(2) != (2,):
            message = f"values must be [off_value, on_value], got shape {list(ctx.shape(2))}"
            raise self.fail(message, "invalid_input")
        found = ctx.value(1).reshape(-1).tolist()
        if len(found) != 1 or not 1 <= found[0] < math.inf:  # NaN fails too
            raise self.fail(f"depth must be one value >= 1, got {found}", "invalid_input")
        shape = ctx.shape(0)
        depth = int(found[0])
        if depth > MAX_SLAB or math.prod(shape) * depth * value.itemsize > MAX_SLAB:
            message = f"depth {found[0]} is too large: the output would pass {MAX_SLAB >> 30} GiB"
            raise self.fail(message, "unsupported")
        axis = axis_in(self, self.axis, len(shape) + 1, "invalid_input")
        ctx.set_output(0, value, shape[:axis] + (depth,) + shape[axis:])
        plan = _plan(shape, axis, depth, index, value)
        if value.hasobject:
            ctx.prepared = (plan, [ctx.add_scratch(d, s) for d, s, _ in plan.arrays])
        else:
            ctx.prepared = (plan, ctx.add_scratch(np.uint8, (plan.nbytes,)))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        _compute(ctx.prepared[0], *_arrays(ctx, inputs, outputs))

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        return functools.partial(_compute, ctx.prepared[0], *_arrays(ctx, inputs, outputs))


def _arrays(ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> tuple:
    """_compute's arguments but the plan: indices, values, output, scratch arrays."""
    p, where = ctx.prepared
    out = outputs[0] if p.order is None else outputs[0].transpose(p.order)
    if isinstance(where, list):
        return inputs[0], inputs[2], out, *[ctx.scratch[i] for i in where]
    buf = ctx.scratch[where]
    return inputs[0], inputs[2], out, *[np.ndarray(s, d, buf, at) for d, s, at in p.arrays]


#: By (index + depth) // depth, read with mode="wrap": which value an index writes (-1 and 2:
#: outside, off_value at its row's first place; 0 and 1: on_value at its place).
_QUARTERS = np.array([1, 1, 0, 0], np.intp)  # (writeable: np.take copies read-only indices)


def _compute(
    p: _Plan, indices: np.ndarray, values: np.ndarray, out: np.ndarray, ints: np.ndarray, *more
) -> None:
    """Each index's table row (or the index clamped), then the table or the scatter."""
    u = ints[0]
    if p.kind == "shift":
        if indices.dtype != u.dtype:  # widened first: numpy 1 adds in the narrow type
            np.copyto(u, indices)
            indices = u
        np.add(indices, p.bounds[0], out=u)
    elif p.kind == "cap":
        np.minimum(indices, p.bounds[0], out=u.view(np.uint64))
    elif indices.dtype.kind == "f":
        real = ints[1].view(np.float64)
        if indices.dtype != real.dtype:  # (a mixed-type fmax would allocate)
            np.copyto(real, indices)
            indices = real
        np.fmax(indices, p.bounds[0], out=real)  # NaN -> low
        np.fmin(real, p.bounds[1], out=real)
        np.copyto(u, real, casting="unsafe")  # toward zero
    else:  # in intp: numpy 1 would cast the 0-d bound to a narrower index type every run
        np.maximum(indices, p.bounds[0], out=u, dtype=u.dtype)
        np.minimum(u, p.bounds[1], out=u)
    if p.hot is not None:
        picked = more[0] if p.order is not None else out
        if values.dtype.hasobject:
            table = more[-1]
            values.take(p.hot, out=table, mode="clip")
        else:
            table = _table(p.depth, p.kind == "shift", values.dtype, values.tobytes())
        table.take(u, axis=0, out=picked, mode="clip" if p.kind == "shift" else "wrap")
        if picked is not out:
            np.copyto(out, picked)
        return
    offsets, which = ints[1], ints[2]
    depth, stride, starts = p.scatter
    np.add(u, depth, out=which)  # in [-1, 2 * depth]
    np.divmod(which, depth, out=(which, offsets))  # quarter; the position (any, outside)
    np.multiply(offsets, stride, out=offsets)
    np.add(offsets, starts, out=offsets)
    _QUARTERS.take(which, out=u, mode="wrap")  # (u is spent)
    values.take(u, out=more[0], mode="clip")
    np.copyto(out, values[:1].reshape(()))
    out.reshape(-1)[offsets] = more[0]
