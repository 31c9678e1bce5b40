"""The training family of graphrt-ops-basic: NegativeLogLikelihoodLoss and
SoftmaxCrossEntropyLoss against formulas written from the spec text (every reduction,
ignore_index, weights, k-dimensional samples, every opset form), the optimizers of
ai.onnx.preview.training against the spec's pseudo code, and the random generators: seeded
streams reproducible per session, never folded into constants, loose statistics, types and
shapes, and concurrent runs; a loss head compared with onnxruntime.  Errors by kind, exact-mode
bits and steady states are in test_training_contract.py."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import graphrt
from tests._models import init, make_model, onnxruntime_limits, ort_session, tensor
from tests.ops._training import (
    F64,
    I64,
    OPSET,
    f32,
    generator,
    loss_case,
    one_node,
    optimizer_run,
    run,
    spec_log_softmax,
    spec_nll,
)

# -- losses: the spec's formulas ---------------------------------------------------------------


LOSS_SHAPES = [(4, 5), (3, 4, 6), (2, 3, 2, 3)]


@pytest.mark.parametrize("shape", LOSS_SHAPES)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [None, 1, -1])
def test_losses_match_the_spec(shape, reduction, weighted, ignore):
    x, target, weight = loss_case(shape, ignore=ignore)
    attrs = {"reduction": reduction}
    if ignore is not None:
        attrs["ignore_index"] = ignore
    inputs = [("x", x), ("t", target)] + ([("w", weight)] if weighted else [])
    w = weight if weighted else None
    got = run(one_node("NegativeLogLikelihoodLoss", inputs, ["y"], **attrs), inputs)[0]
    np.testing.assert_allclose(got, spec_nll(x, target, w, reduction, ignore), rtol=1e-5)
    assert got.dtype == np.float32
    model = one_node("SoftmaxCrossEntropyLoss", inputs, ["y", "lp"], opset=13, **attrs)
    loss, log_prob = run(model, inputs)
    want_lp = spec_log_softmax(x)
    np.testing.assert_allclose(log_prob, want_lp, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(loss, spec_nll(want_lp, target, w, reduction, ignore), rtol=1e-5)
    assert loss.shape == (target.shape if reduction == "none" else ())


@pytest.mark.parametrize(
    ("op", "opset"),
    [("NegativeLogLikelihoodLoss", o) for o in sorted({12, 13, OPSET})]
    + [("SoftmaxCrossEntropyLoss", o) for o in (12, 13)],
)
def test_losses_match_the_reference_evaluator_at_every_opset(op, opset):
    x, target, weight = loss_case((3, 5, 4), np.float64, ignore=2)
    inputs = [("x", x), ("t", target.astype(np.int32)), ("w", weight)]
    model = one_node(op, inputs, ["y"], opset=opset, ignore_index=2, reduction="mean")
    want = ReferenceEvaluator(model).run(None, dict(inputs))[0]
    got = run(model, inputs)[0]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert got.dtype == np.float64


def test_loss_without_the_log_prob_output_and_half_precision():
    x, target, weight = loss_case((3, 5, 2), np.float16)
    inputs = [("x", x), ("t", target), ("w", weight)]
    got = run(one_node("SoftmaxCrossEntropyLoss", inputs, ["y"], opset=13), inputs)[0]
    want = spec_nll(spec_log_softmax(x.astype(np.float32)), target, weight.astype(np.float32))
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-3)
    got = run(one_node("NegativeLogLikelihoodLoss", inputs, ["y"], reduction="sum"), inputs)[0]
    np.testing.assert_allclose(got.astype(np.float32), spec_nll(x, target, weight, "sum"), 2e-3)


def test_every_target_ignored():
    x = np.full((2, 3), -np.inf, np.float32)  # 0 * -inf would be NaN: ignored means +0
    target = np.full((2,), 7, np.int64)
    inputs = [("x", x), ("t", target)]
    for reduction, want in [("none", [0.0, 0.0]), ("sum", 0.0), ("mean", np.nan)]:
        model = one_node(
            "NegativeLogLikelihoodLoss", inputs, ["y"], reduction=reduction, ignore_index=7
        )
        got = run(model, inputs)[0]
        np.testing.assert_array_equal(got, np.array(want, np.float32))
        assert np.isnan(got).all() or not np.signbit(got).any()


def test_loss_head_matches_onnxruntime():
    """Gemm logits -> SoftmaxCrossEntropyLoss (weights, ignore_index, log_prob) and a
    NegativeLogLikelihoodLoss of the log_prob with another reduction, random weights."""
    pytest.importorskip("onnxruntime")
    if onnxruntime_limits()[1] < 13:
        pytest.skip(f"the installed onnxruntime loads ai.onnx up to {onnxruntime_limits()[1]}")
    rng = np.random.default_rng(7)
    nodes = [
        helper.make_node("Gemm", ["x", "w", "b"], ["logits"], transB=1),
        helper.make_node(
            "SoftmaxCrossEntropyLoss", ["logits", "t", "cw"], ["loss", "lp"], ignore_index=2
        ),
        helper.make_node("NegativeLogLikelihoodLoss", ["lp", "t"], ["nll"], reduction="sum"),
    ]
    inits = [
        init("w", rng.standard_normal((6, 8)).astype(np.float32)),
        init("b", rng.standard_normal(6).astype(np.float32)),
        init("cw", (rng.random(6) + 0.5).astype(np.float32)),
    ]
    model = make_model(
        nodes,
        [tensor("x", shape=[16, 8]), tensor("t", I64, shape=[16])],
        [tensor("loss"), tensor("lp"), tensor("nll")],
        inits,
        opset=13,
    )
    feed = {
        "x": rng.standard_normal((16, 8)).astype(np.float32),
        "t": rng.integers(0, 6, 16).astype(np.int64),
    }
    feed["t"][::4] = 2
    ours = graphrt.Session(model).run(None, feed)
    theirs = ort_session(model).run(None, feed)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


# -- optimizers: the spec's pseudo code ------------------------------------------------------------


def spec_adagrad(r, t, x, g, h, norm=0.0, decay=0.0, eps=1e-6):
    r = r / (1 + t * decay)
    g = norm * x + g
    h_new = h + g * g
    return x - r * g / (np.sqrt(h_new) + eps), h_new


def spec_adam(r, t, x, g, v, h, norm=0.0, post=0.0, alpha=0.9, beta=0.999, eps=1e-6):
    g = norm * x + g
    v_new = alpha * v + (1 - alpha) * g
    h_new = beta * h + (1 - beta) * g * g
    r = r * math.sqrt(1 - beta**t) / (1 - alpha**t) if t > 0 else r
    return (1 - post) * (x - r * v_new / (np.sqrt(h_new) + eps)), v_new, h_new


def spec_momentum(r, t, x, g, v, norm, alpha, beta, mode):
    g = norm * x + g
    v_new = alpha * v + (beta if t > 0 else 1) * g
    if mode == "nesterov":
        return x - r * (g + alpha * v_new), v_new
    return x - r * v_new, v_new


@pytest.mark.parametrize("t", [0, 3])
def test_adagrad_two_tensors(t):
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(3), rng.standard_normal((2, 2))]
    gs = [rng.standard_normal(3), rng.standard_normal((2, 2))]
    hs = [rng.random(3), rng.random((2, 2))]
    attrs = dict(norm_coefficient=0.01, decay_factor=0.1, epsilon=1e-3)
    got, model, feed = optimizer_run("Adagrad", [xs, gs, hs], 0.2, t, **attrs)
    spec = {k: f32(v) for k, v in attrs.items()}
    for k in range(2):
        x_new, h_new = spec_adagrad(
            0.2,
            t,
            xs[k],
            gs[k],
            hs[k],
            spec["norm_coefficient"],
            spec["decay_factor"],
            spec["epsilon"],
        )
        np.testing.assert_allclose(got[k], x_new, rtol=1e-12)
        np.testing.assert_allclose(got[2 + k], h_new, rtol=1e-12)
    want = ReferenceEvaluator(model).run(None, feed)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12)


@pytest.mark.parametrize("t", [0, 1, 5])
def test_adam(t):
    rng = np.random.default_rng(2)
    x, g, v, h = rng.standard_normal((4, 5)), rng.standard_normal(5), rng.random(5), rng.random(5)
    attrs = dict(
        alpha=0.8, beta=0.95, epsilon=1e-4, norm_coefficient=0.02, norm_coefficient_post=0.1
    )
    got, _, _ = optimizer_run("Adam", [[x[0], x[1:]], [g, g], [v, v], [h, h]], 0.05, t, **attrs)
    spec = dict(norm=f32(0.02), post=f32(0.1), alpha=f32(0.8), beta=f32(0.95), eps=f32(1e-4))
    for k, xk in enumerate([x[0], x[1:]]):
        for j, want in enumerate(spec_adam(0.05, t, xk, g, v, h, **spec)):
            np.testing.assert_allclose(got[k + 2 * j], want, rtol=1e-12)
    assert got[1].shape == (3, 5)


@pytest.mark.parametrize("mode", ["standard", "nesterov"])
@pytest.mark.parametrize("t", [0, 2])
def test_momentum(mode, t):
    rng = np.random.default_rng(3)
    x, g, v = (rng.standard_normal(6).astype(np.float32) for _ in range(3))
    attrs = dict(alpha=0.9, beta=0.5, norm_coefficient=0.01, mode=mode)
    got, model, feed = optimizer_run("Momentum", [[x], [g], [v]], 0.1, t, np.float32, **attrs)
    want = spec_momentum(0.1, t, x.astype(np.float64), g, v, f32(0.01), f32(0.9), f32(0.5), mode)
    for a, b in zip(got, want):
        assert a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=1e-5)
    for a, b in zip(got, ReferenceEvaluator(model).run(None, feed)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


# -- random generators -----------------------------------------------------------------------------


P = np.linspace(0.05, 0.95, 12).astype(np.float32)
LOGITS = np.log(np.array([[0.1, 0.2, 0.7], [0.5, 0.5, 0.0]], np.float32) + 1e-30)
GENERATORS = {
    "normal": ("RandomNormal", (), dict(shape=[3, 4])),
    "uniform": ("RandomUniform", (), dict(shape=[5])),
    "normal-like": ("RandomNormalLike", (("x", P),), {}),
    "uniform-like": ("RandomUniformLike", (("x", P),), dict(dtype=F64)),
    "multinomial": ("Multinomial", (("x", LOGITS),), dict(sample_size=7)),
    "bernoulli": ("Bernoulli", (("x", P),), {}),
}


@pytest.mark.parametrize("case", GENERATORS)
def test_a_seed_gives_the_same_stream_in_every_session(case):
    op, inputs, attrs = GENERATORS[case]
    model = generator(op, inputs, seed=3.0, **attrs)
    streams = []
    for _ in range(2):
        session = graphrt.Session(model)
        streams.append([session.run(None, dict(inputs))[0] for _ in range(3)])
    for a, b in zip(*streams):
        assert a.tobytes() == b.tobytes()
    if op != "Bernoulli":  # each run draws anew (nothing was folded into a constant)
        assert streams[0][0].tobytes() != streams[0][1].tobytes()
    other = graphrt.Session(generator(op, inputs, seed=4.0, **attrs)).run(None, dict(inputs))[0]
    unseeded = [
        graphrt.Session(generator(op, inputs, **attrs)).run(None, dict(inputs))[0] for _ in range(2)
    ]
    if op not in ("Bernoulli", "Multinomial"):  # few discrete outcomes may repeat by chance
        assert other.tobytes() != streams[0][0].tobytes()
        assert unseeded[0].tobytes() != unseeded[1].tobytes()


def test_random_nodes_are_not_folded():
    """A RandomNormal has no input: the planner must still draw in every run."""
    nodes = [
        helper.make_node("RandomNormal", [], ["r"], shape=[4]),
        helper.make_node("Add", ["r", "x"], ["y"]),
    ]
    model = make_model(nodes, [tensor("x", shape=[4])], [tensor("y")], opset=OPSET)
    session = graphrt.Session(model)
    x = np.zeros(4, np.float32)
    assert session.run(None, {"x": x})[0].tobytes() != session.run(None, {"x": x})[0].tobytes()


def test_statistics_types_and_shapes():
    n = 100_000
    y = run(generator("RandomNormal", shape=[n], mean=2.0, scale=3.0, dtype=F64), {})[0]
    assert y.dtype == np.float64 and y.shape == (n,)
    assert abs(y.mean() - 2) < 0.05 and abs(y.std() - 3) < 0.05
    y = run(generator("RandomUniform", shape=[100, 1000], low=-1.0, high=3.0), {})[0]
    assert y.dtype == np.float32 and y.shape == (100, 1000)
    assert y.min() >= -1 and y.max() <= 3 and abs(y.mean() - 1) < 0.02
    assert abs(y.var() - 16 / 12) < 0.03
    x = np.zeros((10, n // 10), np.float16)
    y = run(generator("RandomNormalLike", [("x", x)]), {"x": x})[0]
    assert (
        y.dtype == np.float16
        and y.shape == x.shape
        and abs(float(y.astype(np.float32).std()) - 1) < 0.02
    )
    y = run(generator("RandomUniformLike", [("x", x)], dtype=16), {"x": x})[0]
    assert y.dtype.name == "bfloat16" and abs(y.astype(np.float32).mean() - 0.5) < 0.01
    p = np.repeat(P, n // len(P))
    y = run(generator("Bernoulli", [("x", p)], dtype=TensorProto.INT32), {"x": p})[0]
    assert y.dtype == np.int32 and set(np.unique(y)) <= {0, 1}
    freq = y.reshape(len(P), -1).mean(axis=1)
    np.testing.assert_allclose(freq, P, atol=0.02)
    y = run(generator("Bernoulli", [("x", p)], dtype=TensorProto.BOOL), {"x": p})[0]
    assert y.dtype == np.bool_ and abs(y.mean() - P.mean()) < 0.01
    assert run(generator("Bernoulli", [("x", P)]), {"x": P})[0].dtype == np.float32
    edges = np.array([0.0, 1.0, 0.0, 1.0], np.float64)
    assert run(generator("Bernoulli", [("x", edges)]), {"x": edges})[0].tolist() == [0, 1, 0, 1]
    y = run(
        generator("Multinomial", [("x", LOGITS)], sample_size=n // 2, dtype=I64), {"x": LOGITS}
    )[0]
    assert y.dtype == np.int64 and y.shape == (2, n // 2)
    for row, probs in zip(y, np.exp(LOGITS)):
        np.testing.assert_allclose(np.bincount(row, minlength=3) / len(row), probs, atol=0.01)
    assert run(generator("Multinomial", [("x", LOGITS)]), {"x": LOGITS})[0].dtype == np.int32


def test_concurrent_runs_share_one_stream():
    """Runs on many threads take distinct draws of the one seeded stream: together they are the
    first draws of a new session, in some order."""
    model = generator("RandomUniform", shape=[16], seed=11.0)
    session = graphrt.Session(model)
    got, errors = [], []

    def work():
        try:
            for _ in range(20):
                got.append(session.run(None, {})[0].tobytes())
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    fresh = graphrt.Session(model)
    assert sorted(got) == sorted(fresh.run(None, {})[0].tobytes() for _ in range(160))
