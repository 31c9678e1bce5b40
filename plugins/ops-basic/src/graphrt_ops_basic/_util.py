"""Small helpers every ops-basic family shares."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from graphrt.plugin import InferContext

FLOAT_KINDS = "fc"
_CANONICAL_NAN = {
    np.dtype(np.float32): np.float32(np.nan),  # 0x7FC00000
    np.dtype(np.float64): np.float64(np.nan),  # 0x7FF8000000000000
    np.dtype(np.float16): np.float16(np.nan),  # 0x7E00
}


#: The same as read-only 0-d arrays: copyto converts a scalar into a new array every call.
_NAN_ARRAYS = {d: np.array(v) for d, v in _CANONICAL_NAN.items()}
for _a in _NAN_ARRAYS.values():
    _a.flags.writeable = False


def needs_nan_rewrite(ctx: InferContext, dtype: np.dtype, shape: Sequence[int]) -> bool:
    """Exact mode rewrites NaN results to the canonical quiet NaN; ask for a mask scratch."""
    if ctx.exact and np.dtype(dtype) in _CANONICAL_NAN:
        ctx.prepared = ctx.add_scratch(np.bool_, shape)
        return True
    return False


def rewrite_nan(out: np.ndarray, mask: np.ndarray) -> None:
    """Replace every NaN in ``out`` by the canonical quiet NaN (exact mode's bit rule)."""
    np.isnan(out, out=mask)
    np.copyto(out, _NAN_ARRAYS[out.dtype], where=mask)


#: canonical_sum adds an axis longer than this by ``np.add.accumulate`` when given a work array
#: (every partial sum is an output, so numpy adds them in order: the bits of the loop, without
#: a Python step per term; an exact [1, 1000] Softmax 1.4 ms -> 0.2).
ACCUMULATE_FROM = 8


def canonical_sum(
    t: np.ndarray, axis: int, acc: np.ndarray, work: np.ndarray | None = None
) -> None:
    """acc = sum of ``t`` along ``axis`` in ascending index order, ``acc`` keeping the axis at 1:
    acc = t[0]; acc = acc + t[1]; ... (docs/exact-mode.md); an empty axis gives +0.  ``work``:
    an array of t's shape and acc's type the partial sums may go to (its values are lost)."""
    lead = (slice(None),) * axis
    n = t.shape[axis]
    if n == 0:
        acc.fill(0)
        return
    if work is not None and n > ACCUMULATE_FROM:
        np.add.accumulate(t, axis=axis, out=work)
        np.copyto(acc, work[(*lead, slice(n - 1, n))])
        return
    np.copyto(acc, t[(*lead, slice(0, 1))])
    for k in range(1, n):
        np.add(acc, t[(*lead, slice(k, k + 1))], out=acc)


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def exact_inputs(kernel, names: Sequence[str]) -> None:
    """The node has exactly these inputs, every one given (checked in the constructor: a third
    input to Add failed mid-run as a kernel error)."""
    given = list(kernel.node.inputs)
    if len(given) != len(names) or not all(given):
        wanted = ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]
        count = ("one", "two", "three", "four")[len(names) - 1] if len(names) <= 4 else len(names)
        raise kernel.fail(f"takes {count} inputs {wanted}, got {given}")


def same_types(kernel, ctx: InferContext, count: int) -> None:
    """ONNX type constraint T: the first ``count`` inputs (those present) share one element type."""
    types = [ctx.dtype(i) for i in range(min(count, ctx.num_inputs)) if ctx.has_input(i)]
    if any(t != types[0] for t in types[1:]):
        names = ", ".join(str(t) for t in types)
        raise kernel.fail(f"inputs must have one element type, got {names}")


def zero_of(dtype: np.dtype) -> np.ndarray:
    """A 0-d zero of ``dtype``; ufuncs given a Python or numpy scalar allocate a 0-d array per
    call, so kernels keep these instead."""
    found = _ZEROS.get(dtype)  # (setdefault would build a new zero on every call)
    if found is None:
        found = _ZEROS.setdefault(np.dtype(dtype), np.zeros((), dtype))
    return found


_ZEROS: dict[np.dtype, np.ndarray] = {}


def is_float(dtype: np.dtype) -> bool:
    """numpy's floats and ml_dtypes' (bfloat16, float8...), whose dtype kind is 'V'."""
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or (dtype.kind == "V" and dtype.name.startswith(("bfloat", "float")))


@functools.lru_cache(maxsize=256)
def constant(dtype: np.dtype, value: float) -> np.ndarray:
    """A read-only 0-d array: ufuncs take it without converting a Python or numpy scalar into
    a new array on every call, which would allocate in the steady state."""
    arr = np.array(value, dtype=np.dtype(dtype))
    arr.flags.writeable = False
    return arr


def same_storage(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` are the same elements: an in-place output and its input."""
    return (
        a.shape == b.shape
        and a.strides == b.strides
        and a.dtype == b.dtype
        and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    )


_ZERO_BUFFERS: dict[np.dtype, np.ndarray] = {}


def zeros_like_shape(dtype: np.dtype, shape: Sequence[int]) -> np.ndarray:
    """A read-only array of zeros with this shape, shared by every plan.

    ``np.maximum(x, zeros)`` runs numpy's vectorised loop; against a 0-d zero it takes a slower
    scalar path (about 3x on float32).  The buffer grows to the largest size asked for.
    """
    dtype = np.dtype(dtype)
    size = int(np.prod(shape, dtype=np.int64))
    buf = _ZERO_BUFFERS.get(dtype)
    if buf is None or buf.size < size:
        buf = np.zeros(max(size, 1), dtype)
        buf.flags.writeable = False
        _ZERO_BUFFERS[dtype] = buf
    return buf[:size].reshape(shape)
