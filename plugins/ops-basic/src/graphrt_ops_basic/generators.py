"""Random generators: RandomNormal, RandomUniform, their *Like forms, Multinomial, Bernoulli.

Each kernel owns one numpy ``Generator`` (PCG64), made when the session builds the kernel:
seeded from the ``seed`` attribute when the node has one, so a new session draws the same
sequence of outputs run after run; from fresh OS entropy otherwise.  Every run advances the
stream (a seeded node does not repeat its first draw, as in onnxruntime).  Kernels are shared
by concurrent runs, so draws happen under the kernel's lock: concurrent runs get distinct
parts of the one stream, in the order they take the lock.

The planner never evaluates these at plan time (``graphrt.attrs.NONDETERMINISTIC``): a
RandomNormal with no input is a static step that draws in every run.  They are never exact.

The ``seed`` attribute is a float: a non-negative integral value seeds with that integer (seed
0.0 is ``default_rng(0)``), any other value with the bits of its IEEE double.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel, from_onnx, name_of

from ._util import constant, is_float
from .unary import require_float

#: Output types of the generators (T2 of the *Like forms); narrower floats draw in float32.
FLOAT_CODES = (1, 10, 11, 16)  # float, float16, double, bfloat16
DRAW_TYPES = (np.dtype(np.float32), np.dtype(np.float64))


def seed_entropy(seed: float) -> int:
    """The integer a float ``seed`` attribute seeds PCG64 with."""
    seed = float(seed)
    if seed >= 0 and seed.is_integer():
        return int(seed)
    return int(np.array(seed, np.float64).view(np.uint64))


class _Random(OpKernel):
    """One generator per kernel, advanced under a lock."""

    supports_exact = False

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        seed = node.attr("seed")
        if seed is not None and not isinstance(seed, (int, float)):
            raise self.fail(f"seed must be a float, got {seed!r}")
        self._rng = np.random.default_rng(None if seed is None else seed_entropy(seed))
        self._lock = threading.Lock()

    def draw(self, fill: Callable[[np.random.Generator], Any]) -> Any:
        with self._lock:
            return fill(self._rng)

    def _dtype_attr(self, default: np.dtype | None, allowed: Sequence[int]) -> np.dtype | None:
        code = self.node.attr("dtype")
        if code is None:
            return default
        if not isinstance(code, int) or code not in allowed:
            raise self.fail(f"dtype {code!r} is not an allowed output type")
        try:
            return from_onnx(code)
        except KeyError:
            raise self.fail(f"dtype {code} is not supported") from None


_SIXTEEN = constant(np.uint32, 16)
_ONE = constant(np.uint16, 1)
_HALF = constant(np.uint32, 0x7FFF)


def to_bfloat16(w: np.ndarray, out: np.ndarray) -> None:
    """out = float32 ``w`` rounded to bfloat16 (nearest, ties to even), through integer ops on
    the bits; ``w`` is overwritten.  numpy 1 runs ml_dtypes' cast as a legacy user-type cast,
    which allocates a small array on every call.  A NaN numpy makes stays a quiet NaN."""
    bits, high = w.view(np.uint32), out.view(np.uint16)
    np.right_shift(bits, _SIXTEEN, out=high, casting="unsafe")
    np.bitwise_and(high, _ONE, out=high)  # the kept part's lowest bit: ties go to even
    np.add(bits, high, out=bits)
    np.add(bits, _HALF, out=bits)
    np.right_shift(bits, _SIXTEEN, out=high, casting="unsafe")


@dataclasses.dataclass(frozen=True)
class _Affine:
    work: int | None  # float32 scratch when the output is float16/bfloat16
    scale: np.ndarray  # 0-d of the drawing type
    shift: np.ndarray


class _Continuous(_Random):
    """Draw a standard variate, then ``out = variate * scale + shift`` in the drawing type."""

    normal = False

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        if self.normal:
            self.scale, self.shift = float(node.attr("scale", 1.0)), float(node.attr("mean", 0.0))
        else:
            low, high = float(node.attr("low", 0.0)), float(node.attr("high", 1.0))
            self.scale, self.shift = high - low, low

    def output(self, ctx: InferContext) -> tuple[np.dtype, tuple[int, ...]]:
        raise NotImplementedError

    def infer(self, ctx: InferContext) -> None:
        dtype, shape = self.output(ctx)
        ctx.set_output(0, dtype, shape)
        draw = dtype if dtype in DRAW_TYPES else np.dtype(np.float32)
        work = ctx.add_scratch(draw, shape) if draw != dtype else None
        ctx.prepared = _Affine(work, constant(draw, self.scale), constant(draw, self.shift))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Affine = ctx.prepared
        out = outputs[0]
        w = out if p.work is None else ctx.scratch[p.work]
        if self.normal:
            self.draw(lambda rng: rng.standard_normal(out=w, dtype=w.dtype))
        else:
            self.draw(lambda rng: rng.random(out=w, dtype=w.dtype))
        np.multiply(w, p.scale, out=w)
        np.add(w, p.shift, out=w)
        if w is out:
            return
        if out.dtype.kind == "V":  # bfloat16
            to_bfloat16(w, out)
        else:
            np.copyto(out, w, casting="unsafe")


class _Shaped(_Continuous):
    """RandomNormal, RandomUniform: the ``shape`` and ``dtype`` attributes."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        shape = node.attr("shape")
        if shape is None:
            raise self.fail("the attribute 'shape' is required")
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise self.fail(f"shape must be a list of non-negative ints, got {shape!r}")
        self.shape = tuple(int(d) for d in shape)
        self.dtype = self._dtype_attr(np.dtype(np.float32), FLOAT_CODES)

    def output(self, ctx: InferContext) -> tuple[np.dtype, tuple[int, ...]]:
        return self.dtype, self.shape


