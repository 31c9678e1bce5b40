"""Native depthwise convolution: values against an independent float64 reference on every
ISA, the same bits over thread counts, sessions against the numpy path, and refusals."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import strategies as st
from onnx import helper

import graphrt
from graphrt.explain import runs_on
from tests._models import init, make_model, ort_session, tensor
from tests.simd._simd import ALL_PATHS, bits, on_every_isa, path_or_skip, simd

F32 = np.float32


def depthwise_reference(x, w, bias, strides, dilations, pads, out, relu):
    """Tap by tap over a zero-padded copy, in float64."""
    n, c, h, width = x.shape
    kh, kw = w.shape[2:]
    grow = [out[a] * strides[a] + (w.shape[2 + a] - 1) * dilations[a] + 1 for a in (0, 1)]
    xp = np.zeros((n, c, pads[0] + max(h, grow[0]), pads[1] + max(width, grow[1])))
    xp[:, :, pads[0] : pads[0] + h, pads[1] : pads[1] + width] = x
    y = np.zeros((n, c, *out))
    for ky in range(kh):
        for kx in range(kw):
            oy, ox = ky * dilations[0], kx * dilations[1]
            taps = xp[:, :, oy : oy + out[0] * strides[0] : strides[0],
                      ox : ox + out[1] * strides[1] : strides[1]]  # fmt: skip
            y += taps * w[None, :, 0, ky, kx, None, None].astype(np.float64)
    if bias is not None:
        y += bias[None, :, None, None]
    return np.maximum(y, 0) if relu else y


@st.composite
def geometries(draw):
    kernel = (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    strides = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilations = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pads = (draw(st.integers(0, 3)), draw(st.integers(0, 3)))
    size = [draw(st.integers(1, 20)), draw(st.integers(1, 40))]
    out = []
    for a in range(2):
        span = size[a] + 2 * pads[a] - dilations[a] * (kernel[a] - 1) - 1
        if span < 0:
            size[a] -= span
            span = 0
        out.append(span // strides[a] + 1)
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 6)), *size)
    return dict(shape=shape, kernel=kernel, strides=strides, dilations=dilations, pads=pads,
                out=tuple(out), bias=draw(st.booleans()), relu=draw(st.booleans()),
                seed=draw(st.integers(0, 2**31)))  # fmt: skip


@on_every_isa(geometries())
def test_depthwise_values(isa, g):
    rng = np.random.default_rng(g["seed"])
    x = rng.standard_normal(g["shape"]).astype(F32)
    c = g["shape"][1]
    w = rng.standard_normal((c, 1, *g["kernel"])).astype(F32)
    bias = rng.standard_normal(c).astype(F32) if g["bias"] else None
    y = np.full((*g["shape"][:2], *g["out"]), np.nan, F32)
    act = "relu" if g["relu"] else "none"
    call = simd.DepthwiseCall(x, w, bias, y, g["strides"], g["dilations"], g["pads"], act, isa)
    call()
    want = depthwise_reference(
        x, w, bias, g["strides"], g["dilations"], g["pads"], g["out"], g["relu"]
    )
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("isa", ALL_PATHS)
def test_depthwise_bits_do_not_depend_on_threads(isa):
    path_or_skip(isa)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 37, 19, 23)).astype(F32)
    x[0, 3, 4, 5] = np.nan
    w = rng.standard_normal((37, 1, 3, 3)).astype(F32)
    bias = rng.standard_normal(37).astype(F32)
    results = []
    for threads in (1, 2, 4):
        y = np.empty((2, 37, 10, 12), F32)
        simd.DepthwiseCall(x, w, bias, y, (2, 2), (1, 1), (1, 1), "relu", isa, threads)()
        results.append(bits(y))
    assert all(np.array_equal(results[0], r) for r in results[1:])
    assert np.isnan(y[0, 3]).any()  # a NaN input stays NaN through the Relu


def test_depthwise_refusals():
    isa = simd.available_isas()[0]
    x = np.ones((1, 2, 5, 5), F32)
    w = np.ones((2, 1, 3, 3), F32)
    y = np.empty((1, 2, 3, 3), F32)
    ok = [(1, 1), (1, 1), (0, 0), "none", isa]
    simd.DepthwiseCall(x, w, None, y, *ok)()
    np.testing.assert_array_equal(y, 9.0)
    with pytest.raises(ValueError, match="depthwise"):
        simd.DepthwiseCall(x, np.ones((2, 2, 3, 3), F32), None, y, *ok)
    with pytest.raises(ValueError, match="depthwise"):
        simd.DepthwiseCall(x, w, None, np.empty((1, 3, 3, 3), F32), *ok)
    with pytest.raises(ValueError, match="one float per channel"):
        simd.DepthwiseCall(x, w, np.ones(3, F32), y, *ok)
    with pytest.raises(ValueError, match="strides"):
        simd.DepthwiseCall(x, w, None, y, (0, 1), *ok[1:])
    with pytest.raises(ValueError, match="activation"):
        simd.DepthwiseCall(x, w, None, y, *ok[:3], "sigmoid", isa)
    with pytest.raises(ValueError, match="unit column stride"):
        simd.DepthwiseCall(np.ones((1, 2, 5, 10), F32)[..., ::2], w, None, y, *ok)
    shared = np.ones(50 + 18, F32)
    with pytest.raises(ValueError, match="overlap"):
        simd.DepthwiseCall(shared[:50].reshape(1, 2, 5, 5), w, None,
                           shared[40:58].reshape(1, 2, 3, 3), *ok)  # fmt: skip
    # a pad far outside reads only zeros (nothing staged for it); a dilation that would stage
    # 2^41 rows is refused before anything is allocated
    far = np.full((1, 2, 1, 1), 7.0, F32)
    simd.DepthwiseCall(x, w, None, far, (1, 1), (1, 1), (2**40, 0), "none", isa)()
    np.testing.assert_array_equal(far, 0.0)
    with pytest.raises(ValueError, match="unsupported"):
        simd.DepthwiseCall(x, w, None, far, (1, 1), (2**40, 1), (0, 0), "none", isa)


def _depthwise_model(channels, relu, stride, fused_bias=True):
    rng = np.random.default_rng(channels)
    nodes = [
        helper.make_node(
            "Conv",
            ["x", "w", "b"] if fused_bias else ["x", "w"],
            ["c"],
            group=channels,
            pads=[1, 1, 1, 1],
            strides=[stride, stride],
        ),
        helper.make_node("Relu" if relu else "Identity", ["c"], ["y"]),
    ]
    inits = [init("w", rng.standard_normal((channels, 1, 3, 3)).astype(F32))]
    if fused_bias:
        inits.append(init("b", rng.standard_normal(channels).astype(F32)))
    return make_model(nodes, [tensor("x", shape=[2, channels, 15, 17])], [tensor("y")], inits)


@pytest.mark.parametrize("path", ["avx2", "avx512"])
@pytest.mark.parametrize(
    "relu, stride, bias", [(True, 1, True), (False, 2, True), (True, 2, False)]
)
def test_depthwise_sessions_match_numpy(path, relu, stride, bias):
    path_or_skip(path)
    model = _depthwise_model(24, relu, stride, bias)
    x = np.random.default_rng(1).standard_normal((2, 24, 15, 17)).astype(F32)
    (want,) = graphrt.Session(model, kernel_path="numpy").run(None, {"x": x})
    results = []
    for threads in (1, 2):
        sess = graphrt.Session(model, kernel_path=path, intra_op_threads=threads)
        plan = sess.plan_for([x])
        convs = [s for s in plan.steps if "Conv" in s.node.info.op_type]
        assert convs and all(runs_on(s) == "native" for s in convs)
        (got,) = sess.run(None, {"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        results.append(bits(got))
    assert np.array_equal(results[0], results[1])


def test_thin_groups_and_residuals_stay_on_numpy():
    """Two channels per group is no depthwise layer: the numpy kernel, same values."""
    fast = [isa for isa in simd.available_isas() if isa != "scalar"]
    if not fast:
        pytest.skip("fast mode's native convolution needs avx2 or avx512")
    isa = fast[0]
    rng = np.random.default_rng(3)
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=4, pads=[1, 1, 1, 1])
    model = make_model(
        [node], [tensor("x", shape=[1, 8, 9, 9])], [tensor("y")],
        [init("w", rng.standard_normal((8, 2, 3, 3)).astype(F32))],
    )  # fmt: skip
    sess = graphrt.Session(model, kernel_path=isa)
    x = rng.standard_normal((1, 8, 9, 9)).astype(F32)
    (step,) = [s for s in sess.plan_for([x]).steps if s.node.info.op_type == "Conv"]
    assert runs_on(step) == "numpy"


# ---- channels in the lanes (small maps) ------------------------------------------------------
# Below two vectors of output columns (or with a column stride) the kernel stages a block of
# channels channels-last and puts them across the lanes; its call says which layout runs.

FAST_PATHS = ("avx2", "avx512")


def _conv_model(shape, kernel, strides, dilations, pads, relu, bias, seed):
    """One depthwise Conv (pads: begin_h, begin_w, end_h, end_w), optionally then a Relu."""
    c = shape[1]
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((c, 1, *kernel)).astype(F32)
    b = rng.standard_normal(c).astype(F32) if bias else None
    conv = helper.make_node(
        "Conv", ["x", "w", "b"] if bias else ["x", "w"], ["c" if relu else "y"], group=c,
        kernel_shape=list(kernel), strides=list(strides), dilations=list(dilations),
        pads=list(pads),
    )  # fmt: skip
    nodes = [conv] + ([helper.make_node("Relu", ["c"], ["y"])] if relu else [])
    inits = [init("w", w)] + ([init("b", b)] if bias else [])
    model = make_model(nodes, [tensor("x", shape=list(shape))], [tensor("y")], inits)
    return model, w, b


# (x shape, kernel, strides, dilations, pads begin h/w + end h/w, relu, bias)
SMALL_MAPS = [
    ((1, 272, 14, 14), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), False, True),
    ((1, 37, 14, 14), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), True, True),
    ((2, 21, 7, 7), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), True, False),
    ((2, 13, 7, 7), (3, 3), (2, 2), (1, 1), (0, 1, 2, 1), True, True),
    ((1, 5, 5, 3), (3, 2), (1, 2), (2, 1), (2, 0, 1, 3), False, True),
    ((2, 19, 14, 14), (3, 3), (1, 1), (2, 2), (2, 2, 2, 2), True, True),
    ((1, 44, 28, 28), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), False, True),
    ((1, 3, 9, 11), (5, 3), (2, 1), (1, 2), (3, 0, 0, 2), True, False),
]


@pytest.mark.parametrize("isa", FAST_PATHS)
@pytest.mark.parametrize("case", SMALL_MAPS, ids=lambda c: "x".join(map(str, c[0])))
def test_lanes_kernel_matches_onnxruntime(isa, case):
    path_or_skip(isa)
    shape, kernel, strides, dilations, pads, relu, bias = case
    model, w, b = _conv_model(shape, kernel, strides, dilations, pads, relu, bias, shape[1])
    x = np.random.default_rng(7).standard_normal(shape).astype(F32)
    x[0, min(2, shape[1] - 1), 1, 1] = np.nan  # NaN stays NaN through the bias and the Relu
    (want,) = ort_session(model).run(None, {"x": x})
    results = []
    for threads in (1, 2, 3):
        y = np.full(want.shape, 7.0, F32)
        act = "relu" if relu else "none"
        call = simd.DepthwiseCall(x, w, b, y, strides, dilations, pads[:2], act, isa, threads)
        assert call.kernel == "lanes"
        call()
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
        results.append(bits(y))
    assert all(np.array_equal(results[0], r) for r in results[1:])


@pytest.mark.parametrize("isa", FAST_PATHS)
def test_lanes_kernel_is_picked_by_shape(isa):
    """Narrow rows or a column stride: the lanes; wide unit-stride rows: one plane per vector."""
    path_or_skip(isa)
    lanes = 16 if isa == "avx512" else 8

    def kernel(size, stride):
        x = np.zeros((1, 4, size, size), F32)
        w = np.zeros((4, 1, 3, 3), F32)
        out = (size - 1) // stride + 1
        y = np.empty((1, 4, out, out), F32)
        return simd.DepthwiseCall(x, w, None, y, (stride, stride), (1, 1), (1, 1), "none", isa)

    assert kernel(2 * lanes - 1, 1).kernel == "lanes"
    assert kernel(2 * lanes, 1).kernel == "planes"
    assert kernel(56, 2).kernel == "lanes"
    assert kernel(112, 1).kernel == "planes"
    assert kernel(400, 2).kernel == "planes"  # the channels-last block would outgrow the cache
    scalar = simd.DepthwiseCall(
        np.zeros((1, 4, 7, 7), F32), np.zeros((4, 1, 3, 3), F32), None,
        np.empty((1, 4, 7, 7), F32), (1, 1), (1, 1), (1, 1), "none", "scalar",
    )  # fmt: skip
    assert scalar.kernel == "planes"


def test_lanes_and_planes_give_the_same_bits():
    """A 20-wide unit-stride map runs on one plane per vector on avx2, in the lanes on avx512:
    the same sum order (bias, then the taps' fused multiply-adds), so the same bits."""
    for isa in FAST_PATHS:
        path_or_skip(isa)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 29, 20, 20)).astype(F32)
    x[1, 28, 0, 0] = np.inf
    w = rng.standard_normal((29, 1, 3, 3)).astype(F32)
    bias = rng.standard_normal(29).astype(F32)
    got = {}
    for isa in FAST_PATHS:
        y = np.empty((2, 29, 20, 20), F32)
        call = simd.DepthwiseCall(x, w, bias, y, (1, 1), (1, 1), (1, 1), "relu", isa, 2)
        call()
        got[call.kernel] = bits(y)
    assert set(got) == {"lanes", "planes"}
    assert np.array_equal(got["lanes"], got["planes"])


@pytest.mark.parametrize("path", FAST_PATHS)
def test_small_map_sessions_run_the_lanes_kernel(path, monkeypatch):
    path_or_skip(path)
    from graphrt_ops_simd import conv as simd_conv

    made = []
    real = simd_conv._native.DepthwiseCall

    def recording(*args, **kwargs):
        call = real(*args, **kwargs)
        made.append(call.kernel)
        return call

    monkeypatch.setattr(simd_conv._native, "DepthwiseCall", recording)
    shape = (2, 40, 7, 7)
    model, *_ = _conv_model(shape, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), True, True, 3)
    x = np.random.default_rng(2).standard_normal(shape).astype(F32)
    (want,) = ort_session(model).run(None, {"x": x})
    results = []
    for threads in (1, 2):
        sess = graphrt.Session(model, kernel_path=path, intra_op_threads=threads)
        (got,) = sess.run(None, {"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        results.append(bits(got))
    assert np.array_equal(results[0], results[1])
    assert made and set(made) == {"lanes"}
