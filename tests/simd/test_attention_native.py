"""The fast-mode native kernels of src/native/attention.cpp: attention in one call, Gelu on a
rational erf, LayerNormalization over rows.  Values against float64 references on every ISA,
the same bits on any thread count, sessions against ops-basic's kernels (and onnxruntime),
the cases left to ops-basic, and refusals of bad arguments."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper

import graphrt
from tests._models import init, make_model, tensor
from tests._transformers import encoder_feed, minilm_encoder
from tests.simd._simd import ALL_PATHS, ISAS, bits, path_or_skip, simd

F32 = np.float32
native = simd._native
RNG = np.random.default_rng(20)


def attention_reference(q, k, v, mask, scale):
    """float64 softmax(scale * Q K^T + mask) V; query head h reads K/V head h // g; a row whose
    mask is -inf for every key gives zeros."""
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = q @ k.transpose(0, 1, 3, 2) * scale
    if mask is not None:
        s = s + mask
    top = np.maximum(s.max(-1, keepdims=True), np.finfo(np.float32).min)
    e = np.exp(s - top)
    y = (e / np.maximum(e.sum(-1, keepdims=True), np.finfo(np.float32).tiny)) @ v
    if mask is not None:
        full = np.broadcast_to(
            np.all(np.isneginf(mask), axis=-1, keepdims=True), y.shape[:-1] + (1,)
        )
        y = np.where(full, 0.0, y)
    return y


SHAPES = [  # b, hq, hkv, q_len, kv_len, d, dv
    (1, 12, 12, 128, 128, 32, 32),
    (2, 4, 2, 7, 13, 5, 9),
    (1, 3, 1, 33, 40, 64, 17),
    (3, 2, 2, 1, 1, 1, 1),
    (1, 1, 1, 70, 300, 0, 3),
]
MASKS = ["none", "keys", "full", "rows", "one_key"]


def _mask(kind, b, hq, q_len, kv_len):
    shape = {
        "none": None,
        "keys": (b, 1, 1, kv_len),
        "full": (b, hq, q_len, kv_len),
        "rows": (1, 1, q_len, kv_len),
        "one_key": (b, 1, q_len, 1),
    }[kind]
    return None if shape is None else (RNG.standard_normal(shape) * 3).astype(F32)


@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("isa", ALL_PATHS)
def test_attention_values_and_threads(isa, shape, mask_kind):
    path_or_skip(isa)
    b, hq, hkv, q_len, kv_len, d, dv = shape
    q = RNG.standard_normal((b, hq, q_len, d)).astype(F32)
    k = RNG.standard_normal((b, hkv, kv_len, d)).astype(F32)
    v = RNG.standard_normal((b, hkv, kv_len, dv)).astype(F32)
    mask = _mask(mask_kind, b, hq, q_len, kv_len)
    scale = 1 / math.sqrt(max(d, 1))
    want = attention_reference(q, k, v, mask, scale)
    first = None
    for threads in (1, 2, 3):
        y = np.full((b, hq, q_len, dv), np.nan, F32)
        native.attention(q, k, v, mask, y, scale, isa, threads)
        np.testing.assert_allclose(y, want, rtol=2e-5, atol=2e-6)
        if first is None:
            first = y
        np.testing.assert_array_equal(bits(y), bits(first))  # any thread count, same bits


@pytest.mark.parametrize("isa", ALL_PATHS)
def test_attention_reads_and_writes_through_strides(isa):
    """3-D (batch, seq, heads * size) tensors as transposed views, a reversed key axis, a
    broadcast mask with stride 0: no copy, the values of contiguous operands."""
    path_or_skip(isa)
    b, s, h, d = 2, 19, 3, 8
    q3, k3, v3 = (RNG.standard_normal((b, s, h * d)).astype(F32) for _ in range(3))
    view = lambda x: x.reshape(b, s, h, d).transpose(0, 2, 1, 3)
    k_rev = view(k3)[:, :, ::-1]
    v_rev = view(v3)[:, :, ::-1]
    mask = np.broadcast_to(RNG.standard_normal((1, 1, 1, s)).astype(F32), (b, h, s, s))
    y3 = np.empty((b, s, h * d), F32)
    native.attention(view(q3), k_rev, v_rev, mask, view(y3), 0.3, isa, 2)
    want = attention_reference(view(q3), k_rev, v_rev, mask, 0.3)
    np.testing.assert_allclose(view(y3), want, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("isa", ALL_PATHS)
def test_attention_masked_rows_and_special_values(isa):
    path_or_skip(isa)
    b, h, n, d = 1, 2, 9, 4
    q, k, v = (RNG.standard_normal((b, h, n, d)).astype(F32) for _ in range(3))
    mask = np.zeros((b, h, n, n), F32)
    mask[0, 0, 3] = -np.inf  # fully masked: zeros
    mask[0, 1, 4, :-1] = -np.inf  # one key left: that key's value
    mask[0, 1, 5] = np.finfo(F32).min  # finite minimum everywhere: an ordinary softmax
    y = np.empty_like(q)
    native.attention(q, k, v, mask, y, 0.5, isa, 1)
    assert np.all(y[0, 0, 3] == 0)
    np.testing.assert_allclose(y[0, 1, 4], v[0, 1, -1], rtol=1e-6)
    np.testing.assert_allclose(y, attention_reference(q, k, v, mask, 0.5), rtol=2e-5, atol=2e-6)
    q[0, 0, 2, 1] = np.nan  # a NaN score makes its row NaN, and only its row
    native.attention(q, k, v, mask, y, 0.5, isa, 1)
    assert np.isnan(y[0, 0, 2]).all() and not np.isnan(y[0, 0, [0, 1, 4]]).any()
    assert np.all(y[0, 0, 3] == 0)  # decided on the mask, whatever the scores


def _bad_attention_calls():
    q = np.zeros((1, 2, 4, 3), F32)
    kv = np.zeros((1, 1, 5, 3), F32)
    y = np.zeros((1, 2, 4, 3), F32)
    huge = np.lib.stride_tricks.as_strided(np.zeros(1, F32), (1, 1, 1 << 20, 128), (0,) * 4)
    return [
        ((q.astype(np.float64), kv, kv, None, y), TypeError, "float32"),
        ((q[0], kv, kv, None, y), ValueError, "dimension"),
        ((q, kv[:, :, :, :2], kv, None, y), ValueError, "head size"),
        ((q, kv, kv[:, :, :4], None, y), ValueError, "length"),
        ((q, kv, kv, None, np.zeros((1, 2, 4, 4), F32)), ValueError, "shape"),
        ((np.zeros((1, 3, 4, 3), F32), kv.repeat(2, 1), kv.repeat(2, 1), None,
          np.zeros((1, 3, 4, 3), F32)), ValueError, "multiple"),
        ((q, kv, kv, None, y[:, :, :3]), ValueError, "shape"),
        ((q, kv, kv, np.zeros((1, 2, 2, 5), F32), y), ValueError, "broadcast"),
        ((q, kv, kv, np.zeros((2, 5), F32), y), ValueError, "dimension"),
        ((y, kv, kv, None, y), ValueError, "overlap"),
        ((q, kv, kv, None, np.broadcast_to(np.zeros(3, F32), y.shape)), TypeError, "incompatible"),
        ((q, kv, kv, None, np.lib.stride_tricks.as_strided(y, y.shape, (0, 0, 12, 4))),
         ValueError, "share memory"),
        ((q, kv, kv, None, np.lib.stride_tricks.as_strided(y, y.shape, (0, 48, 8, 4))),
         ValueError, "share memory"),
        ((q, huge, huge, None, np.zeros((1, 2, 4, 128), F32)), ValueError, "head size"),
        ((np.zeros((1, 1, 1, 128), F32), huge, huge, None, np.zeros((1, 1, 1, 128), F32)),
         ValueError, "unsupported"),
    ]  # fmt: skip


@pytest.mark.parametrize("case", range(len(_bad_attention_calls())))
def test_attention_refuses_bad_arguments(case):
    args, error, words = _bad_attention_calls()[case]
    with pytest.raises(error, match=words):
        native.attention(*args, 0.5, ISAS[-1], 2)


def test_attention_refuses_an_unknown_isa():
    q = np.zeros((1, 1, 2, 2), F32)
    with pytest.raises(ValueError, match="isa"):
        native.attention(q, q, q, None, np.zeros_like(q), 1.0, "neon")


# ---- Gelu and erf -----------------------------------------------------------------------------


def _erf64(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(x.astype(np.float64))


@pytest.mark.parametrize("isa", ALL_PATHS)
def test_fast_erf_and_gelu_values(isa):
    """erf within 5e-7 of erf everywhere (relative); gelu within that of the float64 formula
    (its 1 + erf cancels for large negative x: an absolute error of 3e-7 |x| there)."""
    path_or_skip(isa)
    x = np.concatenate([np.linspace(-12, 12, 240001), np.geomspace(1e-38, 1, 3000)]).astype(F32)
    x = np.concatenate([x, -x])
    erf = np.empty_like(x)
    native.unary_fast("erf", x, erf, isa)
    want = _erf64(x)
    np.testing.assert_allclose(erf, want, rtol=5e-7, atol=0)
    gelu = np.empty_like(x)
    native.unary_fast("gelu", x, gelu, isa, 0, -1, 3)
    want = 0.5 * x.astype(np.float64) * (1 + _erf64(x / np.float64(math.sqrt(2))))
    pos = x >= 0
    np.testing.assert_allclose(gelu[pos], want[pos], rtol=5e-7, atol=1e-37)
    err = np.abs(gelu[~pos] - want[~pos])
    bound = 1e-6 * np.abs(want[~pos]) + 3e-7 * np.abs(x[~pos])
    assert np.all(err <= bound), float((err / bound).max())
    assert np.all(gelu[~pos] <= 0) and np.all(gelu[pos] >= 0)  # never the wrong sign
    special = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-30], F32)
    out = np.empty_like(special)
    native.unary_fast("erf", special, out, isa)
    assert list(out[:2]) == [1, -1] and bits(out[2:3])[0] == 0x7FC00000
    assert bits(out[3:5]).tolist() == [0, 0x80000000]
    native.unary_fast("gelu", special, out, isa)
    assert out[0] == np.inf and np.isnan(out[1]) and bits(out[2:3])[0] == 0x7FC00000


@pytest.mark.parametrize("isa", ALL_PATHS)
def test_fast_unary_in_place_ranges_and_threads(isa):
    path_or_skip(isa)
    x = RNG.standard_normal(200_003).astype(F32) * 4
    want = np.empty_like(x)
    native.unary_fast("gelu", x, want, isa)
    for threads in (2, 3, 7):
        y = x.copy()
        native.unary_fast("gelu", y, y, isa, 5, 199_000, threads)  # in place, a sub-range
        np.testing.assert_array_equal(bits(y[5:199_000]), bits(want[5:199_000]))
        np.testing.assert_array_equal(y[:5], x[:5])
        np.testing.assert_array_equal(y[199_000:], x[199_000:])


def test_fast_unary_refuses_bad_arguments():
    x = np.zeros(10, F32)
    for args, error in [
        (("tanh", x, x, ISAS[-1]), ValueError),
        (("gelu", x.astype(np.float64), x, ISAS[-1]), TypeError),
        (("gelu", x, np.zeros(9, F32), ISAS[-1]), ValueError),
        (("gelu", x[:8], x[2:], ISAS[-1]), ValueError),
        (("gelu", x, x, ISAS[-1], 3, 11), ValueError),
        (("gelu", x, x, ISAS[-1], 4, 3), ValueError),
        (("gelu", np.zeros((4, 4), F32)[:, ::2], np.zeros(8, F32), ISAS[-1]), ValueError),
        (("gelu", x, x, "neon"), ValueError),
    ]:
        with pytest.raises(error):
            native.unary_fast(*args)


# ---- LayerNormalization -----------------------------------------------------------------------


def layer_norm_reference(x, scale, bias, eps):
    x = x.astype(np.float64)
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps) * scale
    return y if bias is None else y + bias


@pytest.mark.parametrize("n", [1, 7, 8, 384, 1001])
@pytest.mark.parametrize("isa", ALL_PATHS)
def test_layer_norm_values_and_threads(isa, n):
    path_or_skip(isa)
    x = (RNG.standard_normal((129, n)) * 3 + 5).astype(F32)
    scale, bias = RNG.standard_normal(n).astype(F32), RNG.standard_normal(n).astype(F32)
    for s, b in [(scale, bias), (scale, None), (scale[:1], bias[:1])]:
        want = layer_norm_reference(x, s, b, 1e-5)
        first = None
        for threads in (1, 2, 3):
            y = np.empty_like(x)
            native.layer_norm(x, y, s, b, 1e-5, isa, threads)
            np.testing.assert_allclose(y, want, rtol=2e-5, atol=2e-5)
            first = y if first is None else first
            np.testing.assert_array_equal(bits(y), bits(first))
    y = x.copy()
    native.layer_norm(y, y, scale, bias, 1e-5, isa, 1)  # in place
    np.testing.assert_allclose(y, layer_norm_reference(x, scale, bias, 1e-5), rtol=2e-5, atol=2e-5)


def test_layer_norm_refuses_bad_arguments():
    x, s = np.zeros((4, 6), F32), np.ones(6, F32)
    for args, error in [
        ((x.astype(np.float64), x, s, None), TypeError),
        ((x, np.zeros((4, 5), F32), s, None), ValueError),
        ((x, x, np.ones(5, F32), None), ValueError),
        ((x, x, s, np.ones(2, F32)), ValueError),
        ((x, x, np.ones((6, 1), F32), None), ValueError),
        ((x[:, ::2], np.zeros((4, 3), F32), s[:3], None), ValueError),
        ((x, x[:3], s, None), ValueError),
        ((x, x.reshape(6, 4)[:4], s, None), ValueError),
        ((x, s.reshape(1, 6), s, None), ValueError),
    ]:
        with pytest.raises(error):
            native.layer_norm(*args, 1e-5, ISAS[-1], 2)


# ---- sessions ---------------------------------------------------------------------------------


def _counting(monkeypatch, name):
    import graphrt_ops_simd.attention as attention_mod
    import graphrt_ops_simd.layernorm as layernorm_mod

    calls = []
    module = attention_mod if name == "attention" else layernorm_mod
    real = getattr(module._native, name)
    monkeypatch.setattr(module._native, name, lambda *a: calls.append(a) or real(*a))
    return calls


@pytest.mark.parametrize("threads", [1, 2])
def test_encoder_on_native_attention_and_layer_norm_matches_onnxruntime(threads, monkeypatch):
    ort = pytest.importorskip("onnxruntime")
    if ISAS[-1] == "scalar":
        pytest.skip("no SIMD path on this machine: the fused kernels run only there in practice")
    att, norm = _counting(monkeypatch, "attention"), _counting(monkeypatch, "layer_norm")
    model = minilm_encoder(layers=2, hidden=64, heads=4, vocab=50, max_positions=32)
    feed = encoder_feed(3, 17, 50)
    sess = graphrt.Session(model, intra_op_threads=threads)
    got = sess.run(None, feed)[0]
    assert len(att) == 2 and len(norm) == 5  # two attentions, five LayerNorms, one call each
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, want.run(None, feed)[0], rtol=1e-4, atol=1e-4)
    numpy_path = graphrt.Session(model, kernel_path="numpy").run(None, feed)[0]
    np.testing.assert_allclose(got, numpy_path, rtol=1e-4, atol=1e-4)


def _attention_model(opset=23, three_d=False, mask=None, **attrs):
    b, h, n, d = 2, 3, 6, 4
    shape = [b, n, h * d] if three_d else [b, h, n, d]
    inputs = [tensor(x, shape=shape) for x in "qkv"]
    names = ["q", "k", "v"]
    if mask is not None:
        inputs.append(tensor("m", mask[0], mask[1]))
        names.append("m")
    if three_d:
        attrs.update(q_num_heads=h, kv_num_heads=h)
    outputs = attrs.pop("outputs", ["y"])
    node = helper.make_node("Attention", names, outputs, **attrs)
    model = make_model([node], inputs, [tensor(o) for o in outputs if o], opset=opset)
    feed = {x: RNG.standard_normal(shape).astype(F32) for x in "qkv"}
    if mask is not None:
        m = (
            RNG.standard_normal(mask[1]) > -1
            if mask[0] == TensorProto.BOOL
            else RNG.standard_normal(mask[1])
        )
        feed["m"] = m.astype(np.bool_ if mask[0] == TensorProto.BOOL else F32)
    return model, feed


@pytest.mark.parametrize(
    "kwargs, native_call",
    [
        (dict(), True),
        (dict(three_d=True), True),
        (dict(mask=(TensorProto.FLOAT, [6, 6])), True),
        (dict(mask=(TensorProto.FLOAT, [2, 1, 6, 6]), scale=0.7), True),
        (dict(mask=(TensorProto.FLOAT, [6, 4])), False),  # a short mask: padded with -inf
        (dict(mask=(TensorProto.BOOL, [6, 6])), False),
        (dict(is_causal=1), False),
        (dict(softcap=2.0), False),
        (dict(outputs=["y", "pk", "pv"]), False),
        (dict(outputs=["y", "", "", "qk"], qk_matmul_output_mode=1), False),
    ],
)
def test_ai_onnx_attention_sessions(kwargs, native_call, monkeypatch):
    """The plain case runs the native kernel (values of ops-basic's kernel), everything else
    ops-basic's kernel itself (its bits)."""
    if ISAS[-1] == "scalar":
        pytest.skip("no SIMD path on this machine")
    calls = _counting(monkeypatch, "attention")
    model, feed = _attention_model(**kwargs)
    got = graphrt.Session(model, kernel_path=ISAS[-1]).run(None, feed)
    want = graphrt.Session(model, kernel_path="numpy").run(None, feed)
    assert len(calls) == (1 if native_call else 0)
    for g, w in zip(got, want):
        if native_call:
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(bits(g), bits(w))


def test_exact_mode_keeps_layer_norm_on_ops_basic(monkeypatch):
    if ISAS[-1] == "scalar":
        pytest.skip("no SIMD path on this machine")
    calls = _counting(monkeypatch, "layer_norm")
    nodes = [helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], epsilon=1e-3)]
    inits = [init("s", RNG.standard_normal(10).astype(F32)), init("b", np.ones(10, F32))]
    model = make_model(nodes, [tensor("x", shape=[3, 10])], [tensor("y")], inits)
    x = RNG.standard_normal((3, 10)).astype(F32)
    want = graphrt.Session(model, kernel_path="numpy", mode="exact").run(None, {"x": x})[0]
    got = graphrt.Session(model, mode="exact").run(None, {"x": x})[0]
    np.testing.assert_array_equal(bits(got), bits(want))
    assert not calls
    fast = graphrt.Session(model).run(None, {"x": x})[0]
    assert len(calls) == 1
    np.testing.assert_allclose(fast, want, rtol=1e-5, atol=1e-6)
