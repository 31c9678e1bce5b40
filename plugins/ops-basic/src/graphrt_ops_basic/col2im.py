"""Col2Im: add column blocks back into an N-d image (the adjoint of im2col, torch's fold).

The input is ``(N, C * prod(block), L)``; block ``l`` (row-major over the block grid) and tap
``k`` (row-major over the block) land on position ``l * stride + k * dilation - pad_begin``;
what lands in the padding is dropped.  Two plans, a few numpy calls per tap either way:

* small images (slabs of at most ``SLAB_MAX`` elements in all): one strided copy puts every
  tap's terms where they land, each tap in its own slab of the padded image's shape (``-0``
  elsewhere); then one contiguous ``np.add`` per tap sums the slabs into the first, and one copy
  takes the image out of its padding.  numpy adds a strided 2-D slice row by row, about 40 ns a
  row, so on a 30 x 40 image the contiguous adds are about 5x cheaper;
* larger ones: one strided ``np.add`` per tap adds that tap's terms of every block at once,
  straight into Y, where rows are long enough for the per-row cost not to matter (and the slabs
  would cost an extra pass over memory).

The slices come from a cache keyed by the geometry, so a dynamic node (image_shape and
block_shape fed at run time) re-plans cheaply.

Exact in both modes: each image element receives its terms in ascending tap order, one add per
term, starting from ``-0`` so that the first add is the first term unchanged (``-0 + t = t``
for every t, the sign of a zero included: rule 2's ``acc = t0``); elements no block reaches are
then set to ``+0`` (the empty sum).  Within one tap no two blocks meet on one element.  The
slabs add ``-0`` where a tap has no term, which changes no value (``t + -0 = t``, ``+0`` and
``-0`` included), so both plans give the same bits.  float16
and bfloat16 add in float32 and round once; exact mode rewrites NaN to the canonical NaN
(in the float32 sums, before that rounding).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._geometry import call_all
from ._util import is_float, rewrite_nan
from ._values import int_values

#: Most elements of the tap slabs (taps x N x C x padded image) for the slab plan.
SLAB_MAX = 1 << 17


@dataclasses.dataclass(frozen=True)
class _Slabs:
    scratch: int  # (taps, N * C, *padded image) in the compute type
    shape: tuple[int, ...]
    #: the slabs as the input's terms land in them: (*block, N * C, *grid), element strides
    view_shape: tuple[int, ...]
    view_strides: tuple[int, ...]
    cols: tuple[int, ...]  # the input as (N * C, *block, *grid)
    order: tuple[int, ...]  # ... transposed to the view's axes
    inner: tuple[slice, ...]  # the image inside a slab's padding


@dataclasses.dataclass(frozen=True)
class _Plan:
    cols: tuple[int, ...]  # the input viewed as (N, C, *block, *grid)
    #: per tap: its blocks that land inside the image (tap index, grid slices), and where
    taps: tuple[tuple[tuple[Any, ...], tuple[slice, ...]], ...]
    acc: int | None  # scratch: the image in the compute type (None: Y itself)
    uncovered: np.ndarray | None  # bool, the image's extents: elements no block reaches
    start: np.ndarray  # 0-d: what the sums start from (-0 for floats)
    zero: np.ndarray  # 0-d: the empty sum
    nan: int | None  # exact mode: bool scratch of the sums' shape (canonical-NaN rewrite)
    slabs: _Slabs | None = None  # the slab plan (small images), else one strided add per tap


class Col2Im(OpKernel):
    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)

        def ints(name: str, least: int) -> tuple[int, ...] | None:
            value = node.attr(name)
            if value is None or len(value) == 0:
                return None
            if any(v < least for v in value):
                raise self.fail(f"{name} must be >= {least}, got {list(value)}")
            return tuple(int(v) for v in value)

        self.dilations = ints("dilations", 1)
        self.pads = ints("pads", 0)
        self.strides = ints("strides", 1)

    def infer(self, ctx: InferContext) -> None:
        dtype, shape = ctx.dtype(0), ctx.shape(0)
        if dtype == np.dtype(object):
            raise self.fail("string tensors cannot be added", "invalid_input")
        image = int_values(ctx, 1)
        block = int_values(ctx, 2)
        rank = len(image)
        if len(block) != rank or rank == 0:
            message = f"image_shape {image} and block_shape {block} must have one length"
            raise self.fail(message, "invalid_input")
        if any(v < 1 for v in image + block):
            message = f"image_shape {image} and block_shape {block} must be positive"
            raise self.fail(message, "invalid_input")
        dil = self.dilations or (1,) * rank
        strides = self.strides or (1,) * rank
        pads = self.pads or (0,) * (2 * rank)
        if len(dil) != rank or len(strides) != rank or len(pads) != 2 * rank:
            raise self.fail(
                f"dilations {list(dil)}, strides {list(strides)} and pads {list(pads)} do not "
                f"fit {rank} spatial axes",
                "invalid_input",
            )
        padded = [n + pads[a] + pads[a + rank] for a, n in enumerate(image)]
        grid = []
        for n, b, d, s in zip(padded, block, dil, strides):
            span = n - (b - 1) * d - 1
            if span < 0:
                message = f"a block ({block}, dilations {list(dil)}) exceeds the padded image"
                raise self.fail(message, "invalid_input")
            grid.append(span // s + 1)
        kk = math.prod(block)
        if len(shape) != 3 or shape[1] % kk or shape[2] != math.prod(grid):
            message = (
                f"input {list(shape)} must be (N, C * {kk}, {math.prod(grid)}) for blocks "
                f"{block} on the padded image {padded}"
            )
            raise self.fail(message, "invalid_input")
        n, c = shape[0], shape[1] // kk
        out = (n, c, *image)
        ctx.set_output(0, dtype, out)
        compute = np.dtype(np.float32) if is_float(dtype) and dtype.itemsize < 4 else dtype
        acc = None if compute == dtype else ctx.add_scratch(compute, out)
        taps, uncovered = _taps(tuple(image), tuple(block), dil, strides, pads, tuple(grid))
        negative_zero = {"f": -0.0, "c": complex(-0.0, -0.0)}.get(compute.kind, 0)
        start = np.array(negative_zero).astype(compute)
        nan = ctx.add_scratch(np.bool_, out) if ctx.exact and compute.kind == "f" else None
        cols = (n, c, *block, *grid)
        zero = np.zeros((), compute)
        slabs = None
        if kk * n * c * math.prod(padded) <= SLAB_MAX:
            slabs = _slabs(ctx, compute, n * c, block, grid, padded, dil, strides, pads)
        ctx.prepared = _Plan(cols, taps, acc, uncovered, start, zero, nan, slabs)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        for call in self._calls(ctx, np.ascontiguousarray(inputs[0]), outputs[0]):
            call()

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        if not inputs[0].flags.c_contiguous:  # a reshape would copy: views made every run
            return functools.partial(self.run, ctx, inputs, outputs)
        return functools.partial(call_all, self._calls(ctx, inputs[0], outputs[0]))

    def _calls(self, ctx: KernelContext, x: np.ndarray, out: np.ndarray) -> list[Any]:
        """The numpy calls of a run, on views of these arrays."""
        p: _Plan = ctx.prepared
        acc = out if p.acc is None else ctx.scratch[p.acc]
        if p.slabs is not None:
            calls = _slab_calls(p, ctx.scratch[p.slabs.scratch], x, acc)
        else:
            cols = x.reshape(p.cols)
            calls = [functools.partial(np.copyto, acc, p.start)]
            lead = (slice(None), slice(None))
            for source, target in p.taps:
                view = acc[lead + target]
                source = cols[lead + source]
                calls.append(functools.partial(np.add, view, source, out=view, casting="unsafe"))
        if p.uncovered is not None:
            calls.append(functools.partial(np.copyto, acc, p.zero, where=p.uncovered))
        if p.nan is not None:  # before a float16/bfloat16 cast, which keeps the canonical NaN
            calls.append(functools.partial(rewrite_nan, acc, ctx.scratch[p.nan]))
        if acc is not out:
            calls.append(functools.partial(np.copyto, out, acc, casting="unsafe"))
        return calls


def _slabs(ctx: InferContext, compute, planes, block, grid, padded, dil, strides, pads) -> _Slabs:
    """The slab plan: the scratch and the views that place every tap's terms in its slab."""
    rank = len(block)
    shape = (math.prod(block), planes, *padded)
    row = [math.prod(padded[a + 1 :]) for a in range(rank)]  # a slab's element strides
    tap = [math.prod(block[a + 1 :]) for a in range(rank)]
    slab = planes * math.prod(padded)
    view_strides = (
        *(slab * tap[a] + dil[a] * row[a] for a in range(rank)),
        math.prod(padded),
        *(strides[a] * row[a] for a in range(rank)),
    )
    order = (*range(1, rank + 1), 0, *range(rank + 1, 2 * rank + 1))
    inner = tuple(slice(pads[a], padded[a] - pads[a + rank]) for a in range(rank))
    return _Slabs(
        ctx.add_scratch(compute, shape), shape, (*block, planes, *grid), view_strides,
        (planes, *block, *grid), order, (slice(None), *inner),
    )  # fmt: skip


