"""Concat of float32 tensors as native copies on the plugin's threads.

ops-basic's ``np.concatenate`` copies the inputs one after the other on one thread; here each
input's contiguous chunk (per index before the axis) is one copy, and a large Concat spreads
them over the session's intra-op threads (light_squeezenet's fire modules concatenate two
convolutions' outputs eight times per run).  Copies are exact, so exact mode uses it too;
anything else (other dtypes, strided inputs) is ops-basic's kernel.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext

from . import _native
from .kernels import NativeKernel, trial_infer

F32 = np.dtype(np.float32)
#: Output bytes from which the copies are spread over the plugin's threads.
PARALLEL_BYTES = 1 << 18


@dataclasses.dataclass(frozen=True)
class _Plan:
    axis: int
    used: tuple[int, ...]  # the inputs with elements (ops-basic leaves empty ones out)
    split: bool


class Concat(NativeKernel):
    plan_type = _Plan

    def infer(self, ctx: InferContext) -> None:
        trial = trial_infer(self.base, ctx)
        dtype, out_shape = trial.output_types()[0]
        if dtype != F32 or not isinstance(trial.prepared, tuple):
            return self.fallback(ctx)
        axis, used = trial.prepared
        ctx.set_output(0, dtype, out_shape)
        big = math.prod(out_shape) * 4 >= PARALLEL_BYTES
        ctx.prepared = _Plan(axis, tuple(used), big)

    def bind_native(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        p: _Plan = ctx.prepared
        out = outputs[0]
        xs = [inputs[i] for i in p.used if inputs[i].size]  # an empty input adds nothing
        if not out.size:
            return _nothing
        if not out.flags.c_contiguous or not all(x.flags.c_contiguous for x in xs):
            return functools.partial(np.concatenate, xs, axis=p.axis, out=out)
        threads = ctx.threads if p.split else 1
        return functools.partial(_native.concat, xs, out, p.axis, threads)


def _nothing() -> None:
    """An empty output: nothing to copy."""
