"""The transformer fusions (fusion/attention.py, fusion/rms_norm.py; level all, not
bit-preserving) on their patterns and near misses, and exporter-shaped models against
onnxruntime: a BERT/MiniLM encoder (tests/_transformers.py) and LSTM/GRU exports."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import graphrt
from graphrt_ops_basic.fusion import fusion_passes
from graphrt_ops_basic.fusion.attention_heads import FuseAttentionHeads
from tests._fusion import fused_and_plain, op_list, rand_w, rand_x
from tests._models import init, make_model, onnxruntime_limits, ort_session, tensor
from tests._transformers import encoder_feed, minilm_encoder, rnn_export

B, S, H, D = 2, 7, 3, 8  # batch, sequence, heads, head size
#: Attention and RMSNormalization are ai.onnx operators from opset 23 (onnx 1.18)
OPSET_23 = pytest.mark.skipif(onnx.defs.onnx_opset_version() < 23, reason="onnx without opset 23")

# -- attention: MatMul(Q, Kt) -> scale -> [+ mask] -> Softmax -> MatMul(V) --------------------


def _attention_model(
    scale: str = "div",
    opset: int = 14,
    mask: str | None = "add",
    key: str = "merged",
    producers: str = "transpose",
    dropout: bool = False,
    kv_heads: int = H,
    axis: int | None = -1,
    factor: float | None = None,
    extra_output: str = "",
    mask_value: np.ndarray | None = None,
):
    """Attention as exporters write it, on inputs q, k, v [B, S, heads * D] and a mask
    [B, 1, 1, S].

    scale: "div" (scores / sqrt(D)), "mul" (scores * 1/sqrt(D)), "mul_first" (1/sqrt(D) *
    scores), "sdpa" (Q and the transposed K each * sqrt(1/sqrt(D))), "k_first" (K * 1/sqrt(D)
    before its Transpose), "q_div" (Q / sqrt(D)), "none"; key: "merged" (Transpose(k, [0, 2, 3,
    1])) or "split" (Transpose(k, [0, 2, 1, 3]) then [0, 1, 3, 2]); producers of Q and V:
    "transpose" (head split then [0, 2, 1, 3]) or "reshape" (q and v given [B, heads, S, D] and
    reshaped to a constant shape)."""
    root = math.sqrt(D) if factor is None else factor
    inits = [init("split_q", np.array([0, 0, H, D], np.int64))]
    inits.append(init("split_kv", np.array([0, 0, kv_heads, D], np.int64)))
    nodes = [helper.make_node("Reshape", ["k", "split_kv"], ["k4"])]
    if producers == "transpose":
        nodes += [
            helper.make_node("Reshape", ["q", "split_q"], ["q4"]),
            helper.make_node("Reshape", ["v", "split_kv"], ["v4"]),
            helper.make_node("Transpose", ["q4"], ["qh"], perm=[0, 2, 1, 3]),
            helper.make_node("Transpose", ["v4"], ["vh"], perm=[0, 2, 1, 3]),
        ]
    else:
        inits += [init("shape_q", np.array([B, H, S, D], np.int64))]
        inits += [init("shape_v", np.array([B, kv_heads, S, D], np.int64))]
        nodes += [
            helper.make_node("Reshape", ["q", "shape_q"], ["qh"]),
            helper.make_node("Reshape", ["v", "shape_v"], ["vh"]),
        ]
    k_src = "k4"
    if scale == "k_first":
        inits.append(init("c", np.float32(1 / root)))
        nodes.append(helper.make_node("Mul", ["k4", "c"], ["k4s"]))
        k_src = "k4s"
    if key == "merged":
        nodes.append(helper.make_node("Transpose", [k_src], ["kt"], perm=[0, 2, 3, 1]))
    else:
        nodes += [
            helper.make_node("Transpose", [k_src], ["kh"], perm=[0, 2, 1, 3]),
            helper.make_node("Transpose", ["kh"], ["kt"], perm=[0, 1, 3, 2]),
        ]
    q, kt = "qh", "kt"
    if scale == "sdpa":
        inits.append(init("c", np.float32(math.sqrt(1 / root))))
        nodes += [
            helper.make_node("Mul", ["qh", "c"], ["qs"]),
            helper.make_node("Mul", ["c", "kt"], ["kts"]),
        ]
        q, kt = "qs", "kts"
    elif scale == "q_div":
        inits.append(init("c", np.float32(root)))
        nodes.append(helper.make_node("Div", ["qh", "c"], ["qs"]))
        q = "qs"
    nodes.append(helper.make_node("MatMul", [q, kt], ["s0"], name="qk"))
    last = "s0"
    if scale in ("div", "mul", "mul_first"):
        value = np.float32(root if scale == "div" else 1 / root)
        inits.append(init("c", value))
        op = "Div" if scale == "div" else "Mul"
        operands = ["c", last] if scale == "mul_first" else [last, "c"]
        nodes.append(helper.make_node(op, operands, ["s1"]))
        last = "s1"
    inputs = [tensor("q", shape=[B, S, H * D]), tensor("k", shape=[B, S, kv_heads * D])]
    inputs.append(tensor("v", shape=[B, S, kv_heads * D]))
    if producers == "reshape":
        inputs[0] = tensor("q", shape=[B, H, S, D])
        inputs[2] = tensor("v", shape=[B, kv_heads, S, D])
    if mask is not None:
        if mask_value is not None:
            inits.append(init("mask", mask_value))
        else:
            inputs.append(tensor("mask", shape=[B, 1, 1, S]))
        operands = ["mask", last] if mask == "add_first" else [last, "mask"]
        nodes.append(helper.make_node("Add", operands, ["s2"]))
        last = "s2"
    attrs = {} if axis is None else {"axis": axis}
    nodes.append(helper.make_node("Softmax", [last], ["p"], **attrs))
    last = "p"
    if dropout:
        inits.append(init("ratio", np.float32(0.1)))
        nodes.append(helper.make_node("Dropout", ["p", "ratio"], ["pd"]))
        last = "pd"
    nodes.append(helper.make_node("MatMul", [last, "vh"], ["y"]))
    outputs = [tensor("y")] + ([tensor(extra_output)] if extra_output else [])
    return make_model(nodes, inputs, outputs, inits, opset=opset)


def _attention_feed(model, seed: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feed = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        feed[vi.name] = rng.standard_normal(shape).astype(np.float32)
    if "mask" in feed:
        keep = np.ones((B, 1, 1, S), bool)
        keep[1, ..., S - 2 :] = False  # the second sequence is padded
        feed["mask"] = np.where(keep, 0, np.finfo(np.float32).min).astype(np.float32)
    return feed


def _attention_reference(feed, kv_heads: int = H) -> np.ndarray:
    """softmax(Q K^T / sqrt(D) + mask) V in float64 on the [B, S, heads * D] inputs."""
    q = feed["q"].astype(np.float64)
    k, v = feed["k"].astype(np.float64), feed["v"].astype(np.float64)
    if q.ndim == 3:
        q = q.reshape(B, S, H, D).transpose(0, 2, 1, 3)
        v = v.reshape(B, S, kv_heads, D).transpose(0, 2, 1, 3)
    k = k.reshape(B, S, kv_heads, D).transpose(0, 2, 1, 3)
    s = q @ k.swapaxes(-1, -2) / math.sqrt(D) + feed.get("mask", 0.0)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def _kinds(sess: graphrt.Session) -> list[str]:
    return [n.info.op_type for n in sess.graph.nodes]


@pytest.mark.parametrize("scale", ["div", "mul", "mul_first", "sdpa", "k_first", "q_div", "none"])
@pytest.mark.parametrize("key", ["merged", "split"])
def test_attention_scales_and_keys_fuse_into_one_attention(scale, key, monkeypatch):
    if (scale, key) == ("k_first", "split"):
        pytest.skip("a factor before the head split's Transpose is not looked for")
    # fuse_attention's own result: fuse_attention_heads would take the head splits' Transposes
    # (tests/test_fusion_attention_heads.py)
    monkeypatch.setattr(FuseAttentionHeads, "run", lambda self, graph, ctx: False)
    model = _attention_model(scale, key=key)
    feed = _attention_feed(model)
    fused, got, want = fused_and_plain(model, feed, level="all")
    kinds = _kinds(fused)
    assert kinds.count("Attention") == 1 and "Softmax" not in kinds and "MatMul" not in kinds
    assert "Mul" not in kinds and "Div" not in kinds  # every factor went into the scale
    # the key: [0, 2, 3, 1] becomes [0, 2, 1, 3]; [0, 2, 1, 3] then [0, 1, 3, 2] the first only
    assert kinds.count("Transpose") == 3
    assert "fuse_attention" in fused.graph.passes_run
    node = next(n for n in fused.graph.nodes if n.info.op_type == "Attention")
    assert node.info.name == "qk"  # the fused node keeps the name of the product of Q and K
    assert node.info.domain == "com.graphrt"
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    if scale != "none":
        np.testing.assert_allclose(got, _attention_reference(feed), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"mask": "add_first"}, id="mask first"),
        pytest.param({"mask": None}, id="no mask"),
        pytest.param({"mask": "add", "mask_value": np.zeros((1, S), np.float32)}, id="const mask"),
        pytest.param({"dropout": True}, id="inference dropout"),
        pytest.param({"producers": "reshape"}, id="reshaped to a constant 4-D shape"),
        pytest.param({"kv_heads": 1}, id="one key/value head broadcast"),
        pytest.param({"opset": 11, "axis": 3}, id="opset 11 axis 3"),
        pytest.param({"opset": 13, "axis": None}, id="opset 13 default axis"),
        pytest.param({"opset": 13, "axis": 3}, id="axis 3"),
        pytest.param({"factor": 3.0}, id="any scale"),
    ],
)
def test_attention_variants_fuse(kwargs):
    model = _attention_model(**kwargs)
    feed = _attention_feed(model)
    fused, got, want = fused_and_plain(model, feed, level="all")
    kinds = _kinds(fused)
    assert kinds.count("Attention") == 1 and "Softmax" not in kinds, kinds
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@OPSET_23
def test_attention_fuses_into_graphrt_attention_at_opset_23_too():
    """ai.onnx Attention pads a short mask with -inf; the fused node must broadcast it as the
    graph's Add did, so the pass writes com.graphrt.Attention at every opset."""
    limit = onnxruntime_limits()[1] if _has_onnxruntime() else 0
    model = _attention_model("div", opset=23)
    feed = _attention_feed(model)
    fused, got, want = fused_and_plain(model, feed, level="all")
    domains = [n.info.domain for n in fused.graph.nodes if n.info.op_type == "Attention"]
    assert domains == ["com.graphrt"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    if limit >= 23:
        np.testing.assert_allclose(got, ort_session(model).run(None, feed)[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("opset", [14, 23])
def test_a_mask_of_one_key_broadcasts_over_every_key_as_the_add_did(opset):
    """A per-query mask [B, 1, S, 1]: the unfused Add broadcasts it over the keys; the fused
    node must too (the ai.onnx reading would pad it with -inf and mask all but key 0)."""
    rng = np.random.default_rng(5)
    per_query = np.where(rng.random((B, 1, S, 1)) < 0.5, 0.0, -3.0).astype(np.float32)
    model = _attention_model("div", opset=opset, mask_value=per_query)
    feed = _attention_feed(model)
    fused, got, want = fused_and_plain(model, feed, level="all")
    assert [n.info.op_type for n in fused.graph.nodes].count("Attention") == 1
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _has_onnxruntime() -> bool:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"axis": 2}, id="softmax over axis 2"),
        pytest.param({"opset": 11, "axis": None}, id="opset 11 default axis 1"),
        pytest.param({"extra_output": "p"}, id="probabilities are an output"),
        pytest.param({"extra_output": "s1"}, id="scaled scores are an output"),
        pytest.param({"extra_output": "kt"}, id="transposed key is an output"),
        pytest.param({"mask": "add", "mask_value": np.float32(0)}, id="0-d constant mask"),
    ],
)
def test_attention_near_misses_stay_unfused(kwargs):
    model = _attention_model(**kwargs)
    feed = _attention_feed(model)
    fused, got, want = fused_and_plain(model, feed, level="all")
    assert "Softmax" in _kinds(fused) and "Attention" not in _kinds(fused)
    np.testing.assert_array_equal(got, want)


