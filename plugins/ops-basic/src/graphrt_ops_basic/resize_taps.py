"""Where each output position of a resized axis reads the input, and with which weights.

Resize is separable: along one axis, output position ``y`` maps to a source coordinate ``x``
(coordinate_transformation_mode) and reads the taps around it.  :func:`axis_taps` returns, for
one axis, an index array ``idx`` of shape (K, L) (K taps for each of the L output positions,
clamped into the input: edge padding) and a float64 weight array of the same shape, or no
weights when every position reads exactly one input element (a selection: nearest mode, or
linear/cubic landing on input positions).  The kernel (resize.py) turns them into
``out = w[0] * x.take(idx[0]) + w[1] * x.take(idx[1]) + ...`` along the axis.

Everything here is float64 arithmetic of IEEE basic operations and floor, computed once per
plan, so the indices and weights do not depend on the machine.  The formulas are the ONNX
specification's (Resize-19), evaluated in the order the spec writes them; where the spec leaves
a corner open the choice is noted.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

#: Modes of coordinate_transformation_mode by the opsets that define them.
COORDINATE_MODES = {
    "half_pixel",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
}
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


@dataclasses.dataclass(frozen=True)
class TapOptions:
    """The attributes that shape the taps of every axis of one node."""

    mode: str  # nearest, linear, cubic
    coordinate: str  # coordinate_transformation_mode; "simple" for Resize-10 and Upsample
    nearest: str = "round_prefer_floor"
    cubic_a: float = -0.75
    exclude_outside: bool = False
    antialias: bool = False


@dataclasses.dataclass(frozen=True)
class AxisTaps:
    idx: np.ndarray  # (K, L) intp, every index in [0, in_len - 1]
    weights: np.ndarray | None  # (K, L) float64; None: a selection (K == 1)
    outside: np.ndarray | None  # (L,) bool: tf_crop_and_resize positions left to extrapolate

    @property
    def identity(self) -> bool:
        """Reads the input unchanged (nothing to do along this axis)."""
        idx = self.idx
        return (
            self.weights is None
            and self.outside is None
            and np.array_equal(idx[0], np.arange(idx.shape[1]))
        )


def source_coordinates(
    opts: TapOptions,
    out_len: int,
    in_len: int,
    scale: float,
    roi: tuple[float, float] | None,
) -> np.ndarray:
    """x_original for every output position y (float64), per coordinate_transformation_mode.

    ``scale`` is the node's scale for the axis (the scales input, or sizes / input length);
    ``out_width = scale * in_len`` is the real-valued output length the spec's formulas use
    (align_corners divides by ``out_width - 1``, which differs from the integer length when a
    scale does not divide evenly).  Where the output has one position, align_corners gives 0,
    pytorch_half_pixel 0 and tf_crop_and_resize the roi's centre, as the spec writes.
    """
    y = np.arange(out_len, dtype=np.float64)
    mode = opts.coordinate
    out_width = scale * in_len
    if mode in ("half_pixel", "pytorch_half_pixel"):
        if mode == "pytorch_half_pixel" and out_len <= 1:
            return np.zeros(out_len)
        return (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adjustment = out_len / out_width
        offset = (in_len / 2) * (1 - adjustment)
        return offset + (y + 0.5) / scale - 0.5
    if mode in ("asymmetric", "simple"):
        return y / scale
    if mode == "tf_half_pixel_for_nn":
        return (y + 0.5) / scale
    if mode == "align_corners":
        if out_len <= 1 or out_width == 1:
            return np.zeros(out_len)
        return y * (in_len - 1) / (out_width - 1)
    # tf_crop_and_resize
    start, end = roi
    if out_len <= 1 or out_width == 1:
        return np.full(out_len, 0.5 * (start + end) * (in_len - 1))
    return y * (end - start) * (in_len - 1) / (out_width - 1) + start * (in_len - 1)


def _nearest(opts: TapOptions, x: np.ndarray, scale: float) -> np.ndarray:
    """The index nearest_mode picks (before clamping), as float64."""
    q = np.floor(x)
    frac = x - q  # exact
    if opts.coordinate == "simple":
        # Resize-10 and Upsample define no rounding; onnxruntime's, the de facto reference:
        # floor when enlarging an axis, ceil when shrinking it.
        return np.ceil(x) if scale < 1 else q
    if opts.nearest == "floor":
        return q
    if opts.nearest == "ceil":
        return np.ceil(x)
    if opts.nearest == "round_prefer_ceil":
        return q + (frac >= 0.5)
    return q + (frac > 0.5)  # round_prefer_floor


def _keys(t: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel at |t| (coefficient a): 0 from |t| >= 2."""
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def _filter(opts: TapOptions, x: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Linear or cubic taps: (first tap index, weights (K, L)) before clamping.

    The reference pixel is ``q = ceil(x) - 1`` with ``ratio = x - q`` in (0, 1] (an integral x
    counts as ratio 1, so its left neighbour carries weight 0); the K taps are q - K/2 + 1 ..
    q + K/2.  Without antialias, linear has the weights (1 - ratio, ratio) and cubic Keys'
    four, written as the spec's reference formulas.  Antialias (downscaling only) stretches
    the filter by 1/scale: K grows to cover its support, each tap weighs
    ``filter((tap - x) * scale)`` and the weights are divided by their sum.
    """
    q = np.ceil(x) - 1
    ratio = x - q
    if opts.antialias and scale < 1:
        support = 1 if opts.mode == "linear" else 2
        first = math.floor(-support / scale) + 1
        taps = np.arange(first, 2 - first, dtype=np.float64)[:, None]
        arg = (taps - ratio) * scale
        if opts.mode == "linear":
            w = np.clip(1 - np.abs(arg), 0, 1)
        else:
            w = _keys(arg, opts.cubic_a)
        w = w / _sum(w)
        return q + first, w
    if opts.mode == "linear":
        return q, np.stack([1 - ratio, ratio])
    a, r, s = opts.cubic_a, ratio, 1 - ratio
    w = np.stack(
        [
            ((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
            ((a + 2) * r - (a + 3)) * r * r + 1,
            ((a + 2) * s - (a + 3)) * s * s + 1,
            ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a,
        ]
    )
    return q - 1, w


def _sum(w: np.ndarray) -> np.ndarray:
    """Sum over the taps (axis 0) in ascending order, one rounded add at a time."""
    acc = w[0].copy()
    for row in w[1:]:
        acc += row
    return acc


def axis_taps(
    opts: TapOptions,
    out_len: int,
    in_len: int,
    scale: float,
    roi: tuple[float, float] | None = None,
) -> AxisTaps:
    """Indices and weights of one resized axis (see the module docstring)."""
    x = source_coordinates(opts, out_len, in_len, scale, roi)
    outside = None
    if opts.coordinate == "tf_crop_and_resize":
        outside = (x < 0) | (x > in_len - 1)
        outside = outside if outside.any() else None
        x = np.clip(x, -4.0, in_len + 3.0)  # keeps far positions' taps finite (overwritten)
    if opts.mode == "nearest":
        pick = np.clip(_nearest(opts, x, scale), 0, in_len - 1)
        return AxisTaps(pick.astype(np.intp)[None, :], None, outside)
    first, w = _filter(opts, x, scale)
    idx = first + np.arange(w.shape[0], dtype=np.float64)[:, None]
    if opts.exclude_outside:
        w = np.where((idx < 0) | (idx > in_len - 1), 0.0, w)
        total = _sum(w)
        w = w / np.where(total == 0, 1.0, total)
    idx = np.clip(idx, 0, in_len - 1).astype(np.intp)
    return _simplified(idx, w, outside)


def _simplified(idx: np.ndarray, w: np.ndarray, outside: np.ndarray | None) -> AxisTaps:
    """Drops taps that weigh 0 everywhere; one weight of 1 per position becomes a selection."""
    keep = np.any(w != 0, axis=1)
    if not keep.all() and keep.any():
        idx, w = idx[keep], w[keep]
    ones = w == 1
    if np.all(ones.sum(axis=0) == 1) and np.all(ones | (w == 0)):
        pick = idx[np.argmax(ones, axis=0), np.arange(idx.shape[1])]
        return AxisTaps(pick[None, :], None, outside)
    return AxisTaps(idx, w, outside)
