"""GatherND, ScatterND, TensorScatter: slices of a tensor addressed by index tuples.

GatherND and ScatterND read ``indices`` as N tuples of k coordinates into data's leading axes
(after GatherND's batch axes).  Each tuple names one row of data viewed as (rows, slice), so
both become one row-wise ``np.take`` or assignment.  A coordinate lies in [-s, s - 1]
(negative counts from the end); one outside is ``SessionError("invalid_input")``.  Constant
indices become row numbers once per plan; run-time ones in scratch arrays, every run, checked
as Python ints when there are few (two numpy reductions cost more) or with min/max reductions.

ScatterND with run-time indices and no reduction (or a reduction of single elements) hands the
tuples' k columns to numpy's fancy indexing, ``out[c0, c1, ...] = updates``: one call, whose
bounds check and negative indices are ONNX's rule (its IndexError becomes invalid_input).

Every kernel here is a ``BoundStep``: its views of the run state's arrays are made once, so
a static run is a few numpy calls on fixed arrays.

TensorScatter writes a KV-cache update along its sequence axis at each batch entry's write
index: one or two slice copies per batch entry (two when a circular write wraps around).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._steps import FEW, BoundStep, indexed_write
from ._util import _CANONICAL_NAN, constant, rewrite_nan, same_storage
from ._values import axis_in, check_bounds, check_indices, reshaped
from .gather import REDUCTIONS, reduction_of


def _index_type(kernel: OpKernel, ctx: InferContext) -> None:
    if ctx.dtype(1).kind != "i":
        raise kernel.fail(f"indices must be int32 or int64, got {ctx.dtype(1)}")


@dataclasses.dataclass(frozen=True)
class _Rows:
    """How index tuples become row numbers of data viewed as (rows, slice)."""

    sizes: tuple[int, ...]  # extents of the k indexed axes
    smallest: int  # the least of them: indices in [-smallest, smallest) need no per-axis check
    extent: np.ndarray  # (k,) intp: the same, for remainder
    strides: np.ndarray  # (k,) intp: rows between neighbours along each indexed axis
    base: np.ndarray | None  # (N,) intp: first row of each tuple's batch (GatherND)
    rows: np.ndarray | None  # constant indices (or k = 0): the finished rows
    scratch: tuple[int, int, int, int] | None  # run-time: tuples (N, k), 0-d min, max, rows


def _rows_plan(
    kernel: OpKernel, ctx: InferContext, sizes: tuple[int, ...], n: int, base: np.ndarray | None
) -> _Rows:
    """Rows for ``n`` tuples over axes of extents ``sizes`` (input 1 holds the indices)."""
    _index_type(kernel, ctx)
    k = len(sizes)
    strides = np.array([math.prod(sizes[j + 1 :]) for j in range(k)], np.intp)
    extent = np.array(sizes, np.intp)
    known = ctx.known_value(1)
    if known is not None or not k:  # (empty tuples all name the one row)
        rows = np.zeros(n, np.intp)
        if k:
            tuples = np.asarray(known).reshape(n, k).astype(np.intp)
            for j, s in enumerate(sizes):
                check_indices(kernel, tuples[:, j], s)
            rows = (tuples % np.maximum(extent, 1)) @ strides
        rows = rows.astype(np.intp) + (0 if base is None else base)
        return _Rows(sizes, min(sizes, default=0), extent, strides, base, rows, None)
    it = ctx.dtype(1)
    scratch = (
        ctx.add_scratch(np.intp, (n, k)),
        ctx.add_scratch(it, ()),
        ctx.add_scratch(it, ()),
        ctx.add_scratch(np.intp, (n,)),
    )
    return _Rows(sizes, min(sizes, default=0), extent, strides, base, None, scratch)


def _row_finder(
    kernel: OpKernel, p: _Rows, scratch: Sequence[np.ndarray], indices: np.ndarray
) -> Callable[[], np.ndarray]:
    """A call giving the checked, non-negative row of every tuple of ``indices``."""
    if p.rows is not None:
        return functools.partial(_same, p.rows)
    return _RowFinder(kernel, p, scratch, indices)


def _same(rows: np.ndarray) -> np.ndarray:
    return rows


class _RowFinder:
    """Rows of run-time index tuples, on one run state's arrays; allocates nothing."""

    def __init__(
        self, kernel: OpKernel, p: _Rows, scratch: Sequence[np.ndarray], indices: np.ndarray
    ) -> None:
        self.kernel = kernel
        self.p = p
        self.tuples, self.lo, self.hi, self.rows = (scratch[i] for i in p.scratch)
        n, k = self.tuples.shape
        self.indices = indices.reshape(n, k)
        self.flat = indices.reshape(n * k)
        self.few = n * k <= FEW
        # one axis: the checked, non-negative indices are the rows
        self.single = (self.flat, self.tuples.reshape(n)) if k == 1 else None
        #: The last indices as Python ints when they were the rows (few, one axis, none < 0).
        self.listed: list[int] | None = None

    def __call__(self) -> np.ndarray:
        p, indices, tuples, rows = self.p, self.indices, self.tuples, self.rows
        self.listed = None
        if not rows.size:
            return rows
        if self._least() < 0:
            np.remainder(indices, p.extent, out=tuples)  # -1 -> s - 1
            found = self.single[1] if self.single else tuples
        elif indices.dtype != tuples.dtype:  # matmul would cast into a new array
            np.copyto(tuples, indices)
            found = self.single[1] if self.single else tuples
        else:
            found = self.single[0] if self.single else indices
        if not self.single:
            np.matmul(found, p.strides, out=rows)
            found = rows
        if p.base is None:
            return found
        np.add(found, p.base, out=rows)
        return rows

    def _least(self) -> int:
        """Check every coordinate against its axis; the least one."""
        p, kernel = self.p, self.kernel
        if self.few:
            values = self.flat.tolist()
            if self.single:
                least, most = min(values), max(values)
                check_bounds(kernel, least, most, p.sizes[0])
                if least >= 0 and p.base is None:
                    self.listed = values
                return least
            k = len(p.sizes)
            for j, s in enumerate(p.sizes):
                column = values[j::k]
                check_bounds(kernel, min(column), max(column), s)
            return min(values)
        lo, hi, indices = self.lo, self.hi, self.indices
        np.minimum.reduce(indices, axis=None, out=lo)  # the ufunc: np.amin's wrapper costs
        np.maximum.reduce(indices, axis=None, out=hi)
        least, most = int(lo), int(hi)
        if least < -p.smallest or most >= p.smallest:  # per axis (a reduction along axis 0
            for j, s in enumerate(p.sizes):  # of an (n, k) array is ~50x slower than this)
                column = indices[:, j]
                np.minimum.reduce(column, axis=None, out=lo)
                np.maximum.reduce(column, axis=None, out=hi)
                check_bounds(kernel, int(lo), int(hi), s)
        return least


