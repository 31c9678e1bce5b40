"""The ai.onnx.ml preprocessing operators: Normalizer, Scaler, Binarizer, Imputer.

Each is a few element-wise numpy calls writing into the planned output.  Normalizer and Scaler
output float32 whatever X's numeric type, as the spec says; Binarizer and Imputer keep X's type.

- Normalizer divides each row (the last axis) by its max (MAX: the largest value, signed, as
  the spec and onnxruntime say: a row of negatives changes sign), the sum of its absolute values
  (L1) or its Euclidean norm (L2, as ``sign(x) * sqrt(x^2 / sum(x^2))``); a zero divisor leaves
  the row as it is.  Computed in float32 (float64 for float64 X, then rounded).
- Scaler computes ``(x - offset) * scale`` along the last axis; the attributes hold one value
  or one per feature, both as many (missing: offset 0, scale 1).
- Binarizer: 1 where x > threshold, else 0 (so NaN gives 0).
- Imputer replaces elements equal to the replaced value (NaN matches NaN) by the imputed value
  of their feature (one value, or one per feature of the last axis).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._scores import NUMERIC_INPUTS

_F32 = np.float32
NORMS = ("MAX", "L1", "L2")


def _numeric(kernel: OpKernel, dtype: np.dtype) -> None:
    if dtype.kind not in NUMERIC_INPUTS:
        raise kernel.fail(f"X must hold numbers, got {dtype}", "invalid_input")


def _per_feature(kernel: OpKernel, values: np.ndarray, shape: tuple[int, ...], name: str) -> None:
    """A per-feature attribute must hold one value or one per feature of the last axis."""
    features = shape[-1] if shape else 1
    if values.size not in (1, features):
        raise kernel.fail(
            f"{name} holds {values.size} values: expected 1 or {features} (X's last axis)",
            "invalid_input",
        )


class Normalizer(OpKernel):
    """X [N, C] (or [C]) -> Y float32, each row divided by its MAX, L1 or L2 norm."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        norm = node.attr("norm", "MAX")
        self.norm = norm.decode() if isinstance(norm, bytes) else norm
        if self.norm not in NORMS:
            raise self.fail(f"norm must be one of {', '.join(NORMS)}, got {self.norm!r}")

    def infer(self, ctx: InferContext) -> None:
        _numeric(self, ctx.dtype(0))
        shape = ctx.shape(0)
        if len(shape) not in (1, 2):
            raise self.fail(f"X must be [N, C] or [C], got shape {list(shape)}", "invalid_input")
        ctx.set_output(0, _F32, shape)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x = inputs[0]
        work = np.float64 if x.dtype == np.float64 else _F32
        x = x.astype(work, copy=False)
        if self.norm == "MAX":
            divisor = x.max(axis=-1, keepdims=True, initial=-np.inf)
        elif self.norm == "L1":
            divisor = np.abs(x).sum(axis=-1, keepdims=True)
        else:
            squares = x * x
            divisor = squares.sum(axis=-1, keepdims=True)
        keep = divisor == 0
        np.copyto(divisor, 1, where=keep)
        if self.norm == "L2":
            y = np.sqrt(squares / divisor)
            np.negative(y, out=y, where=x < 0)
            np.copyto(y, x, where=keep)
        else:
            y = x / divisor
        np.copyto(outputs[0], y, casting="unsafe")


class Scaler(OpKernel):
    """X -> Y float32 = (X - offset) * scale, per feature of the last axis."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.offset = np.array(node.attr("offset") or [0.0], _F32)
        self.scale = np.array(node.attr("scale") or [1.0], _F32)
        if node.attr("offset") and node.attr("scale") and self.offset.size != self.scale.size:
            raise self.fail(
                f"offset ({self.offset.size} values) and scale ({self.scale.size}) must have "
                "one length"
            )

    def infer(self, ctx: InferContext) -> None:
        _numeric(self, ctx.dtype(0))
        shape = ctx.shape(0)
        _per_feature(self, self.offset, shape, "offset")
        _per_feature(self, self.scale, shape, "scale")
        ctx.set_output(0, _F32, shape)
        # a 0-d X takes its single offset and scale as 0-d too (Y keeps X's shape)
        ctx.prepared = (self.offset.reshape(()), self.scale.reshape(())) if not shape else None

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x, y = inputs[0], outputs[0]
        offset, scale = ctx.prepared or (self.offset, self.scale)
        if x.dtype == np.float64:  # double arithmetic, then rounded once
            np.copyto(y, (x - offset) * scale, casting="unsafe")
            return
        np.subtract(x, offset, out=y, dtype=_F32, casting="unsafe")
        np.multiply(y, scale, out=y)


class Binarizer(OpKernel):
    """X -> Y of X's type: 1 where X > threshold, else 0."""

    in_place_input = 0

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.threshold = float(node.attr("threshold", 0.0))

    def infer(self, ctx: InferContext) -> None:
        _numeric(self, ctx.dtype(0))
        dtype = ctx.dtype(0)
        ctx.set_output(0, dtype, ctx.shape(0))
        # the threshold in X's type for floats (float32 X compares with the float32 attribute);
        # the comparison lands in plan scratch: a run allocates nothing
        threshold = np.array(self.threshold, dtype if dtype.kind == "f" else np.float64)
        ctx.prepared = (threshold, ctx.add_scratch(np.dtype(np.bool_), ctx.shape(0)))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        threshold, above = ctx.prepared
        above = np.greater(inputs[0], threshold, out=ctx.scratch[above])
        np.copyto(outputs[0], above, casting="unsafe")


class Imputer(OpKernel):
    """X -> Y of X's type: elements equal to the replaced value become the imputed one."""

    in_place_input = 0

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        floats, ints = node.attr("imputed_value_floats"), node.attr("imputed_value_int64s")
        if floats and ints:
            raise self.fail("only one of imputed_value_floats and imputed_value_int64s may be set")
        if not floats and not ints:
            raise self.fail("one of imputed_value_floats and imputed_value_int64s is required")
        self.floats = bool(floats)
        self.imputed = np.array(floats, _F32) if floats else np.array(ints, np.int64)
        self.replaced_float = float(node.attr("replaced_value_float", 0.0))
        self.replaced_int = int(node.attr("replaced_value_int64", 0))

    def infer(self, ctx: InferContext) -> None:
        dtype, shape = ctx.dtype(0), ctx.shape(0)
        _numeric(self, dtype)
        if self.floats != (dtype.kind == "f"):
            want = "imputed_value_floats" if dtype.kind == "f" else "imputed_value_int64s"
            raise self.fail(f"X of {dtype} needs {want}", "invalid_input")
        _per_feature(self, self.imputed, shape, "the imputed values")
        ctx.set_output(0, dtype, shape)
        if dtype.kind == "f":
            ctx.prepared = (np.array(self.replaced_float, dtype), self.imputed.astype(dtype))
        else:
            ctx.prepared = (np.array(self.replaced_int, np.int64), self.imputed.astype(dtype))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x, y = inputs[0], outputs[0]
        replaced, imputed = ctx.prepared
        if x.dtype.kind == "f" and np.isnan(replaced):
            hit = np.isnan(x)
        else:
            hit = np.equal(x, replaced)
        if y is not x:
            np.copyto(y, x)
        np.copyto(y, np.broadcast_to(imputed, x.shape), where=hit)
