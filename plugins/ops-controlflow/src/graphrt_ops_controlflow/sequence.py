"""Sequence operators and SequenceMap.  A sequence is a Python list of numpy arrays.

Every operator returns a new list (values are never shared between a sequence and its
source), so a sequence a run hands out cannot change under the caller.  The arrays an operator
copies into a sequence are counted against the run's memory budget before they are copied
(``set_output`` counts tensors, not sequences).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import KernelContext, NodeInfo, OpKernel

from ._body import BodyKernel, Held, kept_nbytes, scalar


class _SequenceOp(OpKernel):
    supports_exact = True  # moves data, never computes on it
    outputs_data_dependent = True

    def sequence(self, x: Any) -> list[Any]:
        if not isinstance(x, list):
            raise self.fail(f"expected a sequence, got {type(x).__name__}", "invalid_input")
        return x

    def position(self, seq: list[Any], pos: Any, allow_end: bool = False) -> int:
        p = int(scalar(pos, "position", self))
        n = len(seq)
        hi = n if allow_end else n - 1
        if not -n <= p <= hi:
            raise self.fail(f"position {p} is out of range for a sequence of {n}", "invalid_input")
        return p + n if p < 0 else p


class SequenceEmpty(_SequenceOp):
    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        ctx.set_output(0, [])


class SequenceConstruct(_SequenceOp):
    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        types = {x.dtype for x in inputs}
        if len(types) > 1:
            raise self.fail(
                f"tensors of different types {sorted(map(str, types))}", "invalid_input"
            )
        ctx.charge(kept_nbytes(inputs), "the sequence's tensors")
        ctx.set_output(0, [np.array(x, copy=True) for x in inputs])


class SequenceInsert(_SequenceOp):
    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        seq = list(self.sequence(inputs[0]))
        pos = len(seq)
        if len(inputs) > 2 and inputs[2] is not None:
            pos = self.position(seq, inputs[2], allow_end=True)
        ctx.charge(kept_nbytes(inputs[1:2]), "the inserted tensor")
        seq.insert(pos, np.array(inputs[1], copy=True))
        ctx.set_output(0, seq)


class SequenceAt(_SequenceOp):
    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        seq = self.sequence(inputs[0])
        ctx.set_output(0, np.array(seq[self.position(seq, inputs[1])], copy=True))


class SequenceErase(_SequenceOp):
    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        seq = list(self.sequence(inputs[0]))
        pos = len(seq) - 1
        if len(inputs) > 1 and inputs[1] is not None:
            pos = self.position(seq, inputs[1])
        if not seq:
            raise self.fail("cannot erase from an empty sequence", "invalid_input")
        del seq[pos]
        ctx.set_output(0, seq)


class SequenceLength(_SequenceOp):
    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        ctx.set_output(0, np.array(len(self.sequence(inputs[0])), np.int64))


class SplitToSequence(_SequenceOp):
    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x = inputs[0]
        axis = self.node.attr("axis", 0)
        axis = axis + x.ndim if axis < 0 else axis
        split = inputs[1] if len(inputs) > 1 else None
        extent = x.shape[axis]  # may be 0: then there is no chunk at all
        if split is None:
            parts = np.split(x, range(1, extent), axis=axis) if extent else []
            if not self.node.attr("keepdims", 1):
                parts = [np.squeeze(p, axis=axis) for p in parts]
        elif split.ndim == 0:
            size = int(split)
            if size < 1:
                raise self.fail(f"a scalar split must be positive, got {size}", "invalid_input")
            parts = np.split(x, range(size, extent, size), axis=axis) if extent else []
        else:
            sizes = [int(v) for v in split.reshape(-1)]
            if any(v < 0 for v in sizes) or sum(sizes) != extent:
                raise self.fail(
                    f"split {sizes} does not cut an extent of {extent} along axis {axis}",
                    "invalid_input",
                )
            parts = np.split(x, np.cumsum(sizes)[:-1], axis=axis) if sizes else []
        ctx.charge(kept_nbytes(parts), "the sequence's tensors")
        ctx.set_output(0, [np.array(p, copy=True) for p in parts])


class ConcatFromSequence(_SequenceOp):
    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        seq = self.sequence(inputs[0])
        axis = self.node.attr("axis")
        if axis is None:
            raise self.fail("axis is required")
        if not seq:
            raise self.fail("cannot concatenate an empty sequence", "invalid_input")
        if self.node.attr("new_axis", 0):
            ctx.set_output(0, np.stack(seq, axis=axis))
        else:
            ctx.set_output(0, np.concatenate(seq, axis=axis))


class SequenceMap(BodyKernel):
    """Runs the body once per position of the input sequence; tensors are passed whole."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.map_body = self.body("body")

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        given = inputs[: self.declared]
        seqs = [x for x in given if isinstance(x, list)]
        n = len(given[0]) if isinstance(given[0], list) else 0
        if any(len(s) != n for s in seqs):
            raise self.fail("input sequences have different lengths", "invalid_input")
        outer = self.outer(self.map_body, inputs)
        results: list[list[Any]] = [[] for _ in range(self.map_body.num_outputs)]
        held = Held(ctx)  # the output sequences, counted as they grow
        for i in range(n):
            args = [x[i] if isinstance(x, list) else x for x in given]
            outs = self.map_body.run([*args, *outer], ctx)  # checks cancellation
            held.set(held.nbytes + kept_nbytes(outs))
            for k, v in enumerate(outs):
                results[k].append(v)
        held.hand_over(results)
        self.emit(ctx, results)
