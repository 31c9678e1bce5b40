"""Unique: the distinct elements (or sub-tensors along ``axis``) of a tensor.

Outputs: Y, the first index of each in X, the position in Y of each element of X
(inverse_indices) and the counts, all but Y int64 and 1-D.  ``sorted=1`` (the default)
orders Y ascending (sub-tensors lexicographically, in row-major element order); ``sorted=0``
keeps the order of first occurrence.  NaNs are one value, as numpy's ``unique`` counts them,
and -0 equals +0 (Y keeps the first occurrence's sign): the work runs on TopK's integer sort
keys, where equal means equal.  One stable sort finds the groups, so every output is a
selection or a count: exact.  Output shapes depend on the values, so a run allocates its
outputs (through the run's arena) and its temporaries.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import KernelContext, NodeInfo, OpKernel

from ._values import axis_in
from .search import unsigned_keys


def _axis_first(x: np.ndarray, axis: int) -> np.ndarray:
    """x with ``axis`` first, as a C-contiguous (n, rest) array.

    The elements after the axis move together as one item (an unsigned integer or a void of
    their bytes): numpy copies a transposed array whose inner axis is short several times
    slower than one whose items are whole blocks.
    """
    shape = x.shape
    n, before, after = shape[axis], math.prod(shape[:axis]), math.prod(shape[axis + 1 :])
    if before == 1 or x.dtype.hasobject or x.size == 0:
        return np.ascontiguousarray(np.moveaxis(x, axis, 0)).reshape(n, before * after)
    size = x.dtype.itemsize * after
    block = np.dtype(f"u{size}") if size in (1, 2, 4, 8) else np.dtype(f"V{size}")
    blocks = np.ascontiguousarray(x).view(np.uint8).reshape(before, n * size).view(block)
    moved = np.ascontiguousarray(blocks.T)  # (n, before) blocks
    return moved.view(np.uint8).view(x.dtype).reshape(n, before * after)


def _rows(x: np.ndarray, axis: int) -> np.ndarray:
    """One item per sub-tensor along ``axis`` (n,) that compares (``argsort``, ``!=``) as
    the sub-tensor does lexicographically, NaN equal to NaN and -0 to +0; object tensors:
    their (n, rest) rows, to sort with lexsort.

    The keys (:func:`unsigned_keys`) are computed where the elements lie, in one contiguous
    pass each, then turned big-endian and moved.  The big-endian bytes of a sub-tensor's keys,
    compared as numpy compares unstructured void items (memcmp), order it lexicographically:
    one argsort of one item per sub-tensor instead of one pass per element, and one
    comparison of neighbours instead of a comparison per element and a reduction.
    """
    n = x.shape[axis]
    if x.dtype.hasobject:
        return _axis_first(x, axis)
    keys = unsigned_keys(x)
    m = x.size // n
    if m == 1:
        return keys.reshape(n)
    big = keys.astype(keys.dtype.newbyteorder(">"), order="C")
    return _axis_first(big, axis).view(f"V{m * keys.dtype.itemsize}").reshape(n)


def _groups(x: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """The stable order of x's sub-tensors along ``axis`` and, in that order, where each
    group of equal ones starts (bool, n)."""
    n = x.shape[axis]
    starts = np.zeros(n, dtype=bool)
    if n == 0:
        return np.arange(0), starts
    starts[0] = True
    if x.size == 0:  # empty sub-tensors: all equal
        return np.arange(n), starts
    rows = _rows(x, axis)
    if rows.ndim == 2:  # objects
        order = np.lexsort(rows.T[::-1])  # the last key is the primary one
        ranked = rows[order]
        np.any(ranked[1:] != ranked[:-1], axis=1, out=starts[1:])
    else:
        order = rows.argsort(kind="stable")
        ranked = rows[order]
        starts[1:] = ranked[1:] != ranked[:-1]
    return order, starts


class Unique(OpKernel):
    supports_exact = True
    outputs_data_dependent = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        axis = node.attr("axis")
        self.axis = None if axis is None else int(axis)
        self.sorted = bool(node.attr("sorted", 1))
        names = node.outputs
        self.wanted = [i < len(names) and bool(names[i]) for i in range(4)]

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x = inputs[0]
        if self.axis is None:
            axis, x = 0, x.reshape(-1)
        else:
            axis = axis_in(self, self.axis, x.ndim)
        n = x.shape[axis]
        order, starts = _groups(x, axis)
        first = np.flatnonzero(starts)  # where each group begins in the sorted order
        indices = order[first]  # stable sort: a group's first member is its first occurrence
        counts = np.empty_like(first)
        if n:
            np.subtract(first[1:], first[:-1], out=counts[:-1])
            counts[-1] = n - first[-1]
        want_y, want_indices, want_inverse, want_counts = self.wanted
        group = None
        if want_inverse:
            group = np.cumsum(starts, dtype=np.int64)  # 1 + each sorted element's group
        if not self.sorted:  # groups in order of first occurrence
            perm = np.argsort(indices)
            indices, counts = indices[perm], counts[perm]
            if group is not None:
                rank = np.empty(perm.size + 1, np.int64)
                rank[perm + 1] = np.arange(perm.size)
                group = rank[group]
        elif group is not None:
            np.subtract(group, 1, out=group)
        if want_y:
            shape = x.shape[:axis] + (indices.size,) + x.shape[axis + 1 :]
            np.take(x, indices, axis=axis, out=ctx.allocate_output(0, x.dtype, shape))
        if want_indices:
            np.copyto(ctx.allocate_output(1, np.int64, indices.shape), indices)
        if want_inverse:
            ctx.allocate_output(2, np.int64, (n,))[order] = group
        if want_counts:
            np.copyto(ctx.allocate_output(3, np.int64, counts.shape), counts)
