"""The native convolution + MaxPool in bands of rows (ConvPoolCall, src/native/conv_pool.inc):
the bits of the direct kernel's ConvCall followed by MaxPoolCall, on every ISA and thread
count, and so for the lanes kernel's bands kept channels-last; and what it refuses."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import strategies as st
from onnx import helper

import graphrt
from tests._models import init, make_model, tensor
from tests.simd._simd import bits, on_every_isa, path_or_skip, recording, simd

N = simd._native
RNG = np.random.default_rng(23)


def _arrays(n, c, m, h, w, k, s, p, isa, kernel="direct"):
    x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    x.reshape(-1)[:2] = [np.nan, -0.0]  # a NaN and a signed zero through both kernels
    wt = RNG.standard_normal((m, c, k, k)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    plan = N.conv_plan(wt, 1, [n, c, h, w], [s, s], [1, 1], [p, p], [oh, ow], isa, kernel)
    return x, b, plan, (n, m, oh, ow)


def _both(g, isa, threads, kernel="direct"):
    """The unfused pair's output and ConvPoolCall's, from one plan (None where the plan does
    not band or the pool has no output)."""
    x, b, plan, conv_shape = _arrays(
        g["n"], g["c"], g["m"], g["h"], g["w"], g["k"], g["s"], g["p"], isa, kernel
    )
    pk, ps, pp, pd = g["pk"], g["ps"], g["pp"], g["pd"]
    span = (pk - 1) * pd + 1
    po = [(conv_shape[2 + a] + 2 * pp - span) // ps + 1 for a in (0, 1)]
    if min(po) < 1:
        return None
    work = np.empty(plan.work_floats, np.float32)
    conv = np.empty(conv_shape, np.float32)
    want = np.empty((*conv_shape[:2], *po), np.float32)
    got = np.full_like(want, 7.0)
    window = ([pk, pk], [ps, ps], [pd, pd], [pp, pp])
    N.ConvCall(plan, x, work, conv, b, g["act"], threads)()
    N.MaxPoolCall(conv, want, *window, isa, 0, -1, threads)()
    if not (plan.row_bands or plan.lanes_bands):
        return None
    N.ConvPoolCall(plan, x, work, got, b, g["act"], *window, isa, threads)()
    return got, want


GEOMETRY = st.fixed_dictionaries(
    {
        "n": st.integers(1, 2),
        "c": st.integers(1, 5),
        "m": st.sampled_from([1, 6, 16, 20, 33, 64]),
        "h": st.integers(9, 70),
        "w": st.integers(9, 70),
        "k": st.sampled_from([1, 3, 5]),
        "s": st.integers(1, 2),
        "p": st.integers(0, 1),
        "pk": st.integers(1, 3),
        "ps": st.integers(1, 3),
        "pp": st.integers(0, 1),
        "pd": st.integers(1, 2),
        "act": st.sampled_from(["none", "relu"]),
    }
).filter(lambda g: g["pp"] < (g["pk"] - 1) * g["pd"] + 1)


@on_every_isa(GEOMETRY, examples=40)
def test_bands_give_the_unfused_bits(isa, g):
    for threads in (1, 3):
        both = _both(g, isa, threads)
        if both is None:
            return
        got, want = both
        np.testing.assert_array_equal(bits(got), bits(want))


@on_every_isa(GEOMETRY, examples=40)
def test_blocked_bands_give_the_unfused_bits(isa, g):
    """The lanes kernel's rows kept channels-last, pooled from whole vectors of channels
    (channel counts with a partial last vector among them: 6, 20, 33)."""
    if isa == "scalar":
        pytest.skip("the scalar path has no lanes kernel (its vector is one float)")
    for threads in (1, 3):
        both = _both(g, isa, threads, "lanes")
        if both is None:
            return
        got, want = both
        np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize("kernel", ["direct", "lanes"])
@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512"])
def test_the_squeezenet_stem(isa, kernel):
    path_or_skip(isa)
    if isa == "scalar" and kernel == "lanes":
        pytest.skip("the scalar path has no lanes kernel (its vector is one float)")
    g = dict(n=1, c=3, m=64, h=224, w=224, k=3, s=2, p=0, pk=3, ps=2, pp=0, pd=1, act="relu")
    for threads in (1, 2, 4):
        got, want = _both(g, isa, threads, kernel)
        np.testing.assert_array_equal(bits(got), bits(want))


def test_a_blocked_plan_refuses_another_isa():
    path_or_skip("avx512")
    x, b, plan, (n, m, _, _) = _arrays(1, 3, 32, 30, 30, 3, 1, 1, "avx512", "lanes")
    assert plan.lanes_bands
    work = np.empty(plan.work_floats, np.float32)
    y = np.empty((n, m, 15, 15), np.float32)
    with pytest.raises(ValueError, match="isa avx2 is not the convolution plan's"):
        N.ConvPoolCall(plan, x, work, y, b, "none", [2, 2], [2, 2], [1, 1], [0, 0], "avx2")


def test_refusals():
    isa = simd.available_isas()[-1]
    x, b, plan, (n, m, _, _) = _arrays(1, 3, 16, 30, 30, 3, 1, 1, isa)
    work = np.empty(plan.work_floats, np.float32)
    y = np.empty((n, m, 15, 15), np.float32)
    with pytest.raises(ValueError, match="must each read a row and a column"):
        N.ConvPoolCall(plan, x, work, y, b, "none", [2, 2], [2, 2], [1, 1], [2, 2], isa)
    with pytest.raises(ValueError, match="images and channels"):
        bad = np.empty((n, m + 1, 15, 15), np.float32)
        N.ConvPoolCall(plan, x, work, bad, b, "none", [2, 2], [2, 2], [1, 1], [0, 0], isa)
    packed = N.conv_plan(
        RNG.standard_normal((16, 3, 3, 3)).astype(np.float32), 1, [1, 3, 30, 30], [1, 1],
        [1, 1], [1, 1], [30, 30], isa, "packed",
    )  # fmt: skip
    assert not packed.row_bands
    with pytest.raises(ValueError, match="bands of rows"):
        N.ConvPoolCall(packed, x, np.empty(0, np.float32), y, b, "none", [2, 2], [2, 2], [1, 1],
                       [0, 0], isa)  # fmt: skip


def test_a_session_runs_the_stem_in_bands(monkeypatch):
    made: list = []
    monkeypatch.setattr(N, "ConvPoolCall", recording(N.ConvPoolCall, made))
    w = RNG.standard_normal((64, 3, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], strides=[2, 2]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[3, 3], strides=[2, 2]),
    ]
    model = make_model(nodes, [tensor("x", shape=[1, 3, 224, 224])], [tensor("y")], [init("w", w)])
    feed = {"x": RNG.standard_normal((1, 3, 224, 224)).astype(np.float32)}
    outs, paths = {}, set()
    for threads in (1, 2):
        sess = graphrt.Session(model, intra_op_threads=threads)
        outs[threads] = sess.run(None, feed)[0]
        paths.add(sess.kernel_path)  # (GRAPHRT_KERNEL_PATH may force one: tox's scalar env)
    plain = graphrt.Session(model, optimization_level="none").run(None, feed)[0]
    (path,) = paths
    assert len(made) == (2 if path in ("avx2", "avx512") else 0)  # fast mode's native paths
    # a 3-channel window: the lanes kernel kept channels-last on avx512, else the direct one
    assert {args[0].kernel for args in made} <= {"lanes" if path == "avx512" else "direct"}
    for got in outs.values():
        np.testing.assert_array_equal(bits(got), bits(plain))


def test_explain_says_native_and_a_strided_feed_is_read_each_run():
    w = RNG.standard_normal((64, 3, 3, 3)).astype(np.float32)
    nodes = [  # light_squeezenet's stem: banded on avx2 and avx512
        helper.make_node("Conv", ["x", "w"], ["c"], strides=[2, 2]),
        helper.make_node("MaxPool", ["c"], ["y"], kernel_shape=[3, 3], strides=[2, 2]),
    ]
    model = make_model(nodes, [tensor("x", shape=[1, 3, 224, 224])], [tensor("y")], [init("w", w)])
    sess = graphrt.Session(model)
    plain = graphrt.Session(model, optimization_level="none")
    report = sess.explain({"x": np.zeros((1, 3, 224, 224), np.float32)})
    step = next(line.split() for line in report.splitlines() if "FusedConvPool  static" in line)
    assert step[4] == ("native" if sess.kernel_path in ("avx2", "avx512") else "numpy")
    for seed in (1, 2):  # every other column of a wider array: a view, read afresh each run
        big = np.random.default_rng(seed).standard_normal((1, 3, 224, 448), np.float32)
        feed = {"x": big[..., ::2]}
        np.testing.assert_array_equal(bits(sess.run(None, feed)[0]), bits(plain.run(None, feed)[0]))
