"""The attention family: Attention, FlexAttention, LinearAttention, CausalConvWithState,
RotaryEmbedding, RMSNormalization and SwiGLU.

Each case is the operator's largest backend case scaled up about 100x in elements; Attention
gets the shapes the issue names as well ([batch, heads, seq 128, head 32..64]: self-attention,
causal GQA with a bool mask, a decode step against a cache).  onnxruntime's CPU build has no
FlexAttention (the ai.onnx.preview domain): ops_breadth.py reports it as refused.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from . import BenchCase

PREVIEW = "ai.onnx.preview"


def _case(name, op, feed, outs, opset, domain="", **attrs) -> BenchCase:
    """A one-node model; ``feed`` in input order ("" keys: absent optional inputs)."""
    names = [k if v is not None else "" for k, v in feed.items()]
    node = helper.make_node(op, names, outs, domain=domain, **attrs)
    inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for n, v in feed.items()
        if v is not None
    ]
    first = helper.np_dtype_to_tensor_dtype(next(iter(feed.values())).dtype)
    outputs = [helper.make_tensor_value_info(o, first, None) for o in outs if o]
    graph = helper.make_graph([node], "bench", inputs, outputs)
    imports = [helper.make_opsetid("", opset)]
    if domain:
        imports.append(helper.make_opsetid(domain, 1))
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 10
    return BenchCase(name, model, {k: v for k, v in feed.items() if v is not None})


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _attention(rng) -> list[BenchCase]:
    cases = []
    # the shape: [batch 2, heads 8, seq 128, head 64]
    q, k, v = (_f32(rng, 2, 8, 128, 64) for _ in range(3))
    cases.append(
        _case("Attention: 4-D 2x8x128x64", "Attention", {"Q": q, "K": k, "V": v}, ["Y"], 23)
    )
    # test_attention_3d_gqa_causal (2x4x72, 9/3 heads) -> 3-D GQA, seq 128, head 32, bool mask
    q = _f32(rng, 2, 128, 8 * 32)
    k, v = _f32(rng, 2, 128, 2 * 32), _f32(rng, 2, 128, 2 * 32)
    mask = rng.random((128, 128)) > 0.1
    cases.append(
        _case(
            "Attention: 3-D GQA 8/2 heads, seq 128, head 32, causal, bool mask",
            "Attention",
            {"Q": q, "K": k, "V": v, "attn_mask": mask},
            ["Y"],
            23,
            q_num_heads=8,
            kv_num_heads=2,
            is_causal=1,
        )
    )
    # test_attention_4d_gqa_with_past_and_present (past 12, kv 6, 9/3 heads) -> x100
    feed = {
        "Q": _f32(rng, 2, 9, 40, 32),
        "K": _f32(rng, 2, 3, 40, 32),
        "V": _f32(rng, 2, 3, 40, 32),
        "attn_mask": _f32(rng, 40, 160),
        "past_key": _f32(rng, 2, 3, 120, 32),
        "past_value": _f32(rng, 2, 3, 120, 32),
    }
    cases.append(
        _case(
            "Attention: GQA 9/3 heads with past 120 + 40, float mask, softcap",
            "Attention",
            feed,
            ["Y", "present_key", "present_value"],
            23,
            softcap=2.0,
        )
    )
    return cases


def _flex(rng) -> list[BenchCase]:
    # test_flexattention (2x4x8x16, kv 6) -> 100x
    feed = {
        "Q": _f32(rng, 2, 8, 80, 64),
        "K": _f32(rng, 2, 8, 60, 64),
        "V": _f32(rng, 2, 8, 60, 64),
    }
    return [_case("FlexAttention: 2x8x80x64, kv 60", "FlexAttention", feed, ["Y"], 26, PREVIEW)]


def _linear(rng) -> list[BenchCase]:
    # test_linear_attention_gated_delta (2x4x32, 4 heads of 8) -> B 4, T 50, 16 heads of 8
    b, t, h, d = 4, 50, 16, 8
    key = _f32(rng, b, t, h * d)
    key /= np.linalg.norm(key.reshape(b, t, h, d), axis=-1).reshape(b, t, h).repeat(d, -1)
    feed = {
        "query": _f32(rng, b, t, h * d),
        "key": key,
        "value": _f32(rng, b, t, h * d),
        "past_state": _f32(rng, b, h, d, d),
        "decay": -np.abs(_f32(rng, b, t, h * d)) * 0.1,
        "beta": rng.random((b, t, h)).astype(np.float32),
    }
    return [
        _case(
            "LinearAttention: gated_delta, 4x50, 16 heads of 8, with past",
            "LinearAttention",
            feed,
            ["output", "present_state"],
            27,
            q_num_heads=h,
            kv_num_heads=h,
        )
    ]


def _conv(rng) -> list[BenchCase]:
    # test_causal_conv_with_state_with_bias_and_past_state (2x4x8, k 4) -> 4x40x40, silu
    feed = {
        "input": _f32(rng, 4, 40, 40),
        "weight": _f32(rng, 40, 1, 4),
        "bias": _f32(rng, 40),
        "past_state": _f32(rng, 4, 40, 3),
    }
    return [
        _case(
            "CausalConvWithState: 4x40x40, k 4, bias, past, silu",
            "CausalConvWithState",
            feed,
            ["output", "present_state"],
            27,
            activation="silu",
        )
    ]


def _small(rng) -> list[BenchCase]:
    cases = []
    # test_rotary_embedding (2x4x3x8, cache 50x4) -> 2x8x75x16, cache 200x8
    x = _f32(rng, 2, 8, 75, 16)
    pos = rng.integers(0, 200, (2, 75)).astype(np.int64)
    cos, sin = _f32(rng, 200, 8), _f32(rng, 200, 8)
    for inter in (0, 1):
        cases.append(
            _case(
                f"RotaryEmbedding: 2x8x75x16, position_ids, interleaved={inter}",
                "RotaryEmbedding",
                {"input": x, "cos_cache": cos, "sin_cache": sin, "position_ids": pos},
                ["output"],
                23,
                interleaved=inter,
            )
        )
    # test_rms_normalization_4d_axis_negative_1 (2x3x4x5) -> 2x3x40x50
    cases.append(
        _case(
            "RMSNormalization: 2x3x40x50, axis -1",
            "RMSNormalization",
            {"X": _f32(rng, 2, 3, 40, 50), "scale": _f32(rng, 50)},
            ["Y"],
            23,
        )
    )
    # test_swiglu (2x4) -> 20x40
    cases.append(
        _case(
            "SwiGLU: 20x40, alpha 1.702",
            "SwiGLU",
            {"A": _f32(rng, 20, 40), "B": _f32(rng, 20, 40)},
            ["Y"],
            28,
            alpha=1.702,
        )
    )
    return cases


def cases() -> list[BenchCase]:
    rng = np.random.default_rng(0)
    out = _attention(rng) + _flex(rng) + _linear(rng) + _conv(rng) + _small(rng)
    for case in out:  # the first input's type is each output's: fine for every case here
        for o in case.model.graph.output:
            o.type.tensor_type.elem_type = TensorProto.FLOAT
    return out
