"""Native Softmax (fast mode, graphrt_ops_simd.softmax): the kernel against float64 on every
ISA with row lengths that are and are not multiples of the vector widths, sessions against
onnxruntime (opset 13's last axis, the older 2-D coercion, strided inputs), the same bits for
any thread count, and the fallbacks to ops-basic (exact mode, float64, an inner axis)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import graphrt
from tests._models import make_model, ort_session, tensor
from tests.simd._simd import ALL_PATHS, ISAS, bits, path_or_skip, simd

F32 = np.float32
_native = simd._native  # _simd skips the module when the plugin is not installed
simd_softmax = pytest.importorskip("graphrt_ops_simd.softmax")


def _reference(x: np.ndarray) -> np.ndarray:
    d = x.astype(np.float64)
    e = np.exp(d - d.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize("n", [1, 3, 8, 16, 17, 33, 1000])
def test_kernel_values(isa, n):
    """Within a few float32 ulp of float64; the tail past the last whole vector included; in
    place as well; a row with a NaN, +inf or only -inf is NaN (as ops-basic's passes give)."""
    path_or_skip(isa)
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((5, n)) * 20).astype(F32)
    y = np.empty_like(x)
    _native.softmax(x, y, isa)
    np.testing.assert_allclose(y, _reference(x), rtol=5e-6, atol=1e-30)
    z = x.copy()
    _native.softmax(z, z, isa)
    np.testing.assert_array_equal(bits(z), bits(y))
    x[0, n // 2], x[1, -1], x[2] = np.nan, np.inf, -np.inf
    _native.softmax(x, y, isa)
    assert np.isnan(y[:3]).all() and np.isfinite(y[3:]).all()


def _model(shape, opset=13, elem=TensorProto.FLOAT, transpose=None, **attrs):
    nodes, source = [], "x"
    if transpose is not None:
        nodes.append(helper.make_node("Transpose", ["x"], ["t"], perm=transpose))
        source = "t"
    nodes.append(helper.make_node("Softmax", [source], ["y"], **attrs))
    return make_model(nodes, [tensor("x", elem, list(shape))], [tensor("y", elem)], opset=opset)


def _counting(monkeypatch) -> list:
    calls = []
    real = simd_softmax._native.softmax

    def counted(*args):
        calls.append(args[0].shape)
        return real(*args)

    monkeypatch.setattr(simd_softmax._native, "softmax", counted)
    return calls


CASES = [
    ((1, 1000), 13, None, {}),
    ((4, 7, 33), 13, None, {}),
    ((2, 3, 16), 13, None, dict(axis=2)),
    ((1, 1000, 1, 1), 11, None, {}),  # squeezenet's: axis 1, the trailing axes coerced
    ((2, 1000, 1, 1), 13, None, dict(axis=1)),  # opset 13: axis 1 then axes of 1, one run
    ((3, 1, 1), 13, None, dict(axis=-3)),
    ((2, 3, 4, 5), 11, None, dict(axis=2)),
    ((3, 9, 5), 13, [0, 2, 1], {}),  # a transposed view: copied, then the native kernel
]


@pytest.mark.skipif(ISAS[-1] == "scalar", reason="no SIMD path on this CPU: Softmax stays numpy")
@pytest.mark.parametrize("shape, opset, perm, attrs", CASES)
def test_sessions_match_onnxruntime_natively(shape, opset, perm, attrs, monkeypatch):
    calls = _counting(monkeypatch)
    model = _model(shape, opset, transpose=perm, **attrs)
    x = (np.random.default_rng(1).standard_normal(shape) * 4).astype(F32)
    want = ort_session(model).run(None, {"x": x})[0]
    got = graphrt.Session(model, kernel_path=ISAS[-1]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert len(calls) == 1


@pytest.mark.skipif(ISAS[-1] == "scalar", reason="no SIMD path on this CPU: Softmax stays numpy")
def test_same_bits_at_any_thread_count(monkeypatch):
    """Rows spread over the plugin's threads from 2^18 elements: each row's bits its own."""
    calls = _counting(monkeypatch)
    model = _model((640, 1001))
    x = (np.random.default_rng(2).standard_normal((640, 1001)) * 9).astype(F32)
    runs = [graphrt.Session(model, intra_op_threads=t).run(None, {"x": x})[0] for t in (1, 2, 4)]
    for got in runs[1:]:
        np.testing.assert_array_equal(bits(got), bits(runs[0]))
    np.testing.assert_allclose(runs[0], _reference(x), rtol=5e-6, atol=1e-30)
    assert len(calls) == 3


@pytest.mark.parametrize(
    "shape, elem, attrs, exact",
    [
        ((4, 7), TensorProto.FLOAT, {}, True),  # exact mode: ops-basic's canonical kernel
        ((4, 7), TensorProto.DOUBLE, {}, False),
        ((4, 7, 3), TensorProto.FLOAT, dict(axis=1), False),  # an inner axis (opset 13)
        ((4, 7, 1, 2), TensorProto.FLOAT, dict(axis=1), False),  # ... an axis of 1 before it
    ],
)
def test_fallbacks_to_ops_basic(shape, elem, attrs, exact, monkeypatch):
    calls = _counting(monkeypatch)
    model = _model(shape, elem=elem, **attrs)
    dtype = np.float64 if elem == TensorProto.DOUBLE else F32
    x = np.random.default_rng(3).standard_normal(shape).astype(dtype)
    mode = "exact" if exact else "fast"
    got = graphrt.Session(model, mode=mode).run(None, {"x": x})[0]
    want = graphrt.Session(model, mode=mode, kernel_path="numpy").run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)
    assert calls == []
