"""Resize, Upsample, GridSample and AffineGrid: the largest backend cases scaled up about 100x in
elements, plus the resizes detection and segmentation models run (2x nearest, 2x linear on an
image, antialiased downscaling)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from . import BenchCase

F32 = np.float32


def _model(op, inputs, consts, opset, out_type=TensorProto.FLOAT, **attrs):
    names = [*inputs, *consts]
    node = helper.make_node(op, [n if not n.startswith("_") else "" for n in names], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        op,
        [
            helper.make_tensor_value_info(
                n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)
            )
            for n, v in inputs.items()
        ],
        [helper.make_tensor_value_info("y", out_type, None)],
        [numpy_helper.from_array(v, n) for n, v in consts.items() if not n.startswith("_")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _resize(name, x, scales=None, sizes=None, roi=None, **attrs) -> BenchCase:
    consts = {"roi" if roi is not None else "_roi": np.array(roi or [], F32)}
    if scales is not None:
        consts["scales"] = np.array(scales, F32)
    else:
        consts["_scales"] = np.array([], F32)
        consts["sizes"] = np.array(sizes, np.int64)
    return BenchCase(f"Resize: {name}", _model("Resize", {"x": x}, consts, 19, **attrs), {"x": x})


def cases() -> list[BenchCase]:
    rng = np.random.default_rng(0)
    small = rng.standard_normal((1, 1, 40, 40)).astype(F32)  # backend 1x1x4x4, 100x
    image = rng.random((1, 3, 224, 224)).astype(F32)
    out = [
        _resize("cubic, 1x1x40x40 -> 90x100 sizes", small, sizes=[1, 1, 90, 100], mode="cubic"),
        _resize("linear, 1x1x40x40 -> 90x100 sizes", small, sizes=[1, 1, 90, 100], mode="linear"),
        _resize("nearest, 1x1x40x40 -> 90x100 sizes", small, sizes=[1, 1, 90, 100]),
        _resize(
            "cubic antialias, 1x1x40x40 -> 0.6x",
            small,
            scales=[1, 1, 0.6, 0.6],
            mode="cubic",
            antialias=1,
        ),
        _resize(
            "tf_crop_and_resize, 1x1x40x40 -> 30x30",
            small,
            sizes=[1, 1, 30, 30],
            roi=[0, 0, 0.4, 0.6, 1, 1, 0.6, 0.8],
            mode="linear",
            coordinate_transformation_mode="tf_crop_and_resize",
        ),
        _resize("linear 2x, 1x3x224x224", image, scales=[1, 1, 2, 2], mode="linear"),
        _resize("linear 0.5x, 1x3x224x224", image, scales=[1, 1, 0.5, 0.5], mode="linear"),
        _resize(
            "nearest 2x asymmetric floor, 1x3x224x224",
            image,
            scales=[1, 1, 2, 2],
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        ),
        _resize("nearest 1.75x1.25, 1x3x224x224", image, scales=[1, 1, 1.75, 1.25]),
        _resize(
            "linear align_corners, 1x21x64x64 -> 512x512",
            rng.random((1, 21, 64, 64)).astype(F32),
            sizes=[1, 21, 512, 512],
            mode="linear",
            coordinate_transformation_mode="align_corners",
        ),
        _resize(
            "linear antialias 0.3x, 1x3x224x224",
            image,
            scales=[1, 1, 0.3, 0.3],
            mode="linear",
            antialias=1,
        ),
    ]
    up = rng.standard_normal((1, 1, 20, 20)).astype(F32)  # backend 1x1x2x2, 100x
    out.append(
        BenchCase(
            "Upsample: nearest 2x3, 1x1x20x20",
            _model("Upsample", {"x": up}, {"s": np.array([1, 1, 2, 3], F32)}, 9),
            {"x": up},
        )
    )
    # GridSample: backend 1x1x4x4 with a 1x6x6x2 grid; volumetric 1x1x3x2x2 with 1x2x4x2x3
    x = rng.standard_normal((1, 1, 40, 40)).astype(F32)
    grid = (rng.random((1, 60, 60, 2)) * 2.4 - 1.2).astype(F32)
    for mode, padding in [
        ("linear", "zeros"),
        ("nearest", "zeros"),
        ("cubic", "zeros"),
        ("linear", "border"),
        ("linear", "reflection"),
    ]:
        model = _model(
            "GridSample", {"x": x, "grid": grid}, {}, 20, mode=mode, padding_mode=padding
        )
        name = f"GridSample: {mode} {padding}, 1x1x40x40, grid 1x60x60"
        out.append(BenchCase(name, model, {"x": x, "grid": grid}))
    x3 = rng.standard_normal((1, 1, 15, 10, 8)).astype(F32)
    grid3 = (rng.random((1, 10, 20, 8, 3)) * 2.4 - 1.2).astype(F32)
    model = _model("GridSample", {"x": x3, "grid": grid3}, {}, 20, mode="linear")
    name = "GridSample: linear volumetric, 1x1x15x10x8, grid 1x10x20x8"
    out.append(BenchCase(name, model, {"x": x3, "grid": grid3}))
    xc = rng.standard_normal((2, 32, 64, 64)).astype(F32)
    gc = (rng.random((2, 64, 64, 2)) * 2.2 - 1.1).astype(F32)
    model = _model("GridSample", {"x": xc, "grid": gc}, {}, 20, mode="linear")
    out.append(BenchCase("GridSample: linear, 2x32x64x64", model, {"x": xc, "grid": gc}))
    # AffineGrid: backend theta 2x2x3 with size 2x?x5x6, and 2x3x4 with 2x?x4x5x6
    for theta, size in [
        (rng.standard_normal((2, 2, 3)).astype(F32), [2, 1, 50, 60]),
        (rng.standard_normal((2, 3, 4)).astype(F32), [2, 1, 20, 25, 30]),
    ]:
        model = _model("AffineGrid", {"theta": theta}, {"size": np.array(size, np.int64)}, 20)
        name = f"AffineGrid: {len(size) - 2}-D, size {'x'.join(map(str, size))}"
        out.append(BenchCase(name, model, {"theta": theta}))
    return out
