"""Exp, Tanh, Sigmoid, Erf (and exact Relu) on the native element-wise kernels, falling back
to numpy.

The native kernels follow exact mode's algorithms (graphrt_ops_basic._exact_math and _erf)
operation for operation, so on every path they give the bits of ops-basic's exact kernels.

* exact mode, float32: always the native kernel (1.3-60x faster than ops-basic's numpy exact
  functions on every path and size measured);
* fast mode, float32: the native kernel where it beat ops-basic's numpy kernel at every
  measured size and changes no fused kernel's bits (``FAST_NATIVE``), else the numpy kernel;
* other dtypes: the numpy kernel the path was given, planned as if this wrapper did not exist.

A tensor is cut into blocks of ``BLOCK`` elements that run on the plugin's own threads (as many
as the session's intra-op threads); the block bounds depend on the size only and every
element's arithmetic is its own, so results do not depend on the thread count.  ``out`` may be
the input's storage (ops-basic's unary kernels run in place).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from graphrt.plugin import InferContext, KernelContext

from . import _native
from .kernels import NativeKernel

#: Elements per block spread over the intra-op threads (ops-basic's exact block size).
BLOCK = 1 << 16
#: Fast mode takes the native kernel for these functions (bench/unary_micro.py, one thread,
#: plugins/ops-simd/README.md): numpy's own float32 exp and tanh are SIMD code and faster than
#: the exact-order kernels; ops-basic's Erf is a recipe of many numpy passes and loses to one
#: native pass at every size.  Sigmoid would win too (1.6-4.5x), but fast mode keeps ops-basic's
#: recipe: a MatMul/Gemm/Conv fused with its Sigmoid applies that recipe in its epilogue, and
#: fusion must not change fast-mode bits (tests/test_fusion.py).  The scalar path's Erf wins at
#: most sizes but not all (0.9x at 1e5), so its fast mode stays numpy's.
FAST_NATIVE: dict[str, frozenset[str]] = {
    "scalar": frozenset(),
    "avx2": frozenset({"erf", "gelu"}),
    "avx512": frozenset({"erf", "gelu"}),
}
F32 = np.dtype(np.float32)


@dataclasses.dataclass(frozen=True)
class _Plan:
    n: int
    blocks: int


class NativeUnary(NativeKernel):
    """out = fn(x) on the native kernel of one ISA; anything else on the numpy kernel."""

    fn: ClassVar[str]
    plan_type = _Plan
    in_place_input = 0

    def infer(self, ctx: InferContext) -> None:
        shape = ctx.shape(0)
        n = math.prod(shape)
        native = ctx.exact or self.fn in FAST_NATIVE.get(self.isa, ())
        if ctx.dtype(0) != F32 or not native:
            return self.fallback(ctx)
        ctx.set_output(0, F32, shape)
        ctx.prepared = _Plan(n, max(1, -(-n // BLOCK)))

    def bind_native(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        p, x, out = ctx.prepared, inputs[0], outputs[0]
        if not out.flags.c_contiguous:
            return functools.partial(_run_copying, self.fn, x, out, self.isa, p, ctx)
        if not x.flags.c_contiguous:
            return functools.partial(_run_copying_x, self.fn, x, out, self.isa, p, ctx)
        return _unary_call(self.fn, x, out, self.isa, p, ctx)


def _unary_call(
    fn: str, x: np.ndarray, out: np.ndarray, isa: str, p: _Plan, ctx: KernelContext
) -> Callable[[], None]:
    """One native call; a tensor of several blocks runs them on the plugin's own threads.
    Gelu (fast mode only: it has no exact kernel) runs on fast_math.inc's rational erf."""
    threads = ctx.threads if p.blocks > 1 else 1
    if fn == "gelu":
        return functools.partial(_native.unary_fast, fn, x, out, isa, 0, p.n, threads)
    return functools.partial(_native.unary, fn, x, out, isa, 0, p.n, threads)


def _run_copying_x(
    fn: str, x: np.ndarray, out: np.ndarray, isa: str, p: _Plan, ctx: KernelContext
) -> None:
    """A strided input (a view some kernel produced): one contiguous copy per run."""
    _unary_call(fn, np.ascontiguousarray(x), out, isa, p, ctx)()


def _run_copying(
    fn: str, x: np.ndarray, out: np.ndarray, isa: str, p: _Plan, ctx: KernelContext
) -> None:
    """A strided output: computed contiguously, then copied into place."""
    res = np.ascontiguousarray(x, dtype=F32).copy()
    _run_copying_x(fn, res, res, isa, p, ctx)
    np.copyto(out, res)


class Exp(NativeUnary):
    fn = "exp"


class Tanh(NativeUnary):
    fn = "tanh"


class Sigmoid(NativeUnary):
    fn = "sigmoid"


class Erf(NativeUnary):
    fn = "erf"


class Gelu(NativeUnary):
    """The erf form (``approximate="none"``), fast mode only (Gelu is not exact): one native
    pass instead of ops-basic's blocks of numpy calls, on a rational erf within 4e-7 of erf
    (src/native/fast_math.inc; 4-5x faster than exact mode's erf).  Every fused product on a
    native path ends in this same kernel (:mod:`.fused`), so fusion keeps bits."""

    fn = "gelu"

    def infer(self, ctx: InferContext) -> None:
        if self.base.tanh:
            return self.fallback(ctx)
        super().infer(ctx)


class Relu(NativeUnary):
    """Exact mode only (ops-basic's: np.maximum(x, 0), + 0 so that -0 is +0, a NaN made the
    canonical one: three numpy passes, light_resnet50's 49 Relus 5.9 ms a run in exact mode);
    fast mode keeps numpy's maximum, which a fused product's epilogue matches."""

    fn = "relu"


UNARY = {"Exp": Exp, "Tanh": Tanh, "Sigmoid": Sigmoid, "Erf": Erf, "Relu": Relu}


def native_gelu_call(x: np.ndarray, isa: str, ctx: KernelContext) -> Callable[[], None]:
    """x = gelu(x) in place on a float32 ``x``, in Gelu's blocks (a strided x via a copy)."""
    p = _Plan(x.size, max(1, -(-x.size // BLOCK)))
    if not x.flags.c_contiguous:
        return functools.partial(_run_copying, "gelu", x, x, isa, p, ctx)
    return _unary_call("gelu", x, x, isa, p, ctx)
