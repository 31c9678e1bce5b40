"""The models the fuzz suite found, each small and written out, run in a worker process.

Every one must end in outputs or a ``graphrt.SessionError`` on every kernel path, within the
time limit, without a raw exception or an allocation the memory budget should have refused.
Those whose fix has not landed yet are strict expected failures naming the finding: when the
fix lands the test passes, strict xfail fails, and the marker goes (with the matching entry of
tests/fuzz/known.py).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from .harness import Case, Worker, verdicts

BIG = 2**63 - 1


def model(nodes, inputs, inits, opset: int = 17, domains=()) -> bytes:
    graph = helper.make_graph(nodes, "regression", inputs, [onnx.ValueInfoProto(name="y")], inits)
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(graph, opset_imports=imports).SerializeToString()


def x_input(shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info("x", elem, list(shape))


def const(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def lrn_huge_size() -> Case:
    node = helper.make_node("LRN", ["x"], ["y"], size=BIG, alpha=0.5, beta=0.75)
    x = np.ones((7, 1, 3, 4), np.float32)
    return Case("LRN", model([node], [x_input(x.shape)], [], 13), {"x": x})


def averagepool_huge_pad_empty_batch() -> Case:
    node = helper.make_node(
        "AveragePool",
        ["x"],
        ["y"],
        kernel_shape=[2, 3],
        ceil_mode=1,
        pads=[1, 2, 2**29, 1],
        strides=[1, 1],
    )
    x = np.ones((0, 3, 3, 1), np.float32)
    return Case("AveragePool", model([node], [x_input(x.shape)], [], 10), {"x": x})


def unsqueeze_folded_axis_out_of_range() -> Case:
    node = helper.make_node("Unsqueeze", ["data", "axes"], ["y"])
    inits = [const("data", np.float32(4.0)), const("axes", np.array([2**32], np.int64))]
    return Case("Unsqueeze", model([node], [], inits, 13), {})


def split_to_sequence_folded_scalar() -> Case:
    node = helper.make_node("SplitToSequence", ["x"], ["y"])
    return Case("SplitToSequence", model([node], [], [const("x", np.float32(1.0))], 11), {})


def example_scale_nan_factor_on_ints() -> Case:
    node = helper.make_node("Scale", ["x"], ["y"], domain="com.example", factor=float("nan"))
    inits = [const("x", np.arange(14, dtype=np.int16).reshape(2, 7, 1))]
    return Case("com.example::Scale", model([node], [], inits, 21, ["com.example"]), {})


def range_of_two_billion() -> Case:
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["first"]),
        helper.make_node("Concat", ["first", "big"], ["both"], axis=0),
        helper.make_node("ReduceSum", ["both"], ["total"], keepdims=0),
        helper.make_node("Cast", ["total"], ["limit"], to=TensorProto.FLOAT),
        helper.make_node("Range", ["zero", "limit", "one"], ["y"]),
    ]
    inits = [
        const("i0", np.array([0], np.int64)),
        const("big", np.array([2**31], np.int64)),
        const("zero", np.float32(0)),
        const("one", np.float32(1)),
    ]
    x = np.ones((2, 2, 1), np.float32)
    return Case(
        "chain/shape",
        model(nodes, [x_input(x.shape)], inits, 21),
        {"x": x},
        paths=("numpy", "scalar"),
    )


def conv_no_channels_huge_pad() -> Case:
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 0, 1, BIG], strides=[3, 1])
    inits = [const("w", np.zeros((0, 1, 1, 3), np.float32)), const("b", np.zeros(0, np.float32))]
    x = np.ones((2, 1, 4, 33), np.float32)
    return Case(
        "Conv",
        model([node], [x_input(x.shape)], inits, 22),
        {"x": x},
        paths=("numpy", "auto", "scalar"),
    )


def lppool_empty_huge_pad() -> Case:
    node = helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[3], ceil_mode=1, pads=[1, BIG])
    x = np.ones((0, 0, 3), np.float64)
    return Case("LpPool", model([node], [x_input(x.shape, TensorProto.DOUBLE)], [], 18), {"x": x})


def tile_huge_repeats() -> Case:
    node = helper.make_node("Tile", ["x", "r"], ["y"])
    inits = [const("r", np.array([0, 2**40, 2**40], np.int64))]
    x = np.ones((4, 2, 4), np.complex64)
    return Case(
        "Tile", model([node], [x_input(x.shape, TensorProto.COMPLEX64)], inits, 13), {"x": x}
    )


def random_normal_empty_huge_shape() -> Case:
    node = helper.make_node("RandomNormal", [], ["y"], shape=[2**31, 0, 2**31, BIG, 7])
    return Case("RandomNormal", model([node], [], [], 22), {})


def constant_of_undefined_type() -> Case:
    """Found by atheris (tox -e atheris): a tensor attribute whose element type is 0."""
    value = onnx.TensorProto(name="v", data_type=TensorProto.UNDEFINED, dims=[1], raw_data=b"\0")
    node = helper.make_node("Constant", [], ["y"], value=value)
    return Case("Constant", model([node], [], [], 17), {})


def maxpool_huge_kernel() -> Case:
    """Found by ``tox -e fuzz`` (30 minutes): a window of 2**30 taps planned tap by tap."""
    node = helper.make_node(
        "MaxPool", ["x"], ["y"], kernel_shape=[2, 2**29], pads=[3, 2**31, 2**29, 0]
    )
    x = np.zeros((4, 1, 256, 513), np.float32)
    return Case("MaxPool", model([node], [x_input([None] * 4)], [], 12), {"x": x})


def maxpool_huge_same_kernel() -> Case:
    """Found by ``tox -e fuzz``: SAME_UPPER pads for a 2**29 x 2**29 window, which the native
    MaxPool's work buffer followed to 4.8 GiB on the scalar path."""
    node = helper.make_node(
        "MaxPool", ["x"], ["y"], auto_pad="SAME_UPPER", kernel_shape=[2**29, 2**29]
    )
    x = np.zeros((13, 3, 2, 16), np.float32)
    return Case("MaxPool", model([node], [x_input([None] * 4)], [], 12), {"x": x})


