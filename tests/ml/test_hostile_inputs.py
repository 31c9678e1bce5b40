"""Every ai.onnx.ml operator against inputs of the wrong type or rank: refused, never a crash.

Each operator of graphrt-ops-ml with an onnx schema gets its required inputs as one element type
(float, int64, int32, bool, double, string, int8) and one rank (2, 1, 0), attributes left out.
Most of these are invalid models or inputs; the kernel either handles the case or refuses it
with a SessionError of the model's or the input's kind. A "kernel_error" (an exception the
kernel did not mean: ArrayFeatureExtractor's float indices, Scaler's 0-d X) fails the test.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import graphrt
from tests.ml.conftest import REASON
from tests.ops._schemas import TYPES, feed_of, node_model, required, run_to_a_verdict, schemas

pytest.importorskip("graphrt_ops_ml", reason=REASON)
from graphrt_ops_ml.table import OPERATORS

SHAPES = [(2, 3), (3,), ()]
LINES = [(d.op_type, "" if d.domain == "ai.onnx" else d.domain) for d in OPERATORS]
CASES = [
    (op, domain, type_str, shape)
    for op, domain in LINES
    if schemas(op, domain)
    for type_str in TYPES
    for shape in SHAPES
]


def test_the_operators_are_found() -> None:
    assert {"ArrayFeatureExtractor", "Scaler", "LabelEncoder"} <= {c[0] for c in CASES}


@pytest.mark.parametrize(
    "op, domain, type_str, shape",
    CASES,
    ids=[f"{op}-{t[7:-1]}-{'x'.join(map(str, s)) or 'scalar'}" for op, _, t, s in CASES],
)
def test_refused_or_handled_never_a_kernel_error(op, domain, type_str, shape) -> None:
    schema = schemas(op, domain)[-1]
    code, numpy_type = TYPES[type_str]
    inputs = len(required(schema))
    model = node_model(
        op, [(code, shape)] * inputs, len(schema.outputs), schema.since_version, domain
    )
    run_to_a_verdict(model, feed_of([(numpy_type, shape)] * inputs))


def test_float_indices_are_refused_by_name() -> None:
    node = helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain="ai.onnx.ml")
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("i", TensorProto.FLOAT, [1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    )
    feed = {"x": np.ones((2, 3), np.float32), "i": np.zeros(1, np.float32)}
    with pytest.raises(graphrt.SessionError, match=r"indices.*integer.*got tensor\(float\)") as e:
        graphrt.Session(model.SerializeToString()).run(None, feed)
    assert e.value.kind == "invalid_input"


def test_a_0d_input_to_scaler_is_scaled() -> None:
    node = helper.make_node("Scaler", ["x"], ["y"], domain="ai.onnx.ml", offset=[1.0], scale=[2.0])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    )
    (y,) = graphrt.Session(model.SerializeToString()).run(None, {"x": np.array(4.0)})
    assert y.shape == () and y.dtype == np.float32 and y == 6.0  # (4 - 1) * 2
