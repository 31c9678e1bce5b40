"""Encoders of the ai.onnx.ml domain: LabelEncoder, CategoryMapper, OneHotEncoder,
ArrayFeatureExtractor and FeatureVectorizer.

Strings are numpy object arrays of Python ``str``.  A look-up from numeric keys sorts the keys
once (the last of repeated keys wins, as LabelEncoder-4 says) and finds every input element
with one ``searchsorted``; a NaN key matches any NaN input.  A look-up from string keys is one
dict access per element (strings have no vectorised hash in numpy).

Every kernel here moves or selects values (casting integers to float at most), so each follows
the exact mode.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel, name_of

_STR = np.dtype(object)


class _Table:
    """A key -> value map over arrays: ``keys`` and ``values`` parallel, ``default`` for the
    rest.  Numeric keys are searched sorted; string keys through a dict."""

    def __init__(self, keys: np.ndarray, values: np.ndarray, default: Any) -> None:
        self.key_dtype = keys.dtype
        self.value_dtype = values.dtype
        self.default = default
        if keys.dtype == _STR:
            self.map = dict(zip(keys.tolist(), values.tolist()))
            return
        self.map = None
        # unique of the reversed keys: the first index there is the last repeat in the model
        rev = keys[::-1]
        uniq, first = np.unique(rev, return_index=True)
        self.sorted_keys = uniq
        self.sorted_values = values[::-1][first]
        nan = np.isnan(uniq) if uniq.dtype.kind == "f" else np.zeros(uniq.shape, bool)
        self.nan_value = None
        if nan.any():  # np.unique keeps every NaN: the last NaN in the model is rev's first
            self.nan_value = values[::-1][int(np.flatnonzero(np.isnan(rev))[0])]
            self.sorted_keys = uniq[~nan]
            self.sorted_values = self.sorted_values[~nan]

    def __call__(self, x: np.ndarray, out: np.ndarray) -> None:
        if self.map is not None:
            get, default = self.map.get, self.default
            flat = [get(v, default) for v in x.ravel().tolist()]
            out[...] = np.array(flat, dtype=out.dtype).reshape(x.shape)
            return
        keys = self.sorted_keys
        if keys.size == 0:
            out[...] = self.default
        else:
            pos = np.minimum(np.searchsorted(keys, x), keys.size - 1)
            hit = keys[pos] == x
            np.copyto(out, self.default)
            np.copyto(out, self.sorted_values[pos], where=hit)
        if self.nan_value is not None:
            np.copyto(out, self.nan_value, where=np.isnan(x))


def _strings(values: Sequence[str]) -> np.ndarray:
    arr = np.empty(len(values), dtype=_STR)
    arr[:] = list(values)
    return arr


class _MapKernel(OpKernel):
    """Element-wise look-up through one or two :class:`_Table` (chosen by the input type)."""

    supports_exact = True
    tables: dict[np.dtype, _Table]

    def table(self, dtype: np.dtype) -> _Table:
        t = self.tables.get(np.dtype(dtype))
        if t is None:
            want = " or ".join(sorted(_type_name(k) for k in self.tables))
            raise self.fail(f"input is {_type_name(dtype)}, but the node maps {want} keys")
        return t

    def infer(self, ctx: InferContext) -> None:
        ctx.set_output(0, self.table(ctx.dtype(0)).value_dtype, ctx.shape(0))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x = inputs[0]
        self.table(x.dtype)(x, outputs[0])


def _type_name(dtype: np.dtype) -> str:
    return "string" if dtype == _STR else str(dtype)


_KEYS = {"floats": np.float32, "int64s": np.int64, "strings": _STR}
#: LabelEncoder's default attribute per value element type (opset 2 and later).
_DEFAULTS = {
    "f": ("default_float", -0.0),
    "i": ("default_int64", -1),
    "O": ("default_string", "_Unused"),
}


class LabelEncoder(_MapKernel):
    """Opset 1: strings <-> their index in ``classes_strings``; opset 2 and 4: ``keys_*`` ->
    ``values_*`` (opset 4 adds the ``*_tensor`` attributes and more element types)."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        if node.opset < 2:
            classes = _strings(node.attr("classes_strings", []))
            index = np.arange(classes.size, dtype=np.int64)
            self.tables = {
                _STR: _Table(classes, index, int(node.attr("default_int64", -1))),
                np.dtype(np.int64): _Table(index, classes, node.attr("default_string", "_Unused")),
            }
            return
        keys = self._one_of("keys")
        values = self._one_of("values")
        if keys.size != values.size:
            raise self.fail(f"{keys.size} keys but {values.size} values")
        self.tables = {keys.dtype: _Table(keys, values, self._default(values.dtype))}

    def _one_of(self, what: str) -> np.ndarray:
        node = self.node
        given = [n for n in ("floats", "int64s", "strings") if f"{what}_{n}" in node.attrs]
        if node.opset >= 4 and f"{what}_tensor" in node.attrs:
            given.append("tensor")
        if len(given) != 1:
            raise self.fail(f"exactly one {what}_* attribute must be set, got {len(given)}")
        name = given[0]
        value = node.attrs[f"{what}_{name}"]
        if name == "tensor":
            arr = np.asarray(value)
            if arr.dtype.kind not in "fiO":
                raise self.fail(f"{what}_tensor of element type {arr.dtype} is not supported")
            return arr.reshape(-1)
        if name == "strings":
            return _strings(value)
        return np.asarray(value, dtype=_KEYS[name])

    def _default(self, dtype: np.dtype) -> Any:
        node = self.node
        if "default_tensor" in node.attrs:
            arr = np.asarray(node.attrs["default_tensor"]).reshape(-1)
            if arr.size != 1:
                raise self.fail(f"default_tensor must hold one value, it holds {arr.size}")
            if arr.dtype != dtype:
                raise self.fail(f"default_tensor is {arr.dtype}, the values are {dtype}")
            return arr[0]
        name, fallback = _DEFAULTS[dtype.kind]
        return dtype.type(node.attr(name, fallback)) if dtype != _STR else node.attr(name, fallback)


