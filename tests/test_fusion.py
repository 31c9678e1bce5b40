"""The bit-preserving fusion of products with their bias and activation, and the fused kernels.

Every fusion is checked three ways: the compiled graph has the expected nodes, the result
matches the unfused graph (``optimization_level="none"``) — bit for bit when the pass claims
``preserves_bits`` — and near misses of each pattern stay unfused.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import helper

import graphrt
from graphrt.errors import SessionError
from tests._fusion import fused_and_plain, op_list, rand_w, rand_x, run
from tests._models import init, make_model, small_cnn, tensor

# -- Conv / Gemm / MatMul with bias and activation (bit-preserving, level basic) --------------


def _bias_and_activation(nodes: list, inits: list, bias, act: str | None, first: bool) -> None:
    """Append Add(product, bias) when ``bias`` is given (the constant first when ``first``),
    then the activation, the last node writing "y"."""
    last = nodes[-1].output[0]
    if bias is not None:
        operands = ["bias", last] if first else [last, "bias"]
        nodes.append(helper.make_node("Add", operands, ["a"]))
        inits.append(init("bias", bias))
        last = "a"
    if act == "Clip":
        nodes.append(helper.make_node("Clip", [last, "lo", "hi"], ["y"]))
        inits += [init("lo", np.float32(-0.25)), init("hi", np.float32(0.75))]
    elif act == "ClipMaxOnly":
        nodes.append(helper.make_node("Clip", [last, "", "hi"], ["y"]))
        inits.append(init("hi", np.float32(0.5)))
    elif act is not None:
        nodes.append(helper.make_node(act, [last], ["y"]))
    nodes[-1].output[0] = "y"


ACTIVATIONS = ["Relu", "Clip", "ClipMaxOnly", "Sigmoid", "Gelu"]


def _conv_model(act: str | None, conv_bias: bool, add: np.ndarray | None, opset: int = 17):
    w = rand_w(6, 3, 3, 3)
    inits = [init("w", w)]
    inputs = ["x", "w"]
    if conv_bias:
        inputs.append("b")
        inits.append(init("b", rand_w(6)))
    nodes = [helper.make_node("Conv", inputs, ["c"], pads=[1, 1, 1, 1], name="conv1")]
    _bias_and_activation(nodes, inits, add, act, first=False)
    return make_model(nodes, [tensor("x", shape=[2, 3, 9, 9])], [tensor("y")], inits, opset=opset)


@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("bias", ["conv", "add", "add_scalar", "none"])
def test_conv_bias_activation_fuses_into_one_node_with_the_same_bits(act, bias):
    add = {"add": rand_w(6, 1, 1), "add_scalar": np.float32(0.125)}.get(bias)
    opset = 20 if act == "Gelu" else 17
    model = _conv_model(act, bias == "conv", add, opset)
    fused, got, want = fused_and_plain(model, {"x": rand_x(2, 3, 9, 9)})
    assert op_list(fused) == ["com.graphrt.FusedConv"]
    assert fused.graph.nodes[0].info.name == "conv1"  # the fused node keeps the Conv's name
    assert "fuse_product_activation" in fused.graph.passes_run
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("bounds", [{"min": -0.5, "max": 0.5}, {"max": 6.0}, {}])
def test_clip_with_attribute_bounds_fuses_with_the_same_bits(bounds):
    """Before opset 11 Clip's bounds are attributes; an absent bound is no bound."""
    model = _conv_model(None, True, None, opset=10)
    model.graph.node[0].output[0] = "c"
    model.graph.node.append(helper.make_node("Clip", ["c"], ["y"], **bounds))
    fused, got, want = fused_and_plain(model, {"x": rand_x(2, 3, 9, 9) * 8})
    assert op_list(fused) == ["com.graphrt.FusedConv"]
    assert got.tobytes() == want.tobytes()


def test_batchnorm_folds_first_then_the_relu_fuses_at_level_all():
    model = small_cnn(seed=2, channels=8, bn=True)
    x = rand_x(2, 3, 16, 16)
    full, got = run(model, {"x": x}, optimization_level="all")
    basic, want = run(model, {"x": x}, optimization_level="basic")
    assert op_list(full)[0] == "com.graphrt.FusedConvPool"  # and the MaxPool after it
    assert op_list(basic)[:3] == ["Conv", "BatchNormalization", "Relu"]  # BN blocks the fusion
    assert op_list(basic)[4] == "com.graphrt.FusedConv"  # the grouped Conv -> Relu
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_conv_and_its_bias_add_become_one_conv():
    model = _conv_model(None, False, rand_w(1, 6, 1, 1))
    fused, got, want = fused_and_plain(model, {"x": rand_x(2, 3, 9, 9)})
    assert op_list(fused) == ["Conv"] and len(fused.graph.nodes[0].info.inputs) == 3
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize(
    "add",
    [
        pytest.param(rand_w(6, 9, 9), id="not per channel"),
        pytest.param(rand_w(1, 1, 1, 9), id="per column"),
        pytest.param(rand_w(2, 6, 1, 1), id="grows the batch"),
        pytest.param(rand_w(6).astype(np.float64), id="other type"),
    ],
)
def test_conv_add_that_is_no_channel_bias_is_not_fused(add):
    model = _conv_model("Relu", False, add)
    sess = graphrt.Session(model, optimization_level="all")
    if add.dtype == np.float64:  # an invalid model: fusion must not hide it
        assert "Add" in op_list(sess)
        return
    assert op_list(sess) == ["Conv", "Add", "Relu"]


