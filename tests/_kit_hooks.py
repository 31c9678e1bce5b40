"""graphrt.testing's hooks for the repository's own plugins (``-p tests._kit_hooks``).

Samples and float64 references for graphrt's own operators (domain com.graphrt, written by the
fusion passes), which onnx has no backend cases of.

``tox -e kit`` and tests/test_author_kit.py run ``pytest --graphrt-plugin ops-basic`` (and
ops-controlflow, ops-ml, ops-simd) with this module: the backend cases tests/test_backend.py
expects to fail fail here for the same reasons, and the kernels graphrt.testing found
allocating in a steady-state run are listed with that reason (strict xfail: a fix shows up as
an unexpected pass).
"""

from __future__ import annotations

import math
import re

import numpy as np

#: Operators whose kernels allocate numpy array data in every steady-state run (found by
#: graphrt.testing's steady_state check when it landed, issue 19; not fixed yet).
STEADY_STATE_ALLOCATIONS = [
    "CausalConvWithState",
    "ConvInteger",
    "DFT",
    "DequantizeLinear",
    "Det",
    "MatMulInteger",
    "QLinearConv",
    "QLinearMatMul",
    "QuantizeLinear",
    "TfIdfVectorizer",
    "ThresholdedRelu",
]
#: Where only some samples allocate: those (a regex over the sample name).
STEADY_STATE_SAMPLES = {"ThresholdedRelu": "test_thresholdedrelu_example"}


def _from_backend_suite() -> dict[str, str]:
    """tests/test_backend.py's expected failures, as regexes over graphrt.testing's test ids
    (``plugin:Op:since:case_name``; the suite's names end with ``_cpu``)."""
    from tests.test_backend import EXPECTED_FAILURES

    out = {}
    for pattern, why in EXPECTED_FAILURES.items():
        body = pattern.removeprefix("^").removesuffix("$")
        body = re.sub(r"_cpu$", "", body)
        out[f":{body}$"] = why
    return out


def pytest_graphrt_known_failures(plugin: str) -> dict[str, str]:
    if plugin == "ops-ml":
        return {
            r"^ops-ml:ai\.onnx\.ml\.TreeEnsemble:\d+:.*:steady_state$": (
                "the tree walk allocates its (row, tree) index arrays per run (plugins/ops-ml "
                "_tree_layout.py, vectorised over rows, not over plan scratch); not fixed yet"
            )
        }
    if plugin not in ("ops-basic", "ops-controlflow", "ops-simd"):
        return {}
    known = _from_backend_suite()
    if plugin == "ops-basic":
        why = (
            "the kernel allocates numpy array data in every steady-state run (graphrt.testing's "
            "steady_state check, issue 19); not fixed yet"
        )
        for op in STEADY_STATE_ALLOCATIONS:
            sample = STEADY_STATE_SAMPLES.get(op, ".*")
            known[rf"^ops-basic:{op}:\d+:{sample}:steady_state$"] = why
    if plugin == "ops-simd":
        # the native int8 product runs allocation-free; the int32 result's requantization (and
        # MatMulInteger's zero-point handling) still goes through ops-basic's numpy helpers
        # (the backend samples of ConvInteger/QLinearConv are too shallow for the native
        # path: ops-basic's allocating kernel runs them)
        known[r"^ops-simd:(MatMulInteger|QLinearMatMul|ConvInteger|QLinearConv)@\w+:\d+:.*:"
              r"steady_state$"] = (
            "the native int8 kernels requantize through ops-basic's numpy helpers, or leave "
            "small products to ops-basic's kernel, which allocate per run (issue 17); not fixed"
        )  # fmt: skip
    return known


def _gelu(x: np.ndarray) -> np.ndarray:
    erf = np.vectorize(math.erf)
    x64 = x.astype(np.float64)
    return (0.5 * x64 * (1.0 + erf(x64 / math.sqrt(2.0)))).astype(x.dtype)