class CategoryMapper(_MapKernel):
    """``cats_strings[i]`` <-> ``cats_int64s[i]``, the direction set by the input's type."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        strings = _strings(node.attr("cats_strings", []))
        ints = np.asarray(node.attr("cats_int64s", []), dtype=np.int64)
        if strings.size != ints.size:
            raise self.fail(f"{strings.size} cats_strings but {ints.size} cats_int64s")
        self.tables = {
            _STR: _Table(strings, ints, int(node.attr("default_int64", -1))),
            np.dtype(np.int64): _Table(ints, strings, node.attr("default_string", "_Unused")),
        }


class OneHotEncoder(OpKernel):
    """One float 1 per element at its category's index in an extra last axis; numeric inputs
    are cast to int64 first.  ``zeros=0`` refuses an element of no category."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        has_ints, has_strings = "cats_int64s" in node.attrs, "cats_strings" in node.attrs
        if has_ints == has_strings:
            raise self.fail("exactly one of cats_int64s and cats_strings must be set")
        if has_strings:
            cats = _strings(node.attrs["cats_strings"])
        else:
            cats = np.asarray(node.attrs["cats_int64s"], dtype=np.int64)
        self.strings = has_strings
        self.size = int(cats.size)
        # index of each category; a repeated category keeps its first place
        keys = cats[::-1]
        index = np.arange(self.size - 1, -1, -1, dtype=np.int64)
        self.table = _Table(keys, index, -1)
        self.zeros = bool(node.attr("zeros", 1))

    def infer(self, ctx: InferContext) -> None:
        dtype = ctx.dtype(0)
        if (dtype == _STR) != self.strings or dtype.kind not in "fiO":
            want = "string" if self.strings else "numeric"
            raise self.fail(f"input is {_type_name(dtype)}; the categories need {want} input")
        ctx.set_output(0, np.float32, (*ctx.shape(0), self.size))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x = inputs[0]
        if not self.strings and x.dtype != np.int64:
            x = x.astype(np.int64)
        idx = np.empty(x.shape, np.int64)
        self.table(x, idx)
        idx = idx.reshape(-1)
        found = idx >= 0
        if not self.zeros and not found.all():
            bad = x.reshape(-1)[int(np.flatnonzero(~found)[0])]
            raise self.fail(f"value {bad!r} is not one of the categories", "invalid_input")
        out = outputs[0].reshape(-1, self.size)
        out[...] = 0
        out[np.flatnonzero(found), idx[found]] = 1


