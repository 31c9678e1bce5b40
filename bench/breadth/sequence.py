"""Sequence family, part 1: RNN, GRU, LSTM.

The backend cases are tiny (test_lstm_batchwise: X 3x1x2, hidden 7...); the sizes here are those
of real exports instead, which the issue asks for: hidden 128 and 256, 50 time steps, batch 1
and 8, input size = hidden, constant random weights with biases, all outputs, opset 14.  Plus a
bidirectional LSTM with sequence_lens and the simple RNN
(onnxruntime refuses LSTM's and GRU's layout 1: tests/ops/test_rnn.py covers batch-first).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from . import BenchCase

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _case(
    op: str,
    hidden: int,
    batch: int,
    seq: int = 50,
    dirs: int = 1,
    layout: int = 0,
    lens: bool = False,
    **attrs,
) -> BenchCase:
    rng = np.random.default_rng(hidden + batch)
    g, inp = GATES[op], hidden
    f32 = np.float32
    w = (rng.standard_normal((dirs, g * hidden, inp)) / np.sqrt(inp)).astype(f32)
    r = (rng.standard_normal((dirs, g * hidden, hidden)) / np.sqrt(hidden)).astype(f32)
    b = (rng.standard_normal((dirs, 2 * g * hidden)) * 0.1).astype(f32)
    x_shape = (batch, seq, inp) if layout else (seq, batch, inp)
    feed = {"X": rng.standard_normal(x_shape).astype(f32)}
    inits = [numpy_helper.from_array(a, n) for n, a in (("W", w), ("R", r), ("B", b))]
    inputs = ["X", "W", "R", "B"]
    decls = [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(x_shape))]
    if lens:
        feed["L"] = rng.integers(seq // 2, seq + 1, batch).astype(np.int32)
        inputs.append("L")
        decls.append(helper.make_tensor_value_info("L", TensorProto.INT32, [batch]))
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    if dirs == 2:
        attrs["direction"] = "bidirectional"
    if layout:
        attrs["layout"] = 1
    node = helper.make_node(op, inputs, outs, hidden_size=hidden, **attrs)
    graph = helper.make_graph(
        [node],
        op,
        decls,
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=10)
    extra = ", bidirectional" if dirs == 2 else ""
    extra += ", layout 1" if layout else ""
    extra += ", sequence_lens" if lens else ""
    extra += "".join(f", {k}={v}" for k, v in attrs.items() if k not in ("direction", "layout"))
    name = f"{op}: hidden {hidden}, seq {seq}, batch {batch}{extra}"
    return BenchCase(name, model, feed)


def cases() -> list[BenchCase]:
    out = [_case(op, h, b) for op in ("LSTM", "GRU") for h in (128, 256) for b in (1, 8)]
    out.append(_case("GRU", 128, 8, linear_before_reset=1))
    out.append(_case("LSTM", 128, 8, dirs=2, lens=True))  # onnxruntime refuses LSTM's layout 1
    out.append(_case("RNN", 256, 8))
    return out
