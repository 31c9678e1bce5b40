"""ArgMax, ArgMin and TopK: positions of the extreme values along one axis.

Order is numpy's sort order: NaN is larger than every number (ArgMax picks the first NaN,
TopK with ``largest=1`` puts NaNs first, as onnx's reference does), ``-0 == +0``, and equal
values keep the lower index first (ArgMax/ArgMin with ``select_last_index`` take the last).
All three are selections, comparisons and copies: exact in any mode.

TopK picks one of four ways, all giving the same positions.  Short rows (or a small input)
sort whole: as (value, position) complex pairs in scratch, one in-place sort and no temporary
(:meth:`TopK._paired`), or, for 64-bit integers, which no complex part holds exactly, one
stable argsort (:func:`_sorted_first`).  On a long axis a small ``k`` first keeps only the
elements at least the k-th largest of some group maxima (:func:`_prefiltered`); otherwise one
partition finds the k-th value (:func:`_partitioned`).  The last two compare unsigned integer
keys (:func:`unsigned_keys`), a total order in which ties and NaNs need no special case.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._util import constant, is_float, zero_of
from ._values import axis_in, int_scalar, reshaped


def check_numeric(kernel: OpKernel, dtype: np.dtype, bools: bool = False) -> None:
    """The reduce family's type constraint: integers and floats (and bool where numpy's
    order of False < True serves); strings and other objects are an invalid model."""
    if not (is_float(dtype) or dtype.kind in "iu" or (bools and dtype == np.bool_)):
        raise kernel.fail(f"the input must be a number type, got {dtype}")


def _empty_axis(kernel: OpKernel, what: str) -> None:
    raise kernel.fail(f"cannot take the {what} of an empty axis", "invalid_input")


@dataclasses.dataclass(frozen=True)
class _ArgPlan:
    axis: int
    top: np.ndarray  # 0-d int64: n - 1, for select_last_index
    moved: tuple[int, ...] | None  # the axes with ``axis`` last, when a scratch copy is needed
    scratch: int | None  # the input copied with ``axis`` last (and reversed for the last index)
    rows: tuple[int, ...]  # the output's shape without the reduced axis


class _Arg(OpKernel):
    """np.argmax / np.argmin along ``axis``; select_last_index (opset 12) runs on the axis
    reversed and maps position j back to n - 1 - j.  numpy reduces a non-last axis through a
    copy of its own, so the input is copied (reversed if need be) into a scratch array with
    the axis last: a steady-state run allocates nothing."""

    supports_exact = True
    func: ClassVar[Any]
    what: ClassVar[str]

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.axis = int(node.attr("axis", 0))
        self.keepdims = bool(node.attr("keepdims", 1))
        self.last = node.opset >= 12 and bool(node.attr("select_last_index", 0))

    def infer(self, ctx: InferContext) -> None:
        check_numeric(self, ctx.dtype(0), bools=True)
        shape = ctx.shape(0)
        rank = len(shape)
        axis = axis_in(self, self.axis, rank)
        rows = shape[:axis] + shape[axis + 1 :]
        out = shape[:axis] + (1,) + shape[axis + 1 :] if self.keepdims else rows
        if shape[axis] == 0 and 0 not in out:
            _empty_axis(self, self.what)
        ctx.set_output(0, np.int64, out)
        moved = scratch = None
        if self.last or axis != rank - 1:
            moved = tuple(d for d in range(rank) if d != axis) + (axis,)
            scratch = ctx.add_scratch(ctx.dtype(0), [shape[d] for d in moved])
        top = constant(np.dtype(np.int64), shape[axis] - 1)
        ctx.prepared = _ArgPlan(axis, top, moved, scratch, rows)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _ArgPlan = ctx.prepared
        x, out = inputs[0], outputs[0]
        if out.size == 0:
            return
        if p.scratch is None:
            type(self).func(x, axis=p.axis, out=out, keepdims=self.keepdims)
            return
        work = ctx.scratch[p.scratch]
        if self.last:
            x = np.flip(x, p.axis)
        np.copyto(work, x.transpose(p.moved))
        flat = reshaped(out, p.rows)  # the other axes keep their order
        type(self).func(work, axis=-1, out=flat)
        if self.last:
            np.subtract(p.top, flat, out=flat)

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        p: _ArgPlan = ctx.prepared
        if p.scratch is not None or outputs[0].size == 0:
            return functools.partial(self.run, ctx, inputs, outputs)
        return functools.partial(
            type(self).func, inputs[0], axis=p.axis, out=outputs[0], keepdims=self.keepdims
        )


class ArgMax(_Arg):
    func = np.argmax
    what = "maximum"


class ArgMin(_Arg):
    func = np.argmin
    what = "minimum"


def unsigned_keys(x: np.ndarray) -> np.ndarray:
    """Unsigned integers in x's shape (C order, unless x is unsigned already) whose order is
    numpy's sort order of x and whose equality is TopK's and Unique's: NaN above every number
    and equal to every NaN, -0 equal to +0.

    A non-negative float's bits, read as an integer, order like the float; setting the sign
    bit puts them above the negatives, whose bits are all flipped so that larger magnitudes
    come lower.  Signed integers only flip their sign bit.
    """
    dtype = x.dtype
    if dtype == np.bool_ or dtype.kind == "u":
        return x.view(np.uint8) if dtype == np.bool_ else x
    unsigned, signed, sign_bit, top_bit = _key_types(dtype)
    if dtype.kind == "i":
        return np.bitwise_xor(x.view(unsigned), top_bit, out=np.empty(x.shape, unsigned))
    y = np.empty(x.shape, dtype)
    np.add(x, zero_of(dtype), out=y)  # -0 + 0 = +0
    top = np.maximum.reduce(y, axis=None) if y.size else 0  # NaN if any element is
    nan = np.isnan(y) if top != top else None
    bits = y.view(signed)
    flip = np.right_shift(bits, dtype.itemsize * 8 - 1)  # -1 for negatives, else 0
    np.bitwise_or(flip, sign_bit, out=flip)  # all bits, or the sign bit alone
    np.bitwise_xor(bits, flip, out=bits)
    key = bits.view(unsigned)
    if nan is not None:
        np.copyto(key, np.iinfo(unsigned).max, where=nan)
    return key


@functools.lru_cache(maxsize=32)
def _key_types(dtype: np.dtype) -> tuple[np.dtype, np.dtype, np.ndarray, np.ndarray]:
    """The unsigned and signed integer types of ``dtype``'s size and its sign bit as 0-d
    arrays of each (so ufuncs convert no scalar per call)."""
    bits = dtype.itemsize * 8
    unsigned, signed = np.dtype(f"u{dtype.itemsize}"), np.dtype(f"i{dtype.itemsize}")
    return (
        unsigned,
        signed,
        constant(signed, -(1 << (bits - 1))),
        constant(unsigned, 1 << (bits - 1)),
    )


def sort_keys(x: np.ndarray, largest: bool) -> np.ndarray:
    """Unsigned integers whose ascending order is the order TopK returns: values descending
    (``largest``, ``~key`` reverses an unsigned order) or ascending; see unsigned_keys."""
    key = unsigned_keys(x)
    return np.invert(key) if largest else key


def top_positions(rows: np.ndarray, k: int, largest: bool) -> np.ndarray:
    """Positions (rows, k) of each row's k largest (smallest) values in TopK's order."""
    n = rows.shape[1]
    if small(n, rows.size):
        return _sorted_first(rows, k, largest)
    found = _prefiltered(rows, k, largest) if k * 8 <= n else None
    if found is not None:
        return found
    return _partitioned(sort_keys(rows, largest), k)


#: Inputs smaller than this sort whole: the selections' fixed costs outweigh the sort.
_SMALL = 2048


def _sorted_first(rows: np.ndarray, k: int, largest: bool) -> np.ndarray:
    """One stable argsort, whose ascending order already puts NaN last and keeps ties in
    position order.  The largest: sort the row reversed, read the result backwards (values
    descending, ties now in ascending position) and map position j back to n - 1 - j."""
    if not largest:
        return np.argsort(rows, axis=1, kind="stable")[:, :k]
    n = rows.shape[1]
    order = np.argsort(rows[:, ::-1], axis=1, kind="stable")[:, ::-1][:, :k]
    return np.subtract(n - 1, order, out=order)


#: Elements per group of the prefilter's group maxima.
_GROUP = 128


def _prefiltered(rows: np.ndarray, k: int, largest: bool) -> np.ndarray | None:
    """The k winners among the few elements at least the k-th largest group maximum.

    The row's first m * g elements form m groups of g (strided, so the maxima are one
    vectorised ``maximum`` of g slices); k groups have a maximum at least as large as the
    k-th largest one, so every winner is too, ties and all, and the exact selection runs on
    those candidates only.  None when a NaN is about (a NaN maximum bounds nothing) or the
    bound leaves too many candidates.
    """
    n_rows, n = rows.shape
    g = min(_GROUP, n // (2 * k))
    if g < 8:
        return None
    m = n // g
    if rows.dtype == np.bool_:
        rows = rows.view(np.uint8)
    body = rows[:, : m * g].reshape(n_rows, g, m)
    extremes = (np.maximum if largest else np.minimum).reduce(body, axis=1)
    if is_float(rows.dtype) and (np.isnan(extremes).any() or np.isnan(rows[:, m * g :]).any()):
        return None  # a NaN wins over every number: no group bound holds
    at = m - k if largest else k - 1
    bound = np.partition(extremes, at, axis=1)[:, at : at + 1]
    flat = np.flatnonzero(rows >= bound if largest else rows <= bound)
    if flat.size * 4 > rows.size:
        return None
    r, c = np.divmod(flat, n)  # row-major: positions ascend within each row
    order = np.lexsort((sort_keys(rows[r, c], largest), r))  # stable: ties keep position order
    counts = np.bincount(r, minlength=n_rows)
    starts = np.cumsum(counts) - counts
    return c[order[starts[:, None] + np.arange(k)]]


def _partitioned(key: np.ndarray, k: int) -> np.ndarray:
    """Positions of each row's k smallest keys, ascending by key then position: one partition
    finds the k-th key; the keys below it and its first ties fill the k places."""
    kth = np.partition(key, k - 1, axis=-1)[:, k - 1 : k]
    chosen = key < kth
    need = k - np.count_nonzero(chosen, axis=-1)
    ties = key == kth
    if np.array_equal(np.count_nonzero(ties, axis=-1), need):
        chosen |= ties
    else:  # more ties than places: the lowest positions win
        rank = np.cumsum(ties, axis=-1, dtype=np.int64)
        chosen |= ties & (rank <= need[:, None])
    pos = np.nonzero(chosen)[1].reshape(key.shape[0], k)  # row-major: ascending per row
    order = np.argsort(np.take_along_axis(key, pos, axis=-1), axis=-1, kind="stable")
    return np.take_along_axis(pos, order, axis=-1)


def small(n: int, size: int) -> bool:
    """Whether TopK sorts whole rows: short rows, or a small input, where the selections'
    fixed costs outweigh a sort."""
    return n <= 64 or size < _SMALL


def pair_type(dtype: np.dtype, n: int) -> np.dtype | None:
    """The complex type whose real part holds every value of ``dtype`` exactly and whose
    imaginary part every position below ``n``: complex64 for floats of up to 32 bits (through
    float32), bool and integers of up to 16 bits; complex128 for float64 and 32-bit integers.
    None for 64-bit integers (and rows too long for the positions), which take the general
    path."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_ or (dtype.kind in "iu" and dtype.itemsize <= 2):
        pair = np.dtype(np.complex64)
    elif is_float(dtype) and dtype.itemsize <= 4:
        pair = np.dtype(np.complex64)
    elif dtype == np.float64 or (dtype.kind in "iu" and dtype.itemsize == 4):
        pair = np.dtype(np.complex128)
    else:
        return None
    return pair if n <= (1 << 24 if pair == np.complex64 else 1 << 53) else None


