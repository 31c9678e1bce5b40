"""Bitwise operators on integer tensors, and BitCast (the same bits read as another type).

BitwiseAnd, BitwiseOr and BitwiseXor broadcast like every :class:`.binary.Binary`; BitwiseNot is
a :class:`.unary.Unary`.  All are integer bit operations, exact by construction.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel, from_onnx, name_of

from .binary import Binary
from .unary import Unary


def _require_integers(kernel: OpKernel, ctx: InferContext, count: int) -> None:
    for i in range(count):
        if ctx.dtype(i).kind not in "iu":
            message = f"input {i} must be an integer tensor, got {name_of(ctx.dtype(i))}"
            raise kernel.fail(message, "invalid_input")


class _Bitwise(Binary):
    supports_exact = True  # integer bit operations

    def infer(self, ctx: InferContext) -> None:
        _require_integers(self, ctx, 2)
        super().infer(ctx)


class BitwiseAnd(_Bitwise):
    ufunc = np.bitwise_and


class BitwiseOr(_Bitwise):
    ufunc = np.bitwise_or


class BitwiseXor(_Bitwise):
    ufunc = np.bitwise_xor


class BitwiseNot(Unary):
    ufunc = np.invert
    supports_exact = True

    def infer(self, ctx: InferContext) -> None:
        _require_integers(self, ctx, 1)
        super().infer(ctx)


#: Bits of the ml_dtypes types narrower than their byte of storage (the value in the low bits).
_NARROW_BITS = {
    "int4": 4,
    "uint4": 4,
    "float4_e2m1fn": 4,
    "int2": 2,
    "uint2": 2,
}


def bit_width(dtype: np.dtype) -> int:
    """Bits of one element as ONNX counts them (bool is 8, int4 is 4)."""
    return _NARROW_BITS.get(dtype.name, dtype.itemsize * 8)


class BitCast(OpKernel):
    """The input's bits read as type ``to`` (opset 26): the widths must match.

    numpy views the input as the target type and copies.  The narrow ml_dtypes types keep one
    element per byte, its bits in the low end: their bytes are copied through ``& mask`` so
    that only the element's bits move.  Exact: no arithmetic on values.
    """

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        to = node.attr("to")
        if to is None:
            raise self.fail("the 'to' attribute is required")
        if not isinstance(to, int):
            raise self.fail(f"'to' must be an element type code (an int), got {to!r}")
        try:
            self.to = from_onnx(to)
        except KeyError:
            raise self.fail(f"'to' names no element type graphrt holds: {to}") from None
        if self.to.kind == "O":
            raise self.fail("'to' cannot be string")

    def infer(self, ctx: InferContext) -> None:
        src = ctx.dtype(0)
        if src.kind == "O":
            raise self.fail("the input cannot be a string tensor", "invalid_input")
        if bit_width(src) != bit_width(self.to):
            raise self.fail(
                f"{name_of(src)} has {bit_width(src)} bits per element, "
                f"{name_of(self.to)} has {bit_width(self.to)}",
                "invalid_input",
            )
        ctx.set_output(0, self.to, ctx.shape(0))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        self.bind(ctx, inputs, outputs)()

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        x, out = inputs[0], outputs[0]
        bits = bit_width(x.dtype)
        if bits < 8:
            mask = np.array((1 << bits) - 1, np.uint8)
            return functools.partial(np.bitwise_and, x.view(np.uint8), mask, out=out.view(np.uint8))
        return functools.partial(np.copyto, out, x.view(out.dtype))
