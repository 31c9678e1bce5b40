"""SVMClassifier and SVMRegressor (ai.onnx.ml): libsvm's models, vectorised over rows.

Kernels, from ``kernel_params = [gamma, coef0, degree]``: LINEAR ``<x, s>``, POLY
``(gamma <x, s> + coef0) ^ degree``, RBF ``exp(-gamma |x - s|^2)``, SIGMOID
``tanh(gamma <x, s> + coef0)``.

Arithmetic: onnxruntime is the oracle and computes in float32, so graphrt follows its order of
operations, vectorised over rows.  That makes it bit for bit equal to onnxruntime on x86-64
with FMA (scikit-learn's SVC, SVR and OneClassSVM, measured), and within a unit or two where
onnxruntime calls MLAS's approximations: SIGMOID's tanh, and the LOGISTIC and SOFTMAX
post_transforms of a Z of several columns (graphrt: the rounded double result).

- RBF: ``(x_f - s_f)^2`` summed feature by feature in float32, times -gamma, float32 exp (the
  C library's expf, see _scores).
- LINEAR, POLY, SIGMOID: ``gamma * <x, s> + coef0`` is an SGEMM (MLAS) with alpha = gamma and
  C = coef0 (LINEAR: alpha 1, no C), mirrored by ``sgemm_nt``: each output sums its K products
  in order with fused multiply-adds (float32 accumulator, MLAS's FMA3/AVX512 kernels) in
  slices of K set by MLAS's blocking, then ``alpha * sum + C`` rounded once; one row with
  alpha 1 takes MLAS's one-row kernel instead (eight lanes, each summing every eighth product,
  then the lanes added in an order set by the column's place).  POLY squares or cubes in
  float32 (other degrees: pow rounded to float32); SIGMOID's tanh is MLAS's own approximation
  in onnxruntime, a unit or two off the rounded tanh graphrt takes.
- SVC decisions: float32 products ``coef * K`` summed one by one in double, class i's vectors
  then class j's, plus rho; the vote reads that double, Z holds it rounded to float32.
- SVMRegressor: the kernel values against the coefficients are a second SGEMM with C = rho.

SVMClassifier with ``vectors_per_class`` (libsvm's SVC): the support vectors come grouped by
class, ``coefficients`` is libsvm's ``sv_coef`` ([classes - 1, vectors]) and the classifier of
classes i < j decides ``sum over class i's vectors of coef[j - 1, v] K(x, v) + sum over class
j's of coef[i, v] K(x, v) + rho[pair]``, pairs in the order (0, 1), (0, 2) ... (1, 2) ...  A
positive decision votes for i, else for j; the label is the class of most votes (the first on
a tie).

With ``prob_a``/``prob_b`` (Platt scaling), each pair's decision d gives
``r_ij = 1 - logistic(d * prob_a + prob_b)`` clipped to [1e-7, 1 - 1e-7], and the class
probabilities are libsvm's pairwise coupling (Wu, Lin and Weng 2004, second method): the
minimiser of ``sum_ij (r_ji p_i - r_ij p_j)^2`` over the simplex, found by libsvm's fixed-point
iteration with its stopping rule (max error < 0.005 / classes, at most 100 rounds).  It runs in
float32, as onnxruntime runs it, with every row's iteration in lockstep: a row stops updating
when it converged, so each row takes the same steps as it would alone.

Without support vectors, the model is linear (liblinear): one coefficient row per class,
``scores = X @ coef.T + rho[0]`` (an SGEMM with C = rho[0]) and the label is the best score's
class.

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
    _exp,
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
    """The kernel of a node: its type and [gamma, coef0, degree], as float32 like the attribute."""

    def __init__(self, owner: OpKernel, node: NodeInfo) -> None:
        kind = node.attr("kernel_type", "LINEAR")
        self.kind = kind.decode() if isinstance(kind, bytes) else kind
        if self.kind not in KERNELS:
            raise owner.fail(f"kernel_type must be one of {', '.join(KERNELS)}, got {kind!r}")
        params = list(node.attr("kernel_params") or [])
        if params and len(params) != 3:
            raise owner.fail(f"kernel_params must hold gamma, coef0, degree, got {params}")
        self.gamma, self.coef0, self.degree = np.array(params or [0.0, 0.0, 0.0], _F32)

    def __call__(self, x: np.ndarray, sv: np.ndarray) -> np.ndarray:
        """K [N, V] float32 of rows x [N, F] and support vectors sv [V, F] (float32)."""
        if self.kind == "RBF":  # |x - s|^2 summed feature by feature, then exp(-gamma * it)
            total = np.zeros((x.shape[0], sv.shape[0]), _F32)
            diff = np.empty_like(total)
            for f, column in enumerate(np.ascontiguousarray(sv.T)):
                np.subtract(x[:, f : f + 1], column, out=diff)
                np.multiply(diff, diff, out=diff)
                total += diff
            total *= -self.gamma
            return _exp(total)
        if self.kind == "LINEAR":
            return sgemm_nt(x, sv)
        dot = sgemm_nt(x, sv, self.gamma, self.coef0 if self.coef0 != 0 else None)
        if self.kind == "SIGMOID":
            return np.tanh(dot.astype(np.float64)).astype(_F32)
        if self.degree == 2:
            return dot * dot
        if self.degree == 3:
            return dot * dot * dot
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            return np.power(dot.astype(np.float64), float(self.degree)).astype(_F32)


def _fma(acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float32 acc + a * b rounded once (through float64, where a * b is exact)."""
    return (acc.astype(np.float64) + a.astype(np.float64) * b.astype(np.float64)).astype(_F32)


