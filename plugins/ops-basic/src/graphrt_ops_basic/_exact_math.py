"""exp, expm1, sigmoid and tanh with the same bits on every machine (exact mode).

Only IEEE-754 basic operations appear, each a separate numpy call rounded to the element type
(so no fused multiply-add), plus ``rint`` (roundToIntegralTiesToEven), conversions of integral
values between float and int, integer shifts and adds, and reinterpreting integer bits as a
float.  Every step is spelled out in docs/exact-mode.md ("Transcendental functions") in the
order a scalar or SIMD C kernel must follow to reproduce the bits.

exp(x), x of type float32 (float64 alike with the wider constants):

1. NaN inputs are remembered in a mask and replaced by 0; x is clamped to [LO, HI].  Below LO
   the true result rounds to +0, above HI it overflows; the clamped value gives exactly that.
2. n = rint(x * LOG2E);  r = (x - n * LN2_HI) - n * LN2_LO   (Cody and Waite's reduction:
   LN2_HI has few enough significant bits that n * LN2_HI is exact).
3. em1 = ((q * r) * r) + r  with  q = Horner(C[-1], ..., C[0]) at r, the Taylor coefficients
   1/k! for k = 2..DEG rounded to the type:  q = C[-1];  q = q * r + C[-2]; ...
4. exp = (em1 + 1) * 2^n1 * 2^n2 with n1 = n >> 1 (floor), n2 = n - n1; each power of two is
   built from its exponent bits, and the two exact-or-once-rounded multiplies give overflow to
   inf and gradual underflow (one rounding into the subnormals) without special cases.
5. NaN inputs give the canonical quiet NaN.

Arrays: ``work`` is an :class:`ExpWork` of flat arrays at least as long as x; ``out`` may be
x's storage (x is read first).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ._erf import erf_into
from ._util import _CANONICAL_NAN, rewrite_nan


@dataclasses.dataclass(frozen=True)
class Consts:
    """The constants of one float type as read-only 0-d arrays (ufuncs take them as they are)."""

    dtype: np.dtype
    itype: np.dtype  # the integer type of the same width
    lo: np.ndarray  # clamp: exp(LO) rounds to +0
    hi: np.ndarray  # clamp: exp(HI) overflows
    log2e: np.ndarray
    ln2_hi: np.ndarray
    ln2_lo: np.ndarray
    coeffs: tuple[np.ndarray, ...]  # 1/k! for k = 2..DEG
    one: np.ndarray
    two: np.ndarray
    minus_two: np.ndarray
    zero: np.ndarray
    tanh_lo: np.ndarray  # tanh clamps -2|x| here: tanh is 1 in the type well before
    nan: np.ndarray
    # integer constants (itype)
    i_one: np.ndarray
    i_mant: np.ndarray  # explicit mantissa bits
    i_bias: np.ndarray  # exponent bias
    i_sign: np.ndarray  # the sign bit


#: Bit patterns of the reduction constants (for the C kernels), checked in the tests against
#: ln 2 computed to 60 digits: LN2_HI is ln 2 with its low mantissa bits cleared (15 significant
#: bits in float32, 33 in float64), LN2_LO is ln 2 - LN2_HI rounded, LOG2E is 1/ln 2 rounded.
BITS = {
    np.dtype(np.float32): {"ln2_hi": 0x3F317200, "ln2_lo": 0x35BFBE8E, "log2e": 0x3FB8AA3B},
    np.dtype(np.float64): {
        "ln2_hi": 0x3FE62E42FEF00000,
        "ln2_lo": 0x3DD473DE6AF278ED,
        "log2e": 0x3FF71547652B82FE,
    },
}
#: Degree of the Taylor polynomial of exp on |r| <= ln2/2 (truncation below 0.2 ulp).
DEGREE = {np.dtype(np.float32): 7, np.dtype(np.float64): 13}
#: Clamps (LO, HI) of exp's argument and tanh's clamp of -2|x|.
LIMITS = {np.dtype(np.float32): (-104.0, 89.0, -20.0), np.dtype(np.float64): (-746.0, 710.0, -40.0)}


def _make(dtype: np.dtype) -> Consts:
    dtype = np.dtype(dtype)
    itype = np.dtype(np.int32 if dtype == np.float32 else np.int64)
    utype = np.dtype(np.uint32 if dtype == np.float32 else np.uint64)

    def arr(v: float | int | np.ndarray, t: np.dtype = dtype) -> np.ndarray:
        a = np.array(v).astype(t) if isinstance(v, np.ndarray) else np.array(v, dtype=t)
        a.flags.writeable = False
        return a

    def from_bits(b: int) -> np.ndarray:
        return arr(np.array(b, dtype=utype).view(dtype))

    bits = BITS[dtype]
    lo, hi, tanh_lo = LIMITS[dtype]
    coeffs = tuple(arr(1.0 / math.factorial(k)) for k in range(2, DEGREE[dtype] + 1))
    width = 8 * dtype.itemsize
    return Consts(
        dtype, itype, arr(lo), arr(hi), from_bits(bits["log2e"]), from_bits(bits["ln2_hi"]),
        from_bits(bits["ln2_lo"]), coeffs, arr(1.0), arr(2.0), arr(-2.0), arr(0.0), arr(tanh_lo),
        arr(_CANONICAL_NAN[dtype]), arr(1, itype), arr(np.finfo(dtype).nmant, itype),
        arr(np.finfo(dtype).maxexp - 1, itype),
        arr(np.array(1 << (width - 1), utype).view(itype), itype),
    )  # fmt: skip


CONSTS = {d: _make(d) for d in (np.dtype(np.float32), np.dtype(np.float64))}


@dataclasses.dataclass(frozen=True)
class ExpWork:
    """Scratch of one evaluation: two float arrays, two integer arrays, a mask (all flat)."""

    f0: np.ndarray
    f1: np.ndarray
    i0: np.ndarray
    i1: np.ndarray
    mask: np.ndarray

    def __getitem__(self, s: slice) -> ExpWork:
        return ExpWork(self.f0[s], self.f1[s], self.i0[s], self.i1[s], self.mask[s])


def work_specs(dtype: np.dtype, n: int) -> list[tuple[np.dtype, tuple[int, ...]]]:
    """(dtype, shape) of the arrays of an :class:`ExpWork` for ``n`` elements of ``dtype``."""
    k = CONSTS[np.dtype(dtype)]
    return [(k.dtype, (n,)), (k.dtype, (n,)), (k.itype, (n,)), (k.itype, (n,)), (np.bool_, (n,))]


def make_work(arrays: list[np.ndarray]) -> ExpWork:
    return ExpWork(*arrays)


def _reduce(x: np.ndarray, w: ExpWork, k: Consts, out: np.ndarray) -> None:
    """Steps 1-3: w.mask = isnan(x); w.i0 = n; w.f1 = em1(r) = e^r - 1.  ``out`` is clobbered."""
    np.isnan(x, out=w.mask)
    np.clip(x, k.lo, k.hi, out=w.f0)
    np.copyto(w.f0, k.zero, where=w.mask)
    np.multiply(w.f0, k.log2e, out=w.f1)
    np.rint(w.f1, out=w.f1)  # n, integral
    np.copyto(w.i0, w.f1, casting="unsafe")  # exact: |n| < 2^11
    np.multiply(w.f1, k.ln2_hi, out=out)  # exact
    np.subtract(w.f0, out, out=w.f0)
    np.multiply(w.f1, k.ln2_lo, out=out)
    np.subtract(w.f0, out, out=w.f0)  # r
    r, q, c = w.f0, w.f1, k.coeffs
    np.multiply(r, c[-1], out=q)
    np.add(q, c[-2], out=q)
    for coeff in reversed(c[:-2]):
        np.multiply(q, r, out=q)
        np.add(q, coeff, out=q)
    np.multiply(q, r, out=q)
    np.multiply(q, r, out=q)
    np.add(q, r, out=q)  # em1 = (q r) r + r


def _pow2(n: np.ndarray, k: Consts) -> np.ndarray:
    """2^n for integers n in [1 - bias, bias], in place: the bits (n + bias) << mant."""
    np.add(n, k.i_bias, out=n)
    np.left_shift(n, k.i_mant, out=n)
    return n.view(k.dtype)


def exp_into(x: np.ndarray, out: np.ndarray, w: ExpWork) -> None:
    """out = exp(x) (docs/exact-mode.md, "exp").  x, out: flat arrays of float32 or float64."""
    if x.size == 0:
        return
    k = CONSTS[x.dtype]
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        _reduce(x, w, k, out)
        np.add(w.f1, k.one, out=w.f1)  # p = e^r
        np.right_shift(w.i0, k.i_one, out=w.i1)  # n1 = floor(n / 2)
        np.subtract(w.i0, w.i1, out=w.i0)  # n2 = n - n1
        np.multiply(w.f1, _pow2(w.i1, k), out=w.f1)  # exact
        np.multiply(w.f1, _pow2(w.i0, k), out=out)  # the one rounding (or overflow)
        np.copyto(out, k.nan, where=w.mask)


def _expm1_neg(z: np.ndarray, w: ExpWork, k: Consts) -> None:
    """z = exp(z) - 1 in place for z in [TANH_LO, 0] or NaN: 2^n em1(r) + (2^n - 1).

    2^n em1(r) is exact, and so is 2^n - 1 down to n = -mant - 1; the sum is one rounding.
    Leaves w.mask = isnan(z) and garbage where it is set.
    """
    _reduce(z, w, k, z)
    s = _pow2(w.i0, k)
    np.multiply(w.f1, s, out=w.f1)
    np.subtract(s, k.one, out=z)
    np.add(w.f1, z, out=z)


def tanh_into(x: np.ndarray, out: np.ndarray, w: ExpWork) -> None:
    """out = tanh(x) = sign(x) * |-t / (t + 2)| with t = expm1(max(-2|x|, TANH_LO)).

    -2|x| is exact.  Small |x|: t = -2|x| (1 + O(x)) keeps full relative accuracy, and for a
    subnormal x the result is x.  Large |x|: t = -1 and the result is +-1; the clamp (far
    beyond where tanh rounds to 1) keeps 2^n normal.  The sign is x's sign bit, OR-ed into the
    magnitude's bits.  NaN gives the canonical NaN.
    """
    if x.size == 0:
        return
    k = CONSTS[x.dtype]
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        np.bitwise_and(x.view(k.itype), k.i_sign, out=w.i1)  # x's sign bit
        np.absolute(x, out=out)  # the last read of x (out may be its storage)
        np.multiply(out, k.minus_two, out=out)
        np.maximum(out, k.tanh_lo, out=out)  # NaN stays NaN
        _expm1_neg(out, w, k)  # t
        np.add(out, k.two, out=w.f0)  # t + 2
        np.divide(out, w.f0, out=out)
        np.absolute(out, out=out)  # |t / (t + 2)| (t <= 0)
        bits = out.view(k.itype)
        np.bitwise_or(bits, w.i1, out=bits)
        np.copyto(out, k.nan, where=w.mask)


def sigmoid_into(x: np.ndarray, out: np.ndarray, w: ExpWork, e: np.ndarray) -> None:
    """out = num / (1 + e) with e = exp(-|x|) and num = max(e, sign(x)): 1 for x > 0, e for
    x < 0 (and 1 = e at x = +-0).

    e <= 1 never overflows; for x below about -87 (float32) e is subnormal or 0 and so is the
    result (e / (1 + e) = e there).  ``e`` is one more flat float array.  NaN gives the
    canonical NaN.
    """
    if x.size == 0:
        return
    k = CONSTS[x.dtype]
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        np.absolute(x, out=e)
        np.sign(x, out=out)  # the last read of x (out may be its storage)
        np.negative(e, out=e)
        exp_into(e, e, w)  # w.mask: where x is NaN
        np.maximum(e, out, out=out)  # num
        np.add(e, k.one, out=e)
        np.divide(out, e, out=out)
        np.copyto(out, k.nan, where=w.mask)


def erf_exact_into(
    x: np.ndarray,
    out: np.ndarray,
    erf_work: list[np.ndarray],
    mask: np.ndarray,
    top: np.ndarray,
    w: ExpWork,
) -> None:
    """out = erf(x) by :func:`._erf.erf_into` (Cody's approximations, fixed operation order)
    with :func:`exp_into` for its two exponentials; NaN results become the canonical NaN."""

    def exp(a: np.ndarray) -> None:
        exp_into(a, a, w[: a.size])

    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        erf_into(x, out, erf_work, mask, top, exp)
    if out.dtype in _CANONICAL_NAN:
        rewrite_nan(out, mask)