def test_conv_with_a_bias_keeps_a_following_add_where_bits_count():
    """Adding both biases at once would round differently: in exact mode only the activation
    could fuse, and it does not read the Conv.  Fast mode folds the Add's per-channel constant
    into the bias (fold_channel_affine), and then the Relu joins the Conv."""
    model = _conv_model("Relu", True, rand_w(6, 1, 1))
    assert op_list(graphrt.Session(model, mode="exact")) == ["Conv", "Add", "Relu"]
    fast = graphrt.Session(model)
    assert op_list(fast) == ["com.graphrt.FusedConv"]
    x = {"x": rand_x(2, 3, 9, 9)}
    plain = graphrt.Session(model, optimization_level="none")
    np.testing.assert_allclose(fast.run(None, x)[0], plain.run(None, x)[0], rtol=1e-5, atol=1e-6)


def _mm_model(op: str, act: str | None, bias: np.ndarray | None, extra_output: str = ""):
    n = 5
    if op == "Gemm":
        inits = [init("w", rand_w(n, 7)), init("c", rand_w(n))]
        nodes = [helper.make_node("Gemm", ["x", "w", "c"], ["m"], transB=1, alpha=0.75)]
    else:
        inits = [init("w", rand_w(7, n))]
        nodes = [helper.make_node(op, ["x", "w"], ["m"])]
    if bias is not None and op == "Gemm":
        nodes[0].input.pop()  # the Add brings the bias
    _bias_and_activation(nodes, inits, bias, act, first=True)
    outputs = [tensor("y")] + ([tensor(extra_output)] if extra_output else [])
    return make_model(nodes, [tensor("x", shape=[4, 7])], outputs, inits, opset=20)


@pytest.mark.parametrize(
    "act,with_bias", [(a, True) for a in [*ACTIVATIONS, None]] + [(a, False) for a in ACTIVATIONS]
)
@pytest.mark.parametrize("op", ["Gemm", "MatMul"])
def test_products_fuse_bias_and_activation_with_the_same_bits(op, act, with_bias):
    model = _mm_model(op, act, rand_w(5) if with_bias else None)
    fused, got, want = fused_and_plain(model, {"x": rand_x(4, 7)})
    if act is None and op == "Gemm":
        assert op_list(fused) == ["Gemm"]  # the Gemm takes the Add's constant as C
    else:
        assert op_list(fused) == [f"com.graphrt.Fused{op}"]
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("bias", ["conv", "add", "none"])
def test_exact_conv_relu_fuses_with_the_bits_of_the_exact_nodes(bias):
    """Exact Conv (conv_exact.py) under the bit-preserving pass: same bits as the plain nodes."""
    add = rand_w(6, 1, 1) if bias == "add" else None
    model = _conv_model("Relu", bias == "conv", add)
    x = rand_x(2, 3, 9, 9)
    x[0, 1, 4, 4] = np.array(0xFFC12345, np.uint32).view(np.float32)  # a NaN with a payload
    fused, got, want = fused_and_plain(model, {"x": x}, mode="exact")
    assert op_list(fused) == ["com.graphrt.FusedConv"]
    assert got.tobytes() == want.tobytes()
    assert (got[np.isnan(got)].view(np.uint32) == 0x7FC00000).all()
    assert np.isnan(got).any() and not np.signbit(got[got == 0]).any()


def _residual_model(
    z_first: bool, act: str | None, bias: bool = True, batch: int = 2, z_batch=2, op="Add"
):
    """Conv(x) + Neg(s) (a tensor, not a constant: a residual connection), then ``act``."""
    inits = [init("w", rand_w(6, 3, 3, 3))] + ([init("b", rand_w(6))] if bias else [])
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"][: 3 if bias else 2], ["c"], pads=[1] * 4),
        helper.make_node("Neg", ["s"], ["z"]),
        helper.make_node(op, ["z", "c"] if z_first else ["c", "z"], ["y"]),
    ]
    if act is not None:
        nodes[-1].output[0] = "a"
        nodes.append(helper.make_node(act, ["a"], ["y"]))
    inputs = [tensor("x", shape=[batch, 3, 9, 9]), tensor("s", shape=[z_batch, 6, 9, 9])]
    feed = {"x": rand_x(batch, 3, 9, 9), "s": rand_x(z_batch, 6, 9, 9)}
    return make_model(nodes, inputs, [tensor("y")], inits), feed


