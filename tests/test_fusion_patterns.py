"""GELU and LayerNormalization written as primitives, fused (level all, not bit-preserving);
the Gelu operator; the bench's BERT-like encoder fused, against onnxruntime."""

from __future__ import annotations

import importlib.util
import math
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import graphrt
from graphrt_ops_basic.fusion import fusion_passes
from tests._fusion import RNG, F, fused_and_plain, op_list, rand_w, rand_x
from tests._models import init, make_model, ort_session, tensor


def test_exact_mode_skips_the_passes_that_change_rounding():
    selected = [p.name for p in fusion_passes() if p.selected("all", exact=True)]
    assert selected == ["eliminate_inference_dropout", "fuse_product_activation", "fuse_conv_pool"]
    assert {p.name for p in fusion_passes() if p.selected("all", exact=False)} == {
        "eliminate_inference_dropout",
        "fuse_product_activation",
        "fuse_gelu",
        "fuse_layernorm",
        "fuse_attention",
        "fuse_attention_heads",
        "fuse_rms_norm",
        "fuse_batchnorm_activation",
        "fuse_conv_pool",
    }
    assert [p.name for p in fusion_passes() if p.selected("basic", exact=False)] == [
        "eliminate_inference_dropout",
        "fuse_product_activation",
        "fuse_conv_pool",
    ]
    # In exact mode the GELU primitives stay as they are (Erf is exact), with the same bits as
    # the unoptimised graph; in fast mode the same model fuses.
    model = _gelu_model("div", "x_first")
    exact = graphrt.Session(model, mode="exact", optimization_level="all")
    assert "Gelu" not in [n.info.op_type for n in exact.graph.nodes]
    assert "Erf" in [n.info.op_type for n in exact.graph.nodes]
    plain = graphrt.Session(model, mode="exact", optimization_level="none")
    x = np.linspace(-6, 6, 3 * 50, dtype=np.float32).reshape(3, 50)
    feed = {exact.get_inputs()[0].name: x}
    assert exact.run(None, feed)[0].tobytes() == plain.run(None, feed)[0].tobytes()
    fast = graphrt.Session(model, optimization_level="all")
    assert "Gelu" in [n.info.op_type for n in fast.graph.nodes]


# -- GELU from primitives (level all, changes rounding) ---------------------------------------


SQRT2 = math.sqrt(2.0)


def _gelu_model(scale: str, order: str, half=0.5, root=SQRT2, extra_output=""):
    """0.5 * x * (1 + erf(x / sqrt(2))) in one of the orderings exporters write."""
    inits = [init("one", np.float32(1.0)), init("half", np.float32(half))]
    if scale == "div":
        nodes = [helper.make_node("Div", ["x", "root"], ["s"])]
        inits.append(init("root", np.float32(root)))
    else:
        nodes = [helper.make_node("Mul", ["inv_root", "x"], ["s"])]
        inits.append(init("inv_root", np.float32(1 / root)))
    nodes += [
        helper.make_node("Erf", ["s"], ["e"], name="erf1"),
        helper.make_node("Add", ["one", "e"], ["p"]),
    ]
    if order == "x_first":  # (x * (1 + erf)) * 0.5
        nodes += [
            helper.make_node("Mul", ["x", "p"], ["m"]),
            helper.make_node("Mul", ["m", "half"], ["y"]),
        ]
    elif order == "half_x_first":  # (x * 0.5) * (1 + erf)
        nodes += [
            helper.make_node("Mul", ["half", "x"], ["m"]),
            helper.make_node("Mul", ["p", "m"], ["y"]),
        ]
    else:  # x * ((1 + erf) * 0.5)
        nodes += [
            helper.make_node("Mul", ["p", "half"], ["m"]),
            helper.make_node("Mul", ["x", "m"], ["y"]),
        ]
    outputs = [tensor("y")] + ([tensor(extra_output)] if extra_output else [])
    return make_model(nodes, [tensor("x", shape=[3, 50])], outputs, inits)


def _gelu_reference(x: np.ndarray) -> np.ndarray:
    erf = np.vectorize(math.erf)
    x64 = x.astype(np.float64)
    return 0.5 * x64 * (1 + erf(x64 / math.sqrt(2.0)))


