"""Conv and ConvTranspose: BLAS products over columns copied once into planned scratch.

The prepare step (``infer``) fixes everything the shapes decide: the weight as a contiguous
(M, C/group * prod(kernel)) matrix in the compute type when it is a constant, where each kernel
tap reads (:mod:`._geometry`), and the strategy:

* ``gemm``: X is staged (padded and split by stride phase when needed, so taps are unit-stride
  views), every tap is copied into a column buffer, and one product per image and group gives
  the output.  A 1x1 kernel needs no columns: the staged X already is the column matrix (X
  itself for stride 1 without padding).
* ``depthwise`` (one input channel per group, one output per group, large maps): one
  multiply-add per tap over flattened contiguous rows; a product per channel would be a
  matrix-vector product.

``bind`` builds the views once, so a run is a list of numpy calls writing into scratch and the
output.  float16 and bfloat16 accumulate in float32 and round once.  Large products are split
into blocks whose count depends on shapes only, so results do not depend on the thread count.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel, name_of

from . import conv_exact
from ._geometry import (
    Programmed,
    Staging,
    Window,
    call_all,
    call_one,
    flat_offsets,
    resolve,
    staging,
    window_attrs,
)
from ._util import is_float, same_types

#: Multiply-adds per image below which a product is not split for the intra-op threads.
BLOCK_WORK = 1 << 22
#: Bytes of columns a block aims at: its copies are still in cache when its product reads them.
BLOCK_BYTES = 1 << 20
#: Smallest column (output position) and row (output channel) counts of a block.
MIN_COLS = 256
MIN_ROWS = 32
#: Most blocks of a product that copies no columns.
MAX_BLOCKS = 4
#: Output positions from which a depthwise convolution multiply-adds tap by tap; on smaller
#: maps numpy's per-row overhead makes one small product per channel faster.
DEPTHWISE_MIN = 1024


def compute_type(dtype: np.dtype) -> np.dtype:
    """float16 and bfloat16 accumulate in float32; float32 and float64 in themselves."""
    return np.dtype(dtype) if np.dtype(dtype) in (np.float32, np.float64) else np.dtype("f4")


@dataclasses.dataclass(frozen=True)
class _Split:
    """How one image's product is cut into blocks; shapes alone decide, never thread counts."""

    by: str  # "none", "channels" (output channels) or "positions" (rows of the first out axis)
    size: int  # channels, or output rows, per block
    count: int


@dataclasses.dataclass(frozen=True)
class _Plan:
    w: Window
    st: Staging
    group: int
    depthwise: bool
    weight: np.ndarray | None  # (M, C/group * prod(kernel)) in the compute type, when constant
    bias: np.ndarray | None  # (M, 1) in the compute type, when constant
    buf: int | None  # scratch: the staged X
    cols: int | None  # scratch: one image's columns (per block when split by positions)
    acc: int | None  # scratch: the result in the compute type (float16/bfloat16 Y; depthwise)
    wbuf: int | None  # scratch: a run-time W converted to the compute type
    split: _Split
    epilogue: Any = None  # what a fused kernel applies to Y after the product (fused.py)


@dataclasses.dataclass(frozen=True)
class EmptyOutput:
    """The plan of an output without elements (a batch of 0, no output channels, no output
    position): there is nothing to compute.  ``epilogue``: a fused kernel's (fused.py)."""

    epilogue: Any = None


def _nothing() -> None:
    """The run of an :class:`EmptyOutput`."""


