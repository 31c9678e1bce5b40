"""What the reduce family's tests share (test_reduce_search.py, test_reduce_family.py): the
kernels, a node evaluated as a plan would, onnx's reference evaluator on one node, sessions,
TopK's order from its text, and checks."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import graphrt
from graphrt.attrs import node_info
from graphrt.errors import SessionError
from graphrt.kernel import evaluate_node
from graphrt_ops_basic.table import OPERATORS
from tests._versions import skip_unless_onnx_defines

FACTORIES = {d.op_type: d.factory for d in OPERATORS if d.domain == ""}
RNG = np.random.default_rng(7)
REDUCTIONS = ["ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]
#: What each reduction is over no axis (noop_with_empty_axes), from the attribute's text.
ELEMENT_WISE_STEPS = {
    "ReduceL1": np.abs,
    "ReduceL2": np.abs,
    "ReduceLogSum": np.log,
    "ReduceLogSumExp": lambda x: x,
    "ReduceSumSquare": np.square,
}


def evaluate(op, *inputs, opset=21, n_outputs=1, **attrs):
    """The kernel on concrete inputs, as a plan would run it (infer, then run)."""
    names = [f"i{k}" if x is not None else "" for k, x in enumerate(inputs)]
    node = helper.make_node(op, names, [f"o{k}" for k in range(n_outputs)], name="n", **attrs)
    kernel = FACTORIES[op](node_info(node, opset))
    outs = evaluate_node(kernel, [None if x is None else np.asarray(x) for x in inputs], n_outputs)
    return outs if n_outputs > 1 else outs[0]


def one_node_model(op, feeds, inits=(), opset=21, n_outputs=1, out_types=None, **attrs):
    names = list(feeds) + [t.name for t in inits]
    node = helper.make_node(op, names, [f"y{k}" for k in range(n_outputs)], name="n", **attrs)
    decls = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for n, v in feeds.items()
    ]
    out_types = out_types or [TensorProto.UNDEFINED] * n_outputs
    outs = [helper.make_tensor_value_info(f"y{k}", t, None) for k, t in enumerate(out_types)]
    graph = helper.make_graph([node], "g", decls, outs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def reference(op, *inputs, opset=21, n_outputs=1, **attrs):
    """onnx's reference evaluator on one node (a test oracle only)."""
    feeds = {f"i{k}": np.asarray(x) for k, x in enumerate(inputs)}
    got = ReferenceEvaluator(one_node_model(op, feeds, (), opset, n_outputs, **attrs)).run(
        None, feeds
    )
    return got if n_outputs > 1 else got[0]


def session(op, feeds, inits=(), opset=21, n_outputs=1, mode="fast", threads=1, **attrs):
    skip_unless_onnx_defines(opset)
    model = one_node_model(op, feeds, inits, opset, n_outputs, **attrs)
    return graphrt.Session(model, mode=mode, intra_op_threads=threads)


def ints(name, values, shape=None):
    values = np.asarray(values, np.int64)
    return numpy_helper.from_array(values if shape is None else values.reshape(shape), name)


def error(fn) -> SessionError:
    with pytest.raises(SessionError) as err:
        fn()
    return err.value


def same(got, want):
    np.testing.assert_array_equal(got, want)
    assert np.asarray(got).dtype == np.asarray(want).dtype
    assert np.asarray(got).shape == np.asarray(want).shape


def spec_top_k(x, k, axis, largest):
    """TopK from its text: numpy's order (NaN above all numbers), ties by lower index."""
    x = np.moveaxis(x, axis, -1)
    idx = np.empty(x.shape[:-1] + (k,), np.int64)
    for pos in np.ndindex(x.shape[:-1]):
        row = list(x[pos])

        def rank(j, row=row):
            v = row[j].item()  # a Python number: no wrap-around when negated
            nan = v != v
            key = (1 if nan else 0, 0 if nan else v)
            return (tuple(-t for t in key) if largest else key), j

        idx[pos] = sorted(range(len(row)), key=rank)[:k]
    values = np.take_along_axis(x, idx, axis=-1)
    return np.moveaxis(values, -1, axis), np.moveaxis(idx, -1, axis)


def top_k_data(shape, dtype, nan=False):
    x = RNG.integers(-4, 5, shape).astype(dtype)
    if nan:
        x[RNG.random(shape) < 0.05] = np.nan
        x[RNG.random(shape) < 0.1] = -0.0
    return x


def steady(sess, feeds):
    """Warm a session's plan and run states; return a steady run into preallocated outputs."""
    out = {f"y{k}": np.empty_like(r) for k, r in enumerate(sess.run(None, feeds))}
    for _ in range(3):
        sess.run(None, feeds, out=out)
    assert sess.cached_plans[0].static
    return lambda: sess.run(None, feeds, out=out)
