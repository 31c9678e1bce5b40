"""Transformer models as PyTorch's exporters write them, built with onnx.helper (random weights,
nothing downloaded): a BERT/MiniLM-shaped encoder, for the fusion tests
(test_fusion_transformers.py) and the benchmark (bench/bench_transformers.py).

The encoder follows what ``torch.onnx.export`` writes for a Hugging Face BertModel before
opset 17: the embeddings as three Gathers (word, token type, and the positions sliced from a
constant ``position_ids`` by the run-time sequence length), every LayerNorm as primitives
(ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add), the additive mask
``(1 - mask[:, None, None, :]) * finfo(float32).min`` from an ``attention_mask`` input,
head splits as Reshapes to a shape assembled from Shape/Gather/Concat, and GELU through Erf.
Attention is written in one of the forms exporters emit:

* ``"div"``: BERT's eager attention, ``MatMul(q, Transpose(k, [0, 2, 3, 1])) / sqrt(d)``
  (the exporter merges the head split's and the key's transposes into one);
* ``"sdpa"``: ``scaled_dot_product_attention``'s export, Q and the transposed K each
  multiplied by ``sqrt(1 / sqrt(d))`` before the product.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F32_MIN = float(np.finfo(np.float32).min)


class _Builder:
    """Nodes and initializers with unique names, for the model functions below."""

    def __init__(self, opset: int, rng: np.random.Generator) -> None:
        self.opset = opset
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._count = 0

    def name(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def const(self, hint: str, value: Any) -> str:
        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, hint: str, *shape: int, scale: float = 0.08) -> str:
        return self.const(hint, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def op(self, op_type: str, *inputs: str, out: str | None = None, **attrs: Any) -> str:
        output = out or self.name(op_type.lower())
        self.nodes.append(
            helper.make_node(op_type, list(inputs), [output], name=self.name(op_type), **attrs)
        )
        return output

    def unsqueeze(self, x: str, axes: list[int]) -> str:
        if self.opset >= 13:
            return self.op("Unsqueeze", x, self.const("axes", np.array(axes, np.int64)))
        return self.op("Unsqueeze", x, axes=axes)

    def reduce_mean(self, x: str) -> str:
        if self.opset >= 18:
            return self.op("ReduceMean", x, self.const("axes", np.array([-1], np.int64)))
        return self.op("ReduceMean", x, axes=[-1])

    def dim(self, x: str, index: int) -> str:
        """The 1-D size of ``x``'s dimension ``index``: Shape -> Gather -> Unsqueeze."""
        shape = self.op("Shape", x)
        d = self.op("Gather", shape, self.const("index", np.array(index, np.int64)), axis=0)
        return self.unsqueeze(d, [0])

    def layer_norm(self, x: str, hidden: int, out: str | None = None) -> str:
        mean = self.reduce_mean(x)
        d = self.op("Sub", x, mean)
        sq = self.op("Pow", d, self.const("two", np.array(2.0, np.float32)))
        var = self.reduce_mean(sq)
        eps = self.op("Add", var, self.const("eps", np.array(1e-12, np.float32)))
        y = self.op("Div", d, self.op("Sqrt", eps))
        gamma = (1 + self.rng.standard_normal(hidden) * 0.1).astype(np.float32)
        y = self.op("Mul", y, self.const("gamma", gamma))
        return self.op("Add", y, self.weight("beta", hidden, scale=0.05), out=out)

    def linear(self, x: str, n_in: int, n_out: int) -> str:
        y = self.op("MatMul", x, self.weight("w", n_in, n_out))
        return self.op("Add", self.weight("b", n_out, scale=0.02), y)

    def gelu(self, x: str) -> str:
        root = self.op("Div", x, self.const("sqrt2", np.array(math.sqrt(2.0), np.float32)))
        erf = self.op("Erf", root)
        plus = self.op("Add", erf, self.const("one", np.array(1.0, np.float32)))
        y = self.op("Mul", x, plus)
        return self.op("Mul", y, self.const("half", np.array(0.5, np.float32)))


