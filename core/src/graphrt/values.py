"""Values as the runtime hands them around: their plan key, the caller's own copy of one, and
the safe order of copies handing one run's outputs to the next run's inputs.

A leaf (numpy only): the session, the run states, body runners and control-flow kernels (through
``graphrt.plugin``) all use these, and none of them has to import another for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["carry_pairs", "copy_value", "value_type"]


def value_type(x: Any) -> tuple[np.dtype, tuple[int, ...]]:
    """The plan key of one value: tensors by type and shape; sequences, maps and optionals as
    objects."""
    if isinstance(x, np.ndarray):
        return x.dtype, x.shape
    return np.dtype(object), ()


def copy_value(x: Any) -> Any:
    """A value the caller owns: never a view of a run state's slab or of model weights."""
    if type(x) is np.ndarray:
        return x.copy()
    if isinstance(x, np.ndarray):
        return np.array(x, copy=True)
    if isinstance(x, list):  # a map (dict) is new in every run (ZipMap, the input check): kept
        return [v if type(v) is dict else copy_value(v) for v in x]
    return x


def carry_pairs(dsts: Sequence[np.ndarray], srcs: Sequence[Any]) -> list[tuple[Any, Any]]:
    """(destination, source) copies that hand outputs over to the next run's inputs, in an
    order that is safe: when a source shares memory with another destination (a slab block an
    input left and an output took), every source goes through its own buffer first."""
    pairs = [(d, s) for d, s in zip(dsts, srcs) if d is not s]
    clash = any(
        j != k and np.may_share_memory(d, s)
        for j, (d, _) in enumerate(pairs)
        for k, (_, s) in enumerate(pairs)
    )
    if not clash:
        return pairs
    buffers = [np.empty_like(s) for _, s in pairs]
    return [(b, s) for b, (_, s) in zip(buffers, pairs)] + [
        (d, b) for b, (d, _) in zip(buffers, pairs)
    ]
