"""fuse_attention_heads (fusion/attention_heads.py): the com.graphrt.Attention fuse_attention
writes takes Q, K, V as [batch, seq, heads * size] and writes the merged context, so the
Transposes of the head splits and of the merge go.  Exporter-shaped models against onnxruntime
on the numpy and native paths, the split and merge forms, and the near misses that keep their
Transposes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import helper, numpy_helper

import graphrt
from graphrt_ops_basic.fusion.attention_heads import FuseAttentionHeads
from tests._fusion import op_list
from tests._models import init, make_model, ort_session, tensor
from tests._transformers import encoder_feed, minilm_encoder

B, S, H, D = 2, 7, 3, 8  # batch, sequence, query heads, head size
HEADS = [0, 2, 1, 3]


def _paths() -> list:
    """numpy, and the native kernels' best ISA when ops-simd is installed."""
    try:
        import graphrt_ops_simd
    except ImportError:
        native = pytest.param("native", marks=pytest.mark.skip(reason="ops-simd not installed"))
        return ["numpy", native]
    isa = graphrt_ops_simd.available_isas()[-1]
    if isa == "scalar":
        native = pytest.param("native", marks=pytest.mark.skip(reason="no SIMD path here"))
        return ["numpy", native]
    return ["numpy", pytest.param(isa, id="native")]


PATHS = _paths()


def _native_calls(monkeypatch, path: str) -> list:
    """The native attention calls a session on ``path`` makes (none counted on numpy)."""
    calls: list = []
    if path != "numpy":
        import graphrt_ops_simd.attention as mod

        real = mod._native.attention
        monkeypatch.setattr(mod._native, "attention", lambda *a: calls.append(a) or real(*a))
    return calls


def _ort(model, feed) -> list[np.ndarray]:
    ort = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort_session(model, so).run(None, feed)


def _attention_node(sess: graphrt.Session):
    (node,) = [n for n in sess.graph.nodes if n.info.op_type == "Attention"]
    return node


# -- the MiniLM encoder ---------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("opset", [14, 17])
@pytest.mark.parametrize("style", ["div", "sdpa"])
def test_minilm_encoder_attention_reads_and_writes_3d(style, opset, path, monkeypatch):
    calls = _native_calls(monkeypatch, path)
    layers, heads = 2, 4
    model = minilm_encoder(layers=layers, hidden=48, heads=heads, opset=opset, attention=style)
    sess = graphrt.Session(model, optimization_level="all", kernel_path=path)
    ops = op_list(sess)
    assert "fuse_attention_heads" in sess.graph.passes_run
    assert ops.count("com.graphrt.Attention") == layers and "Transpose" not in ops
    # per layer: q, k, v's Reshapes to [batch, seq, hidden] (views) of one new Concat; the
    # split's and the merge's Concats went with their Reshapes
    assert ops.count("Reshape") == 3 * layers and ops.count("Concat") == layers
    for node in sess.graph.nodes:
        if node.info.op_type == "Attention":
            assert node.info.attrs["q_num_heads"] == heads
            assert node.info.attrs["kv_num_heads"] == heads
    for batch, seq in ((3, 11), (1, 5), (2, 1)):  # one session, dynamic shapes
        feed = encoder_feed(batch, seq, seed=batch)
        got = sess.run(None, feed)[0]
        assert got.shape == (batch, seq, 48)
        np.testing.assert_allclose(got, _ort(model, feed)[0], rtol=1e-4, atol=1e-4)
    assert len(calls) == (0 if path == "numpy" else 3 * layers)


def test_minilm_encoder_without_the_pass_keeps_its_transposes(monkeypatch):
    """What the pass removes: q, k, v's and the context's Transposes, the merge's Reshape."""
    model = minilm_encoder(layers=1, hidden=32, heads=2)
    with_pass = op_list(graphrt.Session(model, optimization_level="all"))
    monkeypatch.setattr(FuseAttentionHeads, "run", lambda self, graph, ctx: False)
    without = op_list(graphrt.Session(model, optimization_level="all"))
    assert without.count("Transpose") == 4 and "Transpose" not in with_pass
    assert without.count("Reshape") == 4 and with_pass.count("Reshape") == 3


