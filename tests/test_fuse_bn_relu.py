"""fuse_batchnorm_activation: an inference BatchNormalization (constant parameters) -> Relu
that no Conv absorbed becomes com.graphrt.FusedBatchNormalization, in fast mode only."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import graphrt
from tests._fusion import op_list
from tests._models import init, make_model, ort_session, tensor

C = 9
FUSED = ["Concat", "com.graphrt.FusedBatchNormalization"]
PLAIN = ["Concat", "BatchNormalization", "Relu"]


def _model(extra_reader: bool = False, output_bn: bool = False, runtime_mean: bool = False):
    """a, b -> Concat -> BatchNormalization -> Relu -> y (and other readers of the BN)."""
    rng = np.random.default_rng(5)
    params = {
        "scale": rng.standard_normal(C).astype(np.float32),
        "bias": rng.standard_normal(C).astype(np.float32),
        "mean": rng.standard_normal(C).astype(np.float32),
        "var": (rng.random(C) + 0.5).astype(np.float32),
    }
    inputs = [tensor("a", shape=[2, 4, 6, 5]), tensor("b", shape=[2, C - 4, 6, 5])]
    if runtime_mean:
        inputs.append(tensor("mean", shape=[C]))
    nodes = [
        helper.make_node("Concat", ["a", "b"], ["x"], axis=1),
        helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["y"]),
    ]
    outputs = [tensor("y")]
    if extra_reader:
        nodes.append(helper.make_node("Sigmoid", ["bn"], ["z"]))
        outputs.append(tensor("z"))
    if output_bn:
        outputs.append(tensor("bn"))
    inits = [init(k, v) for k, v in params.items() if not (runtime_mean and k == "mean")]
    feed = {
        "a": rng.standard_normal((2, 4, 6, 5)).astype(np.float32),
        "b": rng.standard_normal((2, C - 4, 6, 5)).astype(np.float32),
    }
    if runtime_mean:
        feed["mean"] = params["mean"]
    return make_model(nodes, inputs, outputs, inits, opset=15), feed


def _check_against_ort(model, feed, sess) -> None:
    want = ort_session(model).run(None, feed)
    for got, ref in zip(sess.run(None, feed), want):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("path", [None, "numpy"])
def test_fires_in_fast_mode(path):
    model, feed = _model()
    sess = graphrt.Session(model, kernel_path=path)
    assert op_list(sess) == FUSED
    fused = sess.graph.nodes[1]
    assert fused.info.attrs["activation"] == "Relu"
    _check_against_ort(model, feed, sess)


def test_numpy_kernel_keeps_the_unfused_bits():
    """On the numpy path the fused node makes the two nodes' calls: the same bits."""
    model, feed = _model()
    fused = graphrt.Session(model, kernel_path="numpy").run(None, feed)[0]
    plain = graphrt.Session(model, kernel_path="numpy", optimization_level="basic")
    assert op_list(plain) == PLAIN
    np.testing.assert_array_equal(fused.view(np.uint32), plain.run(None, feed)[0].view(np.uint32))


def test_not_in_exact_mode():
    model, feed = _model()
    sess = graphrt.Session(model, mode="exact")
    assert op_list(sess) == PLAIN
    _check_against_ort(model, feed, sess)


@pytest.mark.parametrize(
    "case", [dict(extra_reader=True), dict(output_bn=True), dict(runtime_mean=True)]
)
def test_not_when_the_bn_output_is_shared_or_parameters_vary(case):
    model, feed = _model(**case)
    sess = graphrt.Session(model)
    assert "BatchNormalization" in op_list(sess) and "Relu" in op_list(sess)
    assert "com.graphrt.FusedBatchNormalization" not in op_list(sess)
    _check_against_ort(model, feed, sess)


def test_conv_batchnorm_relu_still_folds_into_the_conv():
    """fuse_batchnorm_into_conv (order 50) runs first: the Conv takes the BatchNormalization
    and its Relu (FusedConv), leaving nothing for this pass."""
    rng = np.random.default_rng(2)
    inits = [
        init("w", rng.standard_normal((C, 3, 3, 3)).astype(np.float32)),
        init("scale", rng.standard_normal(C).astype(np.float32)),
        init("bias", rng.standard_normal(C).astype(np.float32)),
        init("mean", rng.standard_normal(C).astype(np.float32)),
        init("var", (rng.random(C) + 0.5).astype(np.float32)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["y"]),
    ]
    model = make_model(nodes, [tensor("x", shape=[1, 3, 8, 8])], [tensor("y")], inits, opset=15)
    sess = graphrt.Session(model)
    assert op_list(sess) == ["com.graphrt.FusedConv"]
    feed = {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    _check_against_ort(model, feed, sess)


def test_fused_node_written_by_hand_runs_in_exact_mode():
    """The operator itself is exact (BatchNormalization's exact calls, then exact Relu): a
    model holding it gets the bits of the two nodes in exact mode."""
    model, feed = _model()
    graph = model.graph
    fused = helper.make_node(
        "FusedBatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"],
        domain="com.graphrt", activation="Relu", epsilon=1e-5,
    )  # fmt: skip
    del graph.node[1:]
    graph.node.append(fused)
    model.opset_import.append(helper.make_opsetid("com.graphrt", 1))
    plain, _ = _model()
    got = graphrt.Session(model, mode="exact", kernel_path="numpy").run(None, feed)[0]
    want = graphrt.Session(plain, mode="exact", kernel_path="numpy").run(None, feed)[0]
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
