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
