"""Scan: slice scan inputs along their axes, run the body per step, place scan outputs.

Opset 9 and later: directions and axes per input and output.  Opset 8: a leading batch axis
on every input and output, an optional sequence_lens input, and scan axis 1 (after the batch);
shorter sequences leave zeros in the scan outputs past their length.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.kernel import KernelContext, NodeInfo

from ._body import BodyKernel, Held, kept_nbytes


class Scan(BodyKernel):
    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.scan_body = self.body("body")
        self.n_scan_in = node.attr("num_scan_inputs")
        if self.n_scan_in is None:
            raise self.fail("num_scan_inputs is required")
        first = 1 if node.opset < 9 else 0  # opset 8's sequence_lens input
        self.n_state = self.declared - first - self.n_scan_in
        self.n_scan_out = self.scan_body.num_outputs - self.n_state
        if self.n_state < 0 or self.n_scan_out < 0:
            raise self.fail("the body's inputs and outputs do not match num_scan_inputs")
        self.in_dirs = (
            node.attr("scan_input_directions") or node.attr("directions") or [0] * self.n_scan_in
        )
        self.in_axes = node.attr("scan_input_axes") or [0] * self.n_scan_in
        self.out_dirs = node.attr("scan_output_directions") or [0] * self.n_scan_out
        self.out_axes = node.attr("scan_output_axes") or [0] * self.n_scan_out

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        outer = self.outer(self.scan_body, inputs)
        if self.node.opset < 9:
            self.emit(ctx, self._batched(ctx, inputs, outer))
            return
        states = list(inputs[: self.n_state])
        scans = list(inputs[self.n_state : self.declared])
        axes = [a + x.ndim if a < 0 else a for a, x in zip(self.in_axes, scans)]
        held = Held(ctx)
        states, steps = self._scan(ctx, held, states, scans, axes, outer, None)
        held.set(2 * held.nbytes)  # the placed copies, while the slices exist
        placed = []
        for k, values in enumerate(steps):
            if self.out_dirs[k]:
                values = values[::-1]
            rank = values[0].ndim + 1 if values else 1
            axis = self.out_axes[k] + rank if self.out_axes[k] < 0 else self.out_axes[k]
            placed.append(np.stack(values, axis=axis) if values else np.zeros((0,), np.float32))
        held.hand_over(states + placed)
        self.emit(ctx, states + placed)

    def _scan(self, ctx, held, states, scans, axes, outer, length):
        """Run the body over the scan inputs; what it keeps is counted in ``held`` on top of
        what ``held`` counted before."""
        lengths = {x.shape[a] for x, a in zip(scans, axes)}
        if len(lengths) > 1:
            raise self.fail(
                f"scan inputs have different lengths {sorted(lengths)}", "invalid_input"
            )
        n = lengths.pop() if lengths else 0
        n = n if length is None else min(n, length)
        steps: list[list[Any]] = [[] for _ in range(self.n_scan_out)]
        start, scanned = held.nbytes, 0
        for t in range(n):
            slices = [
                np.take(x, n - 1 - t if d else t, axis=a)
                for x, a, d in zip(scans, axes, self.in_dirs)
            ]
            outs = self.scan_body.run([*states, *slices, *outer], ctx)  # checks cancellation
            states = outs[: self.n_state]
            for k, v in enumerate(outs[self.n_state :]):
                steps[k].append(v)
            scanned += kept_nbytes(outs[self.n_state :])
            held.set(start + kept_nbytes(states) + scanned)
        return states, steps

    def _batched(self, ctx, inputs, outer) -> list[Any]:
        """Opset 8: the same scan for each batch entry, axis 0 of everything."""
        lens = inputs[0]
        states = list(inputs[1 : 1 + self.n_state])
        scans = list(inputs[1 + self.n_state : self.declared])
        batch = (states or scans)[0].shape[0]
        final: list[list[Any]] = [[] for _ in range(self.n_state)]
        per_batch: list[list[Any]] = [[] for _ in range(self.n_scan_out)]
        held = Held(ctx)  # every batch entry's results, and their stacked copies, until the end
        for b in range(batch):
            length = int(lens[b]) if lens is not None else None
            before = held.nbytes
            st, steps = self._scan(
                ctx,
                held,
                [s[b] for s in states],
                [x[b] for x in scans],
                [0] * len(scans),
                outer,
                length,
            )
            kept = held.nbytes
            held.set(2 * kept - before)  # this entry's stacked copies, while its slices exist
            for k, v in enumerate(st):
                final[k].append(v)
            for k, values in enumerate(steps):
                if self.out_dirs[k]:
                    values = values[::-1]
                per_batch[k].append(np.stack(values) if values else None)
            held.set(kept)  # the slices are gone, their copies are kept
        held.set(2 * held.nbytes)  # the outputs, while every entry's copies exist
        outs = [np.stack(v) for v in final]
        for values in per_batch:
            full = max((v.shape[0] for v in values if v is not None), default=0)
            like = next((v for v in values if v is not None), np.zeros((0,), np.float32))
            stacked = np.zeros((batch, full, *like.shape[1:]), like.dtype)
            for b, v in enumerate(values):
                if v is not None:
                    stacked[b, : v.shape[0]] = v
            outs.append(stacked)
        held.hand_over(outs)
        return outs
