"""What the math-family tests share (test_math.py): the kernels, a node evaluated as a plan
would, onnx's reference evaluator on one node, one-node sessions, in-place calls, checks."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import graphrt
from graphrt.attrs import node_info
from graphrt.errors import SessionError
from graphrt.kernel import InferContext, KernelContext, evaluate_node
from graphrt_ops_basic.table import OPERATORS

TRIG = {
    "Sin": np.sin,
    "Cos": np.cos,
    "Tan": np.tan,
    "Asin": np.arcsin,
    "Acos": np.arccos,
    "Atan": np.arctan,
    "Sinh": np.sinh,
    "Cosh": np.cosh,
    "Asinh": np.arcsinh,
    "Acosh": np.arccosh,
    "Atanh": np.arctanh,
}
OPS = set(TRIG) | {
    "Round",
    "IsInf",
    "IsNaN",
    "BitwiseAnd",
    "BitwiseOr",
    "BitwiseXor",
    "BitwiseNot",
    "BitCast",
    "PRelu",
    "Celu",
    "Shrink",
    "Softsign",
    "ThresholdedRelu",
    "HardSwish",
    "Mish",
    "Swish",
    "LpNormalization",
    "GroupNormalization",
    "MeanVarianceNormalization",
}
FACTORIES = {d.op_type: d.factory for d in OPERATORS if d.op_type in OPS and d.domain == ""}
RNG = np.random.default_rng(11)
INF, NAN = math.inf, math.nan


def schema_missing(op: str) -> bool:
    return not onnx.defs.has(op)


def kernel_for(op: str, n_inputs: int = 1, opset: int = 22, **attrs):
    node = helper.make_node(op, [f"i{k}" for k in range(n_inputs)], ["o"], name="n1", **attrs)
    return FACTORIES[op](node_info(node, opset))


def evaluate(op: str, *inputs, opset: int = 22, exact: bool = False, **attrs):
    kernel = kernel_for(op, len(inputs), opset, **attrs)
    with np.errstate(all="ignore"):  # as in a session: NaN and inf are results
        return evaluate_node(kernel, [np.asarray(x) for x in inputs], 1, exact=exact)[0]


def reference(op: str, *inputs, opset: int, **attrs):
    """onnx's reference evaluator on one node (a test oracle only)."""
    names = [f"i{k}" for k in range(len(inputs))]
    node = helper.make_node(op, names, ["o"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for n, v in zip(names, inputs)
        ],
        [helper.make_tensor_value_info("o", TensorProto.UNDEFINED, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    with np.errstate(all="ignore"):
        return ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))[0]


def session_for(op, feeds: dict, opset=22, mode="fast", threads=1, inits=(), **attrs):
    names = list(feeds) + [t.name for t in inits]
    node = helper.make_node(op, names, ["y"], name="n1", **attrs)
    decls = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for n, v in feeds.items()
    ]
    y = helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)
    graph = helper.make_graph([node], "g", decls, [y], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return graphrt.Session(model, mode=mode, intra_op_threads=threads)


def bind_in_place(op: str, *inputs, opset: int = 22, exact: bool = False, **attrs):
    """Infer, garbage scratch, bind and call with the output in input 0's storage."""
    kernel = kernel_for(op, len(inputs), opset, **attrs)
    assert kernel.in_place_input == 0
    arrays = [np.array(x) for x in inputs]
    ictx = InferContext(
        [a.dtype for a in arrays], [a.shape for a in arrays], [None] * len(arrays), 1, exact
    )
    kernel.infer(ictx)
    scratch = [np.full(s, 77, dtype=d) for d, s in ictx.scratch]
    kctx = KernelContext(prepared=ictx.prepared, scratch=scratch, exact=exact)
    with np.errstate(all="ignore"):
        kernel.bind(kctx, arrays, [arrays[0]])()
    return arrays[0]


def error_of(fn) -> SessionError:
    with pytest.raises(SessionError) as err:
        fn()
    return err.value


def same(got, want, dtype=None):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == (want.dtype if dtype is None else np.dtype(dtype))
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))


def close(got, want, dtype, rtol=1e-6, atol=1e-7):
    got = np.asarray(got)
    assert got.dtype == np.dtype(dtype)
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=atol)


def bits(a: np.ndarray) -> list[int]:
    a = np.ascontiguousarray(a)
    return (
        a.reshape(-1)
        .view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.itemsize])
        .tolist()
    )


def int_values(dtype, shape):
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    flat = x.reshape(-1)
    flat[:3] = [info.min, info.max, 0][: flat.size]
    return x


def f64(x):
    return np.asarray(x, np.float64)


def spec_shrink(x, lambd, bias):
    return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0))
