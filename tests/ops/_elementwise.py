"""What the element-wise tests share (test_elementwise.py, test_elementwise_legacy.py): the
kernels of the families, a node evaluated as a plan would, onnx's reference evaluator on one
node, bound in-place calls, sessions, and float bits."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import graphrt
from graphrt.attrs import node_info
from graphrt.kernel import InferContext, KernelContext, evaluate_node
from graphrt_ops_basic.table import OPERATORS

OPS = {
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Mod",
    "BitShift",
    "Equal",
    "Less",
    "Greater",
    "LessOrEqual",
    "GreaterOrEqual",
    "And",
    "Or",
    "Xor",
    "Not",
    "Sum",
    "Max",
    "Min",
    "Mean",
    "Relu",
    "Sigmoid",
    "Tanh",
    "Erf",
    "Sqrt",
    "Exp",
    "Log",
    "Neg",
    "Abs",
    "Reciprocal",
    "Floor",
    "Ceil",
    "Sign",
    "Softplus",
    "LeakyRelu",
    "Elu",
    "Selu",
    "HardSigmoid",
    "Clip",
    "Where",
    "Cast",
    "CastLike",
    "Dropout",
    "Softmax",
    "LogSoftmax",
    "Hardmax",
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
}
FACTORIES = {d.op_type: d.factory for d in OPERATORS if d.op_type in OPS and d.domain == ""}

RNG = np.random.default_rng(7)
X = (RNG.standard_normal((3, 5)) * 3).astype(np.float32)


def kernel_for(op: str, opset: int = 21, n_inputs: int = 2, n_outputs: int = 1, **attrs):
    inputs = [f"i{k}" for k in range(n_inputs)]
    outputs = [f"o{k}" for k in range(n_outputs)]
    node = helper.make_node(op, inputs, outputs, **attrs)
    return FACTORIES[op](node_info(node, opset))


def evaluate(op: str, *inputs, opset: int = 21, n_outputs: int = 1, exact: bool = False, **attrs):
    kernel = kernel_for(op, opset, len(inputs), n_outputs, **attrs)
    outs = evaluate_node(kernel, list(inputs), n_outputs, exact=exact)
    return outs if n_outputs > 1 else outs[0]


def reference(op: str, *inputs, opset: int, n_outputs: int = 1, **attrs):
    """onnx's reference evaluator on one node (a test oracle only)."""
    names = [f"i{k}" for k in range(len(inputs))]
    outs = [f"o{k}" for k in range(n_outputs)]
    node = helper.make_node(op, names, outs, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in names],
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in outs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    got = ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))
    return got if n_outputs > 1 else got[0]


def bind_in_place(op: str, *inputs, opset: int = 21, exact: bool = False, **attrs):
    """Run the kernel the way a plan does when its output takes input ``in_place_input``'s
    storage: infer, scratch, ``bind``, call.  Returns the output, which is that input array."""
    kernel = kernel_for(op, opset, len(inputs), 1, **attrs)
    ip = kernel.in_place_input
    assert ip is not None
    arrays = [np.array(x) for x in inputs]
    ictx = InferContext(
        [a.dtype for a in arrays], [a.shape for a in arrays], [None] * len(arrays), 1, exact
    )
    kernel.infer(ictx)
    dtype, shape = ictx.output_types()[0]
    assert (dtype, shape) == (arrays[ip].dtype, arrays[ip].shape)
    scratch = [np.full(s, 77, dtype=d) for d, s in ictx.scratch]  # garbage, like a reused slab
    kctx = KernelContext(prepared=ictx.prepared, scratch=scratch, exact=exact)
    out = arrays[ip]
    kernel.bind(kctx, arrays, [out])()
    return out


def session_for(
    op: str, inputs: dict, opset: int = 21, mode: str = "fast", threads: int = 1, **attrs
):
    node = helper.make_node(op, list(inputs), ["y"], **attrs)
    decls = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for n, v in inputs.items()
    ]
    y = helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)
    graph = helper.make_graph([node], "g", decls, [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return graphrt.Session(model, mode=mode, intra_op_threads=threads)


def bits(a: np.ndarray) -> list[int]:
    return a.reshape(-1).view({4: np.uint32, 8: np.uint64, 2: np.uint16}[a.itemsize]).tolist()
