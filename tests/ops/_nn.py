"""What the neural-network operator tests share (test_nn.py, test_pool_norm.py): a kernel bound
the way a plan binds it, onnxruntime and the reference evaluator on one node, and helpers."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from graphrt.attrs import node_info
from graphrt.kernel import InferContext, KernelContext
from graphrt_ops_basic.table import OPERATORS
from tests._models import ort_session

ort = pytest.importorskip("onnxruntime")

OPS = {
    "Conv",
    "ConvTranspose",
    "MaxPool",
    "AveragePool",
    "LpPool",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "GlobalLpPool",
    "BatchNormalization",
    "InstanceNormalization",
    "LayerNormalization",
    "LRN",
}
FACTORIES = {d.op_type: d.factory for d in OPERATORS if d.op_type in OPS and d.domain == ""}


def make_node(op: str, n_inputs: int, n_outputs: int = 1, **attrs) -> onnx.NodeProto:
    inputs = [f"i{k}" for k in range(n_inputs)]
    outputs = [f"o{k}" for k in range(n_outputs)]
    return helper.make_node(op, inputs, outputs, **attrs)


class Bound:
    """A kernel prepared and bound the way a plan does it, on arrays made once."""

    def __init__(self, op, inputs, n_outputs=1, opset=22, known=(1, 2, 3, 4), pool=None, **attrs):
        node = make_node(op, len(inputs), n_outputs, **attrs)
        self.kernel = FACTORIES[op](node_info(node, opset))
        inputs = [None if x is None else np.asarray(x) for x in inputs]
        ictx = InferContext(
            [None if x is None else x.dtype for x in inputs],
            [None if x is None else x.shape for x in inputs],
            [x if i in known else None for i, x in enumerate(inputs)],
            n_outputs,
        )
        self.kernel.infer(ictx)
        self.outputs = [None if t is None else np.empty(t[1], t[0]) for t in ictx.output_types()]
        # scratch holds garbage, as slab memory another step used does
        scratch = [_garbage(d, s) for d, s in ictx.scratch]
        self.ctx = KernelContext(prepared=ictx.prepared, scratch=scratch, pool=pool)
        self.inputs = inputs
        self.step = self.kernel.bind(self.ctx, inputs, self.outputs)

    def __call__(self) -> list[np.ndarray]:
        self.step()
        return self.outputs


def _garbage(dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    a = np.empty(shape, dtype)
    a.view(np.uint8).fill(0xFF)  # NaN in every float type
    return a


def ort_run(op, inputs, n_outputs=1, opset=22, **attrs) -> list[np.ndarray]:
    node = make_node(op, len(inputs), n_outputs, **attrs)
    decl = [
        helper.make_tensor_value_info(f"i{k}", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
        for k, x in enumerate(inputs)
    ]
    types = [helper.np_dtype_to_tensor_dtype(inputs[0].dtype)] * n_outputs
    if op == "MaxPool" and n_outputs > 1:
        types[1] = TensorProto.INT64
    if op == "LayerNormalization":
        types[1:] = [TensorProto.FLOAT] * (n_outputs - 1)
    outs = [helper.make_tensor_value_info(o, t, None) for o, t in zip(node.output, types)]
    graph = helper.make_graph([node], "g", decl, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort_session(model, so).run(None, {f"i{k}": x for k, x in enumerate(inputs)})


def reference_run(op, inputs, n_outputs=1, opset=22, **attrs) -> list[np.ndarray]:
    node = make_node(op, len(inputs), n_outputs, **attrs)
    decl = [
        helper.make_tensor_value_info(f"i{k}", TensorProto.UNDEFINED, None)
        for k in range(len(inputs))
    ]
    outs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in node.output]
    graph = helper.make_graph([node], "g", decl, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, {f"i{k}": x for k, x in enumerate(inputs)})


def assert_close(got, want, rtol=1e-4, atol=1e-5):
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def _same_pads_are_natural(spatial, kernel, strides, dilations) -> bool:
    """SAME padding both oracles agree on: no dilation and a window at least the stride (else
    the spec's pad formula turns negative; graphrt pads by zero there, TensorFlow's rule)."""
    return all(d == 1 and k >= s for k, s, d in zip(kernel, strides, dilations))


def _spec_pads(spatial, kernel, attrs: dict) -> list[int]:
    """The pads [begin..., end...] the spec gives for auto_pad and pads.  SAME: an output of
    ceil(in / stride) and the total padding that needs, split in two with the odd one at the
    end (SAME_UPPER) or the beginning (SAME_LOWER)."""
    rank = len(spatial)
    auto = attrs.get("auto_pad", "NOTSET")
    if auto == "NOTSET":
        return list(attrs.get("pads", [0] * 2 * rank))
    if auto == "VALID":
        return [0] * 2 * rank
    strides = attrs.get("strides", [1] * rank)
    dilations = attrs.get("dilations", [1] * rank)
    begin, end = [], []
    for n, k, s, d in zip(spatial, kernel, strides, dilations):
        total = max((-(-n // s) - 1) * s + (k - 1) * d + 1 - n, 0)
        small, large = total // 2, total - total // 2
        begin.append(large if auto == "SAME_LOWER" else small)
        end.append(total - begin[-1])
    return begin + end


def bn_inputs(rng, x_shape, dtype=np.float32):
    """BatchNormalization's X, scale, B, mean and a positive var."""
    c = x_shape[1]
    return [
        rand(rng, *x_shape, dtype=dtype) * 2 + 1,
        (rng.random(c) + 0.5).astype(dtype),
        rand(rng, c, dtype=dtype),
        rand(rng, c, dtype=dtype),
        (rng.random(c) + 0.5).astype(dtype),
    ]
