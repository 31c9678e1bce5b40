"""RoiAlign: pool each region of interest into an (output_height, output_width) grid of bins.

A region ``[x1, y1, x2, y2]`` of image ``batch_indices[r]`` is scaled by ``spatial_scale`` and,
in ``half_pixel`` mode (the default from opset 16), shifted by -0.5; ``output_half_pixel``
(opset 10's only behaviour) keeps it and makes it at least 1 x 1.  Each bin holds a grid of
``sampling_ratio`` x ``sampling_ratio`` points (``ceil(roi_extent / output_extent)`` per axis when
it is 0) placed at ``start + bin * p + (i + 0.5) * bin / grid``; a point is the bilinear
interpolation of its four neighbours, a point beyond one pixel outside the image weighs 0, and
coordinates are clamped to the image as in the original Caffe2 kernel.  ``avg`` averages the
points; ``max`` takes, as the spec's reference and onnxruntime do, the largest of the four
weighted neighbours ``w_i * v_i`` of every point, then the largest over the points.

How: X is moved channel-last once per run, so every neighbour is one row of C contiguous values.
A point's weight is its y weight times its x weight, so per axis a small table gives every
(region, bin, point) its two neighbours (flat row offsets) and weights (:func:`_sample_axis`),
and the indices and weights of every (bin, point, corner) are two broadcasting operations.  One
``np.take`` gathers the rows; ``avg`` reduces each bin's weights against its rows with one
batched matrix product, ``max`` weights the rows and reduces them with one ``np.maximum.reduce``
(gathered point-major, so it reads whole blocks).  Regions, bin rows and a bin's points are cut
into chunks of at most ``CHUNK`` gathered values (at least one point of one bin row), which stay
in cache, so a huge adaptive grid costs time, never memory.

With a fixed ``sampling_ratio`` every table and buffer is planned scratch: a steady-state run
allocates no array data.  An adaptive grid depends on the regions' values: each run groups the
regions by grid size and allocates those groups' tables (data-dependent sizes); the gathers
still use the scratch.  float16 and bfloat16 compute in float32.  Not exact (floor and clamping
of computed coordinates, sums in the matrix product's order).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._typed_attrs import typed_attr
from ._util import constant, is_float
from ._values import reshaped

#: Gathered values (rows x channels) per chunk.
CHUNK = 1 << 17
#: Largest adaptive grid per axis (ceil(roi / out) of an absurd region is clipped to it).
MAX_GRID = 1 << 20
#: Sampling points per axis table of an adaptive group at once (regions are split beyond).
TABLE_POINTS = 1 << 16


@dataclasses.dataclass(frozen=True)
class _Axis:
    """Per-plan constants and scratch of one axis' table (y: the images' base rows too)."""

    bins: int
    pos: np.ndarray  # (1, bins, 1): bin numbers in the compute type
    consts: tuple[np.ndarray, ...]  # 0-d: extent, extent - 1, stride (intp)
    table: tuple[int, ...] | None  # fixed grid: scratch idx, wts, coord, low, inside, last


@dataclasses.dataclass(frozen=True)
class _Plan:
    ct: np.dtype
    shape: tuple[int, int, int, int]  # N, C, H, W
    rows: int  # scratch (N * H * W, C): X channel-last
    box: int  # scratch (R, 4): the scaled region
    size: int  # scratch (2, R): bin height and width
    base: int  # scratch (R,) intp: first row of each region's image
    bounds: tuple[int, int]  # scratch 0-d: min and max of batch_indices
    idx: int  # scratch (budget / C,) intp: one chunk's rows
    wts: int  # scratch (budget / C,): their weights
    stage: tuple[int, int]  # scratch: indices and weights before their layout (as idx, wts)
    vals: int  # scratch (budget,): the gathered values
    part: int  # scratch (budget / 4,): a chunk's bins, when a bin spans several chunks
    result: int  # scratch (R, out_h, out_w, C)
    budget: int
    y: _Axis
    x: _Axis
    k: dict[str, np.ndarray]  # 0-d constants of the compute type
    image: np.ndarray  # 0-d intp: rows per image (H * W)
    sub: np.ndarray | None  # fixed grid: (1, 1, grid) point numbers + 0.5


class RoiAlign(OpKernel):
    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.mode = typed_attr(self, "mode", "avg", "str")
        if self.mode not in ("avg", "max"):
            raise self.fail(f"mode must be avg or max, got {self.mode!r}")
        transform = "output_half_pixel"
        if node.opset >= 16:
            transform = typed_attr(self, "coordinate_transformation_mode", "half_pixel", "str")
        if transform not in ("half_pixel", "output_half_pixel"):
            raise self.fail(
                "coordinate_transformation_mode must be half_pixel or output_half_pixel, "
                f"got {transform!r}"
            )
        self.half_pixel = transform == "half_pixel"
        self.height = typed_attr(self, "output_height", 1, "int")
        self.width = typed_attr(self, "output_width", 1, "int")
        if self.height < 1 or self.width < 1:
            raise self.fail(f"output {self.height} x {self.width} must be at least 1 x 1")
        self.ratio = typed_attr(self, "sampling_ratio", 0, "int")
        if self.ratio < 0:
            raise self.fail(f"sampling_ratio must be >= 0, got {self.ratio}")
        self.scale = typed_attr(self, "spatial_scale", 1.0, "float")

    def infer(self, ctx: InferContext) -> None:
        x, rois, idx = ctx.shape(0), ctx.shape(1), ctx.shape(2)
        dtype = ctx.dtype(0)
        if not is_float(dtype) or ctx.dtype(1) != dtype:
            message = f"X ({dtype}) and rois ({ctx.dtype(1)}) must be one float type"
            raise self.fail(message, "invalid_input")
        if ctx.dtype(2) != np.int64:
            raise self.fail(f"batch_indices must be int64, got {ctx.dtype(2)}", "invalid_input")
        if len(x) != 4 or len(rois) != 2 or rois[1] != 4 or idx != rois[:1]:
            message = (
                f"X {list(x)}, rois {list(rois)} and batch_indices {list(idx)} must be "
                "(N, C, H, W), (R, 4) and (R,)"
            )
            raise self.fail(message, "invalid_input")
        ctx.set_output(0, dtype, (rois[0], x[1], self.height, self.width))
        ct = dtype if dtype in (np.float32, np.float64) else np.dtype(np.float32)
        n, c, h, w = x
        r = rois[0]
        budget = max(CHUNK, 4 * self.width * c)  # at least one point of one bin row
        points = budget // max(c, 1)
        grid = self.ratio or None
        k = {name: constant(ct, v) for name, v in (("zero", 0), ("one", 1), ("minus", -1))}
        k.update(scale=constant(ct, self.scale), half=constant(ct, 0.5))
        k.update(height=constant(ct, self.height), width=constant(ct, self.width))
        if grid:
            k.update(grid=constant(ct, grid), count=constant(ct, grid * grid))
        ctx.prepared = _Plan(
            ct=ct,
            shape=(n, c, h, w),
            rows=ctx.add_scratch(ct, (n * h * w, c)),
            box=ctx.add_scratch(ct, (r, 4)),
            size=ctx.add_scratch(ct, (2, r)),
            base=ctx.add_scratch(np.intp, (r,)),
            bounds=(ctx.add_scratch(ctx.dtype(2), ()), ctx.add_scratch(ctx.dtype(2), ())),
            idx=ctx.add_scratch(np.intp, (points,)),
            wts=ctx.add_scratch(ct, (points,)),
            stage=(ctx.add_scratch(np.intp, (points,)), ctx.add_scratch(ct, (points,))),
            vals=ctx.add_scratch(ct, (points * c,)),
            part=ctx.add_scratch(ct, (budget // 4,)),
            result=ctx.add_scratch(ct, (r, self.height, self.width, c)),
            budget=budget,
            y=_axis_plan(ctx, ct, r, self.height, h, w, grid),
            x=_axis_plan(ctx, ct, r, self.width, w, 1, grid),
            k=k,
            image=constant(np.intp, h * w),
            sub=(np.arange(grid, dtype=ct) + ct.type(0.5)).reshape(1, 1, grid) if grid else None,
        )

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Plan = ctx.prepared
        x, rois, batch = inputs
        out = outputs[0]
        n, c, h, w = p.shape
        if rois.shape[0] == 0:
            return
        lo, hi = (ctx.scratch[b] for b in p.bounds)
        np.amin(batch, out=lo)
        np.amax(batch, out=hi)
        if int(lo) < 0 or int(hi) >= n:
            bad = int(lo) if int(lo) < 0 else int(hi)
            message = f"batch index {bad} is out of range for {n} images"
            raise self.fail(message, "invalid_input")
        if c == 0:
            return
        if h == 0 or w == 0:
            out.fill(0)
            return
        rows = ctx.scratch[p.rows]
        np.copyto(rows.reshape(n, h, w, c), x.transpose(0, 2, 3, 1), casting="unsafe")
        k = p.k
        box, size, base = ctx.scratch[p.box], ctx.scratch[p.size], ctx.scratch[p.base]
        np.copyto(box, rois, casting="unsafe")  # (then every operation in the compute type)
        np.multiply(box, k["scale"], out=box)
        if self.half_pixel:
            np.subtract(box, k["half"], out=box)
        np.subtract(box[:, 3], box[:, 1], out=size[0])  # the region's extents
        np.subtract(box[:, 2], box[:, 0], out=size[1])
        if not self.half_pixel:
            np.maximum(size, k["one"], out=size)
        np.divide(size[0], k["height"], out=size[0])  # the bins' extents
        np.divide(size[1], k["width"], out=size[1])
        np.multiply(batch, p.image, out=base, casting="unsafe")
        starts = (box[:, 1], box[:, 0])
        result = ctx.scratch[p.result]
        if self.ratio:
            tables = [
                _fixed_table(ctx, a, starts[i], size[i], p.sub, k, base if i == 0 else None)
                for i, a in enumerate((p.y, p.x))
            ]
            self._pool(ctx, p, rows, tables, k["count"], result)
        else:
            self._adaptive(ctx, p, rows, starts, size, base, result)
        np.copyto(out, result.transpose(0, 3, 1, 2), casting="unsafe")

    def _adaptive(self, ctx, p: _Plan, rows, starts, size, base, result) -> None:
        """sampling_ratio 0: the regions grouped by (grid_h, grid_w), each group pooled with
        tables allocated for it (their sizes depend on the regions' values)."""
        with np.errstate(invalid="ignore"):
            grids = np.ceil(np.nan_to_num(size, nan=0.0, posinf=0.0, neginf=0.0))
        grids = np.clip(grids, 0, MAX_GRID).astype(np.int64)
        keys = grids[0] * (MAX_GRID + 1) + grids[1]  # one sortable key per (grid_h, grid_w)
        for key in np.unique(keys):
            gy, gx = divmod(int(key), MAX_GRID + 1)
            members = np.flatnonzero(keys == key)
            if gy == 0 or gx == 0:  # an empty or invalid region: no point, 0
                result[members] = 0
                continue
            count = constant(p.ct, gy * gx)
            # tables of at most TABLE_POINTS points per axis at once (huge grids)
            step = max(1, TABLE_POINTS // max(self.height * gy, self.width * gx))
            for first in range(0, members.size, step):
                part = members[first : first + step]
                tables = []
                for i, (a, gi) in enumerate(((p.y, gy), (p.x, gx))):
                    sub = (np.arange(gi, dtype=p.ct) + p.ct.type(0.5)).reshape(1, 1, gi)
                    shape = (part.size, a.bins, gi)
                    table = np.empty((*shape, 2), np.intp), np.empty((*shape, 2), p.ct)
                    origin = base[part] if i == 0 else None
                    starts_i, size_i = starts[i][part], size[i][part]
                    grid = constant(p.ct, gi)
                    work = _work(shape, p.ct)
                    _sample_axis(starts_i, size_i, a, sub, grid, p.k, origin, *table, work)
                    tables.append(table)
                block = result[part]
                self._pool(ctx, p, rows, tables, count, block)
                result[part] = block

    def _pool(self, ctx, p: _Plan, rows, tables, count, result) -> None:
        """Bins of regions sharing one grid: ``result`` (regions, out_h, out_w, C) from the
        axis tables (idx, wts) of shapes (regions, bins, grid, 2), chunk by chunk."""
        (yi, yw), (xi, xw) = tables
        r, oh, gy = yi.shape[:3]
        ow, gx = xi.shape[1:3]
        c = rows.shape[1]
        rr, bi, ay, bx = _chunks(r, oh, ow, gy, gx, c, p.budget)
        scratch = [ctx.scratch[i] for i in (p.idx, p.wts, p.vals, *p.stage, p.part)]
        pool = self._avg if self.mode == "avg" else self._max
        for r0 in range(0, r, rr):
            for i0 in range(0, oh, bi):
                dst = result[r0 : r0 + rr, i0 : i0 + bi]
                ys = slice(r0, r0 + rr), slice(i0, i0 + bi)
                for a0 in range(0, gy, ay):
                    for b0 in range(0, gx, bx):
                        y = (yi[(*ys, slice(a0, a0 + ay))], yw[(*ys, slice(a0, a0 + ay))])
                        xs = slice(r0, r0 + rr), slice(None), slice(b0, b0 + bx)
                        pool(rows, y, (xi[xs], xw[xs]), dst, a0 + b0 > 0, scratch)
                if self.mode == "avg":
                    np.divide(dst, count, out=dst)

    @staticmethod
    def _avg(rows, y, x, dst, add: bool, scratch) -> None:
        """Sum of one chunk's weighted rows per bin: the rows gathered bin-major, (r, bin_y,
        bin_x, y, corner y, x, corner x), then (bins, 1, terms) @ (bins, terms, C)."""
        vals, weights = _gather(rows, y, x, (0, 1, 4, 2, 3, 5, 6), scratch)
        c = rows.shape[1]
        bins = dst.size // c
        target = reshaped(scratch[5][: bins * c] if add else dst, (bins, 1, c))
        np.matmul(weights.reshape(bins, 1, -1), vals.reshape(bins, -1, c), out=target)
        if add:
            np.add(dst, target.reshape(dst.shape), out=dst)

    @staticmethod
    def _max(rows, y, x, dst, add: bool, scratch) -> None:
        """Largest weighted row per bin: the rows gathered point-major, (y, corner y, x,
        corner x, r, bin_y, bin_x), so one reduction over the outer axis takes the maximum."""
        vals, weights = _gather(rows, y, x, (2, 3, 5, 6, 0, 1, 4), scratch)
        c = rows.shape[1]
        bins = dst.size // c
        vals = vals.reshape(-1, bins, c)
        np.multiply(vals, weights.reshape(-1, bins, 1), out=vals)
        target = reshaped(scratch[5][: bins * c] if add else dst, (bins, c))
        np.maximum.reduce(vals, axis=0, out=target)
        if add:
            np.maximum(dst, target.reshape(dst.shape), out=dst)


def _gather(rows, y, x, order, scratch) -> tuple[np.ndarray, np.ndarray]:
    """The chunk's rows and weights in the layout ``order`` makes of (r, bin_y, y, corner y,
    bin_x, x, corner x): indices ``yi + xi`` and weights ``yw * xw`` are computed in that
    natural layout (a broadcast of two tables with long inner loops), then copied into the
    kernel's layout, and the rows gathered there: (points, C) and (points,)."""
    (yi, yw), (xi, xw) = y, x
    idx_s, wts_s, vals_s, stage_i, stage_w = scratch[:5]
    rr, bi, ay = yi.shape[:3]
    ow, bx = xi.shape[1:3]
    shape = (rr, bi, ay, 2, ow, bx, 2)
    n = math.prod(shape)
    ys, xs = np.s_[:, :, :, :, None, None, None], np.s_[:, None, None, None, :, :, :]
    natural = stage_i[:n].reshape(shape)
    np.add(yi[ys], xi[xs], out=natural)
    final = tuple(shape[i] for i in order)
    idx = idx_s[:n].reshape(final)
    np.copyto(idx, natural.transpose(order))
    natural = stage_w[:n].reshape(shape)
    np.multiply(yw[ys], xw[xs], out=natural)
    weights = wts_s[:n].reshape(final)
    np.copyto(weights, natural.transpose(order))
    vals = vals_s[: n * rows.shape[1]].reshape(n, -1)
    np.take(rows, idx.reshape(n), axis=0, out=vals, mode="clip")  # (clip: no buffered copy)
    return vals, weights


def _chunks(r: int, oh: int, ow: int, gy: int, gx: int, c: int, budget: int):
    """(regions, bin rows, y points, x points) per chunk: the largest block of at most
    ``budget`` gathered values, split from the innermost axis out."""
    unit = ow * 4 * max(c, 1)  # one region, one bin row, one point per bin
    bx = max(1, min(gx, budget // unit))
    if bx < gx:
        return 1, 1, 1, bx
    ay = max(1, min(gy, budget // (unit * gx)))
    if ay < gy:
        return 1, 1, ay, gx
    bi = max(1, min(oh, budget // (unit * gx * gy)))
    if bi < oh:
        return 1, bi, gy, gx
    return max(1, min(r, budget // (unit * gx * gy * oh))), oh, gy, gx


def _work(shape: tuple[int, ...], ct: np.dtype) -> tuple[np.ndarray, ...]:
    return (np.empty(shape, ct), np.empty(shape, ct), np.empty(shape, bool), np.empty(shape, bool))


def _axis_plan(ctx: InferContext, ct, r: int, bins: int, extent: int, stride: int, grid):
    consts = (constant(ct, extent), constant(ct, extent - 1), constant(np.intp, stride))
    table = None
    if grid:
        shape = (r, bins, grid)
        table = (
            ctx.add_scratch(np.intp, (*shape, 2)),
            ctx.add_scratch(ct, (*shape, 2)),
            ctx.add_scratch(ct, shape),
            ctx.add_scratch(ct, shape),
            ctx.add_scratch(np.bool_, shape),
            ctx.add_scratch(np.bool_, shape),
        )
    pos = np.arange(bins, dtype=ct).reshape(1, bins, 1)
    return _Axis(bins, pos, consts, table)


def _fixed_table(ctx, a: _Axis, start, size, sub, k, base):
    idx, wts, *work = (ctx.scratch[i] for i in a.table)
    _sample_axis(start, size, a, sub, k["grid"], k, base, idx, wts, work)
    return idx, wts


def _sample_axis(start, size, a: _Axis, sub, grid, k, base, idx, wts, work) -> None:
    """Both neighbours of every sampling point along one axis: ``idx[..., j]`` the flat row of
    neighbour j (``base + index * stride``), ``wts[..., j]`` its weight; (regions, bins, grid).
    ``sub`` holds the points' ``i + 0.5``, ``grid`` (0-d) their number; ``work`` temporaries.

    The point is ``(start + bin * size) + (i + 0.5) * size / grid``, in this order.  The
    reference's rules: beyond one pixel outside the image it weighs 0 (both neighbours at 0);
    from -1 to 0 it reads pixel 0; at or past the last pixel it reads that pixel alone.
    """
    coord, low, inside, last = work
    extent, last_pixel, stride = a.consts
    size3, start3 = size[:, None, None], start[:, None, None]
    np.multiply(a.pos, size3, out=coord)
    np.add(start3, coord, out=coord)
    np.multiply(sub, size3, out=low)
    np.divide(low, grid, out=low)
    np.add(coord, low, out=coord)
    np.greater_equal(coord, k["minus"], out=inside)
    np.less_equal(coord, extent, out=last)
    np.logical_and(inside, last, out=inside)  # False for NaN
    np.logical_not(inside, out=last)
    np.copyto(coord, k["zero"], where=last)
    np.maximum(coord, k["zero"], out=coord)
    np.floor(coord, out=low)
    np.greater_equal(low, last_pixel, out=last)
    np.minimum(low, last_pixel, out=low)
    np.copyto(coord, low, where=last)
    lo_w, hi_w = wts[..., 0], wts[..., 1]
    np.subtract(coord, low, out=hi_w)
    np.subtract(k["one"], hi_w, out=lo_w)
    lo_i, hi_i = idx[..., 0], idx[..., 1]
    np.copyto(lo_i, low, casting="unsafe")
    np.multiply(lo_i, stride, out=lo_i)
    if base is not None:
        np.add(lo_i, base[:, None, None], out=lo_i)
    np.logical_not(last, out=last)  # the high neighbour is the next pixel...
    np.logical_and(last, inside, out=last)  # ...unless clamped or outside
    np.multiply(last, stride, out=hi_i)
    np.add(hi_i, lo_i, out=hi_i)
    np.logical_not(inside, out=inside)
    np.copyto(lo_w, k["zero"], where=inside)
    np.copyto(hi_w, k["zero"], where=inside)
