"""HannWindow, HammingWindow, BlackmanWindow and MelWeightMatrix: tables computed from scalars.

Their outputs depend on input values only (a size, a sample rate), so ``infer`` computes them
and states them as constant outputs: once per plan when the scalars are constants (the usual
case: the node is folded away), once per run when they are run-time inputs (a dynamic node).

Both are exact, because nothing here calls the machine's math library:

* A window is ``a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N)`` (``N`` = size when periodic,
  size - 1 when symmetric), the coefficients of the ONNX function bodies (Hann 0.5/0.5,
  Hamming 25/46 and 21/46, Blackman 0.42/0.5/0.08).  :func:`cos_turns` computes
  ``cos(2 pi m / N)`` for integers from IEEE basic operations alone: the octant of ``m / N`` in
  integer arithmetic, one division and one multiply by pi/4 into ``[0, pi/4]``, and fixed
  Taylor polynomials of sin and cos by Horner's rule (error a few float64 ulps).  Everything is
  float64, rounded once to ``output_datatype`` (integer types truncate, as Cast does).  The
  function bodies compute in float32 with ``Cos``; the results differ by float32 roundings.
  A symmetric window of size 1 divides 0 by 0: NaN, as the function body and onnxruntime give
  (0 for integer output types).
* MelWeightMatrix places ``num_mel_bins + 2`` points evenly on the mel scale between the edges
  (``mel(f) = 2595 log10(1 + f / 700)``, the step ``(high - low) / (num_mel_bins + 2)`` of the
  backend cases and onnxruntime), maps each back to hertz and to the spectrogram bin
  ``floor((dft_length + 1) hz / sample_rate)``, and draws triangle i from bin i to bin i + 2
  with peak 1 at bin i + 1 (rising ``(j - lo) / (c - lo)``, falling ``(hi - j) / (hi - c)``,
  each one float64 division).  The two edge mels come from Python's decimal module (correctly
  rounded log10), the points' ``exp`` from :mod:`._exact_math`; the bins are integers, so the
  table is the same on every machine.
"""

from __future__ import annotations

import decimal
import math
import threading
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from graphrt.plugin import MAX_SLAB, InferContext, NodeInfo, OpKernel, from_onnx

from . import _exact_math as em
from ._util import is_float

#: pi / 4 and ln 10, correctly rounded to float64.
PI_4 = float.fromhex("0x1.921fb54442d18p-1")
LN10 = float.fromhex("0x1.26bb1bbb55516p+1")
#: Taylor coefficients (-1)^k / (2k)! and (-1)^k / (2k + 1)!, k = 0..8: on [0, pi/4] the
#: first omitted terms are below 3e-18, a fortieth of a float64 ulp of the results.
_COS = [float(Fraction((-1) ** k, math.factorial(2 * k))) for k in range(9)]
_SIN = [float(Fraction((-1) ** k, math.factorial(2 * k + 1))) for k in range(9)]