@pytest.mark.parametrize("order", ["x_first", "half_x_first", "half_last"])
@pytest.mark.parametrize("scale", ["div", "mul"])
def test_gelu_primitives_fuse_at_level_all(scale, order):
    model = _gelu_model(scale, order)
    x = (rand_x(3, 50) * 3).astype(np.float32)
    fused, got, want = fused_and_plain(model, {"x": x}, level="all")
    assert op_list(fused) == ["com.graphrt.Gelu"]  # opset 17: ai.onnx has no Gelu yet
    assert fused.graph.nodes[0].info.name == "erf1"
    # for large negative x, 1 + erf cancels: both graphs are off by about x * 2**-24 there
    atol = 1e-7 * float(np.abs(x).max())
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=atol)
    np.testing.assert_allclose(got, _gelu_reference(x), rtol=1e-6, atol=atol)
    assert len(graphrt.Session(model, optimization_level="basic").graph.nodes) == 5


def test_gelu_fuses_into_ai_onnx_gelu_from_opset_20():
    model = _gelu_model("div", "x_first")
    model.opset_import[0].version = 20
    assert op_list(graphrt.Session(model, optimization_level="all")) == ["Gelu"]


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"half": 0.49}, id="0.49"),
        pytest.param({"root": 1.41}, id="sqrt2 too rough"),
        pytest.param({"extra_output": "e"}, id="erf is an output"),
        pytest.param({"extra_output": "m"}, id="product is an output"),
    ],
)
def test_gelu_near_misses_stay_unfused(kwargs):
    model = _gelu_model("div", "x_first", **kwargs)
    sess = graphrt.Session(model, optimization_level="all")
    assert "Erf" in op_list(sess) and len(sess.graph.nodes) == 5


def test_gelu_with_a_second_reader_of_an_intermediate_stays_unfused():
    model = _gelu_model("mul", "half_x_first")
    model.graph.node.append(helper.make_node("Neg", ["p"], ["z"]))
    model.graph.output.append(tensor("z"))
    assert "Erf" in op_list(graphrt.Session(model, optimization_level="all"))


def test_gelu_then_matmul_bias_fuse_into_one_product():
    nodes = [
        helper.make_node("MatMul", ["x0", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "b"], ["x"]),
    ]
    gelu = _gelu_model("div", "x_first")
    model = make_model(
        nodes + list(gelu.graph.node),
        [tensor("x0", shape=[3, 8])],
        [tensor("y")],
        [init("w", rand_w(8, 50)), init("b", rand_w(50)), *gelu.graph.initializer],
    )
    fused, got, want = fused_and_plain(model, {"x0": rand_x(3, 8)}, level="all")
    assert op_list(fused) == ["com.graphrt.FusedMatMul"]
    assert fused.graph.nodes[0].info.attrs["activation"] == "Gelu"
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


def _gelu_op_model(approximate: str, elem: int) -> onnx.ModelProto:
    node = helper.make_node("Gelu", ["x"], ["y"], approximate=approximate)
    return make_model([node], [tensor("x", elem, [4, 70000])], [tensor("y", elem)], opset=20)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_gelu_operator_matches_onnxruntime(approximate, dtype):
    pytest.importorskip("onnxruntime")
    model = _gelu_op_model(approximate, F if dtype == np.float32 else TensorProto.FLOAT16)
    x = (RNG.standard_normal((4, 70000)) * 4).astype(dtype)  # several blocks
    want = ort_session(model).run(None, {"x": x})[0]
    got = graphrt.Session(model, intra_op_threads=2).run(None, {"x": x})[0]
    tol = {np.float16: 2e-3, np.float32: 1e-5}[dtype]
    assert got.dtype == dtype
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_operator_in_float64_matches_the_formula(approximate):
    """onnxruntime has no double Gelu: the formula itself, in float64 (math.erf, np.tanh)."""
    x = RNG.standard_normal((4, 70000)) * 4
    got = graphrt.Session(_gelu_op_model(approximate, TensorProto.DOUBLE)).run(None, {"x": x})[0]
    if approximate == "none":
        want = _gelu_reference(x)
    else:
        want = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-15)


# -- LayerNormalization from primitives (level all, changes rounding) --------------------------


