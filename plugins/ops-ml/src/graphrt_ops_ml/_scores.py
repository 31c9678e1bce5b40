"""What the ai.onnx.ml classifiers and regressors share: reading X as float32 rows, the score
post-transforms, and class labels.

The post-transforms follow onnxruntime (the reference implementation these operators are
judged against), in float32 as it computes them:

- LOGISTIC: ``1 / (1 + exp(-|x|))``, mirrored (``1 - v``) for negative x, so large scores of
  either sign neither overflow nor lose their small probabilities to cancellation;
- SOFTMAX: per row, ``exp(x - max)`` over its sum;
- SOFTMAX_ZERO: the same, but a score within 1e-7 of zero stays (near) zero and is left out
  of the sum: a class with no score gets no probability;
- PROBIT: ``sqrt(2) * erfinv(2x - 1)`` with Winitzki's closed-form erfinv (a = 0.147), the
  approximation onnxruntime uses (relative error ~1e-3 against the true inverse, so the exact
  inverse would not match it); x outside (0, 1) gives NaN, 0 and 1 give -inf and +inf.

exp and log are taken in float64 and rounded to float32, which gives the correctly rounded
result glibc's expf and logf give but for rare double roundings (numpy's own float32 log is off
by one unit in a fifth of the cases, which PROBIT's cancellation near 0.5 turns into a
difference in the third digit).  expf itself is not always correctly rounded (glibc promises
0.502 units): where the float64 exp lies within 0.0025 units of a float32 rounding midpoint
(about 0.5% of values), the C library's expf (what onnxruntime's ``std::exp`` on a float calls)
decides, when the process can reach it through ctypes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")
NUMERIC_INPUTS = "fiu"

_F32 = np.float32


def transform_name(kernel: Any, node: Any) -> str:
    """The node's post_transform, refused (invalid_model) when it is not one of the five."""
    name = node.attr("post_transform", "NONE")
    if isinstance(name, bytes):
        name = name.decode()
    if name not in TRANSFORMS:
        raise kernel.fail(f"post_transform must be one of {', '.join(TRANSFORMS)}, got {name!r}")
    return name


def check_input(kernel: Any, dtype: np.dtype, shape: tuple[int, ...]) -> tuple[int, int]:
    """(rows, features) of X: [N, F], or [F] as one row; numbers only."""
    if dtype.kind not in NUMERIC_INPUTS:
        raise kernel.fail(f"X must hold numbers, got {dtype}", "invalid_input")
    if len(shape) == 1:
        return 1, shape[0]
    if len(shape) != 2:
        raise kernel.fail(f"X must be [N, F] or [F], got shape {list(shape)}", "invalid_input")
    return shape[0], shape[1]


def as_rows(x: np.ndarray) -> np.ndarray:
    """X as float32 [N, F] (onnxruntime reads every input type as float)."""
    x = x.reshape(1, -1) if x.ndim == 1 else x
    return x if x.dtype == _F32 else x.astype(_F32)


def _c_expf() -> Any:
    """The C library's expf through ctypes, or None where it cannot be reached."""
    try:
        import ctypes

        expf = ctypes.CDLL(None).expf
    except (OSError, TypeError, AttributeError):  # e.g. Windows: no CDLL(None)
        return None
    expf.restype, expf.argtypes = ctypes.c_float, [ctypes.c_float]
    return expf


_EXPF: list[Any] = []  # [expf or None], looked up on first use


def _exp(x: np.ndarray) -> np.ndarray:
    """float32 exp through float64, the C library's expf near midpoints (module docstring)."""
    x = np.asarray(x, _F32)
    shape, x = x.shape, x.reshape(-1)
    wide = np.exp(x.astype(np.float64))
    with np.errstate(over="ignore"):
        out = wide.astype(_F32)
    if not _EXPF:
        _EXPF.append(_c_expf())
    expf = _EXPF[0]
    if expf is None or out.size == 0:
        return out.reshape(shape)
    # the 29 bits float64 has beyond float32: half a float32 unit is 1 << 28
    dropped = wide.view(np.int64) & ((1 << 29) - 1)
    dropped -= 1 << 28
    np.abs(dropped, out=dropped)
    near = dropped < (1 << 29) // 400  # within 0.0025 units
    near |= out < np.finfo(_F32).tiny  # subnormal results keep fewer bits
    where = np.flatnonzero(near)
    if where.size:
        with np.errstate(all="ignore"):  # expf's own overflow and underflow flags
            redo = np.frompyfunc(expf, 1, 1)(x[where].astype(object))
        out[where] = redo.astype(_F32)
    return out.reshape(shape)