def _layer_norm(x, scale, bias, epsilon=1e-5, axis=-1):
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=-1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=-1, keepdims=True)
    return ((x64 - mean) / np.sqrt(var + epsilon) * scale + bias).astype(x.dtype)


def _rms_norm(x, scale, epsilon=1e-5, axis=-1):
    x64 = x.astype(np.float64)
    rms = np.sqrt((x64**2).mean(axis=-1, keepdims=True) + epsilon)
    return (x64 / rms * scale).astype(x.dtype)


def _matmul_relu(a, b, bias, activation="Relu"):
    return np.maximum(a.astype(np.float64) @ b + bias, 0).astype(a.dtype)


def _gemm_sigmoid(a, b, c, activation="Sigmoid"):
    return (1.0 / (1.0 + np.exp(-(a.astype(np.float64) @ b + c)))).astype(a.dtype)


def _conv_residual(x, w, b, z, activation="Relu", pads=(0, 0, 0, 0), **_):
    """FusedConv's float64 reference (unit strides and dilations, one group): the
    convolution, + bias, + Z, the activation."""
    x64 = np.pad(x.astype(np.float64), ((0, 0), (0, 0), pads[0::2], pads[1::2]))
    kh, kw = w.shape[2:]
    oh, ow = x64.shape[2] - kh + 1, x64.shape[3] - kw + 1
    out = b.astype(np.float64)[None, :, None, None] + z
    for i in range(kh):
        for j in range(kw):
            out = out + np.einsum("nchw,mc->nmhw", x64[:, :, i : i + oh, j : j + ow], w[:, :, i, j])
    return np.maximum(out, 0).astype(x.dtype)


def pytest_graphrt_cases(plugin: str) -> list:
    if plugin not in ("ops-basic", "ops-simd"):
        return []
    from graphrt.testing import Case

    rng = np.random.default_rng(19)

    def f32(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    x, scale, bias = f32(4, 8, 32), f32(32), f32(32)
    a, b, c = f32(16, 24), f32(24, 40), f32(40)
    tol = {"rtol": 1e-4, "atol": 1e-5}
    return [
        Case("Gelu", [f32(4, 300)], reference=_gelu, domain="com.graphrt", name="x", **tol),
        Case(
            "LayerNormalization",
            [x, scale, bias],
            {"epsilon": 1e-5},
            _layer_norm,
            domain="com.graphrt",
            name="last-axis",
            **tol,
        ),
        Case(
            "RMSNormalization",
            [x, scale],
            {},
            _rms_norm,
            domain="com.graphrt",
            name="last-axis",
            **tol,
        ),
        Case(
            "FusedMatMul",
            [a, b, c],
            {"activation": "Relu"},
            _matmul_relu,
            domain="com.graphrt",
            name="bias-relu",
            **tol,
        ),
        # a residual Z the native kernels may write Y over (one depth block), and one they
        # may not (two blocks of the packed kernel on avx2): in_place_input 3 either way
        Case(
            "FusedConv",
            [f32(2, 16, 9, 9), f32(24, 16, 3, 3), f32(24), f32(2, 24, 9, 9)],
            {"activation": "Relu", "pads": [1, 1, 1, 1], "kernel_shape": [3, 3]},
            _conv_residual,
            domain="com.graphrt",
            name="residual-relu",
            rtol=1e-4,
            atol=1e-4,
        ),
        Case(
            "FusedConv",
            [f32(1, 320, 7, 7), f32(256, 320, 1, 1), f32(256), f32(1, 256, 7, 7)],
            {"activation": "Relu", "kernel_shape": [1, 1]},
            _conv_residual,
            domain="com.graphrt",
            name="deep-residual",
            rtol=1e-4,
            atol=1e-4,
        ),
        Case(
            "FusedGemm",
            [a, b, c],
            {"activation": "Sigmoid"},
            _gemm_sigmoid,
            domain="com.graphrt",
            name="sigmoid",
            **tol,
        ),
    ]
