"""Conv: im2col into a planned scratch buffer, then one BLAS product per image and group.

The prepare step (``infer``) fixes the strategy for the shapes: a 1x1 unpadded stride-1
convolution is a plain product on the input viewed as (C, H*W); a depthwise convolution
accumulates one multiply per kernel tap; everything else copies the windows once into a column
buffer (a strided view, one ``copyto``) and multiplies by the weight viewed as a matrix.  Every
temporary is slab scratch, so a steady-state run allocates nothing.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.kernel import InferContext, KernelContext, OpKernel

from ._util import same_types
from ._windows import Window, interior, padded_shape, patches, tap_view, taps, window

#: Output channels per block when a convolution is split over intra-op threads.
CHANNEL_BLOCK = 32
PARALLEL_THRESHOLD = 1 << 22


@dataclasses.dataclass(frozen=True)
class _Plan:
    strategy: str  # "pointwise", "depthwise" or "im2col"
    w: Window
    group: int
    weight: np.ndarray | None  # (group, M/group, C/group*prod(k)) when constant
    pad_scratch: int | None
    col_scratch: int | None
    tmp_scratch: int | None
    blocks: int
    wide_scratch: int | None = None  # float16 computes in float32: the float32 output
    bias_in_gemm: bool = False  # the bias is a column of the weight and cols has a ones row


class Conv(OpKernel):
    def infer(self, ctx: InferContext) -> None:
        same_types(self, ctx, 3)
        x, wshape = ctx.shape(0), ctx.shape(1)
        if len(x) < 3 or len(wshape) != len(x):
            raise self.fail(
                f"X {list(x)} and W {list(wshape)} must be (N, C, spatial...)", "invalid_input"
            )
        group = self.node.attr("group", 1)
        n, c = x[0], x[1]
        m = wshape[0]
        if c % group or m % group or wshape[1] * group != c:
            raise self.fail(
                f"W {list(wshape)} does not fit {c} input channels in {group} group(s)",
                "invalid_input",
            )
        k = tuple(self.node.attr("kernel_shape") or wshape[2:])
        if k != tuple(wshape[2:]):
            raise self.fail(f"kernel_shape {list(k)} differs from W's {list(wshape[2:])}")
        w = window(self, self.node, x[2:], k)
        ctx.set_output(0, ctx.dtype(0), (n, m, *w.out))
        if ctx.has_input(2) and ctx.shape(2) != (m,):
            raise self.fail(f"B must have shape [{m}], got {list(ctx.shape(2))}", "invalid_input")
        # float16 accumulates in float32 and rounds once at the end
        dtype = np.dtype(np.float32) if ctx.dtype(0) == np.float16 else ctx.dtype(0)
        wide = ctx.add_scratch(dtype, (n, m, *w.out)) if dtype != ctx.dtype(0) else None
        kprod = math.prod(k)
        weight = ctx.known_value(1)
        bias = ctx.known_value(2) if ctx.has_input(2) else None
        depthwise = group == c and group > 1 and m == c
        # with constant W and B, im2col adds a row of ones to the columns and B as a column of
        # the weight, so the product adds the bias: cheaper than a pass over the output, even
        # for a 1x1 convolution that then copies its input once
        bias_in_gemm = not depthwise and group == 1 and weight is not None and bias is not None
        pointwise = kprod == 1 and not w.padded and set(w.strides) == {1} and group == 1
        pointwise = pointwise and not bias_in_gemm
        pad = None
        if w.padded and not pointwise:
            pad = ctx.add_scratch(dtype, padded_shape(x, w))
        col = tmp = None
        out_size = math.prod(w.out)
        if depthwise:
            strategy = "depthwise"
            tmp = ctx.add_scratch(dtype, (n, m, *w.out))
        elif pointwise:
            strategy = "pointwise"
        if not (depthwise or pointwise):
            strategy = "im2col"
            col = ctx.add_scratch(dtype, (c * kprod + int(bias_in_gemm), out_size))
        if weight is not None:
            weight = weight.reshape(group, m // group, -1)
            if bias_in_gemm:
                weight = np.concatenate([weight, bias.reshape(1, m, 1)], axis=2)
            weight = np.ascontiguousarray(weight, dtype=dtype)
        work = n * m * out_size * (c // group) * kprod
        blocks = 1
        if (
            strategy != "depthwise"
            and group == 1
            and work >= PARALLEL_THRESHOLD
            and m > CHANNEL_BLOCK
        ):
            blocks = -(-m // CHANNEL_BLOCK)
        ctx.prepared = _Plan(strategy, w, group, weight, pad, col, tmp, blocks, wide, bias_in_gemm)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Plan = ctx.prepared
        x, y_out = inputs[0], outputs[0]
        y = y_out if p.wide_scratch is None else ctx.scratch[p.wide_scratch]
        bias = inputs[2] if len(inputs) > 2 else None
        weight = p.weight
        if weight is None:
            weight = (
                inputs[1].reshape(p.group, y.shape[1] // p.group, -1).astype(y.dtype, copy=False)
            )
        src = x
        if p.pad_scratch is not None:
            src = ctx.scratch[p.pad_scratch]
            src.fill(0)
            np.copyto(src[interior(p.w, x.shape[2:])], x)
        if p.strategy == "depthwise":
            self._depthwise(ctx, p, src, weight.reshape(inputs[1].shape), y)
        else:
            for i in range(x.shape[0]):
                self._image(ctx, p, src[i], weight, y[i])
        if bias is not None and not p.bias_in_gemm:
            np.add(y, bias.reshape((-1,) + (1,) * (y.ndim - 2)), out=y, casting="unsafe")
        if y is not y_out:
            np.copyto(y_out, y, casting="unsafe")

    @staticmethod
    def _image(
        ctx: KernelContext, p: _Plan, image: np.ndarray, weight: np.ndarray, y: np.ndarray
    ) -> None:
        """One image: columns (or the image itself) times the weight matrix, per group."""
        m = y.shape[0]
        out_size = y[0].size
        if p.strategy == "pointwise":
            cols = image.reshape(image.shape[0], -1)
        else:
            cols = ctx.scratch[p.col_scratch]
            rows = cols[:-1] if p.bias_in_gemm else cols
            np.copyto(rows.reshape((image.shape[0],) + p.w.kernel + p.w.out), patches(image, p.w))
            if p.bias_in_gemm:
                cols[-1].fill(1)
        g = p.group
        ym = y.reshape(g, m // g, out_size)
        colsg = cols.reshape(g, cols.shape[0] // g, out_size)
        if p.blocks == 1:
            np.matmul(weight, colsg, out=ym)
            return
        w2, c2, y2 = weight[0], colsg[0], ym[0]

        def block(b: int) -> None:
            r = slice(b * CHANNEL_BLOCK, (b + 1) * CHANNEL_BLOCK)
            np.matmul(w2[r], c2, out=y2[r])

        ctx.parallel_for(p.blocks, block)

    @staticmethod
    def _depthwise(
        ctx: KernelContext, p: _Plan, src: np.ndarray, w: np.ndarray, y: np.ndarray
    ) -> None:
        """One multiply-add per kernel tap over every channel at once."""
        tmp = ctx.scratch[p.tmp_scratch]
        lead = (1, -1) + (1,) * len(p.w.out)
        first = True
        for tap in taps(p.w):
            wt = w[(slice(None), 0, *tap)].reshape(lead)
            view = tap_view(src, p.w, tap)
            if first:
                np.multiply(view, wt, out=y)
                first = False
            else:
                np.multiply(view, wt, out=tmp)
                np.add(y, tmp, out=y)