def _layernorm_nodes(
    x: str, y: str, p: str, opset: int, square="pow", axes=(-1,), gamma=True, beta=True
) -> tuple[list, list]:
    """LayerNormalization over the last axis written as exporters do (opset 13 or 18 style)."""
    hidden = 16

    def mean(src: str, dst: str) -> object:
        if opset >= 18:
            return helper.make_node("ReduceMean", [src, p + "axes"], [dst])
        return helper.make_node("ReduceMean", [src], [dst], axes=list(axes))

    inits = [init(p + "eps", np.float32(1e-5)), init(p + "two", np.float32(2.0))]
    if opset >= 18:
        inits.append(init(p + "axes", np.array(axes, np.int64)))
    sq = (
        helper.make_node("Pow", [p + "d", p + "two"], [p + "sq"])
        if square == "pow"
        else helper.make_node("Mul", [p + "d", p + "d"], [p + "sq"])
    )
    nodes = [
        mean(x, p + "mean"),
        helper.make_node("Sub", [x, p + "mean"], [p + "d"]),
        sq,
        mean(p + "sq", p + "var"),
        helper.make_node("Add", [p + "var", p + "eps"], [p + "ve"]),
        helper.make_node("Sqrt", [p + "ve"], [p + "std"]),
        helper.make_node("Div", [p + "d", p + "std"], [p + "n"]),
    ]
    last = p + "n"
    if gamma:
        inits.append(init(p + "gamma", rand_w(hidden) + 1))
        nodes.append(helper.make_node("Mul", [last, p + "gamma"], [p + "g"]))
        last = p + "g"
    if beta:
        inits.append(init(p + "beta", rand_w(hidden)))
        nodes.append(helper.make_node("Add", [p + "beta", last], [p + "b"]))
        last = p + "b"
    nodes[-1].output[0] = y
    nodes[0].name = p + "mean_node"
    return nodes, inits


def _layernorm_model(opset=13, extra_output="", **kw):
    nodes, inits = _layernorm_nodes("x", "y", "ln_", opset, **kw)
    outputs = [tensor("y")] + ([tensor(extra_output)] if extra_output else [])
    return make_model(nodes, [tensor("x", shape=[2, 5, 16])], outputs, inits, opset=opset)


def _layernorm_reference(x, gamma, beta, eps=1e-5):
    x64 = x.astype(np.float64)
    mean = x64.mean(-1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(-1, keepdims=True)
    return (x64 - mean) / np.sqrt(var + eps) * gamma + beta


@pytest.mark.parametrize(
    "opset,square,gamma,beta,domain",
    [
        (13, "pow", True, True, "com.graphrt."),
        (13, "mul", True, False, "com.graphrt."),
        (17, "pow", False, True, ""),
        (18, "mul", True, True, ""),
    ],
)
def test_layernorm_primitives_fuse_at_level_all(opset, square, gamma, beta, domain):
    model = _layernorm_model(opset, square=square, gamma=gamma, beta=beta)
    x = (rand_x(2, 5, 16) * 3 + 1).astype(np.float32)
    fused, got, want = fused_and_plain(model, {"x": x}, level="all")
    assert op_list(fused) == [domain + "LayerNormalization"]
    assert "fuse_layernorm" in fused.graph.passes_run
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    consts = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    ref = _layernorm_reference(x, consts.get("ln_gamma", 1.0), consts.get("ln_beta", 0.0))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    assert len(graphrt.Session(model, optimization_level="basic").graph.nodes) > 1


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"axes": (1,)}, id="axis 1"),
        pytest.param({"axes": (-2,)}, id="axis -2"),
        pytest.param({"axes": (2,)}, id="last axis by a positive number"),
        pytest.param({"extra_output": "ln_var"}, id="variance is an output"),
        pytest.param({"extra_output": "ln_d"}, id="centred value is an output"),
    ],
)
def test_layernorm_near_misses_stay_unfused(kwargs):
    for opset in (13, 18):
        sess = graphrt.Session(_layernorm_model(opset, **kwargs), optimization_level="all")
        assert "ReduceMean" in op_list(sess)


def test_layernorm_with_a_wrong_exponent_or_shared_mean_stays_unfused():
    model = _layernorm_model(13)
    for c in model.graph.initializer:
        if c.name == "ln_two":
            c.CopyFrom(init("ln_two", np.float32(3.0)))
    assert "ReduceMean" in op_list(graphrt.Session(model, optimization_level="all"))
    model = _layernorm_model(13)
    model.graph.node.append(helper.make_node("Neg", ["ln_mean"], ["z"]))
    model.graph.output.append(tensor("z"))
    assert "ReduceMean" in op_list(graphrt.Session(model, optimization_level="all"))