@dataclasses.dataclass(frozen=True)
class _TopKPlan:
    axis: int
    k: int
    rows: int  # the input as rows along the axis: (rows, n)
    n: int
    last: bool  # the axis is the last one: rows and outputs are views, no moves
    offsets: np.ndarray  # (rows, 1) intp: where each row starts in the flat input
    pairs: int | None  # scratch: (value, position) pairs, the axis last; None: general path
    columns: np.ndarray | None  # (n,) the pairs' imaginary parts: -j (largest) or j


class TopK(OpKernel):
    """The k largest (or smallest, opset 11 ``largest=0``) elements along ``axis`` and their
    int64 positions, sorted; ``sorted=0`` leaves the order free and gets the sorted one.

    ``k`` is an attribute before opset 10 and a one-element int64 input from then on: a
    constant plans statically, a run-time one makes the node dynamic (shapes depend on it).

    Short rows (or a small input) sort whole, as (value, position) pairs: complex numbers,
    which numpy sorts by real part, then imaginary part, NaN real parts last and equal to each
    other, ``-0 == +0`` (:func:`pair_type`).  The smallest: positions ``j`` as the imaginary
    parts, the first k pairs.  The largest: positions ``-j``, the last k pairs read backwards
    (values descending, equal values by ascending position, NaNs first).  A copy in, one
    in-place sort and two copies out: no per-row work and no temporary, which matters for the
    small inputs where numpy's per-call costs dominate.  Everything else goes through
    :func:`top_positions`.
    """

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.axis = int(node.attr("axis", -1))
        self.largest = node.opset < 11 or bool(node.attr("largest", 1))
        self.k = None
        if node.opset < 10:
            self.k = node.attr("k")
            if self.k is None:
                raise self.fail("attribute k is required")
            if self.k < 0:
                raise self.fail(f"k must not be negative, got {self.k}")

    def infer(self, ctx: InferContext) -> None:
        check_numeric(self, ctx.dtype(0), bools=True)
        shape = ctx.shape(0)
        axis = axis_in(self, self.axis, len(shape))
        if self.k is None and ctx.dtype(1).kind not in "iu":
            raise self.fail(f"K must be int64, got {ctx.dtype(1)}")
        k = self.k if self.k is not None else int_scalar(self, ctx, 1, "K")
        if not 0 <= k <= shape[axis]:
            raise self.fail(
                f"k = {k} is out of range for an axis of {shape[axis]} elements", "invalid_input"
            )
        out = shape[:axis] + (k,) + shape[axis + 1 :]
        ctx.set_output(0, ctx.dtype(0), out)
        ctx.set_output(1, np.int64, out)
        n = shape[axis]
        size = int(np.prod(shape, dtype=np.int64))
        rows = size // n if n else 0
        offsets = (np.arange(rows, dtype=np.intp) * n)[:, None]
        pair = pair_type(ctx.dtype(0), n) if small(n, size) and k and rows else None
        pairs = columns = None
        if pair is not None:
            moved = shape[:axis] + shape[axis + 1 :] + (n,)
            pairs = ctx.add_scratch(pair, moved)
            j = np.arange(n, dtype=pair.type(0).real.dtype)
            columns = np.negative(j) if self.largest else j
        last = axis == len(shape) - 1
        ctx.prepared = _TopKPlan(axis, k, rows, n, last, offsets, pairs, columns)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        self._step(ctx, inputs[0], outputs)()

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        return self._step(ctx, inputs[0], outputs)

    def _step(
        self, ctx: KernelContext, x: np.ndarray, outputs: Sequence[Any]
    ) -> Callable[[], None]:
        p: _TopKPlan = ctx.prepared
        values, indices = outputs[0], outputs[1] if len(outputs) > 1 else None
        if p.k == 0 or p.rows == 0:
            return _nothing
        if p.pairs is not None:
            return self._paired(ctx.scratch[p.pairs], p, x, values, indices)
        return self._general(p, x, values, indices)

    def _paired(
        self, pairs: np.ndarray, p: _TopKPlan, x: np.ndarray, values: Any, indices: Any
    ) -> Callable[[], None]:
        """The sort of (value, position) pairs, on views fixed once (class docstring)."""
        if self.largest:
            chosen = pairs[..., p.n - 1 : p.n - 1 - p.k : -1] if p.k < p.n else pairs[..., ::-1]
        else:
            chosen = pairs[..., : p.k]
        real, imag, columns = pairs.real, pairs.imag, p.columns
        x_moved = x if p.last else np.moveaxis(x, p.axis, -1)
        steps: list[Callable[[], Any]] = [
            functools.partial(np.copyto, real, x_moved, casting="unsafe"),
            functools.partial(np.copyto, imag, columns),
            functools.partial(pairs.sort, axis=-1),
        ]
        if indices is not None:
            ind = indices if p.last else np.moveaxis(indices, p.axis, -1)
            if self.largest:  # the imaginary parts are -j
                steps.append(functools.partial(np.negative, chosen.imag, out=ind, casting="unsafe"))
            else:
                steps.append(functools.partial(np.copyto, ind, chosen.imag, casting="unsafe"))
        if values is not None:
            val = values if p.last else np.moveaxis(values, p.axis, -1)
            steps.append(functools.partial(np.copyto, val, chosen.real, casting="unsafe"))

        def step() -> None:
            for f in steps:
                f()

        return step

    def _general(
        self, p: _TopKPlan, x: np.ndarray, values: Any, indices: Any
    ) -> Callable[[], None]:
        """:func:`top_positions` on the input as (rows, n).  Its selections make temporaries
        whose sizes depend on the values (the prefilter's candidates), so this path allocates;
        a non-last axis is also moved into a new array in every run."""
        k, largest, offsets = p.k, self.largest, p.offsets
        if not p.last:
            x = np.moveaxis(x, p.axis, -1)
        rows = x.reshape(p.rows, p.n) if p.last else None

        def step() -> None:
            r = rows if rows is not None else x.reshape(p.rows, p.n)
            pos = top_positions(r, k, largest)
            if indices is not None:
                _put(indices, pos, p)
            if values is not None:
                np.add(pos, offsets, out=pos)  # flat positions in the rows
                flat = r.reshape(-1)
                if p.last:
                    np.take(flat, pos, out=values.reshape(p.rows, k), mode="clip")
                else:
                    _put(values, np.take(flat, pos), p)

        return step


def _nothing() -> None:
    pass


def _put(out: np.ndarray, rows: np.ndarray, p: _TopKPlan) -> None:
    """Write (rows, k) results into an output whose axis ``p.axis`` has the k."""
    if p.last:
        np.copyto(out.reshape(p.rows, p.k), rows)
    else:
        moved = np.moveaxis(out, p.axis, -1)
        np.copyto(moved, rows.reshape(moved.shape))
