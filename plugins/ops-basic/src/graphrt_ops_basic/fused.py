"""Fused products (``com.graphrt``): FusedConv, FusedGemm, FusedMatMul.

Each is its product's kernel (a subclass of :class:`.conv.Conv`, :class:`.matmul.Gemm` or
:class:`.matmul.MatMul`: the same ``infer`` and the same numpy calls) followed by an epilogue
applied in place on the output: FusedMatMul's bias (input 2, broadcast over the output), then
the activation named by the ``activation`` attribute:

* ``Relu``; ``Clip`` with ``activation_params = [min, max]`` (an infinite bound is no bound);
  ``Sigmoid``; ``Gelu`` (``approximate`` "none" or "tanh", as ai.onnx Gelu);
* absent or empty: none (FusedMatMul with a bias only).

The epilogue is the very calls the unfused nodes make (the same ufuncs, the same operands, in
the same order), so a fused node computes the same bits as the graph it replaces: what it saves
is the intermediate tensors and one pass over memory per fused node.  In exact mode a FusedGemm
or FusedMatMul follows the exact product, then the exact Relu or the exact Sigmoid
(``_exact_math.sigmoid_into``, as the Sigmoid operator runs it, in place; NaN rewritten once,
at the end); Clip and Gelu are not exact; a FusedConv follows the exact Conv (conv_exact.py)
the same way.

FusedBatchNormalization (inference BatchNormalization, then the activation) is the same idea
for a batch norm no Conv could absorb (DenseNet's Concat -> BatchNormalization -> Relu): the
BatchNormalization's own calls, then the epilogue in place on Y.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._exact_math import sigmoid_into as exact_sigmoid_into
from ._geometry import call_all
from ._util import is_float, needs_nan_rewrite, rewrite_nan, zero_of, zeros_like_shape
from .activation import clip_bound, clip_into
from .conv import Conv
from .gelu import GeluPlan, gelu_call, gelu_plan, parse_approximate
from .matmul import Gemm, MatMul
from .norm import BatchNormalization, _BatchPlan
from .unary import ExactPlan, plan_exact, run_exact, sigmoid_into

ACTIVATIONS = ("", "Relu", "Clip", "Sigmoid", "Gelu")
#: Activations whose fused form is exact (docs/exact-mode.md): none, Relu and Sigmoid.
EXACT_ACTIVATIONS = ("", "Relu", "Sigmoid")


@dataclasses.dataclass(frozen=True)
class Activation:
    """What a fused node's attributes say to apply after the product."""

    kind: str
    low: float | None = None  # Clip
    high: float | None = None
    tanh: bool = False  # Gelu's approximate="tanh"

    @classmethod
    def parse(cls, kernel: OpKernel) -> Activation:
        node = kernel.node
        kind = node.attr("activation", "") or ""
        if kind not in ACTIVATIONS:
            raise kernel.fail(f"activation must be one of {list(ACTIVATIONS[1:])}, got {kind!r}")
        params = [float(p) for p in node.attr("activation_params", []) or []]
        if kind == "Clip":
            if len(params) != 2:
                raise kernel.fail(f"Clip needs activation_params [min, max], got {params}")
            low, high = (None if math.isinf(p) else p for p in params)
            return cls(kind, low, high)
        if params:
            raise kernel.fail(f"{kind or 'no activation'} takes no activation_params")
        tanh = kind == "Gelu" and parse_approximate(kernel, node.attr("approximate", "none"))
        return cls(kind, tanh=tanh)


@dataclasses.dataclass(frozen=True)
class Residual:
    """FusedConv's Z: the other operand of the residual Add it replaced, in that Add's order."""

    z_first: bool  # Add(Z, conv) rather than Add(conv, Z)
    grown: int | None  # scratch: the product, when Z broadcasts it to a larger Y

    def add(self, product: np.ndarray, z: np.ndarray, out: np.ndarray) -> Callable[[], Any]:
        """The Add's own call: the same operands in the same order."""
        pair = (z, product) if self.z_first else (product, z)
        return functools.partial(np.add, *pair, out=out)


@dataclasses.dataclass(frozen=True)
class Epilogue:
    """Per-plan data of the epilogue: bounds in Y's type, scratch indices."""

    act: Activation
    bias: bool
    low: np.ndarray | None
    high: np.ndarray | None
    sigmoid: tuple[int, int] | None
    gelu: GeluPlan | None
    nan_mask: int | None
    residual: Residual | None = None
    exact_sigmoid: ExactPlan | None = None  # exact mode's Sigmoid: the Sigmoid operator's plan


