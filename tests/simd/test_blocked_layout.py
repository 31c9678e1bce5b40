"""blocked_layout (ops-simd's pass, avx512): the regions of convolutions it keeps blocked, the
ones it leaves planar, and the blocked operators' table (numpy) kernels against the planar
operators they stand for."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

import graphrt
from tests._fusion import op_list, rand_w, rand_x
from tests._models import init, make_model, tensor
from tests.simd._simd import ISAS, bits

BLOCKED = "com.graphrt.BlockedConv"
AVX512 = "avx512"  # (named: tox's scalar environment forces another default path)
needs_avx512 = pytest.mark.skipif(AVX512 not in ISAS, reason="the pass rewrites for avx512")


def _fire(nodes, inits, x, name, squeeze, expand, c):
    """A fire module: 1x1 squeeze, 1x1 and 3x3 expands (``expand``: their channels), their
    Concat (all Relu); returns the Concat's value and channels."""
    for suffix, (cin, m, k, src) in {
        "s": (c, squeeze, 1, x),
        "e1": (squeeze, expand[0], 1, f"{name}s_r"),
        "e3": (squeeze, expand[1], 3, f"{name}s_r"),
    }.items():
        pads = [k // 2] * 4
        nodes.append(
            helper.make_node("Conv", [src, f"{name}{suffix}_w", f"{name}{suffix}_b"],
                             [f"{name}{suffix}"], kernel_shape=[k, k], pads=pads)
        )  # fmt: skip
        nodes.append(helper.make_node("Relu", [f"{name}{suffix}"], [f"{name}{suffix}_r"]))
        inits += [init(f"{name}{suffix}_w", rand_w(m, cin, k, k, scale=0.3)),
                  init(f"{name}{suffix}_b", rand_w(m))]  # fmt: skip
    nodes.append(helper.make_node("Concat", [f"{name}e1_r", f"{name}e3_r"], [name], axis=1))
    return name, sum(expand)


def squeeze_model(
    expand: tuple[int, int] = (32, 32), tail: str = "gap", extra_reader: bool = False, hw: int = 15
) -> tuple[onnx.ModelProto, dict]:
    """A stem, two fire modules, a MaxPool, a fire module, a classifier convolution and a
    GlobalAveragePool (``tail``: "gap", "flatten" or "output")."""
    nodes, inits = [], []
    nodes.append(helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], kernel_shape=[3, 3]))
    nodes.append(helper.make_node("Relu", ["c0"], ["r0"]))
    inits += [init("w0", rand_w(24, 3, 3, 3)), init("b0", rand_w(24))]
    v, c = _fire(nodes, inits, "r0", "f1", 8, expand, 24)
    v, c = _fire(nodes, inits, v, "f2", 8, expand, c)
    nodes.append(helper.make_node("MaxPool", [v], ["p"], kernel_shape=[3, 3], strides=[2, 2]))
    v, c = _fire(nodes, inits, "p", "f3", 12, expand, c)
    nodes.append(helper.make_node("Conv", [v, "wc", "bc"], ["cls"], kernel_shape=[1, 1]))
    inits += [init("wc", rand_w(10, c, 1, 1)), init("bc", rand_w(10))]
    outputs = [tensor("y")]
    if tail == "gap":
        nodes.append(helper.make_node("GlobalAveragePool", ["cls"], ["y"]))
    elif tail == "flatten":
        nodes.append(helper.make_node("Flatten", ["cls"], ["y"]))
    else:
        nodes.append(helper.make_node("Identity", ["cls"], ["y"]))
    if extra_reader:
        nodes.append(helper.make_node("Sigmoid", ["f2"], ["z"]))
        outputs.append(tensor("z"))
    model = make_model(nodes, [tensor("x", shape=[1, 3, hw + 2, hw + 2])], outputs, inits)
    return model, {"x": rand_x(1, 3, hw + 2, hw + 2)}


