"""The attention family of graphrt-ops-basic: Attention (opsets 23-25), RotaryEmbedding,
RMSNormalization, SwiGLU, CausalConvWithState, LinearAttention and ai.onnx.preview
FlexAttention.

Each operator is checked against numpy formulas written here from the spec text (for
Attention: GQA/MQA, causal masks with a past cache or per-batch nonpad_kv_seqlen offsets, every
kind of mask including short ones, softcap, scale, the four qk_matmul_output modes, windows),
against onnx's reference evaluator where the installed onnx has the schema, and a small
transformer block with random weights against onnxruntime.  Streaming properties (a sequence
fed in chunks with the carried state equals one call), errors by kind with the node named,
thread-count independence, and exact-mode bits of the exact kernels (RotaryEmbedding,
RMSNormalization, SwiGLU, CausalConvWithState) complete it.
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphrt
from graphrt.errors import SessionError
from tests._models import onnxruntime_limits, ort_session
from tests._versions import skip_unless_onnx_defines

try:
    import ml_dtypes

    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover
    BF16 = None

PREVIEW = "ai.onnx.preview"
RNG = np.random.default_rng(1234)


# -- helpers ------------------------------------------------------------------------------------


def _info(name, value):
    return helper.make_tensor_value_info(
        name, helper.np_dtype_to_tensor_dtype(value.dtype), list(value.shape)
    )


def model_of(op, feeds, outputs, opset, inits=(), domain="", out_types=None, **attrs):
    """A one-node model named "node"; ``feeds`` in input order (None: an absent input),
    ``inits`` (name, array) constant inputs after them."""
    skip_unless_onnx_defines(opset)
    names = [k if v is not None else "" for k, v in feeds.items()] + [n for n, _ in inits]
    node = helper.make_node(op, names, outputs, name="node", domain=domain, **attrs)
    inputs = [_info(k, v) for k, v in feeds.items() if v is not None]
    first = next(v for v in feeds.values() if v is not None)
    types = out_types or {}
    outs = [
        helper.make_tensor_value_info(
            o, types.get(o, helper.np_dtype_to_tensor_dtype(first.dtype)), None
        )
        for o in outputs
        if o
    ]
    graph = helper.make_graph(
        [node], "g", inputs, outs, [numpy_helper.from_array(v, n) for n, v in inits]
    )
    imports = [helper.make_opsetid("", opset)]
    if domain:
        imports.append(helper.make_opsetid(domain, 1))
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 10
    return model


def run(model, feeds, mode="fast", threads=1):
    session = graphrt.Session(model, mode=mode, intra_op_threads=threads)
    return session.run(None, {k: v for k, v in feeds.items() if v is not None})


def error_of(fn) -> SessionError:
    with pytest.raises(SessionError) as err:
        fn()
    return err.value


def has_schema(op, opset, domain=""):
    """Whether the installed onnx knows ``op`` at ``opset`` (for its reference evaluator)."""
    try:
        return onnx.defs.get_schema(op, opset, domain).since_version <= opset
    except Exception:
        return False


def reference(model, feeds):
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model).run(None, {k: v for k, v in feeds.items() if v is not None})


def needs_onnxruntime(opset):
    pytest.importorskip("onnxruntime")
    if onnxruntime_limits()[1] < opset:
        pytest.skip(
            f"the installed onnxruntime loads ai.onnx up to opset {onnxruntime_limits()[1]}"
        )


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# -- Attention: the spec's formula ----------------------------------------------------------------


def spec_attention(
    q,
    k,
    v,
    mask=None,
    past_k=None,
    past_v=None,
    nonpad=None,
    scale=None,
    causal=False,
    q_heads=None,
    kv_heads=None,
    softcap=0.0,
    mode=0,
    left=-1,
    right=-1,
):
    """Attention in float64 as the spec text reads: (Y, present_k, present_v, qk_out)."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    three_d = q.ndim == 3
    if three_d:  # (b, s, h * d) -> (b, h, s, d)
        q = q.reshape(q.shape[0], q.shape[1], q_heads, -1).transpose(0, 2, 1, 3)
        k = k.reshape(k.shape[0], k.shape[1], kv_heads, -1).transpose(0, 2, 1, 3)
        v = v.reshape(v.shape[0], v.shape[1], kv_heads, -1).transpose(0, 2, 1, 3)
    b, hq, sq, d = q.shape
    past = 0
    if past_k is not None:
        past = past_k.shape[2]
        k = np.concatenate([past_k.astype(np.float64), k], axis=2)
        v = np.concatenate([past_v.astype(np.float64), v], axis=2)
    present_k, present_v = k.copy(), v.copy()
    total = k.shape[2]
    scale = 1 / math.sqrt(d) if scale is None else scale
    group = hq // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    raw = q @ k.transpose(0, 1, 3, 2) * scale
    capped = softcap * np.tanh(raw / softcap) if softcap > 0 else raw
    # allowed[b, h, i, j] and the additive bias
    bias = np.zeros((b, hq, sq, total))
    if mask is not None:
        m = mask
        if m.shape[-1] < total:  # padded with False / -inf
            pad = [(0, 0)] * (m.ndim - 1) + [(0, total - m.shape[-1])]
            m = np.pad(m, pad, constant_values=False if m.dtype == bool else -np.inf)
        bias = bias + (np.where(m, 0.0, -np.inf) if m.dtype == bool else m.astype(np.float64))
    offset = np.full(b, past)
    if nonpad is not None:
        offset = nonpad - sq
    i = np.arange(sq)[:, None]
    j = np.arange(total)[None, :]
    for bi in range(b):
        pos = i + offset[bi]
        banned = np.zeros((sq, total), bool)
        if causal:
            banned |= j > pos
        if left >= 0:
            banned |= j < pos - left
        if right >= 0:
            banned |= j > pos + right
        if nonpad is not None:
            banned |= j >= nonpad[bi]
        bias[bi][:, banned] = -np.inf
    scores = capped + bias
    fully = np.all(np.isneginf(bias), axis=-1, keepdims=True)
    mx = np.max(np.where(np.isneginf(scores), -np.inf, scores), axis=-1, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0)
    e = np.exp(scores - mx)
    probs = e / np.maximum(e.sum(-1, keepdims=True), 1e-300)
    probs = np.where(fully, 0.0, probs)
    y = probs @ v
    if three_d:
        y = y.transpose(0, 2, 1, 3).reshape(b, sq, -1)
    qk = {0: raw, 1: capped, 2: scores, 3: probs}[mode]
    return y, present_k, present_v, qk


