"""The training family's contract, through sessions: every bad attribute or input ends in a
SessionError of the right kind that names the node (attributes and missing inputs:
invalid_model; input types, shapes and values: invalid_input; inputs whose types disagree with
each other: invalid_model); a steady run allocates no numpy array data (Multinomial excepted:
np.searchsorted has no ``out=``, see generators.py); exact mode's bits against the documented
operation orders (NegativeLogLikelihoodLoss's sums, the optimizers' steps in float32)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper

import graphrt
from graphrt.attrs import node_info
from graphrt.kernel import InferContext, KernelContext
from graphrt_ops_basic.table import OPERATORS
from tests.ops._training import (
    F32,
    I64,
    OPSET,
    TRAINING,
    f32,
    generator,
    kind_of,
    loss_case,
    one_node,
    optimizer_run,
    run,
    spec_log_softmax,
    spec_nll,
)
from tests.test_alloc import assert_no_numpy_allocation

# -- errors through Session.run -----------------------------------------------------------------

X, T, W = loss_case((3, 5))
R0, T0 = np.array(0.1, np.float32), np.array(2, np.int64)
V4 = np.ones(4, np.float32)


def error_case(name, op, inputs, kind, fragment, outputs=("y",), opset=OPSET, **attrs):
    domain = TRAINING if op in ("Adagrad", "Adam", "Momentum") else ""
    if domain:
        opset = 17
    return pytest.param(op, inputs, list(outputs), opset, domain, attrs, kind, fragment, id=name)


def optimizer_inputs(x=V4, g=V4, states=(V4,), r=R0, t=T0):
    return [("R", r), ("T", t), ("x", x), ("g", g)] + [(f"s{k}", s) for k, s in enumerate(states)]


MOMENTUM = dict(alpha=0.9, beta=0.1, norm_coefficient=0.0)
NLL, SCE = "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"

ERRORS = [
    # losses
    error_case("nll-reduction", NLL, [("x", X), ("t", T)], "invalid_model", "reduction",
               reduction="max"),
    error_case("sce-reduction", SCE, [("x", X), ("t", T)], "invalid_model", "reduction",
               reduction="foo"),
    error_case("nll-ignore-index-type", NLL, [("x", X), ("t", T)], "invalid_model",
               "ignore_index", ignore_index="a"),
    error_case("nll-no-target", NLL, [("x", X)], "invalid_model", "target"),
    error_case("nll-weight-type", NLL, [("x", X), ("t", T), ("w", W.astype(np.float64))],
               "invalid_model", "weight must be tensor(float)"),
    error_case("nll-target-too-large", NLL, [("x", X), ("t", np.array([0, 5, 1]))],
               "invalid_input", "target 5 is out of range for 5 classes"),
    error_case("nll-target-negative", NLL, [("x", X), ("t", np.array([0, -1, 1]))],
               "invalid_input", "target -1 is out of range for 5 classes (ignore_index is 3)",
               ignore_index=3),
    error_case("sce-target-too-large", SCE, [("x", X), ("t", np.array([0, 9, 1]))],
               "invalid_input", "target 9", opset=13),
    error_case("nll-no-class", NLL, [("x", X[:, :0]), ("t", T)], "invalid_input", "0 classes",
               ignore_index=4),
    error_case("nll-target-shape", NLL, [("x", X), ("t", T[:2])], "invalid_input",
               "target's shape"),
    error_case("nll-weight-length", NLL, [("x", X), ("t", T), ("w", W[:4])], "invalid_input",
               "weight must have shape (5,)"),
    error_case("sce-weight-length", SCE, [("x", X), ("t", T), ("w", W[:4])], "invalid_input",
               "weight must have shape (5,)", opset=13),
    error_case("nll-input-int", NLL, [("x", X.astype(np.int32)), ("t", T)], "invalid_input",
               "float tensor"),
    error_case("nll-target-float", NLL, [("x", X), ("t", T.astype(np.float32))],
               "invalid_input", "int32 or int64"),
    error_case("sce-rank-1", SCE, [("x", X[0]), ("t", T[:1].reshape(()))], "invalid_input",
               "[N, C, d1..dk]", opset=13),
    # optimizers
    error_case("adagrad-input-count", "Adagrad", optimizer_inputs(states=()), "invalid_model",
               "3 inputs per optimized tensor", outputs=["xn"]),
    error_case("adagrad-output-count", "Adagrad", optimizer_inputs(), "invalid_model",
               "2 outputs", outputs=["xn", "hn", "extra"]),
    error_case("momentum-no-mode", "Momentum", optimizer_inputs(), "invalid_model",
               "'mode' is required", outputs=["xn", "vn"], **MOMENTUM),
    error_case("momentum-mode", "Momentum", optimizer_inputs(), "invalid_model", "nesterov",
               outputs=["xn", "vn"], mode="other", **MOMENTUM),
    error_case("adam-types-disagree", "Adam",
               optimizer_inputs(states=(V4, V4.astype(np.float64))), "invalid_model",
               "share one type", outputs=["xn"]),
    error_case("adagrad-shapes", "Adagrad", optimizer_inputs(g=V4[:3]), "invalid_input",
               "do not broadcast", outputs=["xn", "hn"]),
    error_case("adagrad-r-shape", "Adagrad", optimizer_inputs(r=V4[:2]), "invalid_input",
               "R must be a scalar", outputs=["xn", "hn"]),
    error_case("adagrad-t-type", "Adagrad", optimizer_inputs(t=T0.astype(np.int32)),
               "invalid_input", "T must be int64", outputs=["xn", "hn"]),
    error_case("adagrad-x-float16", "Adagrad",
               optimizer_inputs(*(V4.astype(np.float16),) * 2, states=(V4.astype(np.float16),)),
               "invalid_input", "float or double", outputs=["xn", "hn"]),
    # generators
    error_case("normal-no-shape", "RandomNormal", [], "invalid_model", "'shape' is required"),
    error_case("normal-negative-shape", "RandomNormal", [], "invalid_model", "non-negative",
               shape=[2, -1]),
    error_case("uniform-int-dtype", "RandomUniform", [], "invalid_model", "dtype 7",
               shape=[2], dtype=I64),
    error_case("normal-seed-type", "RandomNormal", [], "invalid_model", "seed", shape=[2],
               seed="s"),
    error_case("normal-like-int-input", "RandomNormalLike", [("x", T)], "invalid_input",
               "give a float dtype"),
    error_case("multinomial-1d", "Multinomial", [("x", X[0])], "invalid_input",
               "[batch_size, class_size]"),
    error_case("multinomial-3d", "Multinomial", [("x", X[None])], "invalid_input",
               "[batch_size, class_size]"),
    error_case("multinomial-int", "Multinomial", [("x", X.astype(np.int32))], "invalid_input",
               "float tensor"),
    error_case("multinomial-no-class", "Multinomial", [("x", X[:, :0])], "invalid_input",
               "zero classes"),
    error_case("multinomial-sample-size", "Multinomial", [("x", X)], "invalid_model",
               "sample_size", sample_size=-2),
    error_case("multinomial-dtype", "Multinomial", [("x", X)], "invalid_model", "dtype 1",
               dtype=F32),
    error_case("bernoulli-int", "Bernoulli", [("x", T)], "invalid_input", "probabilities"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("op", "inputs", "outputs", "opset", "domain", "attrs", "kind", "fragment"), ERRORS
)
def test_bad_attributes_and_inputs_end_in_a_session_error(
    op, inputs, outputs, opset, domain, attrs, kind, fragment
):
    model = one_node(op, inputs, outputs, opset=opset, domain=domain, **attrs)
    err = kind_of(lambda: run(model, inputs))
    assert err.kind == kind, str(err)
    assert "'n1'" in str(err) and err.node == "n1"
    assert fragment in str(err)


def test_what_looks_bad_but_is_not():
    """A target equal to ignore_index may lie outside [0, C), even without any class; a *Like
    generator draws the dtype attribute's type from an integer input."""
    x, target = X.copy(), np.array([0, -1, 1])
    got = run(one_node(SCE, [("x", x), ("t", target)], ["y"], opset=13, ignore_index=-1),
              [("x", x), ("t", target)])[0]  # fmt: skip
    want = spec_nll(spec_log_softmax(x), target, None, "mean", -1)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    empty, ignored = X[:, :0], np.full(3, 4)
    inputs = [("x", empty), ("t", ignored)]
    got = run(one_node(NLL, inputs, ["y"], reduction="sum", ignore_index=4), inputs)[0]
    assert got.tolist() == 0.0
    got = run(generator("RandomNormalLike", [("x", T)], dtype=F32), {"x": T})[0]
    assert got.dtype == np.float32 and got.shape == T.shape


