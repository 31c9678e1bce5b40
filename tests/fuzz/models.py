"""One-node models for every operator, built from its onnx schema with onnx.helper.

For a node: an opset among the operator's schema versions, one type per type parameter (float32
favoured), every input the schema allows (optional ones now and then, variadic ones one to four
times) as a graph input or an initializer, attributes from ``attributes.py`` and the schema's
outputs.  Inputs that index, count or shape (integer inputs of a fixed type, or named like it)
get values near the base shape's rank and dims; the others get tensors of shapes related to a
base shape.  Session options (mode, optimization level, threads, checked mode) vary too.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnx.defs import OpSchema

from .attributes import attribute
from .harness import Case
from .hints import HINTS, Hint
from .operators import OpInfo
from .values import (
    base_shape,
    index_values,
    np_dtype,
    parse_type,
    rare,
    related_shape,
    tensor,
    type_choice,
)

OPTIONAL = OpSchema.FormalParameterOption.Optional
VARIADIC = OpSchema.FormalParameterOption.Variadic
#: Inputs that index, count or shape, whatever their type parameter.
INDEX_NAMES = {
    "shape",
    "axes",
    "indices",
    "repeats",
    "pads",
    "starts",
    "ends",
    "steps",
    "split",
    "k",
    "sizes",
    "depth",
    "M",
    "max_output_boxes_per_class",
    "limit",
    "start",
    "delta",
    "sequence_lens",
    "output_shape",
    "position",
    "block_shape",
    "image_shape",
    "batch_indices",
    "trip_count",
    "num_groups",
    "frame_length",
    "frame_step",
    "dft_length",
    "axis",
    "size",
    "onesided",
    "nonzero",
    "position_ids",
    "seqlens_k",
    "num_mel_bins",
    "output_size",
    "sample_rate",
    "lower_edge_hertz",
    "upper_edge_hertz",
    "pad",
    "reps",
    "count",
}
SCALAR_NAMES = {
    "k",
    "depth",
    "M",
    "limit",
    "start",
    "delta",
    "max_output_boxes_per_class",
    "trip_count",
    "axis",
    "size",
    "frame_length",
    "frame_step",
    "dft_length",
    "num_mel_bins",
    "sample_rate",
    "iou_threshold",
    "score_threshold",
    "ratio",
    "training_mode",
    "cond",
    "count",
}


class Builder:
    """Collects a graph's inputs, initializers and the values fed for one case."""

    def __init__(self, draw, base: tuple[int, ...], hint: Hint | None = None) -> None:
        self.draw = draw
        self.base = base
        self.hint = hint or Hint()
        self.seen: dict[str, int] = {}
        self.inputs: list[onnx.ValueInfoProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.feeds: dict[str, object] = {}
        self.count = 0

    def fresh(self, prefix: str = "x") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def declare(self, name: str, code: int, shape: tuple[int, ...]) -> onnx.ValueInfoProto:
        how = self.draw(st.integers(0, 99))
        if how < 75:
            dims = list(shape)
        elif how < 90:
            dims = [f"{name}_d{i}" for i in range(len(shape))]
        elif how < 97:
            dims = None
        else:  # declared differently from what is fed
            dims = [d + 1 for d in shape] or [1]
        return helper.make_tensor_value_info(name, code, dims)

    def array(self, name: str, type_str: str, fixed_type: bool) -> np.ndarray | None:
        kind, code = parse_type(type_str)
        dtype = np_dtype(code) if kind == "tensor" else None
        if dtype is None:
            return None
        if name in self.hint.values:
            with np.errstate(all="ignore"):
                values = np.array(
                    self.hint.values[name], np.float64 if dtype.kind == "f" else object
                )
                if dtype.kind in "iu":
                    info = np.iinfo(dtype)
                    values = np.array([min(max(int(v), info.min), info.max) for v in values])
                return values.astype(dtype)
        if name in self.hint.shapes:
            shape = self.hint.shapes[name]
            if isinstance(shape, list):  # one shape per occurrence of a variadic input
                shape = shape[self.seen.get(name, 0) % len(shape)]
            self.seen[name] = self.seen.get(name, 0) + 1
            return self.draw(tensor(dtype, shape))
        index_like = (dtype.kind in "iu" and fixed_type) or name in INDEX_NAMES
        if index_like and dtype.kind in "iuf" and dtype.itemsize >= 4:
            scalar = name in SCALAR_NAMES
            values = self.draw(index_values(self.base, scalar))
            arr = np.array(values, dtype=np.float64 if dtype.kind == "f" else object)
            if dtype.kind in "iu":
                info = np.iinfo(dtype)
                arr = np.array([min(max(int(v), info.min), info.max) for v in values], dtype)
            else:
                arr = arr.astype(dtype)
            if scalar and self.draw(st.integers(0, 3)) > 0:
                arr = arr.reshape(())
            if name == "indices":  # indices take any shape: reuse the values over a small one
                shape = self.draw(related_shape(self.base[:2]))
                arr = np.resize(arr if arr.size else np.zeros(1, dtype), shape).astype(dtype)
            return arr
        shape = self.draw(related_shape(self.base))
        return self.draw(tensor(dtype, shape))

    def tensor_input(self, name: str, arr: np.ndarray, index_like: bool) -> str:
        place = self.draw(st.integers(0, 99))
        if place >= (40 if index_like else 88):
            t = numpy_helper.from_array(arr, name)
            self.initializers.append(t)
            return name
        code = TensorProto.DataType.Value(_onnx_name(arr.dtype))
        self.inputs.append(self.declare(name, code, arr.shape))
        self.feeds[name] = arr
        return name

    def value(self, formal_name: str, type_str: str, fixed_type: bool) -> str | None:
        """A value of this type as a graph input or initializer; its name (None: cannot)."""
        name = self.fresh(formal_name[:12] if formal_name.isidentifier() else "x")
        kind, inner = parse_type(type_str)
        if kind == "tensor":
            arr = self.array(formal_name, type_str, fixed_type)
            if arr is None:
                return None
            return self.tensor_input(name, arr, formal_name in INDEX_NAMES)
        if kind == "seq" and inner[0] == "tensor" and np_dtype(inner[1]) is not None:
            count = self.draw(st.integers(0, 3))
            items = [
                self.array(formal_name, f"tensor({_type_name(inner[1])})", fixed_type)
                for _ in range(count)
            ]
            self.inputs.append(helper.make_tensor_sequence_value_info(name, inner[1], None))
            self.feeds[name] = items
            return name
        if kind == "optional":
            inner_kind, inner_inner = inner
            if inner_kind == "tensor" and np_dtype(inner_inner) is not None:
                elem = helper.make_tensor_type_proto(inner_inner, None)
                empty = self.draw(st.booleans())
                inner_type = f"tensor({_type_name(inner_inner)})"
                value = None if empty else self.array(formal_name, inner_type, fixed_type)
            elif inner_kind == "seq" and inner_inner[0] == "tensor":
                elem = helper.make_sequence_type_proto(
                    helper.make_tensor_type_proto(inner_inner[1], None)
                )
                value = (
                    None
                    if self.draw(st.booleans())
                    else [
                        self.array(formal_name, f"tensor({_type_name(inner_inner[1])})", fixed_type)
                    ]
                )
            else:
                return None
            proto = helper.make_optional_type_proto(elem)
            self.inputs.append(helper.make_value_info(name, proto))
            self.feeds[name] = value
            return name
        return None


def _type_name(code: int) -> str:
    return TensorProto.DataType.Name(code).lower()


def _onnx_name(dtype: np.dtype) -> str:
    from graphrt import dtypes

    return TensorProto.DataType.Name(dtypes.to_onnx(dtype))


@st.composite
def session_options(draw) -> dict:
    options = {}
    if draw(st.integers(0, 9)) >= 8:
        options["mode"] = "exact"
    level = draw(st.sampled_from(["all"] * 7 + ["basic", "none", "none"]))
    if level != "all":
        options["optimization_level"] = level
    threads = draw(st.sampled_from([0] * 6 + [1, 1, 3, 64]))
    if threads:
        options["intra_op_threads"] = threads
    if rare(draw, 10):
        options["check_shapes"] = True
    if rare(draw, 20):
        options["debug"] = True
    # mostly a 256 MiB budget: a model asking for more is refused in milliseconds rather than
    # computed for seconds; the default (2 GiB) a quarter of the time, and now and then a tiny
    # one (refusals everywhere, the session still usable)
    budget = draw(st.sampled_from([256 << 20] * 14 + [None] * 5 + [1 << 20, 4096]))
    if budget is not None:
        options["max_memory"] = budget
    storage = draw(st.sampled_from(["original"] * 18 + ["float16", "bfloat16"]))
    if storage != "original":
        options["weight_storage"] = storage
    return options


def opset_imports(op: OpInfo, opset: int) -> list[onnx.OperatorSetIdProto]:
    if op.domain in ("", "ai.onnx"):
        return [helper.make_opsetid("", opset)]
    return [helper.make_opsetid("", 21), helper.make_opsetid(op.domain, opset)]


def finish(
    draw,
    op: OpInfo,
    builder: Builder,
    nodes: list,
    outputs: list[str],
    opset: int,
    extra_label: str = "",
) -> Case:
    """The model around these nodes and the case that runs it."""
    outs = []
    for name in outputs:
        if draw(st.integers(0, 9)) < 7:
            outs.append(onnx.ValueInfoProto(name=name))
        else:  # typed outputs: a wrong declaration must be refused, never returned silently
            code = draw(st.sampled_from([TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL]))
            outs.append(helper.make_tensor_value_info(name, code, None))
    graph = helper.make_graph(nodes, "fuzz", builder.inputs, outs, builder.initializers)
    model = helper.make_model(graph, opset_imports=opset_imports(op, opset))
    if rare(draw, 50):
        model.ir_version = draw(st.sampled_from([3, 4, 7, 99, 0]))
    return Case(
        label=f"{op}{extra_label}",
        model=model.SerializeToString(),
        feeds=builder.feeds,
        paths=op.paths,
        options=draw(session_options()),
        cancel_after=2.0 if op.control_flow or rare(draw, 10) else None,
        twice=rare(draw, 4),
        seed=draw(st.integers(0, 2**31)),
    )


def formal_count(draw, p: OpSchema.FormalParameter) -> int:
    if p.option == OPTIONAL:
        return int(draw(st.integers(0, 9)) < 6)
    if p.option == VARIADIC:
        least = max(p.min_arity, 1)
        return draw(st.integers(least, least + 3))
    return 1


@st.composite
def node_case(draw, op: OpInfo) -> Case:
    """A one-node model of ``op`` with inputs and attributes drawn from its schema."""
    if op.control_flow:
        from .control import control_case

        return draw(control_case(op))
    opset = draw(st.sampled_from(op.opsets))
    schema = op.schema(opset)
    base = draw(base_shape())
    hint = None
    if op.op_type in HINTS and draw(st.integers(0, 9)) < 8:
        hint = HINTS[op.op_type](draw, op.op_type)
    b = Builder(draw, base, hint)
    chosen = {
        tc.type_param_str: draw(type_choice(list(tc.allowed_type_strs)))
        for tc in schema.type_constraints
    }
    input_names: list[str] = []
    for p in schema.inputs:
        fixed = p.type_str not in chosen
        count = formal_count(draw, p)
        shapes = b.hint.shapes.get(p.name)
        if p.option == VARIADIC and isinstance(shapes, list) and draw(st.integers(0, 3)):
            count = len(shapes)
        for _ in range(count):
            type_str = chosen.get(p.type_str, p.type_str)
            if not p.is_homogeneous and not fixed:
                allowed = next(
                    tc.allowed_type_strs
                    for tc in schema.type_constraints
                    if tc.type_param_str == p.type_str
                )
                type_str = draw(type_choice(list(allowed)))
            name = b.value(p.name, type_str, fixed)
            input_names.append(name or "")
    if op.op_type in ("Sum", "Mean", "Max", "Min") or op.substitute is not None:
        input_names = [n for n in input_names if n]  # substitutes: no gaps
    while input_names and input_names[-1] == "":
        input_names.pop()
    outputs = []
    for p in schema.outputs:
        for _ in range(formal_count(draw, p)):
            outputs.append(f"y{len(outputs)}")
    if not outputs:
        outputs = ["y0"]
    if rare(draw, 10) and len(outputs) > 1:  # skipped optional outputs
        outputs[draw(st.integers(1, len(outputs) - 1))] = ""
    rank = len(base)
    attrs = []
    for name, a in sorted(schema.attributes.items()):
        if name in b.hint.attrs and draw(st.integers(0, 9)) < 8:
            if b.hint.attrs[name] is not None:
                attrs.append(helper.make_attribute(name, b.hint.attrs[name]))
            continue
        if a.required or draw(st.integers(0, 9)) >= 6:
            proto = draw(attribute(name, a, a.type, rank))
            if proto is not None:
                attrs.append(proto)
    for name, values in sorted(op.extra_attributes.items()):
        if draw(st.booleans()):
            v = draw(st.sampled_from(values))
            attrs.append(helper.make_attribute(name, v))
    if "activation" in op.extra_attributes and draw(st.booleans()):
        params = [
            draw(st.sampled_from([0.0, 6.0, -1.0, math.inf, math.nan]))
            for _ in range(draw(st.sampled_from([2, 2, 0, 1, 3])))
        ]
        attrs.append(
            helper.make_attribute("activation_params", params, attr_type=onnx.AttributeProto.FLOATS)
        )
    if rare(draw, 30):  # an attribute the operator does not have
        attrs.append(helper.make_attribute("not_an_attribute", 1))
    node = helper.make_node(op.op_type, input_names, outputs, domain=op.domain or None, name="n0")
    node.attribute.extend(attrs)
    graph_outputs = [o for o in outputs if o]
    return finish(draw, op, b, [node], graph_outputs, opset)