RESIDUAL_CASES = [
    (act, op, mode)
    for act, op in [("Relu", "Add"), (None, "Add"), ("Sigmoid", "Add"), ("Relu", "Sum")]
    for mode in ("fast", "exact")
]


@pytest.mark.parametrize("act, op, mode", RESIDUAL_CASES)
@pytest.mark.parametrize("z_first", [False, True])
def test_a_residual_add_fuses_into_the_conv_with_the_same_bits(z_first, act, op, mode):
    model, feed = _residual_model(z_first, act, bias=act != "Sigmoid", op=op)
    feed["s"][1, 2, 3, 3] = np.array(0xFFC12345, np.uint32).view(np.float32)  # a NaN payload
    fused, got, want = fused_and_plain(model, feed, mode=mode)
    assert op_list(fused) == ["Neg", "com.graphrt.FusedConv"]
    node = fused.graph.nodes[1].info
    assert len(node.inputs) == 4 and node.attrs.get("z_first", 0) == int(z_first)
    assert got.tobytes() == want.tobytes()


def test_a_residual_that_broadcasts_the_conv_to_a_larger_shape():
    """Z of batch 3 over a conv of batch 1: the fused node's Y is the Add's (3, 6, 9, 9)."""
    model, feed = _residual_model(False, "Relu", batch=1, z_batch=3)
    fused, got, want = fused_and_plain(model, feed)
    assert op_list(fused) == ["Neg", "com.graphrt.FusedConv"] and got.shape == (3, 6, 9, 9)
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize(("op", "with_bias"), [("MatMul", True), ("Gemm", True), ("Gemm", False)])
def test_exact_mode_runs_the_bit_preserving_fusion_with_exact_bits(op, with_bias):
    x = rand_x(4, 7)
    x[1, :] = np.array(0xFFC12345, np.uint32).view(np.float32)  # a NaN with a payload
    x[2, :] = 0
    x[2, 0] = np.inf  # row 2 of the product: +-inf, by the sign of the weight's first row
    model = _mm_model(op, "Relu", rand_w(5) if with_bias else None)
    consts = {i.name: i for i in model.graph.initializer}
    if with_bias:
        weight = onnx.numpy_helper.to_array(consts["w"])
        first = weight[:, 0] if op == "Gemm" else weight[0]  # Gemm's weight is transposed
        bias = onnx.numpy_helper.to_array(consts["bias"]).copy()
        bias[first > 0] = -np.inf  # inf + -inf: a NaN made by the bias add itself
        consts["bias"].CopyFrom(init("bias", bias))
    fused, got, want = fused_and_plain(model, {"x": x}, mode="exact")
    assert op_list(fused) == [f"com.graphrt.Fused{op}"]
    assert np.isnan(got).any()
    assert got.tobytes() == want.tobytes()
    nan_bits = got[np.isnan(got)].view(np.uint32)
    assert (nan_bits == 0x7FC00000).all()
    assert not np.signbit(got[got == 0]).any()  # exact Relu turns -0 into +0


def test_an_intermediate_read_twice_or_output_is_not_fused():
    # the product is also a graph output
    model = _mm_model("MatMul", "Relu", rand_w(5), extra_output="m")
    assert op_list(graphrt.Session(model)) == ["MatMul", "Add", "Relu"]
    # the biased value is also a graph output: the bias fuses, the activation stays apart
    model = _mm_model("MatMul", "Relu", rand_w(5), extra_output="a")
    assert op_list(graphrt.Session(model)) == ["com.graphrt.FusedMatMul", "Relu"]
    # the product has a second reader
    model = _mm_model("MatMul", "Relu", rand_w(5))
    model.graph.node.append(helper.make_node("Neg", ["m"], ["z"]))
    model.graph.output.append(tensor("z"))
    sess, got = run(model, {"x": rand_x(4, 7)})
    assert op_list(sess) == ["MatMul", "Add", "Relu", "Neg"]
    assert got.shape == (4, 5)


def test_a_bias_that_would_change_the_shape_is_not_fused():
    model = _mm_model("MatMul", "Relu", rand_w(1, 5))  # (1, N): grows a 1-D product
    assert op_list(graphrt.Session(model)) == ["MatMul", "Add", "Relu"]
    model = _mm_model("MatMul", None, rand_w(3))  # does not even broadcast: left to fail at run
    assert op_list(graphrt.Session(model)) == ["MatMul", "Add"]