def plan_epilogue(
    kernel: OpKernel,
    ctx: InferContext,
    act: Activation,
    bias: bool,
    residual: Residual | None = None,
) -> Epilogue:
    """Called at the end of ``infer`` (Y's type and shape are set; ``ctx.prepared`` is kept)."""
    dtype, shape = ctx.output_types()[0]
    if ctx.exact and act.kind not in EXACT_ACTIVATIONS:
        raise kernel.fail(
            f"exact mode is not available for the fused {act.kind}", "exact_mode_unavailable"
        )
    if act.kind and not is_float(dtype):
        raise kernel.fail(f"{act.kind} needs a float output, got {dtype}", "invalid_input")
    kept = ctx.prepared
    nan_mask = ctx.prepared if needs_nan_rewrite(ctx, dtype, shape) else None
    ctx.prepared = kept
    sigmoid = exact_sigmoid = None
    if act.kind == "Sigmoid" and ctx.exact:
        exact_sigmoid = plan_exact(ctx, dtype, math.prod(shape), extra=1)
    elif act.kind == "Sigmoid":
        sigmoid = (ctx.add_scratch(dtype, shape), ctx.add_scratch(dtype, shape))
    gelu = gelu_plan(ctx, shape, dtype, act.tanh) if act.kind == "Gelu" else None
    low = clip_bound(dtype, act.low) if act.kind == "Clip" else None
    high = clip_bound(dtype, act.high) if act.kind == "Clip" else None
    return Epilogue(act, bias, low, high, sigmoid, gelu, nan_mask, residual, exact_sigmoid)


def epilogue_calls(
    ctx: KernelContext,
    e: Epilogue,
    y: np.ndarray,
    bias: np.ndarray | None = None,
    z: np.ndarray | None = None,
) -> list[Callable[[], Any]]:
    """The epilogue's numpy calls on Y, in place (Z: the residual, when ``e.residual``)."""
    calls: list[Callable[[], Any]] = []
    if e.bias:
        calls.append(functools.partial(np.add, y, bias, out=y))
    if e.residual is not None:
        calls.append(e.residual.add(y, z, y))
    kind = e.act.kind
    if kind == "Relu":
        if ctx.exact:  # unary.Relu in exact mode: max, then + 0 turns -0 into +0
            zero = zero_of(y.dtype)
            calls.append(functools.partial(np.maximum, y, zero, out=y))
            calls.append(functools.partial(np.add, y, zero, out=y))
        else:  # unary.Relu.bind
            zeros = zeros_like_shape(y.dtype, y.shape)
            calls.append(functools.partial(np.maximum, y, zeros, out=y))
    elif kind == "Clip":
        calls.append(functools.partial(clip_into, y, e.low, e.high, y))
    elif kind == "Sigmoid" and e.exact_sigmoid is not None:
        calls.append(functools.partial(run_exact, ctx, e.exact_sigmoid, exact_sigmoid_into, y, y))
    elif kind == "Sigmoid":
        e_buf, num = (ctx.scratch[i] for i in e.sigmoid)
        calls.append(functools.partial(sigmoid_into, y, y, e_buf, num))
    elif kind == "Gelu":
        calls.append(gelu_call(ctx, e.gelu, y, y))
    if ctx.exact and e.nan_mask is not None:
        calls.append(functools.partial(rewrite_nan, y, ctx.scratch[e.nan_mask]))
    return calls


