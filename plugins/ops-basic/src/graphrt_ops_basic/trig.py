"""Trigonometric and hyperbolic functions: one numpy ufunc each (:class:`.unary.Unary`).

Out-of-domain inputs (asin(2), acosh(0.5), atanh(1)) give NaN or +-inf as IEEE says, without
numpy's warnings (sessions run under ``np.errstate(all="ignore")``).  float16 computes through
numpy's float32 loops and bfloat16 through ml_dtypes', both rounded once to the type.  Not exact:
numpy's transcendental functions differ between machines (docs/exact-mode.md, rule 5).
"""

from __future__ import annotations

import numpy as np

from .unary import FloatUnary


class Sin(FloatUnary):
    ufunc = np.sin


class Cos(FloatUnary):
    ufunc = np.cos


class Tan(FloatUnary):
    ufunc = np.tan


class Asin(FloatUnary):
    ufunc = np.arcsin


class Acos(FloatUnary):
    ufunc = np.arccos


class Atan(FloatUnary):
    ufunc = np.arctan


class Sinh(FloatUnary):
    ufunc = np.sinh


class Cosh(FloatUnary):
    ufunc = np.cosh


class Asinh(FloatUnary):
    ufunc = np.arcsinh


class Acosh(FloatUnary):
    ufunc = np.arccosh


class Atanh(FloatUnary):
    ufunc = np.arctanh
