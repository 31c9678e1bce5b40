"""graphrt-ops-contrib's com.microsoft operators against inputs that break their schema.

onnxruntime defines the com.microsoft schemas (onnx does not): each operator the plugin
registers gets its required inputs typed by the schema (or float32 and int64 in place of the
first), of several ranks, with and without one input too many.  A run ends in a result or a
refusal of the model's or the input's kind; a "kernel_error" fails the test (scales shaped like
X broke QLinearGlobalAveragePool's output, a b_scale per element of a 1-D B
DynamicQuantizeMatMul's).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from tests.ops._schemas import feed_of, node_model, run_to_a_verdict
from tests.quantization.conftest import MISSING, REASON

ort_state = pytest.importorskip(
    "onnxruntime.capi.onnxruntime_pybind11_state",
    reason="the com.microsoft schemas come from onnxruntime (a test oracle), not installed here",
)

MS = "com.microsoft"
CODES = {
    "tensor(uint8)": (TensorProto.UINT8, np.uint8),
    "tensor(int8)": (TensorProto.INT8, np.int8),
    "tensor(float)": (TensorProto.FLOAT, np.float32),
    "tensor(int32)": (TensorProto.INT32, np.int32),
}
OTHERS = {"as typed": None, "float32 first": CODES["tensor(float)"]}
OTHERS["int64 first"] = (TensorProto.INT64, np.int64)
SHAPES = [(2, 3, 4, 4), (3,), (), (1, 0, 3)]


def _ops() -> dict[str, object]:
    if MISSING:
        return {}
    from graphrt_ops_contrib.table import OPERATORS

    ours = {d.op_type for d in OPERATORS if d.domain == MS}
    schemas = {s.name: s for s in ort_state.get_all_operator_schema() if s.domain == MS}
    return {op: schemas[op] for op in sorted(ours & set(schemas))}


def _typed(schema) -> list[tuple[int, object]] | None:
    constraints = {t.type_param_str: t.allowed_type_strs for t in schema.type_constraints}
    picked = []
    for formal in schema.inputs[: schema.min_input]:
        allowed = constraints.get(formal.typeStr, [formal.typeStr])
        first = next((CODES[t] for t in allowed if t in CODES), None)
        if first is None:
            return None
        picked.append(first)
    return picked


OPS = _ops()
CASES = [
    (op, other, shape, extra)
    for op, schema in OPS.items()
    if _typed(schema)
    for other in OTHERS
    for shape in SHAPES
    for extra in (0, 1)
]


def test_the_operators_are_found() -> None:
    if MISSING:
        pytest.skip(REASON)
    assert {"QLinearAdd", "QLinearGlobalAveragePool", "DynamicQuantizeMatMul"} <= set(OPS)


@pytest.mark.parametrize(
    "op, other, shape, extra",
    CASES,
    ids=[
        f"{op}-{o.replace(' ', '_')}-{'x'.join(map(str, s)) or 'scalar'}-{e}"
        for op, o, s, e in CASES
    ],
)
def test_refused_or_run_never_a_kernel_error(op, other, shape, extra) -> None:
    schema = OPS[op]
    picked = _typed(schema) + [_typed(schema)[-1]] * extra
    if OTHERS[other] is not None:
        picked[0] = OTHERS[other]
    model = node_model(op, [(code, shape) for code, _ in picked], max(1, schema.min_output), 1, MS)
    run_to_a_verdict(model, feed_of([(numpy_type, shape) for _, numpy_type in picked]))
