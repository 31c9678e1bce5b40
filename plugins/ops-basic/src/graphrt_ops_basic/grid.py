"""GridSample and AffineGrid: sampling an image at the positions of a flow field.

GridSample reads, for every output point, a normalised position in [-1, 1] per spatial axis
(``grid[..., 0]`` is the last axis, x).  Its positions change every run, so ``run`` works out
the taps with vectorised numpy over all points at once: per spatial axis the source coordinate
(unnormalised per align_corners, rounded half to even for nearest, moved inside by the border
or reflection padding), its taps (1 nearest, 2 linear, 4 cubic) with their weights, and each
tap's index as the padding gives it (border: clamped; reflection: reflected; zeros: into a copy
of X with a zero border as wide as the taps, which positions far outside are moved to).  The
axes' taps combine into flat indices of the image (the sum of index * stride) and weights (the
product, axis 0 first; the linear taps and this combination are _sampling.py's, shared with
DeformConv); then for each image and block of channels, tap by tap in row-major
order, ``acc = acc + w * take(X[n], flat)``.  The order of the coordinate operations is the
ONNX reference's, but for cubic border padding: like torch and onnxruntime, each tap is clamped
and the position is not (the reference clamps the position first).

Exact mode: nearest is a selection; linear and cubic compute every weight with IEEE basic
operations and sum the taps in row-major order, ``acc = t0; acc = acc + t1; ...``, one rounded
operation each, NaN rewritten to the canonical NaN.

AffineGrid builds the base grid of normalised positions (float64; a single position is 0, as
torch's affine_grid has it).  Fast mode multiplies the homogeneous base grid by each theta (a
batched matmul in theta's type); exact mode computes ``out_j = ((theta[j,0]*x + theta[j,1]*y)
(+ theta[j,2]*z)) + theta[j,last]`` in float64, one rounded operation at a time, rounds
once to theta's type and rewrites NaN to the canonical NaN.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._sampling import combine_taps, linear_taps
from ._typed_attrs import typed_attr
from ._util import _CANONICAL_NAN, constant, is_float, rewrite_nan
from ._values import int_values, reshaped
from .resize import compute_type, int_bounds

CUBIC_A = -0.75
#: Taps per axis and the first tap's offset from floor(x).
_TAPS = {"nearest": (1, 0), "linear": (2, 0), "cubic": (4, -1)}
#: Gathered elements per block of the weighted sum when it is split for the threads.
BLOCK_WORK = 1 << 18


@dataclasses.dataclass(frozen=True)
class _GridPlan:
    spatial: tuple[int, ...]  # X's spatial dims
    points: int  # output points per image
    coord: np.dtype  # the type of the coordinate arithmetic
    pad: int  # zeros padding: the zero border of the image copy (the taps per axis)
    image: int | None  # scratch (N, C, spatial + 2 * pad): X in the compute type, zero border
    zero: Any  # what a tap outside reads with zeros padding ("" for strings)
    idx: int  # scratch (r, K, N, P) intp: per axis and tap, index * stride in the image
    weight: int | None  # scratch (r, K, N, P) coord: per axis and tap, the weight
    work_f: tuple[int, ...]  # scratch: five (N, P) coord temporaries
    work_b: tuple[int, ...]  # scratch: three (N, P) bool temporaries
    flat: int | None  # scratch (T, N, P) intp: every tap's flat index (r > 1)
    w: int | None  # scratch (T, N, P) compute: every tap's weight
    terms: int | None  # scratch (N, C, P) compute: one tap's terms
    blocks: int  # (image, channel range) blocks of the weighted sum, for the threads
    acc: int | None  # scratch (N, C, P) compute when Y's type differs
    finish: Any  # None, "cast", or the (lo, hi) saturation bounds of an integer Y
    nan: int | None  # exact mode: scratch mask of the canonical-NaN rewrite


class GridSample(OpKernel):
    """GridSample-16 (4-D X; bilinear, nearest, bicubic) and -20/22 (N-d; linear, nearest,
    cubic)."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        old = node.opset < 20
        names = {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"}
        if not old:
            names = {v: v for v in names.values()}
        given = typed_attr(self, "mode", "bilinear" if old else "linear", "str")
        if given not in names:
            raise self.fail(f"mode must be one of {', '.join(names)}, got {given!r}")
        self.mode = names[given]
        self.padding = typed_attr(self, "padding_mode", "zeros", "str")
        if self.padding not in ("zeros", "border", "reflection"):
            raise self.fail(
                f"padding_mode must be zeros, border or reflection, got {self.padding!r}"
            )
        self.align = bool(typed_attr(self, "align_corners", 0, "int"))

    def infer(self, ctx: InferContext) -> None:
        x, g = ctx.shape(0), ctx.shape(1)
        dtype = ctx.dtype(0)
        r = len(x) - 2
        if r < 1 or (self.node.opset < 20 and r != 2):
            want = "(N, C, H, W)" if self.node.opset < 20 else "(N, C, D1, ..., Dr)"
            raise self.fail(f"X must be {want}, got {list(x)}", "invalid_input")
        if len(g) != r + 2 or g[0] != x[0] or g[-1] != r:
            raise self.fail(
                f"grid {list(g)} must be (N, D1_out, ..., Dr_out, {r}) for X {list(x)}",
                "invalid_input",
            )
        if not is_float(ctx.dtype(1)):
            raise self.fail(f"grid must be a float tensor, got {ctx.dtype(1)}", "invalid_input")
        if self.mode != "nearest" and dtype.kind in "OSUb":
            raise self.fail(f"{self.mode} mode cannot interpolate {dtype} values")
        if self.mode != "nearest" and ctx.exact and dtype.kind == "c":
            raise self.fail(
                "interpolation of complex values is not available in exact mode",
                "exact_mode_unavailable",
            )
        out = (x[0], x[1], *g[1:-1])
        ctx.set_output(0, dtype, out)
        if math.prod(out) == 0:
            ctx.prepared = None
            return
        n, c, spatial, p = x[0], x[1], tuple(x[2:]), math.prod(g[1:-1])
        if math.prod(spatial) == 0:
            raise self.fail(f"X {list(x)} has no element to sample", "invalid_input")
        weighted = self.mode != "nearest"
        compute = compute_type(dtype) if weighted else dtype
        coord = np.dtype(ctx.dtype(1))  # float16/bfloat16 grids compute in float32
        coord = coord if coord in (np.float32, np.float64) else np.dtype(np.float32)
        k = _TAPS[self.mode][0]
        pad = k if self.padding == "zeros" else 0
        image = None
        if pad or compute != dtype:
            image = ctx.add_scratch(compute, (n, c, *(d + 2 * pad for d in spatial)))
        finish = None
        if compute != dtype:
            finish = int_bounds(dtype, compute) if dtype.kind in "iu" else "cast"
        exact_nan = ctx.exact and weighted and compute in _CANONICAL_NAN
        ctx.prepared = _GridPlan(
            spatial=spatial,
            points=p,
            coord=coord,
            pad=pad,
            image=image,
            zero="" if compute == np.dtype(object) else compute.type(0),
            idx=ctx.add_scratch(np.intp, (r, k, n, p)),
            weight=ctx.add_scratch(coord, (r, k, n, p)) if weighted else None,
            work_f=tuple(ctx.add_scratch(coord, (n, p)) for _ in range(5)),
            work_b=tuple(ctx.add_scratch(np.bool_, (n, p)) for _ in range(3)),
            flat=ctx.add_scratch(np.intp, (k**r, n, p)) if r > 1 else None,
            w=ctx.add_scratch(compute, (k**r, n, p)) if weighted else None,
            terms=ctx.add_scratch(compute, (n, c, p)) if weighted else None,
            blocks=n * max(1, min(c, c * p * k**r // BLOCK_WORK)),
            acc=ctx.add_scratch(compute, (n, c, p)) if compute != dtype else None,
            finish=finish,
            nan=ctx.add_scratch(np.bool_, (n, c, p)) if exact_nan else None,
        )

    # -- per axis: coordinates and taps ---------------------------------------------------------
    def _bounds(self, length: int) -> tuple[float, float]:
        return (0.0, length - 1.0) if self.align else (-0.5, length - 0.5)

    def _coordinates(self, p: _GridPlan, f, b, g: np.ndarray, length: int) -> np.ndarray:
        """The source coordinate of every point along one axis, padded, into f[0].

        Unnormalised per align_corners, rounded to even for nearest, then border padding
        clamps a position outside [lo, hi] into the image (not cubic: its taps are clamped
        one by one) and reflection reflects it.  Last, positions are limited to where every
        tap is outside the image at the latest (zeros: then they read the zero border), which
        also turns NaN into such a position.
        """
        c = f[0]
        k = _const(p.coord)
        np.add(g, k(1), out=c)
        if self.align:  # (g + 1) / 2 * (L - 1)
            np.divide(c, k(2), out=c)
            np.multiply(c, k(length - 1), out=c)
        else:  # ((g + 1) * L - 1) / 2
            np.multiply(c, k(length), out=c)
            np.subtract(c, k(1), out=c)
            np.divide(c, k(2), out=c)
        if self.mode == "nearest":
            np.rint(c, out=c)
        lo, hi = self._bounds(length)
        if self.padding == "border" and self.mode != "cubic":
            np.clip(c, k(0), k(length - 1), out=f[1])
            np.less(c, k(lo), out=b[0])
            np.greater(c, k(hi), out=b[1])
            np.logical_or(b[0], b[1], out=b[0])
            np.copyto(c, f[1], where=b[0])
        elif self.padding == "reflection":
            _reflect(c, k(lo), k(hi), f[1:4], b)
        taps, first = _TAPS[self.mode]
        np.fmax(c, k(-(first + taps)), out=c)  # fmax/fmin: NaN gives the bound
        np.fmin(c, k(length - first), out=c)
        return c

    def _axis_taps(self, p: _GridPlan, ctx: KernelContext, a: int, g: np.ndarray) -> None:
        """Fill the scratch index (times the axis' stride) and weight of spatial axis a."""
        f = [ctx.scratch[i] for i in p.work_f]
        b = [ctx.scratch[i] for i in p.work_b]
        length = p.spatial[a]
        c = self._coordinates(p, f, b, g, length)
        idx = ctx.scratch[p.idx][a]
        k = _const(p.coord)
        taps, first = _TAPS[self.mode]
        stride = math.prod(d + 2 * p.pad for d in p.spatial[a + 1 :])
        ik = _const(np.dtype(np.intp))
        x0 = c
        if self.mode == "linear":
            x0 = f[1]
            linear_taps(c, x0, idx, ctx.scratch[p.weight][a], ik(first + p.pad), k(1))
        elif self.mode == "cubic":
            x0, t = f[1], f[2]
            np.floor(c, out=x0)
            np.subtract(c, x0, out=t)
            _cubic_weights(t, ctx.scratch[p.weight][a], k, f[0])
        if self.padding == "reflection":  # (nearest: x0 is f[0], free once its one tap is read)
            tap = f[3]
            for j in range(taps):
                np.add(x0, k(first + j), out=tap)
                _reflect(tap, *map(k, self._bounds(length)), (f[0], f[2], f[4]), b)
                np.clip(tap, k(0), k(length - 1), out=tap)
                np.trunc(tap, out=tap)
                np.copyto(idx[j], tap, casting="unsafe")
        else:
            if self.mode != "linear":  # (linear_taps made them)
                np.copyto(idx[0], x0, casting="unsafe")
                np.add(idx[0], ik(first + p.pad), out=idx[0])  # zeros: into the padded image
                for j in range(1, taps):
                    np.add(idx[0], ik(j), out=idx[j])
            if self.padding == "border":
                np.clip(idx, ik(0), ik(length - 1), out=idx)
        if stride != 1:
            np.multiply(idx, ik(stride), out=idx)

    # -- the run --------------------------------------------------------------------------------
    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _GridPlan | None = ctx.prepared
        if p is None:
            return
        x, grid, y = inputs[0], inputs[1], outputs[0]
        n, c = x.shape[:2]
        r = len(p.spatial)
        g = grid.reshape(n, p.points, r)
        for a in range(r):
            self._axis_taps(p, ctx, a, g[:, :, r - 1 - a])
        if p.image is not None:
            image = ctx.scratch[p.image]
            if p.pad:
                image.fill(p.zero)
            inner = (slice(None),) * 2 + tuple(slice(p.pad, p.pad + d) for d in p.spatial)
            np.copyto(image[inner], x, casting="unsafe")
            image = image.reshape(n, c, -1)
        else:
            image = x.reshape(n, c, -1)
        final = reshaped(y, (n, c, p.points)) if p.acc is None else ctx.scratch[p.acc]
        weight = None if p.weight is None else ctx.scratch[p.weight]
        flat = None if p.flat is None else ctx.scratch[p.flat]
        w = None if p.w is None else ctx.scratch[p.w]
        flats, weights = combine_taps(ctx.scratch[p.idx], weight, flat, w)
        terms = None if p.terms is None else ctx.scratch[p.terms]
        per_image = p.blocks // n

        def block(b: int) -> None:
            """Image i, a range of channels: every tap in row-major order."""
            i, part = divmod(b, per_image)
            chans = slice(part * c // per_image, (part + 1) * c // per_image)
            src, dst = image[i, chans], final[i, chans]
            if weights is None:
                np.take(src, flats[0][i], axis=1, out=dst, mode="clip")
                return
            tmp = terms[i, chans]
            np.take(src, flats[0][i], axis=1, out=dst, mode="clip")
            np.multiply(dst, weights[0][i], out=dst)
            for flat, w in zip(flats[1:], weights[1:]):
                np.take(src, flat[i], axis=1, out=tmp, mode="clip")
                np.multiply(tmp, w[i], out=tmp)
                np.add(dst, tmp, out=dst)

        ctx.parallel_for(p.blocks, block)
        if p.nan is not None:
            rewrite_nan(final, ctx.scratch[p.nan])
        if p.acc is not None:
            if isinstance(p.finish, tuple):
                np.rint(final, out=final)
                np.clip(final, *p.finish, out=final)
            np.copyto(reshaped(y, final.shape), final, casting="unsafe")


def _const(dtype: np.dtype):
    return lambda v: constant(dtype, v)


def _cubic_weights(t: np.ndarray, weight: np.ndarray, k, u: np.ndarray) -> None:
    """Keys' cubic coefficients (a = -0.75) of taps at distances t + 1, t, 1 - t, 2 - t."""
    a = CUBIC_A
    for j, (sign, shift) in enumerate(((1, 1), (1, 0), (-1, 1), (-1, 2))):
        w = weight[j]
        if sign > 0:
            np.add(t, k(shift), out=u)  # t + 1, t
        else:
            np.subtract(k(shift), t, out=u)  # 1 - t, 2 - t
        if j in (0, 3):  # ((a*u - 5a)*u + 8a)*u - 4a
            np.multiply(u, k(a), out=w)
            np.subtract(w, k(5 * a), out=w)
            np.multiply(w, u, out=w)
            np.add(w, k(8 * a), out=w)
            np.multiply(w, u, out=w)
            np.subtract(w, k(4 * a), out=w)
        else:  # ((a+2)*u - (a+3))*u*u + 1
            np.multiply(u, k(a + 2), out=w)
            np.subtract(w, k(a + 3), out=w)
            np.multiply(w, u, out=w)
            np.multiply(w, u, out=w)
            np.add(w, k(1), out=w)


def _reflect(c: np.ndarray, lo, hi, f, b) -> None:
    """Reflect c into [lo, hi] by its borders, as often as needed (in place).

    With ``d`` the distance past the near border, ``n = trunc(d / (hi - lo))`` reflections and
    ``r = d - n * (hi - lo)``: an even n lands r inside the near border, an odd one r inside
    the far border.  A zero-width range (one pixel, align_corners) maps everything to lo.
    """
    if float(hi) <= float(lo):  # (Python floats: comparing 0-d arrays allocates a result)
        np.copyto(c, lo)
        return
    d, n, r = f
    below, outside, use_lo = b
    span = constant(lo.dtype, float(hi) - float(lo))
    np.subtract(lo, c, out=d)  # d = max(lo - c, c - hi, 0)
    np.subtract(c, hi, out=r)
    np.maximum(d, r, out=d)
    np.maximum(d, constant(lo.dtype, 0), out=d)
    np.less(c, lo, out=below)
    np.greater(c, hi, out=outside)
    np.logical_or(outside, below, out=outside)
    np.divide(d, span, out=n)
    np.trunc(n, out=n)
    np.multiply(n, span, out=r)
    np.subtract(d, r, out=r)  # r = d - n * span
    np.fmod(n, constant(lo.dtype, 2), out=n)
    np.equal(n, constant(lo.dtype, 1), out=use_lo)  # odd
    np.logical_xor(use_lo, below, out=use_lo)  # below & even, or above & odd
    np.add(r, lo, out=d)  # lo + r
    np.subtract(hi, r, out=r)  # hi - r
    np.copyto(r, d, where=use_lo)
    np.copyto(c, r, where=outside)


@dataclasses.dataclass(frozen=True)
class _Affine:
    base: tuple[np.ndarray, ...]  # per axis (x first): positions, broadcastable float64
    homogeneous: np.ndarray | None  # fast mode: (positions, r + 1) rows [x, y, (z,) 1]
    theta: int | None  # exact mode: scratch, theta in float64
    acc: int | None  # scratch: one output component in float64 (fast: Y in float32)
    tmp: int | None  # exact mode: scratch, one product
    nan: int | None = None  # exact mode: scratch mask of the canonical-NaN rewrite


class AffineGrid(OpKernel):
    """AffineGrid-20: theta (N, 2, 3) with size (N, C, H, W), or (N, 3, 4) with (N, C, D, H, W)."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.align = bool(typed_attr(self, "align_corners", 0, "int"))

    def infer(self, ctx: InferContext) -> None:
        theta = ctx.shape(0)
        if not is_float(ctx.dtype(0)):
            raise self.fail(f"theta must be a float tensor, got {ctx.dtype(0)}", "invalid_input")
        if ctx.dtype(1) != np.int64 or len(ctx.shape(1)) != 1:
            message = f"size must be a 1-D int64 tensor, got {ctx.dtype(1)} {list(ctx.shape(1))}"
            raise self.fail(message, "invalid_input")
        size = int_values(ctx, 1)
        if len(size) not in (4, 5):
            raise self.fail(f"size must have 4 or 5 values, got {size}", "invalid_input")
        r = len(size) - 2
        if theta != (size[0], r, r + 1):
            raise self.fail(
                f"theta must be {[size[0], r, r + 1]} for size {size}, got {list(theta)}",
                "invalid_input",
            )
        if min(size) < 0:
            raise self.fail(f"size must not be negative, got {size}", "invalid_input")
        spatial = tuple(size[2:])
        ctx.set_output(0, ctx.dtype(0), (size[0], *spatial, r))
        # Base positions per axis, as broadcastable float64 arrays (x last): -1 .. 1.
        base = []
        for a, length in enumerate(spatial):
            i = np.arange(length, dtype=np.float64)
            if self.align:  # one position is the centre, 0, as torch's affine_grid has it
                pos = i * (2.0 / (length - 1)) - 1 if length > 1 else np.zeros(length)
            else:
                pos = (2 * i + 1) / length - 1
            base.append(pos.reshape([length if d == a else 1 for d in range(r)]))
        base = tuple(reversed(base))  # x (the last axis) first, as theta's columns
        shape = (size[0], *spatial)
        if not ctx.exact:
            # One product per image: (positions, r + 1) homogeneous base @ theta[n].T.
            compute = ctx.dtype(0) if ctx.dtype(0) in (np.float32, np.float64) else np.float32
            points = np.stack(np.broadcast_arrays(*base, np.ones(())), axis=-1)
            homogeneous = np.ascontiguousarray(points.reshape(-1, r + 1).astype(compute))
            acc = ctx.add_scratch(compute, (*shape, r)) if compute != ctx.dtype(0) else None
            ctx.prepared = _Affine(base, homogeneous, None, acc, None)
            return
        dtype = ctx.dtype(0)
        ctx.prepared = _Affine(
            base,
            None,
            ctx.add_scratch(np.float64, theta),
            ctx.add_scratch(np.float64, shape),
            ctx.add_scratch(np.float64, shape),
            ctx.add_scratch(np.bool_, (*shape, r)) if dtype in _CANONICAL_NAN else None,
        )

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Affine = ctx.prepared
        out = outputs[0]
        n, r = out.shape[0], out.shape[-1]
        if p.homogeneous is not None:  # fast mode: a batched product
            acc = out if p.acc is None else ctx.scratch[p.acc]
            theta_t = inputs[0].transpose(0, 2, 1)
            np.matmul(p.homogeneous, theta_t, out=reshaped(acc, (n, -1, r)), casting="unsafe")
            if p.acc is not None:
                np.copyto(out, acc, casting="unsafe")
            return
        theta, acc, tmp = (ctx.scratch[i] for i in (p.theta, p.acc, p.tmp))
        np.copyto(theta, inputs[0], casting="unsafe")
        base = p.base
        lead = (slice(None),) + (None,) * r
        for j in range(r):  # out_j = ((t_j0 * x + t_j1 * y) [+ t_j2 * z]) + t_jr
            np.multiply(theta[lead + (j, 0)], base[0], out=acc)
            for m in range(1, r):
                np.multiply(theta[lead + (j, m)], base[m], out=tmp)
                np.add(acc, tmp, out=acc)
            np.add(acc, theta[lead + (j, r)], out=acc)
            np.copyto(out[..., j], acc, casting="unsafe")
        if p.nan is not None:  # a NaN theta's payload would otherwise reach Y
            rewrite_nan(out, ctx.scratch[p.nan])