class FusedConv(Conv):
    """Conv (X, W, B), plus Z (input 3: a residual, added as the Add it replaced did, in that
    Add's operand order: attribute ``z_first``), then the activation, in place on Y."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.act = Activation.parse(self)
        self.z_first = bool(node.attr("z_first", 0))

    def infer(self, ctx: InferContext) -> None:
        super().infer(ctx)
        residual = self._residual(ctx) if ctx.has_input(3) else None
        epilogue = plan_epilogue(self, ctx, self.act, bias=False, residual=residual)
        ctx.prepared = dataclasses.replace(ctx.prepared, epilogue=epilogue)

    def _residual(self, ctx: InferContext) -> Residual:
        """Z's plan; a Z that broadcasts the product to a larger shape makes that Y's shape
        (the Add's output), the product going to scratch first."""
        dtype, shape = ctx.output_types()[0]
        if ctx.dtype(3) != dtype:
            raise self.fail(f"Z must be {dtype} like Y, got {ctx.dtype(3)}", "invalid_input")
        try:
            out = np.broadcast_shapes(tuple(shape), tuple(ctx.shape(3)))
        except ValueError:
            message = f"Z of shape {list(ctx.shape(3))} does not broadcast with Y {list(shape)}"
            raise self.fail(message, "invalid_input") from None
        grown = None
        if out != tuple(shape):
            grown = ctx.add_scratch(dtype, shape)
            ctx.set_output(0, dtype, out)
        return Residual(self.z_first, grown)

    def program(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        e: Epilogue = ctx.prepared.epilogue
        y = outputs[0]
        z = inputs[3] if e.residual is not None else None
        if e.residual is None or e.residual.grown is None:
            product = super().program(ctx, inputs, outputs)
            return functools.partial(call_all, [product, *epilogue_calls(ctx, e, y, z=z)])
        conv = ctx.scratch[e.residual.grown]
        product = super().program(ctx, inputs, [conv])
        tail = epilogue_calls(ctx, dataclasses.replace(e, residual=None), y)
        return functools.partial(call_all, [product, e.residual.add(conv, z, y), *tail])


class _FusedProduct:
    """The shared ``run``/``bind`` of FusedGemm and FusedMatMul: the product's own ``run``,
    then the epilogue (``ctx.prepared.epilogue``)."""

    def _fused_calls(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> list[Callable[[], Any]]:
        e: Epilogue = ctx.prepared.epilogue
        bias = inputs[2] if e.bias else None
        bound = getattr(super(), "product_call", None)  # Gemm's: its calls bound once
        if bound is not None:
            product = bound(ctx, inputs, outputs)
        else:
            product = functools.partial(super().run, ctx, inputs, outputs)  # type: ignore[misc]
        return [product, *epilogue_calls(ctx, e, outputs[0], bias)]

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        call_all(self._fused_calls(ctx, inputs, outputs))

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        return functools.partial(call_all, self._fused_calls(ctx, inputs, outputs))


class FusedGemm(_FusedProduct, Gemm):
    """Gemm (A, B, C; alpha, beta, transA, transB, with opset 13's broadcasting C) then the
    activation, in place on Y."""

    def __init__(self, node: NodeInfo) -> None:
        # Gemm reads ``node.opset`` for the legacy broadcast attribute; a fused Gemm always
        # broadcasts C the way Gemm does from opset 7 on, whatever its domain's version.
        super().__init__(dataclasses.replace(node, opset=max(node.opset, 13)))
        self.act = Activation.parse(self)

    def infer(self, ctx: InferContext) -> None:
        super().infer(ctx)
        epilogue = plan_epilogue(self, ctx, self.act, bias=False)
        ctx.prepared = dataclasses.replace(ctx.prepared, epilogue=epilogue)


class FusedMatMul(_FusedProduct, MatMul):
    """MatMul (A, B), plus an optional bias (input 2) that broadcasts to the product without
    changing its shape, then the activation, in place on Y."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.act = Activation.parse(self)

    def infer(self, ctx: InferContext) -> None:
        super().infer(ctx)
        bias = ctx.has_input(2)
        if bias:
            dtype, shape = ctx.output_types()[0]
            if ctx.dtype(2) != dtype:
                raise self.fail(f"bias must be {dtype}, got {ctx.dtype(2)}")
            try:
                fits = np.broadcast_shapes(shape, ctx.shape(2)) == shape
            except ValueError:
                fits = False
            if not fits:
                raise self.fail(
                    f"bias of shape {list(ctx.shape(2))} does not broadcast to {list(shape)}",
                    "invalid_input",
                )
        epilogue = plan_epilogue(self, ctx, self.act, bias=bias)
        ctx.prepared = dataclasses.replace(ctx.prepared, epilogue=epilogue)


@dataclasses.dataclass(frozen=True)
class FusedBatchPlan(_BatchPlan):
    """BatchNormalization's plan and the epilogue that follows it."""

    epilogue: Epilogue | None = None


class FusedBatchNormalization(BatchNormalization):
    """Inference BatchNormalization (X, scale, B, mean, var; ``epsilon``) then the activation,
    in place on Y (fusion/bn_relu.py writes it for a BatchNormalization -> Relu)."""

    def __init__(self, node: NodeInfo) -> None:
        # inference whatever the domain's version: the legacy is_test/spatial rules do not apply
        super().__init__(dataclasses.replace(node, opset=max(node.opset, 15)))
        self.act = Activation.parse(self)
        if self.training or any(node.outputs[1:]):
            raise self.fail(
                "FusedBatchNormalization is inference only: training_mode=0, one output"
            )

    def infer(self, ctx: InferContext) -> None:
        super().infer(ctx)
        plan: _BatchPlan = ctx.prepared
        epilogue = plan_epilogue(self, ctx, self.act, bias=False)
        fields = {f.name: getattr(plan, f.name) for f in dataclasses.fields(plan)}
        ctx.prepared = FusedBatchPlan(**fields, epilogue=epilogue)

    def calls(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> list[Callable[[], Any]]:
        p: FusedBatchPlan = ctx.prepared
        return super().calls(ctx, inputs, outputs) + epilogue_calls(ctx, p.epilogue, outputs[0])
