"""The math family's contract, through sessions: every bad attribute or input ends in a
SessionError of the right kind that names the node (attributes: invalid_model, inputs:
invalid_input; inputs whose types disagree with each other: invalid_model, as the shared
``same_types`` says); a steady run of every static-shape operator allocates no numpy array
data; exact mode's bits (1 and 2 threads, the documented operation orders, the canonical NaN);
a random model of the family against onnxruntime.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import graphrt
from tests._models import init, make_model, onnxruntime_limits, ort_session, tensor
from tests._versions import onnxruntime_release
from tests.ops._math import (
    FACTORIES,
    INF,
    NAN,
    RNG,
    TRIG,
    bits,
    close,
    error_of,
    f64,
    int_values,
    same,
    schema_missing,
    session_for,
    spec_shrink,
)
from tests.test_alloc import assert_no_numpy_allocation

#: The first opset of Swish and of BitCast: older onnx (the numpy1 env) lacks their schemas.
NEWER = {"Swish": 24, "BitCast": 26}


def skip_unknown(op: str) -> None:
    if schema_missing(op):
        pytest.skip(f"the installed onnx has no {op} (opset {NEWER[op]})")


# -- errors through Session.run -----------------------------------------------------------------


def ones(*shape, dtype=np.float32):
    return np.ones(shape, dtype)


def error_case(name, op, feeds, kind, fragment, opset=22, **attrs):
    return pytest.param(op, feeds, opset, attrs, kind, fragment, id=name)


F, I32 = ones(2, 3), ones(2, 3, dtype=np.int32)
X4 = ones(2, 6, 3, 2)
C6, C3 = ones(6), ones(3)

BAD_ATTRIBUTES = [
    error_case("isinf-flag", "IsInf", {"x": F}, "invalid_model", "detect_positive", 20,
               detect_positive=2),
    error_case("bitcast-no-to", "BitCast", {"x": F}, "invalid_model", "'to'", 26),
    error_case("bitcast-to-string", "BitCast", {"x": F}, "invalid_model", "string", 26,
               to=TensorProto.STRING),
    error_case("bitcast-to-unknown", "BitCast", {"x": F}, "invalid_model", "999", 26, to=999),
    error_case("celu-alpha-0", "Celu", {"x": F}, "invalid_model", "alpha", 12, alpha=0.0),
    error_case("lp-p-3", "LpNormalization", {"x": F}, "invalid_model", "p must be 1 or 2", p=3),
    error_case("lp-axis-float", "LpNormalization", {"x": F}, "invalid_model", "axis", axis=1.5),
    error_case("gn-no-groups", "GroupNormalization", {"x": X4, "s": C6, "b": C6},
               "invalid_model", "num_groups", 21),
    error_case("gn-0-groups", "GroupNormalization", {"x": X4, "s": C6, "b": C6},
               "invalid_model", "num_groups", 21, num_groups=0),
    error_case("gn-stash-type", "GroupNormalization", {"x": X4, "s": C6, "b": C6},
               "invalid_model", "stash_type", 21, num_groups=2, stash_type=10),
    error_case("mvn-axes-string", "MeanVarianceNormalization", {"x": X4}, "invalid_model",
               "axes", 13, axes="a"),
    # the node's inputs: missing ones, types that disagree (the model contradicts itself)
    error_case("prelu-no-slope", "PRelu", {"x": F}, "invalid_model", "slope", 16),
    error_case("bitwise-one-input", "BitwiseAnd", {"a": I32}, "invalid_model", "two inputs", 18),
    error_case("gn-no-bias", "GroupNormalization", {"x": X4, "s": C6}, "invalid_model",
               "bias", 21, num_groups=2),
    error_case("prelu-slope-type", "PRelu", {"x": F, "s": ones(3, dtype=np.float64)},
               "invalid_model", "one element type", 16),
    error_case("gn-scale-type", "GroupNormalization",
               {"x": X4, "s": ones(6, dtype=np.float64), "b": C6}, "invalid_model",
               "one element type", 21, num_groups=2),
    error_case("bitwise-types", "BitwiseOr", {"a": I32, "b": ones(3, dtype=np.int64)},
               "invalid_model", "one element type", 18),
]  # fmt: skip

BAD_INPUTS = [
    *(error_case(f"{op.lower()}-int", op, {"x": I32}, "invalid_input", "float tensor", opset)
      for op, opset in [("Sin", 7), ("Atanh", 22), ("Round", 22), ("IsNaN", 20), ("IsInf", 20),
                        ("Softsign", 22), ("Celu", 12), ("Mish", 22), ("HardSwish", 22),
                        ("ThresholdedRelu", 22), ("Swish", 24), ("LpNormalization", 22),
                        ("MeanVarianceNormalization", 13)]),
    error_case("shrink-bool", "Shrink", {"x": ones(3, dtype=bool)}, "invalid_input", "numeric", 9),
    error_case("prelu-bool", "PRelu", {"x": ones(3, dtype=bool), "s": ones(3, dtype=bool)},
               "invalid_input", "numeric", 16),
    error_case("bitwise-float", "BitwiseAnd", {"a": F, "b": F}, "invalid_input", "integer", 18),
    error_case("bitwise-not-bool", "BitwiseNot", {"a": ones(3, dtype=bool)}, "invalid_input",
               "integer", 18),
    error_case("bitwise-shapes", "BitwiseXor", {"a": I32, "b": ones(2, dtype=np.int32)},
               "invalid_input", "broadcast", 18),
    error_case("bitcast-width", "BitCast", {"x": F}, "invalid_input", "32 bits", 26,
               to=TensorProto.INT64),
    error_case("prelu-slope-shape", "PRelu", {"x": F, "s": ones(4)}, "invalid_input", "slope", 16),
    error_case("prelu-slope-grows-x", "PRelu", {"x": F, "s": ones(2, 2, 3)}, "invalid_input",
               "slope", 16),
    error_case("prelu-opset-6-channels", "PRelu", {"x": ones(2, 3, 4), "s": ones(5)},
               "invalid_input", "slope", 6),
    error_case("lp-axis-too-large", "LpNormalization", {"x": F}, "invalid_input", "axis 2",
               axis=2),
    error_case("lp-axis-too-negative", "LpNormalization", {"x": F}, "invalid_input", "axis -3",
               axis=-3),
    error_case("gn-groups-divide-channels", "GroupNormalization", {"x": X4, "s": C6, "b": C6},
               "invalid_input", "6 channels", 21, num_groups=4),
    error_case("gn-scale-size", "GroupNormalization", {"x": X4, "s": ones(5), "b": C6},
               "invalid_input", "expected [6]", 21, num_groups=3),
    error_case("gn-18-scale-per-group", "GroupNormalization", {"x": X4, "s": C6, "b": C6},
               "invalid_input", "expected [3]", 18, num_groups=3),
    error_case("gn-rank-1", "GroupNormalization", {"x": C6, "s": C6, "b": C6}, "invalid_input",
               "(N, C, ...)", 21, num_groups=3),
    error_case("mvn-axis-too-large", "MeanVarianceNormalization", {"x": ones(2, 3, 4)},
               "invalid_input", "out of range", 13),
    error_case("mvn-axes-repeat", "MeanVarianceNormalization", {"x": ones(2, 3, 4)},
               "invalid_input", "repeat", 13, axes=[1, -2]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("op", "feeds", "opset", "attrs", "kind", "fragment"), BAD_ATTRIBUTES + BAD_INPUTS
)
def test_bad_attributes_and_inputs_end_in_a_session_error(op, feeds, opset, attrs, kind, fragment):
    if op in NEWER:
        skip_unknown(op)
    err = error_of(lambda: session_for(op, feeds, opset=opset, **attrs).run(None, feeds))
    assert err.kind == kind, str(err)
    assert "'n1'" in str(err) and err.node == "n1"
    assert fragment in str(err)


# -- steady state -------------------------------------------------------------------------------

SX = RNG.standard_normal((2, 6, 5, 4)).astype(np.float32)
SI = int_values(np.int32, (2, 6, 5, 4))


def static_case(name, op, feeds, opset=22, **attrs):
    return (name, op, feeds, opset, attrs)


STATIC = [
    *(static_case(op, op, {"x": np.tanh(SX) if op in ("Asin", "Acos", "Atanh") else SX})
      for op in TRIG),
    static_case("Round", "Round", {"x": SX * 3}),
    static_case("IsNaN", "IsNaN", {"x": SX}, 20),
    static_case("IsInf", "IsInf", {"x": SX}, 20),
    static_case("IsInf-negative", "IsInf", {"x": SX}, 20, detect_positive=0),
    static_case("IsInf-none", "IsInf", {"x": SX}, 20, detect_positive=0, detect_negative=0),
    *(static_case(op, op, {"a": SI, "b": SI[0, 0]}, 18)
      for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor")),
    static_case("BitwiseNot", "BitwiseNot", {"a": SI}, 18),
    static_case("BitCast", "BitCast", {"x": SX}, 26, to=TensorProto.INT32),
    static_case("BitCast-uint8-int8", "BitCast", {"x": SI.astype(np.uint8)}, 26,
                to=TensorProto.INT8),
    static_case("PRelu", "PRelu", {"x": SX, "s": SX[0, :, :1, :1]}, 16),
    static_case("PRelu-int32", "PRelu", {"x": SI, "s": SI[0, 0, 0]}, 16),
    static_case("Celu", "Celu", {"x": SX}, 12, alpha=0.5),
    static_case("Shrink", "Shrink", {"x": SX}, 9, lambd=0.3, bias=0.1),
    static_case("Shrink-int32", "Shrink", {"x": SI}, 9, lambd=3.0, bias=1.5),
    static_case("Softsign", "Softsign", {"x": SX}),
    static_case("ThresholdedRelu", "ThresholdedRelu", {"x": SX}, alpha=0.2),
    static_case("HardSwish", "HardSwish", {"x": SX * 4}),
    static_case("Mish", "Mish", {"x": SX}),
    static_case("Swish", "Swish", {"x": SX}, 24, alpha=0.7),
    static_case("LpNormalization-short-axis", "LpNormalization", {"x": SX}, axis=1),
    static_case("LpNormalization-p1", "LpNormalization", {"x": SX.reshape(2, 6, 20)}, p=1),
    static_case("LpNormalization-float16", "LpNormalization", {"x": SX.astype(np.float16)}),
    static_case("GroupNormalization", "GroupNormalization",
                {"x": SX, "s": SX[0, :, 0, 0], "b": SX[1, :, 0, 0]}, 21, num_groups=3),
    static_case("GroupNormalization-18-float16", "GroupNormalization",
                {"x": SX.astype(np.float16), "s": SX[0, :3, 0, 0].astype(np.float16),
                 "b": SX[1, :3, 0, 0].astype(np.float16)}, 18, num_groups=3),
    static_case("GroupNormalization-float64-stash-float32", "GroupNormalization",
                {"x": SX.astype(np.float64), "s": SX[0, :, 0, 0].astype(np.float64),
                 "b": SX[1, :, 0, 0].astype(np.float64)}, 21, num_groups=2),
    static_case("MeanVarianceNormalization", "MeanVarianceNormalization", {"x": SX}, 13),
    static_case("MeanVarianceNormalization-float16", "MeanVarianceNormalization",
                {"x": SX.astype(np.float16)}, 13, axes=[1, 3]),
]  # fmt: skip
STATIC_PARAMS = [
    pytest.param(*case[1:], mode, id=f"{case[0]}-{mode}")
    for case in STATIC
    for mode in ("fast", "exact")
    if mode == "fast" or FACTORIES[case[1]].supports_exact
]


@pytest.mark.parametrize(("op", "feeds", "opset", "attrs", "mode"), STATIC_PARAMS)
def test_a_steady_run_allocates_no_array_data(op, feeds, opset, attrs, mode):
    """Every operator of the family has a static output shape: after the plan and the run-state
    pool are warm, a run with caller-provided outputs allocates no numpy array data."""
    if op in NEWER:
        skip_unknown(op)
    sess = session_for(op, feeds, opset=opset, mode=mode, **attrs)
    out = {"y": np.empty_like(sess.run(None, feeds)[0])}
    for _ in range(2):
        sess.run(None, feeds, out=out)
    assert sess.cached_plans[0].static
    assert_no_numpy_allocation(lambda: sess.run(None, feeds, out=out))


# -- exact mode ---------------------------------------------------------------------------------

PAYLOAD_NANS = np.array([0x7FC12345, 0xFFC00001, 0x7F800001], np.uint32).view(np.float32)
CANONICAL = 0x7FC00000


def exact_runs(op, feeds, opset, **attrs):
    """Outputs of exact sessions with 1 and 2 intra-op threads: they must be the same bits.

    The family's exact kernels split no work over threads (they call no ``parallel_for``), so
    this checks that nothing around them (plans, scratch placement, the pool) changes a bit."""
    outs = []
    for threads in (1, 2):
        sess = session_for(op, feeds, opset=opset, mode="exact", threads=threads, **attrs)
        outs.append(sess.run(None, feeds)[0])
    assert bits(outs[0]) == bits(outs[1])
    return outs[0]


def exact_x(n=200_000):
    x = (RNG.standard_normal(n) * 4).astype(np.float32)
    x[:3] = PAYLOAD_NANS
    x[3:7] = [INF, -INF, 0.0, -0.0]
    return x


def hard_swish_in_order(v):
    """HardSwish's documented operations, each rounded to float32."""
    f = np.float32
    return v * np.maximum(np.minimum(v * f(1 / 6) + f(0.5), f(1)), f(0))


