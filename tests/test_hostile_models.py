"""Hostile models (issue 13, import and validation): every one ends in a SessionError or a result.

A runtime handed untrusted .onnx files must refuse them with ``SessionError`` (kind
``invalid_model``) and a message naming what is wrong -- never a raw MemoryError, ValueError,
OSError, IndexError or RecursionError, and never minutes of work on a small file.
"""

from __future__ import annotations

import os
import random

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphrt
from graphrt.ir import MAX_GRAPH_DEPTH
from tests._models import init, make_model, tensor


def refused(model, *words: str, kind: str = "invalid_model") -> graphrt.SessionError:
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(model)
    assert info.value.kind == kind, info.value
    for w in words:
        assert w in str(info.value), (w, str(info.value))
    return info.value


def relu_model(**kw) -> onnx.ModelProto:
    return make_model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [tensor("x", shape=[2])],
        [tensor("y", shape=[2])],
        **kw,
    )


# -- import time is linear -------------------------------------------------------------------------
def chain(n: int) -> list[onnx.NodeProto]:
    ops = ("Neg", "Relu", "Abs")
    return [helper.make_node(ops[i % 3], [f"v{i}"], [f"v{i + 1}"], name=f"n{i}") for i in range(n)]


def test_reversed_10000_node_chain_loads():
    """Stored last node first, the chain used to take ~100 s (a rescan per placed node)."""
    n = 10_000
    nodes = chain(n)
    model = make_model(nodes[::-1], [tensor("v0", shape=[3])], [tensor(f"v{n}", shape=[3])])
    session = graphrt.Session(model, intra_op_threads=1)
    x = np.array([1.0, -2.0, 3.0], np.float32)
    (got,) = session.run(None, {"v0": x})
    want = x
    for i in range(n):
        want = (np.negative, lambda v: np.maximum(v, 0), np.abs)[i % 3](want)
    np.testing.assert_array_equal(got, want)
    assert [c.info.name for c in session.graph.nodes[:3]] == ["n0", "n1", "n2"]


def test_topological_order_keeps_graph_order_and_the_passes_order():
    """Sorted graphs keep their order; unsorted ones get the order of repeated passes in file
    order (each pass takes every node whose inputs are ready), as before the linear sort."""
    a = helper.make_node("Relu", ["x"], ["a"], name="a")
    b = helper.make_node("Neg", ["a"], ["b"], name="b")
    c = helper.make_node("Abs", ["x"], ["c"], name="c")
    d = helper.make_node("Add", ["b", "c"], ["d"], name="d")
    e = helper.make_node("Neg", ["x"], ["e"], name="e")
    f = helper.make_node("Add", ["d", "e"], ["y"], name="f")

    def order(nodes):
        model = make_model(nodes, [tensor("x", shape=[2])], [tensor("y", shape=[2])])
        session = graphrt.Session(model, optimization_level="none")
        return [c.info.name for c in session.graph.nodes]

    assert order([a, b, c, d, e, f]) == ["a", "b", "c", "d", "e", "f"]
    assert order([c, e, a, b, d, f]) == ["c", "e", "a", "b", "d", "f"]
    # pass 1 takes c (x ready), a, e; pass 2 then b, d, f in file order
    assert order([f, d, b, c, a, e]) == ["c", "a", "e", "b", "d", "f"]


def test_cycle_and_undefined_input_are_named():
    a = helper.make_node("Relu", ["b"], ["a"], name="na")
    b = helper.make_node("Neg", ["a"], ["b"], name="nb")
    out = [tensor("a", shape=[2])]
    refused(make_model([a, b], [tensor("x", shape=[2])], out), "cycle", "'na'")
    lone = helper.make_node("Relu", ["nowhere"], ["a"], name="na")
    refused(make_model([lone], [tensor("x", shape=[2])], out), "undefined", "'nowhere'")


# -- nesting -------------------------------------------------------------------------------------
def nested_if(depth: int) -> onnx.ModelProto:
    """If nodes nested ``depth`` bodies deep, built in place (copying a message that deep fails
    in protobuf, which is also why such bytes cannot be parsed)."""
    out = tensor("o", TensorProto.BOOL, [1])
    leaf = helper.make_graph([helper.make_node("Identity", ["c"], ["o"])], "leaf", [], [out])
    model = make_model([], [tensor("c", TensorProto.BOOL, [1])], [out])
    g = model.graph
    for d in range(depth):
        node = g.node.add()
        node.CopyFrom(helper.make_node("If", ["c"], ["o"], else_branch=leaf, name=f"if{d}"))
        attr = node.attribute.add()
        attr.name, attr.type = "then_branch", onnx.AttributeProto.GRAPH
        g = attr.g
        g.name = f"body{d}"
        g.output.add().CopyFrom(out)
    g.node.add().CopyFrom(helper.make_node("Identity", ["c"], ["o"]))
    return model


