"""DeformConv: a convolution whose taps read X at learned fractional offsets (N-d).

Tap ``t`` of output position ``o`` reads ``X`` at ``o * stride - pad_begin + t * dilation +
offset[n, (og * K + t) * nd + axis, o]`` (``og`` the offset group of the channel, ``K`` the
taps, ``nd`` the spatial axes), by N-linear interpolation where every neighbour outside X
counts as 0 (torchvision's deform_conv2d), times ``mask[n, og * K + t, o]`` when given (folded
into the corners' weights: one product per point and corner instead of per channel).

The sampled values form an im2col matrix built without a Python loop over positions or taps.
X is moved channel-last once per run into an image with a zero border of two pixels per side:
positions are clamped into [-2, extent] (NaN to -2), so a neighbour outside X reads an exact 0
(``0 * inf`` of a real pixel would be NaN).  The neighbours of every (image, offset group, tap,
position) come from the taps shared with GridSample (_sampling.py: per axis, then combined
into the ``2 ** nd`` corners' flat rows and weights); per corner one ``np.take`` gathers a row of
channels, weighted and added into the samples.  One transposing copy puts them in im2col order
(N, C * K, O) (none with one channel per offset group), and one matrix product per convolution
group with W as it is writes Y.  Every temporary is planned scratch: a steady-state run
allocates no array data.  float16 and bfloat16 compute in float32 and round once.  Not exact
(BLAS products, floor of computed coordinates).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._geometry import resolve, window_attrs
from ._sampling import combine_taps, linear_taps
from ._typed_attrs import typed_attr
from ._util import constant, is_float
from .conv import compute_type, group_attr

#: Zero border of the channel-last image on each side of every axis: a position clamped to -2
#: has both neighbours in it, one clamped to the extent too.
BORDER = 2


@dataclasses.dataclass(frozen=True)
class _Plan:
    ct: np.dtype
    spatial: tuple[int, ...]
    base: np.ndarray  # (nd, 1, 1, K, O): where each tap reads before its offset, per axis
    low: np.ndarray  # 0-d: -BORDER, the lowest position kept
    high: np.ndarray  # (nd, 1, 1, 1, 1): X's extents, the highest positions kept
    strides: tuple[np.ndarray, ...]  # 0-d intp per axis: its flat stride in the bordered image
    border: np.ndarray  # 0-d intp: BORDER
    one: np.ndarray  # 0-d 1 in the compute type
    zero: np.ndarray  # 0-d 0 in the compute type
    first: np.ndarray  # (N, og, 1, 1) intp: row of each (image, offset group) in ``xt``
    weight: np.ndarray | None  # (group, M / group, C / group * K) in the compute type
    xt: int  # scratch (og, N, bordered positions, C / og): X channel-last
    pos: int  # scratch (nd, N, og, K, O): positions, then the axes' floors
    idx: int  # scratch (nd, 2, N, og, K, O) intp: per axis its two neighbours
    wts: int  # scratch (nd, 2, N, og, K, O): and their weights
    flats: int | None  # scratch (2 ** nd, N, og, K, O) intp: the corners' rows (nd > 1)
    corner_w: int  # scratch (2 ** nd, N, og, K, O): the corners' weights
    gathered: int  # scratch (N, og, K, O, C / og): one corner's rows
    samples: int  # scratch (N, og, K, O, C / og): the sampled values
    cols: int | None  # scratch (N, C * K, O): im2col order, when C / og > 1
    acc: int | None  # scratch (N, M, O) in the compute type when Y's type differs
    w_cast: int | None  # scratch (group, M / group, C / group * K): a run-time W cast
    b_cast: int | None  # scratch (M,): B cast to the compute type


class DeformConv(OpKernel):
    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.attrs = window_attrs(self)
        self.group = group_attr(self)
        self.offset_group = typed_attr(self, "offset_group", 1, "int")
        if self.offset_group < 1:
            raise self.fail(f"offset_group must be >= 1, got {self.offset_group}")

    def infer(self, ctx: InferContext) -> None:
        dtype = ctx.dtype(0)
        types = [ctx.dtype(i) for i in (0, 1, 2, 3, 4) if ctx.has_input(i)]
        if not is_float(dtype) or any(t != dtype for t in types):
            message = f"X, W, offset, B and mask must share one float type, got {types}"
            raise self.fail(message, "invalid_input")
        x, wshape = ctx.shape(0), ctx.shape(1)
        g, og = self.group, self.offset_group
        if len(x) < 3 or len(wshape) != len(x):
            message = f"X {list(x)} and W {list(wshape)} must be (N, C, spatial...)"
            raise self.fail(message, "invalid_input")
        n, c, m, cg = x[0], x[1], wshape[0], wshape[1]
        if cg * g != c or m % g or c % og:
            message = (
                f"W {list(wshape)} does not fit {c} input channels in {g} group(s) and "
                f"{og} offset group(s)"
            )
            raise self.fail(message, "invalid_input")
        kshape = tuple(wshape[2:])
        if self.attrs.kernel_shape not in (None, kshape):
            raise self.fail(f"kernel_shape {list(self.attrs.kernel_shape)} is not W's {kshape}")
        w = resolve(self, self.attrs, x[2:], kshape)
        nd, k, o = len(kshape), math.prod(kshape), math.prod(w.out)
        want = {
            2: ("offset", (n, og * k * nd, *w.out)),
            3: ("B", (m,)),
            4: ("mask", (n, og * k, *w.out)),
        }
        for i, (name, shape) in want.items():
            if ctx.has_input(i) and ctx.shape(i) != shape:
                message = f"{name} must have shape {list(shape)}, got {list(ctx.shape(i))}"
                raise self.fail(message, "invalid_input")
        ctx.set_output(0, dtype, (n, m, *w.out))
        ct = compute_type(dtype)
        spatial = tuple(x[2:])
        grids = np.meshgrid(*(np.arange(d) for d in (*kshape, *w.out)), indexing="ij")
        base = np.stack(
            [
                (grids[nd + a] * w.strides[a] - w.begin[a] + grids[a] * w.dilations[a])
                .reshape(1, 1, k, o)
                .astype(ct)
                for a in range(nd)
            ]
        )
        bordered = [d + 2 * BORDER for d in spatial]
        first = (np.arange(n)[:, None] + np.arange(og)[None, :] * n) * math.prod(bordered)
        weight = ctx.known_value(1)
        if weight is not None:
            weight = np.ascontiguousarray(weight.reshape(g, m // g, -1), dtype=ct)
        cgo, taps = c // og, 2**nd
        cast_w = weight is None and ct != dtype
        points = (n, og, k, o)
        ctx.prepared = _Plan(
            ct=ct,
            spatial=spatial,
            base=base,
            low=constant(ct, -BORDER),
            high=np.array(spatial, ct).reshape(nd, 1, 1, 1, 1),
            strides=tuple(constant(np.intp, math.prod(bordered[a + 1 :])) for a in range(nd)),
            border=constant(np.intp, BORDER),
            one=constant(ct, 1),
            zero=constant(ct, 0),
            first=first.reshape(n, og, 1, 1).astype(np.intp),
            weight=weight,
            xt=ctx.add_scratch(ct, (og, n, math.prod(bordered), cgo)),
            pos=ctx.add_scratch(ct, (nd, *points)),
            idx=ctx.add_scratch(np.intp, (nd, 2, *points)),
            wts=ctx.add_scratch(ct, (nd, 2, *points)),
            flats=ctx.add_scratch(np.intp, (taps, *points)) if nd > 1 else None,
            corner_w=ctx.add_scratch(ct, (taps, *points)),
            gathered=ctx.add_scratch(ct, (*points, cgo)),
            samples=ctx.add_scratch(ct, (*points, cgo)),
            cols=ctx.add_scratch(ct, (n, c * k, o)) if cgo > 1 else None,
            acc=ctx.add_scratch(ct, (n, m, o)) if ct != dtype else None,
            w_cast=ctx.add_scratch(ct, (g, m // g, cg * k)) if cast_w else None,
            b_cast=ctx.add_scratch(ct, (m,)) if ctx.has_input(3) and ct != dtype else None,
        )

    def _image(self, ctx: KernelContext, p: _Plan, x: np.ndarray) -> np.ndarray:
        """X channel-last per offset group, inside its zero border: rows (og * N * positions,
        C / og)."""
        n, c = x.shape[:2]
        og, nd = self.offset_group, len(p.spatial)
        cgo = c // og
        xt = ctx.scratch[p.xt]
        image = xt.reshape(og, n, *(d + 2 * BORDER for d in p.spatial), cgo)
        for a, d in enumerate(p.spatial):  # the borders, axis by axis
            lead = (slice(None),) * (2 + a)
            np.copyto(image[(*lead, slice(0, BORDER))], p.zero)
            np.copyto(image[(*lead, slice(BORDER + d, None))], p.zero)
        inner = (slice(None),) * 2 + tuple(slice(BORDER, BORDER + d) for d in p.spatial)
        order = (1, 0, *range(3, 3 + nd), 2)  # (og, N, spatial..., C / og)
        np.copyto(image[inner], x.reshape(n, og, cgo, *p.spatial).transpose(order), "unsafe")
        return xt.reshape(-1, cgo)

    def _corners(self, ctx: KernelContext, p: _Plan, offset: np.ndarray):
        """The 2 ** nd corners of every sampling point: flat rows of the image and weights."""
        pos, idx, wts = (ctx.scratch[i] for i in (p.pos, p.idx, p.wts))
        nd, n, og, k, o = pos.shape
        off = offset.reshape(n, og, k, nd, o).transpose(3, 0, 1, 2, 4)  # (nd, N, og, K, O)
        np.add(p.base, off, out=pos, casting="unsafe")
        np.fmax(pos, p.low, out=pos)  # NaN -> -2 too: both neighbours in the border
        np.fmin(pos, p.high, out=pos)
        x0 = ctx.scratch[p.corner_w][0]  # (free until the corners' weights are made)
        for a in range(nd):
            linear_taps(pos[a], x0, idx[a], wts[a], p.border, p.one)
            np.multiply(idx[a], p.strides[a], out=idx[a])
        np.add(idx[0], p.first, out=idx[0])  # where each (image, offset group) starts
        flats = None if p.flats is None else ctx.scratch[p.flats]
        return combine_taps(idx, wts, flats, ctx.scratch[p.corner_w])

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Plan = ctx.prepared
        inputs = list(inputs) + [None] * (5 - len(inputs))
        x, weight, offset, bias, mask = inputs
        n, c = x.shape[:2]
        og = self.offset_group
        k, o = p.base.shape[3:]
        cgo = c // og
        rows = self._image(ctx, p, x)
        samples, gathered = ctx.scratch[p.samples], ctx.scratch[p.gathered]
        with np.errstate(invalid="ignore", over="ignore"):
            flats, weights = self._corners(ctx, p, offset)
            for i, (flat, w) in enumerate(zip(flats, weights)):
                if mask is not None:  # the mask scales the corners' weights (fewer products)
                    np.multiply(w, mask.reshape(n, og, k, o), out=w, casting="unsafe")
                dst = samples if i == 0 else gathered
                np.take(rows, flat, axis=0, out=dst, mode="clip")  # (clip: not buffered)
                np.multiply(dst, w[..., None], out=dst)
                if i:
                    np.add(samples, dst, out=samples)
        if p.cols is None:  # one channel per offset group: already (N, C, K, O)
            cols = samples.reshape(n, c * k, o)
        else:
            cols = ctx.scratch[p.cols]
            np.copyto(cols.reshape(n, og, cgo, k, o), samples.transpose(0, 1, 4, 2, 3))
        y = outputs[0]
        acc = y if p.acc is None else ctx.scratch[p.acc]
        g = self.group
        w = p.weight
        if w is None:
            w = weight.reshape(g, weight.shape[0] // g, -1)
            if p.w_cast is not None:
                w = _cast(ctx.scratch[p.w_cast], w)
        m = acc.shape[1]
        mg, depth = m // g, c // g * k
        acc3 = acc.reshape(n, m, o)
        for i in range(g):
            part = cols[:, i * depth : (i + 1) * depth]
            np.matmul(w[i], part, out=acc3[:, i * mg : (i + 1) * mg])
        if bias is not None:
            if p.b_cast is not None:
                bias = _cast(ctx.scratch[p.b_cast], bias)
            np.add(acc3, bias[:, None], out=acc3)
        if acc is not y:
            np.copyto(y, acc.reshape(y.shape), casting="unsafe")


def _cast(dst: np.ndarray, src: np.ndarray) -> np.ndarray:
    np.copyto(dst, src, casting="unsafe")
    return dst
