"""Exact mode: bit-identical across thread counts and plan reuse; refusals name operators."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphrt
from graphrt_ops_basic import conv_exact
from tests._models import init, make_model, mlp, small_cnn, tensor


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


def _canonical_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """docs/exact-mode.md's order, one scalar at a time: products rounded, ascending k."""
    out = np.empty((a.shape[0], b.shape[1]), a.dtype)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            acc = a.dtype.type(a[i, 0] * b[0, j])
            for k in range(1, a.shape[1]):
                acc = a.dtype.type(acc + a.dtype.type(a[i, k] * b[k, j]))
            out[i, j] = acc
    return out


@pytest.mark.parametrize("batch", [1, 7, 300])
def test_mlp_is_bit_identical_across_threads_and_plan_reuse(batch):
    model = mlp(hidden=(96, 80), n_in=70, n_out=33)
    x = np.random.default_rng(batch).standard_normal((batch, 70)).astype(np.float32)
    results = []
    for threads in (1, 2, 4):
        sess = graphrt.Session(model, mode="exact", intra_op_threads=threads)
        first = sess.run(None, {"x": x})[0]  # new plan
        sess.run(None, {"x": x[: max(1, batch // 2)]})  # another plan in between
        again = sess.run(None, {"x": x})[0]  # reused plan and pooled run state
        assert sess.plans_built == (2 if batch > 1 else 1)
        results += [_bits(first), _bits(again)]
    assert len(set(results)) == 1
    # and it is the right answer (close to float64 arithmetic)
    fast = graphrt.Session(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(
        np.frombuffer(results[0], np.float32).reshape(fast.shape), fast, rtol=1e-4, atol=1e-5
    )


def test_exact_matmul_follows_the_documented_order():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((5, 40)).astype(np.float32) * 1e3
    b = rng.standard_normal((40, 6)).astype(np.float32)
    model = make_model(
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        [tensor("a", shape=[5, 40]), tensor("b", shape=[40, 6])],
        [tensor("y", shape=[5, 6])],
    )
    got = graphrt.Session(model, mode="exact").run(None, {"a": a, "b": b})[0]
    assert _bits(got) == _bits(_canonical_matmul(a, b))


def test_nan_results_are_canonical_in_exact_mode():
    model = make_model(
        [helper.make_node("Mul", ["a", "b"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
        [tensor("a", shape=[4]), tensor("b", shape=[4])],
        [tensor("y", shape=[4])],
    )
    payload = np.array([0x7FC12345, 0xFFC00001, 0x7F800001, 0x3F800000], np.uint32).view(np.float32)
    a = payload.copy()
    b = np.array([1, 1, 1, -0.0], np.float32)
    y = graphrt.Session(model, mode="exact").run(None, {"a": a, "b": b})[0]
    assert list(y.view(np.uint32)[:3]) == [0x7FC00000] * 3
    assert y.view(np.uint32)[3] == 0  # 1 * -0 = -0, and Relu gives +0 in exact mode


def test_operator_without_exact_support_fails_at_creation_naming_it():
    # Conv is exact now (conv_exact.py): the refusal is shown with LogSoftmax (needs a log)
    model = small_cnn()
    model.graph.node[-1].op_type = "LogSoftmax"
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(model, mode="exact")
    err = info.value
    assert err.kind == "exact_mode_unavailable"
    assert err.operators == ["LogSoftmax (opset 17)"]
    assert "LogSoftmax (opset 17)" in str(err)


def test_exact_gemm_epilogue_is_separate_multiply_and_add():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 8)).astype(np.float32)
    b = rng.standard_normal((8, 4)).astype(np.float32)
    c = rng.standard_normal((4,)).astype(np.float32)
    model = make_model(
        [helper.make_node("Gemm", ["a", "b", "c"], ["y"], alpha=0.3, beta=1.7)],
        [tensor("a", shape=[3, 8])],
        [tensor("y", shape=[3, 4])],
        [init("b", b), init("c", c)],
    )
    got = graphrt.Session(model, mode="exact").run(None, {"a": a})[0]
    prod = _canonical_matmul(a, b)
    want = (prod * np.float32(0.3)).astype(np.float32) + (c * np.float32(1.7)).astype(np.float32)
    assert _bits(got) == _bits(want.astype(np.float32))


def test_exact_integer_and_double_paths():
    rng = np.random.default_rng(9)
    for dtype, elem in ((np.int32, 6), (np.float64, 11), (np.int64, 7)):
        a = (rng.standard_normal((4, 5)) * 10).astype(dtype)
        b = (rng.standard_normal((5, 3)) * 10).astype(dtype)
        model = make_model(
            [
                helper.make_node("MatMul", ["a", "b"], ["m"]),
                helper.make_node("Add", ["m", "a0"], ["y"]),
            ],
            [tensor("a", elem, [4, 5]), tensor("b", elem, [5, 3])],
            [tensor("y", elem, [4, 3])],
            [init("a0", np.ones(3, dtype))],
        )
        outs = {
            graphrt.Session(model, mode="exact", intra_op_threads=t)
            .run(None, {"a": a, "b": b})[0]
            .tobytes()
            for t in (1, 3)
        }
        assert len(outs) == 1
        np.testing.assert_allclose(
            np.frombuffer(outs.pop(), dtype).reshape(4, 3), a @ b + 1, rtol=1e-12
        )


# -- CNNs: Conv, pools and BatchNormalization in exact mode --------------------------------------


def _as_double(model):
    """The same model in float64: initializers converted, inputs and outputs retyped."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for i, t in enumerate(m.graph.initializer):
        arr = numpy_helper.to_array(t)
        if arr.dtype == np.float32:
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(arr.astype(np.float64), t.name))
    for v in (*m.graph.input, *m.graph.output):
        v.type.tensor_type.elem_type = TensorProto.DOUBLE
    return m


@pytest.mark.parametrize("batch", [1, 4])
def test_small_cnn_is_bit_identical_across_threads_and_plans_and_close_to_float64(batch):
    model = small_cnn(seed=batch)
    x = np.random.default_rng(batch).standard_normal((batch, 3, 16, 16)).astype(np.float32)
    seen = set()
    for threads in (1, 2, 4):
        sess = graphrt.Session(model, mode="exact", intra_op_threads=threads)
        seen.add(_bits(sess.run(None, {"x": x})[0]))  # fresh plan
        if batch > 1:
            sess.run(None, {"x": x[:1]})  # another plan in between
        seen.add(_bits(sess.run(None, {"x": x})[0]))  # reused plan, pooled run state
    assert len(seen) == 1
    got = np.frombuffer(seen.pop(), np.float32).reshape(batch, 10)
    ref = graphrt.Session(_as_double(model)).run(None, {"x": x.astype(np.float64)})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-7)


def _canonical_conv(x, w, b, pads, strides, dilations, group):
    """docs/exact-mode.md's convolution, one scalar at a time: input channel of the group, then
    taps in row-major order, padding included as +0, each product rounded; the bias last."""
    dt = x.dtype.type
    n, c = x.shape[:2]
    m, k = w.shape[0], w.shape[2:]
    r = len(k)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[i + r]) for i in range(r)])
    out = [(xp.shape[2 + i] - (k[i] - 1) * dilations[i] - 1) // strides[i] + 1 for i in range(r)]
    y = np.empty((n, m, *out), x.dtype)
    cg, mg = c // group, m // group
    for ni, mi in itertools.product(range(n), range(m)):
        g = mi // mg
        for o in itertools.product(*(range(v) for v in out)):
            acc = None
            for ci in range(cg):
                for tap in itertools.product(*(range(v) for v in k)):
                    pos = tuple(o[i] * strides[i] + tap[i] * dilations[i] for i in range(r))
                    t = dt(xp[(ni, g * cg + ci, *pos)] * w[(mi, ci, *tap)])
                    acc = t if acc is None else dt(acc + t)
            y[(ni, mi, *o)] = acc if b is None else dt(acc + b[mi])
    return y


CONV_CASES = [
    # x shape, w shape, attributes, bias, weight as an initializer
    ((2, 4, 7, 6), (6, 2, 3, 2), dict(group=2, pads=[1, 0, 2, 1], strides=[2, 1], dilations=[1, 2]),
     True, True),
    ((1, 3, 9), (3, 1, 3), dict(group=3, pads=[1, 1], strides=[2]), False, True),  # depthwise 1-D
    ((1, 2, 4, 5, 3), (4, 2, 2, 2, 1), dict(pads=[0, 1, 0, 1, 0, 0]), True, True),  # 3-D
    ((2, 6, 8, 8), (6, 1, 3, 3), dict(group=6, pads=[1, 1, 1, 1]), True, False),  # W at run time
    ((1, 3, 6, 6), (4, 3, 1, 1), dict(strides=[2, 2]), True, False),  # 1x1, strided
    ((1, 2, 5, 5), (2, 2, 3, 3), dict(auto_pad="SAME_UPPER"), False, True),
]  # fmt: skip


@pytest.mark.parametrize("unit", [None, 8])
@pytest.mark.parametrize(("xs", "ws", "attrs", "bias", "const"), CONV_CASES)
def test_exact_conv_follows_the_documented_order(xs, ws, attrs, bias, const, unit, monkeypatch):
    if unit is not None:  # images cut into runs of output rows, as large images are
        monkeypatch.setattr(conv_exact, "UNIT_ELEMENTS", unit)
    rng = np.random.default_rng(len(xs) + ws[0])
    x = (rng.standard_normal(xs) * 100).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32) if bias else None
    r = len(xs) - 2
    names = ["x", "w"] + (["b"] if bias else [])
    feeds = {"x": x} if const else {"x": x, "w": w}
    inputs = [tensor("x", shape=list(xs))] + ([] if const else [tensor("w", shape=list(ws))])
    inits = ([init("w", w)] if const else []) + ([init("b", b)] if bias else [])
    node = helper.make_node("Conv", names, ["y"], **attrs)
    model = make_model([node], inputs, [tensor("y")], inits)
    seen = {
        _bits(graphrt.Session(model, mode="exact", intra_op_threads=t).run(None, feeds)[0])
        for t in (1, 2)
    }
    assert len(seen) == 1
    pads = attrs.get("pads", [0] * 2 * r)
    if attrs.get("auto_pad") == "SAME_UPPER":  # 3x3, stride 1: one on each side
        pads = [1] * 2 * r
    strides, dil = attrs.get("strides", [1] * r), attrs.get("dilations", [1] * r)
    want = _canonical_conv(x, w, b, pads, strides, dil, attrs.get("group", 1))
    assert seen.pop() == _bits(want)


def test_exact_conv_in_float16_accumulates_in_float32_and_rounds_once():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float16)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float16)
    b = rng.standard_normal(3).astype(np.float16)
    model = make_model(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])],
        [tensor("x", TensorProto.FLOAT16, [1, 2, 5, 5])],
        [tensor("y", TensorProto.FLOAT16)],
        [init("w", w), init("b", b)],
    )
    got = graphrt.Session(model, mode="exact").run(None, {"x": x})[0]
    f32 = np.float32
    want = _canonical_conv(x.astype(f32), w.astype(f32), b.astype(f32), [1] * 4, [1, 1], [1, 1], 1)
    assert _bits(got) == _bits(want.astype(np.float16))


def _canonical_window_sum(x, k):
    """Each k x k window (stride 1, no padding) summed tap by tap in row-major order."""
    n, c, h, w = x.shape
    out = np.empty((n, c, h - k + 1, w - k + 1), x.dtype)
    for idx in itertools.product(*(range(v) for v in out.shape)):
        i, j = idx[2:]
        taps = [x[idx[0], idx[1], i + a, j + b] for a in range(k) for b in range(k)]
        acc = taps[0]
        for t in taps[1:]:
            acc = x.dtype.type(acc + t)
        out[idx] = acc
    return out


def test_exact_pools_sum_in_order_and_canonicalise_max():
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((2, 3, 6, 6)) * 1e4).astype(np.float32)
    x[0, 0, :2, :2] = -0.0  # a window of -0 only
    x[1, 2, 4, 4] = np.float32(np.nan) * -1  # a negative NaN
    nodes = [
        helper.make_node("AveragePool", ["x"], ["avg"], kernel_shape=[3, 3]),
        helper.make_node("MaxPool", ["x"], ["max"], kernel_shape=[2, 2]),
        helper.make_node("GlobalAveragePool", ["x"], ["gap"]),
        helper.make_node("GlobalMaxPool", ["x"], ["gmp"]),
    ]
    model = make_model(
        nodes, [tensor("x", shape=[2, 3, 6, 6])], [tensor(n) for n in ("avg", "max", "gap", "gmp")]
    )
    outs = [
        graphrt.Session(model, mode="exact", intra_op_threads=t).run(None, {"x": x}) for t in (1, 3)
    ]
    assert [_bits(a) for a in outs[0]] == [_bits(a) for a in outs[1]]
    avg, mx, gap, gmp = outs[0]
    with np.errstate(invalid="ignore"):
        want_avg = _canonical_window_sum(x, 3) / np.float32(9)
    assert _bits(avg) == _bits(np.where(np.isnan(want_avg), np.float32(np.nan), want_avg))
    u32 = mx.view(np.uint32)
    assert u32[0, 0, 0, 0] == 0  # the maximum of -0s is +0 in exact mode
    assert (
        u32[1, 2, 3, 3] == u32[1, 2, 4, 4] == 0x7FC00000
        and gmp.view(np.uint32)[1, 2, 0, 0] == 0x7FC00000
    )
    rows = x.reshape(2, 3, 36)
    acc = rows[:, :, 0].copy()
    for k in range(1, 36):
        acc = acc + rows[:, :, k]  # float32 adds, ascending positions
    with np.errstate(invalid="ignore"):
        want_gap = (acc / np.float32(36)).reshape(2, 3, 1, 1)
    assert _bits(gap) == _bits(np.where(np.isnan(want_gap), np.float32(np.nan), want_gap))


def test_exact_batchnorm_gives_the_same_bits_for_constant_and_run_time_parameters():
    rng = np.random.default_rng(12)
    c = 5
    params = {
        "s": (rng.random(c) + 0.5).astype(np.float32),
        "bb": rng.standard_normal(c).astype(np.float32),
        "mean": rng.standard_normal(c).astype(np.float32),
        "var": (rng.random(c) + 0.5).astype(np.float32),
    }
    x = rng.standard_normal((2, c, 4, 4)).astype(np.float32)
    node = helper.make_node("BatchNormalization", ["x", "s", "bb", "mean", "var"], ["y"])
    const = make_model(
        [node], [tensor("x", shape=[2, c, 4, 4])], [tensor("y")],
        [init(k, v) for k, v in params.items()],
    )  # fmt: skip
    dynamic = make_model(
        [node],
        [tensor("x", shape=[2, c, 4, 4])] + [tensor(k, shape=[c]) for k in params],
        [tensor("y")],
    )
    a = graphrt.Session(const, mode="exact").run(None, {"x": x})[0]
    b = graphrt.Session(dynamic, mode="exact").run(None, {"x": x, **params})[0]
    assert _bits(a) == _bits(b)
    # the documented fold: a = s / sqrt(var + eps), b = bb - mean * a in float64, rounded once
    p64 = {k: v.astype(np.float64).reshape(1, c, 1, 1) for k, v in params.items()}
    scale = p64["s"] / np.sqrt(p64["var"] + 1e-5)
    shift = p64["bb"] - p64["mean"] * scale
    want = x * scale.astype(np.float32) + shift.astype(np.float32)
    assert _bits(a) == _bits(want.astype(np.float32))


def test_batchnorm_training_is_refused_in_exact_mode():
    c = 3
    node = helper.make_node(
        "BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1
    )
    model = make_model(
        [node],
        [tensor("x", shape=[2, c, 2, 2])],
        [tensor("y"), tensor("rm"), tensor("rv")],
        [init(n, np.ones(c, np.float32)) for n in ("s", "b", "m", "v")],
    )
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(model, mode="exact").run(None, {"x": np.ones((2, c, 2, 2), np.float32)})
    assert info.value.kind == "exact_mode_unavailable"


def test_residual_block_with_sum_and_mean_is_exact():
    """Conv -> BatchNorm -> Relu -> Conv, a skip connection through Sum, Mean of three: the
    shape of a ResNet block; Sum and Mean fold their inputs in order."""
    rng = np.random.default_rng(21)
    c = 4
    f32 = np.float32
    inits = [
        init("w1", (rng.standard_normal((c, c, 3, 3)) * 0.3).astype(f32)),
        init("w2", (rng.standard_normal((c, c, 3, 3)) * 0.3).astype(f32)),
        init("s", (rng.random(c) + 0.5).astype(f32)),
        init("bb", rng.standard_normal(c).astype(f32)),
        init("mean", rng.standard_normal(c).astype(f32)),
        init("var", (rng.random(c) + 0.5).astype(f32)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "s", "bb", "mean", "var"], ["n1"]),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Sum", ["c2", "x", "r1"], ["s1"]),
        helper.make_node("Mean", ["s1", "x", "c2"], ["y"]),
    ]
    model = make_model(nodes, [tensor("x", shape=["N", c, 8, 8])], [tensor("y")], inits)
    x = rng.standard_normal((3, c, 8, 8)).astype(f32)
    seen = set()
    for threads in (1, 2, 4):
        sess = graphrt.Session(model, mode="exact", intra_op_threads=threads)
        seen.add(_bits(sess.run(None, {"x": x})[0]))
        seen.add(_bits(sess.run(None, {"x": x})[0]))
    assert len(seen) == 1
    got = np.frombuffer(seen.pop(), f32).reshape(x.shape)
    # the fold of Sum and Mean, from the exact intermediate values
    probe = make_model(
        nodes[:4], [tensor("x", shape=["N", c, 8, 8])], [tensor("c2"), tensor("r1")], inits
    )
    c2, r1 = graphrt.Session(probe, mode="exact").run(None, {"x": x})
    s1 = (c2 + x) + r1
    assert _bits(got) == _bits(((s1 + x) + c2) / f32(3))
    ref = graphrt.Session(_as_double(model)).run(None, {"x": x.astype(np.float64)})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def _canonical_normalize_rows(x2, eps):
    """Mean and variance per row summed in ascending order, each square rounded; then
    (x - mean) * (1 / sqrt(var + eps)), one rounded operation at a time (float32)."""
    f = np.float32
    out = np.empty_like(x2)
    for i, row in enumerate(x2):
        acc = row[0]
        for v in row[1:]:
            acc = f(acc + v)
        mean = f(acc / f(len(row)))
        cen = [f(v - mean) for v in row]
        sq = f(cen[0] * cen[0])
        for v in cen[1:]:
            sq = f(sq + f(v * v))
        inv = f(f(1) / f(np.sqrt(f(f(sq / f(len(row))) + f(eps)))))
        out[i] = [f(v * inv) for v in cen]
    return out


def test_exact_layer_and_instance_normalization_sum_rows_in_order():
    rng = np.random.default_rng(30)
    x = (rng.standard_normal((2, 3, 4, 5)) * 50 + 7).astype(np.float32)
    scale = rng.standard_normal(20).astype(np.float32).reshape(4, 5)
    bias = rng.standard_normal(20).astype(np.float32).reshape(4, 5)
    ln = make_model(
        [helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=2, epsilon=1e-3)],
        [tensor("x", shape=[2, 3, 4, 5])], [tensor("y")], [init("s", scale), init("b", bias)],
    )  # fmt: skip
    got = graphrt.Session(ln, mode="exact").run(None, {"x": x})[0]
    norm = _canonical_normalize_rows(x.reshape(6, 20), 1e-3).reshape(2, 3, 4, 5)
    assert _bits(got) == _bits((norm * scale) + bias)
    cs, cb = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    inorm = make_model(
        [helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"])],
        [tensor("x", shape=[2, 3, 4, 5])], [tensor("y")], [init("s", cs), init("b", cb)],
    )  # fmt: skip
    sessions = [graphrt.Session(inorm, mode="exact", intra_op_threads=t) for t in (1, 2)]
    got = [s.run(None, {"x": x})[0] for s in sessions]
    assert _bits(got[0]) == _bits(got[1])
    norm = _canonical_normalize_rows(x.reshape(6, 20), 1e-5).reshape(2, 3, 20)
    want = norm * cs[:, None] + cb[:, None]
    assert _bits(got[0]) == _bits(want.reshape(x.shape))


@pytest.mark.parametrize(
    ("shape", "axis"), [((1, 1000), 1), ((3, 9000), 1), ((4, 700, 3), 1), ((9,), 0), ((5, 6), 1)]
)
def test_canonical_sum_adds_each_axis_in_index_order(shape, axis):
    """Given a work array, long axes go through np.add.accumulate: the bits of the loop without
    one (acc = t0; acc = acc + t1; ...) and of float32 scalar adds, a -0 first term and a NaN
    included."""
    from graphrt_ops_basic._util import canonical_sum

    rng = np.random.default_rng(sum(shape))
    t = (rng.standard_normal(shape) * np.exp(rng.standard_normal(shape) * 8)).astype(np.float32)
    t[(slice(None),) * axis + (0,)] = -0.0
    if t.size > shape[axis]:  # a NaN in the last sum only (the others stay finite)
        t.flat[-1] = np.nan
    acc = np.empty([1 if i == axis else d for i, d in enumerate(shape)], np.float32)
    canonical_sum(t, axis, acc, np.empty_like(t))
    looped = np.empty_like(acc)
    canonical_sum(t, axis, looped)
    np.testing.assert_array_equal(looped.view(np.uint32), acc.view(np.uint32))
    moved = np.moveaxis(t, axis, -1).reshape(-1, shape[axis])
    want = []
    for row in moved:  # one float32 scalar add per term
        total = row[0]
        for term in row[1:]:
            total = np.float32(total + term)
        want.append(total)
    got = np.moveaxis(acc, axis, -1).reshape(-1)
    np.testing.assert_array_equal(got.view(np.uint32), np.array(want, np.float32).view(np.uint32))
