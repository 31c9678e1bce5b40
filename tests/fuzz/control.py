"""Control-flow models: If, Loop, Scan and SequenceMap with bodies that mostly fit.

The bodies are small (an Add, an Identity, a Less) so that the interesting part is the
operator around them: trip counts and conditions at the extremes (2**62 iterations, no trip
count and no condition: a loop that only cancellation ends), bodies whose scan outputs double
every iteration, scan axes and directions out of range, branches that disagree.  Every
control-flow case carries a cancellation deadline; an infinite loop must end in
``SessionError(kind="cancelled")``, a growing one in a SessionError before memory runs out.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from .attributes import axes_value
from .harness import Case
from .models import Builder, finish
from .operators import OpInfo
from .values import EXTREME_INTS, base_shape, rare, tensor

F = TensorProto.FLOAT


def _const(name: str, value: np.ndarray) -> object:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name))


def _vi(name: str, elem: int | None = None) -> object:
    if elem is None:
        import onnx

        return onnx.ValueInfoProto(name=name)
    return helper.make_tensor_value_info(name, elem, None)


def _float_input(draw, b: Builder, shape: tuple[int, ...]) -> str:
    name = b.fresh("x")
    b.inputs.append(helper.make_tensor_value_info(name, F, list(shape)))
    b.feeds[name] = draw(tensor(np.dtype(np.float32), shape))
    return name


@st.composite
def if_case(draw, op: OpInfo, opset: int) -> Case:
    b = Builder(draw, draw(base_shape()))
    x = _float_input(draw, b, b.base)
    cond_shape = draw(st.sampled_from([(), (), (1,), (2,), (0,)]))
    b.inputs.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, list(cond_shape)))
    b.feeds["cond"] = (
        np.array(
            draw(
                st.lists(
                    st.booleans(),
                    min_size=int(np.prod(cond_shape)),
                    max_size=int(np.prod(cond_shape)),
                )
            )
        )
        .reshape(cond_shape)
        .astype(bool)
    )
    k = draw(st.integers(1, 2))
    k_else = k if not rare(draw, 10) else k + 1

    def branch(tag: str, count: int, op_type: str) -> object:
        nodes, outs = [], []
        for i in range(count):
            out = f"{tag}{i}"
            if draw(st.booleans()):
                nodes.append(helper.make_node(op_type, [x], [out]))
            else:  # a constant of another shape than the other branch's
                nodes.append(
                    _const(out, np.full(draw(st.sampled_from([(1,), (), (2, 0)])), 1.5, np.float32))
                )
            outs.append(_vi(out, F if draw(st.booleans()) else None))
        return helper.make_graph(nodes, tag, [], outs)

    node = helper.make_node(
        "If",
        ["cond"],
        [f"y{i}" for i in range(k)],
        name="n0",
        then_branch=branch("t", k, "Relu"),
        else_branch=branch("e", k_else, "Neg"),
    )
    return finish(draw, op, b, [node], [f"y{i}" for i in range(k)], opset)


@st.composite
def loop_case(draw, op: OpInfo, opset: int) -> Case:
    b = Builder(draw, draw(base_shape()))
    inputs = []
    trip = draw(st.sampled_from([3, 0, 1, 17, None, *EXTREME_INTS]))
    if trip is None:
        inputs.append("")
    else:
        b.initializers.append(numpy_helper.from_array(np.array(trip, np.int64), "M"))
        inputs.append("M")
    cond = draw(st.sampled_from([True, None, False]))
    if cond is None:
        inputs.append("")
    else:
        b.inputs.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
        b.feeds["cond"] = np.array(cond)
        inputs.append("cond")
    states = draw(st.integers(0 if trip is not None else 1, 2))
    for _ in range(states):
        inputs.append(_float_input(draw, b, b.base))
    scans = draw(st.integers(0, 2))
    grow = rare(draw, 5)  # each iteration's state twice the last one's: must be bounded
    body_inputs = [_vi("iter", TensorProto.INT64), _vi("c_in", TensorProto.BOOL)]
    body_inputs += [_vi(f"s{i}", F) for i in range(states)]
    nodes = [_const("one", np.array(1.0, np.float32))]
    stop = draw(st.sampled_from(["keep", "keep", "less", "flip"]))
    if stop == "less":
        nodes.append(_const("limit", np.array(draw(st.sampled_from([5, 0, 2**62])), np.int64)))
        nodes.append(helper.make_node("Less", ["iter", "limit"], ["c_out"]))
    elif stop == "flip":
        nodes.append(helper.make_node("Not", ["c_in"], ["c_out"]))
    else:
        nodes.append(helper.make_node("Identity", ["c_in"], ["c_out"]))
    outs = [_vi("c_out", TensorProto.BOOL)]
    for i in range(states):
        if grow:
            nodes.append(helper.make_node("Concat", [f"s{i}", f"s{i}"], [f"o{i}"], axis=0))
        else:
            nodes.append(helper.make_node("Add", [f"s{i}", "one"], [f"o{i}"]))
        outs.append(_vi(f"o{i}", F))
    for j in range(scans):
        src = f"s{j % states}" if states else "iter"
        nodes.append(helper.make_node("Identity", [src], [f"scan{j}"]))
        outs.append(_vi(f"scan{j}"))
    body = helper.make_graph(nodes, "body", body_inputs, outs)
    outputs = [f"y{i}" for i in range(states + scans)] or ["y0"]
    node = helper.make_node("Loop", inputs, outputs, name="n0", body=body)
    case = finish(draw, op, b, [node], outputs, opset, "/grow" if grow else "")
    if grow:  # the budget ends it; a small one ends it in a fraction of a second
        case.options["max_memory"] = 64 << 20
    return case


@st.composite
def scan_case(draw, op: OpInfo, opset: int) -> Case:
    b = Builder(draw, draw(base_shape()))
    states, scans = draw(st.integers(0, 2)), draw(st.integers(1, 2))
    seq = draw(st.sampled_from([3, 1, 0, 7]))
    shape = (seq, *b.base[:2]) if opset > 8 else (1, seq, *b.base[:2])
    state_shape = shape[1:] if opset > 8 else (1, *shape[2:])
    inputs = []
    if opset == 8:
        inputs.append("")
    inputs += [_float_input(draw, b, state_shape) for _ in range(states)]
    inputs += [_float_input(draw, b, shape) for _ in range(scans)]
    body_inputs = [_vi(f"s{i}", F) for i in range(states)] + [_vi(f"e{i}", F) for i in range(scans)]
    nodes, outs = [], []
    for i in range(states):
        nodes.append(helper.make_node("Add", [f"s{i}", f"e{i % scans}"], [f"so{i}"]))
        outs.append(_vi(f"so{i}", F))
    for i in range(scans):
        nodes.append(helper.make_node("Relu", [f"e{i}"], [f"eo{i}"]))
        outs.append(_vi(f"eo{i}", F))
    body = helper.make_graph(nodes, "body", body_inputs, outs)
    attrs = {
        "num_scan_inputs": scans
        if not rare(draw, 8)
        else draw(st.sampled_from([0, -1, scans + 2, 2**62]))
    }
    rank = len(shape) - (0 if opset > 8 else 1)
    if opset > 8:
        for name in (
            "scan_input_axes",
            "scan_output_axes",
            "scan_input_directions",
            "scan_output_directions",
        ):
            if rare(draw, 4):
                attrs[name] = [draw(axes_value(rank, many=False)) for _ in range(scans)]
    elif rare(draw, 4):
        attrs["directions"] = [draw(st.sampled_from([0, 1, 2, -1])) for _ in range(scans)]
    outputs = [f"y{i}" for i in range(states + scans)]
    node = helper.make_node("Scan", inputs, outputs, name="n0", body=body, **attrs)
    return finish(draw, op, b, [node], outputs, opset)


@st.composite
def sequence_map_case(draw, op: OpInfo, opset: int) -> Case:
    b = Builder(draw, draw(base_shape()))
    b.inputs.append(helper.make_tensor_sequence_value_info("seq", F, None))
    count = draw(st.integers(0, 3))
    b.feeds["seq"] = [draw(tensor(np.dtype(np.float32), b.base)) for _ in range(count)]
    extra = draw(st.booleans())
    inputs = ["seq"] + ([_float_input(draw, b, b.base)] if extra else [])
    body_inputs = [_vi("elem", F)] + ([_vi("other", F)] if extra else [])
    nodes = [helper.make_node("Add" if extra else "Relu", [v.name for v in body_inputs], ["r"])]
    body = helper.make_graph(nodes, "body", body_inputs, [_vi("r", F)])
    node = helper.make_node("SequenceMap", inputs, ["y0"], name="n0", body=body)
    return finish(draw, op, b, [node], ["y0"], opset)


@st.composite
def control_case(draw, op: OpInfo) -> Case:
    opset = draw(st.sampled_from(op.opsets))
    make = {"If": if_case, "Loop": loop_case, "Scan": scan_case, "SequenceMap": sequence_map_case}[
        op.op_type
    ]
    return draw(make(op, opset))
