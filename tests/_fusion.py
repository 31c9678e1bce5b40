"""Helpers of the fusion tests (test_fusion.py, test_fusion_patterns.py)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

import graphrt

F = TensorProto.FLOAT
RNG = np.random.default_rng(11)


def op_list(sess: graphrt.Session) -> list[str]:
    return [
        f"{n.info.domain}.{n.info.op_type}" if n.info.domain else n.info.op_type
        for n in sess.graph.nodes
    ]


def run(model: onnx.ModelProto, feed: dict, **options) -> tuple[graphrt.Session, np.ndarray]:
    sess = graphrt.Session(model, **options)
    return sess, sess.run(None, feed)[0]


def fused_and_plain(model, feed, level="basic", **options):
    fused, got = run(model, feed, optimization_level=level, **options)
    _, want = run(model, feed, optimization_level="none", **options)
    return fused, got, want


def rand_w(*shape: int, scale: float = 0.5) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def rand_x(*shape: int) -> np.ndarray:
    x = RNG.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[:3] = [0.0, -0.0, 1e-30]  # signed zeros and a tiny value through the chain
    return x
