"""Exact Conv and FusedConv on the native paths (graphrt_ops_simd.conv_exact): the same bits as
ops-basic's exact Conv on the numpy path (docs/exact-mode.md's order) on every ISA, with 1, 2
and 4 intra-op threads and however the work is cut into units; signed zeros, infinities and
NaN included; light_resnet50 (with random weights) end to end."""

from __future__ import annotations

import contextlib

import numpy as np
import onnx
import pytest
from hypothesis import strategies as st
from onnx import helper, numpy_helper

import graphrt
from tests._models import init, light_model, make_model, tensor
from tests.simd._simd import ALL_PATHS, ISAS, bits, on_every_isa, path_or_skip

conv_exact = pytest.importorskip("graphrt_ops_simd.conv_exact")

F32 = np.float32
F32_TYPE = onnx.TensorProto.FLOAT
NAN_PAYLOAD = np.array(0xFFC12345, np.uint32).view(F32)  # a negative NaN with a payload
THREADS = (1, 2, 4)


def _values(rng: np.random.Generator, shape, specials: bool) -> np.ndarray:
    """Small integers (sums of them are exact, so signed zeros and ties are common), exact
    zeros of both signs, normals, and with ``specials`` a few NaN and infinities."""
    a = rng.standard_normal(shape).astype(F32)
    pick = rng.random(shape)
    a[pick < 0.3] = rng.integers(-2, 3, size=int((pick < 0.3).sum()))
    a[(pick >= 0.3) & (pick < 0.4)] = -0.0
    a[(pick >= 0.4) & (pick < 0.45)] = 0.0
    if specials:
        a[(pick >= 0.45) & (pick < 0.46)] = np.inf
        a[(pick >= 0.46) & (pick < 0.47)] = -np.inf
        a[(pick >= 0.47) & (pick < 0.48)] = NAN_PAYLOAD
    return a


def _out(size, k, s, d, before, after):
    return (size + before + after - d * (k - 1) - 1) // s + 1


@st.composite
def convs(draw):
    depthwise = draw(st.integers(0, 5)) == 0
    group = draw(st.sampled_from([1, 1, 2, 3]))
    cg, mg = draw(st.integers(1, 5)), draw(st.integers(1, 9))
    if depthwise:
        group, cg, mg = draw(st.integers(2, 6)), 1, 1
    kh, kw = draw(st.sampled_from([1, 1, 2, 3, 4])), draw(st.sampled_from([1, 1, 2, 3]))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pads = [draw(st.integers(0, 2)) for _ in range(4)]  # top, left, bottom, right
    h = draw(st.integers(max(1, dh * (kh - 1) + 1 - pads[0] - pads[2]), 13))
    w = draw(st.integers(max(1, dw * (kw - 1) + 1 - pads[1] - pads[3]), 21))
    return dict(
        n=draw(st.integers(1, 2)),
        c=cg * group,
        m=mg * group,
        group=group,
        h=h,
        w=w,
        kernel=(kh, kw),
        strides=(sh, sw),
        dilations=(dh, dw),
        pads=pads,
        bias=draw(st.sampled_from(["none", "const", "input"])),
        weight=draw(st.sampled_from(["const", "const", "input"])),
        op=draw(st.sampled_from(["Conv", "Conv", "FusedConv"])),
        act=draw(st.sampled_from(["", "Relu", "Sigmoid"])),
        residual=draw(st.booleans()),
        z_first=draw(st.booleans()),
        specials=draw(st.booleans()),
        tiny_units=draw(st.booleans()),  # the smallest units and blocks the shapes allow
        seed=draw(st.integers(0, 2**31)),
    )


