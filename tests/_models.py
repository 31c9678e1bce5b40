"""Small models the tests build with onnx.helper."""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def light_model(name: str) -> str:
    return os.path.join(LIGHT_DIR, f"light_{name}.onnx")


def make_model(nodes, inputs, outputs, initializers=(), opset=17, domains=(), **kw):
    graph = helper.make_graph(nodes, "test", inputs, outputs, list(initializers))
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(graph, opset_imports=imports, **kw)


@functools.cache
def onnxruntime_limits() -> tuple[int, int]:
    """The newest IR version and ai.onnx opset the installed onnxruntime loads, found by loading
    an Identity model stamped with each version from onnx's own down."""
    import onnxruntime as ort

    def loads(ir_version: int, opset: int) -> bool:
        identity = make_model(
            [helper.make_node("Identity", ["x"], ["y"])],
            [tensor("x", shape=[1])],
            [tensor("y")],
            opset=opset,
            ir_version=ir_version,
        )
        try:
            ort.InferenceSession(identity.SerializeToString(), providers=["CPUExecutionProvider"])
        except Exception:  # onnxruntime's InvalidArgument: unsupported IR version or opset
            return False
        return True

    ir_version = next(v for v in range(onnx.IR_VERSION, 2, -1) if loads(v, 7))
    opset = next(o for o in range(onnx.defs.onnx_opset_version(), 0, -1) if loads(ir_version, o))
    return ir_version, opset


def _signature(schema: onnx.defs.OpSchema) -> tuple:
    """An operator schema less its type constraints: attributes, formal inputs and outputs."""
    attrs = {
        name: (a.type, a.required, a.default_value.SerializeToString())
        for name, a in schema.attributes.items()
    }
    return (
        schema.name,
        attrs,
        [(i.name, i.option, i.type_str) for i in schema.inputs],
        [(o.name, o.option, o.type_str) for o in schema.outputs],
    )


def _nodes(graph: onnx.GraphProto):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for g in [attr.g, *attr.graphs] if attr.HasField("g") else attr.graphs:
                yield from _nodes(g)


def _same_operators(model: onnx.ModelProto, opset: int, older: int) -> bool:
    """Every ai.onnx node of the model reads the same at opset ``older`` as at ``opset``, but
    for the types it accepts (opset 22 only added bfloat16 to Conv, the pools and
    InstanceNormalization, for instance)."""
    for node in _nodes(model.graph):
        if node.domain not in ("", "ai.onnx"):
            continue
        try:
            now = onnx.defs.get_schema(node.op_type, opset)
            then = onnx.defs.get_schema(node.op_type, older)
        except onnx.defs.SchemaError:
            return False
        if _signature(now) != _signature(then):
            return False
    return True


def for_onnxruntime(model: onnx.ModelProto) -> bytes:
    """The model serialized for the installed onnxruntime, an oracle of the tests.

    onnx.helper stamps models with the newest IR version the installed onnx knows, which an
    older onnxruntime refuses to load (onnx 1.19 writes IR 12, onnxruntime 1.20 reads up to
    IR 10 and ai.onnx opset 21).  The IR version is lowered to what onnxruntime reads when the
    model's opsets exist in it (onnx.helper.find_min_ir_version_for), and the ai.onnx opset when
    every node's operator is the same at the lower opset up to the types it accepts (so
    onnxruntime still refuses a type the older opset lacks).  Otherwise the model goes as it
    is and onnxruntime's refusal shows.  A model onnxruntime reads is not touched.
    """
    max_ir, max_opset = onnxruntime_limits()
    opsets = {o.domain: o.version for o in model.opset_import}
    default = opsets.get("", opsets.get("ai.onnx"))
    lower_opset = default is not None and default > max_opset
    if lower_opset and not _same_operators(model, default, max_opset):
        return model.SerializeToString()
    if model.ir_version <= max_ir and not lower_opset:
        return model.SerializeToString()
    lowered = onnx.ModelProto()
    lowered.CopyFrom(model)
    if lower_opset:
        for o in lowered.opset_import:
            if o.domain in ("", "ai.onnx"):
                o.version = max_opset
    if lowered.ir_version > max_ir:
        needed = helper.find_min_ir_version_for(list(lowered.opset_import), ignore_unknown=True)
        if needed > max_ir:
            return model.SerializeToString()
        lowered.ir_version = max_ir
    return lowered.SerializeToString()


