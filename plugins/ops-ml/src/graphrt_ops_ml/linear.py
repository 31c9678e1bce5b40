"""LinearClassifier and LinearRegressor (ai.onnx.ml): scores = X @ coefficients.T + intercepts.

Computed in float32 as onnxruntime does, whatever X's numeric type.  Where the operator spec is
silent, onnxruntime's behaviour is followed:

- LinearClassifier's binary case: one coefficient row and two class labels.  The label is the
  second class when the score is > 0, else the first; Z is ``[1 - s, s]`` for NONE, SOFTMAX
  and SOFTMAX_ZERO and ``[1 - logistic(s), logistic(s)]`` for LOGISTIC.  For PROBIT,
  onnxruntime's Z is defined for a single row only (``probit(s)`` in column 0, column 1 not
  written; past one row its columns mix values of other rows), and onnx.reference computes
  something else again; here Z is ``[probit(s), s]``, so that a row never depends on another.
- With more rows, the label is the first class of the highest raw score (before the
  transform), and ``multi_class`` changes nothing.
- LinearRegressor with one target applies PROBIT only (the other transforms act on a row of
  scores and leave a single score as it is); with several targets, each transform as usual.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._scores import as_rows, check_input, class_labels, floats, post_transform, transform_name

_F32 = np.float32


def _weights(kernel: OpKernel, coef: np.ndarray, rows: int, features: int) -> np.ndarray:
    """coefficients as [features, rows] for X @ W, refused unless it holds rows * features."""
    if coef.size != rows * features:
        raise kernel.fail(
            f"coefficients hold {coef.size} values, expected {rows} x {features} "
            f"(rows x features of X)",
            "invalid_input",
        )
    return np.ascontiguousarray(coef.reshape(rows, features).T)


class LinearClassifier(OpKernel):
    """X [N, F] -> Y [N] labels, Z [N, C] float32 scores."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.transform = transform_name(self, node)
        self.labels = class_labels(self, node)
        self.coef = floats(node, "coefficients")
        if self.coef.size == 0:
            raise self.fail("attribute coefficients is required")
        self.intercepts = floats(node, "intercepts")
        n = self.labels.size
        rows = self.intercepts.size or None
        if rows is not None and rows not in (n, 1 if n == 2 else n):
            raise self.fail(f"{rows} intercepts for {n} class labels")
        self.rows = rows
        self._cache: dict[int, np.ndarray] = {}

    def _rows(self, features: int) -> int:
        if self.rows is not None:
            return self.rows
        n = self.labels.size
        return 1 if n == 2 and self.coef.size == features else n

    def infer(self, ctx: InferContext) -> None:
        n, features = check_input(self, ctx.dtype(0), ctx.shape(0))
        rows = self._rows(features)
        w = self._cache.get(features)
        if w is None:
            w = self._cache.setdefault(features, _weights(self, self.coef, rows, features))
        if rows == 1 and self.labels.size != 2:
            raise self.fail("one coefficient row needs two class labels (the binary case)")
        ctx.set_output(0, self.labels.dtype, (n,))
        ctx.set_output(1, _F32, (n, 2 if rows == 1 else rows))
        ctx.prepared = w

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x = as_rows(inputs[0])
        scores = x @ ctx.prepared
        if self.intercepts.size:
            scores += self.intercepts
        y, z = outputs[0], outputs[1]
        if scores.shape[1] == 1:
            s = scores[:, 0]
            if y is not None:
                np.copyto(y, self.labels.take((s > 0).astype(np.intp)))
            if z is not None:
                _binary_scores(self.transform, s, z)
            return
        if y is not None:
            np.copyto(y, self.labels.take(scores.argmax(axis=1)))
        if z is not None:
            np.copyto(z, post_transform(self.transform, scores))


def _binary_scores(transform: str, s: np.ndarray, z: np.ndarray) -> None:
    """Z of the one-row binary case from the scores s, as described in the module docstring."""
    if transform == "PROBIT":
        z[:, 1] = s
        z[:, 0] = s
        post_transform("PROBIT", z[:, :1])
        return
    if transform == "LOGISTIC":
        s = post_transform("LOGISTIC", s.copy())
    z[:, 1] = s
    np.subtract(_F32(1), s, out=z[:, 0])


class LinearRegressor(OpKernel):
    """X [N, F] -> Y [N, targets] float32."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.transform = transform_name(self, node)
        self.targets = int(node.attr("targets", 1))
        if self.targets < 1:
            raise self.fail(f"targets must be >= 1, got {self.targets}")
        self.coef = floats(node, "coefficients")
        self.intercepts = floats(node, "intercepts")
        if self.intercepts.size not in (0, self.targets):
            raise self.fail(f"{self.intercepts.size} intercepts for {self.targets} targets")
        if self.coef.size % self.targets:
            raise self.fail(f"{self.coef.size} coefficients for {self.targets} targets")
        self._cache: dict[int, np.ndarray] = {}

    def infer(self, ctx: InferContext) -> None:
        n, features = check_input(self, ctx.dtype(0), ctx.shape(0))
        w = self._cache.get(features)
        if w is None:
            w = _weights(self, self.coef, self.targets, features)
            w = self._cache.setdefault(features, w)
        ctx.set_output(0, _F32, (n, self.targets))
        ctx.prepared = w

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x = as_rows(inputs[0])
        y = outputs[0]
        np.matmul(x, ctx.prepared, out=y)
        if self.intercepts.size:
            y += self.intercepts
        if self.targets > 1 or self.transform == "PROBIT":
            post_transform(self.transform, y)