def test_fused_products_run_the_same_on_any_thread_count():
    model = _conv_model("Relu", False, rand_w(6, 1, 1))
    x = rand_x(2, 3, 9, 9)
    outs = [run(model, {"x": x}, intra_op_threads=t)[1].tobytes() for t in (1, 2)]
    assert outs[0] == outs[1]


def test_fused_node_errors_name_the_node_of_the_model():
    model = _conv_model("Relu", True, None)
    model.graph.input[0].CopyFrom(tensor("x"))  # no declared shape: the kernel sees the input
    sess = graphrt.Session(model)
    with pytest.raises(SessionError) as info:
        sess.run(None, {"x": np.zeros((2, 4, 9, 9), np.float32)})  # 4 channels, W wants 3
    assert info.value.node == "conv1" and "conv1" in str(info.value)


def test_fused_operators_can_be_written_directly():
    """com.graphrt.FusedMatMul in a model: the epilogue computed by hand in float64."""
    w, b = rand_w(7, 5), rand_w(5)
    node = helper.make_node(
        "FusedMatMul",
        ["x", "w", "b"],
        ["y"],
        domain="com.graphrt",
        activation="Clip",
        activation_params=[-0.5, math.inf],
    )
    model = make_model(
        [node], [tensor("x", shape=[4, 7])], [tensor("y")], [init("w", w), init("b", b)],
        domains=["com.graphrt"],
    )  # fmt: skip
    x = rand_x(4, 7)
    got = graphrt.Session(model).run(None, {"x": x})[0]
    want = np.maximum(x.astype(np.float64) @ w + b, -0.5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    bad = helper.make_node(
        "FusedMatMul", ["x", "w"], ["y"], domain="com.graphrt", activation="Tanh"
    )
    model.graph.ClearField("node")
    model.graph.node.append(bad)
    with pytest.raises(SessionError, match="activation must be one of"):
        graphrt.Session(model)


def test_explain_shows_the_fused_node():
    sess = graphrt.Session(_mm_model("MatMul", "Relu", rand_w(5)))
    text = sess.explain({"x": np.zeros((4, 7), np.float32)})
    assert "com.graphrt.FusedMatMul" in text and "fuse_product_activation" in text


# -- Dropout at inference becomes an Identity view (bit-preserving, level basic) --------------


def _dropout_model(opset: int, mode: bool | None, read_mask: bool = False):
    inits = [init("w", rand_w(4, 5))]
    dropout_inputs = ["m"]
    if mode is not None:
        inits += [init("ratio", np.float32(0.5)), init("mode", np.array(mode))]
        dropout_inputs += ["ratio", "mode"]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Dropout", dropout_inputs, ["d", "mask"], seed=3),
        helper.make_node("Relu", ["d"], ["y"]),
    ]
    outputs = [tensor("y")]
    if read_mask:
        # before opset 10 the mask has the input's type (float): Not needs bool, Neg reads it
        bool_mask = opset >= 10
        nodes.append(helper.make_node("Not" if bool_mask else "Neg", ["mask"], ["kept"]))
        elem = onnx.TensorProto.BOOL if bool_mask else onnx.TensorProto.FLOAT
        outputs.append(tensor("kept", elem))
    return make_model(nodes, [tensor("x", shape=[3, 4])], outputs, inits, opset=opset)


@pytest.mark.parametrize(
    "opset, mode, read_mask, removed",
    [
        (9, None, False, True),  # before opset 12 graphrt always runs inference
        (13, None, False, True),  # no training_mode: inference
        (13, False, False, True),
        (13, True, False, False),  # training: a mask is drawn, the node stays
        (9, None, True, False),  # the mask is read: the node stays
    ],
)
def test_inference_dropout_becomes_an_identity(opset, mode, read_mask, removed):
    model = _dropout_model(opset, mode, read_mask)
    x = rand_x(3, 4)
    fused, got, want = fused_and_plain(model, {"x": x})
    assert ("Identity" in op_list(fused)) == removed
    assert ("Dropout" in op_list(fused)) != removed
    assert ("eliminate_inference_dropout" in fused.graph.passes_run) == removed
    assert got.tobytes() == want.tobytes()  # a training draw: the same seeded stream
    if mode is not True:  # exact mode runs the pass too (it preserves bits)
        _, exact_basic = run(model, {"x": x}, mode="exact", optimization_level="basic")
        _, exact_none = run(model, {"x": x}, mode="exact", optimization_level="none")
        assert exact_basic.tobytes() == exact_none.tobytes()