def test_attention_of_unknown_rank_or_a_run_time_scale_stays_unfused():
    # Q straight from the graph input: its rank is not proven
    model = _attention_model("div")
    for node in model.graph.node:
        if node.op_type == "MatMul" and node.input[0] == "qh":
            node.input[0] = "q4x"
    model.graph.input.append(tensor("q4x", shape=[B, H, S, D]))
    assert "Attention" not in _kinds(graphrt.Session(model, optimization_level="all"))
    # the scale is an input, not a constant
    model = _attention_model("div")
    model.graph.initializer.remove(next(i for i in model.graph.initializer if i.name == "c"))
    model.graph.input.append(tensor("c", shape=[]))
    assert "Attention" not in _kinds(graphrt.Session(model, optimization_level="all"))
    # the scores are scaled after the mask is added (the mask would be scaled too)
    model = _attention_model("none")
    for node in model.graph.node:
        if node.op_type == "Add":
            node.output[0] = "s2a"
    model.graph.node.insert(
        len(model.graph.node) - 2, helper.make_node("Mul", ["s2a", "c2"], ["s2"])
    )
    model.graph.initializer.append(init("c2", np.float32(0.5)))
    sess = graphrt.Session(model, optimization_level="all")
    assert "Attention" not in _kinds(sess)
    # a key transposed over 3 axes (3-D) is not this pattern
    model = _attention_model("div")
    for node in model.graph.node:
        if node.op_type == "Transpose" and node.output[0] == "kt":
            node.input[0] = "k"
            del node.attribute[:]
            node.attribute.append(helper.make_attribute("perm", [0, 2, 1]))
    assert "Attention" not in _kinds(graphrt.Session(model, optimization_level="all"))


