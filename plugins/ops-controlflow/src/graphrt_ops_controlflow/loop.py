"""Loop: run the body while the trip count and the condition allow.

Body inputs are (iteration number, condition, carried values...); its outputs are (condition,
carried values..., scan outputs...).  Scan outputs are stacked on a new first axis; with no
iteration they are empty [0] tensors of the body's declared type.

When the body's plan for the carried values is static and keeps their types, the iterations run
on one kept run state (graphrt.subgraph.SteadyRun): the counter and the carried values are
written into its input arrays, scan slices straight into the output array (made at its final
size when the trip count is known and the condition is passed through), nothing is planned or
allocated per iteration.  Other bodies run iteration by iteration through the plan cache.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import KernelContext, NodeInfo, carry_pairs, check_cancelled, copy_value

from ._body import BodyKernel, Held, Stacked, empty_like_declared, kept_nbytes, scalar

#: Iterations that may try the steady path (the first, and the next once the carried values
#: have the types the body makes).
STEADY_TRIES = 2


class Loop(BodyKernel):
    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.loop_body = self.body("body")
        self.n_carried = self.declared - 2
        self.n_scan = self.loop_body.num_outputs - 1 - self.n_carried
        if self.n_scan < 0:
            raise self.fail(
                f"the body gives {self.loop_body.num_outputs} outputs for {self.n_carried} "
                "carried values"
            )

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        trip = inputs[0] if self.declared > 0 else None
        cond = inputs[1] if self.declared > 1 else None
        limit = scalar(trip, "M", self) if trip is not None else None
        keep = bool(scalar(cond, "cond", self)) if cond is not None else True
        carried = list(inputs[2 : self.declared])
        outer = self.outer(self.loop_body, inputs)
        held = Held(ctx)  # carried values and scan outputs, counted as they grow
        stacks = [Stacked(held, limit) for _ in range(self.n_scan)]
        kept = 0  # what ``held`` counts for the carried values
        tries = STEADY_TRIES
        i = 0
        while keep and (limit is None or i < limit):
            if tries:
                tries -= 1
                done = self._steady(ctx, stacks, i, limit, carried, outer)
                if done is not None:
                    i, carried = done
                    break
            args = [np.array(i, np.int64), np.array(keep, np.bool_), *carried, *outer]
            outs = self.loop_body.run(args, ctx)  # checks the run's cancellation token
            keep = bool(scalar(outs[0], "the body's condition", self))
            carried = outs[1 : 1 + self.n_carried]
            for stack, value in zip(stacks, outs[1 + self.n_carried :]):
                stack.add(value)
            now = kept_nbytes(carried)
            if now != kept:
                held.add(now - kept)
                kept = now
            i += 1
        first = 1 + self.n_carried
        stacked = [
            s.result(functools.partial(empty_like_declared, self.loop_body, first + k))
            for k, s in enumerate(stacks)
        ]
        held.hand_over(carried + stacked)
        self.emit(ctx, carried + stacked)

    def _steady(
        self,
        ctx: KernelContext,
        stacks: list[Stacked],
        i: int,
        limit: int | None,
        carried: list[Any],
        outer: list[Any],
    ) -> tuple[int, list[Any]] | None:
        """Every remaining iteration on one kept run state, when the body's plan is static and
        gives the carried values back with their types: (iterations done in all, the carried
        values), or None, having run nothing."""
        nc = self.n_carried
        values = [np.array(i, np.int64), np.array(True), *carried, *outer]
        run = self.loop_body.steady(values, ctx)
        if run is None:
            return None
        start = i
        try:
            types = run.output_types
            ok = types[0] is not None and math.prod(types[0].shape) == 1
            ok = ok and all(types[1 + k] == run.input_types[2 + k] for k in range(nc))
            # the condition passed through: the loop runs to M unless it fails
            exact = limit is not None and run.passes_through(0, 1)
            for stack, t in zip(stacks, types[1 + nc :]):
                ok = ok and t is not None and stack.reserve(t.dtype, t.shape, exact)
            if not ok:
                return None
            run.enter()  # the scan arrays count beside the body's slab
            ins, outs = run.inputs, run.outputs
            counter, cond = ins[0], outs[0].reshape(())
            hand_over = carry_pairs(ins[2 : 2 + nc], outs[1 : 1 + nc])
            writes = list(zip(stacks, outs[1 + nc :]))
            # the condition (True while it runs) and the outer values, where the body's plan
            # reuses their memory: the others were written once by steady()
            again = [1, *range(2 + nc, len(values))]
            restage = [(ins[k], values[k]) for k in again if not run.lasting[k]]
            program, token = run.program, run.token
            keep = True
            while keep and (limit is None or i < limit):
                counter[...] = i
                for dst, src in restage:
                    dst[...] = src
                if token is not None:
                    check_cancelled(token)
                try:  # run.run(), inlined
                    for f in program:
                        f()
                except Exception as exc:
                    raise run.failure(exc, f) from exc
                keep = cond.item()
                for stack, value in writes:
                    if stack.n == stack.cap:
                        stack.grow()
                        run.enter()
                    stack.view[stack.n] = value
                    stack.n += 1
                for dst, src in hand_over:
                    dst[...] = src
                i += 1
            return i, [copy_value(x) for x in ins[2 : 2 + nc]]
        finally:
            run.close(i - start)