# -- one attention: split and merge forms ---------------------------------------------------


def _model(
    split: str = "const",
    merge: str | None = "const",
    opset: int = 14,
    kv_heads: int = H,
    mask: str | None = "keys",
    v_perm: list[int] = HEADS,
    extra_output: str = "",
    seq: int | str = "seq",
    allowzero: tuple[int, int] | None = None,
):
    """softmax(Q K^T / sqrt(D) + mask) V of q, k, v [batch, seq, heads * D] as exporters write
    it, then merged back to [batch, seq, H * D] (``merge`` None: Y [batch, H, seq, D] is the
    output).

    split: "const" ([0, 0, h, D]), "concat" (Concat of Unsqueeze(Gather(Shape(q), i)) and
    [h, D]), "gather" (Concat(Gather(Shape(q), [0]), Gather(Shape(q), [1]), [h], [D])),
    "minus_one" ([0, -1, h, D]), "literal" ([B, S, h, D]), "not_last" ([0, h, S, D]: q's
    [B, S, h * D] reinterpreted, no head split), "neg_heads" ([0, 0, -1, D]),
    "runtime_heads" (h from a run-time value).  merge: "const" ([0, 0, H * D]), "concat"
    (Q's split values and [H * D]), "literal" ([B, S, H * D]), "other" (dim 0 of another
    tensor's shape).  allowzero: the splits' and the merge's attribute (opset 14 on)."""
    split_attrs, merge_attrs = ({"allowzero": a} if allowzero else {} for a in allowzero or (0, 0))
    nodes, inits = [], [init("root", np.float32(math.sqrt(D)))]
    inputs = [tensor("q", shape=["batch", seq, H * D])]
    inputs += [tensor(x, shape=["batch", seq, kv_heads * D]) for x in "kv"]

    def dim(i: int, of: str = "q") -> str:
        """Unsqueeze(Gather(Shape(of), i), [0]), made once."""
        out = f"d{i}_{of}"
        if any(out in n.output for n in nodes):
            return out
        inits.append(init(f"i{i}_{of}", np.array(i, np.int64)))
        nodes.append(helper.make_node("Shape", [of], [f"shape{i}_{of}"]))
        nodes.append(helper.make_node("Gather", [f"shape{i}_{of}", f"i{i}_{of}"], [f"g{i}_{of}"]))
        if opset >= 13:
            inits.append(init(f"axes{i}_{of}", np.array([0], np.int64)))
            nodes.append(helper.make_node("Unsqueeze", [f"g{i}_{of}", f"axes{i}_{of}"], [out]))
        else:
            nodes.append(helper.make_node("Unsqueeze", [f"g{i}_{of}"], [out], axes=[0]))
        return out

    def shape(name: str, h: int) -> str:
        out = f"split_{name}"
        if split in ("const", "minus_one", "literal", "not_last", "neg_heads"):
            value = {
                "const": [0, 0, h, D],
                "literal": [B, S, h, D],
                "minus_one": [0, -1, h, D],
                "not_last": [0, h, S, D],
                "neg_heads": [0, 0, -1, D],
            }[split]
            inits.append(init(out, np.array(value, np.int64)))
        elif split == "concat":
            inits.append(init(f"hd_{name}", np.array([h, D], np.int64)))
            nodes.append(helper.make_node("Concat", [dim(0), dim(1), f"hd_{name}"], [out], axis=0))
        elif split == "gather":
            for i in (0, 1):
                inits.append(init(f"j{i}_{name}", np.array([i], np.int64)))
                nodes.append(helper.make_node("Shape", ["q"], [f"s{i}_{name}"]))
                nodes.append(
                    helper.make_node("Gather", [f"s{i}_{name}", f"j{i}_{name}"], [f"e{i}_{name}"])
                )
            inits.extend([init(f"h_{name}", np.array([h], np.int64)), init(f"dd_{name}", [D])])
            parts = [f"e0_{name}", f"e1_{name}", f"h_{name}", f"dd_{name}"]
            nodes.append(helper.make_node("Concat", parts, [out], axis=-1))
        elif split == "runtime_heads":  # h = the length of the input "heads"
            inputs.append(tensor(f"heads_{name}", shape=[h]))
            inits.append(init(f"one_{name}", np.array([0], np.int64)))
            inits.append(init(f"d_{name}", np.array([D], np.int64)))
            nodes.append(helper.make_node("Shape", [f"heads_{name}"], [f"hs_{name}"]))
            nodes.append(helper.make_node("Gather", [f"hs_{name}", f"one_{name}"], [f"h_{name}"]))
            nodes.append(
                helper.make_node(
                    "Concat", [dim(0), dim(1), f"h_{name}", f"d_{name}"], [out], axis=0
                )
            )
        else:
            raise ValueError(split)
        return out

    heads = {"q": H, "k": kv_heads, "v": kv_heads}
    for x in "qkv":
        nodes.append(helper.make_node("Reshape", [x, shape(x, heads[x])], [f"{x}4"], **split_attrs))
    nodes += [
        helper.make_node("Transpose", ["q4"], ["qh"], perm=HEADS),
        helper.make_node("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["v4"], ["vh"], perm=v_perm),
        helper.make_node("MatMul", ["qh", "kt"], ["s0"], name="qk"),
        helper.make_node("Div", ["s0", "root"], ["s1"]),
    ]
    last = "s1"
    if mask == "keys":
        inputs.append(tensor("mask", shape=["batch", 1, 1, seq]))
    elif mask == "one_key":  # per query, broadcast over the keys by the Add
        rng = np.random.default_rng(4)
        inits.append(init("mask", np.where(rng.random((B, 1, S, 1)) < 0.5, 0, -3.0)))
        inits[-1].CopyFrom(init("mask", numpy_helper.to_array(inits[-1]).astype(np.float32)))
    if mask is not None:
        nodes.append(helper.make_node("Add", [last, "mask"], ["s2"]))
        last = "s2"
    nodes.append(helper.make_node("Softmax", [last], ["p"], axis=-1 if opset >= 13 else 3))
    nodes.append(helper.make_node("MatMul", ["p", "vh"], ["y4"]))
    outputs = [tensor("y")]
    if merge is None:
        outputs = [tensor("y4")]
    else:
        nodes.append(helper.make_node("Transpose", ["y4"], ["yt"], perm=HEADS))
        if merge == "concat":
            inits.append(init("hidden", np.array([H * D], np.int64)))
            nodes.append(helper.make_node("Concat", [dim(0), dim(1), "hidden"], ["merge"], axis=0))
        elif merge == "other":  # [len(other), 0, H * D]: a value Q's split does not read
            inputs.append(tensor("other", shape=["n"]))
            inits.append(init("rest", np.array([0, H * D], np.int64)))
            parts = [dim(0, "other"), "rest"]
            nodes.append(helper.make_node("Concat", parts, ["merge"], axis=0))
        else:
            value = [0, 0, H * D] if merge == "const" else [B, S, H * D]
            inits.append(init("merge", np.array(value, np.int64)))
        nodes.append(helper.make_node("Reshape", ["yt", "merge"], ["y"], **merge_attrs))
    if extra_output:
        outputs.append(tensor(extra_output))
    return make_model(nodes, inputs, outputs, inits, opset=opset)


def _feed(model, batch: int = B, seq: int = S) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch * 10 + seq)
    sizes = {"batch": batch, "seq": seq, "n": batch}
    feed = {}
    for vi in model.graph.input:
        shape = [d.dim_value or sizes[d.dim_param] for d in vi.type.tensor_type.shape.dim]
        feed[vi.name] = rng.standard_normal(shape).astype(np.float32)
    if "mask" in feed:
        keep = np.ones(feed["mask"].shape, bool)
        keep[-1, ..., seq - seq // 3 :] = False  # the last sequence is padded
        feed["mask"] = np.where(keep, 0, np.finfo(np.float32).min).astype(np.float32)
    return feed


def _check(
    model, path: str, transposes: int, shapes=((B, S), (1, 4)), **feed_kw
) -> graphrt.Session:
    """The session's graph keeps ``transposes`` Transposes, the pass ran, and the outputs
    match onnxruntime and the unoptimised graph for every (batch, seq)."""
    sess = graphrt.Session(model, optimization_level="all", kernel_path=path)
    plain = graphrt.Session(model, optimization_level="none", kernel_path="numpy")
    assert "fuse_attention_heads" in sess.graph.passes_run
    assert op_list(sess).count("Transpose") == transposes, op_list(sess)
    for batch, seq in shapes:
        feed = _feed(model, batch, seq)
        got = sess.run(None, feed)
        for g, w, p in zip(got, _ort(model, feed), plain.run(None, feed)):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(g, p, rtol=1e-4, atol=1e-5)
    return sess


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    "split,merge,opset",
    [
        ("const", "const", 14),
        ("const", "const", 17),
        ("concat", "concat", 14),
        ("concat", "const", 17),
        ("concat", "concat", 11),  # Unsqueeze's axes as an attribute
        ("gather", "const", 14),
        ("minus_one", "const", 14),
    ],
)
def test_split_and_merge_forms_fuse(split, merge, opset, path):
    model = _model(split, merge, opset)
    sess = _check(model, path, transposes=0)
    ops = op_list(sess)
    assert ops.count("Reshape") == 3 and ops.count("com.graphrt.Attention") == 1
    node = _attention_node(sess)
    assert node.info.attrs["q_num_heads"] == H and node.info.attrs["kv_num_heads"] == H
    assert node.info.outputs == ("y",)  # the merge's output, written by the Attention
    assert node.info.name == "qk"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"kv_heads": 1}, id="one kv head"),
        pytest.param({"mask": None}, id="no mask"),
        pytest.param({"mask": "one_key", "seq": S}, id="mask of one key"),
    ],
)
def test_heads_and_masks(kwargs, path):
    """Group-query heads split by their own count; a mask broadcasts against [batch, q_heads,
    q_seq, keys] in the 3-D mode as in the 4-D one (a mask of one key over every key, as the
    graph's Add did)."""
    model = _model(**kwargs)
    shapes = ((B, S),) if "seq" in kwargs else ((B, S), (1, 4))
    sess = _check(model, path, transposes=0, shapes=shapes)
    node = _attention_node(sess)
    assert node.info.attrs["kv_num_heads"] == kwargs.get("kv_heads", H)


