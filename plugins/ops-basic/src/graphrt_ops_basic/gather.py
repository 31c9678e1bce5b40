"""Gather, GatherElements, ScatterElements (Scatter before opset 11), NonZero: indexing by the
values of a tensor.

Indices may be negative (counted from the end) and must lie in [-s, s - 1]; an index outside
is ``SessionError("invalid_input")``, never numpy's wrap-around.  Constant indices (a weight
table lookup, a fixed permutation) are checked and normalised once per plan into ``prepared``;
run-time indices are checked in every run, with reductions into 0-d scratch arrays or by
numpy's own fancy indexing (whose bounds rule is ONNX's), so a static run allocates nothing.
GatherElements turns each index into a flat offset of the data: ``base`` (the offset of the
other coordinates, per plan) + index * stride.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._steps import BoundStep, indexed_write
from ._util import constant, exact_inputs, same_storage
from ._values import axis_in, check_bounds, check_indices, reshaped


def _index_type(kernel: OpKernel, ctx: InferContext, i: int) -> None:
    if ctx.dtype(i).kind != "i":
        raise kernel.fail(f"indices must be int32 or int64, got {ctx.dtype(i)}")


def _checked(kernel: OpKernel, ctx: KernelContext, indices: np.ndarray, bounds, size: int):
    """Check run-time indices with min/max into the 0-d scratch arrays ``bounds``."""
    if indices.size:
        lo, hi = (ctx.scratch[b] for b in bounds)
        np.minimum.reduce(indices, axis=None, out=lo)  # np.amin's Python wrapper costs more
        np.maximum.reduce(indices, axis=None, out=hi)
        check_bounds(kernel, int(lo), int(hi), size)


@dataclasses.dataclass(frozen=True)
class _GatherPlan:
    axis: int
    size: int  # extent of the gathered axis
    indices: np.ndarray | None  # constant indices, checked and made non-negative (intp)
    scratch: tuple[int, int, int] | None  # run-time indices: intp copy, min, max


class Gather(OpKernel):
    """np.take along ``axis``; output shape data[:axis] + indices + data[axis + 1:].

    Checked indices go to ``np.take(mode="wrap")``, which maps -1 to s - 1 without the
    temporary copy ``mode="raise"`` makes.
    """

    supports_exact = True
    #: An embedding table may be a float16/bfloat16 weight typed float32 (docs/fp16.md): the
    #: gathered rows are widened into the output.
    half_weight_inputs = (0,)

    def infer(self, ctx: InferContext) -> None:
        _index_type(self, ctx, 1)
        data, idx_shape = ctx.shape(0), ctx.shape(1)
        axis = axis_in(self, self.node.attr("axis", 0), len(data))
        ctx.set_output(0, ctx.dtype(0), data[:axis] + idx_shape + data[axis + 1 :])
        size = data[axis]
        known = ctx.known_value(1)
        if known is not None:
            known = np.asarray(known)
            check_indices(self, known, size)
            indices = np.where(known < 0, known + size, known).astype(np.intp)
            ctx.prepared = _GatherPlan(axis, size, indices, None)
            return
        copy = ctx.add_scratch(np.intp, idx_shape)
        bounds = (ctx.add_scratch(np.intp, ()), ctx.add_scratch(np.intp, ()))
        ctx.prepared = _GatherPlan(axis, size, None, (copy,) + bounds)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _GatherPlan = ctx.prepared
        indices = p.indices
        if indices is None:
            indices = ctx.scratch[p.scratch[0]]
            np.copyto(indices, inputs[1])  # np.take would convert int32 into a new array
            _checked(self, ctx, indices, p.scratch[1:], p.size)
        if inputs[0].dtype != outputs[0].dtype:  # half storage: widen the rows taken
            outputs[0][...] = inputs[0].take(indices, axis=p.axis, mode="wrap")
            return
        inputs[0].take(indices, axis=p.axis, out=outputs[0], mode="wrap")

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        p: _GatherPlan = ctx.prepared
        if p.indices is None or inputs[0].dtype != outputs[0].dtype:
            return functools.partial(self.run, ctx, inputs, outputs)
        return functools.partial(
            inputs[0].take, p.indices, axis=p.axis, out=outputs[0], mode="wrap"
        )


@dataclasses.dataclass(frozen=True)
class _ElementsPlan:
    size: int  # extent of the indexed axis of data
    stride: np.ndarray  # 0-d intp: flat distance between neighbours along the axis
    base: np.ndarray  # intp, indices' shape: flat offset of each element's other coordinates
    flat: np.ndarray | None  # constant indices: the finished flat offsets
    scratch: tuple[int, int, int] | None  # run-time indices: flat offsets, min, max


def _elements_axis(kernel: OpKernel, ctx: InferContext, idx_shape: tuple[int, ...]) -> int:
    """Checks shared by GatherElements and ScatterElements; the indexed axis."""
    _index_type(kernel, ctx, 1)
    data = ctx.shape(0)
    axis = axis_in(kernel, kernel.node.attr("axis", 0), len(data))
    if len(idx_shape) != len(data) or any(
        n > d for k, (n, d) in enumerate(zip(idx_shape, data)) if k != axis
    ):
        message = f"indices of shape {list(idx_shape)} do not fit data of shape {list(data)}"
        raise kernel.fail(message, "invalid_input")
    return axis


def _elements_plan(kernel: OpKernel, ctx: InferContext, idx_shape: tuple[int, ...]):
    """The flat-offset plan: each index becomes base + index * stride."""
    axis = _elements_axis(kernel, ctx, idx_shape)
    data = ctx.shape(0)
    rank = len(data)
    strides = [math.prod(data[k + 1 :]) for k in range(rank)]
    base = np.zeros(idx_shape, np.intp)
    for k, n in enumerate(idx_shape):
        if k != axis:
            step = np.arange(n, dtype=np.intp) * strides[k]
            base += step.reshape([n if j == k else 1 for j in range(rank)])
    stride = constant(np.dtype(np.intp), strides[axis])
    known = ctx.known_value(1)
    if known is not None:
        known = np.asarray(known)
        check_indices(kernel, known, data[axis])
        flat = base + np.where(known < 0, known + data[axis], known) * strides[axis]
        return _ElementsPlan(data[axis], stride, base, flat.astype(np.intp), None)
    it = ctx.dtype(1)
    scratch = (
        ctx.add_scratch(np.intp, idx_shape),
        ctx.add_scratch(it, ()),
        ctx.add_scratch(it, ()),
    )
    return _ElementsPlan(data[axis], stride, base, None, scratch)


def _flat(kernel: OpKernel, ctx: KernelContext, indices: np.ndarray) -> np.ndarray:
    """Flat offsets of run-time (or, when constant, prepared) indices."""
    p: _ElementsPlan = ctx.prepared
    if p.flat is not None:
        return p.flat
    flat = ctx.scratch[p.scratch[0]]
    _checked(kernel, ctx, indices, p.scratch[1:], p.size)
    if flat.size:
        np.remainder(indices, constant(np.dtype(np.intp), p.size), out=flat)  # -1 -> s - 1
        np.multiply(flat, p.stride, out=flat)
        np.add(flat, p.base, out=flat)
    return flat


class GatherElements(OpKernel):
    """out[i][j][k] = data[index[i][j][k]][j][k] (axis 0); output shape = indices' shape."""

    supports_exact = True

    def infer(self, ctx: InferContext) -> None:
        ctx.prepared = _elements_plan(self, ctx, ctx.shape(1))
        ctx.set_output(0, ctx.dtype(0), ctx.shape(1))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        flat = _flat(self, ctx, inputs[1])
        inputs[0].reshape(-1).take(flat, out=outputs[0], mode="clip")

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        p: _ElementsPlan = ctx.prepared
        if p.flat is None:
            return functools.partial(self.run, ctx, inputs, outputs)
        return functools.partial(inputs[0].reshape(-1).take, p.flat, out=outputs[0], mode="clip")