def ort_session(model: onnx.ModelProto, options: Any = None) -> Any:
    """An onnxruntime CPU session of the model (an oracle of the tests), see for_onnxruntime."""
    import onnxruntime as ort

    return ort.InferenceSession(for_onnxruntime(model), options, providers=["CPUExecutionProvider"])


def tensor(name, elem=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def mlp(hidden=(32, 16), n_in=24, n_out=10, seed=0, batch="N"):
    """MatMul + Add + Relu layers and a Gemm head, random weights."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    prev, width = "x", n_in
    for i, h in enumerate(hidden):
        w = (rng.standard_normal((width, h)) / np.sqrt(width)).astype(np.float32)
        b = rng.standard_normal(h).astype(np.float32)
        inits += [init(f"w{i}", w), init(f"b{i}", b)]
        nodes += [
            helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]),
            helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
            helper.make_node("Relu", [f"a{i}"], [f"r{i}"]),
        ]
        prev, width = f"r{i}", h
    wo = (rng.standard_normal((n_out, width)) / np.sqrt(width)).astype(np.float32)
    bo = rng.standard_normal(n_out).astype(np.float32)
    inits += [init("wo", wo), init("bo", bo)]
    nodes.append(helper.make_node("Gemm", [prev, "wo", "bo"], ["y"], transB=1, alpha=0.5, beta=2.0))
    return make_model(
        nodes, [tensor("x", shape=[batch, n_in])], [tensor("y", shape=[batch, n_out])], inits
    )


def add_chain(n=100, width=64):
    nodes = [
        helper.make_node("Add", ["x" if i == 0 else f"v{i - 1}", "c"], [f"v{i}"]) for i in range(n)
    ]
    nodes[-1].output[0] = "y"
    return make_model(
        nodes,
        [tensor("x", shape=[1, width])],
        [tensor("y", shape=[1, width])],
        [init("c", np.full((1, width), 0.5, np.float32))],
    )


def small_cnn(seed=0, channels=8, bn=True):
    """Conv -> BatchNorm -> Relu -> MaxPool -> Conv(grouped) -> Relu -> GlobalAveragePool ->
    Flatten -> Gemm -> Softmax, random weights."""
    rng = np.random.default_rng(seed)
    c = channels
    f32 = np.float32
    inits = [
        init("w1", (rng.standard_normal((c, 3, 3, 3)) * 0.3).astype(f32)),
        init("b1", rng.standard_normal(c).astype(f32)),
        init("s", (rng.random(c) + 0.5).astype(f32)),
        init("bb", rng.standard_normal(c).astype(f32)),
        init("mean", rng.standard_normal(c).astype(f32)),
        init("var", (rng.random(c) + 0.5).astype(f32)),
        init("w2", (rng.standard_normal((2 * c, 2, 3, 3)) * 0.3).astype(f32)),
        init("wf", (rng.standard_normal((10, 2 * c)) * 0.3).astype(f32)),
        init("bf", rng.standard_normal(10).astype(f32)),
    ]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1])]
    if bn:
        nodes.append(
            helper.make_node("BatchNormalization", ["c1", "s", "bb", "mean", "var"], ["n1"])
        )
    else:
        nodes.append(helper.make_node("Identity", ["c1"], ["n1"]))
    nodes += [
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], group=c // 2, pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["y"], axis=-1),
    ]
    return make_model(
        nodes, [tensor("x", shape=["N", 3, 16, 16])], [tensor("y", shape=["N", 10])], inits
    )