def _planar(model, feed):
    return graphrt.Session(model, kernel_path="numpy").run(None, feed)


def _close(got, want):
    scale = max(float(np.abs(want).max()), 1e-30)
    np.testing.assert_allclose(got, want, rtol=0, atol=scale * 2e-5)


@needs_avx512
@pytest.mark.parametrize("expand", [(32, 32), (32, 40), (40, 32)])
def test_fire_modules_run_blocked(expand):
    """Every convolution but the stem's (which reads the input's planes: 3 channels, not a
    region's), the MaxPool and the GlobalAveragePool blocked; a Concat's last part may end in
    a partial block (32 + 40), an earlier one may not (40 + 32: all planar)."""
    model, feed = squeeze_model(expand)
    sess = graphrt.Session(model, kernel_path=AVX512)
    ops = op_list(sess)
    if expand[0] % 16 == 0:
        assert ops.count(BLOCKED) == 11 and ops.count("com.graphrt.BlockedMaxPool") == 1
        assert "com.graphrt.BlockedGlobalAveragePool" in ops
    else:
        assert "blocked_layout" not in sess.graph.passes_run
    got = sess.run(None, feed)[0]
    _close(got, _planar(model, feed)[0])
    for threads in (2, 3):
        again = graphrt.Session(model, kernel_path=AVX512, intra_op_threads=threads).run(
            None, feed
        )[0]
        np.testing.assert_array_equal(bits(again), bits(got))


@needs_avx512
@pytest.mark.parametrize(
    "options",
    [
        dict(tail="flatten"),  # the classifier's output read as planes
        dict(tail="output"),  # ... or a graph output
        dict(extra_reader=True),  # a fire module's output read by a Sigmoid
    ],
)
def test_open_regions_stay_planar(options):
    model, feed = squeeze_model(**options)
    sess = graphrt.Session(model, kernel_path=AVX512)
    assert BLOCKED not in op_list(sess)
    _close(sess.run(None, feed)[0], _planar(model, feed)[0])


@pytest.mark.parametrize(
    "options",
    [
        dict(kernel_path="numpy"),
        dict(kernel_path="scalar"),
        dict(kernel_path="avx2"),  # its 8-channel tiles lost to planar Winograd
        dict(mode="exact"),
        dict(optimization_level="basic"),
    ],
)
def test_only_avx512_fast_mode_at_level_all(options):
    if options.get("kernel_path", "numpy") not in ("numpy", *ISAS):
        pytest.skip(f"kernel path {options['kernel_path']!r} is not available on this CPU")
    sess = graphrt.Session(squeeze_model()[0], **options)
    assert "blocked_layout" not in sess.graph.passes_run
    assert not [op for op in op_list(sess) if "Blocked" in op]


@needs_avx512
def test_a_lone_convolution_stays_planar():
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3]),
        helper.make_node("GlobalAveragePool", ["c"], ["y"]),
    ]
    model = make_model(
        nodes, [tensor("x", shape=[1, 16, 9, 9])], [tensor("y")], [init("w", rand_w(32, 16, 3, 3))]
    )
    assert "blocked_layout" not in graphrt.Session(model, kernel_path=AVX512).graph.passes_run


@needs_avx512
def test_light_squeezenet():
    """The model the pass is for (it ships inside the onnx package): every convolution blocked
    but the stem (FusedConvPool, planar), the planar graph's logits."""
    from tests._models import light_model

    model = light_model("squeezenet")
    feed = {"data_0": rand_x(1, 3, 224, 224)}
    sess = graphrt.Session(model, kernel_path=AVX512)
    ops = op_list(sess)
    assert ops.count(BLOCKED) == 25 and ops[0] == "com.graphrt.FusedConvPool"
    _, inter = sess.run_with_intermediates(None, feed)
    _, planar = graphrt.Session(model, kernel_path="numpy").run_with_intermediates(None, feed)
    # the pooled logits before the Softmax (the light model's random weights make them about
    # 7e9, a few ulps apart: the Softmax of two such runs can differ wholly)
    _close(inter["r65"], planar["r65"])


