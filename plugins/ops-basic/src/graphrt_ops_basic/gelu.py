"""Gelu: x * Phi(x), the ai.onnx operator of opset 20 and graphrt's own ``com.graphrt.Gelu``.

``approximate="none"`` (the default) is 0.5 * x * (1 + erf(x / sqrt(2))) with our erf
(:mod:`._erf`); ``"tanh"`` is 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))).  One pass
over blocks of the flattened tensor (:class:`.unary.ErfPlan`), each block finished while it is
in cache: the argument, erf in place, then ``(erf + 1) * x * 0.5`` into the output.  float16
and bfloat16 compute in float32 and round once.  The fusion pass ``fuse_gelu`` turns the
primitive graph into this operator; as the kernel multiplies by 1/sqrt(2) where a model may
divide by sqrt(2), and associates the products its own way, the pass does not claim to preserve
bits.  Not exact (erf and tanh are ours or numpy's, not canonical).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._erf import compute_dtype, erf_into
from ._util import constant, is_float
from .unary import ErfPlan, block_count, for_blocks

INV_SQRT2 = 0.70710678118654752440
SQRT_2_OVER_PI = 0.79788456080286535588
TANH_CUBIC = 0.044715


@dataclasses.dataclass(frozen=True)
class GeluPlan:
    tanh: bool
    blocks: int
    erf: ErfPlan | None  # erf's scratch (the erf form)
    arg: int  # scratch (n,), compute type: the argument, then the result before rounding
    xc: int | None  # scratch (n,), compute type: x converted, when x's type is narrower


def gelu_plan(ctx: InferContext, shape: Sequence[int], dtype: np.dtype, tanh: bool) -> GeluPlan:
    """Ask for the scratch a Gelu over a tensor of ``shape`` and ``dtype`` needs."""
    n, ct = math.prod(shape), compute_dtype(dtype)
    erf = None if tanh else ErfPlan.ask(ctx, n, dtype)
    xc = ctx.add_scratch(ct, (n,)) if ct != np.dtype(dtype) else None
    return GeluPlan(tanh, block_count(n), erf, ctx.add_scratch(ct, (n,)), xc)


def gelu_call(
    ctx: KernelContext, plan: GeluPlan, x: np.ndarray, out: np.ndarray
) -> Callable[[], None]:
    """One call computing out = gelu(x); ``out`` may be x's storage (each block reads its x
    before it writes its output)."""
    return functools.partial(_gelu, ctx, plan, x.reshape(-1), out.reshape(-1))


def _gelu(ctx: KernelContext, plan: GeluPlan, x: np.ndarray, out: np.ndarray) -> None:
    arg = ctx.scratch[plan.arg]
    xc = None if plan.xc is None else ctx.scratch[plan.xc]
    k = _Constants.of(arg.dtype)
    erf = plan.erf

    def block(i: int) -> None:
        s = ErfPlan.block(i)
        xs, a = x[s], arg[s]
        if xc is not None:
            np.copyto(xc[s], xs, casting="unsafe")
            xs = xc[s]
        if plan.tanh:
            np.multiply(xs, xs, out=a)
            np.multiply(a, k.cubic, out=a)
            np.add(a, k.one, out=a)
            np.multiply(a, xs, out=a)  # x + 0.044715 x^3
            np.multiply(a, k.sqrt_2_over_pi, out=a)
            np.tanh(a, out=a)
        else:
            np.multiply(xs, k.inv_sqrt2, out=a)
            erf_into(a, a, *erf.arrays(ctx, i))
        np.add(a, k.one, out=a)
        np.multiply(a, xs, out=a)
        np.multiply(a, k.half, out=out[s], casting="unsafe")

    for_blocks(ctx, plan.blocks, block)


class _Constants:
    _cache: dict[np.dtype, _Constants] = {}

    def __init__(self, dtype: np.dtype) -> None:
        self.inv_sqrt2 = constant(dtype, INV_SQRT2)
        self.sqrt_2_over_pi = constant(dtype, SQRT_2_OVER_PI)
        self.cubic = constant(dtype, TANH_CUBIC)
        self.one = constant(dtype, 1.0)
        self.half = constant(dtype, 0.5)

    @classmethod
    def of(cls, dtype: np.dtype) -> _Constants:
        found = cls._cache.get(dtype)
        if found is None:
            found = cls._cache.setdefault(dtype, cls(dtype))
        return found


def parse_approximate(kernel: OpKernel, value: Any) -> bool:
    """Gelu's ``approximate`` attribute: True for "tanh", False for "none"."""
    if value not in ("none", "tanh"):
        raise kernel.fail(f'approximate must be "none" or "tanh", got {value!r}')
    return value == "tanh"


class Gelu(OpKernel):
    """Y = Gelu(X), same type and shape; Y may take X's storage."""

    in_place_input = 0

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.tanh = parse_approximate(self, node.attr("approximate", "none"))

    def infer(self, ctx: InferContext) -> None:
        dtype, shape = ctx.dtype(0), ctx.shape(0)
        if not is_float(dtype):
            raise self.fail(f"X must be a float tensor, got {dtype}", "invalid_input")
        ctx.set_output(0, dtype, shape)
        ctx.prepared = gelu_plan(ctx, shape, dtype, self.tanh)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        gelu_call(ctx, ctx.prepared, inputs[0], outputs[0])()

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        return gelu_call(ctx, ctx.prepared, inputs[0], outputs[0])
