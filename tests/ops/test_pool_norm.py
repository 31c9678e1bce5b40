"""Pools and normalizations of graphrt-ops-basic against onnxruntime (and the spec where the two
differ), run the way a plan runs a kernel (tests/ops/_nn.py's Bound): MaxPool, AveragePool and
LpPool with ceil_mode, pads and dilations, MaxPool's indices, the global pools, and
BatchNormalization, InstanceNormalization, LayerNormalization and LRN."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests._versions import onnxruntime_release
from tests.ops._nn import (
    Bound,
    _same_pads_are_natural,
    _spec_pads,
    assert_close,
    bn_inputs,
    ort_run,
    rand,
    reference_run,
)

# -- pools against onnxruntime ------------------------------------------------------------------


def random_pool(op: str, seed: int):
    rng = np.random.default_rng(seed)
    rank = (1, 2, 2, 3)[seed % 4]
    kernel = [int(rng.integers(1, 4)) for _ in range(rank)]
    strides = [int(rng.integers(1, 4)) for _ in range(rank)]
    dilations = [int(rng.integers(1, 3)) for _ in range(rank)]
    spatial = [int(rng.integers(5, 11)) for _ in range(rank)]
    attrs = {"kernel_shape": kernel, "strides": strides}
    if rng.random() < 0.5:
        attrs["dilations"] = dilations
    else:
        dilations = [1] * rank
    auto = str(rng.choice(["NOTSET", "NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    if auto.startswith("SAME") and not _same_pads_are_natural(spatial, kernel, strides, dilations):
        auto = "NOTSET"
    if auto == "NOTSET":
        attrs["pads"] = [int(rng.integers(0, k)) for k in kernel * 2]
        attrs["ceil_mode"] = int(rng.integers(0, 2))
    else:
        attrs["auto_pad"] = auto
    if op == "AveragePool":
        attrs["count_include_pad"] = int(rng.integers(0, 2))
    if op == "LpPool":
        attrs["p"] = int(rng.integers(1, 4))
    if op == "MaxPool":
        attrs["storage_order"] = int(rng.integers(0, 2))
    return rand(rng, int(rng.integers(1, 3)), 3, *spatial), attrs


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
def test_pools_match_onnxruntime(op, seed):
    x, attrs = random_pool(op, seed)
    if op == "LpPool" and attrs.get("ceil_mode"):
        attrs["ceil_mode"] = 0  # onnxruntime's LpPool does not know ceil_mode
    if _onnxruntime_pools_differ(op, attrs):
        want = [spec_pool(op, x, attrs)]
    else:
        want = ort_run(op, [x], opset=19 if op != "LpPool" else 18, **attrs)
    assert_close(Bound(op, [x], **attrs)(), want)


def _onnxruntime_pools_differ(op: str, attrs: dict) -> bool:
    """Pools where the installed onnxruntime departs from the spec, so that the spec's text
    (spec_pool) is the oracle: before 1.21 onnxruntime keeps ceil_mode windows that start in
    the right padding (one output too many) and averages AveragePool's last ceil_mode window
    over the whole kernel; from 1.21 to 1.24 it averages AveragePool windows with
    count_include_pad=1 over a wrong count where they overlap the padding.  (onnx's reference
    evaluator is no oracle there: it mis-sizes MaxPool with ceil_mode and uneven pads.)"""
    release = onnxruntime_release()
    if release < (1, 21):
        return bool(attrs.get("ceil_mode"))
    return release < (1, 25) and op == "AveragePool" and bool(attrs.get("count_include_pad"))


def spec_pool(op: str, x: np.ndarray, attrs: dict, indices: bool = False):
    """MaxPool or AveragePool by the spec's text, one window at a time (a test oracle).

    Output extents: floor or (ceil_mode) ceil of (in + pads - dilated kernel) / stride, + 1,
    less a last ceil_mode window that would start in the right padding.  A window's taps in
    the padding take no part in the maximum, nor in the average unless count_include_pad,
    which counts the taps inside the padded extent (not the ceil_mode overhang).  MaxPool's
    indices: flat over (N, C, spatial...), the spatial part column-major if storage_order=1;
    the first maximum wins.
    """
    spatial, rank = x.shape[2:], x.ndim - 2
    kernel = attrs["kernel_shape"]
    strides = attrs.get("strides", [1] * rank)
    dilations = attrs.get("dilations", [1] * rank)
    pads = _spec_pads(spatial, kernel, attrs)
    ceil = bool(attrs.get("ceil_mode"))
    out = []
    for i, (n, k, s, d) in enumerate(zip(spatial, kernel, strides, dilations)):
        span = n + pads[i] + pads[i + rank] - (k - 1) * d - 1
        o = (-(-span // s) if ceil else span // s) + 1
        if ceil and (o - 1) * s >= n + pads[i]:
            o -= 1
        out.append(o)
    y = np.empty(x.shape[:2] + tuple(out), x.dtype)
    idx = np.empty(y.shape, np.int64)
    flat = np.arange(x.size, dtype=np.int64).reshape(x.shape)
    if attrs.get("storage_order"):  # column-major spatial positions
        col = np.arange(math.prod(spatial), dtype=np.int64).reshape(spatial[::-1]).T
        flat = flat - flat % col.size + col
    for pos in np.ndindex(*out):
        taps, padded = [], 1
        for i, (p, n, k, s, d) in enumerate(zip(pos, spatial, kernel, strides, dilations)):
            at = p * s - pads[i] + d * np.arange(k)
            taps.append(at[(at >= 0) & (at < n)])
            padded *= int(((at >= -pads[i]) & (at < n + pads[i + rank])).sum())
        window = (slice(None), slice(None), *np.ix_(*taps))
        vals = x[window].reshape(*x.shape[:2], -1)
        if op == "MaxPool":
            first = vals.argmax(axis=-1)[..., None]
            y[(..., *pos)] = np.take_along_axis(vals, first, -1)[..., 0]
            where = flat[window].reshape(*x.shape[:2], -1)
            idx[(..., *pos)] = np.take_along_axis(where, first, -1)[..., 0]
        else:
            count = padded if attrs.get("count_include_pad") else vals.shape[-1]
            y[(..., *pos)] = vals.astype(np.float64).sum(axis=-1) / count
    return [y, idx] if indices else y


@pytest.mark.parametrize("seed", range(30))
def test_max_pool_indices_match_onnxruntime(seed):
    x, attrs = random_pool("MaxPool", seed)
    if _onnxruntime_pools_differ("MaxPool", attrs):
        want = spec_pool("MaxPool", x, attrs, indices=True)
    else:
        want = ort_run("MaxPool", [x], 2, opset=12, **attrs)
    assert_close(Bound("MaxPool", [x], 2, **attrs)(), want, rtol=0, atol=0)


def test_max_pool_integer_types_and_first_maximum_wins_ties():
    x = np.array([[[[1, 5, 5], [5, 2, -128], [0, 5, 3]]]], np.int8)
    y, idx = Bound("MaxPool", [x], 2, kernel_shape=[2, 2], pads=[1, 1, 0, 0])()
    assert y.tolist() == [[[[1, 5, 5], [5, 5, 5], [5, 5, 5]]]]
    assert idx.tolist() == [[[[0, 1, 1], [3, 1, 1], [3, 3, 7]]]]
    u = np.arange(16, dtype=np.uint8).reshape(1, 1, 4, 4)
    (y,) = Bound("MaxPool", [u], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])()
    assert y.tolist() == [[[[5, 7], [13, 15]]]]


@pytest.mark.parametrize("opset", [1, 2, 11, 18])
def test_lp_pool_p_attribute_by_opset(opset):
    x = np.random.default_rng(0).standard_normal((1, 2, 5, 5)).astype(np.float32)
    attrs = {"kernel_shape": [2, 2], "p": 3.0 if opset == 1 else 3}
    (got,) = Bound("LpPool", [x], opset=opset, **attrs)()
    want = np.cbrt(sum(np.abs(x[:, :, i : i + 4, j : j + 4]) ** 3 for i in (0, 1) for j in (0, 1)))
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
@pytest.mark.parametrize("shape", [(2, 3, 7), (1, 4, 7, 7), (2, 2, 3, 4, 5)])
def test_global_pools_match_onnxruntime(op, shape):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    assert_close(Bound(op, [x])(), ort_run(op, [x], opset=2 if op == "GlobalLpPool" else 1))
    if op == "GlobalLpPool":
        (got,) = Bound(op, [x], opset=1, p=3.0)()
        want = np.cbrt((np.abs(x) ** 3).sum(axis=tuple(range(2, x.ndim)), keepdims=True))
        np.testing.assert_allclose(got, want, rtol=1e-5)


# -- normalizations against onnxruntime ---------------------------------------------------------


@pytest.mark.parametrize("known", [(1, 2, 3, 4), ()])
@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 5), (2, 3, 4, 5), (1, 2, 3, 4, 5)])
def test_batch_norm_inference_matches_onnxruntime(shape, known):
    inputs = bn_inputs(np.random.default_rng(len(shape)), shape)
    for opset in (7, 9, 15):
        want = ort_run("BatchNormalization", inputs, opset=opset, epsilon=1e-3)
        got = Bound("BatchNormalization", inputs, opset=opset, known=known, epsilon=1e-3)()
        assert_close(got, want)


@pytest.mark.parametrize(("opset", "n_outputs"), [(9, 5), (14, 3), (15, 3)])
def test_batch_norm_training_outputs_match_onnxruntime(opset, n_outputs):
    inputs = bn_inputs(np.random.default_rng(opset), (3, 4, 5, 6))
    attrs = {"momentum": 0.8, "epsilon": 1e-4}
    if opset >= 14:
        attrs["training_mode"] = 1
    want = ort_run("BatchNormalization", inputs, n_outputs, opset=opset, **attrs)
    got = Bound("BatchNormalization", inputs, n_outputs, opset=opset, **attrs)()
    assert_close(got, want)


def test_batch_norm_before_opset_7():
    rng = np.random.default_rng(0)
    x = rand(rng, 2, 3, 4)
    # spatial=0: one parameter per element of a sample
    scale, bias, mean = rand(rng, 3, 4), rand(rng, 3, 4), rand(rng, 3, 4)
    var = (rng.random((3, 4)) + 0.5).astype(np.float32)
    (got,) = Bound(
        "BatchNormalization", [x, scale, bias, mean, var], opset=6, spatial=0, is_test=1
    )()
    np.testing.assert_allclose(
        got, (x - mean) / np.sqrt(var + 1e-5) * scale + bias, rtol=1e-5, atol=1e-6
    )
    # is_test=0 with only Y asked for computes the inference result
    inputs = bn_inputs(rng, (2, 3, 4))
    (got,) = Bound(
        "BatchNormalization", inputs, opset=1, is_test=0, consumed_inputs=[0, 0, 0, 1, 1]
    )()
    assert_close([got], ort_run("BatchNormalization", inputs, opset=7))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 4, 6, 7), (2, 2, 3, 4, 5)])
def test_instance_norm_matches_onnxruntime(shape, dtype):
    rng = np.random.default_rng(3)
    inputs = [rand(rng, *shape) * 3 + 2, rand(rng, shape[1]), rand(rng, shape[1])]
    inputs = [a.astype(dtype) for a in inputs]
    f32 = [a.astype(np.float32) for a in inputs]
    want = ort_run("InstanceNormalization", f32, opset=6, epsilon=1e-3)[0]
    (got,) = Bound("InstanceNormalization", inputs, epsilon=1e-3)()
    assert got.dtype == dtype
    tol = 1e-2 if dtype == np.float16 else 1e-4
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(
    ("shape", "axis"), [((4, 7), -1), ((2, 3, 5), 1), ((2, 3, 4, 5), -2), ((3, 4), 0)]
)
def test_layer_norm_matches_onnxruntime(shape, axis, bias):
    rng = np.random.default_rng(len(shape))
    norm = shape[axis:]
    inputs = [rand(rng, *shape) * 2 + 1, rand(rng, *norm)] + ([rand(rng, *norm)] if bias else [])
    want = ort_run("LayerNormalization", inputs, 3, opset=17, axis=axis, epsilon=1e-3)
    got = Bound("LayerNormalization", inputs, 3, opset=17, axis=axis, epsilon=1e-3)()
    assert_close(got, want)
    # the scale broadcasts over the normalized axes (here: one value per last axis)
    inputs[1] = rand(rng, norm[-1])
    if onnxruntime_release() >= (1, 24) or len(norm) == 1:
        want = ort_run("LayerNormalization", inputs, opset=17, axis=axis)
    else:  # onnxruntime before 1.24 refuses a Scale or B shorter than X.shape[axis:]
        want = reference_run("LayerNormalization", inputs, opset=17, axis=axis)
    assert_close(Bound("LayerNormalization", inputs, opset=17, axis=axis)(), want)


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 9])
def test_lrn_matches_the_spec_and_onnxruntime(size):
    x = np.random.default_rng(size).standard_normal((2, 6, 4, 5)).astype(np.float32)
    attrs = {"size": size, "alpha": 1e-2, "beta": 0.6, "bias": 1.5}
    (got,) = Bound("LRN", [x], **attrs)()
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2  # channels before and after
    square = np.stack([(x[:, max(0, c - lo) : c + hi + 1] ** 2).sum(axis=1) for c in range(6)], 1)
    np.testing.assert_allclose(got, x / (1.5 + 1e-2 / size * square) ** 0.6, rtol=1e-5)
    if size % 2:  # onnxruntime refuses even sizes
        assert_close([got], ort_run("LRN", [x], opset=13, **attrs))
