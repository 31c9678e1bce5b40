"""Bad arguments to the native entry points raise Python exceptions, never crash."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.simd._simd import ISAS, bits, exact_reference, simd

ERRORS = (TypeError, ValueError)
DTYPES = [np.float32, np.float64, np.float16, np.int32, np.uint8, np.bool_]


@st.composite
def operands(draw):
    m, k, n = (draw(st.integers(0, 40)) for _ in range(3))
    k_b = k if draw(st.booleans()) else draw(st.integers(0, 40))
    dt_a, dt_b, dt_o = (
        draw(st.sampled_from(DTYPES)) if draw(st.booleans()) else np.float32 for _ in range(3)
    )
    out_shape = (m, n) if draw(st.booleans()) else (draw(st.integers(0, 40)), n)
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    a = rng.standard_normal((m, k)).astype(dt_a)
    b = rng.standard_normal((k_b, n)).astype(dt_b)
    out = np.zeros(out_shape, dt_o)
    layout = draw(st.sampled_from(["c", "fortran", "step", "ndim", "readonly"]))
    which = draw(st.sampled_from(["a", "b", "out"]))
    arrays = {"a": a, "b": b, "out": out}
    x = arrays[which]
    if layout == "fortran":
        x = np.asfortranarray(x)
    elif layout == "step":
        x = np.repeat(x, 2, axis=1)[:, ::2]
    elif layout == "ndim":
        x = x[None]
    elif layout == "readonly":
        x = x.copy()
        x.flags.writeable = False
    arrays[which] = x
    return arrays, draw(st.sampled_from(ISAS + ["sse9", ""]))


def _valid_exact(a, b, out) -> bool:
    f32 = all(x.dtype == np.float32 and x.ndim == 2 for x in (a, b, out))
    if not f32 or a.shape[1] != b.shape[0] or out.shape != (a.shape[0], b.shape[1]):
        return False
    if out.size and out.shape[1] > 1 and out.strides[1] != 4:
        return False
    if out.size and out.shape[0] > 1 and out.strides[0] < 4 * out.shape[1]:
        return False
    if b.shape[0] and b.shape[1] > 1 and b.strides[1] != 4:
        return False
    return out.flags.writeable


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operands())
def test_exact_entry_point_validates_everything(case):
    arrays, isa = case
    a, b, out = arrays["a"], arrays["b"], arrays["out"]
    if isa in ISAS and _valid_exact(a, b, out):
        simd.gemm_exact(a, b, out, isa)
        np.testing.assert_array_equal(bits(out), bits(exact_reference(a, b)))
    else:
        with pytest.raises(ERRORS):
            simd.gemm_exact(a, b, out, isa)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operands(), st.integers(-3, 45), st.integers(-3, 45))
def test_fast_entry_points_validate_everything(case, lo, hi):
    arrays, isa = case
    a, b, out = arrays["a"], arrays["b"], arrays["out"]
    try:
        packed = simd.pack_b(b, isa)
    except ERRORS:
        assert isa not in ISAS or b.dtype != np.float32 or b.ndim != 2
        return
    end = a.shape[0] if hi == -1 else hi  # -1 is the default: every row
    ok = _valid_exact(a, np.ascontiguousarray(b), out) and 0 <= lo <= end <= a.shape[0]
    if ok:
        simd.gemm(a, packed, out, row_begin=lo, row_end=hi)
        ref = a[lo:end].astype(np.float64) @ b.astype(np.float64)
        np.testing.assert_allclose(out[lo:end], ref, rtol=1e-5, atol=1e-4)
    else:
        with pytest.raises(ERRORS):
            simd.gemm(a, packed, out, row_begin=lo, row_end=hi)


def test_specific_refusals():
    a = np.ones((4, 5), np.float32)
    b = np.ones((5, 6), np.float32)
    packed = simd.pack_b(b, "scalar")
    with pytest.raises(ValueError, match="overlap"):
        simd.gemm_exact(a, np.ones((5, 5), np.float32), a, "scalar")
    with pytest.raises(ValueError, match="overlap"):
        simd.gemm(a, simd.pack_b(np.ones((5, 5), np.float32), "scalar"), a)
    with pytest.raises(ValueError, match="bias must have 6"):
        simd.gemm(a, packed, np.empty((4, 6), np.float32), bias=np.ones(5, np.float32))
    with pytest.raises(ValueError, match="bias must have 4"):
        simd.gemm(
            a, packed, np.empty((4, 6), np.float32), bias=np.ones(6, np.float32), bias_axis="row"
        )
    with pytest.raises(TypeError, match="bias must be a float32"):
        simd.gemm(a, packed, np.empty((4, 6), np.float32), bias=np.ones(6))
    with pytest.raises(ValueError, match="activation"):
        simd.gemm(a, packed, np.empty((4, 6), np.float32), activation="gelu")
    with pytest.raises(ValueError, match="clip_min"):
        simd.gemm(
            a, packed, np.empty((4, 6), np.float32), activation="clip", clip_min=1, clip_max=0
        )
    with pytest.raises(ValueError, match="repack"):
        packed.repack(np.ones((6, 5), np.float32))
    with pytest.raises(TypeError):
        simd.gemm(a, b, np.empty((4, 6), np.float32))  # B not packed
    with pytest.raises(TypeError, match="float32"):
        simd.canonicalize_nan(np.ones(3))
    with pytest.raises(ValueError, match="C-contiguous"):
        simd.canonicalize_nan(np.ones((4, 4), np.float32)[:, ::2])
