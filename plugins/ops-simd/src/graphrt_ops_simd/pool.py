"""MaxPool and AveragePool on the native kernels, falling back to the table's numpy kernels.

ops-basic reduces a window axis by axis with numpy calls over strided views, a few calls per
output row of taps; the native kernel does the same separable reduction in one pass per output
row, vectorised (bench/bench_interleaved.py: MaxPool was a tenth of light_squeezenet's time).
Float32, 2-D windows, without the Indices output.  A maximum is exact in any order and a NaN
in a window gives NaN, so the values are ops-basic's (which of -0 and +0 a tie keeps aside),
however the planes are split over the plugin's threads; exact mode (every path, scalar too)
then adds +0 and rewrites NaN as ops-basic's exact MaxPool does (docs/exact-mode.md), so the
bits are its too (light_resnet50's 64 x 112 x 112 pool: 0.85 ms -> 0.1).  It shares AveragePool's
two-pass kernel (the reduction a template parameter: -inf pads, maxps; planes that may hold a
NaN take a NaN-keeping maximum): 1024 7 x 7 planes 3 x 3/s1/p1 took 310 us, now 34.

AveragePool (fast mode only; exact mode's tap-by-tap order stays ops-basic's) sums each window
separably, column sums into zero-padded rows then the window sums along them, and multiplies
each by the reciprocal of its output's count (count_include_pad 0 or 1, made once per bound
call): float32, 4-D, any window geometry (src/native/pool_driver.inc; ops-basic's numpy passes
took 180 us a pool of light_inception_v2, the native kernel about 45).  Each plane is one
thread's, summed in one order fixed by the geometry (the same on every ISA), so the bits do
not depend on the thread count; they may differ from ops-basic's in the last place or two.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext
from graphrt_ops_basic import pool as basic_pool

from . import _native
from .kernels import NativeKernel, trial_infer

F32 = np.dtype(np.float32)
#: Paths whose fast mode uses the native pools (exact mode's MaxPool takes every path).
FAST_ISAS = frozenset({"avx2", "avx512"})
#: Window reads (outputs x taps) from which the planes are split over the intra-op threads.
PARALLEL_READS = 1 << 18
#: The most floats of the native kernel's per-thread work buffer (src/native/module.cpp's
#: MAX_POOL_WORK): a ring of planes' padded rows (avg_work_floats).  A larger geometry (a
#: 139-byte model with a pad of 2^29 asked for gigabytes per thread) is refused before anything
#: is allocated.
MAX_WORK_FLOATS = 1 << 26


@dataclasses.dataclass(frozen=True)
class _Plan:
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]  # MaxPool: before each axis; AveragePool: h, w begin then h, w end
    split: bool  # planes spread over the plugin's threads (large enough to pay)
    work_bytes: int = 0  # one thread's native work buffer, outside the slab
    include_pad: bool = False  # AveragePool's count_include_pad
    divisor_bytes: int = 0  # AveragePool's per-output counts in the bound call, outside the slab
    exact: bool = False  # MaxPool in exact mode: +0 added and NaN made canonical after


class _NativePool(NativeKernel):
    """What the two native pools share: when ops-basic's plan can go native, and the binding."""

    plan_type = _Plan
    #: What the memory budget's refusal names (the native code allocates it, outside the slab).
    reserved = "the native work buffer (one per thread)"

    #: Whether exact mode's bits come from the native kernel (a maximum: any order).
    serves_exact = False

    def native_window(self, ctx: InferContext) -> tuple[Any, Any, Any] | None:
        """ops-basic's plan, output type and shape where the native kernel serves the node."""
        trial = trial_infer(self.base, ctx)
        plan = trial.prepared
        dtype, out_shape = trial.output_types()[0]
        if (
            (ctx.exact and not self.serves_exact)
            or (not ctx.exact and self.isa not in FAST_ISAS)
            or dtype != F32
            or len(out_shape) != 4
            or not isinstance(plan, basic_pool._Plan)
        ):
            return None
        return plan, dtype, out_shape

    def bind_native(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        p: _Plan = ctx.prepared
        x, y = inputs[0], outputs[0]
        if not x.flags.c_contiguous:  # a strided view: one contiguous copy per run
            return functools.partial(_contiguous_x, self, ctx, inputs, outputs)
        threads = ctx.threads if p.split else 1
        # counted against the session's memory budget (up to 256 MiB a thread by the native bound)
        ctx.reserve(p.work_bytes * threads + p.divisor_bytes, self.reserved)
        call = self.native_call(x, y, p, threads)  # arguments checked once, here
        if not p.exact:
            return call
        return functools.partial(_exact_max, call, y, np.zeros((), F32))

    def native_call(self, x: Any, y: Any, p: _Plan, threads: int) -> Callable[[], None]:
        raise NotImplementedError


class MaxPool(_NativePool):
    serves_exact = True

    def infer(self, ctx: InferContext) -> None:
        window = self.native_window(ctx)
        if window is None or ctx.num_outputs > 1 or window[0].indices is not None:
            return self.fallback(ctx)
        plan, dtype, out_shape = window
        w = plan.w
        empty = not math.prod(out_shape)
        if not empty and work_floats(w, ctx.shape(0), out_shape) > MAX_WORK_FLOATS:
            raise self.fail(
                f"the window geometry (kernel {list(w.kernel)}, strides {list(w.strides)}, "
                f"dilations {list(w.dilations)}, pads {list(w.begin)}) needs more than "
                f"{MAX_WORK_FLOATS} floats of native work space",
                "unsupported",
            )
        # the kernel's ring of padded planes (AveragePool's layout) may outgrow the bound where
        # the rows alone do not (an image of 2^25 floats): ops-basic's numpy passes need none
        work = 0 if empty else avg_work_floats(w, ctx.shape(0), out_shape)[0]
        if work > MAX_WORK_FLOATS:
            return self.fallback(ctx)
        ctx.set_output(0, dtype, out_shape)
        reads = math.prod(out_shape) * math.prod(w.kernel)
        ctx.prepared = _Plan(
            tuple(w.kernel), tuple(w.strides), tuple(w.dilations), tuple(w.begin),
            reads >= PARALLEL_READS, work * F32.itemsize, exact=ctx.exact,
        )  # fmt: skip

    def native_call(self, x: Any, y: Any, p: _Plan, threads: int) -> Callable[[], None]:
        window = (p.kernel, p.strides, p.dilations, p.pads, self.isa)
        return _native.MaxPoolCall(x, y, *window, 0, -1, threads)


class AveragePool(_NativePool):
    reserved = "the native work buffer (one per thread) and the divisor"

    def infer(self, ctx: InferContext) -> None:
        window = self.native_window(ctx)
        if window is None or window[0].divisor is None:
            return self.fallback(ctx)
        plan, dtype, out_shape = window
        w = plan.w
        # an empty output (a batch of 0): the native call writes nothing and allocates nothing
        work, divisor = (
            avg_work_floats(w, ctx.shape(0), out_shape) if math.prod(out_shape) else (0, 0)
        )
        if work > MAX_WORK_FLOATS:
            return self.fallback(ctx)  # ops-basic's separable numpy passes need no such buffer
        ctx.set_output(0, dtype, out_shape)
        reads = math.prod(out_shape) * math.prod(w.kernel)
        ctx.prepared = _Plan(
            tuple(w.kernel), tuple(w.strides), tuple(w.dilations), (*w.begin, *w.end),
            reads >= PARALLEL_READS, work * F32.itemsize, bool(plan.divisor.include_pad),
            divisor * F32.itemsize,
        )  # fmt: skip

    def native_call(self, x: Any, y: Any, p: _Plan, threads: int) -> Callable[[], None]:
        window = (p.kernel, p.strides, p.dilations, p.pads, p.include_pad, self.isa)
        return _native.AvgPoolCall(x, y, *window, 0, -1, threads)


@dataclasses.dataclass(frozen=True)
class _GlobalPlan:
    split: bool  # planes spread over the plugin's threads (the native call decides how)


class GlobalAveragePool(NativeKernel):
    """Fast mode, float32: each plane's sum in vectors (``plane_means``), times 1 / count.
    numpy's kernel is a BLAS product with ones: 10 us for 1000 planes of 13 x 13 alone, 43-53 us
    inside light_squeezenet, whose BLAS threads sleep between calls (onnxruntime: 20-28)."""

    plan_type = _GlobalPlan

    def infer(self, ctx: InferContext) -> None:
        trial = trial_infer(self.base, ctx)  # ops-basic's checks, errors and output type
        dtype, out_shape = trial.output_types()[0]
        if ctx.exact or self.isa not in FAST_ISAS or dtype != F32:
            return self.fallback(ctx)
        ctx.set_output(0, dtype, out_shape)
        ctx.prepared = _GlobalPlan(math.prod(ctx.shape(0)) >= PARALLEL_READS)

    def bind_native(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        x = inputs[0]
        if not x.flags.c_contiguous:  # a strided view: one contiguous copy per run
            return functools.partial(_contiguous_x, self, ctx, inputs, outputs)
        threads = ctx.threads if ctx.prepared.split else 1
        return _native.GlobalAvgPoolCall(x, outputs[0], self.isa, threads)


def avg_work_floats(w: Any, x_shape: Sequence[int], out_shape: Sequence[int]) -> tuple[int, int]:
    """Floats of the native AveragePool's work buffer (2 to 32 planes' padded rows of column sums)
    and of its divisor, as src/native/module.cpp's AvgPoolCall sizes them (or more than any
    bound where it would refuse the padded height)."""
    oh, ow = out_shape[2], out_shape[3]
    if not oh or not ow:
        return 0, 0
    extents, steps = [], []
    for a, o in enumerate((oh, ow)):
        s = w.strides[a] if o > 1 else 1  # the native call's normalisation
        d = w.dilations[a] if w.kernel[a] > 1 else 1
        extents.append(max(w.begin[a] + x_shape[2 + a], (o - 1) * s + (w.kernel[a] - 1) * d + 1))
        steps.append((s, d))
    if extents[0] > 2**40:
        return 2**63, 0
    sw, dw = steps[1]
    wp = -(-extents[1] // sw) * sw
    slack = 64 + (w.kernel[1] - 1) * dw
    run = oh * wp + slack  # one plane's column sums; ring: kernels.h's avgpool_ring
    return min(32, max(2, 4096 // run)) * run, oh * (wp // sw) + slack


def work_floats(w: Any, x_shape: Sequence[int], out_shape: Sequence[int]) -> int:
    """oh + 1 rows padded to the widest read (or more than any bound where a padded extent would
    overflow the kernel's int64 offsets): MaxPool geometries past the bound are refused, as
    before the kernel took AveragePool's layout (avg_work_floats: what it allocates)."""
    extents = [
        max(
            w.begin[a] + x_shape[2 + a],
            (out_shape[2 + a] - 1) * w.strides[a] + (w.kernel[a] - 1) * w.dilations[a] + 1,
        )
        for a in (0, 1)
    ]
    if max(extents) >= 2**63:
        return 2**63
    return (out_shape[2] + 1) * extents[1]


def _exact_max(call: Callable[[], None], y: np.ndarray, zero: np.ndarray) -> None:
    """Exact mode's MaxPool: the maxima, then y + 0 (a -0 maximum becomes +0, nothing else
    changes) and canonical NaN."""
    call()
    np.add(y, zero, out=y)
    _native.canonicalize_nan(y)


def _contiguous_x(
    kernel: Any, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
) -> None:
    kernel.bind_native(ctx, [np.ascontiguousarray(inputs[0])], outputs)()
