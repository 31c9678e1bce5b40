"""Small multi-node models: the shapes the graph passes fuse and the memory planner shares.

Five patterns, each with hostile values where they hurt: element-wise chains with views and
in-place steps (the slab's reuse); Conv -> bias -> activation -> pool -> Gemm (the product
fusions); MatMul -> Add -> Gelu or a LayerNorm written out (the Gelu and LayerNorm fusions);
Q K^T -> scale -> mask -> Softmax -> V (the attention fusion); and shapes computed at run time
(Shape -> Gather -> Concat -> Reshape / ConstantOfShape / Expand / Range) with extreme
constants mixed in, where the sizes come from the data and the runtime must refuse the huge
ones before allocating.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from .harness import Case
from .models import Builder, finish
from .operators import NATIVE_PATHS, OpInfo
from .values import EXTREME_INTS, rare, tensor

F32 = np.dtype(np.float32)
UNARY = ["Relu", "Sigmoid", "Tanh", "Exp", "Erf", "Neg", "Abs", "Identity", "Sqrt", "Softmax"]
BINARY = ["Add", "Mul", "Sub", "Div", "Max", "Pow"]
CHAIN = OpInfo("", "chain", (17,), "fuzz", native=True)
OPSETS = [17, 13, 21, 11]


class Graph:
    """Nodes and constants of one chain, on top of a Builder's inputs."""

    def __init__(self, draw, b: Builder) -> None:
        self.draw, self.b = draw, b
        self.nodes: list = []

    def const(self, value: np.ndarray) -> str:
        name = self.b.fresh("c")
        self.b.initializers.append(numpy_helper.from_array(value, name))
        return name

    def node(self, op: str, inputs: list[str], outputs: int = 1, **attrs) -> list[str]:
        names = [self.b.fresh("v") for _ in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, names, name=self.b.fresh("n"), **attrs))
        return names

    def one(self, op: str, inputs: list[str], **attrs) -> str:
        return self.node(op, inputs, 1, **attrs)[0]

    def weight(self, shape: tuple[int, ...]) -> str:
        return self.const(self.draw(tensor(F32, shape)))


def graph_input(draw, b: Builder, shape: tuple[int, ...]) -> str:
    name = b.fresh("in")
    b.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
    b.feeds[name] = draw(tensor(F32, shape))
    return name


def elementwise(draw, g: Graph) -> list[str]:
    shape = tuple(draw(st.sampled_from([3, 1, 2, 4, 0, 8])) for _ in range(draw(st.integers(1, 4))))
    x = graph_input(draw, g.b, shape)
    v = x
    outs = []
    for _ in range(draw(st.integers(2, 6))):
        step = draw(st.sampled_from(["unary", "binary", "binary", "view", "concat", "split"]))
        if step == "unary":
            op = draw(st.sampled_from(UNARY))
            v = g.one(op, [v], **({"axis": -1} if op == "Softmax" else {}))
        elif step == "binary":
            other = draw(st.sampled_from(["x", "const", "self"]))
            rhs = (
                x
                if other == "x"
                else v
                if other == "self"
                else g.weight(tuple(1 if draw(st.booleans()) else d for d in shape[-2:]))
            )
            v = g.one(draw(st.sampled_from(BINARY)), [v, rhs] if draw(st.booleans()) else [rhs, v])
        elif step == "view":
            kind = draw(st.sampled_from(["Reshape", "Transpose", "Flatten", "Unsqueeze"]))
            if kind == "Reshape":
                v = g.one("Reshape", [v, g.const(np.array([-1], np.int64))])
            elif kind == "Transpose":
                v = g.one("Transpose", [v])
            elif kind == "Flatten":
                v = g.one("Flatten", [v], axis=0)
            else:
                v = g.one("Unsqueeze", [v, g.const(np.array([0], np.int64))])
            outs.append(v)  # a view that is also an output
            v = g.one("Relu", [v])
            shape = ()
        elif step == "concat":
            v = g.one("Concat", [v, v, x] if draw(st.booleans()) else [v, v], axis=0)
        else:
            parts = g.node("Split", [v], 2, axis=0) if draw(st.booleans()) else [v, v]
            v = g.one("Add", [parts[0], parts[-1]])
    return outs + [v]


def conv_chain(draw, g: Graph) -> list[str]:
    n, c, m = (draw(st.sampled_from(v)) for v in ([1, 2, 0], [3, 1, 8], [8, 4, 16, 0]))
    hw = draw(st.sampled_from([5, 8, 1, 16, 0]))
    k = draw(st.sampled_from([3, 1, 2]))
    x = graph_input(draw, g.b, (n, c, hw, hw))
    pads = [draw(st.sampled_from([0, 1, 2**31, 2**62])) if rare(draw, 6) else 1] * 4
    v = g.one("Conv", [x, g.weight((m, c, k, k))], pads=pads, kernel_shape=[k, k])
    if draw(st.booleans()):
        v = g.one("Add", [v, g.weight((1, m, 1, 1))])
    act = draw(st.sampled_from(["Relu", "Clip", "Sigmoid", "Add", "none"]))
    if act == "Clip":
        lo, hi = (
            g.const(np.array(b, np.float32)) for b in (0.0, draw(st.sampled_from([6.0, -1.0])))
        )
        v = g.one("Clip", [v, lo, hi])
    elif act == "Add":
        v = g.one("Add", [v, g.one("Identity", [v])])
    elif act != "none":
        v = g.one(act, [v])
    if draw(st.booleans()):
        v = g.one(
            "MaxPool", [v], kernel_shape=[2, 2], strides=[draw(st.sampled_from([2, 1, 2**62])), 2]
        )
    v = g.one("GlobalAveragePool", [v])
    v = g.one("Flatten", [v])
    return [g.one("Gemm", [v, g.weight((m, 5)), g.weight((5,))])]