def attention_feeds(three_d, hq, hkv, sq=3, kv=4, past=0, d=8, dv=6, b=2, mask=None, dtype=None):
    dtype = dtype or np.float32
    if three_d:
        q, k, v = f32(b, sq, hq * d), f32(b, kv, hkv * d), f32(b, kv, hkv * dv)
    else:
        q, k, v = f32(b, hq, sq, d), f32(b, hkv, kv, d), f32(b, hkv, kv, dv)
    feeds = {"Q": q.astype(dtype), "K": k.astype(dtype), "V": v.astype(dtype)}
    feeds["attn_mask"] = mask
    if past:
        feeds["past_key"] = f32(b, hkv, past, d).astype(dtype)
        feeds["past_value"] = f32(b, hkv, past, dv).astype(dtype)
    return feeds


def masks(kind, b, hq, sq, total):
    """A mask of each kind the spec allows, for scores (b, hq, sq, total)."""
    if kind is None:
        return None
    if kind == "bool2d":
        m = RNG.random((sq, total)) > 0.3
        m[:, 0] = True
        return m
    if kind == "float4d":
        return f32(b, 1, sq, total)
    if kind == "bool_short":  # shorter than total: padded with False
        return RNG.random((b, hq, sq, max(total - 2, 1))) > 0.2
    if kind == "float_short3d":
        return f32(hq, sq, max(total - 1, 1))
    if kind == "int":
        return RNG.integers(-2, 3, (sq, total)).astype(np.int32)
    if kind == "rank1":
        return f32(total)
    raise AssertionError(kind)


LAYOUTS = [(False, 4, 4), (False, 4, 2), (True, 4, 1), (True, 6, 3)]
MASKS = [None, "bool2d", "float4d", "bool_short", "float_short3d", "int", "rank1"]


