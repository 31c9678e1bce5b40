"""Conv and FusedConv on the native convolution, falling back to the table's numpy kernel.

(Exact mode: the same native kernels with exact mode's sums, else the native exact GEMM on an
im2col copy, :mod:`.conv_exact`.)

``infer`` lets the numpy kernel validate and plan the node on a probe context (its errors, its
output type, its geometry), then takes the native convolution for a fast-mode float32 2-D
convolution with a constant weight and at least ``MIN_GROUP_CHANNELS`` output channels per group
(a depthwise or thin grouped convolution would fill one row of a 16-row micro-tile; ops-basic's
per-tap kernel is better there), on avx2/avx512.  Of the native plan's three kernels
(docs/kernels-gemm.md, "Fast convolution") the one it picks by the shape beat or tied numpy's
kernel on every layer of light_resnet50 and light_squeezenet (bench/conv_micro.py,
plugins/ops-simd/README.md), and its units scale with the intra-op threads, where concurrent
BLAS calls did not.

The bias, a residual Z (FusedConv's input 3, of Y's shape) and a fused Relu are applied in the
kernel's registers, in the unfused graph's order; a fused Gelu (erf form) is the
native Gelu this path's Gelu operator runs, and FusedConv's other activations (Clip, Sigmoid,
Gelu tanh) run ops-basic's own epilogue calls afterwards, so a fused node gives the bits of the
unfused pair on the same path.  Work is split into units (image, group,
output channels, positions) fixed by the shapes and run on the plugin's own threads (as many as
the session's intra-op threads); every output's arithmetic is the same in any unit, so results
do not depend on the thread count.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, OpKernel
from graphrt_ops_basic import conv as basic_conv
from graphrt_ops_basic import fused as basic_fused
from graphrt_ops_basic._geometry import call_all

from . import _native, conv_exact
from .elementwise import native_gelu_call
from .fused import GeluTailFallback, native_gelu
from .kernels import NativeKernel, trial_infer

F32 = np.dtype(np.float32)
#: Paths whose fast mode uses the native convolution (the scalar path is for exact mode).
FAST_ISAS = frozenset({"avx2", "avx512"})
#: Fewest output channels per group worth a native micro-tile.
MIN_GROUP_CHANNELS = 8


@dataclasses.dataclass(frozen=True)
class _Plan:
    native: Any  # _native.ConvPlan
    work: int | None  # scratch index of the staged image (unit-stride kernels)
    bias: np.ndarray | None  # a constant bias, contiguous float32
    activation: str  # in the kernel: "none" or "relu"
    epilogue: Any = None  # FusedConv's numpy epilogue (Clip, Sigmoid, Gelu tanh), else None
    gelu: bool = False  # FusedConv's Gelu (erf form): the native Gelu, after the product
    residual: bool = False  # FusedConv's Z (input 3), summed in the kernel before the activation
    geometry: Any = None  # ops-basic's plan: another native kernel's plan is made from it


@dataclasses.dataclass(frozen=True)
class _DepthwisePlan:
    """Fast mode's native depthwise convolution (group = channels, one weight plane each)."""

    weight: np.ndarray  # (C, 1, kh, kw), contiguous float32
    bias: np.ndarray | None  # a constant bias, contiguous float32
    strides: tuple[int, int]
    dilations: tuple[int, int]
    pads: tuple[int, int]
    activation: str  # "none" or "relu"
    work_bytes: int  # one thread's staged plane, outside the slab


#: The widest vector of any path (floats), for sizing the depthwise kernel's staged plane.
_WIDEST = 16
#: Above this many floats of staged plane per thread the depthwise layer stays on numpy.
DEPTHWISE_MAX_WORK = 1 << 22


