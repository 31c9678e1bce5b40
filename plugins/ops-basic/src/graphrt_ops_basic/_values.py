"""Integer inputs, axes and index bounds: what the shape and tensor families share."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graphrt.plugin import InferContext, OpKernel


def int_values(ctx: InferContext, i: int) -> list[int]:
    """Input i's values as Python ints (no overflow when adding a dim to INT64_MIN).

    Raises NeedsRunTimeValues at plan time when the input is not a constant, so the node
    becomes dynamic: only call it for inputs an output shape depends on.
    """
    # tolist() first: int() of Python numbers, not of one numpy scalar per element
    return [int(v) for v in np.asarray(ctx.value(i)).reshape(-1).tolist()]


def int_scalar(kernel: OpKernel, ctx: InferContext, i: int, what: str) -> int:
    values = int_values(ctx, i)
    if len(values) != 1:
        raise kernel.fail(f"{what} must be one value, got {len(values)}", "invalid_input")
    return values[0]


def axis_in(kernel: OpKernel, axis: int, rank: int, kind: str = "invalid_model") -> int:
    """``axis`` in [-rank, rank - 1] made non-negative (a 0-d tensor has no axis); an
    attribute out of range is a bad model, an input value a bad input."""
    if not -rank <= axis < rank:
        raise kernel.fail(f"axis {axis} is out of range for rank {rank}", kind)
    return axis + rank if axis < 0 else axis


def axes_in(kernel: OpKernel, axes: list[int], rank: int, kind: str) -> list[int]:
    out = [axis_in(kernel, a, rank, kind) for a in axes]
    if len(set(out)) != len(out):
        raise kernel.fail(f"axes {axes} repeat an axis", kind)
    return out


def check_bounds(kernel: OpKernel, lo: int, hi: int, size: int) -> None:
    """Indices must lie in [-size, size - 1] (ONNX allows negative indices from the end)."""
    if lo < -size or hi >= size:
        bad = lo if lo < -size else hi
        message = f"index {bad} is out of range for an axis of size {size}"
        raise kernel.fail(message, "invalid_input")


def check_indices(kernel: OpKernel, indices: np.ndarray, size: int) -> None:
    if indices.size:
        check_bounds(kernel, int(indices.min()), int(indices.max()), size)


def reshaped(out: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """A view of ``out`` with another shape; raises rather than copy (writes must land)."""
    view = out.view()
    view.shape = tuple(shape)
    return view