def test_exact_element_wise_operators_follow_their_formulas():
    x = exact_x()
    f = np.float32
    cases = {
        "Softsign": ({}, lambda v: v / (np.abs(v) + f(1))),
        "HardSwish": ({}, hard_swish_in_order),
        "Round": ({}, np.rint),
        "ThresholdedRelu": ({"alpha": 0.5}, lambda v: np.where(v > f(0.5), v, f(0))),
        "Shrink": ({"lambd": 0.5, "bias": 0.25}, lambda v: spec_shrink(v, f(0.5), f(0.25))),
    }
    for op, (attrs, formula) in cases.items():
        got = exact_runs(op, {"x": x}, 22 if op != "Shrink" else 9, **attrs)
        with np.errstate(all="ignore"):
            want = formula(x).astype(np.float32)
        nan = np.isnan(want)
        assert (np.isnan(got) == nan).all(), op
        assert set(np.asarray(bits(got))[nan.reshape(-1)].tolist()) <= {CANONICAL}, op
        assert bits(got[~nan]) == bits(want[~nan]), op


def test_exact_prelu_and_bitwise():
    x = exact_x(60_000).reshape(20, 30, 100)
    slope = (RNG.standard_normal((30, 1)) * 0.3).astype(np.float32)
    got = exact_runs("PRelu", {"x": x, "s": slope}, 16)
    with np.errstate(all="ignore"):
        want = np.where(x < 0, x * slope, x)
    nan = np.isnan(want)
    assert set(np.asarray(bits(got))[nan.reshape(-1)].tolist()) == {CANONICAL}
    assert bits(got[~nan]) == bits(want[~nan])
    a, b = int_values(np.int32, (50, 40)), int_values(np.int32, (40,))
    same(exact_runs("BitwiseXor", {"a": a, "b": b}, 18), a ^ b)
    same(exact_runs("BitwiseNot", {"a": a}, 18), ~a)
    flags = exact_runs("IsNaN", {"x": x}, 20)
    same(flags, np.isnan(x))