class _Like(_Continuous):
    """RandomNormalLike, RandomUniformLike: the input's shape, ``dtype`` or the input's type."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.dtype = self._dtype_attr(None, FLOAT_CODES)

    def output(self, ctx: InferContext) -> tuple[np.dtype, tuple[int, ...]]:
        dtype = self.dtype or ctx.dtype(0)
        if not is_float(dtype) or dtype.itemsize < 2:
            message = f"cannot draw {name_of(dtype)} values: give a float dtype attribute"
            raise self.fail(message, "invalid_input")
        return dtype, tuple(ctx.shape(0))


class RandomNormal(_Shaped):
    normal = True


class RandomUniform(_Shaped):
    normal = False


class RandomNormalLike(_Like):
    normal = True


class RandomUniformLike(_Like):
    normal = False


@dataclasses.dataclass(frozen=True)
class _Bernoulli:
    draws: int  # scratch: uniform [0, 1) draws in the probabilities' compute type
    probs: int | None  # float32 scratch: float16/bfloat16 probabilities
    hits: int | None  # bool scratch when the output is not bool


class Bernoulli(_Random):
    """1 where a uniform [0, 1) draw is below the probability p, else 0 (p <= 0 gives 0,
    p >= 1 gives 1, NaN gives 0)."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        allowed = (1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 16)
        self.dtype = self._dtype_attr(None, allowed)

    def infer(self, ctx: InferContext) -> None:
        pdtype, shape = ctx.dtype(0), tuple(ctx.shape(0))
        if not is_float(pdtype) or pdtype.itemsize < 2:
            message = f"the probabilities must be float16, float or double, got {name_of(pdtype)}"
            raise self.fail(message, "invalid_input")
        dtype = self.dtype or pdtype
        ctx.set_output(0, dtype, shape)
        ct = pdtype if pdtype in DRAW_TYPES else np.dtype(np.float32)
        ctx.prepared = _Bernoulli(
            ctx.add_scratch(ct, shape),
            ctx.add_scratch(ct, shape) if ct != pdtype else None,
            ctx.add_scratch(np.bool_, shape) if dtype != np.bool_ else None,
        )

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Bernoulli = ctx.prepared
        s = ctx.scratch
        probs, out = inputs[0], outputs[0]
        if p.probs is not None:
            np.copyto(s[p.probs], probs, casting="unsafe")
            probs = s[p.probs]
        draws = s[p.draws]
        self.draw(lambda rng: rng.random(out=draws, dtype=draws.dtype))
        hits = out if p.hits is None else s[p.hits]
        np.less(draws, probs, out=hits)
        if hits is not out:
            np.copyto(out, hits, casting="unsafe")


@dataclasses.dataclass(frozen=True)
class _Multinomial:
    cdf: int  # float64 scratch [batch, classes]
    top: int  # float64 scratch [batch, 1]
    draws: int  # float64 scratch [batch, samples]


class Multinomial(_Random):
    """``sample_size`` class indices per batch row, drawn with probabilities softmax(row) (the
    input holds unnormalised log-probabilities): the first class whose normalised cumulative
    probability exceeds a uniform [0, 1) draw."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.samples = node.attr("sample_size", 1)
        if not isinstance(self.samples, int) or self.samples < 0:
            raise self.fail(f"sample_size must be a non-negative int, got {self.samples!r}")
        self.dtype = self._dtype_attr(np.dtype(np.int32), (6, 7))

    def infer(self, ctx: InferContext) -> None:
        require_float(self, ctx, "the input")
        shape = tuple(ctx.shape(0))
        if len(shape) != 2:
            raise self.fail(
                f"the input must be [batch_size, class_size], got shape {shape}", "invalid_input"
            )
        batch, classes = shape
        if classes == 0 and batch and self.samples:
            raise self.fail("cannot draw from zero classes", "invalid_input")
        ctx.set_output(0, self.dtype, (batch, self.samples))
        f64 = np.float64
        ctx.prepared = _Multinomial(
            ctx.add_scratch(f64, shape),
            ctx.add_scratch(f64, (batch, 1)),
            ctx.add_scratch(f64, (batch, self.samples)),
        )

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Multinomial = ctx.prepared
        s = ctx.scratch
        out = outputs[0]
        cdf, top, draws = s[p.cdf], s[p.top], s[p.draws]
        if not out.size:
            return
        np.copyto(cdf, inputs[0], casting="unsafe")
        np.maximum.reduce(cdf, axis=1, keepdims=True, out=top)
        np.subtract(cdf, top, out=cdf)
        np.exp(cdf, out=cdf)
        np.cumsum(cdf, axis=1, out=cdf)
        np.copyto(top, cdf[:, -1:])
        np.divide(cdf, top, out=cdf)  # the last column is exactly 1
        self.draw(lambda rng: rng.random(out=draws))
        last = cdf.shape[1] - 1
        # One vectorised search per batch row.  np.searchsorted has no ``out=``: each row's
        # indices are a new array, the one allocation of a steady run (a search without it
        # would compare every draw with every class: samples * classes work and memory).
        for b in range(cdf.shape[0]):
            found = np.searchsorted(cdf[b], draws[b], side="right")
            np.minimum(found, last, out=found)  # a NaN row (all -inf): some class, in range
            np.copyto(out[b], found, casting="unsafe")
