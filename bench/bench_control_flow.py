"""Control flow against onnxruntime: what one Loop iteration, one Scan step and one If cost.

    python bench/bench_control_flow.py [--threads 1] [--rounds 15] [--models loop,scan]

Models, built here with onnx.helper:

- loop_10000: bench_models' Loop over a 3-node body (Identity, Add, Mul) with a scan output;
- loop_if_scan: a Loop whose body branches on the iteration's parity through an If (add a step
  on even iterations, halve on odd ones) and emits a scan output;
- scan_rnn: a 1-node Scan RNN, hidden 32, 200 steps, body h' = Tanh(x_t W + h R + b);
- if_tiny: an If alone (Relu or Neg of a [16] tensor).

graphrt and onnxruntime run in alternation, round after round, in one process (noise falls on
both alike); the figures are medians per iteration (per step, per run for if_tiny) and their
ratio.  onnxruntime's spinning workers are off (see bench_interleaved.py).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import TensorProto, helper

import graphrt

sys.path.insert(0, os.path.dirname(__file__))
from bench_check_shapes import alternate
from bench_models import (
    LOOP_ITERATIONS,
    _model,
    _vi,
    _w,
    loop_10000,
    make_feed,
    ort_session,
)

LOOP_IF_ITERATIONS = 2000
RNN_STEPS, RNN_HIDDEN = 200, 32


def _scalar(name: str, elem: int) -> Any:
    return helper.make_tensor_value_info(name, elem, [])


def loop_if_scan(iterations: int = LOOP_IF_ITERATIONS, width: int = 16) -> Any:
    """acc <- acc + step on even iterations, acc * 0.5 on odd ones (an If in the body); the scan
    output is acc * acc.  The branches read ``acc_in`` from the body and weights from the top."""
    then_g = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "step"], ["t"])], "then", [], [_vi("t", [width])]
    )
    else_g = helper.make_graph(
        [helper.make_node("Mul", ["acc_in", "half"], ["e"])], "else", [], [_vi("e", [width])]
    )
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Mod", ["i", "two"], ["parity"]),
            helper.make_node("Equal", ["parity", "zero"], ["even"]),
            helper.make_node("If", ["even"], ["acc_out"], then_branch=then_g, else_branch=else_g),
            helper.make_node("Mul", ["acc_out", "acc_out"], ["sq"]),
        ],
        "body",
        [
            _scalar("i", TensorProto.INT64),
            _scalar("cond_in", TensorProto.BOOL),
            _vi("acc_in", [width]),
        ],
        [_scalar("cond_out", TensorProto.BOOL), _vi("acc_out", [width]), _vi("sq", [width])],
    )
    inits = {
        "M": np.array(iterations, np.int64),
        "two": np.array(2, np.int64),
        "zero": np.array(0, np.int64),
        "step": np.full(width, 0.001, np.float32),
        "half": np.full(width, 0.5, np.float32),
    }
    nodes = [helper.make_node("Loop", ["M", "", "x"], ["y", "squares"], body=body)]
    outputs = [_vi("y", [width]), _vi("squares", [None, width])]
    return _model(nodes, [_vi("x", [width])], outputs, inits)


def scan_rnn(steps: int = RNN_STEPS, hidden: int = RNN_HIDDEN) -> Any:
    """A vanilla RNN as one Scan: h' = Tanh(x_t W + h R + b), every h' a scan output."""
    rng = np.random.default_rng(5)
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["x_t", "W"], ["xw"]),
            helper.make_node("MatMul", ["h_in", "R"], ["hr"]),
            helper.make_node("Add", ["xw", "hr"], ["s"]),
            helper.make_node("Add", ["s", "b"], ["pre"]),
            helper.make_node("Tanh", ["pre"], ["h_out"]),
            helper.make_node("Identity", ["h_out"], ["y_t"]),
        ],
        "rnn_body",
        [_vi("h_in", [1, hidden]), _vi("x_t", [1, hidden])],
        [_vi("h_out", [1, hidden]), _vi("y_t", [1, hidden])],
    )
    inits = {"W": _w(rng, hidden, hidden), "R": _w(rng, hidden, hidden), "b": _w(rng, hidden)}
    node = helper.make_node("Scan", ["h0", "x"], ["h", "ys"], body=body, num_scan_inputs=1)
    inputs = [_vi("h0", [1, hidden]), _vi("x", [steps, 1, hidden])]
    return _model([node], inputs, [_vi("h", [1, hidden]), _vi("ys", [steps, 1, hidden])], inits)


def if_tiny(width: int = 16) -> Any:
    then_g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["t"])], "then", [], [_vi("t", [width])]
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"])], "else", [], [_vi("e", [width])]
    )
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    inputs = [_scalar("c", TensorProto.BOOL), _vi("x", [width])]
    return _model([node], inputs, [_vi("y", [width])], {})


#: name -> (builder, iterations one run makes, what an iteration is)
MODELS: dict[str, tuple[Callable[[], Any], int, str]] = {
    "loop_10000": (loop_10000, LOOP_ITERATIONS, "iteration"),
    "loop_if_scan": (loop_if_scan, LOOP_IF_ITERATIONS, "iteration"),
    "scan_rnn": (scan_rnn, RNN_STEPS, "step"),
    "if_tiny": (if_tiny, 1, "run"),
}

#: Rounds per model are scaled so each takes a similar wall time.
ROUND_SCALE = {"if_tiny": 50, "scan_rnn": 4, "loop_if_scan": 2}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--models", help="comma-separated substrings of model names")
    args = parser.parse_args(argv)

    print("| model | threads | per | gr µs | ort µs | gr/ort | max abs diff |")
    print("|---|---|---|---|---|---|---|")
    for name, (build, iterations, per) in MODELS.items():
        if args.models and not any(k in name for k in args.models.split(",")):
            continue
        model = build()
        data = model.SerializeToString()
        feed = {k: np.asarray(v) for k, v in make_feed(model).items()}
        theirs = ort_session(data, args.threads)
        ours = graphrt.Session(data, intra_op_threads=args.threads)
        diff = max(
            float(np.max(np.abs(a.astype(np.float64) - b), initial=0.0))
            for a, b in zip(ours.run(None, feed), theirs.run(None, feed))
        )
        t_gr, t_ort = alternate(
            [functools.partial(s.run, None, feed) for s in (ours, theirs)],
            args.rounds * ROUND_SCALE.get(name, 1),
        )
        us_gr, us_ort = t_gr / iterations * 1e6, t_ort / iterations * 1e6
        print(
            f"| {name} | {args.threads} | {per} | {us_gr:.2f} | {us_ort:.2f} | "
            f"{t_gr / t_ort:.2f} | {diff:.2e} |",
            flush=True,
        )
        ours.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
