"""The error function, vectorised over numpy arrays, from W. J. Cody's rational approximations.

W. J. Cody, "Rational Chebyshev approximation for the error function", Math. Comp. 23 (1969),
631-637, with the coefficients he published for double precision (the SPECFUN routine CALERF):

* ``|x| <= 0.46875``: erf(x) = x R1(x^2);
* ``0.46875 < |x| <= 4``: erfc(y) = exp(-y^2) R2(y);
* ``|x| > 4``: erfc(y) = exp(-y^2) / y (1/sqrt(pi) + R3(1/y^2) / y^2);

and erf = 1 - erfc beyond the first interval.  exp(-y^2) is formed as exp(-s^2) exp(-(y-s)(y+s))
with s = y rounded down to 1/16, so s^2 is exact and the error of squaring y is not amplified.

There are no branches per element: each interval's formula runs over the whole array with
``|x|`` clamped into its interval and a 0/1 mask picks the right one, so ``run`` allocates
nothing.  An interval no element reaches is skipped; float32 (the compute type of every float
narrower than float64) clamps at 4, where its erf is already 1, so it never evaluates the third
interval.  Relative error: below 5e-16 in float64, a few ulp in float32.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

THRESH = 0.46875
XBIG = 26.543  # erfc(XBIG) underflows float64; clamping there changes no result
SQRPI = 5.6418958354775628695e-1  # 1 / sqrt(pi)

A = (
    3.16112374387056560e00,
    1.13864154151050156e02,
    3.77485237685302021e02,
    3.20937758913846947e03,
    1.85777706184603153e-1,
)
B = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03, 2.84423683343917062e03)
C = (
    5.64188496988670089e-1,
    8.88314979438837594e00,
    6.61191906371416295e01,
    2.98635138197400131e02,
    8.81952221241769090e02,
    1.71204761263407058e03,
    2.05107837782607147e03,
    1.23033935479799725e03,
    2.15311535474403846e-8,
)
D = (
    1.57449261107098347e01,
    1.17693950891312499e02,
    5.37181101862009858e02,
    1.62138957456669019e03,
    3.29079923573345963e03,
    4.36261909014324716e03,
    3.43936767414372164e03,
    1.23033935480374942e03,
)
P = (
    3.05326634961232344e-1,
    3.60344899949804439e-1,
    1.25781726111229246e-1,
    1.60837851487422766e-2,
    6.58749161529837803e-4,
    1.63153871373020978e-2,
)
Q = (
    2.56852019228982242e00,
    1.87295284992346047e00,
    5.27905102951428412e-1,
    6.05183413124413191e-2,
    2.33520497626869185e-3,
)

#: Arrays ``erf_into`` needs besides x and out: this many of x's shape in the compute type ...
WORK_ARRAYS = 5
# ... plus one bool array of x's shape and one 0-d array of the compute type.


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """float64 stays float64; every narrower float is computed in float32."""
    return np.dtype(np.float64 if np.dtype(dtype) == np.float64 else np.float32)


def erf_into(
    x: np.ndarray,
    out: np.ndarray,
    work: list[np.ndarray],
    mask: np.ndarray,
    top: np.ndarray,
    exp: Callable[[np.ndarray], None] | None = None,
) -> None:
    """out = erf(x).  ``out`` may be ``x``'s storage: it is written once, at the end.

    ``exp(a)`` replaces ``a`` by exp(a) (numpy's when None; exact mode passes its own).
    """
    exp = exp or _np_exp
    if x.size == 0:
        return
    t, z, num, den, res = work
    k = _constants(t.dtype)
    # erf(y) = 1 - erfc(y) for y = |x| > THRESH, evaluated at t = clamp(y, THRESH, XBIG)
    np.abs(x, out=t)
    np.clip(t, k.thresh, k.xbig, out=t)
    biggest = float(np.fmax.reduce(t, axis=None, out=top))  # NaN-ignoring
    big = biggest > THRESH
    if big:
        arg = t
        if not k.clamped_at_four:  # (np.clip: numpy's minimum with a 0-d operand is slower)
            arg = np.clip(t, k.thresh, k.four, out=z)
        _ratio(arg, k.c, k.d, num, den)
        np.divide(num, den, out=res)  # R2 on [THRESH, 4]
        if biggest > 4.0:
            np.clip(t, k.four, k.xbig, out=z)
            np.multiply(z, z, out=z)
            np.divide(k.one, z, out=z)  # w = 1 / y^2
            _ratio(z, k.p, k.q, num, den)
            np.multiply(num, z, out=num)
            np.divide(num, den, out=num)
            np.subtract(k.sqrpi, num, out=num)
            np.clip(t, k.four, k.xbig, out=den)
            np.divide(num, den, out=num)  # R3 for y > 4
            np.greater(t, k.four, out=mask)
            _select(res, num, mask, z, k.one)
        # times exp(-y^2) = exp(-s^2) exp(-(y - s)(y + s)), s = trunc(16 y) / 16
        np.multiply(t, k.sixteen, out=z)
        np.trunc(z, out=z)
        np.multiply(z, k.sixteenth, out=z)
        np.subtract(t, z, out=num)
        np.add(t, z, out=den)
        np.multiply(num, den, out=num)
        np.negative(num, out=num)
        exp(num)
        np.multiply(z, z, out=z)
        np.negative(z, out=z)
        exp(z)
        np.multiply(z, num, out=z)
        np.multiply(res, z, out=res)  # erfc(y)
        np.subtract(k.half, res, out=res)
        np.add(res, k.half, out=res)  # (0.5 - erfc) + 0.5, as Cody does
        np.less_equal(t, k.thresh, out=mask)
    # erf(y) = y R1(y^2) for y <= THRESH, evaluated at z = min(y, THRESH)
    np.abs(x, out=z)
    np.clip(z, k.zero, k.thresh, out=z)
    np.multiply(z, z, out=t)
    _ratio(t, k.a, k.b, num, den)
    np.multiply(num, z, out=num)
    if big:
        np.divide(num, den, out=num)
        _select(res, num, mask, den, k.one)
    else:
        np.divide(num, den, out=res)
    np.copysign(res, x, out=res)
    np.copyto(out, res, casting="unsafe")


def _np_exp(a: np.ndarray) -> None:
    np.exp(a, out=a)


def _select(
    dst: np.ndarray, src: np.ndarray, mask: np.ndarray, f: np.ndarray, one: np.ndarray
) -> None:
    """dst = src where mask else dst, for finite values (every branch's are: their arguments
    are clamped), as src * m + dst * (1 - m) with m the mask as 0.0 / 1.0 in ``f``: a masked
    copy is several times slower on masks that change every few elements, and a bool operand
    would make numpy allocate a cast buffer.  ``src`` and ``f`` are overwritten."""
    np.copyto(f, mask)
    np.multiply(src, f, out=src)
    np.subtract(one, f, out=f)
    np.multiply(dst, f, out=dst)
    np.add(dst, src, out=dst)


def _ratio(
    v: np.ndarray,
    ps: tuple[np.ndarray, ...],
    qs: tuple[np.ndarray, ...],
    num: np.ndarray,
    den: np.ndarray,
) -> None:
    """Cody's Horner scheme, ``ps[-1]`` leading: num = (..(ps[-1] v + ps[0]) v ..) + ps[-2].

    The denominator is monic: den = (..((v + qs[0]) v + qs[1]) v ..) + qs[-1].
    """
    np.multiply(v, ps[-1], out=num)
    for p in ps[:-2]:
        np.add(num, p, out=num)
        np.multiply(num, v, out=num)
    np.add(num, ps[-2], out=num)
    np.add(v, qs[0], out=den)
    for q in qs[1:-1]:
        np.multiply(den, v, out=den)
        np.add(den, q, out=den)
    np.multiply(den, v, out=den)
    np.add(den, qs[-1], out=den)


class _Constants:
    """The coefficients as 0-d arrays of one type: ufuncs take them without a conversion."""

    def __init__(self, dtype: np.dtype) -> None:
        def arr(v: float) -> np.ndarray:
            a = np.array(v, dtype=dtype)
            a.flags.writeable = False
            return a

        self.a, self.b, self.c, self.d, self.p, self.q = (
            tuple(arr(v) for v in coeffs) for coeffs in (A, B, C, D, P, Q)
        )
        # float32's erf(y) rounds to 1 from y = 3.92: clamping at 4 never needs the third interval
        self.clamped_at_four = np.dtype(dtype) == np.float32
        xbig = 4.0 if self.clamped_at_four else XBIG
        self.thresh, self.xbig, self.four, self.one = arr(THRESH), arr(xbig), arr(4.0), arr(1.0)
        self.sqrpi, self.half, self.zero = arr(SQRPI), arr(0.5), arr(0.0)
        self.sixteen, self.sixteenth = arr(16.0), arr(1.0 / 16.0)


_CONSTANTS: dict[np.dtype, _Constants] = {}


def _constants(dtype: np.dtype) -> _Constants:
    found = _CONSTANTS.get(dtype)
    if found is None:
        found = _CONSTANTS.setdefault(dtype, _Constants(dtype))
    return found