# -- steady state -------------------------------------------------------------------------------

SX, ST, SW = loss_case((4, 6, 5, 3), ignore=2)
SV = [np.abs(SX[0]) + 0.1 for _ in range(4)]


def static_case(name, op, inputs, outputs=("y",), opset=OPSET, **attrs):
    domain = TRAINING if op in ("Adagrad", "Adam", "Momentum") else ""
    return (name, op, inputs, list(outputs), 17 if domain else opset, domain, attrs)


OPT = [("R", R0), ("T", T0), *((f"s{k}", v) for k, v in enumerate(SV))]
STATIC = [
    static_case("nll-weights-ignore", NLL, [("x", SX), ("t", ST), ("w", SW)], ignore_index=2),
    static_case("nll-float16-sum", NLL,
                [("x", SX.astype(np.float16)), ("t", ST), ("w", SW.astype(np.float16))],
                reduction="sum"),
    static_case("nll-none", NLL, [("x", SX), ("t", ST)], reduction="none"),
    static_case("sce-log-prob", SCE, [("x", SX), ("t", ST), ("w", SW)], ["y", "lp"], 13,
                ignore_index=2),
    static_case("sce-float16-none", SCE, [("x", SX.astype(np.float16)), ("t", ST)], opset=13,
                reduction="none"),
    static_case("adagrad", "Adagrad", OPT[:5], ["xn", "hn"], decay_factor=0.1),
    static_case("adam", "Adam", OPT, ["xn", "vn", "hn"], norm_coefficient_post=0.1),
    static_case("adam-x-only", "Adam", OPT, ["xn"]),
    static_case("momentum-nesterov", "Momentum", OPT[:5], ["xn", "vn"], mode="nesterov",
                **MOMENTUM),
    static_case("normal-float16", "RandomNormal", [], shape=[64], dtype=TensorProto.FLOAT16),
    static_case("uniform", "RandomUniform", [], shape=[8, 8], low=-2.0),
    static_case("normal-like", "RandomNormalLike", [("x", SX)]),
    static_case("uniform-like-bfloat16", "RandomUniformLike", [("x", SX)],
                dtype=TensorProto.BFLOAT16),
    static_case("bernoulli-int64", "Bernoulli", [("x", SV[0] / 4)], dtype=I64),
    static_case("bernoulli-float16-bool", "Bernoulli", [("x", (SV[0] / 4).astype(np.float16))],
                dtype=TensorProto.BOOL),
]  # fmt: skip
FACTORIES = {(d.op_type, d.domain): d.factory for d in OPERATORS}
STATIC_PARAMS = [
    pytest.param(*case[1:], mode, id=f"{case[0]}-{mode}")
    for case in STATIC
    for mode in ("fast", "exact")
    if mode == "fast" or FACTORIES[case[1], case[5]].supports_exact
]