def _slab_calls(p: _Plan, scratch: np.ndarray, x: np.ndarray, acc: np.ndarray) -> list[Any]:
    """Fill the slabs with the start value, put each tap's terms in its slab (one strided copy),
    add the slabs into the first in tap order (contiguous adds), copy the image into ``acc``."""
    s = p.slabs
    slabs = scratch.reshape(s.shape)
    size = slabs.itemsize
    strides = tuple(v * size for v in s.view_strides)
    view = np.lib.stride_tricks.as_strided(slabs, s.view_shape, strides, writeable=True)
    terms = x.reshape(s.cols).transpose(s.order)
    calls = [
        functools.partial(slabs.fill, p.start.item()),  # ndarray.fill: cheaper than copyto
        functools.partial(np.copyto, view, terms, casting="unsafe"),
    ]
    first = slabs[0]
    for k in range(1, s.shape[0]):
        calls.append(functools.partial(np.add, first, slabs[k], out=first))
    image = first[s.inner].reshape(acc.shape)  # (N * C, ...) split into (N, C, ...): a view
    calls.append(functools.partial(np.copyto, acc, image))
    return calls


@functools.lru_cache(maxsize=64)
def _taps(image, block, dilations, strides, pads, grid):
    """Per tap (row-major), the slices of the columns (tap, then grid positions) and of the
    image where its blocks land inside the image; and the image elements no tap reaches (a
    read-only bool array), or None."""
    taps = []
    covered = np.zeros(image, bool)
    for k in np.ndindex(*block):
        source, target = list(k), []
        for a, (t, n, d, s, g) in enumerate(zip(k, image, dilations, strides, grid)):
            shift = t * d - pads[a]  # image position of grid position 0
            lo = max(0, -(shift // s))  # first grid position at or after 0
            hi = min(g - 1, (n - 1 - shift) // s)  # last one before n
            if hi < lo:
                break
            source.append(slice(lo, hi + 1))
            target.append(slice(lo * s + shift, hi * s + shift + 1, s))
        else:
            covered[tuple(target)] = True
            taps.append((tuple(source), tuple(target)))
    if covered.all():
        return tuple(taps), None
    uncovered = ~covered
    uncovered.flags.writeable = False
    return tuple(taps), uncovered
