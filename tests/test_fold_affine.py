"""fold_channel_affine: per-channel Mul/Add/Sub/Div after a Conv or a BatchNormalization."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import graphrt
from tests._models import init, make_model, ort_session, tensor

C = 5


def _ops(sess: graphrt.Session) -> list[str]:
    return [n.info.op_type for n in sess.graph.nodes]


def _conv_chain(tail: list, consts: dict[str, np.ndarray], bias: bool = True) -> object:
    """x -> Conv -> (tail nodes reading "c") -> y, with the given constants."""
    rng = np.random.default_rng(7)
    inits = [init("w", rng.standard_normal((C, 3, 3, 3)).astype(np.float32))]
    conv_inputs = ["x", "w"]
    if bias:
        inits.append(init("b", rng.standard_normal(C).astype(np.float32)))
        conv_inputs.append("b")
    inits += [init(k, v) for k, v in consts.items()]
    nodes = [helper.make_node("Conv", conv_inputs, ["c"], pads=[1, 1, 1, 1]), *tail]
    return make_model(nodes, [tensor("x", shape=[2, 3, 8, 8])], [tensor("y")], inits, opset=13)


def _feed() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)}


def _check_against_ort(model: object, sess: graphrt.Session) -> None:
    feed = _feed()
    want = ort_session(model).run(None, feed)[0]
    np.testing.assert_allclose(sess.run(None, feed)[0], want, rtol=1e-5, atol=1e-5)


def _vec(seed: int, shape: tuple[int, ...], low: float = 0.5, high: float = 1.5) -> np.ndarray:
    return np.random.default_rng(seed).uniform(low, high, shape).astype(np.float32)


@pytest.mark.parametrize("bias", [True, False])
def test_conv_mul_add_relu_becomes_one_fused_conv(bias):
    # the Caffe2 export pattern of inception_v2 and densenet121
    tail = [
        helper.make_node("Mul", ["c", "s"], ["m"]),
        helper.make_node("Add", ["t", "m"], ["a"]),  # the constant first: Add commutes
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    model = _conv_chain(tail, {"s": _vec(2, (C, 1, 1)), "t": _vec(3, (1, C, 1, 1), -1, 1)}, bias)
    sess = graphrt.Session(model)
    assert "fold_channel_affine" in sess.graph.passes_run
    assert "Mul" not in _ops(sess) and "Add" not in _ops(sess)
    assert "Relu" not in _ops(sess)  # the Relu joined the Conv once nothing stood between
    _check_against_ort(model, sess)


@pytest.mark.parametrize(
    ("op", "const"),
    [("Sub", _vec(4, (C, 1, 1))), ("Div", _vec(5, (C, 1, 1))), ("Mul", np.float32(1.5))],
)
def test_sub_div_and_scalars_fold(op, const):
    model = _conv_chain([helper.make_node(op, ["c", "k"], ["y"])], {"k": np.asarray(const)})
    sess = graphrt.Session(model)
    assert _ops(sess) == ["Conv"]
    _check_against_ort(model, sess)


@pytest.mark.parametrize(
    ("tail", "consts"),
    [
        # the constant first in Sub: k - c is not a shift of c
        ([helper.make_node("Sub", ["k", "c"], ["y"])], {"k": _vec(4, (C, 1, 1))}),
        # varies along the width: not one value per channel
        ([helper.make_node("Mul", ["c", "k"], ["y"])], {"k": _vec(4, (C, 1, 8))}),
        # one more axis than the output: broadcasting would change the output's shape
        ([helper.make_node("Mul", ["c", "k"], ["y"])], {"k": _vec(4, (1, 1, C, 1, 1))}),
        # a zero divisor
        ([helper.make_node("Div", ["c", "k"], ["y"])], {"k": np.zeros((C, 1, 1), np.float32)}),
        # the Conv's output has a second reader
        (
            [
                helper.make_node("Mul", ["c", "k"], ["m"]),
                helper.make_node("Add", ["m", "c"], ["y"]),
            ],
            {"k": _vec(4, (C, 1, 1))},
        ),
    ],
    ids=["const-minus-x", "per-width", "higher-rank", "zero-divisor", "two-readers"],
)
def test_what_must_not_fold_stays(tail, consts):
    model = _conv_chain(tail, consts)
    sess = graphrt.Session(model)
    assert _ops(sess)[0] == "Conv" and len(_ops(sess)) == len(tail) + 1
    with np.errstate(divide="ignore", invalid="ignore"):
        _check_against_ort(model, sess)


def _bn_chain(source: str) -> object:
    """source -> BatchNormalization -> Mul -> Add -> y; source is a MaxPool or the input."""
    rng = np.random.default_rng(11)
    inits = [
        init("scale", rng.uniform(0.5, 1.5, C).astype(np.float32)),
        init("bias", rng.standard_normal(C).astype(np.float32)),
        init("mean", rng.standard_normal(C).astype(np.float32)),
        init("var", rng.uniform(0.5, 2.0, C).astype(np.float32)),
        init("s", _vec(12, (C, 1, 1))),
        init("t", _vec(13, (C, 1, 1), -1, 1)),
    ]
    nodes = []
    bn_in = "x"
    if source == "pool":
        nodes.append(helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2]))
        bn_in = "p"
    nodes += [
        helper.make_node("BatchNormalization", [bn_in, "scale", "bias", "mean", "var"], ["n"]),
        helper.make_node("Mul", ["n", "s"], ["m"]),
        helper.make_node("Add", ["m", "t"], ["y"]),
    ]
    x = tensor("x", shape=[2, C, 8, 8])
    return make_model(nodes, [x], [tensor("y")], inits, opset=13)


def test_batchnorm_mul_add_become_one_batchnorm_where_the_rank_is_known():
    model = _bn_chain("pool")
    sess = graphrt.Session(model)
    assert _ops(sess) == ["MaxPool", "BatchNormalization"]
    feed = {"x": np.random.default_rng(2).standard_normal((2, C, 8, 8)).astype(np.float32)}
    want = ort_session(model).run(None, feed)[0]
    np.testing.assert_allclose(sess.run(None, feed)[0], want, rtol=1e-5, atol=1e-5)


def test_batchnorm_on_a_graph_input_keeps_its_mul_and_add():
    # the input's rank is not known to a pass: (C, 1, 1) on a rank-3 input would broadcast to a
    # different shape than the BatchNormalization's channels
    sess = graphrt.Session(_bn_chain("input"))
    assert _ops(sess) == ["BatchNormalization", "Mul", "Add"]


def test_exact_mode_and_basic_level_keep_the_nodes():
    tail = [helper.make_node("Mul", ["c", "s"], ["y"])]
    model = _conv_chain(tail, {"s": _vec(2, (C, 1, 1))})
    for sess in (
        graphrt.Session(model, mode="exact"),
        graphrt.Session(model, optimization_level="basic"),
    ):
        assert "fold_channel_affine" not in sess.graph.passes_run
        assert _ops(sess) == ["Conv", "Mul"]


def test_a_shared_weight_is_not_rewritten_for_the_other_conv():
    # two Convs read one weight; only the first is followed by a Mul
    rng = np.random.default_rng(3)
    w = rng.standard_normal((C, 3, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["c1", "s"], ["y1"]),
        helper.make_node("Conv", ["x", "w"], ["y2"], pads=[1, 1, 1, 1]),
    ]
    model = make_model(
        nodes,
        [tensor("x", shape=[2, 3, 8, 8])],
        [tensor("y1"), tensor("y2")],
        [init("w", w), init("s", _vec(2, (C, 1, 1)))],
        opset=13,
    )
    sess = graphrt.Session(model)
    assert _ops(sess) == ["Conv", "Conv"]
    feed = _feed()
    got, want = sess.run(None, feed), ort_session(model).run(None, feed)
    for g, e in zip(got, want):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)
