"""The indexing family: GatherND, ScatterND, Scatter, TensorScatter, Compress, OneHot, Trilu,
EyeLike, ReverseSequence, SpaceToDepth, DepthToSpace, each at its largest backend case's shape
scaled up about 100x in elements, with the inputs the case feeds (a run-time condition, depth
or k included)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from . import BenchCase, one_node


def _case(name, op, feed, opset, consts=(), out_type=None, **attrs) -> BenchCase:
    """One node; output 0 has the first input's type unless ``out_type`` says otherwise."""
    types = None if out_type is None else [out_type]
    return one_node(name, op, feed, opset, tuple(consts), types, **attrs)


def cases() -> list[BenchCase]:
    rng = np.random.default_rng(0)
    f32 = np.float32
    out = []
    # gathernd_example_float32: data 2x2x2, indices 2x1x2 -> 20x20x20, 200x1x2
    data = rng.standard_normal((20, 20, 20)).astype(f32)
    tuples = rng.integers(-20, 20, (200, 1, 2))
    out.append(
        _case("GatherND: 20x20x20, 200x1x2 tuples", "GatherND", {"x": data, "i": tuples}, 13)
    )
    batched = rng.integers(-20, 20, (20, 10, 1))
    out.append(
        _case(
            "GatherND: 20x20x20, batch_dims 1",
            "GatherND",
            {"x": data, "i": batched},
            13,
            batch_dims=1,
        )
    )
    # scatternd: data 4x4x4, indices 2x1, updates 2x4x4 -> 16x20x20, 8x1, 8x20x20
    base = rng.standard_normal((16, 20, 20)).astype(f32)
    rows = rng.permutation(16)[:8].reshape(8, 1)
    updates = rng.standard_normal((8, 20, 20)).astype(f32)
    for reduction in ("none", "add", "max"):
        out.append(
            _case(
                f"ScatterND: 16x20x20, 8 slices, {reduction}",
                "ScatterND",
                {"x": base, "i": rows, "u": updates},
                18,
                reduction=reduction,
            )
        )
    # element tuples: many small updates (scatternd_max_with_element_indices, 2x2 -> 100x)
    small = rng.standard_normal((20, 20)).astype(f32)
    elements = rng.integers(0, 20, (200, 2))
    out.append(
        _case(
            "ScatterND: 20x20, 200 element tuples, add",
            "ScatterND",
            {"x": small, "i": elements, "u": rng.standard_normal(200).astype(f32)},
            18,
            reduction="add",
        )
    )
    # scatter_without_axis: data 3x3, indices and updates 2x3 -> 30x30, 20x30
    grid = np.zeros((30, 30), f32)
    where = np.stack([rng.permutation(30)[:20] for _ in range(30)], 1)
    out.append(
        _case(
            "Scatter: 30x30, 20x30 updates, axis 0",
            "Scatter",
            {"x": grid, "i": where, "u": rng.standard_normal((20, 30)).astype(f32)},
            10,
        )
    )
    # tensorscatter_circular: past 2x1x4x5, update 2x1x2x5 -> 2x10x40x5, 2x10x20x5
    past = rng.standard_normal((2, 10, 40, 5)).astype(f32)
    upd = rng.standard_normal((2, 10, 20, 5)).astype(f32)
    for mode, write in (("linear", [3, 20]), ("circular", [30, 5])):
        out.append(
            _case(
                f"TensorScatter: 2x10x40x5, 20 steps, {mode}",
                "TensorScatter",
                {"past": past, "u": upd, "w": np.array(write, np.int64)},
                24,
                mode=mode,
            )
        )
    # compress_0: 3x2, condition 3 -> 30x20, run-time condition
    x = rng.standard_normal((30, 20)).astype(f32)
    cond = rng.random(30) < 0.5
    out.append(_case("Compress: 30x20, axis 0", "Compress", {"x": x, "c": cond}, 11, axis=0))
    cond = rng.random(500) < 0.5
    out.append(_case("Compress: 30x20 flattened, 500", "Compress", {"x": x, "c": cond}, 11))
    # onehot_with_axis: indices 2x2, depth 10 -> 20x20, run-time depth
    ids = rng.integers(-12, 12, (20, 20)).astype(f32)
    feed = {"i": ids, "d": np.array(10, f32), "v": np.array([1, 3], f32)}
    out.append(_case("OneHot: 20x20, depth 10, axis 1", "OneHot", feed, 11, axis=1))
    consts = [("d", np.array(10, np.int64)), ("v", np.array([1, 3], f32))]
    ints = {"i": ids.astype(np.int64)}
    out.append(
        _case(
            "OneHot: 20x20, constant depth 10",
            "OneHot",
            ints,
            11,
            consts,
            out_type=TensorProto.FLOAT,
            axis=1,
        )
    )
    # triu: 4x5 -> 40x50, run-time k
    mat = rng.integers(0, 100, (40, 50))
    feed = {"x": mat, "k": np.array(-3, np.int64)}
    out.append(_case("Trilu: 40x50, upper, k -3", "Trilu", feed, 14))
    out.append(
        _case("Trilu: 2x40x50, lower", "Trilu", {"x": rng.integers(0, 9, (2, 40, 50))}, 14, upper=0)
    )
    # eyelike_populate_off_main_diagonal: 4x5 -> 40x50
    out.append(
        _case(
            "EyeLike: 40x50, k 1, float",
            "EyeLike",
            {"x": np.zeros((40, 50), np.int32)},
            22,
            out_type=TensorProto.FLOAT,
            k=1,
            dtype=TensorProto.FLOAT,
        )
    )
    # reversesequence_time: 4x4 -> 40x40 (time major), and with a row per step
    lens = rng.integers(0, 41, 40)
    for what, shape, batch_axis in (
        ("40x40, time major", (40, 40), 1),
        ("40x40x16, batch major", (40, 40, 16), 0),
    ):
        seq = rng.standard_normal(shape).astype(f32)
        feed = {"x": seq, "l": lens}
        out.append(
            _case(
                f"ReverseSequence: {what}",
                "ReverseSequence",
                feed,
                10,
                batch_axis=batch_axis,
                time_axis=1 - batch_axis,
            )
        )
    # spacetodepth: 2x2x6x6 -> 2x8x30x30; depthtospace_example: 1x8x2x3 -> 2x32x10x8
    image = rng.standard_normal((2, 8, 30, 30)).astype(f32)
    out.append(
        _case("SpaceToDepth: 2x8x30x30, block 2", "SpaceToDepth", {"x": image}, 13, blocksize=2)
    )
    depth = rng.standard_normal((2, 32, 10, 8)).astype(f32)
    for mode in ("DCR", "CRD"):
        out.append(
            _case(
                f"DepthToSpace: 2x32x10x8, block 2, {mode}",
                "DepthToSpace",
                {"x": depth},
                13,
                blocksize=2,
                mode=mode,
            )
        )
    return out