def depthwise_work_floats(w: Any, kernel: Sequence[int]) -> int:
    """Floats of the native depthwise kernel's per-thread buffer (src/native/dwconv_driver.inc):
    the staged rows, each split into stride phases of whole vectors plus one of slack; or, when
    the shape may put channels in the lanes (small maps, column strides), the block staged
    channels-last with its weights and outputs, if larger."""
    (sh, sw), (dh, dw), (oh, ow) = w.strides, w.dilations, w.out
    rows = (oh - 1) * sh + (kernel[0] - 1) * dh + 1
    span = (ow - 1) * sw + (kernel[1] - 1) * dw + 1
    phase_floats = -(-span // sw)
    phase = -(-phase_floats // _WIDEST) * _WIDEST + _WIDEST
    planes = rows * sw * phase + _WIDEST + 2 * kernel[0] * kernel[1]
    if (sw < 2 and ow >= 2 * _WIDEST) or rows * span * 8 > 1 << 19:
        return planes
    pixels = -(-oh * ow // 8) * 8
    return max(planes, (rows * span + kernel[0] * kernel[1] + pixels) * _WIDEST)


def planned(
    owner: OpKernel, ctx: InferContext, plan: Any, **options: Any
) -> tuple[Any, int | None]:
    """The native plan of ops-basic's Conv ``plan`` for ``owner``'s node (``options``: those of
    conv_exact.native_conv_plan) and the scratch of its bound call's work (None: it takes
    none; the Winograd kernel's transforms go to its threads' buffers).  The plan checks every
    size it derives (overflow, a bound of 2 GiB): its refusal is the node's SessionError."""
    try:
        native = conv_exact.native_conv_plan(ctx, plan, owner.isa, **options)
    except ValueError as e:
        message = str(e)
        kind = "unsupported" if message.startswith("unsupported: ") else "invalid_model"
        raise owner.fail(message.removeprefix("unsupported: "), kind) from None
    need = native.call_work_floats
    return native, ctx.add_scratch(F32, (need,)) if need else None


class Conv(NativeKernel):
    # fast mode's native plans (GEMM-blocked, depthwise), or exact mode's
    plan_type = (_Plan, _DepthwisePlan, conv_exact.ExactPlan, conv_exact.NativeExactPlan)
    #: W may be a float16/bfloat16 weight typed float32 (docs/fp16.md): the native plans pack
    #: (or copy) it as float32 from a temporary widened copy, the numpy kernel widens per run.
    half_weight_inputs = (1,)

    def fused_activation(self) -> str:
        return ""

    def infer(self, ctx: InferContext) -> None:
        trial = trial_infer(self.base, ctx)
        plan = trial.prepared
        (dtype, out_shape), *_ = trial.output_types()
        if ctx.exact:  # the native exact GEMM on im2col (conv_exact.py), else numpy's
            return conv_exact.infer(self, ctx, trial)
        if (
            self.isa not in FAST_ISAS
            or not isinstance(plan, basic_conv._Plan)
            or dtype != F32
            or any(ctx.dtype(i) != F32 for i in range(ctx.num_inputs) if ctx.has_input(i))
            or len(out_shape) != 4
            or ctx.shape(0)[1] == 0  # no input channels: B alone, ops-basic's empty sums
            or ctx.known_value(1) is None
            or (ctx.has_input(3) and ctx.shape(3) != tuple(out_shape))  # Z broadcast: numpy's
        ):
            return self.fallback(ctx)
        if out_shape[1] // plan.group < MIN_GROUP_CHANNELS:
            return self.infer_depthwise(ctx, plan, out_shape)
        ctx.set_output(0, dtype, out_shape)
        w = plan.w
        if max(*w.strides, *w.dilations, *w.begin, *w.out) >= 2**63:
            # past int64 the binding cannot even take the geometry (a TypeError, not the
            # plan's own refusal below): refused as the plan refuses what overflows
            raise self.fail(
                f"the window geometry (strides {list(w.strides)}, dilations "
                f"{list(w.dilations)}, pads {list(w.begin)}) overflows or exceeds the native bound",
                "unsupported",
            )
        native, work = planned(self, ctx, plan)
        bias = conv_exact.constant_bias(ctx)
        kind = self.fused_activation()
        epilogue, gelu = None, False
        if kind == "Gelu" and native_gelu(self.base.act, ctx.exact, dtype, self.isa):
            gelu = True  # the native Gelu this path's Gelu operator runs
        elif kind not in ("", "Relu"):
            epilogue = basic_fused.plan_epilogue(self.base, ctx, self.base.act, bias=False)
        activation = "relu" if kind == "Relu" else "none"
        residual = ctx.has_input(3)
        ctx.prepared = _Plan(native, work, bias, activation, epilogue, gelu, residual, plan)

    def infer_depthwise(self, ctx: InferContext, plan: Any, out_shape: Sequence[int]) -> None:
        """The native depthwise kernel for one channel in and out per group (a depthwise
        layer's dot products have nothing for a micro-tile to share), with a Relu fused in;
        a thin grouped convolution, a residual or another activation stays on numpy."""
        weight = ctx.known_value(1)
        kind = self.fused_activation()
        if (
            not plan.group == ctx.shape(0)[1] == out_shape[1]
            or weight.shape[1] != 1
            or ctx.has_input(3)
            or kind not in ("", "Relu")
        ):
            return self.fallback(ctx)
        w = plan.w
        work = depthwise_work_floats(w, weight.shape[2:])
        if work > DEPTHWISE_MAX_WORK:
            return self.fallback(ctx)
        ctx.set_output(0, F32, out_shape)
        ctx.prepared = _DepthwisePlan(
            np.ascontiguousarray(weight, dtype=F32),
            conv_exact.constant_bias(ctx),
            tuple(w.strides), tuple(w.dilations), tuple(w.begin),
            "relu" if kind == "Relu" else "none",
            work * F32.itemsize,
        )  # fmt: skip

    def bind_depthwise(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        p: _DepthwisePlan = ctx.prepared
        x = inputs[0]
        if x.shape[3] > 1 and x.strides[3] != 4:  # a strided view: one contiguous copy per run
            return functools.partial(_with_contiguous_inputs, self, ctx, inputs, outputs)
        bias = p.bias
        if bias is None and len(inputs) > 2 and inputs[2] is not None:
            bias = np.ascontiguousarray(inputs[2], dtype=F32)
        threads = ctx.threads
        ctx.reserve(p.work_bytes * threads, "the native depthwise work buffer (one per thread)")
        return _native.DepthwiseCall(
            x, p.weight, bias, outputs[0], p.strides, p.dilations, p.pads, p.activation,
            self.isa, threads,
        )  # fmt: skip

    def bind_native(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        if isinstance(ctx.prepared, conv_exact.ExactPlan):
            return conv_exact.bind(self, ctx, inputs, outputs)
        if isinstance(ctx.prepared, conv_exact.NativeExactPlan):
            return conv_exact.bind_native_plan(self, ctx, inputs, outputs)
        if isinstance(ctx.prepared, _DepthwisePlan):
            return self.bind_depthwise(ctx, inputs, outputs)
        p: _Plan = ctx.prepared
        x, y = inputs[0], outputs[0]
        z = inputs[3] if p.residual else None
        strided_x = x.ndim == 4 and x.shape[3] > 1 and x.strides[3] != 4
        if strided_x or (z is not None and not z.flags.c_contiguous):  # views: copy them
            return functools.partial(_with_contiguous_inputs, self, ctx, inputs, outputs)
        # the units run on the plugin's own threads (one call, no Python per unit)
        calls = [conv_exact.conv_call(ctx, p.native, p.work, p.bias, inputs, y, p.activation, z)]
        if p.epilogue is not None:
            calls += basic_fused.epilogue_calls(ctx, p.epilogue, y)
        if p.gelu:
            calls.append(native_gelu_call(y, self.isa, ctx))
        return calls[0] if len(calls) == 1 else functools.partial(call_all, calls)


class FusedConv(GeluTailFallback, Conv):
    """A FusedConv left to the numpy kernel still ends in the path's native Gelu.

    Y may be written over a residual Z that dies at the node (a ResNet block's shortcut: the
    output takes its storage, warm from the step that made it, instead of a block of its
    own) where the native plan reads each Z element before it writes that output
    (``ConvPlan.z_in_place``); the numpy kernel, exact mode and plans whose depth blocks store
    partial sums in Y decline."""

    in_place_input = 3

    def fused_activation(self) -> str:
        return self.base.act.kind

    def infer(self, ctx: InferContext) -> None:
        super().infer(ctx)
        p = ctx.prepared
        if not (isinstance(p, _Plan) and p.residual and p.native.z_in_place):
            ctx.decline_in_place()


def _with_contiguous_inputs(
    kernel: Conv, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
) -> None:
    """X (and Z) as contiguous copies for this call: the native kernel reads them in place."""
    copied = [np.ascontiguousarray(a) if i in (0, 3) else a for i, a in enumerate(inputs)]
    kernel.bind_native(ctx, copied, outputs)()
