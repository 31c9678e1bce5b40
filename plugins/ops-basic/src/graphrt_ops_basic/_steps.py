"""Steps built once per run state, and numpy's fancy-index write: what the indexing family's
kernels share.

A kernel of a handful of numpy calls on small tensors spends most of its time in Python:
reshaping its inputs, looking up scratch arrays, testing whether its output is its input's
storage (``same_storage`` alone costs about 2 us).  :class:`BoundStep` does all of that once
per run state: ``step`` returns a call on fixed views, ``bind`` hands it to the run loop and
``run`` (dynamic nodes, constant folding) builds and calls it at once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import KernelContext, OpKernel

#: Run-time index arrays of at most this many values are checked as Python ints (min, max, a
#: set): cheaper than numpy reductions, about a microsecond each.
FEW = 64


class BoundStep(OpKernel):
    """A kernel whose work is ``step(ctx, inputs, outputs)``: a call on views made once."""

    def step(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        raise NotImplementedError(f"{type(self).__name__}.step")

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        self.step(ctx, inputs, outputs)()

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        # a reshape of a strided input would be a copy, stale from the next run on
        if not all(x is None or x.flags.c_contiguous for x in inputs):
            return functools.partial(self.run, ctx, inputs, outputs)
        return self.step(ctx, inputs, outputs)


def indexed_write(
    kernel: OpKernel,
    data: np.ndarray | None,
    out: np.ndarray,
    target: np.ndarray,
    where: tuple[np.ndarray, ...] | np.ndarray,
    values: np.ndarray,
    fold: np.ufunc | None,
    explain: Callable[[], None],
) -> Callable[[], None]:
    """A call copying ``data`` into ``out`` (None: in place), then writing ``target[where] =
    values`` (``fold.at`` with a reduction, in index order); ``target`` views ``out``.

    numpy's fancy indexing checks the bounds and counts a negative index from the end, ONNX's
    rule exactly, so run-time indices need no check of their own; its IndexError becomes
    ``invalid_input``, named by ``explain`` (which raises for the index out of range).
    """

    def step() -> None:
        if data is not None:
            np.copyto(out, data)
        try:
            if fold is None:
                target[where] = values
            else:
                fold.at(target, where, values)
        except IndexError as exc:
            explain()
            raise kernel.fail(str(exc), "invalid_input") from None

    return step