def _attention(
    b: _Builder, x: str, mask: str, hidden: int, heads: int, style: str
) -> tuple[str, str]:
    """Self-attention of ``x`` [B, S, hidden] with the additive ``mask`` [B, 1, 1, S]; returns
    the context [B, S, hidden] and the node name of the scores' MatMul."""
    dh = hidden // heads
    batch, seq = b.dim(x, 0), b.dim(x, 1)
    split = b.op("Concat", batch, seq, b.const("heads", np.array([heads, dh], np.int64)), axis=0)
    q, k, v = (b.op("Reshape", b.linear(x, hidden, hidden), split) for _ in range(3))
    q = b.op("Transpose", q, perm=[0, 2, 1, 3])
    v = b.op("Transpose", v, perm=[0, 2, 1, 3])
    if style == "div":
        kt = b.op("Transpose", k, perm=[0, 2, 3, 1])
        scores = b.op("MatMul", q, kt)
        anchor = b.nodes[-1].name
        scores = b.op("Div", scores, b.const("sqrt_d", np.array(math.sqrt(dh), np.float32)))
    elif style == "sdpa":
        k = b.op("Transpose", k, perm=[0, 2, 1, 3])
        kt = b.op("Transpose", k, perm=[0, 1, 3, 2])
        root = b.const("root_scale", np.array(math.sqrt(1 / math.sqrt(dh)), np.float32))
        q = b.op("Mul", q, root)
        kt = b.op("Mul", kt, root)
        scores = b.op("MatMul", q, kt)
        anchor = b.nodes[-1].name
    else:
        raise ValueError(f"unknown attention style {style!r}")
    scores = b.op("Add", scores, mask)
    probs = b.op("Softmax", scores, axis=-1 if b.opset >= 13 else 3)
    context = b.op("Transpose", b.op("MatMul", probs, v), perm=[0, 2, 1, 3])
    merge = b.op("Concat", batch, seq, b.const("hidden", np.array([hidden], np.int64)), axis=0)
    return b.op("Reshape", context, merge), anchor


def minilm_encoder(
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    intermediate: int | None = None,
    vocab: int = 100,
    max_positions: int = 128,
    opset: int = 14,
    attention: str = "div",
    seed: int = 0,
) -> onnx.ModelProto:
    """A BERT/MiniLM-shaped encoder (see the module docstring): inputs ``input_ids``,
    ``attention_mask``, ``token_type_ids`` (int64, [batch, sequence]); output
    ``last_hidden_state`` (float32, [batch, sequence, hidden])."""
    b = _Builder(opset, np.random.default_rng(seed))
    inter = intermediate or 4 * hidden
    # embeddings: word + token type + positions sliced by the run-time sequence length
    seq = b.dim("input_ids", 1)
    positions = b.const("position_ids", np.arange(max_positions, dtype=np.int64)[None])
    zero, one = b.const("zero", np.array([0], np.int64)), b.const("one", np.array([1], np.int64))
    position_ids = b.op("Slice", positions, zero, seq, one)
    emb = b.op("Gather", b.weight("word_embeddings", vocab, hidden, scale=0.5), "input_ids")
    tok = b.op("Gather", b.weight("token_type_embeddings", 2, hidden, scale=0.5), "token_type_ids")
    pos = b.op("Gather", b.weight("position_embeddings", max_positions, hidden), position_ids)
    h = b.layer_norm(b.op("Add", b.op("Add", emb, tok), pos), hidden)
    # the additive mask: (1 - mask[:, None, None, :]) * finfo(float32).min
    m = b.op("Cast", b.unsqueeze("attention_mask", [1, 2]), to=TensorProto.FLOAT)
    m = b.op("Sub", b.const("one_f", np.array(1.0, np.float32)), m)
    mask = b.op("Mul", m, b.const("min", np.array(F32_MIN, np.float32)))
    for k in range(layers):
        context, _ = _attention(b, h, mask, hidden, heads, attention)
        a = b.op("Add", b.linear(context, hidden, hidden), h)
        h1 = b.layer_norm(a, hidden)
        f = b.linear(b.gelu(b.linear(h1, hidden, inter)), inter, hidden)
        out = "last_hidden_state" if k == layers - 1 else None
        h = b.layer_norm(b.op("Add", f, h1), hidden, out=out)
    ids = ["batch", "sequence"]
    graph = helper.make_graph(
        b.nodes,
        "minilm",
        [helper.make_tensor_value_info(n, TensorProto.INT64, ids) for n in
         ("input_ids", "attention_mask", "token_type_ids")],
        [helper.make_tensor_value_info(
            "last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", hidden])],
        b.inits,
    )  # fmt: skip
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=min(onnx.IR_VERSION, 10)
    )