def canonical_lp(x, p, axis):
    """The documented order: terms, ascending sum along the axis, sqrt, max with the smallest
    subnormal (a zero norm only), divide."""
    t = np.abs(x) if p == 1 else x * x
    t = np.moveaxis(t, axis, 0)
    s = t[0].copy()
    for k in range(1, t.shape[0]):
        s = s + t[k]
    if p == 2:
        s = np.sqrt(s)
    s = np.maximum(s, np.finfo(x.dtype).smallest_subnormal).astype(x.dtype)
    return x / np.expand_dims(s, axis)


@pytest.mark.parametrize(("p", "axis"), [(1, 1), (2, 0), (2, -1)])
def test_exact_lp_normalization_follows_the_documented_order(p, axis):
    x = (RNG.standard_normal((30, 40, 50)) * 10).astype(np.float32)
    x[0, 0, 0] = NAN
    x[1, :, :] = 0  # zero norms along every axis
    x[:, 2, :] = -0.0
    x[:, :, 3] = 0
    got = exact_runs("LpNormalization", {"x": x}, 22, p=p, axis=axis)
    with np.errstate(all="ignore"):
        want = canonical_lp(x, p, axis)
    nan = np.isnan(want)
    assert set(np.asarray(bits(got))[nan.reshape(-1)].tolist()) == {CANONICAL}
    assert bits(got[~nan]) == bits(want[~nan])