@pytest.mark.parametrize(("op", "inputs", "outputs", "opset", "domain", "attrs", "mode"),
                         STATIC_PARAMS)  # fmt: skip
def test_a_steady_run_allocates_no_array_data(op, inputs, outputs, opset, domain, attrs, mode):
    model = one_node(op, inputs, outputs, opset=opset, domain=domain, **attrs)
    sess = graphrt.Session(model, mode=mode, intra_op_threads=1)
    feed = dict(inputs)
    out = {name: np.empty_like(a) for name, a in zip(outputs, sess.run(None, feed))}
    for _ in range(2):
        sess.run(None, feed, out=out)
    assert sess.cached_plans[0].static
    assert_no_numpy_allocation(lambda: sess.run(None, feed, out=out))


def bound(op, inputs, n_outputs=1, opset=OPSET, **attrs):
    """The kernel's step bound as a plan binds it, on arrays made once (scratch full of 0xFF
    bytes, as slab memory another step used would be)."""
    factory = FACTORIES[op, ""]
    names = [f"i{k}" for k in range(len(inputs))]
    node = helper.make_node(op, names, [f"o{k}" for k in range(n_outputs)], **attrs)
    kernel = factory(node_info(node, opset))
    shapes = [x.shape for x in inputs]
    ictx = InferContext([x.dtype for x in inputs], shapes, [None] * len(inputs), n_outputs)
    kernel.infer(ictx)
    outputs = [np.empty(s, d) for d, s in ictx.output_types()]
    scratch = []
    for d, s in ictx.scratch:
        scratch.append(np.empty(s, d))
        scratch[-1].reshape(-1).view(np.uint8).fill(0xFF)
    ctx = KernelContext(prepared=ictx.prepared, scratch=scratch)
    return kernel.bind(ctx, list(inputs), outputs), outputs


def test_scratch_garbage_does_not_leak_into_results():
    x, target, weight = loss_case((3, 4, 5), ignore=1)
    step, outs = bound(SCE, [x, target, weight], 2, opset=13, ignore_index=1)
    step()
    want = spec_nll(spec_log_softmax(x), target, weight, "mean", 1)
    np.testing.assert_allclose(outs[0], want, rtol=1e-5)


# -- exact mode ---------------------------------------------------------------------------------


def exact_runs(model, inputs):
    """Outputs of exact sessions with 1 and 2 intra-op threads: they must be the same bits."""
    one = run(model, inputs, mode="exact", intra_op_threads=1)
    two = run(model, inputs, mode="exact", intra_op_threads=2)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(one, two))
    return one


