"""Values whose shape numpy cannot hold (issue 13): refused by a SessionError, never numpy's raw
ValueError.

numpy refuses a shape whose nonzero extents times the item size pass intp even when a 0 extent
leaves nothing to hold (``np.empty((0, 2**63 - 1))``), and more axes than its limit.  Such a
value holds no bytes, so no memory budget refuses it: the planner refuses it where a kernel
states it (``invalid_model``), a dynamic step when its run-time values state it
(``invalid_input``).  numpy itself is the oracle for which shapes are refused.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import graphrt
from graphrt.limits import MAX_NDIM, numpy_refuses
from tests._models import init, make_model, tensor

BIG = 2**63 - 1


def numpy_makes(dtype, shape) -> bool:
    try:
        np.empty(shape, dtype)
    except ValueError:
        return False
    return True


SHAPES = [
    (np.float32, (0, BIG)),
    (np.uint8, (0, BIG)),
    (np.uint8, (0, 2**63)),
    (np.float32, (0, 2**61)),
    (np.float32, (0, 2**60)),
    (np.float64, (2**31, 0, 2**31)),
    (np.float64, (2**31, 0, 2**30)),
    (np.complex64, (0, 2**40, 2**40)),
    (np.int8, (0, 2**31, 2**32)),
    (np.int8, (0,) * 40),
    (np.int8, (1,) * MAX_NDIM),
    (np.int8, (1,) * (MAX_NDIM + 1)),
    (np.int8, (0,) * (MAX_NDIM + 1)),
    (np.float32, (0, -1)),
    (np.float32, (-2, -3)),
    (np.float32, (3, 4)),
    (np.float32, ()),
]


@pytest.mark.parametrize(("dtype", "shape"), SHAPES, ids=[f"{d.__name__}{s}" for d, s in SHAPES])
def test_numpy_refuses_exactly_what_numpy_cannot_make(dtype, shape) -> None:
    assert (numpy_refuses(np.dtype(dtype), shape) is None) == numpy_makes(dtype, shape)


def tile(repeats) -> bytes:
    """Tile of x (float32 [1, 2]) by constant repeats: the output's shape is known at planning."""
    return make_model(
        [helper.make_node("Tile", ["x", "r"], ["y"])],
        [tensor("x", shape=[1, 2])],
        [tensor("y")],
        [init("r", np.array(repeats, np.int64))],
    ).SerializeToString()


def test_planned_empty_value_numpy_cannot_hold_is_invalid_model() -> None:
    shape = (0, 2 * 2**62)
    assert not numpy_makes(np.float32, shape)  # the premise: numpy refuses it, empty as it is
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(tile([0, 2**62])).run(None, {"x": np.ones((1, 2), np.float32)})
    e = info.value
    assert e.kind == "invalid_model", e
    for words in ("'y'", str(list(shape)), "numpy cannot hold that shape"):
        assert words in str(e), (words, str(e))


def test_planned_empty_value_numpy_can_hold_runs() -> None:
    out = graphrt.Session(tile([0, 2**59])).run(None, {"x": np.ones((1, 2), np.float32)})[0]
    assert out.shape == (0, 2**60) and out.dtype == np.float32


def test_planned_value_with_too_many_axes_is_invalid_model() -> None:
    axes = np.arange(1, MAX_NDIM + 1, dtype=np.int64)  # [2] gains MAX_NDIM axes: one too many
    model = make_model(
        [helper.make_node("Unsqueeze", ["x", "axes"], ["y"])],
        [tensor("x", shape=[2])],
        [tensor("y")],
        [init("axes", axes)],
    ).SerializeToString()
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(model).run(None, {"x": np.ones(2, np.float32)})
    assert info.value.kind == "invalid_model", info.value
    assert f"at most {MAX_NDIM} axes" in str(info.value)


def expand_model() -> bytes:
    """Expand by a shape the caller gives: a dynamic step, shaped at run time."""
    return make_model(
        [helper.make_node("Expand", ["x", "s"], ["y"])],
        [tensor("x", shape=[1]), tensor("s", TensorProto.INT64, [2])],
        [tensor("y")],
    ).SerializeToString()


def test_run_time_empty_value_numpy_cannot_hold_is_invalid_input_and_session_stays_usable():
    session = graphrt.Session(expand_model())
    x = np.ones(1, np.float32)
    for _ in range(2):  # nothing of the refused run is remembered: refused again
        with pytest.raises(graphrt.SessionError) as info:
            session.run(None, {"x": x, "s": np.array([0, 2**62], np.int64)})
        assert info.value.kind == "invalid_input", info.value
        assert "'y'" in str(info.value) and "numpy cannot hold" in str(info.value)
    out = session.run(None, {"x": x, "s": np.array([0, 2**60], np.int64)})[0]
    assert out.shape == (0, 2**60)
    out = session.run(None, {"x": x, "s": np.array([2, 3], np.int64)})[0]
    np.testing.assert_array_equal(out, np.ones((2, 3), np.float32))


def test_constant_of_shape_run_time_shape_is_refused() -> None:
    model = make_model(
        [helper.make_node("ConstantOfShape", ["s"], ["y"])],
        [tensor("s", TensorProto.INT64, [2])],
        [tensor("y")],
    ).SerializeToString()
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(model).run(None, {"s": np.array([0, BIG], np.int64)})
    assert info.value.kind == "invalid_input", info.value