def canonical_group_norm(x, scale, bias, groups, eps):
    """GroupNormalization-21 in float32 as normalize.py documents it: each (image, group) row
    summed in ascending order, the centred squares rounded and summed in ascending order,
    ``inv = 1 / sqrt((q / n) + eps)``, then ``z * scale`` and ``+ bias`` per channel."""
    f = np.float32
    n, c = x.shape[:2]
    rows = x.reshape(n * groups, -1)
    count = f(rows.shape[1])
    acc = rows[:, 0].copy()
    for k in range(1, rows.shape[1]):
        acc = acc + rows[:, k]
    cen = rows - (acc / count)[:, None]
    q = cen[:, 0] * cen[:, 0]
    for k in range(1, rows.shape[1]):
        q = q + cen[:, k] * cen[:, k]
    inv = f(1) / np.sqrt((q / count) + f(eps))
    z = (cen * inv[:, None]).reshape(n, c, -1)
    return ((z * scale[:, None]) + bias[:, None]).reshape(x.shape)


def test_exact_group_normalization_follows_the_documented_order():
    x = (RNG.standard_normal((4, 8, 30, 30)) * 20 + 5).astype(np.float32)
    x[0, 0, 0, 0] = PAYLOAD_NANS[0]
    feeds = {"x": x, "s": RNG.standard_normal(8).astype(np.float32),
             "b": RNG.standard_normal(8).astype(np.float32)}  # fmt: skip
    got = exact_runs("GroupNormalization", feeds, 21, num_groups=4, epsilon=1e-3)
    with np.errstate(all="ignore"):
        want = canonical_group_norm(x, feeds["s"], feeds["b"], 4, 1e-3)
    nan = np.isnan(want)
    assert nan[0, :2].all() and not nan[0, 2:].any()  # the NaN spreads over its group only
    assert set(np.asarray(bits(got))[nan.reshape(-1)].tolist()) == {CANONICAL}
    assert bits(got[~nan]) == bits(want[~nan])


