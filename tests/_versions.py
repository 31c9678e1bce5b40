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
