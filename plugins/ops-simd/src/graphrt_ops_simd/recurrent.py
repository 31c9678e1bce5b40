"""RNN, GRU and LSTM on the native recurrence, falling back to the table's numpy kernel.

ops-basic's kernel (graphrt_ops_basic.rnn) runs a step as a dozen numpy calls, so a sequence of
50 costs hundreds of calls whatever the hidden size.  The native plan (src/native/rnn.cpp) runs
the whole node in one call: the input projection of every step and direction as one GEMM (the
plugin's fast GEMM, biases in its epilogue), then per step the recurrent product and the gate
arithmetic fused, W hidden units of every gate at a time in registers (rnn_driver.inc), with
R packed once per plan.  It covers every attribute but non-default activations: directions,
layout 0 and 1, sequence_lens, initial states, clip, linear_before_reset, input_forget and
peepholes, weights fed at run time too (packed at the start of each run).  Other activations,
float16/bfloat16/float64, and empty sequences or batches run ops-basic's kernel, as does exact
mode (neither kernel is exact: the table's RNN, GRU and LSTM do not support it).

A step's panels are split over the plugin's threads only when the step's product is large
(rnn.cpp, STEP_SPLIT_MACS); two directions run side by side.  A unit's arithmetic never depends
on the split, so results do not depend on the thread count.  The shapes and attributes are
checked by ops-basic's own ``infer`` first (its errors, word for word).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext
from graphrt_ops_basic import rnn as basic_rnn
from graphrt_ops_basic._geometry import call_all

from . import _native
from .kernels import NativeKernel, trial_infer

F32 = np.dtype(np.float32)
#: sequence_lens types the native code reads (the ONNX type is int32).
LENS_TYPES = (np.dtype(np.int32), np.dtype(np.int64))
#: Inputs holding weights: W, R, B, P.
WEIGHTS = (1, 2, 3, 7)


@dataclasses.dataclass(frozen=True)
class _Plan:
    native: Any  # _native.RnnPlan
    seq: int
    packed: np.ndarray | None  # constant weights, packed once
    packed_scratch: int | None  # run-time weights: packed into this scratch in every run
    work: int  # scratch index of the work buffer
    lens: np.ndarray | None  # constant sequence_lens (None: none, or given at run time)


class Recurrent(NativeKernel):
    """RNN, GRU and LSTM (the op type is the node's)."""

    supports_exact = False  # as the table's kernels: sigmoid, tanh and the products are not
    plan_type = _Plan

    def infer(self, ctx: InferContext) -> None:
        trial = trial_infer(self.base, ctx)  # ops-basic's checks and output types
        base = self.base
        if ctx.exact or not isinstance(base, basic_rnn._Recurrent) or not self._native(ctx, trial):
            return self.fallback(ctx)
        for i, t in enumerate(trial.output_types()):
            if t is not None:
                ctx.set_output(i, *t)
        p = trial.prepared
        peepholes = base.op == "LSTM" and ctx.has_input(7)
        try:  # the plan checks every size it derives (overflow, a bound of 2 GiB)
            native = _native.RnnPlan(
                base.op,
                self.isa,
                p.inp,
                self._hidden(ctx),
                list(base.reverse),
                base.layout,
                None if base.clip is None else float(base.clip),
                base.op == "GRU" and base.linear_before_reset,
                base.op == "LSTM" and base.input_forget,
                peepholes,
            )
            work_floats = native.work_floats(p.seq, p.batch)
        except ValueError as e:
            message = str(e)
            kind = "unsupported" if message.startswith("unsupported: ") else "invalid_model"
            raise self.fail(message.removeprefix("unsupported: "), kind) from None
        values = {i: ctx.known_value(i) if ctx.has_input(i) else None for i in WEIGHTS}
        packed = scratch = None
        if all(values[i] is not None for i in WEIGHTS if ctx.has_input(i)):
            packed = np.empty(native.packed_floats, F32)
            native.pack(*(_f32(values[i]) for i in WEIGHTS), packed)
        else:
            scratch = ctx.add_scratch(F32, (native.packed_floats,))
        lens = ctx.known_value(4) if ctx.has_input(4) else None
        if lens is not None:
            lens = None if np.all(lens == p.seq) else np.ascontiguousarray(lens)
        work = ctx.add_scratch(F32, (work_floats,))
        ctx.prepared = _Plan(native, p.seq, packed, scratch, work, lens)

    def _hidden(self, ctx: InferContext) -> int:
        size = self.base.hidden_size
        return int(size if size is not None else ctx.shape(2)[2])

    def _native(self, ctx: InferContext, trial: InferContext) -> bool:
        """Whether the native plan covers this node: float32, default activations, a
        sequence, a batch and a hidden state, sequence_lens of a type it reads."""
        base = self.base
        p = trial.prepared
        default = basic_rnn.DEFAULTS[base.op]
        return (
            isinstance(p, basic_rnn._Plan)
            and ctx.dtype(0) == F32
            and p.seq > 0
            and p.batch > 0
            and self._hidden(ctx) > 0
            and all(tuple(f.name for f in acts) == default for acts in base.acts)
            and (not ctx.has_input(4) or ctx.dtype(4) in LENS_TYPES)
        )

    def bind_native(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        p: _Plan = ctx.prepared
        base = self.base
        ins = list(inputs) + [None] * (8 - len(inputs))
        outs = list(outputs) + [None] * (3 - len(outputs))
        arrays = [a for a in (*ins, *outs) if isinstance(a, np.ndarray)]
        if not all(a.flags.c_contiguous and a.flags.aligned for a in arrays):
            return functools.partial(_via_contiguous, self, ctx, inputs, outputs)
        lstm = base.op == "LSTM"
        y, yh = (outs[i] if base.want[i] else None for i in (0, 1))
        yc = outs[2] if lstm and base.want[2] else None
        lens = p.lens if p.lens is not None else ins[4]
        packed = p.packed
        calls: list[Callable[[], Any]] = []
        if packed is None:  # weights fed at run time: packed at the start of every run
            packed = ctx.scratch[p.packed_scratch]
            weights = [ins[i] if i != 7 or lstm else None for i in WEIGHTS]
            calls.append(functools.partial(p.native.pack, *weights, packed))
        threads = ctx.threads
        run = functools.partial(
            p.native.run, packed, ins[0], lens, ins[5], ins[6] if lstm else None, y, yh, yc,
            ctx.scratch[p.work], threads,
        )  # fmt: skip
        calls.append(functools.partial(_checked, self, run, lens, p.seq))
        return calls[0] if len(calls) == 1 else functools.partial(call_all, calls)


def _f32(a: np.ndarray | None) -> np.ndarray | None:
    return None if a is None else np.ascontiguousarray(a, dtype=F32)


def _checked(kernel: Recurrent, run: Callable[[], None], lens: Any, seq: int) -> None:
    """The native run; its refusal of sequence_lens as ops-basic words it."""
    try:
        run()
    except ValueError as e:
        if "sequence_lens" not in str(e):
            raise
        raise kernel.fail(
            f"sequence_lens values must lie in [0, {seq}], got {np.asarray(lens).tolist()}",
            "invalid_input",
        ) from None


def _via_contiguous(
    kernel: Recurrent, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
) -> None:
    """Strided views (a caller's feed, a sliced output): contiguous copies for this run."""
    ins = [np.require(a, requirements="CA") if isinstance(a, np.ndarray) else a for a in inputs]
    outs = [
        a if not isinstance(a, np.ndarray) or (a.flags.c_contiguous and a.flags.aligned)
        else np.empty(a.shape, a.dtype)
        for a in outputs
    ]  # fmt: skip
    kernel.bind_native(ctx, ins, outs)()
    for given, used in zip(outputs, outs):
        if used is not given:
            np.copyto(given, used)
