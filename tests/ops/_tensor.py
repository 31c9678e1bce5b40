"""What the tensor-operator tests share (test_tensor.py, test_tensor_indexing.py): the kernels,
a node evaluated as a plan would, onnx's reference evaluator and onnxruntime on one node,
sessions, and checks."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import graphrt
from graphrt.attrs import node_info
from graphrt.errors import SessionError
from graphrt.kernel import evaluate_node
from graphrt_ops_basic.table import OPERATORS
from tests._models import ort_session

OPS = {
    "Shape",
    "Size",
    "ConstantOfShape",
    "Range",
    "Expand",
    "Concat",
    "Gather",
    "GatherElements",
    "ScatterElements",
    "Slice",
    "Transpose",
    "Split",
    "Tile",
    "Pad",
    "NonZero",
}
FACTORIES = {d.op_type: d.factory for d in OPERATORS if d.op_type in OPS and d.domain == ""}
DEFS = {d.op_type: d for d in OPERATORS if d.op_type in OPS and d.domain == ""}


def kernel_for(op: str, opset: int = 21, n_inputs: int = 1, n_outputs: int = 1, **attrs):
    inputs = [f"i{k}" for k in range(n_inputs)]
    outputs = [f"o{k}" for k in range(n_outputs)]
    node = helper.make_node(op, inputs, outputs, **attrs)
    return FACTORIES[op](node_info(node, opset))


def evaluate(op: str, *inputs, opset: int = 21, n_outputs: int = 1, **attrs):
    kernel = kernel_for(op, opset, len(inputs), n_outputs, **attrs)
    outs = evaluate_node(kernel, [None if x is None else np.asarray(x) for x in inputs], n_outputs)
    return outs if n_outputs > 1 else outs[0]


def reference(op: str, *inputs, opset: int, n_outputs: int = 1, **attrs):
    """onnx's reference evaluator on one node (a test oracle only)."""
    names = [f"i{k}" for k in range(len(inputs))]
    outs = [f"o{k}" for k in range(n_outputs)]
    model = _model(op, names, outs, opset, **attrs)
    got = ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))
    return got if n_outputs > 1 else got[0]


def onnxruntime_run(op: str, *inputs, opset: int, **attrs):
    """onnxruntime on one node whose output has the first input's type (a test oracle only)."""
    pytest.importorskip("onnxruntime")
    names = [f"i{k}" for k in range(len(inputs))]
    decls = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for n, v in zip(names, inputs)
    ]
    model = _model(op, names, ["o0"], opset, (), decls, **attrs)
    model.graph.output[0].type.tensor_type.elem_type = decls[0].type.tensor_type.elem_type
    return ort_session(model).run(None, dict(zip(names, inputs)))[0]


def _model(op, names, outs, opset, inits=(), decls=None, **attrs):
    node = helper.make_node(op, names, outs, **attrs)
    init_names = {t.name for t in inits}
    if decls is None:
        decls = [
            helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None)
            for n in names
            if n not in init_names
        ]
    graph = helper.make_graph(
        [node],
        "g",
        decls,
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in outs],
        list(inits),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def session_for(op, feeds: dict, inits=(), opset=21, n_outputs=1, mode="fast", **attrs):
    """A one-node session; ``inits`` are constant inputs (initializers) listed after feeds."""
    names = list(feeds) + [t.name for t in inits]
    decls = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for n, v in feeds.items()
    ]
    outs = [f"y{k}" for k in range(n_outputs)]
    model = _model(op, names, outs, opset, inits, decls, **attrs)
    return graphrt.Session(model, mode=mode, intra_op_threads=1)


def ints(name: str, values) -> TensorProto:
    values = list(values)
    return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)


def assert_same(got, want):
    np.testing.assert_array_equal(got, want)
    assert np.asarray(got).dtype == np.asarray(want).dtype
    assert np.asarray(got).shape == np.asarray(want).shape


def kind_of(fn) -> str:
    with pytest.raises(SessionError) as err:
        fn()
    return err.value.kind


X = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
