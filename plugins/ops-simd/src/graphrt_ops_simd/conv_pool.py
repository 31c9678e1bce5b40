"""FusedConvPool on a native path: the convolution in bands of rows that the MaxPool reduces
while they are in cache (src/native/conv_pool.inc), else the path's two kernels in turn.

Bands need the direct kernel with row tiles (a tile never runs on into the next row) or the
lanes kernel over the whole depth, one group, fast mode, no residual, a Relu or no activation,
the native MaxPool, and windows that each read a row and a column of the convolution's output.
The bits are the unfused pair's on the same path: the convolution kernel's arithmetic per
output, the pool's taps in the same order (tests/simd/test_conv_pool.py).  light_squeezenet's
stem (3x3/2 3->64 on 224 x 224, then 3x3/2) with the caches swept before each call, one thread,
Zen 5: 367 -> 310 us.

A shallow window (a stem's 3 input channels: fewer than ``BLOCKED_MAX_DEPTH`` taps) runs on
avx512 as the lanes kernel's bands kept channels-last (``ConvPlan.lanes_bands``): its tiles of
64 channels x 6 positions are stored as they are, where the direct kernel's 16 x 16 tiles
broadcast a weight per multiply-add and the lanes kernel's NCHW output transposes every tile;
only the pooled outputs are transposed into Y's planes.  ConvPoolCall alone, Zen 5 (avx512):
light_squeezenet's stem 288-296 -> 241-249 us at one thread, 164 -> 123-136 at two;
light_zfnet512's 7x7/2 3->96 1647 -> 1494; light_shufflenet's 3x3/2 3->24 156 -> 140;
light_resnet50's 7x7/2 3->64 even (1013 both); deeper windows lost (VGG's 3x3 64->64, depth
576: 16.3 -> 16.5 ms), and so did avx2's pairs of 8 channels (shufflenet's 163 -> 200 us).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo
from graphrt_ops_basic import conv_pool as basic_conv_pool
from graphrt_ops_basic import fused as basic_fused
from graphrt_ops_basic import pool as basic_pool

from . import _native, conv, conv_exact, pool
from .kernels import NumpyFactory

F32 = np.dtype(np.float32)
#: Windows of fewer taps (channels x kh x kw) band channels-last on avx512 (lanes kernel).
BLOCKED_MAX_DEPTH = 240


@dataclasses.dataclass(frozen=True)
class _Banded:
    native: Any  # the convolution's _native.ConvPlan
    work: int | None  # scratch index of its staged image
    bias: np.ndarray | None  # a constant bias, else input 2 at bind time
    activation: str  # "none" or "relu"
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]  # before each spatial axis


def windows_inside(p: Any, conv_shape: Sequence[int], pool_shape: Sequence[int]) -> bool:
    """Whether each pool window reads a row and a column of the convolution's output
    (ConvPoolCall's condition): pads smaller than the window's extent, no window past the end."""
    for a in (0, 1):
        span = (p.kernel[a] - 1) * p.dilations[a] + 1
        stride = p.strides[a] if pool_shape[2 + a] > 1 else 1
        if p.pads[a] >= span or (pool_shape[2 + a] - 1) * stride - p.pads[a] >= conv_shape[2 + a]:
            return False
    return True


class FusedConvPool(basic_conv_pool.FusedConvPool):
    """ops-basic's FusedConvPool with this path's Conv and MaxPool kernels, banded where it can."""

    def __init__(self, node: NodeInfo, numpy_factory: NumpyFactory, isa: str) -> None:
        self.isa = isa
        fused_conv = conv.FusedConv(basic_conv_pool.conv_node(node), basic_fused.FusedConv, isa)
        max_pool = pool.MaxPool(basic_conv_pool.pool_node(node), basic_pool.MaxPool, isa)
        super().__init__(node, fused_conv, max_pool)

    def banded(
        self,
        ctx: InferContext,
        conv_plan: Any,
        pool_plan: Any,
        conv_shape: tuple[int, ...],
        pool_shape: tuple[int, ...],
    ) -> _Banded | None:
        if (
            ctx.exact
            or not isinstance(conv_plan, conv._Plan)
            or not isinstance(pool_plan, pool._Plan)
            or pool_plan.exact
            or conv_plan.residual
            or conv_plan.epilogue is not None
            or conv_plan.gelu
            or not windows_inside(pool_plan, conv_shape, pool_shape)
        ):
            return None
        native = self.blocked_plan(ctx, conv_plan) or conv_plan.native
        if not (native.row_bands or native.lanes_bands):
            return None
        work = conv_plan.work
        if native is not conv_plan.native and native.work_floats:  # its own staged planes
            if work is None:
                work = ctx.add_scratch(F32, (native.work_floats,))
            else:  # the direct plan's scratch, grown where the lanes plan stages more
                ctx.scratch[work] = (F32, (max(ctx.scratch[work][1][0], native.work_floats),))
        return _Banded(
            native, work, conv_plan.bias, conv_plan.activation,
            pool_plan.kernel, pool_plan.strides, pool_plan.dilations, pool_plan.pads,
        )  # fmt: skip

    def blocked_plan(self, ctx: InferContext, conv_plan: Any) -> Any:
        """The lanes kernel's plan banded channels-last, where it pays (see the module's
        docstring), else None."""
        weight = ctx.known_value(1)
        if self.isa != "avx512" or math.prod(weight.shape[1:]) >= BLOCKED_MAX_DEPTH:
            return None
        try:
            native = conv_exact.native_conv_plan(ctx, conv_plan.geometry, self.isa, kernel="lanes")
        except ValueError:  # (auto's plan was made: the geometry is not the cause)
            return None
        return native if native.lanes_bands else None

    def runs_natively(self, prepared: Any) -> bool:
        """Banded, or both kernels native (``graphrt explain``: native only when all of it is)."""
        p: basic_conv_pool.ConvPoolPlan = prepared
        return p.banded is not None or (
            self.conv.runs_natively(p.conv) and self.pool.runs_natively(p.pool)
        )

    def bind_banded(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        b: _Banded = ctx.prepared.banded
        x = inputs[0]
        bias = b.bias
        if bias is None and len(inputs) > 2 and inputs[2] is not None:
            bias = np.ascontiguousarray(inputs[2], dtype=F32)
        if x.shape[3] > 1 and x.strides[3] != 4:  # a strided view: one contiguous copy per run
            return functools.partial(_with_contiguous_x, self, ctx, inputs, outputs)
        work = ctx.scratch[b.work] if b.work is not None else np.empty(0, F32)
        threads = ctx.threads
        call = _native.ConvPoolCall(
            b.native, x, work, outputs[0], bias, b.activation, list(b.kernel), list(b.strides),
            list(b.dilations), list(b.pads), self.isa, threads,
        )  # fmt: skip
        nbytes = call.thread_floats * F32.itemsize * threads
        ctx.reserve(nbytes, "the native band and pool buffers (one per thread)")
        return call


def _with_contiguous_x(
    kernel: FusedConvPool, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
) -> None:
    """X as a contiguous copy for this call: the native kernel reads it in place."""
    kernel.bind_banded(ctx, [np.ascontiguousarray(inputs[0]), *inputs[1:]], outputs)()
