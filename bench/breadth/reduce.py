"""The reduce family: reductions with extra steps, ArgMax/ArgMin, TopK, Unique, CumSum/CumProd,
Det and Einsum, each at its largest backend case's shape scaled up about 100x in elements
(plus a long-axis TopK, the case a partial selection is for)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from . import BenchCase, one_node

OPSET = 21


def _case(name, op, feed, consts=(), n_out=1, opset=OPSET, **attrs) -> BenchCase:
    """One node; output 0 has the first input's type (int64 for ArgMax/ArgMin), the others
    int64."""
    first = helper.np_dtype_to_tensor_dtype(next(iter(feed.values())).dtype)
    types = [TensorProto.INT64 if op in ("ArgMax", "ArgMin") else first]
    types += [TensorProto.INT64] * (n_out - 1)
    return one_node(name, op, feed, opset, tuple(consts), types, **attrs)


def cases() -> list[BenchCase]:
    rng = np.random.default_rng(0)
    x3 = rng.standard_normal((30, 20, 20)).astype(np.float32)  # reduce_*: 3x2x2 -> 100x
    axes = ("axes", np.array([1], np.int64))
    out = [
        _case(f"{op}: 30x20x20, axis 1", op, {"x": x3}, [axes], opset=18, keepdims=1)
        for op in ("ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp")
    ]
    out.append(
        _case(
            "ReduceLogSum: 30x20x20, all axes",
            "ReduceLogSum",
            {"x": np.abs(x3) + 0.5},
            opset=18,
            keepdims=0,
        )
    )
    x_arg = rng.standard_normal((20, 30, 40)).astype(np.float32)  # argmax: 2x3x4 -> 100x
    out += [
        _case(f"{op}: 20x30x40, axis 1", op, {"x": x_arg}, axis=1, keepdims=1)
        for op in ("ArgMax", "ArgMin")
    ]
    out.append(
        _case(
            "ArgMax: 20x30x40, axis 2, select_last_index",
            "ArgMax",
            {"x": x_arg},
            axis=2,
            select_last_index=1,
        )
    )
    k3 = ("k", np.array([3], np.int64))
    out.append(
        _case(
            "TopK: 30x40, k 3",
            "TopK",
            {"x": rng.standard_normal((30, 40)).astype(np.float32)},
            [k3],
            n_out=2,
            axis=1,
        )
    )
    out.append(
        _case(
            "TopK: 4x100000 (long axis), k 10",
            "TopK",
            {"x": rng.standard_normal((4, 100000)).astype(np.float32)},
            [("k", np.array([10], np.int64))],
            n_out=2,
            axis=1,
        )
    )
    out.append(
        _case(
            "Unique: 600 int64, sorted",
            "Unique",
            {"x": rng.integers(0, 100, 600).astype(np.int64)},
            n_out=4,
            opset=11,
        )
    )
    out.append(
        _case(
            "Unique: 30x40x2 float, axis 1",  # unique_sorted_with_axis_3d: 2x4x2 -> 300x
            "Unique",
            {"x": rng.integers(0, 2, (30, 40, 2)).astype(np.float32)},
            n_out=4,
            opset=11,
            axis=1,
        )
    )
    axis1 = ("axis", np.array(1, np.int64))
    xc = rng.standard_normal((20, 30)).astype(np.float32)  # cumsum_2d: 2x3 -> 100x
    out.append(_case("CumSum: 20x30, axis 1", "CumSum", {"x": xc}, [axis1]))
    out.append(
        _case(
            "CumSum: 20x30, axis 0, exclusive reverse",
            "CumSum",
            {"x": xc},
            [("axis", np.array(0, np.int64))],
            exclusive=1,
            reverse=1,
        )
    )
    out.append(
        _case(
            "CumProd: 20x30, axis 1",
            "CumProd",
            {"x": (xc * 0.1 + 1).astype(np.float32)},
            [axis1],
            opset=26,
        )
    )
    out.append(
        _case("Det: 300x2x2", "Det", {"x": rng.standard_normal((300, 2, 2)).astype(np.float32)})
    )
    out.append(
        _case(
            "Einsum: bij,bjk->bik 500x2x3 x 500x3x4",
            "Einsum",
            {
                "a": rng.standard_normal((500, 2, 3)).astype(np.float32),
                "b": rng.standard_normal((500, 3, 4)).astype(np.float32),
            },
            equation="bij,bjk->bik",
        )
    )
    out.append(
        _case(
            "Einsum: ...ii->...i 300x5x5",
            "Einsum",
            {"x": rng.standard_normal((300, 5, 5)).astype(np.float32)},
            equation="...ii->...i",
        )
    )
    out.append(
        _case(
            "Einsum: ij->i 30x40",
            "Einsum",
            {"x": rng.standard_normal((30, 40)).astype(np.float32)},
            equation="ij->i",
        )
    )
    return out