class GatherND(BoundStep):
    """out[b..., m...] = data[b..., *indices[b..., m...], ...] (``batch_dims`` b leading axes).

    Output shape indices.shape[:-1] + data.shape[b + k:]; data is viewed as
    (batch x indexed rows, slice) and the rows are taken with one ``np.take``.
    """

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.batch_dims = node.attr("batch_dims", 0) if node.opset >= 12 else 0
        if self.batch_dims < 0:
            raise self.fail(f"batch_dims must be >= 0, got {self.batch_dims}")

    def infer(self, ctx: InferContext) -> None:
        data, idx = ctx.shape(0), ctx.shape(1)
        b, r, q = self.batch_dims, len(data), len(ctx.shape(1))
        if r < 1 or q < 1 or b >= min(q, r):
            raise self.fail(
                f"data of rank {r} and indices of rank {q} need rank >= 1 and more than "
                f"batch_dims = {b} axes",
                "invalid_input",
            )
        if idx[:b] != data[:b]:
            message = f"batch axes of indices {list(idx[:b])} and data {list(data[:b])} differ"
            raise self.fail(message, "invalid_input")
        k = idx[-1]
        if not 1 <= k <= r - b:
            message = f"index tuples of length {k} do not fit data of shape {list(data)}"
            raise self.fail(message + f" with batch_dims = {b}", "invalid_input")
        out_shape = idx[:-1] + data[b + k :]
        ctx.set_output(0, ctx.dtype(0), out_shape)
        n, per_batch = math.prod(idx[:-1]), math.prod(idx[b:-1])
        sizes = data[b : b + k]
        base = None
        if b:  # the first row of each tuple's batch entry
            base = (np.arange(n, dtype=np.intp) // max(per_batch, 1)) * math.prod(sizes)
        plan = _rows_plan(self, ctx, sizes, n, base)
        ctx.prepared = (plan, (math.prod(data[: b + k]), math.prod(data[b + k :])), n)

    def step(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], Any]:
        """One ``np.take`` of data's rows (a bare call for constant indices)."""
        plan, (n_rows, width), n = ctx.prepared
        table = inputs[0].reshape(n_rows, width)
        out = reshaped(outputs[0], (n, width))
        if plan.rows is not None:
            return functools.partial(table.take, plan.rows, axis=0, out=out, mode="clip")
        find = _RowFinder(self, plan, ctx.scratch, inputs[1])

        def call() -> None:
            table.take(find(), axis=0, out=out, mode="clip")

        return call


