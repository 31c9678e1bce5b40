"""FusedMatMul and FusedGemm ending in Gelu (erf form) on a native path.

ops-basic's fused kernels apply its numpy Gelu after the product; on a native path the Gelu
operator runs the native kernel (:class:`.elementwise.Gelu`), so the fused node would no longer
give the bits of the MatMul/Gemm + Gelu pair it replaces.  Here the fused node keeps ops-basic's
product and bias and ends in that same native Gelu.  Any other activation, dtype or mode is the
table's kernel unchanged.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.kernel import InferContext, KernelContext
from graphrt_ops_basic.fused import Activation

from .elementwise import FAST_NATIVE, native_gelu_call
from .kernels import NativeKernel

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
    return functools.partial(_both, product, native_gelu_call(outputs[0], kernel.isa, ctx))


class FusedProduct(NativeKernel):
    """FusedMatMul and FusedGemm: the table's kernel, with the native Gelu at the end."""

    plan_type = GeluTail

    def infer(self, ctx: InferContext) -> None:
        infer_with_native_gelu(self, ctx)

    def bind_native(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        return bind_gelu_tail(self, ctx, inputs, outputs)


def _both(first: Callable[[], Any], second: Callable[[], Any]) -> None:
    first()
    second()
