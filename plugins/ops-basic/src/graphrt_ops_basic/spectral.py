"""DFT and STFT: discrete Fourier transforms of real or complex signals, through numpy.fft.

ONNX holds a complex tensor as a real one whose last dimension is 2 (real, imaginary); a real
signal has a last dimension of 1.  A contiguous ``[..., 2]`` float32/float64 array *is* an
array of complex64/complex128 in memory, so the kernels read complex inputs and write complex
outputs through such views, and pocketfft writes the transform straight into the planned
output.  On numpy >= 2 the kernels call the gufuncs behind ``np.fft`` (:class:`Transform`)
with a scale factor made once per plan in the compute type, so float32 transforms run in
pocketfft's single-precision loops and a steady-state run allocates nothing.  (``np.fft``'s
wrapper passes the forward transforms' factor as a Python ``1``, which selects the double
loops: it casts the signal through an 8 KiB buffer in every call and rounds a double result.)
float16 and bfloat16 compute in float32 (a cast into scratch) and round once into the output;
numpy 1, without ``out=``, computes in float64 into a new array and copies it.  STFT's frames
are a strided view of the signal; a window multiplies them into scratch.

Neither is exact: pocketfft's factorisations and twiddle factors (computed with the machine's
sin/cos) decide the rounding, so ``supports_exact`` stays False.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._util import is_float
from .windows import scalar_input

#: numpy >= 2 computes float32 transforms in single precision and writes into ``out``.
FFT_OUT = "out" in inspect.signature(np.fft.fft).parameters

try:  # numpy >= 2: the gufuncs np.fft.fft/ifft/rfft/irfft call, (x, scale factor) -> out
    from numpy.fft import _pocketfft_umath as _gufuncs
except ImportError:  # numpy 1
    _gufuncs = None

_COMPLEX = {
    np.dtype(np.float32): np.dtype(np.complex64),
    np.dtype(np.float64): np.dtype(np.complex128),
}


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """float64 stays float64; float32, float16 and bfloat16 compute in float32."""
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


def complex_view(x: np.ndarray, real: np.dtype) -> np.ndarray | None:
    """``x[..., 0] + 1j * x[..., 1]`` without a copy when x is contiguous and of type ``real``."""
    if x.dtype != real or not x.flags.c_contiguous:
        return None
    return x.view(_COMPLEX[real])[..., 0]


def load_complex(x: np.ndarray, real: np.dtype, scratch: np.ndarray | None) -> np.ndarray:
    """x ([..., 2]) as a complex array: a view, else the real and imaginary parts copied into
    ``scratch`` (complex, x.shape[:-1]; a new array when the plan gave none)."""
    view = complex_view(x, real)
    if view is not None:
        return view
    if scratch is None:
        scratch = np.empty(x.shape[:-1], _COMPLEX[real])
    np.copyto(scratch.real, x[..., 0], casting="unsafe")
    np.copyto(scratch.imag, x[..., 1], casting="unsafe")
    return scratch


def load_real(x: np.ndarray, real: np.dtype, scratch: np.ndarray | None) -> np.ndarray:
    """x ([..., 1]) as a real array of type ``real``: a view, else a cast into ``scratch``."""
    if x.dtype == real:
        return x[..., 0]
    if scratch is None:
        scratch = np.empty(x.shape[:-1], real)
    np.copyto(scratch, x[..., 0], casting="unsafe")
    return scratch


@dataclasses.dataclass(frozen=True)
class Transform:
    """``np.fft.<kind>(x, n, axis, out=out)``: fft, ifft, rfft (the half spectrum) or irfft
    (``n`` real samples of a half spectrum), zero-padded or truncated to ``n``.

    With the gufuncs (numpy >= 2, ``out`` given) it calls the one ``np.fft`` calls with the
    scale factor (1, or ``1 / n`` for the inverses) as a 0-d array of the compute type: the
    loop of that type runs, with no cast and no buffer.  The inverses are the bits of
    ``np.fft`` (which passes the same factor); the forward transforms of float32 are
    pocketfft's single-precision results where ``np.fft`` rounds double ones.
    """

    kind: str
    n: int
    fct: np.ndarray  # 0-d, the compute type

    @classmethod
    def make(cls, kind: str, n: int, real: np.dtype) -> Transform:
        inverse = kind in ("ifft", "irfft")
        fct = np.array(np.reciprocal(n, dtype=real) if inverse else 1, real)
        return cls(kind, n, fct)

    def __call__(self, x: np.ndarray, axis: int, out: np.ndarray | None = None) -> np.ndarray:
        if out is None or not FFT_OUT:
            return getattr(np.fft, self.kind)(x, self.n, axis)
        if _gufuncs is None or self.fct.dtype != out.real.dtype:
            return getattr(np.fft, self.kind)(x, self.n, axis, out=out)
        name = self.kind
        if name == "rfft":
            name = "rfft_n_even" if self.n % 2 == 0 else "rfft_n_odd"
        return getattr(_gufuncs, name)(x, self.fct, axes=[(axis,), (), (axis,)], out=out)


def store(
    transform: Transform,
    x: np.ndarray,
    axis: int,
    y: np.ndarray,
    tmp: np.ndarray | None,
    complex_out: bool,
    real: np.dtype,
) -> None:
    """y = transform(x, axis) with y the ONNX output ([..., 2] complex or [..., 1] real).

    Straight into y when its type is the compute type (numpy >= 2), else through ``tmp`` (or a
    new array on numpy 1) and a cast copy.
    """
    if FFT_OUT and y.dtype == real and y.flags.c_contiguous:
        target = y.view(_COMPLEX[real])[..., 0] if complex_out else y[..., 0]
        transform(x, axis, out=target)
        return
    result = transform(x, axis, out=tmp if FFT_OUT else None)
    if complex_out:
        np.copyto(y[..., 0], result.real, casting="unsafe")
        np.copyto(y[..., 1], result.imag, casting="unsafe")
    else:
        np.copyto(y[..., 0], result, casting="unsafe")


def _float_input(kernel: OpKernel, ctx: InferContext, i: int, what: str) -> np.dtype:
    dtype = ctx.dtype(i)
    if not is_float(dtype):
        raise kernel.fail(f"{what} must be float16, bfloat16, float32 or float64, got {dtype}")
    return dtype


def _onoff(kernel: OpKernel, name: str, default: int) -> bool:
    value = kernel.node.attr(name, default)
    if value not in (0, 1):
        raise kernel.fail(f"{name} must be 0 or 1, got {value}")
    return bool(value)


@dataclasses.dataclass(frozen=True)
class _DftPlan:
    transform: Transform
    axis: int  # in the signal, x[..., 0]
    complex_in: bool
    complex_out: bool
    real: np.dtype  # compute type
    load: int | None  # scratch: the input in the compute type
    tmp: int | None  # scratch: the result when the output's type is not the compute type


class DFT(OpKernel):
    """The (inverse) DFT along one signal axis, zero-padded or truncated to ``dft_length``.

    onesided=1: a real input's half spectrum (RFFT, ``n // 2 + 1`` bins), or with inverse=1
    the real signal of a half spectrum (IRFFT, ``dft_length`` default ``2 * (bins - 1)``).
    The axis is an attribute (default 1) before opset 20 and an input (default -2) from 20.
    """

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.inverse = _onoff(self, "inverse", 0)
        self.onesided = _onoff(self, "onesided", 0)
        self.axis_attr = int(node.attr("axis", 1)) if node.opset < 20 else None

    def infer(self, ctx: InferContext) -> None:
        dtype = _float_input(self, ctx, 0, "the input")
        shape = ctx.shape(0)
        rank = len(shape)
        if rank < 2 or shape[-1] not in (1, 2):
            raise self.fail(
                f"the input must end in a dimension of 1 (real) or 2 (complex), got shape "
                f"{list(shape)}",
                "invalid_input",
            )
        complex_in = shape[-1] == 2
        if self.axis_attr is not None:
            axis, kind = self.axis_attr, "invalid_model"
        elif ctx.has_input(2):
            axis, kind = scalar_input(self, ctx, 2, "axis"), "invalid_input"
        else:
            axis, kind = -2, "invalid_model"
        if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
            raise self.fail(f"axis {axis} is out of range for rank {rank}", kind)
        axis = axis + rank if axis < 0 else axis
        size = shape[axis]
        irfft = self.onesided and self.inverse
        if self.onesided and complex_in != self.inverse:
            need = "complex" if self.inverse else "real"
            raise self.fail(
                f"onesided with inverse={int(self.inverse)} takes a {need} input, got shape "
                f"{list(shape)}",
                "invalid_input",
            )
        if ctx.has_input(1):
            n = scalar_input(self, ctx, 1, "dft_length")
        else:
            n = 2 * (size - 1) if irfft else size
        if n < 1:
            raise self.fail(f"dft_length must be positive, got {n}", "invalid_input")
        out = list(shape)
        if irfft:
            kind, out[axis], out[-1] = "irfft", n, 1
        elif self.onesided:
            kind, out[axis], out[-1] = "rfft", n // 2 + 1, 2
        else:
            kind, out[axis], out[-1] = ("ifft" if self.inverse else "fft"), n, 2
        ctx.set_output(0, dtype, out)
        real = compute_dtype(dtype)
        load = None
        if dtype != real:
            load = ctx.add_scratch(_COMPLEX[real] if complex_in else real, shape[:-1])
        tmp = None
        if dtype != real:
            tmp = ctx.add_scratch(real if irfft else _COMPLEX[real], out[:-1])
        transform = Transform.make(kind, n, real)
        ctx.prepared = _DftPlan(transform, axis, complex_in, not irfft, real, load, tmp)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _DftPlan = ctx.prepared
        x = inputs[0]
        scratch = None if p.load is None else ctx.scratch[p.load]
        if p.complex_in:
            signal = load_complex(x, p.real, scratch)
        else:
            signal = load_real(x, p.real, scratch)
        tmp = None if p.tmp is None else ctx.scratch[p.tmp]
        store(p.transform, signal, p.axis, outputs[0], tmp, p.complex_out, p.real)


@dataclasses.dataclass(frozen=True)
class _StftPlan:
    transform: Transform  # of each frame: fft, or rfft (onesided of a real signal)
    step: int
    length: int  # frame_length
    frames: int
    bins: int
    complex_in: bool
    real: np.dtype
    load: int | None  # scratch: the signal in the compute type, [batch, signal_length]
    window: int | None  # scratch: the window in the frames' type (a multiply casts nothing)
    windowed: int | None  # scratch: the frames times the window, [batch, frames, length]
    full: int | None  # scratch: the whole spectrum (a complex signal's onesided output)
    tmp: int | None  # scratch: the result when the output's type is not the compute type


class STFT(OpKernel):
    """DFTs of the frames ``signal[b, f * step : f * step + frame_length]``, each multiplied
    by ``window`` when given; onesided (the default) keeps ``frame_length // 2 + 1`` bins.

    The frames are a strided view of the signal (no copy) unless a window multiplies them into
    scratch; pocketfft transforms every frame of every batch in one call.
    """

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.onesided = _onoff(self, "onesided", 1)

    def infer(self, ctx: InferContext) -> None:
        dtype = _float_input(self, ctx, 0, "the signal")
        shape = ctx.shape(0)
        if len(shape) != 3 or shape[-1] not in (1, 2):
            raise self.fail(
                f"the signal must have shape [batch, length, 1 or 2], got {list(shape)}",
                "invalid_input",
            )
        batch, size, parts = shape
        step = scalar_input(self, ctx, 1, "frame_step")
        if step < 1:
            raise self.fail(f"frame_step must be positive, got {step}", "invalid_input")
        windowed = ctx.has_input(2)
        length = None
        if windowed:
            if ctx.dtype(2) != dtype:
                raise self.fail(f"the window is {ctx.dtype(2)}, the signal {dtype}")
            if len(ctx.shape(2)) != 1:
                raise self.fail(
                    f"the window must be 1-D, got shape {list(ctx.shape(2))}", "invalid_input"
                )
            length = ctx.shape(2)[0]
        if ctx.has_input(3):
            given = scalar_input(self, ctx, 3, "frame_length")
            if length is not None and given != length:
                raise self.fail(
                    f"frame_length {given} differs from the window's length {length}",
                    "invalid_input",
                )
            length = given
        if length is None:
            length = size
        if not 1 <= length <= size:
            raise self.fail(
                f"frame_length {length} must lie in [1, signal length {size}]", "invalid_input"
            )
        frames = (size - length) // step + 1
        bins = length // 2 + 1 if self.onesided else length
        out = (batch, frames, bins, 2)
        ctx.set_output(0, dtype, out)
        complex_in = parts == 2
        real = compute_dtype(dtype)
        kind = _COMPLEX[real] if complex_in else real
        cast = dtype != real
        transform = "rfft" if self.onesided and not complex_in else "fft"
        plan = _StftPlan(
            Transform.make(transform, length, real),
            step,
            length,
            frames,
            bins,
            complex_in,
            real,
            ctx.add_scratch(kind, (batch, size)) if cast else None,
            ctx.add_scratch(kind, (length,)) if windowed and (cast or complex_in) else None,
            ctx.add_scratch(kind, (batch, frames, length)) if windowed else None,
            ctx.add_scratch(kind, (batch, frames, length))
            if complex_in and self.onesided
            else None,
            ctx.add_scratch(_COMPLEX[real], out[:-1]) if cast else None,
        )
        ctx.prepared = plan

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _StftPlan = ctx.prepared
        sc = ctx.scratch
        x = inputs[0]
        load = None if p.load is None else sc[p.load]
        signal = load_complex(x, p.real, load) if p.complex_in else load_real(x, p.real, load)
        batch = signal.shape[0]
        s0, s1 = signal.strides
        frames = np.lib.stride_tricks.as_strided(
            signal, (batch, p.frames, p.length), (s0, p.step * s1, s1), writeable=False
        )
        if p.windowed is not None:
            window = inputs[2]
            if p.window is not None:
                np.copyto(sc[p.window], window, casting="unsafe")
                window = sc[p.window]
            frames = np.multiply(frames, window, out=sc[p.windowed])
        tmp = None if p.tmp is None else sc[p.tmp]
        y = outputs[0]
        if p.full is not None:  # a complex signal's onesided output: the first bins
            full = p.transform(frames, -1, out=sc[p.full] if FFT_OUT else None)
            np.copyto(y[..., 0], full[..., : p.bins].real, casting="unsafe")
            np.copyto(y[..., 1], full[..., : p.bins].imag, casting="unsafe")
            return
        store(p.transform, frames, -1, y, tmp, True, p.real)