class ScatterND(BoundStep):
    """A copy of data with update slices written (or combined, ``reduction``) at index tuples.

    Exact: ``none`` copies (repeated tuples, undefined in ONNX: the last one wins); a reduction
    folds the updates into each element in index order, ``out = f(f(data, u0), u1)...``, one
    rounded operation each, the canonical order of docs/exact-mode.md, whichever way it runs:
    ``ufunc.at`` on single elements, one gather-combine-scatter when no slice repeats, else a
    step per tuple (wide slices) or ``ufunc.at`` on flat element offsets.  Exact mode then
    rewrites NaN in the touched slices to the canonical NaN, and max/min add ``+0`` there, so a
    zero result is ``+0`` whatever ``max(-0, +0)`` a machine gives.
    """

    supports_exact = True
    in_place_input = 0

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.reduction = reduction_of(self)

    def infer(self, ctx: InferContext) -> None:
        data, idx, upd = ctx.shape(0), ctx.shape(1), ctx.shape(2)
        if ctx.dtype(0) != ctx.dtype(2):
            raise self.fail(f"data is {ctx.dtype(0)} but updates are {ctx.dtype(2)}")
        if not idx or idx[-1] > len(data) or upd != idx[:-1] + data[idx[-1] :]:
            message = (
                f"indices {list(idx)} and updates {list(upd)} do not fit data {list(data)}: "
                "updates must be indices.shape[:-1] + data.shape[k:]"
            )
            raise self.fail(message, "invalid_input")
        ctx.set_output(0, ctx.dtype(0), data)
        k, n = idx[-1], math.prod(idx[:-1])
        width, n_rows = math.prod(data[k:]), math.prod(data[:k])
        dtype = ctx.dtype(0)
        reduce = self.reduction != "none"
        fix = reduce and ctx.exact and dtype in _CANONICAL_NAN
        if k and ctx.known_value(1) is None and (not reduce or (width == 1 and not fix)):
            _index_type(self, ctx)
            ctx.prepared = _ScatterPlan(None, (n,) + data[k:], n_rows)
            return
        rows = _rows_plan(self, ctx, data[:k], n, None)
        shape = (n,) if width == 1 else (n, width)
        distinct = order = repeats = touched = elements = mask = None
        if rows.rows is not None:
            distinct = np.unique(rows.rows).size == n
        if reduce and width > 1:
            order = np.arange(n, dtype=np.intp)
            if distinct is None:  # told apart in every run
                repeats = (
                    ctx.add_scratch(np.intp, (n_rows,)),
                    ctx.add_scratch(np.intp, (n,)),
                    ctx.add_scratch(np.intp, ()),
                )
            touched = ctx.add_scratch(dtype, shape)
            if width < _WIDE:  # each element's flat offset, and the columns to make them
                elements = (ctx.add_scratch(np.intp, shape), np.arange(width, dtype=np.intp))
        if fix:
            if touched is None:
                touched = ctx.add_scratch(dtype, shape)
            mask = ctx.add_scratch(np.bool_, shape)
        ctx.prepared = _ScatterPlan(
            rows, shape, n_rows, distinct, order, repeats, touched, elements, mask
        )

    def step(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        p: _ScatterPlan = ctx.prepared
        return (self._indexed if p.rows is None else self._by_rows)(ctx, inputs, outputs[0])

    def _indexed(self, ctx: KernelContext, inputs: Sequence[Any], out: np.ndarray):
        """Run-time tuples as numpy's fancy index ``out[c0, c1, ...]``: one call that checks."""
        p: _ScatterPlan = ctx.prepared
        data, indices, updates = inputs
        n, k = p.shape[0], out.ndim - len(p.shape) + 1
        tuples = indices.reshape(n, k)
        where = tuple(tuples[:, j] for j in range(k))

        def explain() -> None:
            for column, s in zip(where, out.shape):
                check_indices(self, column, s)

        return indexed_write(
            self,
            None if same_storage(out, data) else data,
            out,
            out,
            where,
            updates.reshape(p.shape),
            REDUCTIONS.get(self.reduction),  # (a reduction here: single elements)
            explain,
        )

    def _by_rows(self, ctx: KernelContext, inputs: Sequence[Any], out: np.ndarray):
        """Constant tuples, reductions of slices and exact mode: through row numbers."""
        p: _ScatterPlan = ctx.prepared
        data, indices, updates = inputs
        copy = not same_storage(out, data)
        find = _row_finder(self, p.rows, ctx.scratch, indices)
        target = reshaped(out, (p.n_rows,) + p.shape[1:])
        values = updates.reshape(p.shape)
        fold = REDUCTIONS.get(self.reduction)
        scratch = ctx.scratch

        def call() -> None:
            rows = find()
            if copy:
                np.copyto(out, data)
            if not rows.size:
                return
            if fold is None:
                target[rows] = values
                return
            if p.order is None:  # single elements: ufunc.at's fast one-axis loop
                fold.at(target, rows, values)
            elif p.distinct or (p.distinct is None and _distinct(p, scratch, rows, find)):
                touched = scratch[p.touched]  # each slice once: gather, combine, scatter
                target.take(rows, axis=0, out=touched, mode="clip")
                fold(touched, values, out=touched)
                target[rows] = touched
            elif p.elements is None:  # wide slices: one vectorised step per tuple, in order
                for i, r in enumerate(rows.tolist()):
                    row = target[r]
                    fold(row, values[i], out=row)
            else:  # narrow slices: ufunc.at over flat element offsets (5x its speed on rows)
                offsets, columns = scratch[p.elements[0]], p.elements[1]
                np.multiply(rows[:, None], constant(np.dtype(np.intp), p.shape[1]), out=offsets)
                np.add(offsets, columns, out=offsets)
                fold.at(reshaped(out, (out.size,)), offsets.reshape(-1), values.reshape(-1))
            if p.mask is not None:
                touched, mask = scratch[p.touched], scratch[p.mask]
                target.take(rows, axis=0, out=touched, mode="clip")
                if self.reduction in ("max", "min"):
                    np.add(touched, constant(touched.dtype, 0.0), out=touched)
                rewrite_nan(touched, mask)
                target[rows] = touched

        return call


def _distinct(
    p: _ScatterPlan, scratch: Sequence[np.ndarray], rows: np.ndarray, find: _RowFinder
) -> bool:
    """Whether no row repeats (rows found at run time): a set of a few Python ints (the
    finder's own when it kept them), else stamp each row with its last tuple and read the
    stamps back."""
    if rows.size <= FEW:
        listed = find.listed
        return len(set(rows.tolist() if listed is None else listed)) == rows.size
    stamp, seen, top = (scratch[i] for i in p.repeats)
    stamp[rows] = p.order  # the last write wins; other entries are never read
    stamp.take(rows, out=seen, mode="clip")
    np.subtract(seen, p.order, out=seen)
    np.maximum.reduce(seen, axis=None, out=top)
    return int(top) == 0


#: Slices at least this wide are combined one tuple at a time when rows repeat.
_WIDE = 64


@dataclasses.dataclass(frozen=True)
class _ScatterPlan:
    rows: _Rows | None  # None: run-time tuples used as numpy's fancy index
    shape: tuple[int, ...]  # updates as (tuples,) or (tuples, slice); fancy: (tuples,) + slice
    n_rows: int  # data's rows: the extent of its indexed axes
    distinct: bool | None = None  # constant rows: whether each is hit once (None: every run)
    order: np.ndarray | None = None  # reductions over slices: 0 .. tuples - 1 (intp)
    repeats: tuple[int, int, int] | None = None  # scratch: row stamps, read back, their max
    touched: int | None = None  # scratch (tuples, slice): the slices being combined
    elements: tuple[int, np.ndarray] | None = None  # narrow slices: flat offsets, columns
    mask: int | None = None  # exact reductions: NaN mask (scratch) for the touched slices


class TensorScatter(BoundStep):
    """present = past with ``update`` written along ``axis`` from write_indices[b] (opset 24).

    ``linear`` needs 0 <= w and w + sequence_length <= max_sequence_length; ``circular`` wraps
    positions modulo max_sequence_length (w >= 0, sequence_length <= max_sequence_length, as
    onnxruntime checks).  Without write_indices every entry writes from 0.  Pure copies: exact.
    """

    supports_exact = True
    in_place_input = 0

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.mode = node.attr("mode", "linear")
        if self.mode not in ("linear", "circular"):
            raise self.fail(f"mode must be linear or circular, got {self.mode!r}")
        self.axis = node.attr("axis", -2)

    def infer(self, ctx: InferContext) -> None:
        past, upd = ctx.shape(0), ctx.shape(1)
        rank = len(past)
        axis = axis_in(self, self.axis, rank, "invalid_input")
        if axis == 0:
            raise self.fail("axis cannot be 0, the batch axis", "invalid_input")
        if ctx.dtype(0) != ctx.dtype(1):
            raise self.fail(f"past_cache is {ctx.dtype(0)} but update is {ctx.dtype(1)}")
        fits = len(upd) == rank and all(
            a == b for k, (a, b) in enumerate(zip(past, upd)) if k != axis
        )
        if not fits or upd[axis] > past[axis]:
            message = (
                f"update {list(upd)} must match past_cache {list(past)} but along axis {axis}, "
                "and be no longer there"
            )
            raise self.fail(message, "invalid_input")
        if ctx.has_input(2):
            if ctx.dtype(2).kind != "i":
                raise self.fail(f"write_indices must be integers, got {ctx.dtype(2)}")
            if ctx.shape(2) != past[:1]:
                message = f"write_indices {list(ctx.shape(2))} must have shape [{past[0]}]"
                raise self.fail(message, "invalid_input")
        lead, tail = math.prod(past[1:axis]), math.prod(past[axis + 1 :])
        ctx.prepared = ((past[0], lead, past[axis], tail), (upd[0], lead, upd[axis], tail))
        ctx.set_output(0, ctx.dtype(0), past)

    def step(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        """The copy of past (skipped in place) and the writes, on views made once."""
        past, upd = inputs[0], inputs[1]
        where = inputs[2] if len(inputs) > 2 else None
        out = outputs[0]
        out_shape, upd_shape = ctx.prepared
        batch, _, size, _ = out_shape
        length = upd_shape[2]
        copy = not same_storage(out, past)
        dst = reshaped(out, out_shape)
        src = upd.reshape(upd_shape)
        entries = list(zip(dst, src))  # per batch entry: (lead, size, tail), (lead, length, tail)
        zeros = [0] * batch
        linear = self.mode == "linear"
        modulus = max(size, 1)

        def call() -> None:
            starts = zeros if where is None else where.tolist()
            lo, hi = (min(starts), max(starts)) if batch else (0, 0)
            if lo < 0 or (linear and hi + length > size):
                message = (
                    f"write index {lo if lo < 0 else hi} with sequence_length {length} is out "
                    f"of range for max_sequence_length {size} ({self.mode} mode)"
                )
                raise self.fail(message, "invalid_input")
            if copy:
                np.copyto(out, past)
            first = lo % modulus
            if lo == hi and first + length <= size:  # one write for the whole batch
                np.copyto(dst[:, :, first : first + length], src)
                return
            for (d, s), w in zip(entries, starts):
                w %= modulus
                head = min(length, size - w)
                np.copyto(d[:, w : w + head], s[:, :head])
                if head < length:  # circular: the rest wraps to the start
                    np.copyto(d[:, : length - head], s[:, head:])

        return call