def _model(g: dict):
    """The Conv (or FusedConv) of ``g`` and its feed."""
    rng = np.random.default_rng(g["seed"])
    n, c, m, group, (kh, kw) = g["n"], g["c"], g["m"], g["group"], g["kernel"]
    x = _values(rng, (n, c, g["h"], g["w"]), g["specials"])
    wt = _values(rng, (m, c // group, kh, kw), g["specials"])
    b = _values(rng, (m,), g["specials"])
    inputs, inits, feed = [tensor("x", shape=list(x.shape))], [], {"x": x}
    names = ["x", "w"]
    if g["weight"] == "const":
        inits.append(init("w", wt))
    else:
        inputs.append(tensor("w", shape=list(wt.shape)))
        feed["w"] = wt
    if g["bias"] != "none":
        names.append("b")
        if g["bias"] == "const":
            inits.append(init("b", b))
        else:
            inputs.append(tensor("b", shape=[m]))
            feed["b"] = b
    attrs = dict(
        kernel_shape=[kh, kw],
        strides=list(g["strides"]),
        dilations=list(g["dilations"]),
        pads=g["pads"],
        group=group,
    )
    domains: tuple[str, ...] = ()
    if g["op"] == "FusedConv":
        domains = ("com.graphrt",)
        attrs.update(activation=g["act"], z_first=int(g["z_first"]))
        if g["residual"]:
            while len(names) < 3:
                names.append("")
            names.append("z")
            oh = _out(g["h"], kh, g["strides"][0], g["dilations"][0], g["pads"][0], g["pads"][2])
            ow = _out(g["w"], kw, g["strides"][1], g["dilations"][1], g["pads"][1], g["pads"][3])
            feed["z"] = _values(rng, (n, m, oh, ow), g["specials"])
            inputs.append(tensor("z", shape=list(feed["z"].shape)))
    node = helper.make_node(g["op"], names, ["y"], domain=domains[0] if domains else "", **attrs)
    return make_model([node], inputs, [tensor("y")], inits, domains=domains), feed


def _session(model, path: str, threads: int = 1) -> graphrt.Session:
    return graphrt.Session(
        model, mode="exact", kernel_path=path, intra_op_threads=threads, optimization_level="none"
    )


def _plans(sess: graphrt.Session, feed: dict) -> list:
    plan = sess.plan_for([feed[d.name] for d in sess.get_inputs()])
    return [s.prepared for s in plan.steps]


@contextlib.contextmanager
def _tiny_units(on: bool, native: bool = False):
    """Units as small as the shapes allow (every split point tried at small sizes); the
    native convolution's exact plan for any output channels per group and depth, or never."""
    with pytest.MonkeyPatch.context() as mp:
        if on:
            mp.setattr(conv_exact, "UNIT_MACS", 1)
            mp.setattr(conv_exact, "COPY_BYTES", 1)
            mp.setattr(conv_exact, "COLS_BYTES", 1)  # a block per output row
        mp.setattr(conv_exact, "NATIVE_MIN_GROUP_CHANNELS", 1 if native else 2**62)
        mp.setattr(conv_exact, "NATIVE_MIN_DEPTH", 1)
        yield


EXACT_PLANS = (conv_exact.ExactPlan, conv_exact.NativeExactPlan)


@on_every_isa(convs(), examples=40)
def test_same_bits_as_numpy_path(isa, g):
    """Both native exact paths: the convolution kernels (a constant weight) and im2col with
    the exact GEMM."""
    model, feed = _model(g)
    want = _session(model, "numpy").run(None, feed)[0]
    for native in (True, False):
        with _tiny_units(g["tiny_units"], native):
            for threads in THREADS:
                sess = _session(model, isa, threads)
                (prepared,) = _plans(sess, feed)
                kind = native and g["weight"] == "const" and g["c"] > 0
                want_plan = conv_exact.NativeExactPlan if kind else conv_exact.ExactPlan
                assert isinstance(prepared, want_plan)  # the native exact path ran
                got = sess.run(None, feed)[0]
                np.testing.assert_array_equal(
                    bits(got), bits(want), err_msg=f"{threads} threads, native {native}"
                )


# (channels, output channels, size, kernel, stride, pad, dilation): every kernel's geometry
NATIVE_LAYERS = [
    (16, 32, 14, 3, 1, 1, 1),
    (8, 24, 11, 1, 1, 0, 1),
    (3, 16, 20, 7, 2, 3, 1),
    (32, 16, 9, 3, 2, 1, 1),
    (5, 20, 13, 3, 1, 2, 2),
    (64, 64, 7, 3, 1, 1, 1),
    (16, 48, 28, 1, 2, 0, 1),
    (300, 16, 6, 3, 1, 1, 1),  # deep: the lanes kernel's quads run the depth in blocks
]


@pytest.mark.parametrize("kernel", ["packed", "direct", "lanes", "stream"])
@pytest.mark.parametrize("isa", ALL_PATHS)
def test_every_native_kernel_gives_exact_bits(isa, kernel):
    """Each of the native convolution's kernels forced on an exact plan (where it takes the
    geometry), with and without B, on 1 and 3 threads: ops-basic's bits (a -0 start, signed
    zeros, NaN and infinities among the values); Winograd refuses an exact plan."""
    path_or_skip(isa)
    native = pytest.importorskip("graphrt_ops_simd._native")
    rng = np.random.default_rng(7)
    ran = 0
    for c, m, size, k, s, p, d in NATIVE_LAYERS:
        x = _values(rng, (2, c, size, size), True)
        w = _values(rng, (m, c, k, k), True)
        w[0] = -0.0  # a row of -0 weights: its sums are -0 where every term is
        b = _values(rng, (m,), True)
        for bias in (None, b):
            names = ["x", "w"] + (["b"] if bias is not None else [])
            node = helper.make_node(
                "Conv", names, ["y"], strides=[s, s], pads=[p] * 4, dilations=[d, d]
            )
            inits = [init("w", w)] + ([init("b", bias)] if bias is not None else [])
            model = make_model([node], [tensor("x", shape=list(x.shape))], [tensor("y")], inits)
            want = _session(model, "numpy").run(None, {"x": x})[0]
            out = list(want.shape[2:])
            try:
                plan = native.conv_plan(w, 1, list(x.shape), [s, s], [d, d], [p, p], out, isa,
                                        kernel, True)  # fmt: skip
            except ValueError:
                continue  # the geometry this kernel cannot run
            for threads in (1, 3):
                work = np.zeros(max(plan.work_floats, 1), F32)
                y = np.full(want.shape, np.nan, F32)
                native.ConvCall(plan, x, work, y, bias, "none", threads, None)()
                native.canonicalize_nan(y)
                np.testing.assert_array_equal(bits(y), bits(want), err_msg=f"{c, m, size, k}")
                ran += 1
    no_lanes = kernel == "lanes" and isa == "scalar"  # (no channels-in-lanes kernel there)
    assert ran == 0 if no_lanes else ran >= 4  # (stream: the plain 1x1 layer only)
    with pytest.raises(ValueError, match="winograd kernel computes other sums"):
        native.conv_plan(np.ones((16, 16, 3, 3), F32), 1, [1, 16, 8, 8], [1, 1], [1, 1],
                         [1, 1], [8, 8], isa, "winograd", True)  # fmt: skip
    plan = native.conv_plan(np.ones((16, 16, 1, 1), F32), 1, [1, 16, 4, 4], [1, 1], [1, 1],
                            [0, 0], [4, 4], isa, "auto", True)  # fmt: skip
    x, y = np.ones((1, 16, 4, 4), F32), np.empty((1, 16, 4, 4), F32)
    with pytest.raises(ValueError, match="exact plan takes no activation"):
        native.ConvCall(plan, x, np.zeros(max(plan.work_floats, 1), F32), y, None, "relu")


@pytest.mark.parametrize("isa", ALL_PATHS)
def test_first_term_is_assigned_and_padding_is_plus_zero(isa):
    """X = -0 everywhere, W = 1, no bias: a window inside X sums -0 terms only (-0, since the
    first term is assigned, not added to +0), a window over the padding adds +0 * 1 (+0)."""
    path_or_skip(isa)
    x = np.full((1, 2, 5, 6), -0.0, F32)
    w = np.ones((3, 2, 3, 3), F32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    model = make_model([node], [tensor("x", shape=[1, 2, 5, 6])], [tensor("y")], [init("w", w)])
    want = _session(model, "numpy").run(None, {"x": x})[0]
    assert np.signbit(want[0, :, 1:-1, 1:-1]).all() and not np.signbit(want[0, :, 0]).any()
    for threads in THREADS:
        got = _session(model, isa, threads).run(None, {"x": x})[0]
        np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize("isa", ALL_PATHS)
def test_bias_nan_and_infinities_are_canonical(isa):
    """inf + -inf in the sum, a NaN payload in B, in X and in W: every NaN is 0x7FC00000."""
    path_or_skip(isa)
    x = np.ones((1, 2, 4, 20), F32)
    x[0, 0, 0, 0], x[0, 1, 0, 1], x[0, 0, 2, 2] = np.inf, -np.inf, NAN_PAYLOAD
    w = np.ones((4, 2, 1, 2), F32)
    w[3, 0, 0, 1] = NAN_PAYLOAD
    b = np.array([0.0, NAN_PAYLOAD, -np.inf, 1.0], F32)
    inits = [init("w", w), init("b", b)]
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"])
    model = make_model([node], [tensor("x", shape=[1, 2, 4, 20])], [tensor("y")], inits)
    want = _session(model, "numpy").run(None, {"x": x})[0]
    assert np.isnan(want).any() and (bits(want)[np.isnan(want)] == 0x7FC00000).all()
    got = _session(model, isa).run(None, {"x": x})[0]
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize(
    "size, k, stride, pad, c, m",
    [
        (14, 1, 1, 0, 8, 20),  # 196 positions: padded past the scalar tail; 1x1 read in place
        (14, 1, 1, 0, 30, 8),  # B added by numpy (X larger than Y)
        (14, 3, 1, 1, 6, 10),
        (15, 1, 2, 0, 6, 12),  # 1x1 strided: X's positions copied into the column matrix
        (9, 3, 2, 1, 5, 7),
    ],
)
def test_column_layouts(isa, size, k, stride, pad, c, m):
    """The layouts conv_exact picks by shape (in place, copied, B as a last term or a numpy
    add, padded columns), each against the numpy path."""
    path_or_skip(isa)
    rng = np.random.default_rng(size * k + c)
    x = _values(rng, (2, c, size, size), True)
    inits = [init("w", _values(rng, (m, c, k, k), False)), init("b", _values(rng, (m,), False))]
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[stride] * 2, pads=[pad] * 4)
    model = make_model([node], [tensor("x", shape=list(x.shape))], [tensor("y")], inits)
    want = _session(model, "numpy").run(None, {"x": x})[0]
    for threads in (1, 2):
        got = _session(model, isa, threads).run(None, {"x": x})[0]
        np.testing.assert_array_equal(bits(got), bits(want))


def test_other_dtypes_and_ranks_keep_the_numpy_kernel():
    path = "scalar"
    x16 = tensor("x", onnx.TensorProto.FLOAT16, [1, 2, 5, 5])
    w16 = init("w", np.ones((3, 2, 3, 3), np.float16))
    model16 = make_model(
        [helper.make_node("Conv", ["x", "w"], ["y"])],
        [x16],
        [tensor("y", onnx.TensorProto.FLOAT16)],
        [w16],
    )
    feed = {"x": np.ones((1, 2, 5, 5), np.float16)}
    assert not isinstance(_plans(_session(model16, path), feed)[0], conv_exact.ExactPlan)
    x1 = tensor("x", shape=[1, 2, 9])
    model1 = make_model(
        [helper.make_node("Conv", ["x", "w"], ["y"])],
        [x1],
        [tensor("y")],
        [init("w", np.ones((3, 2, 3), F32))],
    )
    feed1 = {"x": np.ones((1, 2, 9), F32)}
    assert not isinstance(_plans(_session(model1, path), feed1)[0], conv_exact.ExactPlan)
    np.testing.assert_array_equal(
        _session(model1, path).run(None, feed1)[0], _session(model1, "numpy").run(None, feed1)[0]
    )


def _random_weights(path: str) -> onnx.ModelProto:
    """light_resnet50 with its ConstantOfShape weights (all 0.02) replaced by random
    initializers: He-scaled Conv and Gemm weights, positive BatchNormalization scales and
    variances, small biases and means, so that every layer's values differ."""
    model = onnx.load(path)
    rng = np.random.default_rng(0)
    shapes = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    role = {}
    for node in model.graph.node:
        if node.op_type in ("Conv", "Gemm") and len(node.input) > 1:
            role[node.input[1]] = "weight"
        if node.op_type == "BatchNormalization":
            role[node.input[1]], role[node.input[4]] = "positive", "positive"
    kept = []
    for node in model.graph.node:
        if node.op_type != "ConstantOfShape":
            kept.append(node)
            continue
        shape = tuple(int(d) for d in shapes[node.input[0]])
        name = node.output[0]
        if role.get(name) == "weight":
            fan_in = int(np.prod(shape[1:]))
            value = rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
        elif role.get(name) == "positive":
            value = rng.uniform(0.5, 1.5, shape)
        else:
            value = rng.standard_normal(shape) * 0.1
        model.graph.initializer.append(numpy_helper.from_array(value.astype(F32), name))
    del model.graph.node[:]
    model.graph.node.extend(kept)
    gemm = next(n for n in kept if n.op_type == "Gemm")  # the logits too, not only Softmax's
    model.graph.output.append(helper.make_tensor_value_info(gemm.output[0], F32_TYPE, None))
    return model


def test_light_resnet50_same_bits_on_every_path_and_thread_count():
    model = _random_weights(light_model("resnet50"))
    rng = np.random.default_rng(1)
    feed = {}
    for d in model.graph.input:
        if d.name in {t.name for t in model.graph.initializer}:
            continue
        shape = [x.dim_value or 1 for x in d.type.tensor_type.shape.dim]
        value = rng.standard_normal(shape).astype(F32)
        feed[d.name] = np.abs(value) + 0.5 if d.name.endswith("_s_0") else value * 0.1
    sess = graphrt.Session(model, mode="exact", kernel_path="numpy")
    want = sess.run(None, feed)
    assert np.unique(want[1]).size > 900  # the weights make distinct logits
    for path in ISAS:
        for threads in THREADS:
            native = graphrt.Session(
                model, mode="exact", kernel_path=path, intra_op_threads=threads
            )
            convs = [p for p in _plans(native, feed) if isinstance(p, EXACT_PLANS)]
            assert len(convs) == 53  # every Conv ran natively
            got = native.run(None, feed)
            for a, b in zip(got, want):
                np.testing.assert_array_equal(bits(a), bits(b), err_msg=f"{path}, {threads}")


@pytest.mark.parametrize("isa", ALL_PATHS)
def test_empty_reduction_is_plus_zero_then_bias(isa):
    """No input channels: every sum is empty (+0), then + B, so B = -0 gives +0."""
    path_or_skip(isa)
    w, b = np.ones((3, 0, 3, 3), F32), np.array([-0.0, 1.5, -np.inf], F32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])
    model = make_model(
        [node], [tensor("x", shape=[2, 0, 4, 5])], [tensor("y")], [init("w", w), init("b", b)]
    )
    feed = {"x": np.ones((2, 0, 4, 5), F32)}
    want = _session(model, "numpy").run(None, feed)[0]
    assert not np.signbit(want[:, 0]).any()
    sess = _session(model, isa)
    assert isinstance(_plans(sess, feed)[0], conv_exact.ExactPlan)
    np.testing.assert_array_equal(bits(sess.run(None, feed)[0]), bits(want))


@pytest.mark.parametrize("isa", ALL_PATHS)
def test_strided_inputs_are_copied_per_call(isa):
    """X, W and B as strided views (a kernel evaluated outside a plan): the same bits as on
    contiguous copies, and as the numpy kernel's."""
    path_or_skip(isa)
    from graphrt.kernel import NodeInfo, evaluate_node
    from graphrt_ops_basic.conv import Conv as BasicConv
    from graphrt_ops_simd.conv import Conv

    rng = np.random.default_rng(5)
    x = _values(rng, (2, 4, 7, 18), True)[..., ::2]
    w = _values(rng, (6, 2, 3, 2), False)[:, ::-1]
    b = _values(rng, (12,), False)[::2]
    attrs = {"pads": [1, 0, 2, 1], "strides": [1, 2], "group": 2}
    info = NodeInfo("conv", "Conv", "", 17, attrs, ("x", "w", "b"), ("y",))
    kernel = Conv(info, BasicConv, isa)
    with np.errstate(all="ignore"):  # inf - inf, 0 * inf (a session sets this itself)
        got = evaluate_node(kernel, [x, w, b], 1, exact=True)[0]
        want = evaluate_node(BasicConv(info), [x, w, b], 1, exact=True)[0]
        copies = [np.ascontiguousarray(a) for a in (x, w, b)]
        again = evaluate_node(kernel, copies, 1, exact=True)[0]
    np.testing.assert_array_equal(bits(got), bits(want))
    np.testing.assert_array_equal(bits(again), bits(want))