def test_exact_support_is_declared_only_where_bits_are_fixed():
    exact = {op for op, f in FACTORIES.items() if f.supports_exact}
    assert exact == {
        "Round", "IsInf", "IsNaN", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot",
        "BitCast", "PRelu", "Shrink", "Softsign", "ThresholdedRelu", "HardSwish",
        "LpNormalization", "GroupNormalization",
    }  # fmt: skip
    assert not exact & (set(TRIG) | {"Celu", "Mish", "Swish", "MeanVarianceNormalization"})


def test_exact_mode_refuses_the_transcendental_operators():
    x = np.ones((2, 3, 2, 2), np.float32)
    for op, opset in [("Sin", 22), ("Celu", 12), ("Mish", 22), ("MeanVarianceNormalization", 13)]:
        err = error_of(
            lambda op=op, opset=opset: session_for(op, {"x": x}, opset=opset, mode="exact")
        )
        assert err.kind == "exact_mode_unavailable" and op in str(err)


# -- sessions: onnxruntime, steady state --------------------------------------------------------

CHAIN_OPSET = 21


def chain_model(seed=3):
    """A random model of the family: Sin, PRelu, GroupNormalization, HardSwish, Softsign, Mish,
    Celu, Shrink, LpNormalization, MeanVarianceNormalization, Atan."""
    rng = np.random.default_rng(seed)
    f32 = np.float32
    inits = [
        init("slope", (rng.standard_normal((8, 1, 1)) * 0.3).astype(f32)),
        init("gs", (rng.random(8) + 0.5).astype(f32)),
        init("gb", rng.standard_normal(8).astype(f32)),
    ]
    node = helper.make_node
    nodes = [
        node("Sin", ["x"], ["a"]),
        node("PRelu", ["a", "slope"], ["b"]),
        node("GroupNormalization", ["b", "gs", "gb"], ["c"], num_groups=4, epsilon=1e-3),
        node("HardSwish", ["c"], ["d"]),
        node("Softsign", ["d"], ["e"]),
        node("Mish", ["e"], ["f"]),
        node("Celu", ["f"], ["g"], alpha=0.7),
        node("Shrink", ["g"], ["h"], lambd=0.02, bias=0.01),
        node("LpNormalization", ["h"], ["i"], axis=1, p=2),
        node("MeanVarianceNormalization", ["i"], ["j"]),
        node("Atan", ["j"], ["y"]),
    ]
    return make_model(
        nodes, [tensor("x", shape=[2, 8, 6, 6])], [tensor("y", shape=[2, 8, 6, 6])], inits,
        opset=CHAIN_OPSET,
    )  # fmt: skip


