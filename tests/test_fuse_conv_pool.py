"""fuse_conv_pool: Conv / FusedConv -> MaxPool becomes com.graphrt.FusedConvPool, with the
pair's bits in fast and exact mode, on every kernel path (a native path may run it in bands of
rows: tests/simd/test_conv_pool.py)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import graphrt
from tests._fusion import fused_and_plain, op_list, rand_w, rand_x
from tests._models import init, make_model, ort_session, tensor

FUSED = ["com.graphrt.FusedConvPool"]


def _model(
    relu: bool = True,
    pool: dict | None = None,
    conv: dict | None = None,
    c: int = 3,
    m: int = 32,
    hw: int = 40,
    indices: bool = False,
    extra_reader: bool = False,
    conv_output: bool = False,
    pool_opset: int = 17,
):
    """x -> Conv(W, B) [-> Relu] -> MaxPool -> y (and the variants that must not fuse)."""
    conv = {"strides": [2, 2], "kernel_shape": [3, 3], **(conv or {})}
    pool = {"kernel_shape": [3, 3], "strides": [2, 2], **(pool or {})}
    k = conv["kernel_shape"][0]
    value = "c"
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="stem", **conv)]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["r"]))
        value = "r"
    pool_outputs = ["y", "i"] if indices else ["y"]
    nodes.append(helper.make_node("MaxPool", [value], pool_outputs, **pool))
    outputs = [tensor("y")]
    if indices:
        outputs.append(tensor("i", elem=7))
    if extra_reader:
        nodes.append(helper.make_node("Sigmoid", [value], ["z"]))
        outputs.append(tensor("z"))
    if conv_output:
        outputs.append(tensor(value))
    inits = [init("w", rand_w(m, c, k, k)), init("b", rand_w(m))]
    model = make_model(nodes, [tensor("x", shape=[2, c, hw, hw])], outputs, inits, opset=pool_opset)
    return model, {"x": rand_x(2, c, hw, hw)}


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("mode", ["fast", "exact"])
@pytest.mark.parametrize("path", [None, "numpy", "scalar", "avx2", "avx512"])
def test_fires_with_the_pairs_bits(path, mode):
    if path in ("scalar", "avx2", "avx512"):
        simd = pytest.importorskip("graphrt_ops_simd", reason="graphrt-ops-simd is not installed")
        if path not in simd.available_isas():
            pytest.skip(f"kernel path {path!r} is not available on this CPU/OS")
    model, feed = _model()
    fused, got, want = fused_and_plain(model, feed, kernel_path=path, mode=mode)
    assert op_list(fused) == FUSED
    _same_bits(got, want)
    ref = ort_session(model).run(None, feed)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "conv, pool, relu",
    [
        ({"kernel_shape": [7, 7], "pads": [3, 3, 3, 3]}, {"pads": [1, 1, 1, 1]}, True),
        ({"strides": [1, 1], "pads": [1, 1, 1, 1]}, {"kernel_shape": [2, 2]}, True),
        ({}, {"ceil_mode": 1}, False),
        ({}, {"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [2, 2]}, True),
        ({}, {"auto_pad": "SAME_UPPER"}, True),
        ({"strides": [1, 1]}, {"kernel_shape": [2, 3], "strides": [3, 1]}, True),
    ],
)
def test_pool_geometries(conv, pool, relu):
    model, feed = _model(relu=relu, conv=conv, pool=pool)
    fused, got, want = fused_and_plain(model, feed)
    assert op_list(fused) == FUSED
    _same_bits(got, want)
    ref = ort_session(model).run(None, feed)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_keeps_a_nan_and_the_pool_opset():
    # MaxPool-8 has no dilations or ceil_mode: the fused node's pool keeps its own opset's rules
    model, feed = _model(pool_opset=8)
    feed["x"][0, :, 5:9, 5:9] = np.nan
    fused, got, want = fused_and_plain(model, feed)
    assert op_list(fused) == FUSED
    assert np.isnan(got[0]).any() and not np.isnan(got[1]).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(got)], want[~np.isnan(want)])


@pytest.mark.parametrize(
    "variant", [{"indices": True}, {"extra_reader": True}, {"conv_output": True}]
)
def test_does_not_fuse(variant):
    model, feed = _model(**variant)
    sess = graphrt.Session(model)
    assert "com.graphrt.FusedConvPool" not in op_list(sess)
    got = sess.run(None, feed)
    want = ort_session(model).run(None, feed)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_not_at_level_none_and_errors_name_the_conv():
    model, _ = _model()
    assert "com.graphrt.FusedConvPool" not in op_list(
        graphrt.Session(model, optimization_level="none")
    )
    model.graph.input[0].type.tensor_type.ClearField("shape")  # checked by the kernels alone
    bad = {"x": np.zeros((2, 4, 40, 40), np.float32)}  # a channel too many for W
    with pytest.raises(graphrt.SessionError) as err:
        graphrt.Session(model).run(None, bad)
    assert "stem" in str(err.value)


def test_light_squeezenet_stem_fuses():
    from tests._models import light_model

    sess = graphrt.Session(light_model("squeezenet"))
    ops = op_list(sess)
    assert ops.count("com.graphrt.FusedConvPool") == 1 and ops.index(FUSED[0]) == 0


@pytest.mark.parametrize(
    "pool",
    [
        {"kernel_shape": [0, 3]},
        {"kernel_shape": [-1, 3]},
        {"kernel_shape": [2**62, 3]},
        {"strides": [0, 2]},
        {"pads": [-1, 0, 0, 0]},
        {"pads": [2**62, 0, 0, 0]},
        {"dilations": [0, 1]},
        {"dilations": [2**62, 1]},
    ],
)
def test_a_hostile_pool_attribute_is_an_error_naming_the_node(pool):
    model, feed = _model(pool=pool, hw=224)  # (the native paths' banded geometry)
    with pytest.raises(graphrt.SessionError) as err:
        graphrt.Session(model).run(None, feed)
    assert "stem" in str(err.value)


def test_an_empty_batch_and_a_wrong_dtype():
    model, _ = _model(hw=224)
    model.graph.input[0].type.tensor_type.ClearField("shape")
    sess = graphrt.Session(model)
    empty = sess.run(None, {"x": np.zeros((0, 3, 224, 224), np.float32)})[0]
    assert empty.shape == (0, 32, 55, 55)
    model.graph.input[0].type.tensor_type.elem_type = 11  # double: W stays float32
    with pytest.raises(graphrt.SessionError) as err:
        graphrt.Session(model).run(None, {"x": np.zeros((2, 3, 224, 224), np.float64)})
    assert "stem" in str(err.value)