@pytest.mark.parametrize(
    ("layout", "mask_kind", "causal", "past"),
    [
        (layout, mask, causal, past)
        for (layout, mask), causal, past in itertools.product(
            zip(LAYOUTS * 2, MASKS + MASKS[:1]), (0, 1), (0, 3)
        )
    ],
)
def test_attention_matches_the_spec(layout, mask_kind, causal, past):
    three_d, hq, hkv = layout
    b, sq, kv = 2, 3, 4
    mask = masks(mask_kind, b, hq, sq, past + kv)
    feeds = attention_feeds(three_d, hq, hkv, sq, kv, past, b=b, mask=mask)
    attrs = {"is_causal": causal}
    if three_d:
        attrs.update(q_num_heads=hq, kv_num_heads=hkv)
    outs = ["Y", "pk", "pv"] if past else ["Y"]
    got = run(model_of("Attention", feeds, outs, 23, **attrs), feeds)
    want = spec_attention(
        feeds["Q"], feeds["K"], feeds["V"], mask, feeds.get("past_key"),
        feeds.get("past_value"), causal=causal, q_heads=hq, kv_heads=hkv,
    )  # fmt: skip
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    assert got[0].dtype == np.float32
    if past:
        np.testing.assert_array_equal(got[1], want[1].astype(np.float32))
        np.testing.assert_array_equal(got[2], want[2].astype(np.float32))


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
@pytest.mark.parametrize("softcap", [0.0, 1.5])
def test_attention_qk_matmul_output_modes(mode, softcap):
    """Mode 0 is the raw product even with softcap (the spec's wording), 1 after softcap, 2
    with the bias, 3 the probabilities (fully masked rows zero)."""
    b, hq, sq, kv = 2, 4, 3, 5
    mask = RNG.random((b, 1, sq, kv)) > 0.4
    mask[0, 0, 1] = False  # a fully masked row
    feeds = attention_feeds(False, hq, 2, sq, kv, b=b, mask=mask)
    model = model_of(
        "Attention", feeds, ["Y", "", "", "qk"], 23, is_causal=1, softcap=softcap,
        qk_matmul_output_mode=mode, scale=0.3,
    )  # fmt: skip
    y, qk = run(model, feeds)
    want = spec_attention(
        feeds["Q"], feeds["K"], feeds["V"], mask, causal=True, softcap=softcap, mode=mode,
        scale=0.3,
    )  # fmt: skip
    np.testing.assert_allclose(y, want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(qk, want[3], rtol=1e-5, atol=1e-6)
    assert qk.shape == (b, hq, sq, kv) and qk.dtype == np.float32
    np.testing.assert_array_equal(y[0, :, 1], 0)


def test_attention_fully_masked_rows_are_zero_without_nan_or_warnings():
    feeds = attention_feeds(False, 2, 2, 3, 4, mask=np.zeros((3, 4), bool))
    feeds["attn_mask"][1, 2] = True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y, qk = run(
            model_of("Attention", feeds, ["Y", "", "", "qk"], 23, qk_matmul_output_mode=3), feeds
        )
    assert not np.isnan(y).any()
    np.testing.assert_array_equal(y[:, :, [0, 2]], 0)
    np.testing.assert_array_equal(qk[:, :, [0, 2]], 0)
    np.testing.assert_allclose(qk[:, :, 1, 2], 1)
    feeds["Q"][0, 0, 0] = np.inf  # inf and NaN scores in a fully masked row stay out of it
    with np.errstate(all="ignore"):
        y = run(model_of("Attention", feeds, ["Y"], 23), feeds)[0]
    np.testing.assert_array_equal(y[:, :, [0, 2]], 0)


@pytest.mark.parametrize("nonpad", [[4, 6], [2, 5], [1, 6]])
@pytest.mark.parametrize("with_mask", [False, True])
def test_attention_nonpad_kv_seqlen_offsets_per_batch(nonpad, with_mask):
    """Opset 24: keys past nonpad[b] are padding; causal runs at offset nonpad[b] - q_len
    (negative offsets leave leading queries with no key: zero rows)."""
    b, hq, sq, kv = 2, 4, 3, 6
    nonpad = np.array(nonpad, np.int64)
    mask = (RNG.random((b, 1, sq, kv)) > 0.2) if with_mask else None
    feeds = attention_feeds(False, hq, 2, sq, kv, b=b, mask=mask)
    feeds.update(past_key=None, past_value=None, nonpad=nonpad)
    y = run(model_of("Attention", feeds, ["Y"], 24, is_causal=1), feeds)[0]
    want = spec_attention(feeds["Q"], feeds["K"], feeds["V"], mask, nonpad=nonpad, causal=True)
    np.testing.assert_allclose(y, want[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("left", "right", "causal"), [(2, -1, 1), (1, 2, 0), (0, 0, 0), (-1, 1, 0)]
)
@pytest.mark.parametrize("past", [0, 3])
def test_attention_sliding_windows(left, right, causal, past):
    """Opset 25: keys within [p - left, p + right] of the query's absolute position p."""
    feeds = attention_feeds(False, 2, 1, 4, 4, past, mask=f32(4, past + 4))
    outs = ["Y", "pk", "pv"] if past else ["Y"]
    attrs = dict(is_causal=causal, left_window_size=left, right_window_size=right)
    y = run(model_of("Attention", feeds, outs, 25, **attrs), feeds)[0]
    want = spec_attention(
        feeds["Q"], feeds["K"], feeds["V"], feeds["attn_mask"], feeds.get("past_key"),
        feeds.get("past_value"), causal=causal, left=left, right=right,
    )  # fmt: skip
    np.testing.assert_allclose(y, want[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_attention_other_float_types(dtype):
    if dtype == "bfloat16" and BF16 is None:
        pytest.skip("ml_dtypes is not installed")
    dt = BF16 if dtype == "bfloat16" else np.dtype(dtype)
    feeds = attention_feeds(True, 4, 2, 5, 6, 2, dtype=dt)
    feeds["attn_mask"] = (RNG.standard_normal((5, 8))).astype(dt)
    model = model_of("Attention", feeds, ["Y", "pk", "pv"], 23, is_causal=1, q_num_heads=4,
                     kv_num_heads=2, softcap=3.0)  # fmt: skip
    y, pk, pv = run(model, feeds)
    assert y.dtype == dt and pk.dtype == dt and pv.dtype == dt
    want = spec_attention(
        *(feeds[n].astype(np.float64) for n in ("Q", "K", "V", "attn_mask", "past_key")),
        feeds["past_value"].astype(np.float64), causal=True, q_heads=4, kv_heads=2, softcap=3.0,
    )  # fmt: skip
    tol = {"float16": 5e-3, "bfloat16": 3e-2, "float64": 1e-12}[dtype]
    np.testing.assert_allclose(y.astype(np.float64), want[0], rtol=tol, atol=tol)


@pytest.mark.parametrize("precision", [TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.FLOAT])
def test_attention_softmax_precision(precision):
    """A narrower softmax type rounds the softmax's input and steps (a float16 result, cast back
    to float32); a wider one changes nothing the float32 output can show."""
    feeds = attention_feeds(False, 2, 2, 4, 5)
    y, qk = run(model_of("Attention", feeds, ["Y", "", "", "qk"], 24, softmax_precision=precision,
                         qk_matmul_output_mode=3), feeds)  # fmt: skip
    want = spec_attention(feeds["Q"], feeds["K"], feeds["V"], mode=3)
    tol = 2e-3 if precision == TensorProto.FLOAT16 else 1e-6
    np.testing.assert_allclose(qk, want[3], rtol=tol, atol=tol)
    np.testing.assert_allclose(y, want[0], rtol=tol, atol=tol)
    if precision == TensorProto.FLOAT16:  # the probabilities are float16 values
        np.testing.assert_array_equal(qk, qk.astype(np.float16).astype(np.float32))


def test_attention_scale_attribute_and_negative_scale():
    feeds = attention_feeds(False, 2, 2, 3, 4)
    for scale in (0.05, 2.0, -0.4):
        y = run(model_of("Attention", feeds, ["Y"], 23, scale=scale), feeds)[0]
        want = spec_attention(feeds["Q"], feeds["K"], feeds["V"], scale=scale)
        np.testing.assert_allclose(y, want[0], rtol=1e-5, atol=1e-6)


def test_attention_present_without_past_is_k_and_v():
    feeds = attention_feeds(False, 4, 2, 3, 4)
    _, pk, pv = run(model_of("Attention", feeds, ["Y", "pk", "pv"], 23), feeds)
    np.testing.assert_array_equal(pk, feeds["K"])
    np.testing.assert_array_equal(pv, feeds["V"])


def test_attention_does_not_depend_on_the_thread_count():
    feeds = attention_feeds(False, 8, 2, 64, 64, 16, d=32, dv=32, b=2, mask=f32(64, 80))
    model = model_of("Attention", feeds, ["Y", "pk", "pv"], 23, is_causal=1, softcap=5.0)
    one, two = run(model, feeds, threads=1), run(model, feeds, threads=2)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)


@pytest.mark.skipif(not has_schema("Attention", 24), reason="onnx without the Attention schema")
@pytest.mark.parametrize("case", ["gqa_mask", "past_causal", "nonpad", "softcap_modes"])
def test_attention_matches_onnx_reference(case):
    from tests._versions import ONNX

    if ONNX < (1, 23):
        pytest.skip("onnx before 1.23: its reference Attention predates the errata (masks)")
    attrs, opset, outs = {}, 23, ["Y"]
    if case == "gqa_mask":
        feeds = attention_feeds(True, 6, 2, 3, 5, mask=RNG.random((2, 1, 3, 5)) > 0.2)
        attrs = dict(q_num_heads=6, kv_num_heads=2)
    elif case == "past_causal":
        feeds = attention_feeds(False, 4, 4, 3, 2, past=4, mask=f32(3, 6))
        attrs, outs = dict(is_causal=1), ["Y", "pk", "pv"]
    elif case == "nonpad":
        feeds = attention_feeds(False, 4, 2, 2, 6)
        feeds.update(past_key=None, past_value=None, nonpad=np.array([6, 3], np.int64))
        attrs, opset = dict(is_causal=1), 24
    else:
        feeds = attention_feeds(False, 2, 2, 3, 4, mask=f32(3, 4))
        attrs, outs = dict(softcap=1.0, qk_matmul_output_mode=2), ["Y", "", "", "qk"]
    model = model_of("Attention", feeds, outs, opset, **attrs)
    for got, want in zip(run(model, feeds), reference(model, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("attrs", "change", "kind"),
    [
        ({"qk_matmul_output_mode": 4}, None, "invalid_model"),
        ({"softmax_precision": 7}, None, "invalid_model"),
        ({"softcap": -1.0}, None, "invalid_model"),
        ({}, "past_key_only", "invalid_model"),
        ({}, "three_d_without_heads", "invalid_model"),
        ({}, "head_sizes", "invalid_input"),
        ({}, "long_mask", "invalid_input"),
        ({}, "mask_shape", "invalid_input"),
        ({}, "heads", "invalid_input"),
    ],
)
def test_attention_errors_by_kind(attrs, change, kind):
    feeds = attention_feeds(False, 4, 2, 3, 4)
    outs = ["Y"]
    if change == "past_key_only":
        feeds.update(attn_mask=None, past_key=f32(2, 2, 1, 8))
    elif change == "three_d_without_heads":
        feeds = attention_feeds(True, 4, 2, 3, 4)
    elif change == "head_sizes":
        feeds["K"] = f32(2, 2, 4, 7)
    elif change == "long_mask":
        feeds["attn_mask"] = f32(3, 5)
    elif change == "mask_shape":
        feeds["attn_mask"] = f32(2, 3, 3, 4)
    elif change == "heads":
        feeds["Q"] = f32(2, 3, 3, 8)
    model = model_of("Attention", feeds, outs, 23, **attrs)
    err = error_of(lambda: run(model, feeds))
    assert err.kind == kind, err
    assert err.node == "node"
    assert "Attention node 'node'" in str(err)


def test_attention_nonpad_with_past_is_refused():
    feeds = attention_feeds(False, 2, 2, 3, 4, past=2)
    feeds["nonpad"] = np.array([3, 3], np.int64)
    err = error_of(lambda: run(model_of("Attention", feeds, ["Y"], 24), feeds))
    assert err.kind == "invalid_model" and err.node == "node"


# -- a transformer block against onnxruntime -----------------------------------------------------


def transformer_block(seed=0, hidden=32, heads=4, kv_heads=2, head=8, past=3):
    """RMSNormalization -> q/k/v projections -> RotaryEmbedding on q and k -> Attention (3-D,
    GQA, causal, with a cache and a bool mask) -> output projection -> residual; SwiGLU-free
    (onnxruntime has no opset-28 kernels): the MLP is MatMul, Sigmoid, Mul."""
    rng = np.random.default_rng(seed)

    def w(*shape):
        return (rng.standard_normal(shape) / math.sqrt(shape[0])).astype(np.float32)

    inits = {
        "scale": (rng.random(hidden) + 0.5).astype(np.float32),
        "wq": w(hidden, heads * head),
        "wk": w(hidden, kv_heads * head),
        "wv": w(hidden, kv_heads * head),
        "wo": w(heads * head, hidden),
        "cos": np.cos(np.arange(64)[:, None] / 10 ** (np.arange(head // 2) / 4)).astype(np.float32),
        "sin": np.sin(np.arange(64)[:, None] / 10 ** (np.arange(head // 2) / 4)).astype(np.float32),
    }
    n = helper.make_node
    nodes = [
        n("RMSNormalization", ["x", "scale"], ["h"], epsilon=1e-5),
        n("MatMul", ["h", "wq"], ["q0"]),
        n("MatMul", ["h", "wk"], ["k0"]),
        n("MatMul", ["h", "wv"], ["v"]),
        n("RotaryEmbedding", ["q0", "cos", "sin", "pos"], ["q"], num_heads=heads),
        n("RotaryEmbedding", ["k0", "cos", "sin", "pos"], ["k"], num_heads=kv_heads),
        n("Attention", ["q", "k", "v", "mask", "past_k", "past_v"], ["a", "pk", "pv"],
          is_causal=1, q_num_heads=heads, kv_num_heads=kv_heads, name="attn"),
        n("MatMul", ["a", "wo"], ["o"]),
        n("Add", ["x", "o"], ["y"]),
    ]  # fmt: skip
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", hidden]),
        helper.make_tensor_value_info("pos", TensorProto.INT64, ["B", "S"]),
        helper.make_tensor_value_info("mask", TensorProto.BOOL, ["S", "T"]),
        helper.make_tensor_value_info("past_k", TensorProto.FLOAT, ["B", kv_heads, "P", head]),
        helper.make_tensor_value_info("past_v", TensorProto.FLOAT, ["B", kv_heads, "P", head]),
    ]
    outputs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("y", "pk", "pv")]
    graph = helper.make_graph(
        nodes, "block", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    b, s = 2, 5
    feeds = {
        "x": rng.standard_normal((b, s, hidden)).astype(np.float32),
        "pos": (past + np.arange(s))[None].repeat(b, 0).astype(np.int64),
        "mask": rng.random((s, past + s)) > 0.2,
        "past_k": rng.standard_normal((b, kv_heads, past, head)).astype(np.float32),
        "past_v": rng.standard_normal((b, kv_heads, past, head)).astype(np.float32),
    }
    feeds["mask"][:, 0] = True
    return model, feeds


def test_transformer_block_matches_onnxruntime():
    needs_onnxruntime(23)
    model, feeds = transformer_block()
    got = graphrt.Session(model).run(None, feeds)
    want = ort_session(model).run(None, feeds)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


# -- RotaryEmbedding -----------------------------------------------------------------------------


def spec_rotary(x, cos, sin, pos=None, interleaved=0, rot=0, heads=None):
    """The spec's algorithm, step by step, in x's type (the products and sums rounded there)."""
    shape = x.shape
    x4 = x.transpose(0, 2, 1, 3) if x.ndim == 4 else x.reshape(*shape[:2], heads, -1)
    rot = rot or x4.shape[-1]
    if pos is not None:
        cos, sin = cos[pos], sin[pos]
    cos, sin = cos[:, :, None], sin[:, :, None]
    xr, rest = x4[..., :rot], x4[..., rot:]
    x1, x2 = (xr[..., 0::2], xr[..., 1::2]) if interleaved else np.split(xr, 2, axis=-1)
    real = (cos * x1) - (sin * x2)
    imag = (sin * x1) + (cos * x2)
    if interleaved:
        out = np.stack([real, imag], axis=-1).reshape(xr.shape)
    else:
        out = np.concatenate([real, imag], axis=-1)
    out = np.concatenate([out, rest], axis=-1)
    return out.transpose(0, 2, 1, 3) if x.ndim == 4 else out.reshape(shape)


ROTARY_CASES = [
    dict(three_d=False, interleaved=0, rot=0, pos=True),
    dict(three_d=False, interleaved=1, rot=0, pos=True),
    dict(three_d=True, interleaved=0, rot=4, pos=True),
    dict(three_d=True, interleaved=1, rot=6, pos=False),
    dict(three_d=False, interleaved=1, rot=4, pos=False),
    dict(three_d=False, interleaved=0, rot=0, pos=False),
]


def rotary_case(three_d, interleaved, rot, pos, dtype=np.float32, const=False):
    b, h, s, d = 2, 3, 5, 8
    half = (rot or d) // 2
    x = f32(b, s, h * d) if three_d else f32(b, h, s, d)
    if pos:
        cos, sin = f32(20, half), f32(20, half)
        positions = RNG.integers(0, 20, (b, s)).astype(np.int64)
    else:
        cos, sin, positions = f32(b, s, half), f32(b, s, half), None
    x, cos, sin = (a.astype(dtype) for a in (x, cos, sin))
    attrs = dict(interleaved=interleaved, rotary_embedding_dim=rot)
    if three_d:
        attrs["num_heads"] = h
    if const:
        feeds = {"x": x, "pos": positions}
        model = model_of("RotaryEmbedding", feeds, ["y"], 23, [("cos", cos), ("sin", sin)], **attrs)
        # the constants come after the feeds: reorder the node's inputs
        node = model.graph.node[0]
        names = ["x", "cos", "sin"] + (["pos"] if pos else [])
        del node.input[:]
        node.input.extend(names)
    else:
        feeds = {"x": x, "cos": cos, "sin": sin, "pos": positions}
        model = model_of("RotaryEmbedding", feeds, ["y"], 23, **attrs)
    want = spec_rotary(x, cos, sin, positions, interleaved, rot, h if three_d else None)
    return model, feeds, want


@pytest.mark.parametrize("case", ROTARY_CASES)
@pytest.mark.parametrize("const", [False, True])
def test_rotary_embedding_matches_the_spec(case, const):
    model, feeds, want = rotary_case(**case, const=const)
    got = run(model, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    # exact mode: the spec's operations in the spec's order, the same bits
    np.testing.assert_array_equal(run(model, feeds, mode="exact")[0], want)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_rotary_embedding_low_precision_is_computed_in_its_type(dtype):
    if dtype == "bfloat16" and BF16 is None:
        pytest.skip("ml_dtypes is not installed")
    dt = BF16 if dtype == "bfloat16" else np.dtype(dtype)
    model, feeds, want = rotary_case(False, 0, 0, True, dtype=dt)
    got = run(model, feeds)[0]
    assert got.dtype == dt
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))
    # exact mode: computed in float32 and rounded once (whatever half arithmetic a machine has)
    wide = [
        None if a is None else a.astype(np.float32) if a.dtype == dt else a for a in feeds.values()
    ]
    want = spec_rotary(*wide[:4]).astype(dt)
    got = run(model, feeds, mode="exact")[0]
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


def test_rotary_embedding_errors():
    model, feeds, _ = rotary_case(False, 0, 0, True)
    feeds["pos"] = feeds["pos"].copy()
    feeds["pos"][0, 0] = 20
    err = error_of(lambda: run(model, feeds))
    assert err.kind == "invalid_input" and err.node == "node" and "position_ids" in str(err)
    model, feeds, _ = rotary_case(True, 0, 0, True)
    model.graph.node[0].ClearField("attribute")
    assert error_of(lambda: run(model, feeds)).kind == "invalid_model"
    x, cos = f32(1, 2, 3, 8), f32(9, 3)
    odd = model_of(
        "RotaryEmbedding", {"x": x, "c": cos, "s": cos}, ["y"], 23, rotary_embedding_dim=6
    )
    assert error_of(lambda: run(odd, {"x": x, "c": cos, "s": cos})).kind == "invalid_input"


# -- RMSNormalization ----------------------------------------------------------------------------


def spec_rms(x, scale, axis=-1, eps=1e-5):
    x64 = x.astype(np.float64)
    axes = tuple(range(axis % x.ndim, x.ndim))
    return x64 / np.sqrt(np.mean(x64 * x64, axis=axes, keepdims=True) + eps) * scale


def canonical_rms(x, scale, axis, eps):
    """Exact mode's float32 formula: squares summed in ascending order, one rounding each."""
    rows = math.prod(x.shape[: axis % x.ndim])
    x2 = x.reshape(rows, -1).astype(np.float32)
    acc = x2[:, :1] * x2[:, :1]
    for i in range(1, x2.shape[1]):
        acc = acc + x2[:, i : i + 1] * x2[:, i : i + 1]
    rms = np.sqrt(acc / np.float32(x2.shape[1]) + np.float32(eps))
    return ((x2 / rms).reshape(x.shape) * scale).astype(np.float32)


@pytest.mark.parametrize(
    ("shape", "axis", "scale_shape"),
    [((4, 6), -1, (6,)), ((2, 3, 5), 1, (3, 5)), ((2, 3, 5), 1, (1, 5)), ((2, 3, 4), 0, (3, 4))],
)
def test_rms_normalization_matches_the_spec(shape, axis, scale_shape):
    x, scale = f32(*shape), f32(*scale_shape)
    feeds = {"x": x, "s": scale}
    model = model_of("RMSNormalization", feeds, ["y"], 23, axis=axis, epsilon=1e-3)
    np.testing.assert_allclose(run(model, feeds)[0], spec_rms(x, scale, axis, 1e-3), rtol=1e-5)
    exact = run(model, feeds, mode="exact")[0]
    np.testing.assert_array_equal(exact, canonical_rms(x, scale, axis, 1e-3))
    np.testing.assert_array_equal(exact, run(model, feeds, mode="exact", threads=2)[0])


def test_rms_normalization_types():
    x, scale = f32(3, 8).astype(np.float16), f32(8)
    model = model_of("RMSNormalization", {"x": x, "s": scale}, ["y"], 23,
                     out_types={"y": TensorProto.FLOAT})  # fmt: skip
    y = run(model, {"x": x, "s": scale})[0]
    assert y.dtype == np.float32  # Y has scale's type
    np.testing.assert_allclose(y, spec_rms(x, scale), rtol=1e-5)
    x64 = f32(3, 8).astype(np.float64)
    model = model_of("RMSNormalization", {"x": x64, "s": x64[0]}, ["y"], 23, stash_type=11)
    np.testing.assert_allclose(run(model, {"x": x64, "s": x64[0]})[0], spec_rms(x64, x64[0]))


def test_rms_normalization_errors():
    x = f32(2, 3)
    bad = model_of("RMSNormalization", {"x": x, "s": f32(3)}, ["y"], 23, stash_type=7)
    assert error_of(lambda: run(bad, {"x": x, "s": f32(3)})).kind == "invalid_model"
    bad = model_of("RMSNormalization", {"x": x, "s": f32(2)}, ["y"], 23)
    err = error_of(lambda: run(bad, {"x": x, "s": f32(2)}))
    assert err.kind == "invalid_input" and err.node == "node"
    bad = model_of("RMSNormalization", {"x": x, "s": f32(3)}, ["y"], 23, axis=2)
    assert error_of(lambda: run(bad, {"x": x, "s": f32(3)})).kind == "invalid_model"


# -- SwiGLU ------------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [1.0, 1.702])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_swiglu_matches_the_spec(alpha, dtype):
    a = (f32(4, 6) * 4).astype(dtype)
    b = f32(4, 6).astype(dtype)
    a[0, :3] = [-200, 200, 0]
    feeds = {"a": a, "b": b}
    model = model_of("SwiGLU", feeds, ["y"], 28, alpha=alpha)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = a64 / (1 + np.exp(-alpha * a64)) * b64
    tol = 2e-3 if dtype == np.float16 else 1e-6
    for mode in ("fast", "exact"):
        got = run(model, feeds, mode=mode)[0]
        assert got.dtype == dtype
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)
    one, two = run(model, feeds, "exact", 1)[0], run(model, feeds, "exact", 2)[0]
    np.testing.assert_array_equal(one, two)


def test_swiglu_refuses_broadcasting():
    feeds = {"a": f32(2, 3), "b": f32(1, 3)}
    err = error_of(lambda: run(model_of("SwiGLU", feeds, ["y"], 28), feeds))
    assert err.kind == "invalid_input" and err.node == "node"


# -- CausalConvWithState -------------------------------------------------------------------------


def spec_causal_conv(x, w, bias=None, past=None, activation="none"):
    """Float64: pad with the carried state (zeros without), valid depthwise convolution."""
    b, c, n = x.shape
    k = w.shape[2]
    pad = np.zeros((b, c, k - 1)) if past is None else past.astype(np.float64)
    seq = np.concatenate([pad, x.astype(np.float64)], axis=2)
    y = np.zeros((b, c, n))
    for t in range(k):
        y += seq[:, :, t : t + n] * w[None, :, 0, t : t + 1]
    if bias is not None:
        y += bias[None, :, None]
    if activation != "none":
        y = y / (1 + np.exp(-y))
    return y, seq[:, :, n:]


@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("with_past", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("activation", ["none", "silu"])
def test_causal_conv_with_state_matches_the_spec(k, with_past, with_bias, activation):
    x, w = f32(2, 3, 4), f32(3, 1, k)
    feeds = {"x": x, "w": w, "bias": f32(3) if with_bias else None}
    feeds["past"] = f32(2, 3, k - 1) if with_past else None
    model = model_of("CausalConvWithState", feeds, ["y", "state"], 27, activation=activation)
    y, state = run(model, feeds)
    want_y, want_state = spec_causal_conv(x, w, feeds["bias"], feeds["past"], activation)
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(state, want_state.astype(np.float32))
    ey, es = run(model, feeds, mode="exact")
    np.testing.assert_array_equal(es, state)
    np.testing.assert_allclose(ey, want_y, rtol=1e-5, atol=1e-6)
    if activation == "none":  # exact mode: taps in order, each product rounded, bias last
        pad = feeds["past"] if with_past else np.zeros((2, 3, k - 1), np.float32)
        seq = np.concatenate([pad, x], axis=2)
        acc = seq[:, :, :4] * w[:, 0, 0:1]
        for t in range(1, k):
            acc = acc + seq[:, :, t : t + 4] * w[:, 0, t : t + 1]
        if with_bias:
            acc = acc + feeds["bias"][:, None]
        np.testing.assert_array_equal(ey, acc)


def test_causal_conv_with_state_streams():
    """Feeding a sequence in chunks, carrying present_state into past_state, equals one call."""
    x, w, bias = f32(2, 4, 9), f32(4, 1, 4), f32(4)
    feeds = {"x": x, "w": w, "bias": bias, "past": None}
    whole = run(model_of("CausalConvWithState", feeds, ["y", "s"], 27, activation="swish"), feeds)
    state = np.zeros((2, 4, 3), np.float32)
    parts = []
    for lo, hi in ((0, 2), (2, 3), (3, 9)):
        feeds = {"x": x[:, :, lo:hi].copy(), "w": w, "bias": bias, "past": state}
        model = model_of("CausalConvWithState", feeds, ["y", "s"], 27, activation="swish")
        y, state = run(model, feeds)
        parts.append(y)
    np.testing.assert_allclose(np.concatenate(parts, axis=2), whole[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(state, whole[1])


def test_causal_conv_with_state_errors():
    feeds = {"x": f32(1, 2, 5), "w": f32(2, 1, 3)}
    bad = model_of("CausalConvWithState", feeds, ["y", "s"], 27, activation="relu")
    assert error_of(lambda: run(bad, feeds)).kind == "invalid_model"
    feeds["w"] = f32(3, 1, 3)
    err = error_of(lambda: run(model_of("CausalConvWithState", feeds, ["y", "s"], 27), feeds))
    assert err.kind == "invalid_input" and err.node == "node"


# -- LinearAttention -----------------------------------------------------------------------------


def spec_linear_attention(q, k, v, state, decay, beta, hq, hkv, rule, scale=0.0):
    """The recurrence of the spec, token by token, head by head, in float64."""
    b, t, _ = q.shape
    dk, dv = q.shape[2] // hq, v.shape[2] // hkv
    g = hq // hkv
    q4 = q.reshape(b, t, hq, dk).astype(np.float64)
    k4 = k.reshape(b, t, hkv, dk).astype(np.float64)
    v4 = v.reshape(b, t, hkv, dv).astype(np.float64)
    s = np.zeros((b, hkv, dk, dv)) if state is None else state.astype(np.float64).copy()
    scale = scale or 1 / math.sqrt(dk)
    out = np.zeros((b, t, hq, dv))
    for bi, ti, h in itertools.product(range(b), range(t), range(hkv)):
        kt, vt = k4[bi, ti, h], v4[bi, ti, h]
        if decay is not None:
            dcy = decay[bi, ti].reshape(hkv, -1)[h]  # per key dimension or one per head
            s[bi, h] = np.exp(dcy)[:, None] * s[bi, h]
        if beta is not None:
            bt = beta[bi, ti, h if beta.shape[2] > 1 else 0]
            vt = bt * (vt - s[bi, h].T @ kt)
        s[bi, h] = s[bi, h] + np.outer(kt, vt)
        for j in range(g):
            out[bi, ti, h * g + j] = scale * q4[bi, ti, h * g + j] @ s[bi, h]
    return out.reshape(b, t, hq * dv), s


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
@pytest.mark.parametrize(("hq", "hkv", "per_key"), [(4, 4, True), (4, 2, False), (4, 1, True)])
@pytest.mark.parametrize("with_past", [False, True])
def test_linear_attention_matches_the_spec(rule, hq, hkv, per_key, with_past):
    b, t, dk, dv = 2, 5, 4, 3
    key = f32(b, t, hkv, dk)
    key /= np.linalg.norm(key, axis=-1, keepdims=True)
    feeds = {"q": f32(b, t, hq * dk), "k": key.reshape(b, t, -1), "v": f32(b, t, hkv * dv)}
    feeds["past"] = f32(b, hkv, dk, dv) if with_past else None
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    feeds["decay"] = -np.abs(f32(b, t, hkv * dk if per_key else hkv)) if gated else None
    feeds["beta"] = RNG.random((b, t, hkv if per_key else 1)).astype(np.float32) if delta else None
    model = model_of("LinearAttention", feeds, ["o", "s"], 27, q_num_heads=hq, kv_num_heads=hkv,
                     update_rule=rule)  # fmt: skip
    out, state = run(model, feeds)
    want_out, want_state = spec_linear_attention(
        feeds["q"], feeds["k"], feeds["v"], feeds["past"], feeds["decay"], feeds["beta"], hq,
        hkv, rule,
    )  # fmt: skip
    np.testing.assert_allclose(out, want_out, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(state, want_state, rtol=1e-4, atol=1e-5)


def test_linear_attention_prefill_in_chunks_equals_one_call():
    b, t, h, d = 1, 6, 2, 4
    feeds = {"q": f32(b, t, h * d), "k": f32(b, t, h * d) / 3, "v": f32(b, t, h * d),
             "past": None, "decay": -np.abs(f32(b, t, h)),
             "beta": np.full((b, t, 1), 0.5, np.float32)}  # fmt: skip
    attrs = dict(q_num_heads=h, kv_num_heads=h, scale=0.7)
    whole = run(model_of("LinearAttention", feeds, ["o", "s"], 27, **attrs), feeds)
    state, parts = np.zeros((b, h, d, d), np.float32), []
    for lo, hi in ((0, 1), (1, 4), (4, 6)):
        part = {n: a[:, lo:hi].copy() for n, a in feeds.items() if a is not None and n != "past"}
        part = {"q": part["q"], "k": part["k"], "v": part["v"], "past": state,
                "decay": part["decay"], "beta": part["beta"]}  # fmt: skip
        o, state = run(model_of("LinearAttention", part, ["o", "s"], 27, **attrs), part)
        parts.append(o)
    np.testing.assert_allclose(np.concatenate(parts, axis=1), whole[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state, whole[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("attrs", "drop", "kind"),
    [
        ({"update_rule": "gated"}, "decay", "invalid_model"),
        ({"update_rule": "linear"}, None, "invalid_model"),  # decay and beta not taken
        ({"update_rule": "mamba"}, None, "invalid_model"),
        ({"q_num_heads": 3}, None, "invalid_model"),
    ],
)
def test_linear_attention_errors(attrs, drop, kind):
    b, t = 1, 2
    feeds = {"q": f32(b, t, 8), "k": f32(b, t, 8), "v": f32(b, t, 8), "past": None,
             "decay": f32(b, t, 2), "beta": f32(b, t, 2)}  # fmt: skip
    if drop:
        feeds[drop] = None
    full = dict(q_num_heads=2, kv_num_heads=2) | attrs
    err = error_of(lambda: run(model_of("LinearAttention", feeds, ["o", "s"], 27, **full), feeds))
    assert err.kind == kind and err.node == "node"


# -- FlexAttention -------------------------------------------------------------------------------


def mod_graph(name, body_nodes, inits=()):
    """A modifier graph: one rank-4 float input "s", one output "out"."""
    return helper.make_graph(
        body_nodes,
        name,
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, ["B", "H", "L", "S"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["B", "H", "L", "S"])],
        [numpy_helper.from_array(v, n) for n, v in inits],
    )


def flex_model(feeds, inits=(), **attrs):
    model = model_of("FlexAttention", feeds, ["Y"], 26, inits, domain=PREVIEW, **attrs)
    return model


def spec_flex(q, k, v, scale=None, score=None, prob=None):
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, 1), np.repeat(v, g, 1)
    s = q @ k.transpose(0, 1, 3, 2) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    s = score(s) if score else s
    e = np.exp(s - s.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    p = prob(p) if prob else p
    return p @ v


@pytest.mark.parametrize(("hq", "hkv"), [(4, 4), (4, 2)])
def test_flex_attention_plain_matches_the_spec(hq, hkv):
    feeds = {"Q": f32(2, hq, 3, 8), "K": f32(2, hkv, 5, 8), "V": f32(2, hkv, 5, 6)}
    y = run(flex_model(feeds, scale=0.2), feeds)[0]
    np.testing.assert_allclose(y, spec_flex(*feeds.values(), scale=0.2), rtol=1e-5, atol=1e-6)


def test_flex_attention_score_mod_reads_an_outer_value_and_prob_mod():
    """score_mod adds a bias initializer of the main graph (an outer-scope value); prob_mod
    scales the probabilities."""
    feeds = {"Q": f32(1, 2, 4, 8), "K": f32(1, 2, 4, 8), "V": f32(1, 2, 4, 8)}
    rel = f32(4, 4)
    score = mod_graph("score", [helper.make_node("Add", ["s", "rel"], ["out"])])
    prob = mod_graph(
        "prob", [helper.make_node("Mul", ["s", "half"], ["out"])],
        [("half", np.array(0.5, np.float32))],
    )  # fmt: skip
    model = flex_model(feeds, [("rel", rel)], score_mod=score, prob_mod=prob)
    # the outer value is an initializer: the node reads it by name only inside its body
    del model.graph.node[0].input[3:]
    y = run(model, feeds)[0]
    want = spec_flex(*feeds.values(), score=lambda s: s + rel, prob=lambda p: p * 0.5)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


def test_flex_attention_causal_score_mod_equals_causal_attention():
    feeds = {"Q": f32(2, 4, 5, 8), "K": f32(2, 2, 5, 8), "V": f32(2, 2, 5, 8)}
    neg = np.triu(np.full((5, 5), -np.inf, np.float32), 1)
    score = mod_graph("causal", [helper.make_node("Add", ["s", "tri"], ["out"])], [("tri", neg)])
    y = run(flex_model(feeds, score_mod=score), feeds)[0]
    want = run(model_of("Attention", feeds, ["Y"], 23, is_causal=1), feeds)[0]
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(
    not has_schema("FlexAttention", 1, PREVIEW), reason="onnx without FlexAttention"
)
def test_flex_attention_matches_onnx_reference():
    feeds = {"Q": f32(1, 2, 3, 4), "K": f32(1, 2, 3, 4), "V": f32(1, 2, 3, 4)}
    prob = mod_graph("p", [helper.make_node("Mul", ["s", "two"], ["out"])],
                     [("two", np.array(2.0, np.float32))])  # fmt: skip
    model = flex_model(feeds, prob_mod=prob)
    np.testing.assert_allclose(run(model, feeds)[0], reference(model, feeds)[0], rtol=1e-5)


def test_flex_attention_modifier_of_the_wrong_shape_fails():
    feeds = {"Q": f32(1, 2, 3, 4), "K": f32(1, 2, 3, 4), "V": f32(1, 2, 3, 4)}
    body = mod_graph("bad", [helper.make_node("ReduceSum", ["s", "ax"], ["out"], keepdims=1)],
                     [("ax", np.array([3], np.int64))])  # fmt: skip
    err = error_of(lambda: run(flex_model(feeds, score_mod=body), feeds))
    assert err.kind == "invalid_model" and err.node == "node"


# -- steady state --------------------------------------------------------------------------------


def steady_state_cases():
    x = f32(4, 6)
    x16 = x.astype(np.float16)
    attn = attention_feeds(True, 4, 2, 3, 6, 2, mask=RNG.random((3, 8)) > 0.3)
    nonpad = attention_feeds(False, 4, 2, 3, 6)
    nonpad.update(past_key=None, past_value=None, nonpad=np.array([6, 4], np.int64))
    conv = {"x": f32(2, 3, 5), "w": f32(3, 1, 3), "bias": f32(3), "past": f32(2, 3, 2)}
    lin = {"q": f32(2, 4, 16), "k": f32(2, 4, 8), "v": f32(2, 4, 8), "past": f32(2, 2, 4, 4),
           "decay": f32(2, 4, 2), "beta": f32(2, 4, 2)}  # fmt: skip
    rot_model, rot_feeds, _ = rotary_case(True, 0, 4, True)
    block, block_feeds = transformer_block()
    cases = [
        ("fast", model_of("Attention", attn, ["Y", "pk", "pv"], 23, is_causal=1, softcap=2.0,
                          q_num_heads=4, kv_num_heads=2), attn),
        ("fast", model_of("Attention", nonpad, ["Y", "", "", "qk"], 24, is_causal=1,
                          qk_matmul_output_mode=3), nonpad),
        ("fast", block, block_feeds),
        ("exact", rot_model, rot_feeds),
        ("exact", model_of("RMSNormalization", {"x": x, "s": x[0]}, ["y"], 23),
         {"x": x, "s": x[0]}),
        ("fast", model_of("SwiGLU", {"a": x16, "b": x16}, ["y"], 28), {"a": x16, "b": x16}),
        ("exact", model_of("SwiGLU", {"a": x, "b": x}, ["y"], 28, alpha=1.5), {"a": x, "b": x}),
        ("exact", model_of("CausalConvWithState", conv, ["y", "s"], 27, activation="silu"), conv),
        ("fast", model_of("LinearAttention", lin, ["o", "s"], 27, q_num_heads=4, kv_num_heads=2),
         lin),
    ]  # fmt: skip
    return cases


@pytest.mark.parametrize("index", range(9))
def test_steady_state_allocates_no_array_data(index):
    from tests._numpy_alloc import count_numpy_allocations

    mode, model, feeds = steady_state_cases()[index]
    session = graphrt.Session(model, mode=mode, intra_op_threads=1)
    feeds = {k: v for k, v in feeds.items() if v is not None}
    names = [o.name for o in session.get_outputs()]
    out = {n: np.empty_like(r) for n, r in zip(names, session.run(None, feeds))}
    for _ in range(2):
        session.run(None, feeds, out=out)
    assert session.cached_plans[0].static
    with count_numpy_allocations() as counter:
        for _ in range(3):
            session.run(None, feeds, out=out)
    assert counter.count == 0, f"{counter.count} numpy data allocations ({counter.bytes} bytes)"


def test_exact_mode_refuses_the_attention_products():
    """Attention, FlexAttention and LinearAttention use BLAS products and numpy's exp."""
    feeds = attention_feeds(False, 2, 2, 3, 4)
    err = error_of(lambda: run(model_of("Attention", feeds, ["Y"], 23), feeds, mode="exact"))
    assert err.kind == "exact_mode_unavailable" and "Attention (opset 23)" in err.operators
