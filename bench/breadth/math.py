"""The math family: trigonometric and hyperbolic functions, Round, IsInf, IsNaN, the bitwise
operators, BitCast, more activations and normalizations.

Each case is the operator's largest onnx backend case with about 100x its elements, as a
one-node model at the opset of that case (at most one onnxruntime 1.32 loads).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from . import BenchCase

_RNG = np.random.default_rng(0)

_TRIG = {  # op -> (opset, a function of standard normal values inside its domain)
    "Sin": (22, lambda x: x),
    "Cos": (22, lambda x: x),
    "Tan": (22, lambda x: x),
    "Asin": (22, lambda x: np.tanh(x)),
    "Acos": (22, lambda x: np.tanh(x)),
    "Atan": (22, lambda x: x),
    "Sinh": (22, lambda x: x),
    "Cosh": (22, lambda x: x),
    "Asinh": (22, lambda x: x),
    "Acosh": (22, lambda x: np.abs(x) + 1),
    "Atanh": (22, lambda x: np.tanh(x)),
}


def _one_node(op, feed, opset, out_type=None, inits=(), **attrs):
    names = list(feed) + [t.name for t in inits]
    node = helper.make_node(op, names, ["y"], **attrs)
    decls = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for n, v in feed.items()
    ]
    first = next(iter(feed.values()))
    elem = out_type or helper.np_dtype_to_tensor_dtype(first.dtype)
    y = helper.make_tensor_value_info("y", elem, None)
    graph = helper.make_graph([node], op.lower(), decls, [y], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _normal(*shape, dtype=np.float32):
    return _RNG.standard_normal(shape).astype(dtype)


def _ints(*shape, dtype=np.int32):
    info = np.iinfo(dtype)
    return _RNG.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


def _case(name, op, feed, opset, out_type=None, inits=(), **attrs):
    return BenchCase(name, _one_node(op, feed, opset, out_type, inits, **attrs), feed)


def cases() -> list[BenchCase]:
    out = []
    for op, (opset, fn) in _TRIG.items():
        x = fn(_normal(30, 40, 5)).astype(np.float32)
        out.append(_case(f"{op}: 30x40x5", op, {"x": x}, opset))
    special = _normal(600)
    special[::7] = np.inf
    special[::11] = np.nan
    out += [
        _case("Round: 1500", "Round", {"x": _normal(1500) * 10}, 22),
        _case("IsInf: 600", "IsInf", {"x": special}, 20, TensorProto.BOOL),
        _case("IsNaN: 600", "IsNaN", {"x": special}, 20, TensorProto.BOOL),
    ]
    for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
        feed = {"a": _ints(30, 4, 5, 60, dtype=np.uint8), "b": _ints(4, 5, 60, dtype=np.uint8)}
        out.append(_case(f"{op}: uint8 30x4x5x60 & 4x5x60", op, feed, 18))
    out.append(_case("BitwiseNot: 30x4x5x60", "BitwiseNot", {"x": _ints(30, 4, 5, 60)}, 18))
    out.append(
        _case(
            "BitCast: float32 -> int32 200x30",
            "BitCast",
            {"x": _normal(200, 30)},
            26,
            TensorProto.INT32,
            to=TensorProto.INT32,
        )
    )
    x5 = _normal(20, 3, 4, 5, 60)
    slope = helper.make_tensor("slope", TensorProto.FLOAT, [3, 1, 1, 1], [0.1, 0.2, 0.3])
    out += [
        _case("PRelu: 20x3x4x5x60, slope 3x1x1x1", "PRelu", {"x": x5}, 16, inits=[slope]),
        _case("Celu: 30x3x3x10", "Celu", {"x": _normal(30, 3, 3, 10)}, 22, alpha=2.0),
        _case("Shrink: 500", "Shrink", {"x": _normal(500)}, 9, lambd=1.5, bias=1.5),
        _case("Softsign: 30x40x5", "Softsign", {"x": _normal(30, 40, 5)}, 22),
        _case("ThresholdedRelu: 30x40x5", "ThresholdedRelu", {"x": _normal(30, 40, 5)}, 22),
        _case("HardSwish: 30x40x5", "HardSwish", {"x": _normal(30, 40, 5) * 4}, 22),
        _case("Mish: 1000000", "Mish", {"x": _normal(1_000_000) * 4}, 22),
        _case("Swish: 300", "Swish", {"x": _normal(300)}, 24, alpha=1.0),
        _case("LpNormalization: p=2, 20x20x3", "LpNormalization", {"x": _normal(20, 20, 3)}, 22),
        _case(
            "LpNormalization: p=1 axis 0, 20x20x3",
            "LpNormalization",
            {"x": _normal(20, 20, 3)},
            22,
            p=1,
            axis=0,
        ),
    ]
    g = {"x": _normal(3, 4, 20, 20), "s": _normal(4), "b": _normal(4)}
    out.append(
        _case("GroupNormalization: 3x4x20x20, 2 groups", "GroupNormalization", g, 21, num_groups=2)
    )
    out.append(
        _case(
            "MeanVarianceNormalization: 3x3x30x10",
            "MeanVarianceNormalization",
            {"x": _normal(3, 3, 30, 10)},
            13,
        )
    )
    return out