class Conv(Programmed):
    """Exact mode: :mod:`.conv_exact` (the canonical order of docs/exact-mode.md)."""

    supports_exact = True
    #: W may be a float16/bfloat16 weight typed float32 (docs/fp16.md): fast mode widens it
    #: per run into plan scratch; exact mode keeps one float32 copy (conv_exact.prepare).
    half_weight_inputs = (1,)

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.attrs = window_attrs(self)
        self.group = group_attr(self)

    def infer(self, ctx: InferContext) -> None:
        same_types(self, ctx, 3)
        x, wshape, dtype = ctx.shape(0), ctx.shape(1), ctx.dtype(0)
        if not is_float(dtype):
            raise self.fail(f"X must be a float tensor, got {dtype}", "invalid_input")
        g = self.group
        if len(x) < 3 or len(wshape) != len(x):
            raise self.fail(
                f"X {list(x)} and W {list(wshape)} must be (N, C, spatial...)", "invalid_input"
            )
        n, c, m, cg = x[0], x[1], wshape[0], wshape[1]
        if cg * g != c or m % g:
            raise self.fail(
                f"W {list(wshape)} does not fit {c} input channels in {g} group(s)", "invalid_input"
            )
        kshape = tuple(wshape[2:])
        if self.attrs.kernel_shape not in (None, kshape):
            raise self.fail(f"kernel_shape {list(self.attrs.kernel_shape)} is not W's {kshape}")
        if ctx.has_input(2) and ctx.shape(2) != (m,):
            raise self.fail(f"B must have shape [{m}], got {list(ctx.shape(2))}", "invalid_input")
        w = resolve(self, self.attrs, x[2:], kshape)
        if min(w.out, default=1) < 1:
            raise self.fail(f"X {list(x)} gives an empty output", "invalid_input")
        ctx.set_output(0, dtype, (n, m, *w.out))
        if n * m * math.prod(w.out) == 0:
            ctx.prepared = EmptyOutput()
            return
        ct = compute_type(dtype)
        if ctx.exact:
            ctx.prepared = conv_exact.prepare(ctx, w, g, ct)
            return
        st = staging(w, split=True, copy=ct != dtype)
        kprod, out_size = math.prod(kshape), math.prod(w.out)
        buf = ctx.add_scratch(ct, st.shape(n, c)) if st.copy else None
        depthwise = g == c == m and g > 1 and out_size >= DEPTHWISE_MIN
        if depthwise:
            _, length, wide = flat_offsets(st, w)
            split = _Split("none", 0, 1)
            cols = ctx.add_scratch(ct, (n, c, length))  # one tap's products
            acc = ctx.add_scratch(ct, (n, c, math.prod(wide)))  # the sums, on wide rows
        else:
            split = _split(m // g, c * kprod if kprod > 1 else 0, cg * kprod * g, w.out)
            if kprod == 1:
                cols = None
            elif split.by == "positions":  # a column buffer per block
                inner = out_size // w.out[0]
                cols = ctx.add_scratch(ct, (split.count, c * kprod, split.size * inner))
            else:
                cols = ctx.add_scratch(ct, (c * kprod, out_size))
            acc = ctx.add_scratch(ct, (n, m, out_size)) if ct != dtype else None
        weight, bias = ctx.known_value(1), ctx.known_value(2) if ctx.has_input(2) else None
        wbuf = None
        if weight is not None and weight.dtype != dtype:  # half-stored: widened per run
            weight, wbuf = None, ctx.add_scratch(ct, wshape)
        if weight is not None:
            weight = np.ascontiguousarray(weight.reshape(m, -1), dtype=ct)
        if bias is not None:
            bias = np.ascontiguousarray(bias.reshape(m, 1), dtype=ct)
        if weight is None and wbuf is None and ctx.dtype(1) != ct:
            wbuf = ctx.add_scratch(ct, wshape)
        ctx.prepared = _Plan(w, st, g, depthwise, weight, bias, buf, cols, acc, wbuf, split)

    def program(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        """Every numpy call of one run, on views made once."""
        if isinstance(ctx.prepared, EmptyOutput):
            return _nothing
        if isinstance(ctx.prepared, conv_exact.ExactConvPlan):
            return conv_exact.program(ctx, inputs, outputs)
        p: _Plan = ctx.prepared
        x, y = inputs[0], outputs[0]
        calls: list[Callable[[], Any]] = []
        weight = p.weight
        if weight is None:
            weight = _run_time_weight(ctx, inputs[1], p.wbuf, calls)
            weight = weight.reshape(weight.shape[0], -1)
        bias = p.bias
        if bias is None and len(inputs) > 2 and inputs[2] is not None:
            bias = inputs[2].reshape(-1, 1)
        buf = ctx.scratch[p.buf] if p.buf is not None else None
        if buf is not None:
            calls += p.st.fill_calls(p.w, x, buf, 0)
        src = p.st.source(x, buf)
        if p.depthwise:
            calls += _depthwise_calls(ctx, p, src, weight, bias, y)
            return functools.partial(call_all, calls)
        acc = y if p.acc is None else ctx.scratch[p.acc]
        n, m = y.shape[:2]
        out_size = math.prod(p.w.out)
        g = p.group
        acc4 = acc.reshape(n, g, m // g, out_size)
        weight3 = weight.reshape(g, m // g, -1)
        if p.cols is None:  # 1x1 kernel: the staged X is the column matrix
            cols = src.reshape(n, g, -1, out_size)
            units = [u for i in range(n) for u in _products(p, weight3, cols[i], acc4[i])]
            calls.append(_parallel(ctx, units))
        else:
            for i in range(n):
                calls += _image_calls(ctx, p, src[i : i + 1], weight3, acc4[i])
        acc3, y3 = acc.reshape(n, m, out_size), y.reshape(n, m, out_size)
        if bias is not None:
            calls.append(functools.partial(np.add, acc3, bias, out=y3, casting="unsafe"))
        elif acc is not y:
            calls.append(functools.partial(np.copyto, y3, acc3, "unsafe"))
        return functools.partial(call_all, calls)


def _split(channels: int, depth: int, macs: int, out: Sequence[int]) -> _Split:
    """Blocks of output positions (whole rows of the first output axis), else two blocks of
    output channels (each packs all the columns again); nothing for small products.

    ``channels`` are a group's output channels, ``macs`` the multiply-adds per output position
    and ``depth`` the rows of the column matrix, 0 when there is none (1x1 kernels): blocks
    that copy columns hold about BLOCK_BYTES of them, so the product finds them in cache.
    """
    size = math.prod(out)
    work = size * macs * channels
    if work < 2 * BLOCK_WORK:
        return _Split("none", 0, 1)
    inner = size // out[0]
    if size >= 2 * MIN_COLS:
        if depth:
            cols = max(MIN_COLS, BLOCK_BYTES // (4 * depth))
        else:
            cols = max(MIN_COLS, size // min(MAX_BLOCKS, work // (2 * BLOCK_WORK)))
        rows = -(-cols // inner)
        if rows < out[0]:
            return _Split("positions", rows, -(-out[0] // rows))
    if channels >= 2 * MIN_ROWS and work >= 4 * BLOCK_WORK:
        return _Split("channels", -(-channels // 2), 2)
    return _Split("none", 0, 1)


def _products(
    p: _Plan, weight: np.ndarray, cols: np.ndarray, out: np.ndarray
) -> list[Callable[[], Any]]:
    """The products of one image: weight (G, M/G, K) @ cols (G, K, S) -> out (G, M/G, S)."""
    sp = p.split
    if sp.by == "none":
        return [functools.partial(np.matmul, weight, cols, out=out)]
    if sp.by == "channels":
        return [
            functools.partial(
                np.matmul, weight[:, lo : lo + sp.size], cols, out=out[:, lo : lo + sp.size]
            )
            for lo in range(0, out.shape[1], sp.size)
        ]
    step = sp.size * out.shape[2] // p.w.out[0]
    return [
        functools.partial(
            np.matmul, weight, cols[:, :, lo : lo + step], out=out[:, :, lo : lo + step]
        )
        for lo in range(0, out.shape[2], step)
    ]


def _image_calls(
    ctx: KernelContext, p: _Plan, image: np.ndarray, weight: np.ndarray, out: np.ndarray
) -> list[Callable[[], Any]]:
    """im2col and the products for one image (``image`` is (1, planes, C, *extents)).

    One copy per staging plane moves all its taps (a strided view of the plane).  Split by
    positions, each block copies its own output rows into its own column buffer and multiplies
    at once, while those columns are in cache.
    """
    cols, c, w, st = ctx.scratch[p.cols], image.shape[2], p.w, p.st
    views = [st.group_view(w, image, i)[0] for i in range(len(st.groups))]  # (C, *taps, *out)
    kslices = [(slice(None), *group[3]) for group in st.groups]
    g, sp, rank = p.group, p.split, len(w.out)
    if sp.by != "positions":
        dst = cols.reshape(c, *w.kernel, *w.out)
        copies = [functools.partial(np.copyto, dst[k], v) for k, v in zip(kslices, views)]
        products = _products(p, weight, cols.reshape(g, -1, out.shape[2]), out)
        return [*copies, _parallel(ctx, products)]
    inner = out.shape[2] // w.out[0]
    units = []
    for b, lo in enumerate(range(0, w.out[0], sp.size)):
        hi = min(lo + sp.size, w.out[0])
        dst = cols[b].reshape(c, *w.kernel, sp.size, *w.out[1:])
        rows = (slice(None),) * (rank + 1) + (slice(0, hi - lo),)
        block = [
            functools.partial(np.copyto, dst[k][rows], v[rows[:-1] + (slice(lo, hi),)])
            for k, v in zip(kslices, views)
        ]
        mat = cols[b].reshape(g, -1, sp.size * inner)[:, :, : (hi - lo) * inner]
        block.append(
            functools.partial(np.matmul, weight, mat, out=out[:, :, lo * inner : hi * inner])
        )
        units.append(_serial(block))
    return [_parallel(ctx, units)]


def _depthwise_calls(
    ctx: KernelContext,
    p: _Plan,
    src: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None,
    y: np.ndarray,
) -> list[Callable[[], Any]]:
    """y[:, c] = sum over taps of w[c, tap] * the tap's view, on flattened rows: each tap reads
    a contiguous run of its plane, and the garbage between output rows is dropped at the end."""
    offsets, length, wide = flat_offsets(p.st, p.w)
    n, c = y.shape[:2]
    flat = src.reshape(n, src.shape[1], c, -1)
    acc, tmp = ctx.scratch[p.acc], ctx.scratch[p.cols]
    run = acc[:, :, :length]
    views = [flat[:, plane, :, off : off + length] for (plane, _), off in zip(p.st.taps, offsets)]
    calls: list[Callable[[], Any]] = [
        functools.partial(np.multiply, views[0], weight[:, 0:1], out=run)
    ]
    for t in range(1, len(views)):
        calls.append(functools.partial(np.multiply, views[t], weight[:, t : t + 1], out=tmp))
        calls.append(functools.partial(np.add, run, tmp, out=run))
    keep = (Ellipsis, slice(None)) + tuple(slice(0, o) for o in p.w.out[1:])
    valid = acc.reshape(n, c, *wide)[keep]
    if bias is not None:
        calls.append(
            functools.partial(
                np.add, valid, bias.reshape(c, *(1,) * len(wide)), out=y, casting="unsafe"
            )
        )
    else:
        calls.append(functools.partial(np.copyto, y, valid, "unsafe"))
    return calls


def _parallel(ctx: KernelContext, units: list[Callable[[], Any]]) -> Callable[[], None]:
    if len(units) == 1:
        return units[0]
    return functools.partial(ctx.parallel_for, len(units), functools.partial(call_one, units))


def _serial(units: list[Callable[[], Any]]) -> Callable[[], None]:
    return functools.partial(call_all, units)


@dataclasses.dataclass(frozen=True)
class _TransposePlan:
    group: int
    out: tuple[int, ...]
    weight: np.ndarray | None  # (G, M/G * prod(kernel), C/G) in the compute type, when constant
    bias: np.ndarray | None  # (M, 1...) in the compute type, when constant
    places: tuple[tuple[int, tuple[slice, ...], tuple[slice, ...]], ...]  # tap, Y and X slices
    cols: int  # scratch (G, M/G * prod(kernel), prod(X spatial))
    xbuf: int | None  # scratch: X in the compute type
    acc: int | None  # scratch: Y in the compute type
    wbuf: int | None  # scratch: a run-time W in the compute type


class ConvTranspose(Programmed):
    """The gradient of Conv: each input position scatters W's window, scaled, into Y.

    One product per image and group gives every tap's contribution at once
    (cols = W^T @ X), then one strided add per tap places them; Y starts as the bias.  Pads
    crop the full result; output_shape fixes the crop instead (SAME_UPPER puts the odd one at
    the end, anything else at the beginning), and output_padding extends the end.
    """

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.attrs = window_attrs(self)
        self.group = group_attr(self)

    def _extents(self, spatial: Sequence[int], k: Sequence[int]) -> tuple[list[int], list[int]]:
        """Y's spatial extents and the pads cropped before them."""
        rank, a = len(spatial), self.attrs
        strides, dilations = a.strides or (1,) * rank, a.dilations or (1,) * rank
        extra = tuple(self.node.attr("output_padding") or (0,) * rank)
        shape = self.node.attr("output_shape")
        if len(strides) != rank or len(dilations) != rank or len(extra) != rank:
            raise self.fail(f"strides, dilations and output_padding must have {rank} entries")
        full = [
            (n - 1) * s + (kk - 1) * d + 1 + e
            for n, s, kk, d, e in zip(spatial, strides, k, dilations, extra)
        ]
        if shape or a.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out = list(shape[-rank:]) if shape else [n * s for n, s in zip(spatial, strides)]
            total = [f - o for f, o in zip(full, out)]
            if a.auto_pad == "SAME_UPPER":
                return out, [t // 2 for t in total]
            return out, [t - t // 2 for t in total]
        pads = (0,) * (2 * rank) if a.auto_pad == "VALID" else a.pads or (0,) * (2 * rank)
        if len(pads) != 2 * rank:
            raise self.fail(f"pads must have {2 * rank} entries, got {list(pads)}")
        return [f - b - e for f, b, e in zip(full, pads[:rank], pads[rank:])], list(pads[:rank])

    def infer(self, ctx: InferContext) -> None:
        same_types(self, ctx, 3)
        x, wshape, dtype = ctx.shape(0), ctx.shape(1), ctx.dtype(0)
        g = self.group
        if len(x) < 3 or len(wshape) != len(x) or not is_float(dtype):
            raise self.fail(
                f"X {list(x)} and W {list(wshape)} must be float (N, C, spatial...), got "
                f"{name_of(dtype)}",
                "invalid_input",
            )
        n, c, mg = x[0], x[1], wshape[1]
        if wshape[0] != c or c % g:
            raise self.fail(
                f"W {list(wshape)} does not fit {c} input channels in {g} group(s)", "invalid_input"
            )
        k = tuple(wshape[2:])
        if self.attrs.kernel_shape not in (None, k):
            raise self.fail(f"kernel_shape {list(self.attrs.kernel_shape)} is not W's {k}")
        m = mg * g
        if ctx.has_input(2) and ctx.shape(2) != (m,):
            raise self.fail(f"B must have shape [{m}], got {list(ctx.shape(2))}", "invalid_input")
        out, begin = self._extents(x[2:], k)
        if min(out) < 1:
            raise self.fail(f"X {list(x)} gives an empty output", "invalid_input")
        ctx.set_output(0, dtype, (n, m, *out))
        ct = compute_type(dtype)
        kprod, size = math.prod(k), math.prod(x[2:])
        weight, bias = ctx.known_value(1), ctx.known_value(2) if ctx.has_input(2) else None
        if weight is not None:
            weight = weight.reshape(g, c // g, mg * kprod).transpose(0, 2, 1)
            weight = np.ascontiguousarray(weight, dtype=ct)
        if bias is not None:
            bias = np.ascontiguousarray(bias.reshape(m, *(1,) * len(k)), dtype=ct)
        ctx.prepared = _TransposePlan(
            g, tuple(out), weight, bias, self._places(x[2:], k, out, begin),
            ctx.add_scratch(ct, (g, mg * kprod, size)),
            ctx.add_scratch(ct, x) if ct != dtype else None,
            ctx.add_scratch(ct, (n, m, *out)) if ct != dtype else None,
            ctx.add_scratch(ct, wshape) if weight is None and ctx.dtype(1) != ct else None,
        )  # fmt: skip

    def _places(
        self, spatial: Sequence[int], k: Sequence[int], out: Sequence[int], begin: Sequence[int]
    ) -> tuple[tuple[int, tuple[slice, ...], tuple[slice, ...]], ...]:
        """For each tap: the X positions whose contribution lands inside Y, and where."""
        rank, a = len(spatial), self.attrs
        strides, dilations = a.strides or (1,) * rank, a.dilations or (1,) * rank
        places = []
        for t, tap in enumerate(itertools.product(*(range(kk) for kk in k))):
            ys, xs = [], []
            for n, s, d, o, b, i in zip(spatial, strides, dilations, out, begin, tap):
                shift = i * d - b  # Y position of X position 0 for this tap
                lo = max(0, -(shift // s))  # ceil(-shift / s)
                hi = min(n, -(-(o - shift) // s))
                ys.append(slice(lo * s + shift, (hi - 1) * s + shift + 1, s))
                xs.append(slice(lo, hi))
            if all(sl.stop > sl.start for sl in xs):
                places.append((t, tuple(ys), tuple(xs)))
        return tuple(places)

    def program(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        p: _TransposePlan = ctx.prepared
        x, y = inputs[0], outputs[0]
        n, c = x.shape[:2]
        g = p.group
        # explicit extents: any of them may be 0 (no image, no channel, no input position)
        kprod, size = math.prod(inputs[1].shape[2:]), math.prod(x.shape[2:])
        calls: list[Callable[[], Any]] = []
        weight = p.weight
        if weight is None:
            weight = _run_time_weight(ctx, inputs[1], p.wbuf, calls)
            weight = weight.reshape(g, c // g, y.shape[1] // g * kprod).transpose(0, 2, 1)
        if p.xbuf is not None:
            calls.append(functools.partial(np.copyto, ctx.scratch[p.xbuf], x, "unsafe"))
            x = ctx.scratch[p.xbuf]
        acc = y if p.acc is None else ctx.scratch[p.acc]
        bias = p.bias
        if bias is None and len(inputs) > 2 and inputs[2] is not None:
            bias = inputs[2].reshape(-1, *(1,) * len(p.out))
        cols = ctx.scratch[p.cols]
        taps = cols.reshape(y.shape[1], kprod, *x.shape[2:])
        xg = x.reshape(n, g, c // g, size)
        if bias is None:
            calls.append(functools.partial(acc.fill, 0))
        else:
            calls.append(functools.partial(np.copyto, acc, bias, "unsafe"))
        for i in range(n):
            calls.append(functools.partial(np.matmul, weight, xg[i], out=cols))
            for t, ys, xs in p.places:
                dst = acc[(i, slice(None), *ys)]
                calls.append(functools.partial(np.add, dst, taps[(slice(None), t, *xs)], out=dst))
        if acc is not y:
            calls.append(functools.partial(np.copyto, y, acc, "unsafe"))
        return functools.partial(call_all, calls)


def _run_time_weight(
    ctx: KernelContext, weight: np.ndarray, wbuf: int | None, calls: list[Callable[[], Any]]
) -> np.ndarray:
    """A weight known only at run time, cast each run into its scratch when types differ."""
    if wbuf is None:
        return weight
    calls.append(functools.partial(np.copyto, ctx.scratch[wbuf], weight, "unsafe"))
    return ctx.scratch[wbuf]


def group_attr(kernel: OpKernel) -> int:
    """The ``group`` attribute of a Conv or ConvTranspose node, checked."""
    group = kernel.node.attr("group", 1)
    if group < 1:
        raise kernel.fail(f"group must be >= 1, got {group}")
    return group