@pytest.mark.parametrize("path", PATHS)
def test_a_reshape_that_is_no_head_split_is_rewritten_soundly(path):
    """[B, S, H * D] reshaped to [B, H, S, D] mixes rows and heads; the pass still reads it as
    Reshape(x, [B, H, S * D]) split into S heads, which is the same reinterpretation."""
    model = _model("not_last", "literal", seq=S, mask=None)
    sess = _check(model, path, transposes=0, shapes=((B, S),))
    assert _attention_node(sess).info.attrs["q_num_heads"] == S


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    "merge,transposes,reshapes",
    [
        ("literal", 0, 5),  # [B, S, H * D] is not proven: Y4 -> its merged Transpose as a view
        ("other", 0, 5),  # another tensor's dimension
        (None, 1, 4),  # Y4 is the output: split back, one Transpose where three went
    ],
)
def test_an_unproven_merge_keeps_its_reshape(merge, transposes, reshapes, path):
    shapes = ((B, S),) if merge == "literal" else ((B, S), (1, 4))
    model = _model("const", merge, seq=S if merge == "literal" else "seq")
    sess = _check(model, path, transposes=transposes, shapes=shapes)
    assert op_list(sess).count("Reshape") == reshapes


@pytest.mark.parametrize("path", PATHS)
def test_allowzero_splits_fuse_and_a_literal_zero_merge_is_not_a_copy(path):
    """allowzero 1 on the splits: their literal entries stay theirs; a merge whose 0 is
    literal (allowzero 1) is no copy of Y's dimension: it stays, and fails as it did."""
    model = _model("literal", "const", seq=S, allowzero=(1, 0))
    sess = _check(model, path, transposes=0, shapes=((B, S),))
    assert _attention_node(sess).info.outputs == ("y",)
    model = _model("literal", "const", seq=S, allowzero=(1, 1))
    sess = graphrt.Session(model, optimization_level="all", kernel_path=path)
    assert "Transpose" not in op_list(sess) and op_list(sess).count("Reshape") == 5
    for s in (sess, graphrt.Session(model, optimization_level="none")):
        with pytest.raises(graphrt.SessionError) as info:  # [B, S, H, D] as [0, 0, H * D]
            s.run(None, _feed(model))
        assert info.value.kind == "invalid_input"


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"split": "neg_heads"}, id="heads inferred by -1"),
        pytest.param({"split": "runtime_heads"}, id="heads from a run-time value"),
        pytest.param({"v_perm": [0, 2, 3, 1], "seq": D}, id="V transposed by another perm"),
        pytest.param({"extra_output": "qh"}, id="split Q is an output"),
        pytest.param({"extra_output": "v4"}, id="V's reshape is an output"),
    ],
)
def test_near_misses_keep_their_transposes(kwargs):
    model = _model(**kwargs)
    seq = kwargs.get("seq", S)
    feed = _feed(model, B, seq)
    sess = graphrt.Session(model, optimization_level="all")
    assert "com.graphrt.Attention" in op_list(sess)  # fuse_attention did fuse
    assert "fuse_attention_heads" not in sess.graph.passes_run
    assert "q_num_heads" not in _attention_node(sess).info.attrs
    plain = graphrt.Session(model, optimization_level="none")
    for g, w, p in zip(sess.run(None, feed), _ort(model, feed), plain.run(None, feed)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(g, p, rtol=1e-4, atol=1e-5)


def test_a_split_value_read_twice_stays():
    """Q's split read by the Attention and by a second node: that Transpose must stay, so
    nothing is rewritten."""
    model = _model()
    model.graph.node.append(helper.make_node("Neg", ["qh"], ["neg"]))
    model.graph.output.append(tensor("neg"))
    sess = graphrt.Session(model, optimization_level="all")
    assert "fuse_attention_heads" not in sess.graph.passes_run
    feed = _feed(model)
    for g, w in zip(sess.run(None, feed), _ort(model, feed)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_the_pass_order_and_level():
    p = FuseAttentionHeads()
    assert p.order > 140 and p.min_level == "all" and not p.preserves_bits  # after fuse_attention
    assert not p.selected("basic", exact=False) and not p.selected("all", exact=True)


def test_declared_shapes_of_the_split_values_still_hold():
    """The 3-D value that replaces a 4-D head split gets a name of its own: the model's
    value_info (written by onnx's shape inference, as exporters do) still describes the old
    names, and check_shapes holds the run to them."""
    import onnx

    model = onnx.shape_inference.infer_shapes(minilm_encoder(layers=1))
    assert any(len(v.type.tensor_type.shape.dim) == 4 for v in model.graph.value_info)
    feed = encoder_feed(2, 9)
    want = graphrt.Session(model, optimization_level="none").run(None, feed)
    got = graphrt.Session(model, check_shapes=True).run(None, feed)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)