def test_attention_fusion_is_skipped_in_exact_mode():
    model = _attention_model("div")
    feed = _attention_feed(model)
    exact = graphrt.Session(model, mode="exact", optimization_level="all")
    plain = graphrt.Session(model, mode="exact", optimization_level="none")
    assert "Softmax" in _kinds(exact) and "Attention" not in _kinds(exact)
    assert exact.run(None, feed)[0].tobytes() == plain.run(None, feed)[0].tobytes()


def test_passes_order_and_exactness():
    passes = fusion_passes()
    names = ["fuse_attention", "fuse_attention_heads", "fuse_rms_norm"]
    assert [p.name for p in passes][-3:] == names
    assert [p.order for p in passes][-3:] == sorted(p.order for p in passes[-3:])
    products = next(p for p in passes if p.name == "fuse_product_activation")
    for p in passes[-3:]:
        assert p.order > products.order and p.min_level == "all" and not p.preserves_bits
        assert p.selected("all", exact=False) and not p.selected("all", exact=True)
        assert not p.selected("basic", exact=False)


# -- RMSNorm: x * 1/sqrt(mean(x^2) + eps) * gamma --------------------------------------------


def _rms_model(
    square: str = "pow",
    inverse: str = "reciprocal",
    gamma: str | None = "right",
    opset: int = 14,
    axes: tuple[int, ...] = (-1,),
    keepdims: int = 1,
    eps: float = 1e-6,
    exponent: float = 2.0,
    extra_output: str = "",
    other_x: bool = False,
):
    """RMSNorm over the last axis of x [2, 5, 16] as exporters write it.

    square: "pow" or "mul"; inverse: "reciprocal" (x * Reciprocal(Sqrt)), "div_one" (x * (1 /
    Sqrt)), "div" (x / Sqrt), "rsqrt_pow" (x * Pow(ms + eps, -0.5)); gamma: "right", "left",
    None."""
    inits = [init("eps", np.float32(eps)), init("two", np.float32(exponent))]
    nodes = [
        helper.make_node("Pow", ["x", "two"], ["sq"])
        if square == "pow"
        else helper.make_node("Mul", ["x", "x"], ["sq"])
    ]
    if opset >= 18:
        inits.append(init("axes", np.array(axes, np.int64)))
        nodes.append(helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], keepdims=keepdims))
    else:
        nodes.append(helper.make_node("ReduceMean", ["sq"], ["ms"], axes=axes, keepdims=keepdims))
    nodes[-1].name = "rms_mean"
    nodes.append(helper.make_node("Add", ["ms", "eps"], ["mse"]))
    x = "x2" if other_x else "x"
    if inverse == "rsqrt_pow":
        inits.append(init("minus_half", np.float32(-0.5)))
        nodes.append(helper.make_node("Pow", ["mse", "minus_half"], ["inv"]))
    else:
        nodes.append(helper.make_node("Sqrt", ["mse"], ["r"]))
    if inverse == "reciprocal":
        nodes.append(helper.make_node("Reciprocal", ["r"], ["inv"]))
    elif inverse == "div_one":
        inits.append(init("one", np.float32(1.0)))
        nodes.append(helper.make_node("Div", ["one", "r"], ["inv"]))
    if inverse == "div":
        nodes.append(helper.make_node("Div", [x, "r"], ["n"]))
    else:
        nodes.append(helper.make_node("Mul", [x, "inv"], ["n"]))
    if gamma is not None:
        inits.append(init("gamma", rand_w(16) + 1))
        operands = ["gamma", "n"] if gamma == "left" else ["n", "gamma"]
        nodes.append(helper.make_node("Mul", operands, ["y"]))
    else:
        nodes[-1].output[0] = "y"
    inputs = [tensor("x", shape=[2, 5, 16])] + ([tensor("x2", shape=[2, 5, 16])] if other_x else [])
    outputs = [tensor("y")] + ([tensor(extra_output)] if extra_output else [])
    return make_model(nodes, inputs, outputs, inits, opset=opset)