def test_nesting_300_deep_modelproto_is_refused_naming_the_limit():
    err = refused(nested_if(300), f"more than {MAX_GRAPH_DEPTH} levels")
    assert err.node == f"if{MAX_GRAPH_DEPTH}"


def test_nesting_deep_bytes_are_refused():
    refused(nested_if(300).SerializeToString())


def test_nesting_at_the_limit_runs():
    session = graphrt.Session(nested_if(MAX_GRAPH_DEPTH))
    assert session.run(None, {"c": np.array([True])})[0].tolist() == [True]


# -- versions ------------------------------------------------------------------------------------
def test_opset_99_is_refused_saying_what_is_supported():
    newest = onnx.defs.onnx_opset_version()
    refused(relu_model(opset=99), "ai.onnx opset 99", f"up to {newest}")


def test_ai_onnx_spelled_out_and_function_imports_are_checked_too():
    model = relu_model()
    model.opset_import[0].domain = "ai.onnx"
    model.opset_import[0].version = 99
    refused(model, "opset 99")
    model = relu_model()
    fn = helper.make_function(
        "local", "F", ["x"], ["y"], [helper.make_node("Relu", ["x"], ["y"])],
        [helper.make_opsetid("", 99)],
    )  # fmt: skip
    model.functions.append(fn)
    refused(model, "opset 99")


def test_ir_version_99_is_refused_saying_what_is_supported():
    model = relu_model()
    model.ir_version = 99
    refused(model, "IR version 99", f"up to {onnx.IR_VERSION}")


# -- single assignment ---------------------------------------------------------------------------
def test_duplicate_graph_input_is_refused():
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [tensor("x", shape=[2]), tensor("x", shape=[2])],
        [tensor("y", shape=[2])],
    )
    refused(model, "graph input 'x' is declared twice")


def test_duplicate_initializer_is_refused():
    w = np.ones(2, np.float32)
    nodes = [helper.make_node("Add", ["x", "w"], ["y"])]
    model = make_model(
        nodes, [tensor("x", shape=[2])], [tensor("y", shape=[2])], [init("w", w), init("w", 2 * w)]
    )
    refused(model, "initializer 'w' is declared twice")
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(w[:1], "w"), numpy_helper.from_array(np.array([0]), "i"), [2]
    )
    model = make_model(nodes, [tensor("x", shape=[2])], [tensor("y", shape=[2])], [init("w", w)])
    model.graph.sparse_initializer.append(sparse)
    refused(model, "initializer 'w' is declared twice")


def test_node_output_written_twice_is_refused():
    nodes = [
        helper.make_node("Relu", ["x"], ["y"], name="first"),
        helper.make_node("Neg", ["x"], ["y"], name="second"),
    ]
    model = make_model(nodes, [tensor("x", shape=[2])], [tensor("y", shape=[2])])
    refused(model, "'y' is produced twice")
    model = make_model(
        [helper.make_node("Relu", ["x"], ["x"])], [tensor("x", shape=[2])], [tensor("x", shape=[2])]
    )
    refused(model, "'x' is produced twice")


def test_value_written_twice_inside_a_function_is_refused():
    body = [
        helper.make_node("Relu", ["x"], ["t"]),
        helper.make_node("Neg", ["x"], ["t"]),
        helper.make_node("Identity", ["t"], ["y"]),
    ]
    fn = helper.make_function("local", "F", ["x"], ["y"], body, [helper.make_opsetid("", 17)])
    model = make_model(
        [helper.make_node("F", ["x"], ["y"], domain="local")],
        [tensor("x", shape=[2])],
        [tensor("y", shape=[2])],
        domains=["local"],
    )
    model.functions.append(fn)
    refused(model, "produced twice", "inlined from a function")


def test_function_inlining_has_a_node_budget():
    """Each function calls the previous one twice: 2**40 nodes if inlined blindly."""
    ops = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    fns = [
        helper.make_function(
            "local", "H0", ["x"], ["y"], [helper.make_node("Relu", ["x"], ["y"])], ops
        )
    ]
    for k in range(1, 41):
        calls = [
            helper.make_node(f"H{k - 1}", ["x"], ["a"], domain="local"),
            helper.make_node(f"H{k - 1}", ["a"], ["y"], domain="local"),
        ]
        fns.append(helper.make_function("local", f"H{k}", ["x"], ["y"], calls, ops))
    model = make_model(
        [helper.make_node("H40", ["x"], ["y"], domain="local")],
        [tensor("x", shape=[2])],
        [tensor("y", shape=[2])],
        domains=["local"],
    )
    model.functions.extend(fns)
    refused(model, "more than", "nodes")


# -- declared output types -----------------------------------------------------------------------
def test_output_declared_float_but_produced_int64_is_refused():
    model = make_model(
        [helper.make_node("Shape", ["x"], ["y"])],
        [tensor("x", shape=[2])],
        [tensor("y", TensorProto.FLOAT, [1])],
    )
    session = graphrt.Session(model)  # refused when the plan knows what the graph makes
    with pytest.raises(graphrt.SessionError) as info:
        session.run(None, {"x": np.ones(2, np.float32)})
    assert info.value.kind == "invalid_model"
    for w in ("'y'", "declared tensor(float)", "produces tensor(int64)"):
        assert w in str(info.value)


