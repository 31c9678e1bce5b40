"""Tensors a model cannot hold, in attributes and initializers (issue 13): an element type that
is UNDEFINED or unknown, data that does not fill the dims.  Each is an ``invalid_model``
SessionError naming the tensor, never the decoder's raw exception."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import graphrt
from graphrt import proto

#: (case, element type, raw data, words the message must hold)
BAD = [
    ("undefined", TensorProto.UNDEFINED, b"\0", ("UNDEFINED", "not supported")),
    ("unknown type", 1000, b"\0", ("1000", "not supported")),
    ("raw too short", TensorProto.FLOAT, b"\0", ("raw_data",)),
    ("bfloat16 odd bytes", TensorProto.BFLOAT16, b"\0", ()),
]


def _bad_tensor(name: str, code: int, raw: bytes) -> onnx.TensorProto:
    return onnx.TensorProto(name=name, data_type=code, dims=[1], raw_data=raw)


def _model(nodes, inits=()) -> bytes:
    graph = helper.make_graph(nodes, "g", [], [onnx.ValueInfoProto(name="y")], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


@pytest.mark.parametrize(("case", "code", "raw", "words"), BAD, ids=[b[0] for b in BAD])
def test_a_constant_attribute_that_cannot_be_read_is_an_invalid_model(case, code, raw, words):
    node = helper.make_node("Constant", [], ["y"], name="c0", value=_bad_tensor("v", code, raw))
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(_model([node]))
    err = info.value
    assert err.kind == "invalid_model" and err.node == "c0", err
    message = str(err)
    assert "'c0'" in message and "'value'" in message and "'v'" in message, message
    assert all(w in message for w in words), message
    assert isinstance(err.__cause__, ValueError)


def test_a_tensors_attribute_with_an_undefined_element_is_an_invalid_model():
    """A TENSORS attribute (Identity takes none, but every attribute is decoded before a
    kernel sees the node)."""
    good = onnx.numpy_helper.from_array(np.zeros(1, np.float32), "good")
    node = helper.make_node("Identity", ["x"], ["y"])
    node.attribute.append(
        helper.make_attribute("many", [good, _bad_tensor("bad", TensorProto.UNDEFINED, b"\0")])
    )
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(_model([node], [onnx.numpy_helper.from_array(np.ones(1), "x")]))
    assert info.value.kind == "invalid_model" and "'bad'" in str(info.value)
    assert "UNDEFINED" in str(info.value)


def test_an_initializer_with_an_undefined_element_type_is_an_invalid_model():
    node = helper.make_node("Identity", ["w"], ["y"])
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(_model([node], [_bad_tensor("w", TensorProto.UNDEFINED, b"\0")]))
    assert info.value.kind == "invalid_model"
    assert "'w'" in str(info.value) and "UNDEFINED" in str(info.value)


@pytest.mark.parametrize("code", [TensorProto.UNDEFINED, 1000, -1])
def test_to_array_refuses_an_element_type_it_cannot_decode_with_value_error(code):
    t = onnx.TensorProto(name="t", dims=[1], raw_data=b"\0")
    t.data_type = code
    with pytest.raises(ValueError, match="element type"):
        proto.to_array(t)