class ArrayFeatureExtractor(OpKernel):
    """``X[..., Y]`` with Y's indices flattened; a 1-D X gives one row [1, len(Y)]."""

    supports_exact = True

    def infer(self, ctx: InferContext) -> None:
        if ctx.dtype(1).kind not in "iu":  # (a float Y failed np.take mid-run)
            raise self.fail(
                f"Y (the indices) must be an integer tensor, got {name_of(ctx.dtype(1))}",
                "invalid_input",
            )
        shape = ctx.shape(0)
        k = int(np.prod(ctx.shape(1), dtype=np.int64))
        lead = shape[:-1] if len(shape) > 1 else (1,)
        ctx.set_output(0, ctx.dtype(0), (*lead, k))
        known = ctx.known_value(1)
        if known is not None and len(shape) > 0:  # constant indices: checked once, here
            idx = np.asarray(known).reshape(-1)
            self._check(idx, shape[-1])
            ctx.prepared = np.ascontiguousarray(idx, dtype=np.intp)
        else:  # run-time indices: their extremes land in scratch (a run allocates nothing)
            ctx.prepared = (ctx.add_scratch(ctx.dtype(1), ()), ctx.add_scratch(ctx.dtype(1), ()))

    def _check(self, idx: np.ndarray, n: int, low: Any = None, high: Any = None) -> None:
        # int() of the extremes: comparing numpy values would allocate their boolean results
        if idx.size and (int(np.min(idx, out=low)) < 0 or int(np.max(idx, out=high)) >= n):
            bad = idx[(idx < 0) | (idx >= n)][0]
            raise self.fail(f"index {bad} is out of range for a last axis of {n}", "invalid_input")

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x, y = inputs[0], inputs[1]
        if x.ndim == 0:
            raise self.fail("X must have at least one dimension", "invalid_input")
        idx = ctx.prepared
        if isinstance(idx, tuple):
            low, high = (ctx.scratch[i] for i in idx)
            idx = y.reshape(-1)
            self._check(idx, x.shape[-1], low, high)
        # indices checked: "clip" changes none of them, and unlike "raise" it writes straight
        # into out (numpy buffers a raising take)
        np.take(x, idx, axis=-1, out=outputs[0].reshape((*x.shape[:-1], idx.size)), mode="clip")


class FeatureVectorizer(OpKernel):
    """The inputs side by side as float32 rows: input i takes ``inputdimensions[i]`` columns,
    cut or padded with zeros; a 1-D input is one row."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.dims = [int(d) for d in node.attr("inputdimensions", [])]
        if len(self.dims) != len(node.inputs):
            raise self.fail(f"{len(node.inputs)} inputs but {len(self.dims)} inputdimensions")
        if any(d < 0 for d in self.dims):
            raise self.fail(f"inputdimensions {self.dims} has a negative size")

    def infer(self, ctx: InferContext) -> None:
        rows = {self._rows(ctx.shape(i)) for i in range(len(self.dims))}
        if len(rows) > 1:
            raise self.fail(
                f"the inputs have different numbers of rows {sorted(rows)}", "invalid_input"
            )
        n = rows.pop() if rows else 1
        ctx.set_output(0, np.float32, (n, sum(self.dims)))

    @staticmethod
    def _rows(shape: tuple[int, ...]) -> int:
        return shape[0] if len(shape) > 1 else 1

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        out = outputs[0]
        start = 0
        for x, d in zip(inputs, self.dims):
            rows = x.reshape(self._rows(x.shape), -1)
            c = min(d, rows.shape[1])
            out[:, start : start + c] = rows[:, :c]
            out[:, start + c : start + d] = 0
            start += d
