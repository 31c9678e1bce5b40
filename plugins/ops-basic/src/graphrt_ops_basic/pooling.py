"""Pools: one numpy call per kernel tap over every output position at once.

The input is copied into a padded scratch buffer (-inf for max, 0 for average) when there is
padding; each tap is then a strided view.  Average pooling divides by a per-position count
computed once per plan, so count_include_pad and ceil_mode windows cost nothing per run.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.kernel import InferContext, KernelContext, OpKernel

from ._windows import Window, interior, padded_shape, tap_view, taps, window


@dataclasses.dataclass(frozen=True)
class _Plan:
    w: Window
    pad_scratch: int | None
    divisor: np.ndarray | None = None  # average pool: elements counted per output position
    p: int = 2  # LpPool's p


class _Pool(OpKernel):
    fill: float = 0.0

    def _window(self, ctx: InferContext) -> Window:
        x = ctx.shape(0)
        if len(x) < 3:
            raise self.fail(f"X must be (N, C, spatial...), got {list(x)}", "invalid_input")
        k = self.node.attr("kernel_shape")
        if not k:
            raise self.fail("kernel_shape is required")
        return window(self, self.node, x[2:], k, bool(self.node.attr("ceil_mode", 0)))

    def _padded(self, ctx: KernelContext, p: _Plan, x: np.ndarray) -> np.ndarray:
        if p.pad_scratch is None:
            return x
        buf = ctx.scratch[p.pad_scratch]
        buf.fill(self.fill)
        np.copyto(buf[interior(p.w, x.shape[2:])], x)
        return buf


class MaxPool(_Pool):
    fill = -np.inf

    def infer(self, ctx: InferContext) -> None:
        w = self._window(ctx)
        x = ctx.shape(0)
        out = (*x[:2], *w.out)
        ctx.set_output(0, ctx.dtype(0), out)
        ctx.set_output(1, np.int64, out)
        if self.node.attr("storage_order", 0) not in (0, 1):
            raise self.fail("storage_order must be 0 or 1")
        pad = ctx.add_scratch(ctx.dtype(0), padded_shape(x, w)) if w.padded else None
        ctx.prepared = _Plan(w, pad)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Plan = ctx.prepared
        x, y = inputs[0], outputs[0]
        fill = np.iinfo(x.dtype).min if x.dtype.kind in "iu" else self.fill
        if p.pad_scratch is not None:
            buf = ctx.scratch[p.pad_scratch]
            buf.fill(fill)
            np.copyto(buf[interior(p.w, x.shape[2:])], x)
            src = buf
        else:
            src = x
        first = True
        for tap in taps(p.w):
            view = tap_view(src, p.w, tap)
            if first:
                np.copyto(y, view)
                first = False
            else:
                np.maximum(y, view, out=y)
        if len(outputs) > 1 and outputs[1] is not None:
            self._indices(p, x, src, outputs[1])

    def _indices(self, p: _Plan, x: np.ndarray, src: np.ndarray, out: np.ndarray) -> None:
        """Flat index into X of each maximum (first one on ties), row- or column-major."""
        w = p.w
        k = len(w.kernel)
        spatial = x.shape[2:]
        best = np.full(out.shape, -np.inf)
        pos = [np.zeros(out.shape, np.int64) for _ in range(k)]
        grids = np.meshgrid(*[np.arange(o) for o in w.out], indexing="ij")
        for tap in taps(w):
            view = tap_view(src, w, tap)
            better = view > best
            best = np.where(better, view, best)
            for a in range(k):
                coord = grids[a] * w.strides[a] + tap[a] * w.dilations[a] - w.pads_begin[a]
                pos[a] = np.where(better, coord, pos[a])
        n, c = x.shape[:2]
        flat = np.zeros(out.shape, np.int64)
        axes = range(k) if self.node.attr("storage_order", 0) == 0 else reversed(range(k))
        for a in axes:  # row-major, or column-major with storage_order=1
            flat = flat * spatial[a] + pos[a]
        image = math.prod(spatial)
        base = (np.arange(n)[:, None] * c + np.arange(c)[None, :]) * image
        out[...] = flat + base.reshape((n, c) + (1,) * k)


class AveragePool(_Pool):
    fill = 0.0

    def infer(self, ctx: InferContext) -> None:
        w = self._window(ctx)
        x = ctx.shape(0)
        ctx.set_output(0, ctx.dtype(0), (*x[:2], *w.out))
        pad = ctx.add_scratch(ctx.dtype(0), padded_shape(x, w)) if w.padded else None
        ctx.prepared = _Plan(
            w, pad, _divisor(w, x[2:], ctx, self.node.attr("count_include_pad", 0))
        )

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Plan = ctx.prepared
        x, y = inputs[0], outputs[0]
        src = self._padded(ctx, p, x)
        _sum_taps(p.w, src, y)
        np.divide(y, p.divisor, out=y)


class LpPool(_Pool):
    def infer(self, ctx: InferContext) -> None:
        w = self._window(ctx)
        x = ctx.shape(0)
        ctx.set_output(0, ctx.dtype(0), (*x[:2], *w.out))
        pad = ctx.add_scratch(ctx.dtype(0), padded_shape(x, w)) if w.padded else None
        ctx.prepared = _Plan(w, pad, p=int(self.node.attr("p", 2)))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Plan = ctx.prepared
        x, y = inputs[0], outputs[0]
        src = np.abs(self._padded(ctx, p, x)) ** p.p
        _sum_taps(p.w, src, y)
        np.power(y, 1.0 / p.p, out=y)


def _sum_taps(w: Window, src: np.ndarray, y: np.ndarray) -> None:
    first = True
    for tap in taps(w):
        view = tap_view(src, w, tap)
        if first:
            np.copyto(y, view)
            first = False
        else:
            np.add(y, view, out=y)


def _divisor(w: Window, spatial: Sequence[int], ctx: InferContext, include_pad: int) -> np.ndarray:
    """How many elements each output position averages, computed once per plan.

    Declared padding counts when count_include_pad is set; the extra room ceil_mode adds past the
    declared padding never counts.
    """
    counted = np.zeros(tuple(n + b + e for n, b, e in zip(spatial, w.pads_begin, w.pads_end)))
    if include_pad:
        region = tuple(
            slice(0, b + n + d) for b, n, d in zip(w.pads_begin, spatial, w.declared_end)
        )
    else:
        region = tuple(slice(b, b + n) for b, n in zip(w.pads_begin, spatial))
    counted[region] = 1
    count = np.zeros(w.out)
    _sum_taps(w, counted, count)
    return np.maximum(count, 1).astype(ctx.dtype(0))


class GlobalAveragePool(OpKernel):
    def infer(self, ctx: InferContext) -> None:
        x = ctx.shape(0)
        if len(x) < 3:
            raise self.fail(f"X must be (N, C, spatial...), got {list(x)}", "invalid_input")
        ctx.set_output(0, ctx.dtype(0), (*x[:2], *([1] * (len(x) - 2))))
        ctx.prepared = np.array(math.prod(x[2:]), dtype=ctx.dtype(0))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x, y = inputs[0], outputs[0]
        np.add.reduce(x, axis=tuple(range(2, x.ndim)), keepdims=True, out=y)
        np.divide(y, ctx.prepared, out=y)


class GlobalMaxPool(OpKernel):
    def infer(self, ctx: InferContext) -> None:
        x = ctx.shape(0)
        if len(x) < 3:
            raise self.fail(f"X must be (N, C, spatial...), got {list(x)}", "invalid_input")
        ctx.set_output(0, ctx.dtype(0), (*x[:2], *([1] * (len(x) - 2))))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x = inputs[0]
        np.maximum.reduce(x, axis=tuple(range(2, x.ndim)), keepdims=True, out=outputs[0])