def _horner(coeffs: list[float], y: np.ndarray) -> np.ndarray:
    acc = np.full_like(y, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc *= y
        acc += c
    return acc


def cos_turns(m: np.ndarray, period: int) -> np.ndarray:
    """cos(2 pi m / period) in float64 for int64 ``0 <= m < period`` (period < 2^59), the same
    bits on every machine: IEEE basic operations only, each one numpy call."""
    k = m * 8
    octant = k // period
    r = k - octant * period  # in [0, period)
    odd = (octant & 1).astype(bool)
    r = np.where(odd, period - r, r)  # odd octants: measured back from the octant's end
    x = r.astype(np.float64) / float(period) * PI_4  # in [0, pi/4]
    y = x * x
    cos = _horner(_COS, y)
    sin = _horner(_SIN, y) * x
    # octants 0..7: cos, sin, -sin, -cos, -cos, -sin, sin, cos of the reduced angle
    out = np.where(((octant + 1) // 2) % 2 == 1, sin, cos)
    np.negative(out, out=out, where=(octant + 2) // 4 == 1)
    return out


def _output_type(kernel: OpKernel) -> np.dtype:
    code = kernel.node.attr("output_datatype", 1)
    try:
        dtype = from_onnx(code)
    except KeyError:
        raise kernel.fail(f"output_datatype {code} is not an element type") from None
    if not (is_float(dtype) or dtype.kind in "iu") or dtype.itemsize < 1 or _sub_byte(dtype):
        raise kernel.fail(f"output_datatype {code} ({dtype}) is not a numeric type it allows")
    return dtype


def _sub_byte(dtype: np.dtype) -> bool:
    """float8/float4/int4...: not in the operators' output types (T2/T3)."""
    return dtype.kind == "V" and not dtype.name.startswith(("bfloat16", "float16"))


def scalar_input(
    kernel: OpKernel, ctx: InferContext, i: int, what: str, floats: bool = False
) -> Any:
    """Input i's one value as a Python int (a float with ``floats``); its type is checked
    (a bad type is an invalid model, a value count other than one an invalid input).

    A run-time input makes the node dynamic, so this runs in every run: one ``item`` call.
    """
    dtype = ctx.dtype(i)
    if not (is_float(dtype) if floats else dtype.kind in "iu"):
        need = "a float type" if floats else "int32 or int64"
        raise kernel.fail(f"{what} must be {need}, got {dtype}")
    value = ctx.value(i)
    if value.size != 1:
        raise kernel.fail(f"{what} must be one value, got {value.size}", "invalid_input")
    return float(value.reshape(-1)[0]) if floats else int(value.item())


def to_output(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """float64 values rounded once to a float ``dtype``.  Integer types see the value the
    function bodies cast, a float32, truncated (NaN gives 0): a Blackman peak of
    0.9999999999999999 is 1.0 in float32, and 1 as an integer."""
    if dtype.kind in "iu":
        values = np.trunc(np.where(np.isnan(values), 0.0, values).astype(np.float32))
    return values.astype(dtype)


def check_table(kernel: OpKernel, nbytes: int) -> None:
    """A table is computed in float64 before the planner sees its size: refuse one over the
    planner's own limit (``unsupported``, as a plan over it is) before allocating it."""
    if nbytes > MAX_SLAB:
        raise kernel.fail(
            f"the table would take {nbytes / 2**30:.1f} GiB; graphrt refuses plans over "
            f"{MAX_SLAB / 2**30:.0f} GiB",
            "unsupported",
        )


class _Refused(ValueError):
    """Inputs that give no table; the kernel reports them as ``invalid_input``."""


#: Tables made lately, by their inputs: a dynamic node (a run-time size) asks for the same
#: table in every run.  Read-only, at most MEMO_ENTRIES of at most MEMO_BYTES each, shared by
#: every session and run (the lock keeps concurrent evictions from iterating a changing dict).
_MEMO: dict[tuple, np.ndarray] = {}
_MEMO_LOCK = threading.Lock()
MEMO_ENTRIES, MEMO_BYTES = 64, 1 << 20


def _memo(key: tuple, make: Callable[[], np.ndarray]) -> np.ndarray:
    found = _MEMO.get(key)
    if found is not None:
        return found
    table = make()
    table.flags.writeable = False
    if table.nbytes <= MEMO_BYTES:
        with _MEMO_LOCK:
            if len(_MEMO) >= MEMO_ENTRIES:
                _MEMO.pop(next(iter(_MEMO)), None)
            _MEMO[key] = table
    return table


def window(coeffs: tuple[float, float, float], size: int, periodic: bool) -> np.ndarray:
    """a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N) for n in [0, size), float64."""
    a0, a1, a2 = coeffs
    period = size if periodic else size - 1
    if period <= 0:  # a symmetric window of one sample: 0 / 0
        return np.full(size, np.nan)
    n = np.arange(size, dtype=np.int64)
    w = a0 - a1 * cos_turns(n % period, period)
    if a2:
        w += a2 * cos_turns(n * 2 % period, period)
    return w


class _Window(OpKernel):
    """a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N) for n in [0, size)."""

    supports_exact = True
    COEFFS = (0.0, 0.0, 0.0)

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        periodic = node.attr("periodic", 1)
        if periodic not in (0, 1):
            raise self.fail(f"periodic must be 0 or 1, got {periodic}")
        self.periodic = bool(periodic)
        self.dtype = _output_type(self)

    def infer(self, ctx: InferContext) -> None:
        size = scalar_input(self, ctx, 0, "size")
        if size < 0:
            raise self.fail(f"size must not be negative, got {size}", "invalid_input")
        check_table(self, size * 8)
        key = (self.COEFFS, size, self.periodic, self.dtype)
        make = lambda: to_output(window(self.COEFFS, size, self.periodic), self.dtype)
        ctx.set_constant_output(0, _memo(key, make))


class HannWindow(_Window):
    COEFFS = (0.5, 0.5, 0.0)


class HammingWindow(_Window):
    COEFFS = (25 / 46, 21 / 46, 0.0)


class BlackmanWindow(_Window):
    COEFFS = (0.42, 0.5, 0.08)


def _mel(hertz: float) -> float:
    """2595 log10(1 + f / 700), correctly rounded log10 at 40 digits, then float64."""
    with decimal.localcontext() as dc:
        dc.prec = 40
        dc.traps[decimal.InvalidOperation] = False
        return float(2595 * (1 + decimal.Decimal(hertz) / 700).log10())


def mel_bins(num: int, length: int, rate: int, lower: float, upper: float) -> np.ndarray:
    """The spectrogram bin of each of the num + 2 points (int64)."""
    low, high = _mel(lower), _mel(upper)
    step = (high - low) / (num + 2)
    mel = np.arange(num + 2, dtype=np.float64) * step + low
    x = mel / 2595.0 * LN10
    e = np.empty_like(x)
    work = em.make_work([np.empty(s, d) for d, s in em.work_specs(x.dtype, x.size)])
    em.exp_into(x, e, work)
    hertz = (e - 1.0) * 700.0
    where = (length + 1) * hertz / rate
    if not np.all(np.isfinite(where)):
        raise _Refused(f"the edges {lower} and {upper} Hz give no finite frequencies")
    return np.floor(where).astype(np.int64)


def triangles(f: np.ndarray, rows: int) -> np.ndarray:
    """[rows, f.size - 2] float64: filter i rises from bin f[i] to 1 at f[i + 1], falls to
    f[i + 2]."""
    lo, c, hi = f[:-2], f[1:-1], f[2:]
    rising = c >= lo  # rows lo..c (a single 1 at c when lo == c)
    falling = hi > c  # rows c..hi - 1
    first = np.minimum(np.where(rising, lo, rows), np.where(falling, c, rows))
    last = np.maximum(np.where(rising, c, -1), np.where(falling, hi - 1, -1))
    if first.size and (first.min() < 0 or last.max() >= rows):
        raise _Refused(
            f"the filters reach spectrogram bins {int(first.min())}..{int(last.max())}, "
            f"outside [0, {rows}) (edges beyond sample_rate / 2?)"
        )
    j = np.arange(rows, dtype=np.int64)[:, None]
    out = np.zeros((rows, f.size - 2))
    with np.errstate(divide="ignore", invalid="ignore"):
        up = (j - lo) / (c - lo).astype(np.float64)
        down = (hi - j) / (hi - c).astype(np.float64)
    np.copyto(out, up, where=rising & (lo <= j) & (j <= c) & (c > lo))
    np.copyto(out, 1.0, where=(c == lo) & (j == c))
    np.copyto(out, down, where=falling & (c <= j) & (j < hi))
    return out


class MelWeightMatrix(OpKernel):
    """[dft_length // 2 + 1, num_mel_bins] triangular filters of peak 1 (module docstring)."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.dtype = _output_type(self)

    def infer(self, ctx: InferContext) -> None:
        num = scalar_input(self, ctx, 0, "num_mel_bins")
        length = scalar_input(self, ctx, 1, "dft_length")
        rate = scalar_input(self, ctx, 2, "sample_rate")
        lower = scalar_input(self, ctx, 3, "lower_edge_hertz", floats=True)
        upper = scalar_input(self, ctx, 4, "upper_edge_hertz", floats=True)
        if num < 0 or length < 1 or rate < 1:
            raise self.fail(
                f"num_mel_bins {num}, dft_length {length} and sample_rate {rate} must be "
                "non-negative, positive and positive",
                "invalid_input",
            )
        check_table(self, (length // 2 + 1) * (num + 2) * 8)

        def make() -> np.ndarray:
            bins = mel_bins(num, length, rate, lower, upper)
            return to_output(triangles(bins, length // 2 + 1), self.dtype)

        try:
            table = _memo(("mel", num, length, rate, lower, upper, self.dtype), make)
        except _Refused as exc:
            raise self.fail(str(exc), "invalid_input") from None
        ctx.set_constant_output(0, table)
