"""Native NonMaxSuppression: ops-basic's selection box for box on every path (random boxes with
ties, equal and empty boxes, NaN and infinite coordinates and scores, every threshold form, any
strides), in sessions under every kernel path, mode and thread count; Python errors for bad
arguments and extreme inputs, never a crash."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import graphrt
from graphrt.attrs import node_info
from graphrt.kernel import KernelContext
from graphrt_ops_basic import nms as basic_nms
from tests._models import make_model, tensor
from tests.simd._simd import ALL_PATHS, ISAS, path_or_skip, simd

F32 = np.float32
SPECIAL = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 3e38, -3e38]


def numpy_nms(boxes, scores, limit, iou, floor, center):
    """ops-basic's numpy kernel, run directly: the selection the native kernel must make."""
    node = helper.make_node("NonMaxSuppression", ["b", "s", "l", "i", "f"], ["y"],
                            center_point_box=center)  # fmt: skip
    kernel = basic_nms.NonMaxSuppression(node_info(node, 11))
    ctx = KernelContext()
    floor = None if floor is None else np.array([floor], F32)
    inputs = [boxes, scores, np.array([limit], np.int64), np.array([iou], F32), floor]
    kernel.run(ctx, inputs, [None])
    return ctx.allocated[0]


def native_nms(isa, boxes, scores, limit, iou, floor, center, threads=1):
    """The native kernel with the arguments graphrt_ops_simd.nms gives it."""
    limit = min(max(limit, 0), scores.shape[2])
    floor = None if floor is None else float(F32(floor))
    return simd.nms(boxes, scores, limit, float(F32(iou)), floor, center, isa, threads)


def _layout(x: np.ndarray, how: str) -> np.ndarray:
    if how == "strided":  # every other element of a larger array
        wide = np.zeros((*x.shape[:-1], 2 * x.shape[-1]), x.dtype)
        wide[..., ::2] = x
        return wide[..., ::2]
    if how == "reversed":  # negative strides
        return np.ascontiguousarray(x[::-1, ::-1])[::-1, ::-1]
    if how == "fortran":
        return np.asfortranarray(x)
    return x


