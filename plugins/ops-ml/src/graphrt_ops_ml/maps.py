"""The map operators of the ai.onnx.ml domain: DictVectorizer (a map in) and ZipMap (a
sequence of maps out).

A map is a Python dict, a sequence a Python list, as onnxruntime hands them to its callers.
The session checks a map graph input against its declared type and gives its values as numpy
scalars of the declared element type, so DictVectorizer takes its output type from them.
Neither operator computes: both follow the exact mode.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from typing import Any

import numpy as np

from graphrt.plugin import KernelContext, NodeInfo, OpKernel


def _vocabulary(kernel: OpKernel, ints: str, strings: str) -> list[Any]:
    node = kernel.node
    has_ints, has_strings = ints in node.attrs, strings in node.attrs
    if has_ints == has_strings:
        raise kernel.fail(f"exactly one of {ints} and {strings} must be set")
    if has_ints:
        return [int(v) for v in node.attrs[ints]]
    return [str(v) for v in node.attrs[strings]]


class DictVectorizer(OpKernel):
    """A map -> a [1, len(vocabulary)] tensor: each key's value at the key's place in the
    vocabulary, zero (an empty string) elsewhere."""

    supports_exact = True
    outputs_data_dependent = True  # the element type is the map's value type

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        vocab = _vocabulary(self, "int64_vocabulary", "string_vocabulary")
        self.string_keys = "string_vocabulary" in node.attrs
        self.size = len(vocab)
        self.index: dict[Any, int] = {}
        for i, key in enumerate(vocab):
            self.index.setdefault(key, i)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x = inputs[0]
        if not isinstance(x, dict):
            raise self.fail(f"expected a map (dict), got {type(x).__name__}", "invalid_input")
        dtype = _value_dtype(x)
        out = ctx.allocate_output(0, dtype, (1, self.size))
        out[...] = "" if dtype.kind == "O" else 0
        row = out[0]
        index = self.index
        for key, value in x.items():
            if isinstance(key, str) != self.string_keys:
                want = "string" if self.string_keys else "int64"
                raise self.fail(f"map key {key!r} is not {want}", "invalid_input")
            i = index.get(key)
            if i is not None:
                row[i] = value


def _value_dtype(x: dict) -> np.dtype:
    """The map's value element type: its values' own (numpy scalars after the session's check),
    float32 for an empty map or plain Python floats."""
    for v in x.values():
        if isinstance(v, (np.generic, np.ndarray)):
            return np.dtype(object) if v.dtype.kind in "OUS" else v.dtype
        if isinstance(v, str):
            return np.dtype(object)
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            return np.dtype(np.int64)
        break
    return np.dtype(np.float32)


class ZipMap(OpKernel):
    """Rows of a float tensor -> a list of dicts {class label: value}, one per row (a 1-D
    input is one row).  As onnxruntime returns them: keys in sorted order (its maps are
    ordered), values Python floats."""

    supports_exact = True
    outputs_data_dependent = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        labels = _vocabulary(self, "classlabels_int64s", "classlabels_strings")
        self.size = len(labels)
        order = sorted(range(self.size), key=labels.__getitem__)
        self.labels = [labels[i] for i in order]
        #: the columns in sorted label order; None when the labels are sorted already
        self.order = None if order == list(range(self.size)) else np.array(order, np.intp)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x = inputs[0]
        if not isinstance(x, np.ndarray) or x.ndim not in (1, 2):
            shape = list(x.shape) if isinstance(x, np.ndarray) else type(x).__name__
            raise self.fail(f"X must be a 1-D or 2-D tensor, got {shape}", "invalid_input")
        rows = x.reshape(1, -1) if x.ndim == 1 else x
        if rows.shape[1] != self.size:
            raise self.fail(
                f"X has {rows.shape[1]} columns but there are {self.size} class labels",
                "invalid_input",
            )
        if self.order is not None:
            rows = rows[:, self.order]
        labels = self.labels
        ctx.charge(rows.shape[0] * (64 + 100 * len(labels)), "the maps")
        ctx.set_output(0, list(map(dict, map(zip, repeat(labels), rows.tolist()))))
