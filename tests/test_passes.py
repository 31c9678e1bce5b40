"""Graph passes: selection by level and mode, plugin passes, and what the built-ins do."""

from __future__ import annotations

import types

import numpy as np
from onnx import helper

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
