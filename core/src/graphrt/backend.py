"""``onnx.backend.base.Backend`` for graphrt, as onnxruntime's backend module provides one.

    import graphrt.backend as backend
    rep = backend.prepare(model)
    outputs = rep.run([x])

This is what onnx's backend test suite drives (tests/test_backend.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, Device, DeviceType

from graphrt.options import OPTION_NAMES
from graphrt.session import Session

__all__ = [
    "GraphrtBackend",
    "GraphrtRep",
    "is_compatible",
    "prepare",
    "run_model",
    "run_node",
    "supports_device",
]


class GraphrtRep(BackendRep):
    """A prepared model: runs with inputs given in the order of the graph's inputs."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._names = [i.name for i in session.get_inputs()]

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        if isinstance(inputs, dict):
            feed = dict(inputs)
        elif isinstance(inputs, (list, tuple)):
            if len(inputs) > len(self._names):
                raise ValueError(f"{len(inputs)} inputs given, the model takes {len(self._names)}")
            feed = dict(zip(self._names, inputs))
        else:
            feed = {self._names[0]: inputs}
        return tuple(self.session.run(None, feed))


class GraphrtBackend(Backend):
    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return Device(device).type == DeviceType.CPU

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> GraphrtRep:
        if not cls.supports_device(device):
            raise RuntimeError(f"graphrt runs on the CPU only, not {device!r}")
        if isinstance(model, GraphrtRep):
            return model
        if isinstance(model, Session):
            return GraphrtRep(model)
        # onnx's runner passes keywords of its own: keep the session options only.
        options = {k: v for k, v in kwargs.items() if k in OPTION_NAMES}
        return GraphrtRep(Session(model, kwargs.get("options"), **options))

    @classmethod
    def run_model(
        cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any
    ) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls,
        node: onnx.NodeProto,
        inputs: Sequence[Any],
        device: str = "CPU",
        outputs_info: Sequence[tuple[Any, Any]] | None = None,
        **kwargs: Any,
    ) -> tuple[Any, ...]:
        """Run one node by wrapping it in a model whose inputs are the given arrays."""
        from onnx import helper

        arrays = [np.asarray(x) for x in inputs]
        names = [n for n in node.input if n]
        graph_inputs = [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in zip(names, arrays)
        ]
        graph_outputs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
        opset = kwargs.pop("opset_version", onnx.defs.onnx_opset_version())
        model = helper.make_model(
            helper.make_graph([node], "run_node", graph_inputs, graph_outputs),
            opset_imports=[helper.make_opsetid(node.domain or "", opset)],
        )
        return cls.prepare(model, device, **kwargs).run(dict(zip(names, arrays)))


prepare = GraphrtBackend.prepare
run_model = GraphrtBackend.run_model
run_node = GraphrtBackend.run_node
supports_device = GraphrtBackend.supports_device
is_compatible = GraphrtBackend.is_compatible
