"""Interpolation taps shared by GridSample (grid.py) and DeformConv (deform_conv.py).

Both read an image at fractional positions, one spatial axis at a time: per axis a tap index
and weight for every point (:func:`linear_taps` for the two linear taps), then the axes' taps
combined into flat indices and weights of the whole image (:func:`combine_taps`).  Positions
outside the image read a zero border, so a tap outside adds exactly 0 (never ``0 * x`` of a
pixel, which an inf or NaN there would turn into NaN).  Every step writes into arrays the
caller planned, so a run allocates nothing.

RoiAlign (roi_align.py) samples bilinearly too, but by the original Caffe2 kernel's rules
(clamping to the edge pixel, a weight of 0 beyond one pixel outside), so it has its own table.
"""

from __future__ import annotations

import itertools

import numpy as np


def linear_taps(
    c: np.ndarray,
    x0: np.ndarray,
    idx: np.ndarray,
    weight: np.ndarray,
    offset: np.ndarray,
    one: np.ndarray,
) -> None:
    """The two linear taps of positions ``c`` along one axis: ``idx[0] = floor(c) + offset``
    and ``idx[1] = idx[0] + 1``, ``weight[0] = 1 - t`` and ``weight[1] = t`` with
    ``t = c - floor(c)``.  ``x0`` is a temporary like ``c``; ``offset`` (intp) and ``one`` (c's
    type) are 0-d constants (a Python scalar would allocate a 0-d array every call)."""
    np.floor(c, out=x0)
    np.subtract(c, x0, out=weight[1])
    np.subtract(one, weight[1], out=weight[0])
    np.copyto(idx[0], x0, casting="unsafe")
    np.add(idx[0], offset, out=idx[0])
    np.add(idx[0], _ONE, out=idx[1])


_ONE = np.array(1, np.intp)
_ONE.flags.writeable = False


def combine_taps(
    idx: np.ndarray,
    weight: np.ndarray | None,
    flats: np.ndarray | None,
    weights: np.ndarray | None,
) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
    """Every tap of the image, in row-major order over the axes' taps: its flat index (the sum
    of the axes' ``index * stride``, in ``flats``) and its weight (the product of the axes'
    weights, axis 0 first, rounded to ``weights``' type).

    ``idx`` and ``weight`` are (axes, taps per axis, ...points); ``flats`` and ``weights`` are
    (taps ** axes, ...points).  With one axis the indices are ``idx[0]`` itself (``flats`` may
    be None).  Without ``weight`` (a selection) only the indices are made.
    """
    r, k = idx.shape[:2]
    taps = list(itertools.product(range(k), repeat=r))
    if r == 1:
        flat_list = [idx[0, j] for j in range(k)]
    else:
        flat_list = list(flats)
        for flat, tap in zip(flat_list, taps):
            np.add(idx[0, tap[0]], idx[1, tap[1]], out=flat)
            for a in range(2, r):
                np.add(flat, idx[a, tap[a]], out=flat)
    if weight is None:
        return flat_list, None
    weight_list = list(weights)
    for w, tap in zip(weight_list, taps):
        if r == 1:
            np.copyto(w, weight[0, tap[0]], casting="unsafe")
        else:
            np.multiply(weight[0, tap[0]], weight[1, tap[1]], out=w, casting="unsafe")
        for a in range(2, r):
            np.multiply(w, weight[a, tap[a]], out=w, casting="unsafe")
    return flat_list, weight_list