# -- the table's kernels: the planar operators on planar copies ------------------------------


def _blocked_model(block: int, c: int = 20, m: int = 24, hw: int = 9, **conv):
    """BlockedConv (planar X) -> BlockedConv (blocked X) -> BlockedMaxPool -> FromBlocked, and
    a BlockedGlobalAveragePool of the same blocks."""
    g = "com.graphrt"
    nodes = [
        helper.make_node("BlockedConv", ["x", "w1", "b1"], ["a"], domain=g, block=block,
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], activation="Relu", **conv),
        helper.make_node("BlockedConv", ["a", "w2"], ["b"], domain=g, block=block, x_blocked=1,
                         kernel_shape=[1, 1]),
        helper.make_node("BlockedMaxPool", ["b"], ["p"], domain=g, block=block,
                         kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("FromBlocked", ["p"], ["y"], domain=g, block=block, channels=m),
        helper.make_node("BlockedGlobalAveragePool", ["b"], ["z"], domain=g, block=block,
                         channels=m),
    ]  # fmt: skip
    inits = [init("w1", rand_w(m, c, 3, 3)), init("b1", rand_w(m)), init("w2", rand_w(m, m, 1, 1))]
    model = make_model(
        nodes, [tensor("x", shape=[2, c, hw, hw])], [tensor("y"), tensor("z")], inits,
        domains=[g],
    )  # fmt: skip
    return model, {"x": rand_x(2, c, hw, hw)}


def _planar_twin(c: int = 20, m: int = 24, hw: int = 9, **conv):
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a0"], kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1], **conv),
        helper.make_node("Relu", ["a0"], ["a"]),
        helper.make_node("Conv", ["a", "w2"], ["b"], kernel_shape=[1, 1]),
        helper.make_node("MaxPool", ["b"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["b"], ["z"]),
    ]  # fmt: skip
    return nodes


@pytest.mark.parametrize("block", [8, 16])
@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_table_kernels_are_the_planar_operators(block, mode):
    model, feed = _blocked_model(block)
    inits = list(model.graph.initializer)
    planar = make_model(
        _planar_twin(), [tensor("x", shape=[2, 20, 9, 9])], [tensor("y"), tensor("z")], inits
    )
    got = graphrt.Session(model, kernel_path="numpy", mode=mode).run(None, feed)
    want = graphrt.Session(planar, kernel_path="numpy", mode=mode, optimization_level="none").run(
        None, feed
    )
    for g, w in zip(got, want):
        np.testing.assert_array_equal(bits(g), bits(w))


@pytest.mark.parametrize("path", ["avx2", "avx512"])
def test_native_kernels_match_the_table(path):
    if path not in ISAS:
        pytest.skip(f"kernel path {path!r} is not available on this CPU")
    block = 16 if path == "avx512" else 8
    model, feed = _blocked_model(block)
    want = graphrt.Session(model, kernel_path="numpy").run(None, feed)
    got = graphrt.Session(model, kernel_path=path).run(None, feed)
    for g, w in zip(got, want):
        _close(g, w)
    other = 8 if block == 16 else 16  # another path's block: the table's kernels serve it
    model, feed = _blocked_model(other)
    want = graphrt.Session(model, kernel_path="numpy").run(None, feed)
    got = graphrt.Session(model, kernel_path=path).run(None, feed)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(bits(g), bits(w))


def _one(node, x_shape, inits=()):
    model = make_model(
        [node], [tensor("x", shape=list(x_shape))], [tensor("y")], list(inits),
        domains=["com.graphrt"],
    )  # fmt: skip
    return graphrt.Session(model, kernel_path="numpy")


