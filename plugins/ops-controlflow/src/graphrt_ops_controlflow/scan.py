"""Scan: slice scan inputs along their axes, run the body per step, place scan outputs.

Opset 9 and later: directions and axes per input and output.  Opset 8: a leading batch axis
on every input and output, an optional sequence_lens input, and scan axis 1 (after the batch);
shorter sequences leave zeros in the scan outputs past their length.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import KernelContext, NodeInfo, carry_pairs, check_cancelled, copy_value

from ._body import BodyKernel, Held, Stacked, kept_nbytes


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
        states, placed = self._scan(ctx, held, states, scans, axes, outer, None, self.out_axes)
        placed = [np.zeros((0,), np.float32) if p is None else p for p in placed]
        held.hand_over(states + placed)
        self.emit(ctx, states + placed)

    def _scan(self, ctx, held, states, scans, axes, outer, length, out_axes):
        """Run the body over the scan inputs: (final states, scan outputs placed on their axes,
        None for one without a slice).  What it keeps is counted in ``held``."""
        lengths = {x.shape[a] for x, a in zip(scans, axes)}
        if len(lengths) > 1:
            raise self.fail(
                f"scan inputs have different lengths {sorted(lengths)}", "invalid_input"
            )
        n = lengths.pop() if lengths else 0
        n = n if length is None else min(n, length)
        # the scan axis first: step t of input k is moved[k][t], a view (no copy per step)
        moved = [np.moveaxis(x, a, 0) for x, a in zip(scans, axes)]
        stacks = [Stacked(held, n, a, bool(d), True) for a, d in zip(out_axes, self.out_dirs)]
        kept, t = 0, 0
        while t < n:
            if t < 2:  # the first step, and the next once the states have the body's types
                done = self._steady(ctx, stacks, t, n, states, moved, outer)
                if done is not None:
                    states, t = done, n
                    break
            slices = [m[n - 1 - t if d else t] for m, d in zip(moved, self.in_dirs)]
            outs = self.scan_body.run([*states, *slices, *outer], ctx)  # checks cancellation
            states = outs[: self.n_state]
            for stack, v in zip(stacks, outs[self.n_state :]):
                stack.add(v)
            now = kept_nbytes(states)
            if now != kept:
                held.add(now - kept)
                kept = now
            t += 1
        return states, [s.result(lambda: None) for s in stacks]

    def _steady(self, ctx, stacks, t, n, states, moved, outer):
        """Steps t.. on one kept run state when the body's plan is static and gives the states
        back with their types: the final states, or None, having run nothing."""
        ns, dirs = self.n_state, self.in_dirs
        first = [m[n - 1 - t if d else t] for m, d in zip(moved, dirs)]
        values = [*states, *first, *outer]
        run = self.scan_body.steady(values, ctx)
        if run is None:
            return None
        ran = 0
        try:
            types = run.output_types
            ok = all(types[k] == run.input_types[k] for k in range(ns))
            for stack, vt in zip(stacks, types[ns:]):
                ok = ok and vt is not None and stack.reserve(vt.dtype, vt.shape, True)
                ok = ok and stack.cap == n and stack.n == t  # (made at its final size)
            if not ok:
                return None
            run.enter()  # the scan outputs count beside the body's slab
            ins, outs = run.inputs, run.outputs
            feeds = [(ins[ns + k], m, d) for k, (m, d) in enumerate(zip(moved, dirs))]
            # outer values whose memory the body's plan reuses (the others were written once)
            first_outer = ns + len(moved)
            restage = [
                (ins[k], values[k]) for k in range(first_outer, len(values)) if not run.lasting[k]
            ]
            hand_over = carry_pairs(ins[:ns], outs[:ns])
            # every step so far wrote one slice of each output: step k goes to slice k
            writes = [(s.view, s.reverse, v) for s, v in zip(stacks, outs[ns:])]
            program, token, last = run.program, run.token, n - 1
            for step in range(t, n):
                if step != t:
                    for dst, m, d in feeds:
                        dst[...] = m[last - step if d else step]
                    for dst, src in restage:
                        dst[...] = src
                if token is not None:
                    check_cancelled(token)
                try:  # run.run(), inlined
                    for f in program:
                        f()
                except Exception as exc:
                    raise run.failure(exc, f) from exc
                for view, reverse, value in writes:
                    view[last - step if reverse else step] = value
                for dst, src in hand_over:
                    dst[...] = src
                ran += 1
            for stack in stacks:
                stack.n = n
            return [copy_value(x) for x in ins[:ns]]
        finally:
            run.close(ran)

    def _batched(self, ctx, inputs, outer) -> list[Any]:
        """Opset 8: the same scan for each batch entry, axis 0 of everything."""
        lens = inputs[0]
        states = list(inputs[1 : 1 + self.n_state])
        scans = list(inputs[1 + self.n_state : self.declared])
        batch = (states or scans)[0].shape[0]
        final: list[list[Any]] = [[] for _ in range(self.n_state)]
        per_batch: list[list[Any]] = [[] for _ in range(self.n_scan_out)]
        held = Held(ctx)  # every batch entry's results until the end
        for b in range(batch):
            length = int(lens[b]) if lens is not None else None
            st, placed = self._scan(
                ctx,
                held,
                [s[b] for s in states],
                [x[b] for x in scans],
                [0] * len(scans),
                outer,
                length,
                [0] * self.n_scan_out,
            )
            held.add(kept_nbytes(st))
            for k, v in enumerate(st):
                final[k].append(v)
            for k, v in enumerate(placed):
                per_batch[k].append(v)
        outs = [np.stack(v) for v in final]
        for values in per_batch:
            full = max((v.shape[0] for v in values if v is not None), default=0)
            like = next((v for v in values if v is not None), np.zeros((0,), np.float32))
            shape = (batch, full, *like.shape[1:])
            held.add(math.prod(shape) * like.dtype.itemsize)  # the output, while its parts exist
            stacked = np.zeros(shape, like.dtype)
            for b, v in enumerate(values):
                if v is not None:
                    stacked[b, : v.shape[0]] = v
            outs.append(stacked)
        held.hand_over(outs)
        return outs
