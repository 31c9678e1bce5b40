"""SVMClassifier and SVMRegressor (ai.onnx.ml): libsvm's models, vectorised over rows.

Kernels, from ``kernel_params = [gamma, coef0, degree]``: LINEAR ``<x, s>``, POLY
``(gamma <x, s> + coef0) ^ degree``, RBF ``exp(-gamma |x - s|^2)``, SIGMOID
``tanh(gamma <x, s> + coef0)``.  A batch's kernel values are one matrix product with the support
vectors (float64, so that RBF's ``|x|^2 + |s|^2 - 2 <x, s>`` loses nothing to cancellation).

SVMClassifier with ``vectors_per_class`` (libsvm's SVC): the support vectors come grouped by
class, ``coefficients`` is libsvm's ``sv_coef`` ([classes - 1, vectors]) and the classifier of
classes i < j decides ``sum over class i's vectors of coef[j - 1, v] K(x, v) + sum over class
j's of coef[i, v] K(x, v) + rho[pair]``, pairs in the order (0, 1), (0, 2) ... (1, 2) ...  All
pairs are one product ``K @ W`` with W built once from the attributes.  A positive decision
votes for i, else for j; the label is the class of most votes (the first on a tie).

With ``prob_a``/``prob_b`` (Platt scaling), each pair's decision d gives
``r_ij = 1 - logistic(d * prob_a + prob_b)`` clipped to [1e-7, 1 - 1e-7], and the class
probabilities are libsvm's pairwise coupling (Wu, Lin and Weng 2004, second method): the
minimiser of ``sum_ij (r_ji p_i - r_ij p_j)^2`` over the simplex, found by libsvm's fixed-point
iteration with its stopping rule (max error < 0.005 / classes, at most 100 rounds).  It runs in
float32, as onnxruntime runs it, with every row's iteration in lockstep: a row stops updating
when it converged, so each row takes the same steps as it would alone.

Without support vectors, the model is linear (liblinear): one coefficient row per class,
``scores = X @ coef.T + rho[0]`` and the label is the best score's class.

Outputs where the spec is silent follow onnxruntime:

- Z holds the pairwise decisions ([N, classes (classes - 1) / 2]) without probabilities, the
  class probabilities ([N, classes]) with them, the class scores in the linear case; the
  post_transform applies to what Z holds.
- Two classes with support vectors: the label is the vote (decision > 0: the first class),
  with or without probabilities; without them Z is ``[-d, d]`` (NONE), ``[logistic(-d),
  logistic(d)]`` (LOGISTIC), ``[1 - d, d]`` (SOFTMAX, SOFTMAX_ZERO) or ``[probit(d), d]`` for
  PROBIT (onnxruntime leaves column 1 unwritten).
- Two classes, linear: the label is the second class when the best score is > 0, else the
  class of the best score.
- SVMRegressor: ``sum coef[v] K(x, v) + rho[0]`` (``X @ coef + rho[0]`` without support
  vectors); one_class maps it to 1 (> 0) or -1; post_transform is read (and must be valid)
  but changes nothing, as in onnxruntime.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._scores import (
    as_rows,
    check_input,
    class_labels,
    floats,
    logistic,
    post_transform,
    transform_name,
)

_F32 = np.float32
KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")


class _Kernel:
    """The kernel of a node: its type and [gamma, coef0, degree]."""

    def __init__(self, owner: OpKernel, node: NodeInfo) -> None:
        kind = node.attr("kernel_type", "LINEAR")
        self.kind = kind.decode() if isinstance(kind, bytes) else kind
        if self.kind not in KERNELS:
            raise owner.fail(f"kernel_type must be one of {', '.join(KERNELS)}, got {kind!r}")
        params = list(node.attr("kernel_params") or [])
        if params and len(params) != 3:
            raise owner.fail(f"kernel_params must hold gamma, coef0, degree, got {params}")
        # float32 as the attribute holds them, used in float64
        self.gamma, self.coef0, self.degree = (
            float(v) for v in np.array(params or [0.0, 0.0, 0.0], _F32)
        )

    def __call__(self, x: np.ndarray, sv: np.ndarray, sv_norms: np.ndarray) -> np.ndarray:
        """K [N, V] (float64) of rows x [N, F] and support vectors sv [V, F] (float64)."""
        dot = x.astype(np.float64) @ sv.T
        if self.kind == "LINEAR":
            return dot
        if self.kind == "RBF":
            xx = np.einsum("ij,ij->i", x, x, dtype=np.float64)
            dot *= -2
            dot += xx[:, None]
            dot += sv_norms
            np.maximum(dot, 0, out=dot)
            dot *= -self.gamma
            return np.exp(dot, out=dot)
        dot *= self.gamma
        dot += self.coef0
        if self.kind == "POLY":
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                return np.power(dot, self.degree, out=dot)
        return np.tanh(dot, out=dot)


def _support_vectors(owner: OpKernel, node: NodeInfo, count: int) -> tuple[np.ndarray, int]:
    """The support vectors as float64 [count, F] and F."""
    sv = np.array(node.attr("support_vectors") or [], np.float32).astype(np.float64)
    if count <= 0 or sv.size % count:
        raise owner.fail(f"{sv.size} support vector values for {count} support vectors")
    return sv.reshape(count, -1), sv.size // count


def _check_features(owner: OpKernel, got: int, want: int) -> None:
    if got != want:
        raise owner.fail(f"X has {got} features, the model {want}", "invalid_input")


class SVMClassifier(OpKernel):
    """X [N, F] -> Y [N] labels, Z [N, scores] float32."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.transform = transform_name(self, node)
        self.labels = class_labels(self, node)
        self.kernel = _Kernel(self, node)
        k = self.classes = self.labels.size
        self.coef = floats(node, "coefficients")
        self.rho = floats(node, "rho")
        if self.coef.size == 0 or self.rho.size == 0:
            raise self.fail("attributes coefficients and rho are required")
        prob_a, prob_b = floats(node, "prob_a"), floats(node, "prob_b")
        if prob_a.size != prob_b.size:
            raise self.fail(f"prob_a holds {prob_a.size} values, prob_b {prob_b.size}")
        per_class = [int(v) for v in node.attr("vectors_per_class") or []]
        self.svc = sum(per_class) > 0
        pairs = k * (k - 1) // 2
        if not self.svc:  # liblinear: one coefficient row per class
            if self.coef.size % k:
                raise self.fail(f"{self.coef.size} coefficients for {k} classes")
            self.features = self.coef.size // k
            self.weights = self.coef.reshape(k, -1).T.astype(np.float64)
            self.prob = None
            return
        if len(per_class) != k or min(per_class) < 0:
            raise self.fail(f"vectors_per_class {per_class} must give a count per class ({k})")
        count = sum(per_class)
        self.sv, self.features = _support_vectors(self, node, count)
        self.sv_norms = np.einsum("ij,ij->i", self.sv, self.sv)
        if k < 2 or self.coef.size != (k - 1) * count:
            raise self.fail(
                f"coefficients hold {self.coef.size} values, expected (classes - 1) x vectors "
                f"= {k - 1} x {count}"
            )
        if self.rho.size != pairs:
            raise self.fail(f"rho holds {self.rho.size} values, expected {pairs} (class pairs)")
        if prob_a.size not in (0, pairs):
            raise self.fail(f"prob_a holds {prob_a.size} values, expected {pairs} (class pairs)")
        self.prob = (prob_a, prob_b) if prob_a.size else None
        self.weights = self._pair_weights(per_class)
        first, second = np.triu_indices(k, 1)  # the pairs in libsvm's order
        self.first, self.second = first, second

    def _pair_weights(self, per_class: list[int]) -> np.ndarray:
        """W [vectors, pairs]: the decision of every pair is one product K @ W."""
        k, coef = self.classes, self.coef.reshape(self.classes - 1, -1).astype(np.float64)
        starts = np.concatenate([[0], np.cumsum(per_class)])
        w = np.zeros((coef.shape[1], k * (k - 1) // 2))
        p = 0
        for i in range(k):
            for j in range(i + 1, k):
                a, b = slice(starts[i], starts[i + 1]), slice(starts[j], starts[j + 1])
                w[a, p] = coef[j - 1, a]
                w[b, p] = coef[i, b]
                p += 1
        return w

    def infer(self, ctx: InferContext) -> None:
        n, features = check_input(self, ctx.dtype(0), ctx.shape(0))
        _check_features(self, features, self.features)
        k = self.classes
        width = k if (self.prob is not None or not self.svc) else max(2, k * (k - 1) // 2)
        ctx.set_output(0, self.labels.dtype, (n,))
        ctx.set_output(1, _F32, (n, width))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x = as_rows(inputs[0])
        y, z = outputs[0], outputs[1]
        if not self.svc:
            scores = (x.astype(np.float64) @ self.weights).astype(_F32)
            scores += self.rho[0]
            best = scores.argmax(axis=1)
            if self.classes == 2:  # a positive best score picks the second class
                best[scores.max(axis=1) > 0] = 1
            if y is not None:
                np.copyto(y, self.labels.take(best))
            if z is not None:
                np.copyto(z, post_transform(self.transform, scores))
            return
        kernel = self.kernel(x, self.sv, self.sv_norms)
        decisions = (kernel @ self.weights).astype(_F32)
        decisions += self.rho
        if y is not None:
            np.copyto(y, self.labels.take(self._votes(decisions)))
        if z is None:
            return
        if self.prob is not None:
            z[...] = _coupled(decisions, *self.prob, self.first, self.second, self.classes)
            post_transform(self.transform, z)
        elif self.classes == 2:
            _binary_decisions(self.transform, decisions[:, 0], z)
        else:
            np.copyto(z, post_transform(self.transform, decisions))

    def _votes(self, decisions: np.ndarray) -> np.ndarray:
        """The class of most votes per row (the first of those tied)."""
        n, k = decisions.shape[0], self.classes
        votes = np.zeros((n, k), np.intp)
        wins = decisions > 0
        for p in range(decisions.shape[1]):
            votes[:, self.first[p]] += wins[:, p]
            votes[:, self.second[p]] += ~wins[:, p]
        return votes.argmax(axis=1)


def _binary_decisions(transform: str, d: np.ndarray, z: np.ndarray) -> None:
    """Z of a two-class SVC without probabilities, as the module docstring says."""
    if transform == "PROBIT":
        z[:, 1] = d
        z[:, 0] = d
        post_transform("PROBIT", z[:, :1])
    elif transform in ("NONE", "LOGISTIC"):
        z[:, 1] = d
        np.negative(d, out=z[:, 0])
        if transform == "LOGISTIC":
            logistic(z)
    else:
        z[:, 1] = d
        np.subtract(_F32(1), d, out=z[:, 0])


def _coupled(
    decisions: np.ndarray,
    prob_a: np.ndarray,
    prob_b: np.ndarray,
    first: np.ndarray,
    second: np.ndarray,
    k: int,
) -> np.ndarray:
    """Class probabilities [N, k] float32 from the pairwise decisions [N, pairs]."""
    n = decisions.shape[0]
    r_pair = decisions * prob_a
    r_pair += prob_b
    logistic(r_pair)
    np.subtract(_F32(1), r_pair, out=r_pair)
    np.clip(r_pair, _F32(1e-7), _F32(1 - 1e-7), out=r_pair)
    r = np.zeros((n, k, k), _F32)  # r[:, i, j]: P(class i | i or j)
    r[:, first, second] = r_pair
    r[:, second, first] = _F32(1) - r_pair
    return _pairwise_coupling(r, k)


def _pairwise_coupling(r: np.ndarray, k: int) -> np.ndarray:
    """libsvm's multiclass_probability per row, in float32, all rows at once."""
    n = r.shape[0]
    q = np.zeros((n, k, k), _F32)
    for t in range(k):
        for j in range(t):
            q[:, t, t] += r[:, j, t] * r[:, j, t]
            q[:, t, j] = q[:, j, t]
        for j in range(t + 1, k):
            q[:, t, t] += r[:, j, t] * r[:, j, t]
            q[:, t, j] = -r[:, j, t] * r[:, t, j]
    p = np.full((n, k), _F32(1) / _F32(k), _F32)
    eps = _F32(0.005) / _F32(k)
    rows = np.arange(n)
    one, two = _F32(1), _F32(2)
    for _ in range(100):
        if rows.size == 0:
            break
        qa, pa = q[rows], p[rows]
        # Qp = Q p and pQp = p.Qp, each sum taken term by term in libsvm's order
        qp = np.zeros((rows.size, k), _F32)
        for j in range(k):
            qp += qa[:, :, j] * pa[:, j : j + 1]
        pqp = np.zeros(rows.size, _F32)
        for t in range(k):
            pqp += pa[:, t] * qp[:, t]
        error = np.abs(qp - pqp[:, None]).max(axis=1)
        going = error >= eps
        rows, qa, pa, qp, pqp = rows[going], qa[going], pa[going], qp[going], pqp[going]
        for t in range(k):
            diag = qa[:, t, t]
            diff = (pqp - qp[:, t]) / diag
            pa[:, t] += diff
            grow = one + diff
            pqp = (pqp + diff * (diff * diag + two * qp[:, t])) / grow / grow
            grow = grow[:, None]
            qp += diff[:, None] * qa[:, t, :]
            qp /= grow
            pa /= grow
        p[rows] = pa
    return p


class SVMRegressor(OpKernel):
    """X [N, F] -> Y [N, 1] float32."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.transform = transform_name(self, node)
        self.kernel = _Kernel(self, node)
        self.one_class = bool(node.attr("one_class", 0))
        self.coef = floats(node, "coefficients").astype(np.float64)
        rho = floats(node, "rho")
        self.rho = rho[0] if rho.size else _F32(0)
        count = int(node.attr("n_supports", 0))
        self.svr = count > 0
        if self.svr:
            self.sv, self.features = _support_vectors(self, node, count)
            self.sv_norms = np.einsum("ij,ij->i", self.sv, self.sv)
            if self.coef.size != count:
                raise self.fail(f"{self.coef.size} coefficients for {count} support vectors")
        else:
            self.features = self.coef.size
        self.weights = self.coef.reshape(-1, 1)

    def infer(self, ctx: InferContext) -> None:
        n, features = check_input(self, ctx.dtype(0), ctx.shape(0))
        _check_features(self, features, self.features)
        ctx.set_output(0, _F32, (n, 1))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x = as_rows(inputs[0])
        y = outputs[0]
        if self.svr:
            values = self.kernel(x, self.sv, self.sv_norms) @ self.weights
        else:
            values = x.astype(np.float64) @ self.weights
        np.copyto(y, values, casting="unsafe")
        y += self.rho
        if self.one_class:
            np.copyto(y, np.where(y > 0, _F32(1), _F32(-1)))
