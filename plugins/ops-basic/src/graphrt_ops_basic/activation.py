"""Element-wise activations with attributes (LeakyRelu, Elu, Selu, HardSigmoid) and Clip.

Each is a short recipe of ufunc calls with 0-d constants of the input's type (``constant``),
reading X before it first writes ``out`` (which may be X's storage).  Elu and Selu use expm1,
which keeps the small negative values accurate where exp(x) - 1 would cancel.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.kernel import InferContext, KernelContext, NodeInfo, OpKernel

from ._util import constant


class Activation(OpKernel):
    """Same type and shape as X; a scratch array of X's shape when ``needs_scratch``."""

    in_place_input = 0
    needs_scratch = False

    def infer(self, ctx: InferContext) -> None:
        ctx.set_output(0, ctx.dtype(0), ctx.shape(0))
        if self.needs_scratch:
            ctx.prepared = ctx.add_scratch(ctx.dtype(0), ctx.shape(0))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        tmp = ctx.scratch[ctx.prepared] if self.needs_scratch else None
        self.compute(inputs[0], outputs[0], tmp)

    def compute(self, x: np.ndarray, out: np.ndarray, tmp: np.ndarray | None) -> None:
        raise NotImplementedError


class LeakyRelu(Activation):
    """x for x >= 0, alpha x below: max(x, alpha x) when alpha <= 1, else min."""

    needs_scratch = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.alpha = float(node.attr("alpha", 0.01))
        self.pick = np.maximum if self.alpha <= 1 else np.minimum

    def compute(self, x: np.ndarray, out: np.ndarray, tmp: np.ndarray | None) -> None:
        np.multiply(x, constant(x.dtype, self.alpha), out=tmp)
        self.pick(x, tmp, out=out)


class Elu(Activation):
    """x for x > 0, alpha (exp(x) - 1) otherwise, as max(x, 0) + alpha expm1(min(x, 0))."""

    needs_scratch = True
    default_alpha = 1.0
    gamma: float | None = None

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.alpha = float(node.attr("alpha", self.default_alpha))
        if self.gamma is not None:
            self.gamma = float(node.attr("gamma", self.gamma))

    def compute(self, x: np.ndarray, out: np.ndarray, tmp: np.ndarray | None) -> None:
        zero = constant(x.dtype, 0)
        np.minimum(x, zero, out=tmp)
        np.expm1(tmp, out=tmp)
        np.multiply(tmp, constant(x.dtype, self.alpha), out=tmp)
        np.maximum(x, zero, out=out)
        np.add(out, tmp, out=out)
        if self.gamma is not None:
            np.multiply(out, constant(x.dtype, self.gamma), out=out)


class Selu(Elu):
    """gamma * Elu(x) with Selu's own defaults (the float32 values of the spec)."""

    default_alpha = 1.67326319217681884765625
    gamma = 1.05070102214813232421875


class HardSigmoid(Activation):
    """max(0, min(1, alpha x + beta))."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.alpha = float(node.attr("alpha", 0.2))
        self.beta = float(node.attr("beta", 0.5))

    def compute(self, x: np.ndarray, out: np.ndarray, tmp: np.ndarray | None) -> None:
        dt = x.dtype
        np.multiply(x, constant(dt, self.alpha), out=out)
        np.add(out, constant(dt, self.beta), out=out)
        np.clip(out, constant(dt, 0), constant(dt, 1), out=out)


@dataclasses.dataclass(frozen=True)
class _Bounds:
    low: np.ndarray | None  # 0-d, X's type; None: no bound (or read from the input at run time)
    high: np.ndarray | None
    low_input: bool  # read the bound from input 1 / 2 in run (not a constant)
    high_input: bool


class Clip(OpKernel):
    """min(max(x, low), high): a low bound above the high one gives ``high`` everywhere.

    Bounds are attributes before opset 11 (absent: none; opset 6's defaults are +-FLT_MAX,
    no bound for any value) and optional scalar inputs from 11, integer types from 12.
    """

    in_place_input = 0

    def infer(self, ctx: InferContext) -> None:
        dtype = ctx.dtype(0)
        ctx.set_output(0, dtype, ctx.shape(0))
        if self.node.opset < 11:
            lo, hi = self.node.attr("min"), self.node.attr("max")
            ctx.prepared = _Bounds(clip_bound(dtype, lo), clip_bound(dtype, hi), False, False)
            return
        bounds = []
        for i in (1, 2):
            if not ctx.has_input(i):
                bounds.append((None, False))
                continue
            if ctx.dtype(i) != dtype or math.prod(ctx.shape(i)) != 1:
                raise self.fail(
                    f"input {i} must be one value of X's type, got a {ctx.dtype(i)} tensor of "
                    f"shape {list(ctx.shape(i))}",
                    "invalid_input",
                )
            value = ctx.known_value(i)
            bounds.append((None, True) if value is None else (clip_bound(dtype, value), False))
        (lo, lo_in), (hi, hi_in) = bounds
        ctx.prepared = _Bounds(lo, hi, lo_in, hi_in)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        b: _Bounds = ctx.prepared
        lo = inputs[1].reshape(()) if b.low_input else b.low
        hi = inputs[2].reshape(()) if b.high_input else b.high
        clip_into(inputs[0], lo, hi, outputs[0])

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        b: _Bounds = ctx.prepared
        if b.low_input or b.high_input:
            return functools.partial(self.run, ctx, inputs, outputs)
        return functools.partial(clip_into, inputs[0], b.low, b.high, outputs[0])


def clip_into(x: np.ndarray, lo: np.ndarray | None, hi: np.ndarray | None, out: np.ndarray) -> None:
    """out = Clip(x) between 0-d bounds (None: no bound); ``out`` may be x's storage."""
    if lo is None and hi is None:
        np.copyto(out, x)
    elif hi is None:
        np.maximum(x, lo, out=out)
    elif lo is None:
        np.minimum(x, hi, out=out)
    else:
        np.clip(x, lo, hi, out=out)


def clip_bound(dtype: np.dtype, value: Any) -> np.ndarray | None:
    """The bound as a read-only 0-d array of X's type (FLT_MAX becomes inf in float16)."""
    if value is None:
        return None
    with np.errstate(over="ignore"):
        arr = np.asarray(value).reshape(()).astype(dtype)
    arr.flags.writeable = False
    return arr
