"""Graph passes: selection by level and mode, plugin passes, and what the built-ins do."""

from __future__ import annotations

import types

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import graphrt
from graphrt import hookimpl
from graphrt.passes import GraphPass
from tests._models import init, make_model, small_cnn, tensor


def test_batchnorm_is_folded_into_conv_at_level_all_only():
    model = small_cnn(seed=3)
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
    full = graphrt.Session(model, optimization_level="all")
    basic = graphrt.Session(model, optimization_level="basic")
    assert "fuse_batchnorm_into_conv" in full.graph.passes_run
    assert "fuse_batchnorm_into_conv" not in basic.graph.passes_run
    assert "BatchNormalization" not in {n.info.op_type for n in full.graph.nodes}
    assert "BatchNormalization" in {n.info.op_type for n in basic.graph.nodes}
    np.testing.assert_allclose(
        full.run(None, {"x": x})[0], basic.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6
    )


def test_constant_folding_runs_constant_subgraphs_once():
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["w"]),
        helper.make_node("Add", ["w", "one"], ["w1"]),
        helper.make_node("Mul", ["x", "w1"], ["y"]),
    ]
    model = make_model(
        nodes,
        [tensor("x", shape=[2, 3])],
        [tensor("y", shape=[2, 3])],
        [init("shape", np.array([2, 3], np.int64)), init("one", np.float32(1.0))],
    )
    sess = graphrt.Session(model)
    assert [n.info.op_type for n in sess.graph.nodes] == ["Mul"]
    assert "constant_folding" in sess.graph.passes_run
    none = graphrt.Session(model, optimization_level="none")
    assert len(none.graph.nodes) == 3 and none.graph.passes_run == []
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], x)
    np.testing.assert_array_equal(none.run(None, {"x": x})[0], x)


def test_dead_nodes_are_dropped_at_every_level():
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["unused"])],
        [tensor("x", shape=[3])],
        [tensor("y", shape=[3])],
    )
    sess = graphrt.Session(model, optimization_level="none")
    assert [n.info.op_type for n in sess.graph.nodes] == ["Relu"]
    assert sess.graph.dropped_nodes == 1


class _DoubleNegation(GraphPass):
    """Removes Neg(Neg(x)) by rewiring to an Identity: a plugin-provided pass."""

    name = "drop_double_negation"
    min_level = "basic"
    preserves_bits = True
    order = 60
    calls = 0

    def run(self, graph, ctx):
        type(self).calls += 1
        changed = False
        for node in list(graph.nodes):
            if node.op_type != "Neg":
                continue
            inner = graph.producer(node.inputs[0])
            if inner is None or inner.op_type != "Neg":
                continue
            identity = ctx.lookup("", "Identity")
            info = helper.make_node("Identity", [inner.inputs[0]], node.outputs)
            from graphrt.attrs import node_info
            from graphrt.passes import PassNode

            new = PassNode(
                node_info(info, node.info.opset), identity, [inner.inputs[0]], node.outputs
            )
            graph.replace([node], new)
            changed = True
        return changed


class _Unsafe(_DoubleNegation):
    name = "not_bit_preserving"
    preserves_bits = False


def test_plugin_passes_run_in_order_and_respect_exact_mode():
    plugin = types.SimpleNamespace(
        graphrt_graph_passes=hookimpl(lambda: [_DoubleNegation(), _Unsafe()])
    )
    graphrt.register_plugin(plugin, "passes-test")
    try:
        model = make_model(
            [helper.make_node("Neg", ["x"], ["n1"]), helper.make_node("Neg", ["n1"], ["y"])],
            [tensor("x", shape=[3])],
            [tensor("y", shape=[3])],
        )
        fast = graphrt.Session(model)
        assert [n.info.op_type for n in fast.graph.nodes] == ["Identity"]
        assert "drop_double_negation" in fast.graph.passes_run
        exact = graphrt.Session(model, mode="exact")
        assert "not_bit_preserving" not in exact.graph.passes_run
        x = np.array([1, -2, 3], np.float32)
        np.testing.assert_array_equal(fast.run(None, {"x": x})[0], x)
    finally:
        graphrt.unregister_plugin("passes-test")


