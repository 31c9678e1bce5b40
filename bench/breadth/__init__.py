"""Per-family cases of bench/ops_breadth.py: one module per operator family, each with a
``cases()`` function returning :class:`BenchCase` items.

A case is an operator's largest backend test case (onnx.backend.test) with its inputs scaled up
about 100x in elements, run as a one-node model by graphrt and onnxruntime in alternation.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx


@dataclasses.dataclass
class BenchCase:
    #: "Op: what is timed", e.g. "Resize: linear, 1x3x400x400 -> 2x".
    name: str
    #: The model to time (usually one node; onnx.helper built, opset onnxruntime loads).
    model: onnx.ModelProto
    #: Graph input name -> array.
    feed: dict[str, np.ndarray]


def one_node(
    name: str,
    op: str,
    feed: dict[str, np.ndarray],
    opset: int,
    consts: tuple[tuple[str, np.ndarray], ...] = (),
    out_types: list[int] | None = None,
    **attrs: object,
) -> BenchCase:
    """A case of one ai.onnx node: the feeds, then ``consts`` (initializers) as its inputs.

    Outputs ``y0, y1, ...`` have ``out_types`` (TensorProto element types; default: one output
    of the first feed's type).  IR version 10, which onnxruntime reads.
    """
    from onnx import helper, numpy_helper

    names = list(feed) + [n for n, _ in consts]
    first = helper.np_dtype_to_tensor_dtype(next(iter(feed.values())).dtype)
    types = out_types or [first]
    outs = [f"y{k}" for k in range(len(types))]
    node = helper.make_node(op, names, outs, **attrs)
    inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for n, v in feed.items()
    ]
    outputs = [helper.make_tensor_value_info(o, t, None) for o, t in zip(outs, types)]
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in consts]
    graph = helper.make_graph([node], "bench", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return BenchCase(name, model, feed)
