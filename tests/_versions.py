"""Versions of the libraries the tests compare against, for conditions that name them.

A test whose oracle (onnx's reference evaluator or node cases, onnxruntime) behaves
differently in an older release than the one the default environment installs says so with
one of these, the release that changed it and why, and checks against another oracle there.
"""

from __future__ import annotations

import re

import numpy as np
import onnx


def release(version: str) -> tuple[int, int]:
    """(major, minor) of a version string: '1.19.1' -> (1, 19), '2.4.0rc1' -> (2, 4)."""
    major, minor = re.match(r"(\d+)\.(\d+)", version).groups()
    return int(major), int(minor)


ONNX = release(onnx.__version__)
NUMPY = release(np.__version__)


def onnxruntime_release() -> tuple[int, int]:
    import onnxruntime

    return release(onnxruntime.__version__)


def skip_unless_onnx_defines(opset: int) -> None:
    """Skip a session test of an ai.onnx opset newer than the installed onnx defines: graphrt
    refuses such models (issue 13), though its kernels can be tested directly."""
    import pytest

    newest = onnx.defs.onnx_opset_version()
    if opset > newest:
        pytest.skip(f"onnx {onnx.__version__} defines ai.onnx up to opset {newest}, not {opset}")


def old_oracles() -> str | None:
    """Why the tests of the ai.onnx.ml, quantization and contrib operators cannot use this
    environment's oracles (tox -e numpy1 pins onnx < 1.20 and onnxruntime < 1.21), else None.

    Their expected values come from onnx >= 1.20's reference evaluator and node cases and
    onnxruntime >= 1.21: older releases differ in these operators' semantics (the node cases
    of QLinearMatMul int8 and QuantizeLinear float8, onnx.reference's float64 tree scores),
    lack types (INT2) and cannot load the IR 12 models onnxruntime.quantization writes.
    """
    if ONNX < (1, 20):
        return f"onnx {onnx.__version__} < 1.20: " + _OLD
    try:
        ort = onnxruntime_release()
    except ImportError:
        return None
    if ort < (1, 21):
        return f"onnxruntime {'.'.join(map(str, ort))} < 1.21: " + _OLD
    return None


_OLD = (
    "the oracles of these tests (onnx.reference, onnx's node cases, onnxruntime) are newer; "
    "graphrt's kernels are compared in the default environment"
)
