"""Operators whose outputs are constants for the plan: they are never scheduled."""

from __future__ import annotations

import numpy as np

from graphrt.plugin import InferContext, NodeInfo, OpKernel, to_array


class Constant(OpKernel):
    """The value comes from exactly one of the attributes ONNX allows (by opset)."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.value = self._read_value(node)

    def _read_value(self, node: NodeInfo) -> np.ndarray:
        given = {k: v for k, v in node.attrs.items() if v is not None}
        if len(given) != 1:
            raise self.fail(f"needs exactly one value attribute, got {sorted(given) or 'none'}")
        ((name, v),) = given.items()
        if name == "value":
            return v if isinstance(v, np.ndarray) else to_array(v)
        if name == "sparse_value":
            return _dense(v)
        scalars = {
            "value_float": np.float32,
            "value_int": np.int64,
            "value_string": object,
        }
        lists = {"value_floats": np.float32, "value_ints": np.int64, "value_strings": object}
        if name in scalars:
            return np.array(v.decode() if isinstance(v, bytes) else v, dtype=scalars[name])
        if name in lists:
            items = [x.decode() if isinstance(x, bytes) else x for x in v]
            return np.array(items, dtype=lists[name])
        raise self.fail(f"unknown attribute {name!r}")

    def infer(self, ctx: InferContext) -> None:
        ctx.set_constant_output(0, self.value)


def _dense(sparse) -> np.ndarray:
    """A SparseTensorProto as a dense array (COO indices, flat or per-axis)."""
    values = to_array(sparse.values)
    indices = to_array(sparse.indices).astype(np.int64)
    dims = tuple(sparse.dims)
    out = np.zeros(dims, dtype=values.dtype)
    if indices.ndim == 1:
        out.reshape(-1)[indices] = values
    else:
        out[tuple(indices.T)] = values
    return out