@st.composite
def problems(draw):
    batches, classes = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    n = draw(st.sampled_from([0, 1, 2, 5, 17, 40, 150]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if draw(st.booleans()):  # a coarse grid: equal boxes, shared edges, exact IoU values
        boxes = rng.integers(0, 6, (batches, n, 4)).astype(F32)
    else:
        xy = rng.uniform(0, 30, (batches, n, 2))
        wh = rng.uniform(0, 9, (batches, n, 2)) * rng.choice([-1, 1], (batches, n, 2))
        boxes = np.concatenate([xy, xy + wh], -1).astype(F32)
    if draw(st.booleans()):  # ties: a few score values only
        scores = rng.integers(-2, 3, (batches, classes, n)).astype(F32) / 4
    else:
        scores = rng.random((batches, classes, n)).astype(F32)
    for x in (boxes, scores):
        if x.size and draw(st.booleans()):
            picks = rng.integers(0, x.size, draw(st.integers(1, 4)))
            x.reshape(-1)[picks] = rng.choice(SPECIAL, picks.size)
    layout = draw(st.sampled_from(["c", "strided", "reversed", "fortran"]))
    limit = draw(st.sampled_from([-3, 0, 1, 2, 3, 4, 5, 17, 1000, 2**62]))
    iou = draw(st.sampled_from([0.0, 1e-7, 0.25, 0.5, 0.9999999, 1.0]))
    floor = draw(st.sampled_from([None, -np.inf, -0.5, -0.0, 0.0, 0.25, 0.5, np.inf, np.nan]))
    return dict(
        boxes=_layout(boxes, layout), scores=_layout(scores, layout), limit=limit, iou=iou,
        floor=floor, center=draw(st.integers(0, 1)), threads=draw(st.integers(1, 3)),
    )  # fmt: skip


@pytest.mark.parametrize("isa", ALL_PATHS)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(g=problems())
def test_native_selection_is_numpys(isa, g):
    path_or_skip(isa)
    want = numpy_nms(g["boxes"], g["scores"], g["limit"], g["iou"], g["floor"], g["center"])
    got = native_nms(isa, g["boxes"], g["scores"], g["limit"], g["iou"], g["floor"],
                     g["center"], g["threads"])  # fmt: skip
    assert got.dtype == np.int64 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize("limit", [3, 100, 4000])
def test_many_boxes_over_threads(isa, limit):
    # rows spread over the plugin's threads; chunks of candidates ordered past the first
    path_or_skip(isa)
    rng = np.random.default_rng(limit)
    xy = rng.uniform(0, 200, (2, 4000, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(1, 30, (2, 4000, 2))], -1).astype(F32)
    scores = (rng.integers(0, 50, (2, 3, 4000)) / 50).astype(F32)
    want = numpy_nms(boxes, scores, limit, 0.3, 0.1, 0)
    for threads in (1, 2, 4):
        np.testing.assert_array_equal(native_nms(isa, boxes, scores, limit, 0.3, 0.1, 0, threads),
                                      want)  # fmt: skip


def test_extreme_coordinates_and_scores():
    # huge, tiny, infinite and NaN coordinates; every box one of them, every score a special
    values = np.array(SPECIAL + [1.0, 2.0, -1.0], F32)
    grid = np.stack(np.meshgrid(*[values] * 4, indexing="ij"), -1).reshape(1, -1, 4)
    rng = np.random.default_rng(0)
    boxes = grid[:, rng.permutation(grid.shape[1])[:3000]]
    scores = rng.choice(values, (1, 2, boxes.shape[1])).astype(F32)
    for center in (0, 1):
        for floor in (None, -np.inf, 0.0):
            want = numpy_nms(boxes, scores, 3000, 0.5, floor, center)
            assert want.shape[0] > 0
            for isa in ISAS:
                np.testing.assert_array_equal(
                    native_nms(isa, boxes, scores, 3000, 0.5, floor, center), want
                )


def test_empty_inputs_give_no_rows():
    for b, c, n in [(0, 2, 5), (2, 0, 5), (2, 3, 0), (0, 0, 0)]:
        boxes, scores = np.zeros((b, n, 4), F32), np.zeros((b, c, n), F32)
        for isa in ISAS:
            got = simd.nms(boxes, scores, 10, 0.5, None, 0, isa)
            assert got.shape == (0, 3) and got.dtype == np.int64
    boxes, scores = np.zeros((1, 4, 4), F32), np.ones((1, 1, 4), F32)
    assert simd.nms(boxes, scores, 0, 0.5, None, 0, "scalar").shape == (0, 3)
    assert simd.nms(boxes, scores, -7, 0.5, None, 0, "scalar").shape == (0, 3)
    assert simd.nms(boxes, scores, 2**62, 0.5, None, 0, "scalar").shape == (4, 3)


def test_refusals():
    boxes, scores = np.zeros((2, 5, 4), F32), np.zeros((2, 3, 5), F32)
    ok = [5, 0.5, None, 0, "scalar"]
    assert simd.nms(boxes, scores, *ok).shape == (30, 3)
    with pytest.raises(TypeError, match="float32"):
        simd.nms(boxes.astype(np.float64), scores, *ok)
    with pytest.raises(TypeError, match="float32"):
        simd.nms(boxes, scores.astype(np.float16), *ok)
    for b, s in [(boxes[0], scores), (boxes, scores[:, :, :4]), (boxes[:1], scores),
                 (boxes[:, :, :3], scores), (boxes[..., None], scores)]:  # fmt: skip
        with pytest.raises(ValueError, match="boxes"):
            simd.nms(b, s, *ok)
    for iou in (-0.5, 1.5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="iou_threshold"):
            simd.nms(boxes, scores, 5, iou, None, 0, "scalar")
    with pytest.raises(ValueError, match="center_point_box"):
        simd.nms(boxes, scores, 5, 0.5, None, 2, "scalar")
    with pytest.raises(ValueError, match="isa"):
        simd.nms(boxes, scores, 5, 0.5, None, 0, "sse9")
    with pytest.raises(TypeError):
        simd.nms(boxes, scores, 2**64, 0.5, None, 0, "scalar")
    raw = np.zeros(boxes.nbytes + 1, np.uint8)
    unaligned = np.frombuffer(raw.data, F32, boxes.size, 1).reshape(boxes.shape)
    with pytest.raises(ValueError, match="aligned"):
        simd.nms(unaligned, scores, *ok)
    # more boxes than an int32 index holds: refused before any element is read
    many = np.broadcast_to(np.zeros((1, 1, 4), F32), (1, 2**31, 4))
    with pytest.raises(ValueError, match="2\\*\\*31"):
        simd.nms(many, np.broadcast_to(F32(1), (1, 1, 2**31)), 5, 0.5, None, 0, "scalar")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shapes=st.tuples(*[st.lists(st.integers(0, 5), min_size=1, max_size=4)] * 2),
    dtypes=st.tuples(*[st.sampled_from([np.float32, np.float64, np.int32, np.bool_])] * 2),
    limit=st.integers(-(2**63), 2**63 - 1),
    iou=st.floats(allow_nan=True, allow_infinity=True),
    floor=st.none() | st.floats(allow_nan=True, allow_infinity=True, width=32),
    center=st.integers(-2, 3),
    isa=st.sampled_from([*ALL_PATHS, "", "sse9"]),
    threads=st.integers(-2, 8),
)
def test_bad_arguments_raise_never_crash(shapes, dtypes, limit, iou, floor, center, isa, threads):
    boxes = np.ones(shapes[0], dtypes[0])
    scores = np.ones(shapes[1], dtypes[1])
    try:
        out = simd.nms(boxes, scores, limit, iou, floor, center, isa, threads)
    except (TypeError, ValueError):
        return
    assert out.dtype == np.int64 and out.ndim == 2 and out.shape[1] == 3


def _nms_model(dtype=TensorProto.FLOAT, center=0):
    node = helper.make_node(
        "NonMaxSuppression", ["boxes", "scores", "limit", "iou", "floor"], ["y"],
        center_point_box=center,
    )  # fmt: skip
    inputs = [
        tensor("boxes", dtype, [2, 300, 4]),
        tensor("scores", dtype, [2, 4, 300]),
        tensor("limit", TensorProto.INT64, [1]),
        tensor("iou", dtype, [1]),
        tensor("floor", dtype, [1]),
    ]
    return make_model([node], inputs, [tensor("y", TensorProto.INT64)], opset=11)


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("path", ALL_PATHS)
def test_sessions_select_what_the_numpy_path_selects(path, center, monkeypatch):
    path_or_skip(path)
    import graphrt_ops_simd.suppression as native

    calls = []
    real = native._native.nms
    monkeypatch.setattr(native._native, "nms", lambda *a: calls.append(1) or real(*a))
    rng = np.random.default_rng(center)
    xy = rng.uniform(0, 40, (2, 300, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(2, 9, (2, 300, 2))], -1)
    scores = np.round(rng.random((2, 4, 300)) * 8) / 8
    for limit, floor in [(3, 0.2), (40, -1.0), (1000, 0.5)]:
        for dtype in (np.float32, np.float64):
            feed = {
                "boxes": boxes.astype(dtype),
                "scores": scores.astype(dtype),
                "limit": np.array([limit], np.int64),
                "iou": np.array([0.4], dtype),
                "floor": np.array([floor], dtype),
            }
            model = _nms_model(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), center)
            want = graphrt.Session(model, kernel_path="numpy").run(None, feed)[0]
            for mode in ("fast", "exact"):
                for threads in (1, 2):
                    sess = graphrt.Session(model, kernel_path=path, mode=mode,
                                           intra_op_threads=threads)  # fmt: skip
                    np.testing.assert_array_equal(sess.run(None, feed)[0], want)
    assert len(calls) == 3 * 2 * 2  # float32 runs natively, float64 on ops-basic's kernel