def _rms_reference(x: np.ndarray, gamma: np.ndarray | float, eps: float = 1e-6) -> np.ndarray:
    x64 = x.astype(np.float64)
    return x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + eps) * gamma


@pytest.mark.parametrize("square", ["pow", "mul"])
@pytest.mark.parametrize("inverse", ["reciprocal", "div_one", "div", "rsqrt_pow"])
@pytest.mark.parametrize("gamma", ["right", "left", None])
def test_rms_norm_forms_fuse_into_one_node(square, inverse, gamma):
    model = _rms_model(square, inverse, gamma)
    x = (rand_x(2, 5, 16) * 3 + 0.5).astype(np.float32)
    fused, got, want = fused_and_plain(model, {"x": x}, level="all")
    assert op_list(fused) == ["com.graphrt.RMSNormalization"]
    assert fused.graph.nodes[0].info.name == "rms_mean"  # named after the ReduceMean
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    consts = {i.name: i for i in model.graph.initializer}
    g = numpy_helper.to_array(consts["gamma"]) if gamma else 1.0
    np.testing.assert_allclose(got, _rms_reference(x, g), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "opset,domain", [(18, "com.graphrt."), pytest.param(23, "", marks=OPSET_23)]
)
def test_rms_norm_with_axes_as_input_and_the_ai_onnx_operator(opset, domain):
    model = _rms_model(opset=opset)
    x = rand_x(2, 5, 16)
    fused, got, want = fused_and_plain(model, {"x": x}, level="all")
    assert op_list(fused) == [domain + "RMSNormalization"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"axes": (1,)}, id="axis 1"),
        pytest.param({"axes": (2,)}, id="last axis by a positive number"),
        pytest.param({"keepdims": 0, "gamma": None}, id="keepdims 0"),
        pytest.param({"eps": -1e-6}, id="negative eps"),
        pytest.param({"exponent": 3.0}, id="cube"),
        pytest.param({"other_x": True}, id="another tensor normalized"),
        pytest.param({"extra_output": "ms"}, id="mean square is an output"),
        pytest.param({"extra_output": "inv", "opset": 18}, id="inverse is an output"),
    ],
)
def test_rms_norm_near_misses_stay_unfused(kwargs):
    model = _rms_model(**kwargs)
    if "keepdims" in kwargs:  # [2, 5] does not broadcast with x: the graph is only compiled
        assert "ReduceMean" in op_list(graphrt.Session(model, optimization_level="all"))
        return
    feed = {"x": rand_x(2, 5, 16) + 2}
    if kwargs.get("other_x"):
        feed["x2"] = rand_x(2, 5, 16)
    fused, got, want = fused_and_plain(model, feed, level="all")
    assert "ReduceMean" in op_list(fused)
    np.testing.assert_array_equal(got, want)