def test_a_random_model_of_the_family_matches_onnxruntime():
    pytest.importorskip("onnxruntime")
    if onnxruntime_limits()[1] < CHAIN_OPSET:
        pytest.skip(f"the installed onnxruntime loads opsets up to {onnxruntime_limits()[1]}")
    model = chain_model()
    x = (np.random.default_rng(5).standard_normal((2, 8, 6, 6)) * 2).astype(np.float32)
    ours = graphrt.Session(model).run(None, {"x": x})[0]
    try:
        oracle = ort_session(model)
    except Exception as exc:  # onnxruntime's own NOT_IMPLEMENTED: an oracle it cannot be
        if onnxruntime_release() >= (1, 21):
            raise
        pytest.skip(f"onnxruntime {'.'.join(map(str, onnxruntime_release()))} refused: {exc}")
    theirs = oracle.run(None, {"x": x})[0]
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


def test_the_steady_state_allocates_nothing():
    sess = graphrt.Session(chain_model(), intra_op_threads=1)
    x = np.random.default_rng(6).standard_normal((2, 8, 6, 6)).astype(np.float32)
    out = {"y": np.empty((2, 8, 6, 6), np.float32)}
    for _ in range(3):
        sess.run(None, {"x": x}, out=out)
    assert sess.cached_plans[0].static
    assert_no_numpy_allocation(lambda: sess.run(None, {"x": x}, out=out))


def test_swish_and_bitwise_sessions():
    skip_unknown("Swish")
    x = np.float32([-3, -1, 0, 1, 3])
    got = session_for("Swish", {"x": x}, opset=24, alpha=2.0).run(None, {"x": x})[0]
    close(got, f64(x) / (1 + np.exp(-2 * f64(x))), np.float32, rtol=1e-6, atol=1e-30)
    a = np.array([[1, 2], [3, 4]], np.uint8)
    b = np.array([6, 5], np.uint8)
    got = session_for("BitwiseAnd", {"a": a, "b": b}, opset=18).run(None, {"a": a, "b": b})[0]
    same(got, np.array([[0, 0], [2, 4]], np.uint8))
