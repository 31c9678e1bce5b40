"""Attribute values for the fuzz suite: valid-ish values from each schema, and hostile ones.

Each attribute's name says what it means often enough to aim: geometry (kernel_shape, strides,
dilations, pads) gets lists of the spatial rank or twice it, now and then huge (2**62) or
negative or of the wrong length; axes get values near the rank; type attributes get ONNX type
codes; strings come from the words the schema's description quotes.  Every integer field is
also tried with ``EXTREME_INTS``, every float with NaN and infinities.
"""

from __future__ import annotations

import math
import re

import numpy as np
from hypothesis import strategies as st
from onnx import AttributeProto, TensorProto, helper, numpy_helper
from onnx.defs import OpSchema

from .values import EXTREME_INTS, SPECIAL_FLOATS, fill, rare

A = OpSchema.AttrType
GEOMETRY = {"kernel_shape", "strides", "dilations", "pads", "output_padding", "output_shape"}
AXES = {
    "axis",
    "axes",
    "perm",
    "batch_axis",
    "time_axis",
    "new_axis",
    "scan_input_axes",
    "scan_output_axes",
    "scan_input_directions",
    "scan_output_directions",
    "directions",
}
TYPES = {"to", "dtype", "output_dtype", "stash_type", "output_datatype", "fmod_type"}
BOOLS = {
    "saturate",
    "keepdims",
    "select_last_index",
    "noop_with_empty_axes",
    "transA",
    "transB",
    "ceil_mode",
    "count_include_pad",
    "exclusive",
    "reverse",
    "sorted",
    "largest",
    "upper",
    "center_point_box",
    "training_mode",
    "is_causal",
    "onesided",
    "periodic",
    "normalized",
    "antialias",
    "exclude_outside",
    "detect_positive",
    "detect_negative",
    "layout",
    "storage_order",
    "align_corners",
    "interleaved",
    "coordinate_transformation_mode_int",
    "input_forget",
    "linear_before_reset",
}
_QUOTED = re.compile(r"['\"`]([A-Za-z_][A-Za-z0-9_\-]{1,30})['\"`]")
_CAPS = re.compile(r"\b([A-Z][A-Z0-9_]{2,20})\b")
HUGE_GEOMETRY = (2**29, 2**31, 2**40, 2**62, 2**63 - 1)


def words(schema_attr: OpSchema.Attribute) -> list[str]:
    """Strings an attribute may take: its default and the words its description quotes."""
    found = set(_QUOTED.findall(schema_attr.description))
    found |= {w for w in _CAPS.findall(schema_attr.description) if "_" in w or w.isalpha()}
    default = schema_attr.default_value
    first = []
    if default.type == AttributeProto.STRING:
        first = [default.s.decode(errors="replace")]
    return first + sorted(found - set(first)) + ["", "garbage"]


@st.composite
def extreme_int(draw) -> int:
    return draw(st.sampled_from(EXTREME_INTS))


@st.composite
def some_float(draw, default: float | None = None) -> float:
    how = draw(st.integers(0, 9))
    if how < 3 and default is not None and math.isfinite(default):
        return default * draw(st.sampled_from([1.0, 0.5, 2.0, -1.0, 0.0]))
    if how < 8:
        return draw(st.sampled_from([0.0, 1.0, -1.0, 0.5, 1e-5, 2.0, 6.0, -0.75, 1e5]))
    return draw(st.sampled_from(SPECIAL_FLOATS))


@st.composite
def geometry(draw, name: str, spatial: int) -> list[int]:
    length = 2 * spatial if name == "pads" else spatial
    length = draw(st.sampled_from([length] * 8 + [0, 1, length + 1, 2 * length + 1]))
    least = 0 if name in ("pads", "output_padding") else 1
    small = st.integers(least, 4)
    values = st.one_of(
        small,
        small,
        small,
        small,
        small,
        small,
        small,
        st.sampled_from(HUGE_GEOMETRY),
        st.sampled_from([0, -1, -(2**63)]),
    )
    return [draw(values) for _ in range(length)]


@st.composite
def axes_value(draw, rank: int, many: bool) -> int | list[int]:
    near = st.integers(-rank - 1, max(rank, 1))
    one = st.one_of(near, near, near, near, near, near, near, near, extreme_int())
    if not many:
        return draw(one)
    length = draw(st.sampled_from([rank, rank, 1, 0, rank + 1, 2]))
    if draw(st.booleans()) and rank:  # a permutation, the usual case
        return list(draw(st.permutations(range(rank))))[:length]
    return [draw(one) for _ in range(length)]