def test_rms_norm_gamma_of_another_type_or_shape_stays_out_of_the_node():
    model = _rms_model(gamma="right")
    gamma = next(i for i in model.graph.initializer if i.name == "gamma")
    gamma.CopyFrom(init("gamma", rand_w(5, 16)))  # 2-D: not a scale over the last axis
    x = rand_x(2, 5, 16)
    fused, got, want = fused_and_plain(model, {"x": x}, level="all")
    assert op_list(fused) == ["com.graphrt.RMSNormalization", "Mul"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_rms_norm_fusion_is_skipped_in_exact_mode():
    # exact mode has no exact ReduceMean: the session refuses the model rather than fuse it
    model = _rms_model(square="mul", inverse="div", gamma=None, opset=18)
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(model, mode="exact", optimization_level="all")
    assert info.value.kind == "exact_mode_unavailable"


# -- models: a MiniLM-shaped encoder and LSTM/GRU exports against onnxruntime -----------------


def _ort_reference(model, feed):
    ort = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort_session(model, so).run(None, feed)


@pytest.mark.parametrize(
    "attention,opset",
    [("div", 14), ("sdpa", 14), ("div", 18), pytest.param("sdpa", 23, marks=OPSET_23)],
)
@pytest.mark.parametrize("level", ["all", "none"])
def test_minilm_encoder_matches_onnxruntime(attention, opset, level):
    if opset > 14 and onnxruntime_limits()[1] < opset:
        pytest.skip(f"the installed onnxruntime does not load opset {opset}")
    layers = 2
    model = minilm_encoder(layers=layers, hidden=48, heads=4, opset=opset, attention=attention)
    feed = encoder_feed(3, 11)
    want = _ort_reference(model, feed)[0]
    sess = graphrt.Session(model, optimization_level=level)
    got = sess.run(None, feed)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    if level == "none":
        return
    ops = op_list(sess)
    assert ops.count("com.graphrt.Attention") == layers
    ln = "LayerNormalization" if opset >= 17 else "com.graphrt.LayerNormalization"
    assert ops.count(ln) == 2 * layers + 1
    # q, k, v, output projection, the two feed-forward products (the first with the Gelu)
    assert ops.count("com.graphrt.FusedMatMul") == 6 * layers
    for gone in ("Softmax", "Erf", "ReduceMean", "Sqrt", "Div", "MatMul"):
        assert gone not in ops
    # what stays: the mask (Unsqueeze, Cast, Sub, Mul), the residual and embedding Adds, and
    # of the head splits and merge (fuse_attention_heads) only q/k/v's Reshapes to
    # [batch, seq, hidden], views, of one new Concat per layer
    assert "Transpose" not in ops
    assert ops.count("Reshape") == 3 * layers and ops.count("Concat") == layers
    assert ops.count("Mul") == 1 and ops.count("Add") == 2 * layers + 2


def test_minilm_encoder_runs_batches_and_lengths_on_one_session():
    model = minilm_encoder(layers=1, hidden=32, heads=2)
    sess = graphrt.Session(model, optimization_level="all")
    for batch, seq in ((1, 5), (4, 9), (2, 1)):
        feed = encoder_feed(batch, seq, seed=batch)
        want = _ort_reference(model, feed)[0]
        np.testing.assert_allclose(sess.run(None, feed)[0], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "op,layers,bidirectional", [("LSTM", 2, True), ("GRU", 2, True), ("LSTM", 1, False)]
)
def test_rnn_exports_match_onnxruntime(op, layers, bidirectional):
    """PyTorch's batch_first LSTM/GRU export (layout 0 between Transposes), as graphrt runs
    it, against onnxruntime (tests/ops/test_rnn.py checks the layout-1 form)."""
    model = rnn_export(op, 12, 5, layers=layers, bidirectional=bidirectional, seed=2)
    x = np.random.default_rng(1).standard_normal((3, 9, 5)).astype(np.float32)
    want = _ort_reference(model, {"x": x})[0]
    got = graphrt.Session(model).run(None, {"x": x})[0]
    assert got.shape == (3, 9, (2 if bidirectional else 1) * 12)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_bench_encoder_fuses():
    """The benchmark's model (bench/bench_transformers.py) at a tenth of its depth and width
    fuses the same way."""
    model = minilm_encoder(layers=1, hidden=48, heads=12, vocab=300, max_positions=64)
    sess = graphrt.Session(model, optimization_level="all")
    assert op_list(sess).count("com.graphrt.Attention") == 1
    feed = encoder_feed(1, 16, 300, padded=False)
    np.testing.assert_allclose(
        sess.run(None, feed)[0], _ort_reference(model, feed)[0], rtol=1e-4, atol=1e-4
    )
