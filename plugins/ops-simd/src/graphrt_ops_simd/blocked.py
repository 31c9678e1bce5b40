"""The blocked layout (``com.graphrt``): convolutions, MaxPool and GlobalAveragePool on values
kept as blocks of channels, written by the blocked_layout pass (:mod:`.layout`).

A blocked value of a logical (N, C, H, W) tensor is a float32 array (N, ceil(C / B), H, W, B):
channel c at block c // B, lane c % B, B the kernel path's vector of channels (avx512: 16).
The lanes convolution keeps a vector of output channels per position in its registers; planes
make it transpose every tile on the way out, blocks store them as they are, and the next
convolution broadcasts its taps from them (src/native/conv_blocked.inc).  The lanes past C in
a last partial block are padding that no kernel reads as a channel.

* ``BlockedConv``: FusedConv's X, W, B and attributes (no residual Z; no activation or Relu),
  plus ``block`` (B) and ``x_blocked`` (X blocked, else planes); Y blocked.
* ``BlockedMaxPool``: MaxPool's attributes plus ``block``; X and Y blocked (one output).
* ``BlockedGlobalAveragePool``: ``block`` and ``channels`` (C); X blocked, Y (N, C, 1, 1).
* ``FromBlocked``: ``block`` and ``channels``; X blocked, Y its planes (N, C, H, W).

The table's kernels here are numpy's: the planar kernels of ops-basic on a planar copy, so
every result is the planar operator's (exact mode included).  A native path's kernels
(``Native*``) run the blocks themselves in fast mode and otherwise fall back to these.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel
from graphrt_ops_basic import fused as basic_fused
from graphrt_ops_basic import pool as basic_pool
from graphrt_ops_basic._geometry import call_all

from . import _native, conv, conv_exact
from .kernels import NativeKernel, trial_infer

GRAPHRT = "com.graphrt"
F32 = np.dtype(np.float32)
#: The attributes the blocked operators add to the planar operator's own.
LAYOUT_ATTRS = ("block", "x_blocked", "channels")
#: Paths whose fast mode runs the blocked kernels natively (the lanes convolution's paths).
NATIVE_ISAS = frozenset({"avx2", "avx512"})


def blocked_shape(shape: Sequence[int], block: int) -> tuple[int, ...]:
    """The blocked array's shape of a planar (N, C, H, W) shape."""
    n, c, *spatial = shape
    return (n, -(-c // block), *spatial, block)


def unblock_into(xb: np.ndarray, out: np.ndarray) -> None:
    """A blocked array's first ``out.shape[1]`` channels into planar ``out``."""
    n, _, h, w, b = xb.shape
    c = out.shape[1]
    full = c // b
    if full:
        planes = out[:, : full * b].reshape(n, full, b, h, w)
        np.copyto(planes, xb[:, :full].transpose(0, 1, 4, 2, 3))
    if c > full * b:
        np.copyto(out[:, full * b :], xb[:, full, :, :, : c - full * b].transpose(0, 3, 1, 2))


def block_into(x: np.ndarray, out: np.ndarray) -> None:
    """Planar ``x`` into blocked ``out``, a last block's padding lanes zero."""
    n, c, h, w = x.shape
    b = out.shape[-1]
    full = c // b
    if full:
        planes = x[:, : full * b].reshape(n, full, b, h, w)
        np.copyto(out[:, :full].transpose(0, 1, 4, 2, 3), planes)
    if c > full * b:
        np.copyto(out[:, full, :, :, : c - full * b].transpose(0, 3, 1, 2), x[:, full * b :])
        out[:, full, :, :, c - full * b :] = 0


def _planar_node(node: NodeInfo, op_type: str, domain: str) -> NodeInfo:
    attrs = {k: v for k, v in node.attrs.items() if k not in LAYOUT_ATTRS}
    return dataclasses.replace(node, op_type=op_type, domain=domain, attrs=attrs, proto=None)


def _positive_attr(kernel: OpKernel, name: str) -> int:
    value = kernel.node.attr(name)
    if not isinstance(value, int) or value < 1:
        raise kernel.fail(f"attribute {name} must be a positive integer, got {value!r}")
    return value


def _check_blocked(kernel: OpKernel, shape: Sequence[int], block: int, what: str = "X") -> None:
    if len(shape) != 5 or shape[-1] != block:
        raise kernel.fail(
            f"{what} must be blocked (N, ceil(C / {block}), H, W, {block}), got {list(shape)}",
            "invalid_input",
        )


def _check_channels(kernel: OpKernel, shape: Sequence[int], channels: int, block: int) -> None:
    if shape[1] != -(-channels // block):
        raise kernel.fail(
            f"X {list(shape)} does not hold {channels} channels in blocks of {block}",
            "invalid_input",
        )


@dataclasses.dataclass(frozen=True)
class _Planar:
    """A table kernel's plan: the planar kernel's, on planar copies in scratch."""

    inner: Any  # the planar kernel's ctx.prepared
    inner_scratch: tuple[int, int]  # its scratch: indices [first, end) of this node's
    x: int | None  # planar X (scratch), None where X already is planar
    y: int | None  # planar Y (scratch), None where Y is planar


class _OnPlanes(OpKernel):
    """A blocked operator as its planar kernel ``inner`` between planar copies."""

    supports_exact = True
    inner: OpKernel

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.block = _positive_attr(self, "block")

    def planar_input(self, ctx: InferContext) -> tuple[tuple[int, ...], bool]:
        """X's planar shape and whether X is blocked."""
        raise NotImplementedError

    def planar_output(self, shape: Sequence[int]) -> tuple[tuple[int, ...], bool]:
        """Y's shape from the planar kernel's, and whether Y is blocked."""
        raise NotImplementedError

    def infer(self, ctx: InferContext) -> None:
        x_shape, x_blocked = self.planar_input(ctx)
        n = ctx.num_inputs
        planar = InferContext(
            [ctx.dtype(i) for i in range(n)],
            [x_shape, *(ctx.shape(i) for i in range(1, n))],
            [None, *(ctx.known_value(i) for i in range(1, n))],
            1,
            exact=ctx.exact,
        )
        self.inner.infer(planar)
        dtype, shape = planar.output_types()[0]
        y_shape, y_blocked = self.planar_output(shape)
        first = len(ctx.scratch)
        for scratch_dtype, scratch_shape in planar.scratch:
            ctx.add_scratch(scratch_dtype, scratch_shape)
        end = len(ctx.scratch)
        x = ctx.add_scratch(ctx.dtype(0), x_shape) if x_blocked else None
        y = ctx.add_scratch(dtype, shape) if y_blocked else None
        ctx.set_output(0, dtype, y_shape)
        ctx.prepared = _Planar(planar.prepared, (first, end), x, y)

    def bind(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        p: _Planar = ctx.prepared
        inner_ctx = copy.copy(ctx)
        inner_ctx.prepared = p.inner
        inner_ctx.scratch = ctx.scratch[p.inner_scratch[0] : p.inner_scratch[1]]
        calls = []
        x = inputs[0]
        if p.x is not None:
            x = ctx.scratch[p.x]
            calls.append(functools.partial(unblock_into, inputs[0], x))
        y = outputs[0] if p.y is None else ctx.scratch[p.y]
        calls.append(self.inner.bind(inner_ctx, [x, *inputs[1:]], [y]))
        if p.y is not None:
            calls.append(functools.partial(block_into, y, outputs[0]))
        return functools.partial(call_all, calls)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        self.bind(ctx, inputs, outputs)()


class _ToBlocks(_OnPlanes):
    """An operator writing blocks."""

    def planar_output(self, shape: Sequence[int]) -> tuple[tuple[int, ...], bool]:
        return blocked_shape(shape, self.block), True


class BlockedConv(_ToBlocks):
    """FusedConv (X, W, B; no activation or Relu) from planar or blocked X to blocked Y."""

    half_weight_inputs = (1,)

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.x_blocked = bool(node.attr("x_blocked", 0))
        if len(node.inputs) > 3 and node.inputs[3]:
            raise self.fail("BlockedConv takes X, W and B (no residual Z)")
        self.inner = basic_fused.FusedConv(_planar_node(node, "FusedConv", GRAPHRT))
        if self.inner.act.kind not in ("", "Relu"):
            raise self.fail(f"BlockedConv's activation is none or Relu, got {self.inner.act.kind}")

    def planar_input(self, ctx: InferContext) -> tuple[tuple[int, ...], bool]:
        shape = tuple(ctx.shape(0))
        if not self.x_blocked:
            return shape, False
        _check_blocked(self, shape, self.block)
        w = ctx.shape(1)
        if len(w) != 4:
            raise self.fail(f"W must be (M, C / group, kh, kw), got {list(w)}", "invalid_input")
        channels = w[1] * self.inner.group
        _check_channels(self, shape, channels, self.block)
        return (shape[0], channels, *shape[2:4]), True


class BlockedMaxPool(_ToBlocks):
    """MaxPool (one output) from blocked X to blocked Y: the padding lanes pooled as channels."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        if any(node.outputs[1:]):
            raise self.fail("BlockedMaxPool has one output (no Indices)")
        self.inner = basic_pool.MaxPool(_planar_node(node, "MaxPool", ""))

    def planar_input(self, ctx: InferContext) -> tuple[tuple[int, ...], bool]:
        shape = tuple(ctx.shape(0))
        _check_blocked(self, shape, self.block)
        return (shape[0], shape[1] * self.block, *shape[2:4]), True


class _FromBlocks(_OnPlanes):
    """An operator reading a blocked X of ``channels`` channels and writing planes."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.channels = _positive_attr(self, "channels")

    def planar_input(self, ctx: InferContext) -> tuple[tuple[int, ...], bool]:
        shape = tuple(ctx.shape(0))
        _check_blocked(self, shape, self.block)
        _check_channels(self, shape, self.channels, self.block)
        return (shape[0], self.channels, *shape[2:4]), True

    def planar_output(self, shape: Sequence[int]) -> tuple[tuple[int, ...], bool]:
        return tuple(shape), False


class BlockedGlobalAveragePool(_FromBlocks):
    """GlobalAveragePool of a blocked X into planar (N, C, 1, 1)."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.inner = basic_pool.GlobalAveragePool(_planar_node(node, "GlobalAveragePool", ""))


class FromBlocked(_FromBlocks):
    """A blocked X's planes (N, C, H, W): the copy alone, no planar kernel."""

    def infer(self, ctx: InferContext) -> None:
        shape, _ = self.planar_input(ctx)
        ctx.set_output(0, ctx.dtype(0), shape)

    def bind(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        return functools.partial(unblock_into, inputs[0], outputs[0])


# -- the native path's kernels ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _PoolPlan:
    w: Any  # ops-basic's Window of the MaxPool (its pads before each axis: ``begin``)


@dataclasses.dataclass(frozen=True)
class _CopyPlan:
    pass


def _native_block(kernel: NativeKernel, ctx: InferContext) -> bool:
    """Whether the path's native kernel serves the node: fast mode, float32, this path's B."""
    return (
        not ctx.exact
        and kernel.isa in NATIVE_ISAS
        and kernel.base.block == _native.blocked_block(kernel.isa)
        and all(ctx.dtype(i) == F32 for i in range(ctx.num_inputs) if ctx.has_input(i))
    )


class _NativeBlocked(NativeKernel):
    """A native blocked kernel's step: ``call`` on X as it lies, or on a contiguous copy of X
    made per call where X is a strided view (a blocked value is its producer's own array)."""

    def bind_native(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        if not inputs[0].flags.c_contiguous:
            return functools.partial(_with_contiguous_x, self, ctx, inputs, outputs)
        return self.call(ctx, inputs, outputs)

    def call(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        raise NotImplementedError


class NativeBlockedConv(_NativeBlocked):
    plan_type = conv._Plan  # (a plan with a blocked output: no epilogue, Gelu or residual)
    half_weight_inputs = (1,)

    def infer(self, ctx: InferContext) -> None:
        trial = trial_infer(self.base, ctx)
        conv_plan = trial.prepared.inner  # ops-basic's FusedConv plan
        w = getattr(conv_plan, "w", None)
        (dtype, out_shape), *_ = trial.output_types()
        weight = ctx.known_value(1)
        if (
            not _native_block(self, ctx)
            or weight is None
            or w is None
            or conv_plan.group != 1
            or len(w.out) != 2
            or dtype != F32
        ):
            return self.fallback(ctx)
        x = ctx.shape(0)
        native, work = conv.planned(
            self, ctx, conv_plan, kernel="lanes", x_shape=[x[0], weight.shape[1], x[2], x[3]],
            x_block=self.base.block if self.base.x_blocked else 0, y_blocked=True,
        )  # fmt: skip
        bias = conv_exact.constant_bias(ctx)
        ctx.set_output(0, dtype, out_shape)
        relu = self.base.inner.act.kind == "Relu"
        ctx.prepared = conv._Plan(native, work, bias, "relu" if relu else "none")

    def call(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        p: conv._Plan = ctx.prepared
        bias, work = conv_exact.call_arrays(ctx, p.work, p.bias, inputs)
        return _native.BlockedConvCall(
            p.native, inputs[0], work, outputs[0], bias, p.activation, ctx.threads
        )


class NativeBlockedMaxPool(_NativeBlocked):
    plan_type = _PoolPlan

    def infer(self, ctx: InferContext) -> None:
        trial = trial_infer(self.base, ctx)
        w = getattr(trial.prepared.inner, "w", None)
        if not _native_block(self, ctx) or w is None or len(w.kernel) != 2:
            return self.fallback(ctx)
        ctx.set_output(0, *trial.output_types()[0])
        ctx.prepared = _PoolPlan(w)

    def call(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        w = ctx.prepared.w
        return _native.BlockedMaxPoolCall(
            inputs[0], outputs[0], list(w.kernel), list(w.strides), list(w.dilations),
            list(w.begin), self.isa, ctx.threads,
        )  # fmt: skip


class _NativeFromBlocks(_NativeBlocked):
    plan_type = _CopyPlan
    native_call: str  # its name in _native

    def infer(self, ctx: InferContext) -> None:
        trial = trial_infer(self.base, ctx)
        if not _native_block(self, ctx):
            return self.fallback(ctx)
        ctx.set_output(0, *trial.output_types()[0])
        ctx.prepared = _CopyPlan()

    def call(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        return getattr(_native, self.native_call)(inputs[0], outputs[0], self.isa, ctx.threads)


class NativeBlockedGlobalAveragePool(_NativeFromBlocks):
    native_call = "BlockedMeanCall"


class NativeFromBlocked(_NativeFromBlocks):
    native_call = "FromBlockedCall"


def _with_contiguous_x(
    kernel: NativeKernel, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
) -> None:
    """A native step on a contiguous copy of X, made per call (X a strided view)."""
    kernel.bind_native(ctx, [np.ascontiguousarray(inputs[0]), *inputs[1:]], outputs)()