@st.composite
def small_tensor(draw) -> TensorProto:
    dtype = draw(
        st.sampled_from(
            [np.float32, np.float32, np.int64, np.int32, np.float64, np.bool_, np.float16, np.uint8]
        )
    )
    shape = draw(st.sampled_from([(), (1,), (0,), (3,), (2, 2), (2, 0)]))
    arr = fill(np.dtype(dtype), shape, draw(st.integers(0, 2**31)), draw(st.integers(0, 3)))
    return numpy_helper.from_array(arr, "value")


@st.composite
def attribute(
    draw, name: str, schema_attr: OpSchema.Attribute | None, attr_type: int, rank: int
) -> AttributeProto | None:
    """One attribute of this name and type (or, rarely, of a wrong type)."""
    spatial = max(rank - 2, 1)
    if rare(draw, 50):  # the wrong type for the name
        attr_type = draw(st.sampled_from([A.INT, A.FLOAT, A.INTS, A.STRING]))
    default = schema_attr.default_value if schema_attr is not None else None
    if attr_type == A.INT:
        if rare(draw, 10):
            value = draw(extreme_int())
        elif name in AXES:
            value = draw(axes_value(rank, many=False))
        elif name in TYPES:
            value = draw(st.sampled_from([1, 1, 7, 6, 10, 11, 9, 2, 3, 16, 8, 0, 99, 17, 23]))
        elif name in BOOLS:
            value = draw(st.sampled_from([0, 1, 1, 2]))
        elif default is not None and default.type == AttributeProto.INT:
            value = draw(st.sampled_from([default.i, default.i, 0, 1, 2, 3, -1]))
        else:
            value = draw(st.integers(-2, 8))
        return helper.make_attribute(name, int(value), attr_type=AttributeProto.INT)
    if attr_type == A.INTS:
        if name in GEOMETRY or name in ("kernel_shape", "blocksize"):
            value = draw(geometry(name, spatial))
        elif name in AXES:
            value = draw(axes_value(rank, many=True))
        else:
            length = draw(st.integers(0, 6))
            item = st.one_of(*[st.integers(-2, 8)] * 6, extreme_int())
            value = [draw(item) for _ in range(length)]
        return helper.make_attribute(name, value, attr_type=AttributeProto.INTS)
    if attr_type == A.FLOAT:
        dflt = default.f if default is not None and default.type == AttributeProto.FLOAT else None
        return helper.make_attribute(name, draw(some_float(dflt)), attr_type=AttributeProto.FLOAT)
    if attr_type == A.FLOATS:
        value = [draw(some_float()) for _ in range(draw(st.integers(0, 5)))]
        return helper.make_attribute(name, value, attr_type=AttributeProto.FLOATS)
    if attr_type == A.STRING:
        pool = words(schema_attr) if schema_attr is not None else ["", "garbage"]
        return helper.make_attribute(
            name, draw(st.sampled_from(pool)), attr_type=AttributeProto.STRING
        )
    if attr_type == A.STRINGS:
        pool = words(schema_attr) if schema_attr is not None else ["a", "b"]
        value = [draw(st.sampled_from(pool + ["a", "b"])) for _ in range(draw(st.integers(0, 4)))]
        return helper.make_attribute(name, value, attr_type=AttributeProto.STRINGS)
    if attr_type == A.TENSOR:
        return helper.make_attribute(name, draw(small_tensor()), attr_type=AttributeProto.TENSOR)
    if attr_type == A.TENSORS:
        value = [draw(small_tensor()) for _ in range(draw(st.integers(0, 2)))]
        return helper.make_attribute(name, value, attr_type=AttributeProto.TENSORS)
    if attr_type == A.SPARSE_TENSOR:
        values = draw(small_tensor())
        n = int(np.prod(values.dims)) if values.dims else 1
        idx = numpy_helper.from_array(
            np.array([draw(st.sampled_from([0, 1, 5, -1, 2**62])) for _ in range(n)], np.int64),
            "idx",
        )
        dims = [draw(st.sampled_from([0, 1, 4, 2**40]))]
        sparse = helper.make_sparse_tensor(values, idx, dims)
        return helper.make_attribute(name, sparse, attr_type=AttributeProto.SPARSE_TENSOR)
    if attr_type == A.TYPE_PROTO:
        elem = draw(st.sampled_from([TensorProto.FLOAT, TensorProto.INT64, 0]))
        proto = helper.make_tensor_type_proto(elem, None)
        if draw(st.booleans()):
            proto = helper.make_sequence_type_proto(proto)
        return helper.make_attribute(name, proto, attr_type=AttributeProto.TYPE_PROTO)
    return None  # graphs are the control-flow generator's (control.py)