def encoder_feed(
    batch: int, seq: int, vocab: int = 100, seed: int = 0, padded: bool = True
) -> dict[str, np.ndarray]:
    """Inputs of :func:`minilm_encoder`: random tokens, a second segment, and (``padded``)
    rows of different lengths masked at their ends."""
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), np.int64)
    if padded:
        for i in range(1, batch):
            mask[i, seq - (i * seq) // (batch + 1) :] = 0
    types = np.zeros((batch, seq), np.int64)
    types[:, seq // 2 :] = 1
    return {
        "input_ids": rng.integers(0, vocab, (batch, seq), dtype=np.int64),
        "attention_mask": mask,
        "token_type_ids": types,
    }


def rnn_export(
    op: str,
    hidden: int,
    input_size: int,
    layers: int = 1,
    bidirectional: bool = False,
    seed: int = 0,
    opset: int = 14,
) -> onnx.ModelProto:
    """``torch.nn.LSTM`` / ``GRU`` (``batch_first=True``) as ``torch.onnx.export`` writes it:
    the batch-first input transposed to layout 0, one LSTM/GRU node per layer (GRU with
    ``linear_before_reset=1``, PyTorch's formula), each layer's Y [seq, dirs, batch, hidden]
    transposed and reshaped into the next layer's input, the last one transposed back.  Input
    ``x`` [batch, sequence, input_size]; output ``y`` [batch, sequence, dirs * hidden]."""
    if op not in ("LSTM", "GRU"):
        raise ValueError(f"op must be LSTM or GRU, got {op!r}")
    b = _Builder(opset, np.random.default_rng(seed))
    gates, dirs = (4 if op == "LSTM" else 3), (2 if bidirectional else 1)
    bound = 1 / math.sqrt(hidden)

    def uniform(*shape: int) -> str:
        return b.const("rnn_w", b.rng.uniform(-bound, bound, shape).astype(np.float32))

    x = b.op("Transpose", "x", perm=[1, 0, 2])
    width = input_size
    for _ in range(layers):
        attrs: dict[str, Any] = {"hidden_size": hidden}
        if bidirectional:
            attrs["direction"] = "bidirectional"
        if op == "GRU":
            attrs["linear_before_reset"] = 1
        w = uniform(dirs, gates * hidden, width)
        r = uniform(dirs, gates * hidden, hidden)
        bias = uniform(dirs, 2 * gates * hidden)
        y = b.name("y")
        outputs = [y, b.name("y_h")] + ([b.name("y_c")] if op == "LSTM" else [])
        b.nodes.append(helper.make_node(op, [x, w, r, bias], outputs, name=b.name(op), **attrs))
        y = b.op("Transpose", y, perm=[0, 2, 1, 3])  # [seq, batch, dirs, hidden]
        x = b.op("Reshape", y, b.const("shape", np.array([0, 0, -1], np.int64)))
        width = dirs * hidden
    b.op("Transpose", x, perm=[1, 0, 2], out="y")
    graph = helper.make_graph(
        b.nodes,
        op.lower(),
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence", input_size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "sequence", width])],
        b.inits,
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=min(onnx.IR_VERSION, 10)
    )