def test_nll_exact_sums_in_ascending_order_and_sce_is_refused():
    x, target, weight = loss_case((4, 3, 50), ignore=0, seed=3)
    x *= np.float32(1e3)
    inputs = [("x", x), ("t", target), ("w", weight)]
    model = one_node(NLL, inputs, ["y"], ignore_index=0)
    got = exact_runs(model, inputs)[0]
    # acc = t0; acc = acc + t1; ... in float32, one rounding each, for both sums
    loss = np.float32(0)
    total = np.float32(0)
    for n in range(4):
        for d in range(50):
            c = target[n, d]
            w = np.float32(0) if c == 0 else weight[c]
            term = np.float32(0) if c == 0 else -(x[n, c, d] * w)
            loss, total = np.float32(loss + term), np.float32(total + w)
    assert got.tobytes() == np.float32(loss / total).tobytes()
    model = one_node(SCE, inputs, ["y"], opset=13)
    assert kind_of(lambda: graphrt.Session(model, mode="exact")).kind == "exact_mode_unavailable"


def power(base: float, n: int) -> float:
    """base**n by repeated squaring in double, as optimizers.py documents it."""
    result = 1.0
    while n:
        if n & 1:
            result *= base
        base *= base
        n >>= 1
    return result


OPT_RNG = np.random.default_rng(4)
OX, OG, OV, OH = (OPT_RNG.standard_normal(5000).astype(np.float32) for _ in range(4))
OH = np.abs(OH)
RATE, STEP = 0.01, 7


def adagrad_in_float32(norm, decay, eps):
    f = np.float32
    r = f(float(f(RATE)) / (1.0 + STEP * decay))  # a double expression, rounded once
    g = OX * f(norm) + OG
    h_new = OH + g * g
    return OX - (g * r) / (np.sqrt(h_new) + f(eps)), h_new


def adam_in_float32(norm, alpha, beta, eps, post):
    f = np.float32
    rate = float(f(RATE)) * math.sqrt(1.0 - power(beta, STEP)) / (1.0 - power(alpha, STEP))
    g = OX * f(norm) + OG
    v_new = OV * f(alpha) + g * f(1.0 - alpha)
    h_new = OH * f(beta) + (g * f(1.0 - beta)) * g
    x_new = OX - (v_new * f(rate)) / (np.sqrt(h_new) + f(eps))
    return x_new * f(1.0 - post), v_new, h_new


def momentum_in_float32(norm, alpha, beta, nesterov):
    f = np.float32
    g = OX * f(norm) + OG
    v_new = OV * f(alpha) + g * f(beta)
    step = (g + v_new * f(alpha)) * f(RATE) if nesterov else v_new * f(RATE)
    return OX - step, v_new


@pytest.mark.parametrize(
    ("op", "attrs", "states"),
    [
        ("Adagrad", dict(norm_coefficient=0.01, decay_factor=0.1, epsilon=1e-3), [OH]),
        ("Adam", dict(norm_coefficient=0.02, alpha=0.8, beta=0.95, epsilon=1e-4,
                      norm_coefficient_post=0.1), [OV, OH]),
        ("Momentum", dict(norm_coefficient=0.01, alpha=0.9, beta=0.5, mode="nesterov"), [OV]),
        ("Momentum", dict(norm_coefficient=0.01, alpha=0.9, beta=0.5, mode="standard"), [OV]),
    ],
)  # fmt: skip
def test_exact_optimizers_follow_the_spec_steps_in_float32(op, attrs, states):
    _, model, feed = optimizer_run(op, [[OX], [OG], *([s] for s in states)], RATE, STEP,
                                   np.float32, **attrs)  # fmt: skip
    got = exact_runs(model, list(feed.items()))
    a = {k: f32(v) for k, v in attrs.items() if k != "mode"}  # as the model holds them
    if op == "Adagrad":
        want = adagrad_in_float32(a["norm_coefficient"], a["decay_factor"], a["epsilon"])
    elif op == "Adam":
        want = adam_in_float32(a["norm_coefficient"], a["alpha"], a["beta"], a["epsilon"],
                               a["norm_coefficient_post"])  # fmt: skip
    else:
        nesterov = attrs["mode"] == "nesterov"
        want = momentum_in_float32(a["norm_coefficient"], a["alpha"], a["beta"], nesterov)
    for g, w in zip(got, want):
        assert g.dtype == np.float32 and g.tobytes() == w.tobytes()


def test_generators_are_refused_in_exact_mode():
    model = generator("RandomNormal", shape=[2], seed=1.0)
    assert kind_of(lambda: graphrt.Session(model, mode="exact")).kind == "exact_mode_unavailable"