def test_unaligned_inputs_are_copied_for_the_native_kernel():
    rng = np.random.default_rng(5)
    boxes = rng.uniform(0, 9, (2, 30, 4)).astype(F32)
    scores = rng.random((2, 3, 30)).astype(F32)
    raw = np.zeros(boxes.nbytes + 1, np.uint8)
    unaligned = np.frombuffer(raw.data, F32, boxes.size, 1).reshape(boxes.shape)
    unaligned[...] = boxes
    node = helper.make_node("NonMaxSuppression", ["b", "s", "l"], ["y"])
    from graphrt_ops_simd.suppression import NonMaxSuppression

    kernel = NonMaxSuppression(node_info(node, 11), basic_nms.NonMaxSuppression, ISAS[-1])
    ctx = KernelContext()
    kernel.run(ctx, [unaligned, scores, np.array([5], np.int64)], [None])
    np.testing.assert_array_equal(ctx.allocated[0], numpy_nms(boxes, scores, 5, 0.0, None, 0))


def test_session_errors_are_ops_basic_words():
    model = _nms_model()
    feed = {
        "boxes": np.zeros((2, 300, 4), F32),
        "scores": np.zeros((2, 4, 300), F32),
        "limit": np.array([3], np.int64),
        "iou": np.array([1.5], F32),
        "floor": np.array([0.0], F32),
    }
    messages = set()
    for path in ("numpy", *[p for p in ALL_PATHS if p in ISAS]):
        with pytest.raises(graphrt.SessionError) as err:
            graphrt.Session(model, kernel_path=path).run(None, feed)
        assert err.value.kind == "invalid_input"
        messages.add(str(err.value))
    assert len(messages) == 1 and "iou_threshold" in messages.pop()
