"""Softmax over the innermost axis on one native pass per row, fast mode.

ops-basic's kernel is five numpy passes (maximum, subtraction, exp, sum, division); on a CNN's
last [1, 1000] they cost 33-50 us in a model, where the classifier before them has just pushed
numpy's code and data out of the caches (onnxruntime: 6-11 us).  The native kernel
(``softmax_rows`` in src/native/fast_math.inc) reads each row twice and writes it twice, with
attention's polynomial exp (relative error below 2^-22): within a few ulp of ops-basic's
float32 result, not bit-identical to it.  Rows are spread over the plugin's threads for large
inputs; a row's arithmetic is its own, so the thread count never changes the bits.

It takes float32 X where the operator's reduction runs over a contiguous run of each row: from
opset 13 the last axis or one followed by axes of 1 only (a classifier's [N, 1000, 1, 1] over
axis 1: numpy's strided passes took 6.6 us, the native row 1.1), before 13 the trailing axes
from ``axis`` on (the 2-D coercion).
Other types, other axes and exact mode are ops-basic's kernel, planned as if this wrapper did
not exist.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext
from graphrt_ops_basic._util import normalize_axis

from . import _native
from .kernels import NativeKernel, contiguous_call, trial_infer

F32 = np.dtype(np.float32)


@dataclasses.dataclass(frozen=True)
class _Plan:
    rows: int
    size: int  # the reduced run of each row


class Softmax(NativeKernel):
    """exp(x - max) / sum(exp(x - max)) natively; the rest on ops-basic's kernel."""

    plan_type = _Plan
    in_place_input = 0  # y may be x itself (each row is read before it is written)

    def infer(self, ctx: InferContext) -> None:
        if ctx.exact or ctx.dtype(0) != F32:
            return self.fallback(ctx)
        trial = trial_infer(self.base, ctx)  # ops-basic's checks, errors and output type
        shape = ctx.shape(0)
        legacy = self.node.opset < 13
        axis = normalize_axis(self.node.attr("axis", 1 if legacy else -1), len(shape))
        if not legacy and math.prod(shape[axis + 1 :]) != 1:
            return self.fallback(ctx)  # (an inner axis; trailing axes of 1 read as the last)
        ctx.set_output(0, *trial.output_types()[0])
        ctx.prepared = _Plan(math.prod(shape[:axis]), math.prod(shape[axis:]))

    def bind_native(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        p: _Plan = ctx.prepared
        x, y = inputs[0], outputs[0]
        threads = ctx.threads
        if p.rows * p.size == 0:
            return _nothing
        return contiguous_call(
            x,
            y,
            (p.rows, p.size),
            lambda a, b: functools.partial(_native.softmax, a, b, self.isa, threads),
        )


def _nothing() -> None:
    """An empty tensor: nothing to compute."""