def _conv_bn(opset: int, **bn_attrs) -> object:
    rng = np.random.default_rng(5)
    c = 4
    params = [
        init("w", rng.standard_normal((c, 3, 3, 3)).astype(np.float32)),
        init("scale", rng.uniform(0.5, 1.5, c).astype(np.float32)),
        init("bias", rng.standard_normal(c).astype(np.float32)),
        init("mean", rng.standard_normal(c).astype(np.float32)),
        init("var", rng.uniform(0.5, 2.0, c).astype(np.float32)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node(
            "BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["y"], **bn_attrs
        ),
    ]
    return make_model(nodes, [tensor("x", shape=[2, 3, 6, 6])], [tensor("y")], params, opset=opset)


def _ops(sess: graphrt.Session) -> set[str]:
    return {n.info.op_type for n in sess.graph.nodes}


def test_batchnorm_before_opset_7_is_folded_only_in_test_mode():
    # Before opset 7, is_test=0 (the attribute's default) is training mode: the output uses the
    # batch's statistics, which no weight folded ahead of time can give.
    for attrs in ({}, {"is_test": 0}):
        sess = graphrt.Session(_conv_bn(6, **attrs), optimization_level="all")
        assert "BatchNormalization" in _ops(sess), attrs
    for opset in (6, 1):
        extra = {"consumed_inputs": [0, 0, 0, 1, 1]} if opset == 1 else {}
        sess = graphrt.Session(_conv_bn(opset, is_test=1, **extra), optimization_level="all")
        assert "BatchNormalization" not in _ops(sess), opset
    # From opset 7 there is no is_test: an inference node is folded.
    assert "BatchNormalization" not in _ops(graphrt.Session(_conv_bn(9)))


def _bn_params(rng: np.random.Generator, c: int, tag: str) -> list:
    return [
        init(f"scale{tag}", rng.uniform(0.5, 1.5, c).astype(np.float32)),
        init(f"bias{tag}", rng.standard_normal(c).astype(np.float32)),
        init(f"mean{tag}", rng.standard_normal(c).astype(np.float32)),
        init(f"var{tag}", rng.uniform(0.5, 2.0, c).astype(np.float32)),
    ]


def _folded(w: np.ndarray, params: list) -> tuple[np.ndarray, np.ndarray]:
    """The documented folding: s = scale / sqrt(var + eps) in float64, W' = W * s rounded
    once, B' = (0 - mean) * s + bias."""
    scale, bias, mean, var = (numpy_helper.to_array(p).astype(np.float64) for p in params)
    s = scale / np.sqrt(var + 1e-5)
    w2 = (w.astype(np.float64) * s.reshape(-1, 1, 1, 1)).astype(np.float32)
    return w2, ((0.0 - mean) * s + bias).astype(np.float32)


def test_batchnorm_folding_rewrites_a_weight_only_where_nothing_else_sees_it():
    # W feeds two Conv+BN pairs (each must fold the original W, not the other's result); V is
    # a view (a folded Reshape) of F, which an Add still reads; U belongs to its Conv alone
    # (rewritten in place).  Every output has the bits of the model folded by hand.
    rng = np.random.default_rng(11)
    c = 4
    w = rng.standard_normal((c, 3, 3, 3)).astype(np.float32)
    f = rng.standard_normal(c * 27).astype(np.float32)
    u = rng.standard_normal((c, 3, 3, 3)).astype(np.float32)
    bns = {t: _bn_params(rng, c, t) for t in "123"}
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c1"]),
        helper.make_node("BatchNormalization", ["c1", *(p.name for p in bns["1"])], ["y1"]),
        # (its default pads written out: attributes as written differ, so common subexpression
        # elimination keeps both Convs, and each has its own BatchNormalization to absorb)
        helper.make_node("Conv", ["x", "W"], ["c2"], pads=[0] * 4),
        helper.make_node("BatchNormalization", ["c2", *(p.name for p in bns["2"])], ["y2"]),
        helper.make_node("Reshape", ["F", "wshape"], ["V"]),
        helper.make_node("Conv", ["x", "V"], ["c3"]),
        helper.make_node("BatchNormalization", ["c3", *(p.name for p in bns["3"])], ["y3"]),
        helper.make_node("Add", ["f_in", "F"], ["y4"]),
        helper.make_node("Conv", ["x", "U"], ["c5"]),
        helper.make_node("BatchNormalization", ["c5", *(p.name for p in bns["1"])], ["y5"]),
    ]
    inits = [init("W", w), init("F", f), init("U", u), init("wshape", np.array([c, 3, 3, 3]))]
    inits += [p for ps in bns.values() for p in ps]
    outs = [tensor(f"y{i}") for i in range(1, 6)]
    ins = [tensor("x", shape=[1, 3, 6, 6]), tensor("f_in", shape=[c * 27])]
    sess = graphrt.Session(make_model(nodes, ins, outs, inits), optimization_level="all")
    assert "BatchNormalization" not in _ops(sess)

    by_hand, hand_inits = [], []
    for i, (weight, tag) in enumerate([(w, "1"), (w, "2"), (f.reshape(c, 3, 3, 3), "3")]):
        w2, b2 = _folded(weight, bns[tag])
        hand_inits += [init(f"w{i}", w2), init(f"b{i}", b2)]
        by_hand.append(helper.make_node("Conv", ["x", f"w{i}", f"b{i}"], [f"y{i + 1}"]))
    w2, b2 = _folded(u, bns["1"])
    hand_inits += [init("w4", w2), init("b4", b2), init("F", f)]
    by_hand += [
        helper.make_node("Add", ["f_in", "F"], ["y4"]),
        helper.make_node("Conv", ["x", "w4", "b4"], ["y5"]),
    ]
    hand = graphrt.Session(make_model(by_hand, ins, outs, hand_inits), optimization_level="basic")
    feed = {
        "x": rng.standard_normal((1, 3, 6, 6)).astype(np.float32),
        "f_in": rng.standard_normal(c * 27).astype(np.float32),
    }
    for got, want in zip(sess.run(None, feed), hand.run(None, feed)):
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


