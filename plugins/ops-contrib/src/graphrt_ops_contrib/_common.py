"""What the contrib kernels share: scales and zero points read as numbers, quantization to an
8-bit type and 256-entry lookup tables (onnxruntime's own way for unary 8-bit operators)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, OpKernel
from graphrt_ops_basic.qmatmul import INT8_TYPES
from graphrt_ops_basic.quantize import F32, int_range, saturate_int

__all__ = ["INT8_TYPES", "F32", "Params", "quantize", "table_lookup", "zero_of"]


def zero_of(inputs: Sequence[Any], i: int) -> np.ndarray:
    """The zero point input ``i`` as float32 (0 when absent)."""
    if len(inputs) > i and inputs[i] is not None:
        return np.asarray(inputs[i]).astype(F32)
    return np.zeros((), F32)


def quantize(v: np.ndarray, zero: Any, out: np.ndarray) -> None:
    """out = clip(rint(v) + zero) in out's 8-bit type; ``v`` (float32) is overwritten."""
    lo, hi = int_range(out.dtype)
    v = np.asarray(v)  # (a 0-d result of numpy is a scalar, which cannot be an out=)
    np.rint(v, out=v)
    np.add(v, np.asarray(zero, F32), out=v)
    saturate_int(v, np.array(lo, F32), np.array(hi, F32))
    np.copyto(out, v, casting="unsafe")


def table_lookup(x: np.ndarray, table: np.ndarray, out: np.ndarray) -> None:
    """out = table[x] for an 8-bit x; the table is indexed by x's bits read as uint8."""
    np.take(table, x.view(np.uint8), out=out)


class Params:
    """Scales and zero points of a kernel, read once in ``infer`` when they are constants."""

    def __init__(self, kernel: OpKernel, ctx: InferContext, indices: Sequence[int]) -> None:
        for i in indices:  # per tensor only (a scale shaped like X broadcast Y's shape away)
            if ctx.has_input(i) and math.prod(ctx.shape(i)) != 1:
                raise kernel.fail(
                    f"input {i} (a scale or zero point) must hold one value, got shape "
                    f"{list(ctx.shape(i))}",
                    "invalid_input",
                )
        self.known = [ctx.known_value(i) if ctx.has_input(i) else None for i in indices]
        self.given = [ctx.has_input(i) for i in indices]
        self.indices = list(indices)
        self.all_known = all(k is not None or not g for k, g in zip(self.known, self.given))

    def values(self, inputs: Sequence[Any]) -> list[np.ndarray | None]:
        """The parameters this run (None for an absent optional input)."""
        if self.all_known:
            return self.known
        return [
            inputs[i] if len(inputs) > i and inputs[i] is not None else None for i in self.indices
        ]


def check_8bit(kernel: OpKernel, ctx: InferContext, *indices: int) -> np.dtype:
    """The common int8/uint8 type of the inputs ``indices`` (absent ones skipped)."""
    types = {ctx.dtype(i) for i in indices if ctx.has_input(i)}
    if len(types) != 1 or next(iter(types)) not in INT8_TYPES:
        raise kernel.fail(f"inputs {list(indices)} must all be int8 or all uint8, got {types}")
    return next(iter(types))


def f32(v: Any) -> np.ndarray:
    return np.asarray(v if v is not None else 0, dtype=F32)