#: ScatterElements' and ScatterND's reductions: the ufunc folding an update into an element.
REDUCTIONS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def reduction_of(kernel: OpKernel) -> str:
    """The ``reduction`` attribute (opset 16; max and min from 18): ignored before 16."""
    node = kernel.node
    reduction = node.attr("reduction", "none") if node.opset >= 16 else "none"
    allowed = ["none", "add", "mul"] + (["max", "min"] if node.opset >= 18 else [])
    if reduction not in allowed:
        raise kernel.fail(f"reduction must be one of {', '.join(allowed)}, got {reduction!r}")
    return reduction


@dataclasses.dataclass(frozen=True)
class _ScatterPlan:
    axis: int
    size: int  # extent of the indexed axis of data
    flat: np.ndarray | None  # constant indices: flat offsets into data (indices' shape)
    grid: tuple[np.ndarray, ...]  # run-time: the other axes' coordinates, broadcastable


class ScatterElements(BoundStep):
    """A copy of data with updates written (or combined, ``reduction``) at the indexed places.

    Run-time indices go straight into numpy's fancy indexing, with open-grid coordinates for
    the other axes: one call that checks bounds and counts negative indices from the end, as
    ONNX does (its IndexError becomes ``invalid_input``); constant ones were made flat
    offsets once per plan.  ``none`` writes in index order, so with repeated indices (undefined
    in ONNX) the last update wins.  Reductions apply each update in index order
    (``ufunc.at``).  Not exact: the add and mul reductions round, and their NaN results keep
    hardware payloads.
    """

    in_place_input = 0

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        exact_inputs(self, ("data", "indices", "updates"))
        self.reduction = reduction_of(self)

    def infer(self, ctx: InferContext) -> None:
        idx = ctx.shape(1)
        if idx != ctx.shape(2):
            message = f"indices {list(idx)} and updates {list(ctx.shape(2))} differ"
            raise self.fail(message, "invalid_input")
        if ctx.dtype(0) != ctx.dtype(2):
            raise self.fail(f"data is {ctx.dtype(0)} but updates are {ctx.dtype(2)}")
        ctx.set_output(0, ctx.dtype(0), ctx.shape(0))
        if ctx.known_value(1) is not None:
            p = _elements_plan(self, ctx, idx)
            ctx.prepared = _ScatterPlan(-1, p.size, p.flat, ())
            return
        axis = _elements_axis(self, ctx, idx)
        rank = len(idx)
        grid = tuple(
            np.arange(n, dtype=np.intp).reshape([n if j == k else 1 for j in range(rank)])
            for k, n in enumerate(idx)
        )
        ctx.prepared = _ScatterPlan(axis, ctx.shape(0)[axis], None, grid)

    def step(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        """The copy of data (skipped in place) and one indexed write."""
        p: _ScatterPlan = ctx.prepared
        data, indices, updates = inputs
        out = outputs[0]
        if p.flat is not None:
            target, where = reshaped(out, (out.size,)), p.flat
        else:
            target, where = out, p.grid[: p.axis] + (indices,) + p.grid[p.axis + 1 :]
        return indexed_write(
            self,
            None if same_storage(out, data) else data,
            out,
            target,
            where,
            updates,
            REDUCTIONS.get(self.reduction),
            functools.partial(check_indices, self, indices, p.size),
        )


class Scatter(ScatterElements):
    """Opsets 9-10: ScatterElements under its deprecated name, without reductions.

    Every update is written, never combined (the last of repeated indices wins): exact.
    """

    supports_exact = True


class NonZero(OpKernel):
    """The (rank, count) int64 coordinates of the non-zero elements, in row-major order.

    A 0-d input gives shape (0, 1) or (0, 0), as ONNX specifies (numpy would say (1, n)).
    """

    supports_exact = True
    outputs_data_dependent = True

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x = inputs[0]
        if x.ndim == 0:
            ctx.allocate_output(0, np.int64, (0, int(bool(x))))
            return
        coords = np.nonzero(x)
        out = ctx.allocate_output(0, np.int64, (x.ndim, coords[0].size))
        for row, c in zip(out, coords):
            np.copyto(row, c)