# -- common subexpression elimination --------------------------------------------------------


def _twins(second_weight: np.ndarray, **conv2) -> onnx.ModelProto:
    """Conv -> Relu twice on x (the second Conv's weight and attributes given), added."""
    w = np.random.default_rng(7).standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1] * 4),
        helper.make_node("Conv", ["x", "w2"], ["c2"], **({"pads": [1] * 4} | conv2)),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Add", ["r1", "r2"], ["y"]),
    ]
    inits = [init("w1", w), init("w2", second_weight if second_weight.size else w.copy())]
    return make_model(nodes, [tensor("x", shape=[1, 3, 8, 8])], [tensor("y")], inits)


def _ops(sess: graphrt.Session) -> list[str]:
    return [n.info.op_type for n in sess.graph.nodes]


def test_twin_branches_with_equal_weights_under_two_names_run_once():
    model = _twins(np.empty(0, np.float32))
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    for mode in ("fast", "exact"):
        basic = graphrt.Session(model, mode=mode, optimization_level="basic")
        none = graphrt.Session(model, mode=mode, optimization_level="none")
        assert "eliminate_common_subexpressions" in basic.graph.passes_run
        assert _ops(basic) == ["FusedConv", "Add"]  # the Relus merged once their Convs had
        assert basic.run(None, {"x": x})[0].tobytes() == none.run(None, {"x": x})[0].tobytes()


def test_nodes_that_differ_in_a_weight_byte_or_an_attribute_stay():
    w = np.random.default_rng(7).standard_normal((4, 3, 3, 3)).astype(np.float32)
    changed = w.copy()
    changed.reshape(-1)[-1] = np.nextafter(changed.reshape(-1)[-1], np.float32(np.inf))
    for model in (_twins(changed), _twins(w.copy(), pads=[0, 1, 1, 1])):
        sess = graphrt.Session(model, optimization_level="basic")
        assert _ops(sess).count("FusedConv") == 2
        assert "eliminate_common_subexpressions" not in sess.graph.passes_run


def test_random_operators_dropout_and_graph_outputs_are_never_merged():
    nodes = [
        helper.make_node("RandomUniformLike", ["x"], ["u1"]),
        helper.make_node("RandomUniformLike", ["x"], ["u2"]),
        helper.make_node("Sub", ["u1", "u2"], ["d"]),
        helper.make_node("Dropout", ["x", "ratio", "training"], ["t1"]),
        helper.make_node("Dropout", ["x", "ratio", "training"], ["t2"]),
        helper.make_node("Neg", ["x"], ["n1"]),
        helper.make_node("Neg", ["x"], ["n2"]),
    ]
    inits = [init("ratio", np.float32(0.5))]
    inputs = [tensor("x", shape=[64]), tensor("training", TensorProto.BOOL, shape=[])]
    outputs = [tensor(n) for n in ("d", "t1", "t2", "n1", "n2")]
    sess = graphrt.Session(make_model(nodes, inputs, outputs, inits))
    assert sorted(_ops(sess)) == sorted(
        ["RandomUniformLike", "RandomUniformLike", "Sub", "Dropout", "Dropout", "Neg", "Neg"]
    )
    x = np.random.default_rng(2).standard_normal(64).astype(np.float32)
    d, t1, t2, n1, n2 = sess.run(None, {"x": x, "training": np.array(True)})
    assert np.abs(d).max() > 0  # two draws, not one
    assert (t1 != t2).any()  # two masks
    np.testing.assert_array_equal(n1, -x)
    np.testing.assert_array_equal(n2, -x)


def test_a_duplicate_reads_the_kept_node_even_where_small_constants_decide():
    """Gathers of one value with equal index constants merge; with another index they stay."""
    nodes = [
        helper.make_node("Gather", ["x", "i0"], ["g0"]),
        helper.make_node("Gather", ["x", "i0b"], ["g1"]),
        helper.make_node("Gather", ["x", "i1"], ["g2"]),
        helper.make_node("Concat", ["g0", "g1", "g2"], ["y"], axis=0),
    ]
    inits = [init(n, np.array([v], np.int64)) for n, v in (("i0", 2), ("i0b", 2), ("i1", 3))]
    model = make_model(nodes, [tensor("x", shape=[5])], [tensor("y")], inits)
    sess = graphrt.Session(model)
    assert _ops(sess).count("Gather") == 2
    x = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], [2, 2, 3])
