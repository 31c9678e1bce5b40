"""LRN and AveragePool with window attributes a hostile model gives (issue 13): an LRN size far
wider than the channels, AveragePool pads far wider than the input.  Their cost must follow the
tensors, not the attributes, and the values must still be the spec's (written out here)."""

from __future__ import annotations

import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import graphrt
from tests.ops._nn import Bound
from tests.ops.test_pool_norm import spec_pool


def spec_lrn(x: np.ndarray, size: int, alpha: float, beta: float, bias: float) -> np.ndarray:
    """LRN by the spec's text in float64: the square sum over channels c - floor((size-1)/2)
    to c + ceil((size-1)/2), clipped to [0, C-1]."""
    c = x.shape[1]
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    x64 = x.astype(np.float64)
    square = np.stack(
        [(x64[:, max(0, k - lo) : min(c - 1, k + hi) + 1] ** 2).sum(axis=1) for k in range(c)], 1
    )
    return x64 / (bias + alpha / size * square) ** beta


@pytest.mark.parametrize("size", [13, 14, 2**31, 2**63 - 2, 2**63 - 1])
@pytest.mark.parametrize("channels", [1, 2, 6])
def test_lrn_window_wider_than_the_channels_takes_them_all(size, channels):
    x = np.random.default_rng(channels).standard_normal((2, channels, 3, 4)).astype(np.float32)
    attrs = {"alpha": 0.5 * size, "beta": 0.75, "bias": 2.0}  # alpha / size stays 0.5
    start = time.perf_counter()
    (got,) = Bound("LRN", [x], opset=13, size=size, **attrs)()
    assert time.perf_counter() - start < 5  # not one call per offset of the window
    want = spec_lrn(x, size, **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    # every channel's window covers all of them: one square sum, the same for each channel
    total = (x.astype(np.float64) ** 2).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(got, x / (2.0 + 0.5 * total) ** 0.75, rtol=1e-5)


@pytest.mark.parametrize("include", [0, 1])
@pytest.mark.parametrize("ceil", [0, 1])
def test_average_pool_with_wide_kernels_and_pads_matches_the_spec(include, ceil):
    """Windows far wider than X, strided and dilated, partly in the padding on both sides
    (each pad less than the dilated kernel, so no window lies wholly in it)."""
    x = np.random.default_rng(include + 2 * ceil).standard_normal((2, 3, 5, 4, 3))
    x = x.astype(np.float32)
    attrs = {
        "kernel_shape": [9, 2, 20],
        "strides": [2, 3, 1],
        "dilations": [2, 1, 3],
        "pads": [6, 1, 50, 13, 0, 56],
        "ceil_mode": ceil,
        "count_include_pad": include,
    }
    (got,) = Bound("AveragePool", [x], opset=19, **attrs)()
    np.testing.assert_allclose(got, spec_pool("AveragePool", x, attrs), rtol=1e-5, atol=1e-6)


def _average_pool_model(shape, **attrs) -> bytes:
    node = helper.make_node("AveragePool", ["x"], ["y"], **attrs)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    graph = helper.make_graph([node], "g", [x], [onnx.ValueInfoProto(name="y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    return model.SerializeToString()


def test_average_pool_of_an_empty_batch_with_a_huge_pad_is_empty_at_once():
    attrs = {"kernel_shape": [2, 3], "ceil_mode": 1, "pads": [1, 2, 2**29, 1]}
    x = np.ones((0, 3, 3, 1), np.float32)
    start = time.perf_counter()
    (y,) = graphrt.Session(_average_pool_model(x.shape, **attrs)).run(None, {"x": x})
    assert time.perf_counter() - start < 5
    # the extents: ceil((3 + 1 + 2**29 - 2) / 1) + 1, less the last window (it would start in
    # the end padding, as spec_pool's rule), and ceil((1 + 2 + 1 - 3) / 1) + 1
    assert y.shape == (0, 3, 2**29 + 2, 2) and y.dtype == np.float32


@pytest.mark.parametrize("pad", [2**29, 2**62])
def test_average_pool_with_a_huge_output_is_refused_before_any_divisor(pad):
    """A non-empty output too large for the budget (2**29) or for int64 positions (2**62) is a
    refusal, not gigabytes of per-position counts."""
    attrs = {"kernel_shape": [2, 2], "pads": [pad] * 4}
    x = np.ones((1, 1, 3, 3), np.float32)
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(_average_pool_model(x.shape, **attrs)).run(None, {"x": x})
    assert info.value.kind in ("resource_exhausted", "invalid_input", "invalid_model")
