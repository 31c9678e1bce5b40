"""Without graphrt-ops-ml (tox -e no-ml): a scikit-learn-style model fails at session creation
with unsupported_operator, naming every ai.onnx.ml and string operator it lacks at once."""

from __future__ import annotations

import importlib.util

import pytest
from onnx import TensorProto, helper

import graphrt
from graphrt import SessionError

ML_INSTALLED = importlib.util.find_spec("graphrt_ops_ml") is not None
WANT = [
    "StringNormalizer (opset 17)",
    "ai.onnx.ml.Scaler (opset 3)",
    "ai.onnx.ml.TreeEnsembleRegressor (opset 3)",
]


def _pipeline_model():
    scaler = helper.make_node(
        "Scaler", ["x"], ["scaled"], domain="ai.onnx.ml", offset=[0.0, 1.0], scale=[2.0, 0.5]
    )
    tree = helper.make_node(
        "TreeEnsembleRegressor", ["scaled"], ["score"], domain="ai.onnx.ml",
        n_targets=1, nodes_treeids=[0], nodes_nodeids=[0], nodes_featureids=[0],
        nodes_values=[0.0], nodes_modes=["LEAF"], nodes_truenodeids=[0],
        nodes_falsenodeids=[0], target_treeids=[0], target_nodeids=[0], target_ids=[0],
        target_weights=[1.5],
    )  # fmt: skip
    norm = helper.make_node("StringNormalizer", ["words"], ["lower"], case_change_action="LOWER")
    graph = helper.make_graph(
        [scaler, tree, norm],
        "pipeline",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 2]),
            helper.make_tensor_value_info("words", TensorProto.STRING, [None]),
        ],
        [
            helper.make_tensor_value_info("score", TensorProto.FLOAT, [None, 1]),
            helper.make_tensor_value_info("lower", TensorProto.STRING, [None]),
        ],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    return helper.make_model(graph, opset_imports=opsets)


@pytest.mark.skipif(ML_INSTALLED, reason="graphrt-ops-ml is installed: tox -e no-ml runs this")
def test_ml_operators_are_named_when_ops_ml_is_missing():
    with pytest.raises(SessionError) as info:
        graphrt.Session(_pipeline_model())
    err = info.value
    assert err.kind == "unsupported_operator"
    assert sorted(err.operators) == WANT
    assert "ai.onnx.ml.TreeEnsembleRegressor" in str(err)


@pytest.mark.skipif(not ML_INSTALLED, reason="graphrt-ops-ml is not installed")
def test_ml_operators_are_named_when_ops_ml_is_left_out():
    """The same model with ops-ml installed but outside the session's allow-list; and in."""
    with pytest.raises(SessionError) as info:
        graphrt.Session(_pipeline_model(), plugins=["ops-basic", "ops-controlflow"])
    assert info.value.kind == "unsupported_operator"
    assert sorted(info.value.operators) == WANT
    graphrt.Session(_pipeline_model(), plugins=["ops-basic", "ops-ml"])