@pytest.mark.parametrize(
    "node, x_shape, match",
    [
        (dict(op="BlockedMaxPool", block=0, kernel_shape=[2, 2]), [1, 1, 4, 4, 8],
         "attribute block must be a positive integer, got 0"),
        (dict(op="BlockedMaxPool", block=8, kernel_shape=[2, 2]), [1, 8, 4, 4],
         r"X must be blocked \(N, ceil\(C / 8\), H, W, 8\), got \[1, 8, 4, 4\]"),
        (dict(op="FromBlocked", block=8, channels=20), [1, 2, 4, 4, 8],
         r"X \[1, 2, 4, 4, 8\] does not hold 20 channels in blocks of 8"),
        (dict(op="BlockedGlobalAveragePool", block=8), [1, 1, 4, 4, 8],
         "attribute channels must be a positive integer, got None"),
    ],
)  # fmt: skip
def test_refusals_name_the_node(node, x_shape, match):
    op = node.pop("op")
    node = helper.make_node(op, ["x"], ["y"], domain="com.graphrt", name="n", **node)
    with pytest.raises(graphrt.SessionError, match=match) as err:
        _one(node, x_shape).run(None, {"x": np.zeros(x_shape, np.float32)})
    assert err.value.node == "n"


def test_blocked_conv_refuses_a_residual_and_other_activations():
    w = [init("w", rand_w(8, 8, 1, 1))]
    for extra, match in (
        (dict(inputs=["x", "w", "", "x"]), "BlockedConv takes X, W and B"),
        (dict(activation="Sigmoid"), "activation is none or Relu, got Sigmoid"),
    ):
        inputs = extra.pop("inputs", ["x", "w"])
        node = helper.make_node("BlockedConv", inputs, ["y"], domain="com.graphrt", block=8,
                                kernel_shape=[1, 1], **extra)  # fmt: skip
        with pytest.raises(graphrt.SessionError, match=match):
            _one(node, [1, 8, 4, 4], w).run(None, {"x": rand_x(1, 8, 4, 4)})


@pytest.mark.parametrize("path", ["numpy", "avx2", "avx512"])
@pytest.mark.parametrize(
    "op, attrs, x_shape, kind",
    [
        ("BlockedConv", dict(block=1 << 40, kernel_shape=[3, 3]), [1, 16, 8, 8],
         "resource_exhausted"),
        ("BlockedConv", dict(block=16, x_blocked=1, kernel_shape=[3, 3], pads=[1 << 30] * 4),
         [1, 1, 8, 8, 16], None),
        ("BlockedMaxPool", dict(block=16, kernel_shape=[3, 3], pads=[1 << 29] * 4),
         [1, 1, 8, 8, 16], "resource_exhausted"),
        ("BlockedGlobalAveragePool", dict(block=16, channels=1 << 40), [1, 1, 8, 8, 16],
         "invalid_input"),
    ],
)  # fmt: skip
def test_hostile_attributes_are_refused(path, op, attrs, x_shape, kind):
    """Geometry past every bound: a SessionError naming the node, never a crash (a size past
    the memory budget is the plan's error, which names the node making it)."""
    if path not in ("numpy", *ISAS):
        pytest.skip(f"kernel path {path!r} is not available on this CPU")
    inits = [init("w", np.ones((16, 16, 3, 3), np.float32))] if op == "BlockedConv" else []
    inputs = ["x", "w"] if inits else ["x"]
    node = helper.make_node(op, inputs, ["y"], domain="com.graphrt", name="n", **attrs)
    model = make_model(
        [node], [tensor("x", shape=x_shape)], [tensor("y")], inits, domains=["com.graphrt"]
    )
    with pytest.raises(graphrt.SessionError) as err:
        graphrt.Session(model, kernel_path=path).run(None, {"x": np.ones(x_shape, np.float32)})
    assert err.value.node == "n" or "node 'n'" in str(err.value)  # (the plan's budget: both)
    assert err.value.kind in ((kind,) if kind else ("resource_exhausted", "unsupported"))
