"""Adagrad, Adam and Momentum of the ai.onnx.preview.training domain (opset 1).

Inputs are ``R`` (learning rate), ``T`` (update count) and then, for ``n`` optimized tensors,
the ``n`` values X, the ``n`` gradients G and the ``n`` of each state (H for Adagrad; V and H
for Adam; V for Momentum).  Outputs are the ``n`` new X and then the ``n`` of each new state,
in the same order.  Each tensor is updated by the spec's pseudo code, one numpy operation per
step of it in its order, with numpy broadcasting between X, G and the states.

The scalar factors (the decayed learning rate, Adam's bias correction) are computed in Python
floats (IEEE double, one rounding per operation, ``math.sqrt`` correctly rounded; powers by
repeated squaring, not ``pow``) and rounded once to X's type.  Everything else is element-wise
multiply, add, divide and sqrt, each correctly rounded: these kernels are exact
(docs/exact-mode.md), NaN results rewritten to the canonical NaN in exact mode.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel, name_of

from ._util import _CANONICAL_NAN, constant, rewrite_nan

DOMAIN = "ai.onnx.preview.training"
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


@dataclasses.dataclass(frozen=True)
class _Group:
    dtype: np.dtype
    shape: tuple[int, ...]
    g: int  # scratch: G_regularized
    work: int  # scratch: a temporary of the shape
    states: tuple[int | None, ...]  # scratch standing in for an absent state output
    scalar: int  # 0-d scratch of the dtype: the per-run learning-rate factor
    nan: int | None  # exact mode: bool scratch of the shape


def _power(base: float, n: int) -> float:
    """base**n (n >= 0) by repeated squaring in IEEE double: the same bits on every machine."""
    result, square = 1.0, base
    while n:
        if n & 1:
            result *= square
        square *= square
        n >>= 1
    return result


class _Optimizer(OpKernel):
    supports_exact = True
    #: Per optimized tensor: inputs after R and T (X, G, states...), outputs (X_new, states...).
    per_input: ClassVar[int]
    per_output: ClassVar[int]

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        extra = len(node.inputs) - 2
        if extra <= 0 or extra % self.per_input:
            raise self.fail(
                f"takes R, T and {self.per_input} inputs per optimized tensor, got "
                f"{len(node.inputs)} inputs"
            )
        self.count = extra // self.per_input
        if len(node.outputs) > self.count * self.per_output:
            raise self.fail(
                f"{self.count} optimized tensors have {self.count * self.per_output} outputs, "
                f"got {len(node.outputs)}"
            )
        self.norm = float(node.attr("norm_coefficient", 0.0))

    def _required(self, name: str) -> Any:
        value = self.node.attr(name)
        if value is None:
            raise self.fail(f"the attribute {name!r} is required")
        return value

    def infer(self, ctx: InferContext) -> None:
        for i, what in ((0, "R"), (1, "T")):
            if not ctx.has_input(i):
                raise self.fail(f"the input {what} is required")
            if math.prod(ctx.shape(i)) != 1:
                raise self.fail(
                    f"{what} must be a scalar, got shape {tuple(ctx.shape(i))}", "invalid_input"
                )
        if ctx.dtype(0) not in FLOATS:
            raise self.fail(
                f"R must be float or double, got {name_of(ctx.dtype(0))}", "invalid_input"
            )
        if ctx.dtype(1) != np.int64:
            raise self.fail(f"T must be int64, got {name_of(ctx.dtype(1))}", "invalid_input")
        groups = []
        n = self.count
        for k in range(n):
            idx = [2 + k + j * n for j in range(self.per_input)]
            if not all(ctx.has_input(i) for i in idx):
                raise self.fail(f"optimized tensor {k} lacks an input")
            dtype = ctx.dtype(idx[0])
            if dtype not in FLOATS:
                message = f"X of optimized tensor {k} must be float or double, got {name_of(dtype)}"
                raise self.fail(message, "invalid_input")
            if any(ctx.dtype(i) != dtype for i in idx):  # one type T: the model's types disagree
                names = ", ".join(name_of(ctx.dtype(i)) for i in idx)
                raise self.fail(f"X, G and the states must share one type, got {names}")
            try:
                shape = tuple(np.broadcast_shapes(*(tuple(ctx.shape(i)) for i in idx)))
            except ValueError:
                shapes = ", ".join(str(tuple(ctx.shape(i))) for i in idx)
                raise self.fail(
                    f"the shapes of optimized tensor {k} do not broadcast: {shapes}",
                    "invalid_input",
                ) from None
            states = []
            for j in range(self.per_output):
                out = k + j * n
                ctx.set_output(out, dtype, shape)
                absent = out >= len(self.node.outputs) or not self.node.outputs[out]
                states.append(ctx.add_scratch(dtype, shape) if absent else None)
            groups.append(
                _Group(
                    dtype,
                    shape,
                    ctx.add_scratch(dtype, shape),
                    ctx.add_scratch(dtype, shape),
                    tuple(states),
                    ctx.add_scratch(dtype, ()),
                    ctx.add_scratch(np.bool_, shape) if ctx.exact else None,
                )
            )
        ctx.prepared = tuple(groups)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        rate = float(inputs[0].reshape(-1)[0])
        step = int(inputs[1].reshape(-1)[0])
        n = self.count
        for k, p in enumerate(ctx.prepared):
            ins = [inputs[2 + k + j * n] for j in range(self.per_input)]
            outs = []
            for j in range(self.per_output):
                out = outputs[k + j * n] if k + j * n < len(outputs) else None
                outs.append(ctx.scratch[p.states[j]] if out is None else out)
            s = ctx.scratch
            g, work, scalar = s[p.g], s[p.work], s[p.scalar]
            x, grad = ins[0], ins[1]
            np.multiply(x, constant(p.dtype, self.norm), out=g)  # G_regularized
            np.add(g, grad, out=g)
            self.update(rate, step, p.dtype, ins, outs, g, work, scalar)
            if p.nan is not None and p.dtype in _CANONICAL_NAN:
                for o in outs:
                    rewrite_nan(o, s[p.nan])

    def update(
        self,
        rate: float,
        step: int,
        dtype: np.dtype,
        ins: list[np.ndarray],
        outs: list[np.ndarray],
        g: np.ndarray,
        work: np.ndarray,
        scalar: np.ndarray,
    ) -> None:
        """Write the outputs of one optimized tensor; ``g`` holds G_regularized."""
        raise NotImplementedError


class Adagrad(_Optimizer):
    """r = R / (1 + T * decay_factor); H_new = H + g * g;
    X_new = X - r * g / (sqrt(H_new) + epsilon)."""

    per_input, per_output = 3, 2

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.decay = float(node.attr("decay_factor", 0.0))
        self.epsilon = float(node.attr("epsilon", 1e-6))

    def update(self, rate, step, dtype, ins, outs, g, work, scalar) -> None:
        x, _, h = ins
        x_new, h_new = outs
        scalar[()] = rate / (1.0 + step * self.decay)
        np.multiply(g, g, out=work)
        np.add(h, work, out=h_new)
        np.sqrt(h_new, out=work)
        np.add(work, constant(dtype, self.epsilon), out=work)  # H_adaptive
        np.multiply(g, scalar, out=g)  # r * G_regularized (scalar first or last: one product)
        np.divide(g, work, out=g)
        np.subtract(x, g, out=x_new)


class Adam(_Optimizer):
    """V_new = alpha*V + (1-alpha)*g; H_new = beta*H + (1-beta)*g*g;
    X_new = (1 - norm_coefficient_post) * (X - R_adjusted * V_new / (sqrt(H_new) + eps))."""

    per_input, per_output = 4, 3

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.alpha = float(node.attr("alpha", 0.9))
        self.beta = float(node.attr("beta", 0.999))
        self.epsilon = float(node.attr("epsilon", 1e-6))
        self.post = float(node.attr("norm_coefficient_post", 0.0))

    def update(self, rate, step, dtype, ins, outs, g, work, scalar) -> None:
        x, _, v, h = ins
        x_new, v_new, h_new = outs
        if step > 0:  # bias correction
            a, b = _power(self.alpha, step), _power(self.beta, step)
            rate = rate * math.sqrt(1.0 - b) / (1.0 - a)
        scalar[()] = rate
        np.multiply(v, constant(dtype, self.alpha), out=v_new)
        np.multiply(g, constant(dtype, 1.0 - self.alpha), out=work)
        np.add(v_new, work, out=v_new)
        np.multiply(h, constant(dtype, self.beta), out=h_new)
        np.multiply(g, constant(dtype, 1.0 - self.beta), out=work)
        np.multiply(work, g, out=work)
        np.add(h_new, work, out=h_new)
        np.sqrt(h_new, out=work)
        np.add(work, constant(dtype, self.epsilon), out=work)  # H_sqrt
        np.multiply(v_new, scalar, out=g)
        np.divide(g, work, out=g)
        np.subtract(x, g, out=x_new)
        if self.post != 0.0:  # (1 - 0) * X_new is X_new itself
            np.multiply(x_new, constant(dtype, 1.0 - self.post), out=x_new)


class Momentum(_Optimizer):
    """V_new = alpha*V + beta_adjusted*g (beta_adjusted = T > 0 ? beta : 1);
    standard: X_new = X - R*V_new; nesterov: X_new = X - R*(g + alpha*V_new)."""

    per_input, per_output = 3, 2

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.alpha = float(self._required("alpha"))
        self.beta = float(self._required("beta"))
        self.norm = float(self._required("norm_coefficient"))
        mode = self._required("mode")
        if mode not in ("standard", "nesterov"):
            raise self.fail(f"mode must be standard or nesterov, got {mode!r}")
        self.nesterov = mode == "nesterov"

    def update(self, rate, step, dtype, ins, outs, g, work, scalar) -> None:
        x, _, v = ins
        x_new, v_new = outs
        scalar[()] = rate
        np.multiply(v, constant(dtype, self.alpha), out=v_new)
        np.multiply(g, constant(dtype, self.beta if step > 0 else 1.0), out=work)
        np.add(v_new, work, out=v_new)
        if self.nesterov:
            np.multiply(v_new, constant(dtype, self.alpha), out=work)
            np.add(g, work, out=work)
            np.multiply(work, scalar, out=work)
        else:
            np.multiply(v_new, scalar, out=work)
        np.subtract(x, work, out=x_new)
