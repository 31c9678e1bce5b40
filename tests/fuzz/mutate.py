"""Mutated model bytes: a generated model with its serialisation or its structure damaged.

Byte mutations (bit flips, overwritten, inserted, deleted and repeated runs, truncation, a
varint of ten 0xff bytes) exercise the protobuf parse and everything behind it with models no
generator would write.  Structural mutations edit the ModelProto where the importer must be
careful: names that refer to nothing, a node reading its own output, duplicated names, huge or
negative dims in declarations and initializers, raw data of the wrong length, external data
pointing outside the model's folder, opsets and IR versions out of range, a model-local
function calling itself.  The worker makes inputs for the result from its declarations.
"""

from __future__ import annotations

import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper

from .harness import Case
from .values import EXTREME_INTS


@st.composite
def byte_mutation(draw, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, 6))):
        if not buf:
            buf += b"\x08"
        i = draw(st.integers(0, len(buf) - 1))
        how = draw(
            st.sampled_from(
                ["flip", "set", "insert", "delete", "repeat", "truncate", "varint", "flip"]
            )
        )
        if how == "flip":
            buf[i] ^= 1 << draw(st.integers(0, 7))
        elif how == "set":
            buf[i] = draw(st.sampled_from([0x00, 0xFF, 0x7F, 0x80, 0x08, 0x12, 0x3A]))
        elif how == "insert":
            buf[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif how == "delete":
            del buf[i : i + draw(st.integers(1, 8))]
        elif how == "repeat":
            j = min(len(buf), i + draw(st.integers(1, 32)))
            buf[i:i] = buf[i:j] * draw(st.integers(1, 4))
        elif how == "truncate":
            del buf[i:]
        else:
            buf[i:i] = b"\xff" * 9 + b"\x01"
    return bytes(buf)


def _tensors(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    return list(model.graph.initializer)


@st.composite
def structural_mutation(draw, data: bytes) -> bytes:
    model = onnx.load_from_string(data)
    g = model.graph
    for _ in range(draw(st.integers(1, 3))):
        how = draw(
            st.sampled_from(
                [
                    "dangling",
                    "self_loop",
                    "duplicate_output",
                    "dims",
                    "raw_length",
                    "external",
                    "opset",
                    "ir",
                    "recursive_function",
                    "swap_nodes",
                    "drop_input",
                    "elem_type",
                    "huge_initializer",
                    "empty_op",
                ]
            )
        )
        if how == "dangling" and g.node:
            g.node[0].input.append("nowhere")
        elif how == "self_loop" and g.node and g.node[0].output:
            g.node[0].input.insert(0, g.node[0].output[0])
        elif how == "duplicate_output" and g.node:
            g.node.append(g.node[0])
        elif how == "dims" and g.input:
            dims = g.input[0].type.tensor_type.shape.dim
            for d in dims:
                d.dim_value = draw(st.sampled_from([*EXTREME_INTS, 0, 1]))
        elif how == "raw_length" and _tensors(model):
            t = _tensors(model)[0]
            raw = t.raw_data or b"\x00" * 4
            t.raw_data = raw[: len(raw) // 2] if draw(st.booleans()) else raw * 3
        elif how == "external" and _tensors(model):
            t = _tensors(model)[0]
            location = draw(
                st.sampled_from(
                    ["/etc/hostname", "../../etc/hostname", "missing.bin", "", "/proc/self/mem"]
                )
            )
            del t.external_data[:]
            for k, v in [
                ("location", location),
                ("offset", str(draw(st.sampled_from([0, -1, 2**62])))),
                ("length", str(draw(st.sampled_from([4, 2**40])))),
            ]:
                e = t.external_data.add()
                e.key, e.value = k, v
            t.data_location = TensorProto.EXTERNAL
            t.ClearField("raw_data")
        elif how == "opset":
            model.opset_import[0].version = draw(st.sampled_from([0, -1, 99, 2**62, 1]))
        elif how == "ir":
            model.ir_version = draw(st.sampled_from([0, -1, 99, 2**62, 1]))
        elif how == "recursive_function" and g.node:
            f = helper.make_function(
                "local",
                "F",
                ["a"],
                ["b"],
                [helper.make_node("F", ["a"], ["b"], domain="local")],
                [helper.make_opsetid("", 17)],
            )
            model.functions.append(f)
            model.opset_import.append(helper.make_opsetid("local", 1))
            n = g.node[0]
            n.op_type, n.domain = "F", "local"
            del n.input[1:]
            del n.output[1:]
            del n.attribute[:]
        elif how == "swap_nodes" and len(g.node) > 1:
            nodes = list(g.node)[::-1]
            del g.node[:]
            g.node.extend(nodes)
        elif how == "drop_input" and g.input:
            del g.input[0]
        elif how == "elem_type" and g.input:
            g.input[0].type.tensor_type.elem_type = draw(st.sampled_from([0, 8, 99, 23, 16]))
        elif how == "huge_initializer" and _tensors(model):
            t = _tensors(model)[0]
            t.dims[:] = [2**31, 2**31] if draw(st.booleans()) else [-1, 4]
        elif how == "empty_op" and g.node:
            g.node[0].op_type = draw(st.sampled_from(["", "Nonexistent", g.node[0].op_type]))
    return model.SerializeToString()


@st.composite
def mutated_case(draw, base: st.SearchStrategy[Case]) -> Case:
    case = draw(base)
    if draw(st.booleans()):
        model = draw(byte_mutation(case.model))
        kind = "bytes"
    else:
        model = draw(structural_mutation(case.model))
        kind = "structure"
    return Case(
        label=f"mutated-{kind}/{case.label}",
        model=model,
        feeds=None,
        paths=case.paths,
        options=case.options,
        cancel_after=5.0,
        seed=case.seed,
    )