def maxpool_indices_huge_pad() -> Case:
    """Found by ``tox -e fuzz``: MaxPool's Indices offsets were made at infer, an int64 array
    of Y's size (4 GiB for pads of 2**29) before the budget refused the 14 GiB plan."""
    node = helper.make_node(
        "MaxPool", ["x"], ["y", "idx"], kernel_shape=[2], pads=[0, 2**29], strides=[3]
    )
    x = np.zeros((3, 7, 5), np.uint8)
    case = model([node], [x_input([None] * 3, TensorProto.UINT8)], [], 22)
    return Case("MaxPool", case, {"x": x}, options={"max_memory": 256 << 20, "mode": "exact"})


def exact_conv_huge_pad() -> Case:
    """Found by ``tox -e fuzz``: the native exact Conv cut an output of 2**32 rows into blocks
    at infer, one tuple entry each, before the budget saw the plan (a hang, then 5 GiB)."""
    w = numpy_helper.from_array(np.ones((8, 8, 2, 2), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[2, 2], pads=[2**31] * 4)
    x = np.ones((2, 8, 5, 5), np.float32)
    paths = ("numpy", "auto", "scalar")
    case = model([node], [x_input(x.shape)], [w], 11)
    return Case("Conv", case, {"x": x}, paths, {"mode": "exact", "max_memory": 256 << 20})


OPEN = "issue 13 fuzz finding, routed to the lead: "
FIXED = "issue 13 fuzz finding, fixed: "
CASES = {
    "constant_of_undefined_type": (
        constant_of_undefined_type,
        FIXED + "a tensor attribute that cannot be decoded (element type UNDEFINED) is "
        "invalid_model, naming the node, attribute and tensor",
    ),
    "lrn_huge_size": (
        lrn_huge_size,
        FIXED + "LRN's window is clamped to the channels: at most 2C - 1 offsets",
    ),
    "averagepool_huge_pad_empty_batch": (
        averagepool_huge_pad_empty_batch,
        FIXED + "AveragePool's divisor is counted in closed form per axis at bind, not for "
        "an empty output",
    ),
    "unsqueeze_folded_axis_out_of_range": (
        unsqueeze_folded_axis_out_of_range,
        FIXED + "constant folding wraps the kernel's ValueError",
    ),
    "split_to_sequence_folded_scalar": (
        split_to_sequence_folded_scalar,
        FIXED + "constant folding wraps the kernel's IndexError",
    ),
    "example_scale_nan_factor_on_ints": (
        example_scale_nan_factor_on_ints,
        FIXED + "constant folding wraps a third-party kernel's ValueError",
    ),
    "range_of_two_billion": (
        range_of_two_billion,
        FIXED + "Range is charged to the budget before its values exist",
    ),
    "conv_no_channels_huge_pad": (
        conv_no_channels_huge_pad,
        FIXED + "an empty value with a 2**63 extent is refused where its shape is stated",
    ),
    "lppool_empty_huge_pad": (
        lppool_empty_huge_pad,
        FIXED + "an empty value with a 2**63 extent is refused where its shape is stated",
    ),
    "random_normal_empty_huge_shape": (
        random_normal_empty_huge_shape,
        FIXED + "an empty value with a 2**63 extent is refused where its shape is stated",
    ),
    "maxpool_huge_kernel": (
        maxpool_huge_kernel,
        FIXED + "windows of more than 2**18 taps are refused (invalid_model) before planning",
    ),
    "maxpool_huge_same_kernel": (
        maxpool_huge_same_kernel,
        FIXED + "windows of more than 2**18 taps are refused before any path plans them",
    ),
    "maxpool_indices_huge_pad": (
        maxpool_indices_huge_pad,
        FIXED + "MaxPool's Indices offsets are made at the plan's first bind, after the budget",
    ),
    "exact_conv_huge_pad": (
        exact_conv_huge_pad,
        FIXED + "an output beyond 2**22 row blocks is left to the table's kernel (refused)",
    ),
    "tile_huge_repeats": (
        tile_huge_repeats,
        FIXED + "an empty value with 2**40 extents is refused where its shape is stated",
    ),
}


def _param(name: str):
    why = CASES[name][1]
    marks = [pytest.mark.xfail(strict=True, reason=why)] if why.startswith(OPEN) else []
    return pytest.param(name, marks=marks, id=name)


@pytest.fixture(scope="module")
def worker():
    w = Worker(timeout=5)
    yield w
    w.dispose()


@pytest.mark.parametrize("name", [_param(n) for n in sorted(CASES)])
def test_found_model_ends_in_result_or_session_error(worker, name) -> None:
    case = CASES[name][0]()
    reply, failure = worker.run(case)
    assert failure is None, str(failure)
    found = [f for f in verdicts(case, reply) if f.fatal]
    assert not found, "\n\n".join(map(str, found))
    for path, r in reply["paths"].items():
        assert r["outcome"] == "ok" or r["outcome"].startswith("SessionError:"), (path, r)