def test_output_declared_with_the_produced_type_runs():
    model = make_model(
        [helper.make_node("Shape", ["x"], ["y"])],
        [tensor("x", shape=[2])],
        [tensor("y", TensorProto.INT64, [1])],
    )
    assert graphrt.Session(model).run(None, {"x": np.ones(2, np.float32)})[0].tolist() == [2]


# -- sparse initializers and external data -------------------------------------------------------
def sparse_model(values, indices, dims) -> onnx.ModelProto:
    st = helper.make_sparse_tensor(
        numpy_helper.from_array(np.asarray(values, np.float32), "w"),
        numpy_helper.from_array(np.asarray(indices, np.int64), "w_idx"),
        dims,
    )
    graph = helper.make_graph(
        [helper.make_node("Identity", ["w"], ["y"])],
        "g",
        [],
        [tensor("y")],
        sparse_initializer=[st],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_sparse_initializer_expands():
    got = graphrt.Session(sparse_model([1, 2], [[0, 1], [1, 0]], [2, 2])).run(None, {})[0]
    np.testing.assert_array_equal(got, [[0, 1], [2, 0]])
    got = graphrt.Session(sparse_model([1, 2], [0, 3], [4])).run(None, {})[0]
    np.testing.assert_array_equal(got, [1, 0, 0, 2])


@pytest.mark.parametrize(
    "values, indices, dims, words",
    [
        ([1, 2], [0, 30], [4], "outside"),  # was IndexError
        ([1, 2], [-1, 3], [4], "outside"),  # was silently accepted (numpy wraps it)
        ([1, 2], [[0, 5], [1, 0]], [2, 2], "outside"),
        ([1, 2], [0, 3], [10**6, 10**6, 10**6], "over 2147483648 bytes"),  # was MemoryError
        ([1, 2], [0, 3], [-4], "negative"),  # was ValueError
        ([1, 2], [[0, 3, 1]], [4], "indices have shape"),
    ],
)
def test_bad_sparse_initializer_is_refused(values, indices, dims, words):
    refused(sparse_model(values, indices, dims), "sparse initializer 'w'", words)


def external_model(folder, **entries) -> str:
    with open(os.path.join(folder, "w.bin"), "wb") as f:
        f.write(np.arange(4, dtype=np.float32).tobytes())
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4])
    t.data_location = TensorProto.EXTERNAL
    for key, value in {"location": "w.bin", **entries}.items():
        e = t.external_data.add()
        e.key, e.value = key, str(value)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["w"], ["y"])], "g", [], [tensor("y")], [t]
    )
    path = os.path.join(folder, "m.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_external_data_with_offset_and_length_loads(tmp_path):
    got = graphrt.Session(external_model(tmp_path, offset=0, length=16)).run(None, {})[0]
    np.testing.assert_array_equal(got, [0, 1, 2, 3])


@pytest.mark.parametrize(
    "entries, words",
    [
        ({"offset": -5}, "offset '-5' is not a size"),  # was OSError from seek
        ({"offset": "abc"}, "offset 'abc' is not a size"),  # was ValueError
        ({"length": "1e3"}, "length '1e3' is not a size"),
        ({"offset": 2**70}, "beyond the end"),  # was OverflowError
        ({"offset": 0, "length": 2**40}, "beyond the end"),
        ({"offset": 8, "length": 8}, "cannot be read"),  # too little data for dims [4]
    ],
)
def test_bad_external_data_is_refused(tmp_path, entries, words):
    refused(external_model(tmp_path, **entries), "tensor 'w'", words)


# -- garbage -------------------------------------------------------------------------------------
@pytest.mark.parametrize("data", [b"", b"hello world", b"\x00garbage\xff" * 10, b"\x12\x05hello"])
def test_load_on_garbage_bytes_is_invalid_model(data):
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.load(data)
    assert info.value.kind == "invalid_model"


def test_mutated_model_bytes_end_in_a_result_or_a_session_error():
    """A seeded mutation run over a small model's bytes: flipped, dropped and inserted bytes."""
    w = np.arange(4, dtype=np.float32)
    model = make_model(
        [helper.make_node("Add", ["x", "w"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
        [tensor("x", shape=[4])],
        [tensor("y", shape=[4])],
        [init("w", w)],
    )
    good = model.SerializeToString()
    rng = random.Random(13)
    for _ in range(300):
        data = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(data))
            what = rng.randrange(3)
            if what == 0:
                data[i] = rng.randrange(256)
            elif what == 1:
                del data[i]
            else:
                data.insert(i, rng.randrange(256))
        try:
            session = graphrt.Session(bytes(data), intra_op_threads=1)
            feeds = {d.name: np.ones([4], d.dtype or np.float32) for d in session.get_inputs()}
            session.run(None, feeds)
        except graphrt.SessionError:
            pass
