"""Detection family: RoiAlign, NonMaxSuppression, DeformConv, Col2Im, MaxUnpool, CenterCropPad.

Each operator's largest backend case with its inputs scaled up about 100x in elements, at an
opset onnxruntime loads (RoiAlign at 16: onnxruntime has no RoiAlign-22 kernel).  Shape inputs
(Col2Im's image_shape and block_shape, CenterCropPad's shape) are initializers, as in real
models; the backend cases feed them, which makes the node re-plan in every run.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from . import BenchCase

_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64}


def _case(
    name: str,
    op: str,
    feed: dict,
    opset: int,
    out_type: int = TensorProto.FLOAT,
    constants: tuple[str, ...] = (),
    **attrs,
) -> BenchCase:
    """A one-node model; the inputs named in ``constants`` become initializers (the shape
    inputs a real model fixes), the others graph inputs."""
    node = helper.make_node(op, list(feed), ["y"], **attrs)
    inputs = [
        helper.make_tensor_value_info(k, _TYPES[v.dtype], list(v.shape))
        for k, v in feed.items()
        if k not in constants
    ]
    inits = [numpy_helper.from_array(feed[k], k) for k in constants]
    output = helper.make_tensor_value_info("y", out_type, None)
    graph = helper.make_graph([node], op, inputs, [output], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    return BenchCase(name, model, {k: v for k, v in feed.items() if k not in constants})


def _rois(rng, count: int, size: int) -> np.ndarray:
    corner = rng.uniform(0, size * 0.7, (count, 2))
    extent = rng.uniform(2, size * 0.3, (count, 2))
    return np.concatenate([corner, corner + extent], 1).astype(np.float32)


def _boxes(rng, batches: int, count: int) -> np.ndarray:
    corner = rng.uniform(0, 100, (batches, count, 2))
    extent = rng.uniform(5, 20, (batches, count, 2))
    return np.concatenate([corner, corner + extent], 2).astype(np.float32)


def cases() -> list[BenchCase]:
    rng = np.random.default_rng(0)
    f32, i64 = np.float32, np.int64
    out: list[BenchCase] = []
    # RoiAlign: test_roialign_* is X 1x1x10x10 with 3 rois, 5x5 bins, sampling_ratio 2
    x = rng.standard_normal((1, 16, 25, 25)).astype(f32)
    rois = _rois(rng, 300, 25)
    batch = np.zeros(300, i64)
    for mode in ("avg", "max"):
        out.append(
            _case(
                f"RoiAlign: {mode}, X 1x16x25x25, 300 rois, 5x5 bins, sampling 2",
                "RoiAlign",
                {"x": x, "rois": rois, "batch": batch},
                16,
                mode=mode,
                output_height=5,
                output_width=5,
                sampling_ratio=2,
                coordinate_transformation_mode="output_half_pixel",
            )
        )
    out.append(
        _case(
            "RoiAlign: avg, X 1x16x25x25, 300 rois, 5x5 bins, adaptive sampling",
            "RoiAlign",
            {"x": x, "rois": rois, "batch": batch},
            16,
            output_height=5,
            output_width=5,
        )
    )
    # NonMaxSuppression: test_nonmaxsuppression_two_batches is 2x6 boxes, 1 class
    for boxes, classes, limit in ((600, 1, 3), (600, 2, 100)):
        feed = {
            "boxes": _boxes(rng, 2, boxes),
            "scores": rng.random((2, classes, boxes)).astype(f32),
            "limit": np.array([limit], i64),
            "iou": np.array([0.5], f32),
            "score": np.array([0.0], f32),
        }
        out.append(
            _case(
                f"NonMaxSuppression: 2x{boxes} boxes, {classes} class(es), max {limit}",
                "NonMaxSuppression",
                feed,
                11,
                TensorProto.INT64,
            )
        )
    # DeformConv: test_deform_conv_with_multiple_offset_groups is X 1x2x3x3, W 1x2x2x2
    x = rng.standard_normal((1, 2, 30, 30)).astype(f32)
    feed = {
        "x": x,
        "w": rng.standard_normal((1, 2, 2, 2)).astype(f32),
        "offset": rng.standard_normal((1, 16, 29, 29)).astype(f32),
    }
    out.append(
        _case(
            "DeformConv: X 1x2x30x30, W 1x2x2x2, 2 offset groups",
            "DeformConv",
            feed,
            19,
            offset_group=2,
        )
    )
    feed = {
        "x": rng.standard_normal((1, 16, 32, 32)).astype(f32),
        "w": rng.standard_normal((16, 16, 3, 3)).astype(f32),
        "offset": rng.standard_normal((1, 18, 32, 32)).astype(f32),
        "b": rng.standard_normal(16).astype(f32),
        "mask": rng.random((1, 9, 32, 32)).astype(f32),
    }
    out.append(
        _case(
            "DeformConv: X 1x16x32x32, W 16x16x3x3, pads 1, mask and bias",
            "DeformConv",
            feed,
            19,
            pads=[1, 1, 1, 1],
        )
    )
    # Col2Im: test_col2im_5d is 1x10x12 -> 1x2x3x4x5; test_col2im 1x5x5 -> 1x1x5x5
    feed = {
        "x": rng.standard_normal((1, 10, 1200)).astype(f32),
        "image": np.array([30, 40, 5], i64),
        "block": np.array([1, 1, 5], i64),
    }
    shapes = ("image", "block")
    out.append(_case("Col2Im: 1x10x1200 -> 1x2x30x40x5", "Col2Im", feed, 18, constants=shapes))
    feed = {
        "x": rng.standard_normal((1, 9, 1200)).astype(f32),
        "image": np.array([30, 40], i64),
        "block": np.array([3, 3], i64),
    }
    out.append(
        _case(
            "Col2Im: 3x3 blocks, pads 1, 1x9x1200 -> 1x1x30x40",
            "Col2Im",
            feed,
            18,
            constants=shapes,
            pads=[1] * 4,
        )
    )
    # MaxUnpool: test_maxunpool_export_* is X 1x1x2x2 -> 1x1x4x4
    pooled = rng.standard_normal((1, 4, 10, 10)).astype(f32)
    rows, cols = np.meshgrid(np.arange(10), np.arange(10), indexing="ij")
    pick = rng.integers(0, 2, (2, 1, 4, 10, 10))
    plane = np.arange(4).reshape(1, 4, 1, 1) * 400
    indices = (plane + (2 * rows + pick[0]) * 20 + 2 * cols + pick[1]).astype(i64)
    feed = {"x": pooled, "i": indices}
    out.append(
        _case(
            "MaxUnpool: 1x4x10x10 -> 1x4x20x20, kernel 2, stride 2",
            "MaxUnpool",
            feed,
            11,
            kernel_shape=[2, 2],
            strides=[2, 2],
        )
    )
    # CenterCropPad: test_center_crop_pad_crop_and_pad is 20x8x3 -> 10x10x3
    feed = {
        "x": rng.standard_normal((200, 80, 3)).astype(f32),
        "shape": np.array([100, 100, 3], i64),
    }
    out.append(
        _case(
            "CenterCropPad: 200x80x3 -> 100x100x3", "CenterCropPad", feed, 18, constants=("shape",)
        )
    )
    return out
