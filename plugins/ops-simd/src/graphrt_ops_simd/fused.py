"""FusedMatMul and FusedGemm on a native path: the native GEMM with Relu in its epilogue, or
the table's kernel ending in the native Gelu (erf form); in exact mode the native exact GEMM
followed by ops-basic's exact epilogue.

ops-basic's fused kernels apply its numpy Gelu after the product; on a native path the Gelu
operator runs the native kernel (:class:`.elementwise.Gelu`), so the fused node would no longer
give the bits of the MatMul/Gemm + Gelu pair it replaces.  Here the fused node keeps ops-basic's
product and bias and ends in that same native Gelu.  In exact mode the native exact product has
ops-basic's exact product's bits, so ops-basic's epilogue calls (bias, exact Relu or Sigmoid, the
NaN rewrite) after it give the table kernel's bits: a BERT encoder's 24 fused products had run
numpy's exact product, 17x fast mode's time.  Any other activation or dtype is the table's
kernel unchanged.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext
from graphrt_ops_basic._geometry import call_all
from graphrt_ops_basic.fused import Activation, epilogue_calls, plan_epilogue

from .elementwise import FAST_NATIVE, native_gelu_call
from .kernels import Gemm, MatMul, NativeKernel, Plan

F32 = np.dtype(np.float32)


@dataclasses.dataclass(frozen=True)
class GeluTail:
    inner: Any  # the numpy kernel's plan, its epilogue without the Gelu


def native_gelu(act: Activation, exact: bool, dtype: np.dtype, isa: str) -> bool:
    """Whether a fused activation is the Gelu that this path's Gelu operator runs natively."""
    native = "gelu" in FAST_NATIVE.get(isa, ())
    return native and not exact and act.kind == "Gelu" and not act.tanh and dtype == F32


def infer_with_native_gelu(kernel: NativeKernel, ctx: InferContext) -> None:
    """The table's fused kernel plans the node; a Gelu (erf form) is cut off its epilogue and
    left to :func:`bind_gelu_tail`."""
    kernel.base.infer(ctx)
    plan = ctx.prepared
    dtype = ctx.output_types()[0][0]
    if native_gelu(kernel.base.act, ctx.exact, dtype, kernel.isa):
        e = dataclasses.replace(plan.epilogue, act=Activation(""), gelu=None)
        ctx.prepared = GeluTail(dataclasses.replace(plan, epilogue=e))


def bind_gelu_tail(
    kernel: NativeKernel, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
) -> Callable[[], None]:
    """The table's kernel (product, bias) on its own plan, then the native Gelu in place."""
    inner = copy.copy(ctx)
    inner.prepared = ctx.prepared.inner
    product = kernel.base.bind(inner, inputs, outputs)
    return functools.partial(call_all, [product, native_gelu_call(outputs[0], kernel.isa, ctx)])


def plan_exact_epilogue(kernel: NativeKernel, ctx: InferContext, bias: bool) -> None:
    """After MatMul's or Gemm's ``infer`` in exact mode: a native plan gets ops-basic's fused
    epilogue (its scratch in this plan); a fallback is the table's whole fused kernel already."""
    plan = ctx.prepared
    if isinstance(plan, Plan):
        fused = plan_epilogue(kernel.base, ctx, kernel.base.act, bias=bias)
        ctx.prepared = dataclasses.replace(plan, fused=fused)


def exact_epilogue_calls(
    ctx: KernelContext, p: Plan, inputs: Sequence[Any], y: np.ndarray
) -> list[Callable[[], Any]]:
    """ops-basic's epilogue calls of an exact native plan (none for any other plan)."""
    if p.fused is None:
        return []
    return epilogue_calls(ctx, p.fused, y, inputs[2] if p.fused.bias else None)


class GeluTailFallback:
    """For a native fused kernel: where it falls back to the table's kernel, that kernel still
    ends in the path's native Gelu (:func:`infer_with_native_gelu`)."""

    def fallback(self, ctx: InferContext) -> None:
        infer_with_native_gelu(self, ctx)

    def bind(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        if isinstance(ctx.prepared, GeluTail):
            return bind_gelu_tail(self, ctx, inputs, outputs)
        return super().bind(ctx, inputs, outputs)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        self.bind(ctx, inputs, outputs)()


class FusedMatMul(GeluTailFallback, MatMul):
    """FusedMatMul on the native GEMM where MatMul would take it, with a constant per-column
    bias and Relu in the GEMM's epilogue (after the whole sum: the same single add and the
    same maximum as the unfused Add and Relu) and a Gelu as the native Gelu after it; other
    biases and activations are the table's kernel with the native Gelu tail.  Exact mode: the
    native exact product, then ops-basic's epilogue (any bias that broadcasts)."""

    def infer(self, ctx: InferContext) -> None:
        act = self.base.act
        if ctx.exact:
            super().infer(ctx)
            return plan_exact_epilogue(self, ctx, bias=ctx.has_input(2))
        bias = ctx.known_value(2) if ctx.has_input(2) else None
        n = ctx.shape(1)[-1] if len(ctx.shape(1)) == 2 else None
        per_column = not ctx.has_input(2) or (
            bias is not None and n is not None and bias.size == n and bias.shape[-1] == n
        )
        gelu = native_gelu(act, ctx.exact, ctx.dtype(0), self.isa)
        if ctx.exact or not per_column or not (act.kind in ("", "Relu") or gelu):
            return self.fallback(ctx)
        super().infer(ctx)
        plan = ctx.prepared
        if isinstance(plan, Plan):
            vector = None if bias is None else np.ascontiguousarray(bias.reshape(-1), dtype=F32)
            ctx.prepared = dataclasses.replace(
                plan,
                bias=vector,
                bias_axis="col",
                activation="relu" if act.kind == "Relu" else "none",
                gelu=gelu,
            )

    def epilogue(
        self, ctx: KernelContext, p: Plan, inputs: Sequence[Any], y: np.ndarray
    ) -> list[Callable[[], Any]]:
        if p.gelu:
            return [native_gelu_call(y, self.isa, ctx)]
        return exact_epilogue_calls(ctx, p, inputs, y)


class FusedGemm(GeluTailFallback, Gemm):
    """FusedGemm on the native GEMM where Gemm would take it, with C as the epilogue's bias
    vector and Relu after it (the same single add and the same maximum, NaN kept, as the
    unfused Gemm and Relu on this path); a C the epilogue cannot hold and other activations
    are the table's kernel, with the native Gelu tail where there is a Gelu.  A batch-1 MLP's
    layers are then one native call each instead of three numpy calls.  Exact mode: Gemm's
    exact native product and epilogue, then ops-basic's fused activation."""

    def infer(self, ctx: InferContext) -> None:
        act = self.base.act
        if ctx.exact:
            super().infer(ctx)
            return plan_exact_epilogue(self, ctx, bias=False)  # C is Gemm's own
        if act.kind not in ("", "Relu"):
            return self.fallback(ctx)
        super().infer(ctx)
        plan = ctx.prepared
        if not isinstance(plan, Plan):
            return None  # the table's kernel (Gemm.infer fell back)
        if ctx.has_input(2) and not plan.c_in_epilogue:
            return self.fallback(ctx)  # C added after the product would follow the Relu
        ctx.prepared = dataclasses.replace(
            plan, activation="relu" if act.kind == "Relu" else "none"
        )
        return None

    def epilogue(
        self, ctx: KernelContext, p: Plan, inputs: Sequence[Any], y: np.ndarray
    ) -> list[Callable[[], Any]]:
        return [*super().epilogue(ctx, p, inputs, y), *exact_epilogue_calls(ctx, p, inputs, y)]
