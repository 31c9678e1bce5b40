"""The training family: losses, the ai.onnx.preview.training optimizers, random generators.

Each case is the operator's largest backend case with about 100x the elements.  onnxruntime's
CPU build has no Adagrad/Adam/Momentum (training builds only): ops_breadth.py reports them as
refused.  The generators' outputs are random, so their "agree" column compares nothing useful
(different generators); the timing is what matters there.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from . import BenchCase

TRAINING = "ai.onnx.preview.training"
#: onnxruntime 1.32 has no opset-22 kernels of the generators (bfloat16 forms): opset 21.
GEN_OPSET = 21


def _model(node, inputs, outputs, opset, domains=()):
    graph = helper.make_graph([node], "bench", inputs, outputs)
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(graph, opset_imports=imports)


def _info(name, array):
    return helper.make_tensor_value_info(
        name, helper.np_dtype_to_tensor_dtype(array.dtype), list(array.shape)
    )


def _out(name, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, None)


def _losses(rng) -> list[BenchCase]:
    # test_sce_NCd1d2d3d4d5_mean_weight: (3, 5, 6, 6, 5, 3, 4) -> N = 300
    shape = (300, 5, 6, 6, 5, 3, 4)
    x = rng.standard_normal(shape).astype(np.float32)
    t = rng.integers(0, 5, (shape[0], *shape[2:])).astype(np.int64)
    t.reshape(-1)[::7] = 2
    w = (rng.random(5) + 0.5).astype(np.float32)
    feed = {"x": x, "t": t, "w": w}
    decls = [_info(k, v) for k, v in feed.items()]
    cases = []
    for op, outs in [
        ("SoftmaxCrossEntropyLoss", ["y", "lp"]),
        ("NegativeLogLikelihoodLoss", ["y"]),
    ]:
        node = helper.make_node(op, ["x", "t", "w"], outs, ignore_index=2)
        cases.append(
            BenchCase(
                f"{op}: mean, weights, ignore_index, {'x'.join(map(str, shape))}",
                _model(node, decls, [_out(o) for o in outs], 13),
                feed,
            )
        )
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["y"], reduction="none")
    cases.append(
        BenchCase(
            "SoftmaxCrossEntropyLoss: none, no weights, no log_prob",
            _model(node, decls[:2], [_out("y")], 13),
            {"x": x, "t": t},
        )
    )
    return cases


def _optimizers(rng) -> list[BenchCase]:
    # test_adam / test_momentum / test_adagrad: tensors of 2 elements -> 200
    n = 200
    r, t = np.array(0.1, np.float32), np.array(3, np.int64)
    arrays = [rng.standard_normal(n).astype(np.float32) for _ in range(4)]
    arrays[-1] = np.abs(arrays[-1])
    cases = []
    for op, count, outs, attrs in [
        ("Adagrad", 3, 2, dict(decay_factor=0.1, norm_coefficient=0.001)),
        ("Adam", 4, 3, dict(alpha=0.95, beta=0.1, norm_coefficient=0.001)),
        ("Momentum", 3, 2, dict(alpha=0.95, beta=0.1, norm_coefficient=0.001, mode="nesterov")),
    ]:
        feed = {"R": r, "T": t, **{f"s{k}": arrays[k] for k in range(count)}}
        names = [f"o{k}" for k in range(outs)]
        node = helper.make_node(op, list(feed), names, domain=TRAINING, **attrs)
        model = _model(
            node, [_info(k, v) for k, v in feed.items()], [_out(o) for o in names], 17, [TRAINING]
        )
        cases.append(BenchCase(f"{op}: one tensor of {n}", model, feed))
    return cases


def _generators(rng) -> list[BenchCase]:
    # test_bernoulli(_expanded): 10 probabilities -> 1000; the others have no backend case:
    # the same 1000 elements, and a larger tensor for the draw itself.
    p = rng.random(1000).astype(np.float32)
    big = np.zeros((100, 1000), np.float32)
    logits = rng.standard_normal((32, 100)).astype(np.float32)
    table = [  # name, op, feed, output type, attributes
        ("Bernoulli: 1000 float32 probabilities", "Bernoulli", {"p": p}, None, dict(seed=1.0)),
        ("RandomUniformLike: 1000 float32", "RandomUniformLike", {"p": p}, None, dict(seed=1.0)),
        ("RandomNormalLike: 100x1000 float32", "RandomNormalLike", {"x": big}, None,
         dict(mean=1.0, scale=2.0)),
        ("RandomNormal: 100x1000 float32", "RandomNormal", {}, None, dict(shape=[100, 1000])),
        ("RandomUniform: 100x1000 float32", "RandomUniform", {}, None,
         dict(shape=[100, 1000], low=-1.0)),
        ("Multinomial: 32x100 classes, 1000 samples", "Multinomial", {"x": logits},
         TensorProto.INT32, dict(sample_size=1000, seed=2.0)),
    ]  # fmt: skip
    cases = []
    for name, op, feed, elem, attrs in table:
        node = helper.make_node(op, list(feed), ["y"], **attrs)
        decls = [_info(k, v) for k, v in feed.items()]
        model = _model(node, decls, [_out("y", elem or TensorProto.FLOAT)], GEN_OPSET)
        cases.append(BenchCase(name, model, feed))
    return cases


def cases() -> list[BenchCase]:
    rng = np.random.default_rng(0)
    return _losses(rng) + _optimizers(rng) + _generators(rng)
