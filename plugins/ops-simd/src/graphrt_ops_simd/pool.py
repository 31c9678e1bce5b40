"""MaxPool on the native kernel, falling back to the table's numpy kernel.

ops-basic reduces a window axis by axis with numpy calls over strided views, a few calls per
output row of taps; the native kernel does the same separable reduction in one pass per output
row, vectorised (bench/bench_interleaved.py: MaxPool was a tenth of light_squeezenet's time).
Fast mode, float32, 2-D windows, without the Indices output.  A maximum is exact in any order
and a NaN in a window gives NaN, so the values are ops-basic's (which of -0 and +0 a tie keeps
aside), however the planes are split over the plugin's threads.
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
#: Paths whose fast mode uses the native MaxPool (the scalar path is for exact mode).
FAST_ISAS = frozenset({"avx2", "avx512"})
#: Window reads (outputs x taps) from which the planes are split over the intra-op threads.
PARALLEL_READS = 1 << 18
#: The most floats of the native kernel's per-thread work buffer (src/native/module.cpp's
#: MAX_POOL_WORK): oh + 1 padded rows.  A larger geometry (a 139-byte model with a pad of 2^29
#: asked for gigabytes per thread) is refused before anything is allocated.
MAX_WORK_FLOATS = 1 << 26


@dataclasses.dataclass(frozen=True)
class _Plan:
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]
    split: bool  # planes spread over the plugin's threads (large enough to pay)
    work_bytes: int = 0  # one thread's native work buffer, outside the slab


class MaxPool(NativeKernel):
    plan_type = _Plan

    def infer(self, ctx: InferContext) -> None:
        trial = trial_infer(self.base, ctx)
        plan = trial.prepared
        types = trial.output_types()
        dtype, out_shape = types[0]
        if (
            ctx.exact
            or self.isa not in FAST_ISAS
            or dtype != F32
            or len(out_shape) != 4
            or ctx.num_outputs > 1
            or not isinstance(plan, basic_pool._Plan)
            or plan.indices is not None
        ):
            return self.fallback(ctx)
        w = plan.w
        work = work_floats(w, ctx.shape(0), out_shape) if math.prod(out_shape) else 0
        if work > MAX_WORK_FLOATS:
            raise self.fail(
                f"the window geometry (kernel {list(w.kernel)}, strides {list(w.strides)}, "
                f"dilations {list(w.dilations)}, pads {list(w.begin)}) needs more than "
                f"{MAX_WORK_FLOATS} floats of native work space",
                "unsupported",
            )
        ctx.set_output(0, dtype, out_shape)
        reads = math.prod(out_shape) * math.prod(w.kernel)
        ctx.prepared = _Plan(
            tuple(w.kernel), tuple(w.strides), tuple(w.dilations), tuple(w.begin),
            reads >= PARALLEL_READS, work * F32.itemsize,
        )  # fmt: skip

    def bind_native(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        p: _Plan = ctx.prepared
        x, y = inputs[0], outputs[0]
        if not x.flags.c_contiguous:  # a strided view: one contiguous copy per run
            return functools.partial(_contiguous_x, self, ctx, inputs, outputs)
        threads = getattr(ctx.pool, "threads", 1) if p.split else 1
        # each thread's buffer is allocated by the native code, outside the plan: counted
        # against the session's memory budget (up to 256 MiB a thread by the native bound)
        ctx.reserve(p.work_bytes * threads, "the native work buffer (one per thread)")
        window = (p.kernel, p.strides, p.dilations, p.pads, self.isa)
        return _native.MaxPoolCall(x, y, *window, 0, -1, threads)  # arguments checked once


def work_floats(w: Any, x_shape: Sequence[int], out_shape: Sequence[int]) -> int:
    """Floats of the native kernel's work buffer: oh + 1 rows padded to the widest read (or
    more than any bound where a padded extent would overflow the kernel's int64 offsets)."""
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


def _contiguous_x(
    kernel: MaxPool, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
) -> None:
    kernel.bind_native(ctx, [np.ascontiguousarray(inputs[0])], outputs)()
