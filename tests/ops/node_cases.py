"""Run onnx's generated backend node cases for single operators directly through kernels.

This exercises one kernel at a time without sessions (``graphrt.kernel.evaluate_node``); the
session-level conformance run is tests/test_backend.py.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
from onnx import numpy_helper

from graphrt.attrs import node_info
from graphrt.kernel import evaluate_node


@functools.lru_cache(maxsize=1)
def all_cases():
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return collect_testcases(None)


def single_node_cases(op_types: set[str]):
    """(name, model, inputs, outputs) of every generated case that is one node of op_types."""
    out = []
    for case in all_cases():
        model = case.model
        if model is None or len(model.graph.node) != 1:
            continue
        if model.graph.node[0].op_type not in op_types or model.graph.node[0].domain not in (
            "",
            "ai.onnx",
        ):
            continue
        for inputs, outputs in case.data_sets:
            out.append((case.name, model, inputs, outputs))
    return out


def _to_array(x):
    if isinstance(x, onnx.TensorProto):
        return numpy_helper.to_array(x)
    return x


def run_case(kernel_factory, model, inputs, outputs, rtol=1e-3, atol=1e-7):
    node = model.graph.node[0]
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    kernel = kernel_factory(node_info(node, opset))
    names = [i.name for i in model.graph.input]
    values = [_to_array(x) for x in inputs]
    # onnx stores 0-d test inputs as numpy scalars; kernels take arrays
    feed = dict(zip(names, [v if isinstance(v, list) else np.asarray(v) for v in values]))
    args = [feed.get(n) if n else None for n in node.input]
    got = evaluate_node(kernel, args, len(node.output))
    for expected, actual in zip(outputs, got):
        expected = _to_array(expected)
        np.testing.assert_allclose(_comparable(actual), _comparable(expected), rtol=rtol, atol=atol)
        assert np.asarray(actual).dtype == np.asarray(expected).dtype, (
            actual.dtype,
            expected.dtype,
        )


def _comparable(x):
    """ml_dtypes' types (bfloat16, float8, float4, int4, ...) as float32, which holds each of
    their values exactly: numpy 1's assert_allclose promotes the expected values with a Python
    float and finds no common type with most of them (DTypePromotionError)."""
    x = np.asarray(x) if isinstance(x, np.generic) else x
    if isinstance(x, np.ndarray) and x.dtype.type.__module__.startswith("ml_dtypes"):
        return x.astype(np.float32)
    return x


def node_case_params(op_types: set[str], expected_failures: dict[str, str]) -> list:
    """pytest params (model, inputs, outputs) of every node case; known failures strict xfail."""
    from collections import Counter

    import pytest

    seen: Counter[str] = Counter()
    params = []
    for name, model, inputs, outputs in single_node_cases(op_types):
        seen[name] += 1
        case_id = name if seen[name] == 1 else f"{name}[{seen[name] - 1}]"
        marks = []
        if name in expected_failures:
            marks.append(pytest.mark.xfail(reason=expected_failures[name], strict=True))
        params.append(pytest.param(model, inputs, outputs, id=case_id, marks=marks))
    return params