# -- the bench's BERT-like encoder against onnxruntime ------------------------------------------


def _bench_models():
    path = os.path.join(os.path.dirname(__file__), os.pardir, "bench", "bench_models.py")
    spec = importlib.util.spec_from_file_location("bench_models_for_tests", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _with_primitive_layernorms(model: onnx.ModelProto) -> onnx.ModelProto:
    """The encoder as an opset-13 exporter writes it: every LayerNormalization as primitives."""
    hidden = model.graph.input[0].type.tensor_type.shape.dim[-1].dim_value
    nodes, inits = [], []
    for k, node in enumerate(model.graph.node):
        if node.op_type != "LayerNormalization":
            nodes.append(node)
            continue
        p = f"ln{k}_"
        ln_nodes, ln_inits = _layernorm_nodes(node.input[0], node.output[0], p, 13)
        for i in ln_inits:  # the model's own gamma and beta
            if i.name in (p + "gamma", p + "beta"):
                src = node.input[1] if i.name.endswith("gamma") else node.input[2]
                i.CopyFrom(init(i.name, _initializer(model, src).reshape(hidden)))
        nodes += ln_nodes
        inits += ln_inits
    graph = helper.make_graph(
        nodes, "bert13", list(model.graph.input), list(model.graph.output),
        list(model.graph.initializer) + inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _initializer(model: onnx.ModelProto, name: str) -> np.ndarray:
    return next(onnx.numpy_helper.to_array(i) for i in model.graph.initializer if i.name == name)


@pytest.mark.parametrize("layernorm", ["operator", "primitives"])
def test_bert_encoder_fused_matches_onnxruntime(layernorm):
    ort = pytest.importorskip("onnxruntime")
    bench = _bench_models()
    model = bench.bert_encoder(layers=2, hidden=64, seq=16, heads=2)
    if layernorm == "primitives":
        model = _with_primitive_layernorms(model)
    x = RNG.standard_normal((2, 16, 64)).astype(np.float32)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort_session(model, so).run(None, {"x": x})[0]
    sess = graphrt.Session(model, optimization_level="all")
    got = sess.run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    ops = op_list(sess)
    assert "Erf" not in ops and "ReduceMean" not in ops and "Relu" not in ops
    # per layer: q, k, v, the output projection (bias), the first FFN (bias + Gelu), the second
    assert ops.count("com.graphrt.FusedMatMul") == 2 * 6
    ln = "LayerNormalization" if layernorm == "operator" else "com.graphrt.LayerNormalization"
    assert ops.count(ln) == 2 * 2
    gelu = [n for n in sess.graph.nodes if n.info.attrs.get("activation") == "Gelu"]
    assert len(gelu) == 2
    assert ops.count("com.graphrt.Attention") == 2 and "Softmax" not in ops
    # per layer the passes remove the 6 bias Adds, the 5 GELU nodes (into a FusedMatMul), the
    # 5 nodes of the attention (the key's Transpose, two MatMuls, the scale's Mul and the
    # Softmax) for an Attention and the key's new Transpose, the 5 nodes of the head splits
    # and merge (q, k, v's Transposes, the context's Transpose and Reshape: the Attention reads
    # and writes [batch, seq, hidden]), and, for the primitives, 8 of the 9 nodes of both layer
    # norms
    assert "Transpose" not in ops
    unfused = graphrt.Session(model, optimization_level="none")
    removed = 2 * (6 + 5 + 3 + 5 + (16 if layernorm == "primitives" else 0))
    assert len(unfused.graph.nodes) - len(sess.graph.nodes) == removed


def test_fused_encoder_steady_state_allocates_no_array_data():
    from tests.test_alloc import assert_no_numpy_allocation

    model = _with_primitive_layernorms(_bench_models().bert_encoder(1, hidden=64, seq=16, heads=2))
    sess = graphrt.Session(model, optimization_level="all", intra_op_threads=1)
    assert "com.graphrt.LayerNormalization" in op_list(sess)
    feed = {"x": RNG.standard_normal((2, 16, 64)).astype(np.float32)}
    out = {"y": np.empty((2, 16, 64), np.float32)}
    for _ in range(3):
        sess.run(None, feed, out=out)
    assert sess.cached_plans[0].static
    assert_no_numpy_allocation(lambda: sess.run(None, feed, out=out))