def _fma_sums(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[M, N] float32: sum over j of a[:, j] * b[:, j] (a [M, K], b [N, K]), term by term with
    a fused multiply-add into a float32 accumulator."""
    a64, b64 = a.astype(np.float64), np.ascontiguousarray(b.T, np.float64)
    acc = np.zeros((a.shape[0], b.shape[0]))  # float64 holding float32 values
    term = np.empty_like(acc)
    rounded = np.zeros(acc.shape, _F32)
    for j in range(a.shape[1]):
        np.multiply(a64[:, j : j + 1], b64[j], out=term)  # exact
        term += acc  # rounded once to float64 ...
        np.copyto(rounded, term, casting="unsafe")  # ... then to float32
        np.copyto(acc, rounded)
    return rounded


def _stride_k(n: int, k: int) -> int:
    """How many of the K terms onnxruntime's SGEMM sums before adding them to the output."""
    stride_n = stride_k = 128
    if n >= k:
        while stride_k // 2 >= k:
            stride_n, stride_k = stride_n * 2, stride_k // 2
    else:
        while stride_n > 16 and stride_n // 2 >= n:
            stride_n, stride_k = stride_n // 2, stride_k * 2
    return stride_k


def sgemm_nt(a: np.ndarray, b: np.ndarray, alpha: float = 1.0, c: Any = None) -> np.ndarray:
    """``alpha * a @ b.T + c`` [M, N] float32, a [M, K] and b [N, K] float32, in onnxruntime's
    order of operations (see the module docstring); c is a scalar or None."""
    m, k, n = a.shape[0], a.shape[1], b.shape[0]
    if m == 1 and alpha == 1:
        return _dot_rows(a[0], b, c)[None, :]
    out = np.full((m, n), _F32(0) if c is None else c, _F32)
    stride = _stride_k(n, k)
    for start in range(0, k, stride):
        acc = _fma_sums(a[:, start : start + stride], b[:, start : start + stride])
        if start == 0 and c is None:
            out = acc * _F32(alpha)
        else:
            out = _fma(out, acc, _F32(alpha))
    return out


def _dot_rows(x: np.ndarray, b: np.ndarray, c: Any) -> np.ndarray:
    """[N] float32: x [K] . b[n] (+ c), onnxruntime's one-row SGEMM: eight lanes each summing
    every eighth product, then the lanes added in a pattern set by the column's place: columns
    in fours, then a pair, then a single one."""
    n, k = b.shape
    width = -(-k // 8) * 8
    products = np.zeros((n, width), _F32)
    np.multiply(b, x, out=products[:, :k])
    chunks = products.reshape(n, -1, 8)
    lane = chunks[:, 0].copy()
    for i in range(1, chunks.shape[1]):
        lane += chunks[:, i]
    s = [lane[:, i] for i in range(8)]
    out = np.empty(n, _F32)
    fours = n - n % 4
    out[:fours] = (((s[0] + s[1]) + s[2]) + s[3] + (((s[4] + s[5]) + s[6]) + s[7]))[:fours]
    if n % 4 >= 2:
        pair = ((s[0] + s[2]) + (s[4] + s[6])) + ((s[1] + s[3]) + (s[5] + s[7]))
        out[fours : fours + 2] = pair[fours : fours + 2]
    if n % 2:
        out[-1] = ((s[0] + s[1]) + (s[2] + s[3]) + ((s[4] + s[5]) + (s[6] + s[7])))[-1]
    if c is not None:
        out += _F32(c)
    return out


def _support_vectors(owner: OpKernel, node: NodeInfo, count: int) -> tuple[np.ndarray, int]:
    """The support vectors as float32 [count, F] and F."""
    sv = np.array(node.attr("support_vectors") or [], _F32)
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
            self.weights = self.coef.reshape(k, -1)
            self.prob = None
            return
        if len(per_class) != k or min(per_class) < 0:
            raise self.fail(f"vectors_per_class {per_class} must give a count per class ({k})")
        count = sum(per_class)
        self.sv, self.features = _support_vectors(self, node, count)
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
        self.pairs = self._pair_terms(per_class)
        first, second = np.triu_indices(k, 1)  # the pairs in libsvm's order
        self.first, self.second = first, second

    def _pair_terms(self, per_class: list[int]) -> list[tuple[Any, ...]]:
        """Per pair (i, j): class i's support vectors (a slice) and their coefficients
        [vectors, 1] float32, then class j's."""
        k, coef = self.classes, self.coef.reshape(self.classes - 1, -1)
        starts = np.concatenate([[0], np.cumsum(per_class)])
        terms = []
        for i in range(k):
            for j in range(i + 1, k):
                a, b = slice(starts[i], starts[i + 1]), slice(starts[j], starts[j + 1])
                terms.append((a, coef[j - 1, a, None], b, coef[i, b, None]))
        return terms

    def _decisions(self, x: np.ndarray) -> np.ndarray:
        """The pairs' decisions [N, pairs] float64: float32 products of coefficient and kernel
        value summed one by one in double, plus rho."""
        kernel = np.ascontiguousarray(self.kernel(x, self.sv).T)  # [vectors, N]
        out = np.empty((x.shape[0], len(self.pairs)))
        for p, (first, first_coef, second, second_coef) in enumerate(self.pairs):
            count = first_coef.shape[0]
            products = np.empty((count + second_coef.shape[0], x.shape[0]))
            products[:count] = kernel[first] * first_coef  # float32 products, held in double
            products[count:] = kernel[second] * second_coef
            # axis 0: numpy adds the rows in order, as onnxruntime's loop does
            np.add.reduce(products, axis=0, out=out[:, p])
            out[:, p] += float(self.rho[p])
        return out

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
            scores = sgemm_nt(x, self.weights, c=self.rho[0] if self.rho[0] != 0 else None)
            best = scores.argmax(axis=1)
            if self.classes == 2:  # a positive best score picks the second class
                best[scores.max(axis=1) > 0] = 1
            if y is not None:
                np.copyto(y, self.labels.take(best))
            if z is not None:
                np.copyto(z, _scores_transform(self.transform, scores))
            return
        exact = self._decisions(x)
        decisions = exact.astype(_F32)
        if y is not None:
            np.copyto(y, self.labels.take(self._votes(exact)))
        if z is None:
            return
        if self.prob is not None:
            z[...] = _coupled(decisions, *self.prob, self.first, self.second, self.classes)
            _scores_transform(self.transform, z)
        elif self.classes == 2:
            _binary_decisions(self.transform, decisions[:, 0], z)
        else:
            np.copyto(z, _scores_transform(self.transform, decisions))

    def _votes(self, decisions: np.ndarray) -> np.ndarray:
        """The class of most votes per row (the first of those tied)."""
        n, k = decisions.shape[0], self.classes
        votes = np.zeros((n, k), np.intp)
        wins = decisions > 0
        for p in range(decisions.shape[1]):
            votes[:, self.first[p]] += wins[:, p]
            votes[:, self.second[p]] += ~wins[:, p]
        return votes.argmax(axis=1)


def _scores_transform(transform: str, z: np.ndarray) -> np.ndarray:
    """The post_transform of a Z of several columns, in place.  onnxruntime's LOGISTIC there is
    MLAS's vectorised logistic, accurate to float32 relative precision even for large negative
    scores, where ``1 - logistic(|x|)`` would lose digits: graphrt computes it in double."""
    if transform != "LOGISTIC":
        return post_transform(transform, z)
    with np.errstate(over="ignore"):
        np.copyto(z, 1.0 / (1.0 + np.exp(-z.astype(np.float64))), casting="unsafe")
    return z


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
        self.coef = floats(node, "coefficients")
        rho = floats(node, "rho")
        self.rho = rho[0] if rho.size else _F32(0)
        count = int(node.attr("n_supports", 0))
        self.svr = count > 0
        if self.svr:
            self.sv, self.features = _support_vectors(self, node, count)
            if self.coef.size != count:
                raise self.fail(f"{self.coef.size} coefficients for {count} support vectors")
        else:
            self.features = self.coef.size
        self.weights = self.coef.reshape(1, -1)

    def infer(self, ctx: InferContext) -> None:
        n, features = check_input(self, ctx.dtype(0), ctx.shape(0))
        _check_features(self, features, self.features)
        ctx.set_output(0, _F32, (n, 1))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x = as_rows(inputs[0])
        y = outputs[0]
        if self.svr:  # onnxruntime passes rho to the second product even when it is 0
            values = sgemm_nt(self.kernel(x, self.sv), self.weights, c=self.rho)
        else:
            values = sgemm_nt(x, self.weights, c=self.rho if self.rho != 0 else None)
        np.copyto(y, values)
        if self.one_class:
            np.copyto(y, np.where(y > 0, _F32(1), _F32(-1)))
