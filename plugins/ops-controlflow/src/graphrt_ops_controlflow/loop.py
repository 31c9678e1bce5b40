"""Loop: run the body while the trip count and the condition allow.

Body inputs are (iteration number, condition, carried values...); its outputs are (condition,
carried values..., scan outputs...).  Scan outputs are stacked on a new first axis; with no
iteration they are empty [0] tensors of the body's declared type.  Every iteration goes through
the body's plan cache and run-state pool.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.kernel import KernelContext, NodeInfo

from ._body import BodyKernel, Held, empty_like_declared, kept_nbytes, scalar


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
        scans: list[list[Any]] = [[] for _ in range(self.n_scan)]
        held = Held(ctx)  # carried values and scan slices, counted as they grow
        scanned = 0
        i = 0
        while keep and (limit is None or i < limit):
            args = [np.array(i, np.int64), np.array(keep, np.bool_), *carried, *outer]
            outs = self.loop_body.run(args, ctx)  # checks the run's cancellation token
            keep = bool(scalar(outs[0], "the body's condition", self))
            carried = outs[1 : 1 + self.n_carried]
            if self.n_scan:
                for k, value in enumerate(outs[1 + self.n_carried :]):
                    scans[k].append(value)
                scanned += kept_nbytes(outs[1 + self.n_carried :])
            now = kept_nbytes(carried) + scanned
            if now != held.nbytes:
                held.set(now)
            i += 1
        if scanned:
            held.set(held.nbytes + scanned)  # the stacked copies, while the slices exist
        stacked = [
            np.stack(s) if s else empty_like_declared(self.loop_body, 1 + self.n_carried + k)
            for k, s in enumerate(scans)
        ]
        held.hand_over(carried + stacked)
        self.emit(ctx, carried + stacked)