def _log(x: np.ndarray) -> np.ndarray:
    """float32 log through float64 (see the module docstring)."""
    return np.log(x.astype(np.float64)).astype(_F32)


def logistic(x: np.ndarray) -> np.ndarray:
    """In place: 1 / (1 + exp(-|x|)), 1 - that where x < 0."""
    negative = x < 0
    np.abs(x, out=x)
    np.negative(x, out=x)
    np.copyto(x, _exp(x))
    x += _F32(1)
    np.reciprocal(x, out=x)
    np.subtract(_F32(1), x, out=x, where=negative)
    return x


def softmax(x: np.ndarray) -> np.ndarray:
    """In place, per row of [N, C]."""
    x -= x.max(axis=1, keepdims=True)
    np.copyto(x, _exp(x))
    x /= x.sum(axis=1, keepdims=True)
    return x


def softmax_zero(x: np.ndarray) -> np.ndarray:
    """In place, per row: scores within 1e-7 of zero are scaled by exp(-max), not raised to
    exp(x - max), and left out of the sum."""
    high = x.max(axis=1, keepdims=True)
    nonzero = (x > _F32(1e-7)) | (x < _F32(-1e-7))
    raised = _exp(x - high)
    np.multiply(x, _exp(-high), out=x)
    np.copyto(x, raised, where=nonzero)
    x /= np.sum(raised, axis=1, keepdims=True, where=nonzero)
    return x


def probit(x: np.ndarray) -> np.ndarray:
    """In place: sqrt(2) * erfinv(2x - 1), Winitzki's erfinv as onnxruntime computes it."""
    with np.errstate(invalid="ignore", divide="ignore"):
        y = x * _F32(2) - _F32(1)
        sign = np.where(y < 0, _F32(-1), _F32(1))
        y = (_F32(1) - y) * (_F32(1) + y)
        log = _log(y)
        v = _F32(2) / (_F32(np.pi) * _F32(0.147)) + _F32(0.5) * log
        v2 = _F32(1) / _F32(0.147) * log
        v3 = np.sqrt(v * v - v2) - v
        np.multiply(sign, np.sqrt(v3), out=x)
    x *= _F32(1.41421356)
    return x


def post_transform(name: str, scores: np.ndarray) -> np.ndarray:
    """Apply a post_transform in place to float32 scores [N, C]."""
    if name == "LOGISTIC":
        logistic(scores)
    elif name == "SOFTMAX":
        softmax(scores)
    elif name == "SOFTMAX_ZERO":
        softmax_zero(scores)
    elif name == "PROBIT":
        probit(scores)
    return scores


def class_labels(kernel: Any, node: Any, required: bool = True) -> np.ndarray | None:
    """classlabels_strings (an object array) or classlabels_ints (int64): exactly one."""
    strings, ints = node.attr("classlabels_strings"), node.attr("classlabels_ints")
    if strings is not None and ints is not None and len(strings) and len(ints):
        raise kernel.fail("only one of classlabels_strings and classlabels_ints may be set")
    if strings is not None and len(strings):
        labels = np.empty(len(strings), object)
        labels[:] = [s.decode() if isinstance(s, bytes) else s for s in strings]
        return labels
    if ints is not None and len(ints):
        return np.array(ints, np.int64)
    if required:
        raise kernel.fail("one of classlabels_strings and classlabels_ints is required")
    return None


def floats(node: Any, name: str) -> np.ndarray:
    """A float attribute as a float32 array (empty when absent)."""
    return np.array(node.attr(name) or [], _F32)