def matmul_chain(draw, g: Graph) -> list[str]:
    rows, k, n = (draw(st.sampled_from(v)) for v in ([4, 1, 0, 33], [8, 3, 0], [6, 16, 1]))
    x = graph_input(draw, g.b, (draw(st.sampled_from([1, 2])), rows, k))
    v = g.one("Add", [g.one("MatMul", [x, g.weight((k, n))]), g.weight((n,))])
    tail = draw(st.sampled_from(["gelu", "layernorm", "relu", "sigmoid"]))
    if tail == "gelu":  # x * 0.5 * (1 + erf(x / sqrt 2))
        half = g.one("Mul", [v, g.const(np.array(0.5, np.float32))])
        erf = g.one("Erf", [g.one("Div", [v, g.const(np.array(1.4142135, np.float32))])])
        v = g.one("Mul", [half, g.one("Add", [erf, g.const(np.array(1.0, np.float32))])])
    elif tail == "layernorm":
        mean = g.one("ReduceMean", [v], axes=[-1])
        d = g.one("Sub", [v, mean])
        var = g.one(
            "ReduceMean", [g.one("Pow", [d, g.const(np.array(2.0, np.float32))])], axes=[-1]
        )
        eps = np.array(draw(st.sampled_from([1e-5, 0.0, -1.0, float("nan")])), np.float32)
        std = g.one("Sqrt", [g.one("Add", [var, g.const(eps)])])
        v = g.one("Add", [g.one("Mul", [g.one("Div", [d, std]), g.weight((n,))]), g.weight((n,))])
    else:
        v = g.one("Relu" if tail == "relu" else "Sigmoid", [v])
    return [v]


def attention_chain(draw, g: Graph) -> list[str]:
    b, h, s, d = (draw(st.sampled_from(v)) for v in ([1, 2], [1, 2], [4, 1, 0, 17], [8, 1, 4]))
    q, k, v = (graph_input(draw, g.b, (b, h, s, d)) for _ in range(3))
    scores = g.one("MatMul", [q, g.one("Transpose", [k], perm=[0, 1, 3, 2])])
    scale = draw(st.sampled_from([0.35, 1.0, 0.0, float("inf")]))
    scores = g.one("Mul", [scores, g.const(np.array(scale, np.float32))])
    if draw(st.booleans()):
        mask = np.triu(np.full((s, s), -np.inf, np.float32), 1)
        scores = g.one("Add", [scores, g.const(mask)])
    return [g.one("MatMul", [g.one("Softmax", [scores], axis=-1), v])]


def shape_chain(draw, g: Graph) -> list[str]:
    x = graph_input(draw, g.b, tuple(draw(st.sampled_from([2, 3, 1, 0])) for _ in range(3)))
    dims = g.one("Shape", [x])
    first = g.one("Gather", [dims, g.const(np.array([0], np.int64))])
    big = np.array([draw(st.sampled_from([4, *EXTREME_INTS]))], np.int64)
    target = g.one("Concat", [first, g.const(big)], axis=0)
    kind = draw(st.sampled_from(["ConstantOfShape", "Expand", "Reshape", "Range", "Tile"]))
    if kind == "ConstantOfShape":
        return [g.one("ConstantOfShape", [target])]
    if kind == "Expand":
        return [g.one("Expand", [x, target])]
    if kind == "Reshape":
        return [g.one("Reshape", [x, target])]
    if kind == "Tile":
        reps = g.one("Concat", [target, g.const(np.array([1], np.int64))], axis=0)
        return [g.one("Tile", [x, reps])]
    size = g.one("Cast", [g.one("ReduceSum", [target], keepdims=0)], to=TensorProto.FLOAT)
    delta = g.const(np.array(draw(st.sampled_from([1.0, 1e-30, 0.0, -1.0])), np.float32))
    return [g.one("Range", [g.const(np.array(0.0, np.float32)), size, delta])]


PATTERNS = {
    "elementwise": elementwise,
    "conv": conv_chain,
    "matmul": matmul_chain,
    "attention": attention_chain,
    "shape": shape_chain,
}


@st.composite
def chain_case(draw, pattern: str | None = None) -> Case:
    pattern = pattern or draw(st.sampled_from(sorted(PATTERNS)))
    b = Builder(draw, ())
    g = Graph(draw, b)
    outputs = PATTERNS[pattern](draw, g)
    opset = draw(st.sampled_from(OPSETS))
    case = finish(
        draw, CHAIN, b, g.nodes, list(dict.fromkeys(outputs)), opset, extra_label=f"/{pattern}"
    )
    case.paths = ("numpy", *NATIVE_PATHS)
    return case
