"""The kernel contract of RoiAlign, DeformConv, MaxUnpool and CenterCropPad (roi_align.py,
deform_conv.py, unpool.py, crop.py), through ``graphrt.Session``: every bad attribute is an
``invalid_model`` and every bad input an ``invalid_input`` SessionError naming the node (never a
raw numpy or Python exception); a steady-state run of a static plan allocates no numpy array
data; two intra-op threads and concurrent runs give the bits of one thread; RoiAlign's chunks
(regions, bin rows, points) and DeformConv's zero border change no result; MaxUnpool and
CenterCropPad keep their bits in exact mode.  Behaviour against the operator texts is in
test_detection.py."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import graphrt
from graphrt.errors import SessionError
from graphrt_ops_basic import roi_align
from tests.ops._threads import bits, concurrent_mismatches
from tests.test_alloc import assert_no_numpy_allocation

F32 = np.float32
I64 = np.int64


def model(op: str, inputs: dict, opset: int = 19, consts=(), **attrs):
    """One node named ``the_<op>`` over ``inputs`` in order: those named in ``consts`` are
    initializers, the others graph inputs; a name starting with "_" is an absent optional
    input."""
    names = ["" if k.startswith("_") else k for k in inputs]
    node = helper.make_node(op, names, ["y"], name=f"the_{op.lower()}", **attrs)
    first = next(iter(inputs.values()))

    def info(name, value):
        elem = helper.np_dtype_to_tensor_dtype(value.dtype)
        return helper.make_tensor_value_info(name, elem, list(value.shape))

    graph = helper.make_graph(
        [node],
        "g",
        [info(k, v) for k, v in inputs.items() if not k.startswith("_") and k not in consts],
        [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(first.dtype), None)],
        [numpy_helper.from_array(inputs[k], k) for k in consts],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def feeds_of(case: dict) -> dict:
    return {k: v for k, v in case["inputs"].items() if k not in case["consts"]}


# -- errors -------------------------------------------------------------------------------------

X4 = np.zeros((1, 2, 5, 5), F32)
ROIS = np.array([[0, 0, 3, 3]], F32)
B0 = np.zeros(1, I64)
XD, WD, OD = np.zeros((1, 4, 5, 5), F32), np.zeros((2, 4, 3, 3), F32), np.zeros((1, 18, 3, 3), F32)
XU, IU = np.ones((1, 1, 2, 2), F32), np.zeros((1, 1, 2, 2), I64)
UNPOOL = {"kernel_shape": [2, 2], "strides": [2, 2]}
XC = np.zeros((4, 5, 3), F32)

ERRORS = [
    # RoiAlign: rois not (R, 4), batch indices out of range or of another type, bad attributes
    ("RoiAlign", {"x": X4, "r": np.zeros((1, 3), F32), "b": B0}, {}, 16, {}, "invalid_input"),
    ("RoiAlign", {"x": X4, "r": np.zeros(4, F32), "b": B0}, {}, 16, {}, "invalid_input"),
    ("RoiAlign", {"x": X4, "r": ROIS, "b": np.zeros(2, I64)}, {}, 16, {}, "invalid_input"),
    ("RoiAlign", {"x": X4, "r": ROIS, "b": np.array([1], I64)}, {}, 16, {}, "invalid_input"),
    ("RoiAlign", {"x": X4, "r": ROIS, "b": np.array([-1], I64)}, {}, 16, {}, "invalid_input"),
    ("RoiAlign", {"x": X4, "r": ROIS, "b": np.zeros(1, np.int32)}, {}, 16, {}, "invalid_input"),
    ("RoiAlign", {"x": X4[0], "r": ROIS, "b": B0}, {}, 16, {}, "invalid_input"),
    ("RoiAlign", {"x": X4, "r": ROIS.astype(np.float64), "b": B0}, {}, 16, {}, "invalid_input"),
    ("RoiAlign", {"x": X4, "r": ROIS, "b": B0}, {}, 16, {"mode": "sum"}, "invalid_model"),
    ("RoiAlign", {"x": X4, "r": ROIS, "b": B0}, {}, 16,
     {"coordinate_transformation_mode": "corner"}, "invalid_model"),
    ("RoiAlign", {"x": X4, "r": ROIS, "b": B0}, {}, 16, {"output_height": 0}, "invalid_model"),
    ("RoiAlign", {"x": X4, "r": ROIS, "b": B0}, {}, 16, {"sampling_ratio": -1}, "invalid_model"),
    ("RoiAlign", {"x": X4, "r": ROIS, "b": B0}, {}, 16, {"spatial_scale": "half"},
     "invalid_model"),
    ("RoiAlign", {"x": X4, "r": ROIS, "b": B0}, {}, 16, {"output_width": 2.5}, "invalid_model"),
    # DeformConv: offset and mask shapes, groups not dividing channels, bad attributes
    ("DeformConv", {"x": XD, "w": WD, "o": np.zeros((1, 17, 3, 3), F32)}, {}, 19, {},
     "invalid_input"),
    ("DeformConv", {"x": XD, "w": WD, "o": np.zeros((1, 18, 9), F32)}, {}, 19, {},
     "invalid_input"),
    ("DeformConv", {"x": XD, "w": WD, "o": OD, "b": np.zeros(2, F32),
                    "m": np.zeros((1, 8, 3, 3), F32)}, {}, 19, {}, "invalid_input"),
    ("DeformConv", {"x": XD, "w": WD, "o": OD, "b": np.zeros(3, F32)}, {}, 19, {},
     "invalid_input"),
    ("DeformConv", {"x": XD, "w": WD, "o": OD}, {}, 19, {"group": 3}, "invalid_input"),
    ("DeformConv", {"x": XD, "w": WD, "o": OD}, {}, 19, {"offset_group": 3}, "invalid_input"),
    ("DeformConv", {"x": XD, "w": WD[:, :, :2], "o": OD}, {}, 19, {}, "invalid_input"),
    ("DeformConv", {"x": XD, "w": WD.astype(np.float64), "o": OD}, {}, 19, {}, "invalid_input"),
    ("DeformConv", {"x": XD, "w": WD, "o": OD}, {}, 19, {"group": 0}, "invalid_model"),
    ("DeformConv", {"x": XD, "w": WD, "o": OD}, {}, 19, {"offset_group": 0}, "invalid_model"),
    ("DeformConv", {"x": XD, "w": WD, "o": OD}, {}, 19, {"strides": [0, 1]}, "invalid_model"),
    ("DeformConv", {"x": XD, "w": WD, "o": OD}, {}, 19, {"pads": [1, 1]}, "invalid_model"),
    ("DeformConv", {"x": XD, "w": WD, "o": OD}, {}, 19, {"kernel_shape": [2, 2]},
     "invalid_model"),
    # MaxUnpool: indices out of range, output_shape too small or of another rank or type
    ("MaxUnpool", {"x": XU, "i": np.array([0, 1, 2, 16], I64).reshape(1, 1, 2, 2)}, {}, 11,
     UNPOOL, "invalid_input"),
    ("MaxUnpool", {"x": XU, "i": np.array([0, 1, 2, -1], I64).reshape(1, 1, 2, 2)}, {}, 11,
     UNPOOL, "invalid_input"),
    ("MaxUnpool", {"x": XU, "i": IU}, {"s": np.array([1, 1, 3, 3], I64)}, 11, UNPOOL,
     "invalid_input"),
    ("MaxUnpool", {"x": XU, "i": IU}, {"s": np.array([1, 1, 4], I64)}, 11, UNPOOL,
     "invalid_input"),
    ("MaxUnpool", {"x": XU, "i": IU}, {"s": np.array([1, 1, 4, 4], np.int32)}, 11, UNPOOL,
     "invalid_input"),
    ("MaxUnpool", {"x": XU, "i": IU.astype(np.int32)}, {}, 11, UNPOOL, "invalid_input"),
    ("MaxUnpool", {"x": XU, "i": IU[..., :1]}, {}, 11, UNPOOL, "invalid_input"),
    ("MaxUnpool", {"x": XU, "i": IU}, {}, 11, {"strides": [2, 2]}, "invalid_model"),
    ("MaxUnpool", {"x": XU, "i": IU}, {}, 11, {"kernel_shape": [0, 2]}, "invalid_model"),
    ("MaxUnpool", {"x": XU, "i": IU}, {}, 11, {"kernel_shape": [2, 2], "strides": [2]},
     "invalid_model"),
    # CenterCropPad: shape of the wrong length, type or rank; axes repeated or out of range
    ("CenterCropPad", {"x": XC}, {"s": np.array([2, 2], I64)}, 18, {}, "invalid_input"),
    ("CenterCropPad", {"x": XC}, {"s": np.array([2, -2], I64)}, 18, {"axes": [0, 1]},
     "invalid_input"),
    ("CenterCropPad", {"x": XC}, {"s": np.array([2, 2], F32)}, 18, {"axes": [0, 1]},
     "invalid_input"),
    ("CenterCropPad", {"x": XC}, {"s": np.array([[2, 2]], I64)}, 18, {"axes": [0, 1]},
     "invalid_input"),
    ("CenterCropPad", {"x": XC}, {"s": np.array([2, 2], I64)}, 18, {"axes": [0, 0]},
     "invalid_model"),
    ("CenterCropPad", {"x": XC}, {"s": np.array([2, 2], I64)}, 18, {"axes": [0, 3]},
     "invalid_model"),
    ("CenterCropPad", {"x": XC}, {"s": np.array([2, 2], I64)}, 18, {"axes": [-4, 1]},
     "invalid_model"),
]  # fmt: skip


@pytest.mark.parametrize(("op", "feeds", "consts", "opset", "attrs", "kind"), ERRORS)
def test_errors_name_the_node_and_their_kind(op, feeds, consts, opset, attrs, kind):
    with pytest.raises(SessionError) as info:
        sess = graphrt.Session(model(op, {**feeds, **consts}, opset, tuple(consts), **attrs))
        sess.run(None, feeds)
    err = info.value
    assert err.kind == kind, err
    assert f"the_{op.lower()}" in str(err) and err.node == f"the_{op.lower()}", err
    assert "Error:" not in str(err), f"a raw exception escaped: {err}"


# -- static cases: steady state, threads, exact mode --------------------------------------------


def _case(op, inputs, consts=(), opset=19, exact=False, **attrs) -> dict:
    return {"op": op, "inputs": inputs, "consts": consts, "opset": opset, "attrs": attrs,
            "exact": exact}  # fmt: skip


def _static_cases() -> dict[str, dict]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 12, 13)).astype(F32)
    corner = rng.uniform(-2, 11, (7, 2))
    rois = np.concatenate([corner, corner + rng.uniform(0.5, 9, (7, 2))], 1).astype(F32)
    batch = rng.integers(0, 2, 7).astype(I64)
    roi = {"x": x, "r": rois, "b": batch}
    roi64 = {"x": x.astype(np.float64), "r": rois.astype(np.float64), "b": batch}
    xd = rng.standard_normal((2, 4, 7, 6)).astype(F32)
    wd = rng.standard_normal((6, 2, 3, 2)).astype(F32)
    off = (rng.standard_normal((2, 2 * 6 * 2, 7, 6)) * 2).astype(F32)
    mask = rng.random((2, 2 * 6, 7, 6)).astype(F32)
    bias = rng.standard_normal(6).astype(F32)
    d3 = {
        "x": rng.standard_normal((1, 2, 4, 3, 5)).astype(F32),
        "w": rng.standard_normal((3, 2, 2, 1, 2)).astype(F32),
        "o": rng.standard_normal((1, 4 * 3, 2, 3, 4)).astype(F32),
    }
    pooled = rng.standard_normal((2, 3, 4, 5)).astype(F32)
    picks = rng.integers(0, 2, (2, 2, 3, 4, 5))
    rows, cols = np.meshgrid(np.arange(4), np.arange(5), indexing="ij")
    plane = (np.arange(2 * 3) * 80).reshape(2, 3, 1, 1)
    indices = (plane + (2 * rows + picks[0]) * 10 + 2 * cols + picks[1]).astype(I64)
    half = {k: v.astype(np.float16) if v.dtype == F32 else v for k, v in roi.items()}
    return {
        "roi avg ratio 2": _case("RoiAlign", roi, opset=16, output_height=3, output_width=4,
                                 sampling_ratio=2),
        "roi max ratio 3": _case("RoiAlign", roi, opset=16, mode="max", output_height=2,
                                 output_width=3, sampling_ratio=3),
        "roi avg float64 output_half_pixel": _case(
            "RoiAlign", roi64, opset=16, output_height=2, output_width=2, sampling_ratio=1,
            coordinate_transformation_mode="output_half_pixel"),
        "roi avg float16 (float32 compute)": _case("RoiAlign", half, opset=22, output_height=2,
                                                   output_width=2, sampling_ratio=2),
        "deform 2-d, groups, mask, bias": _case(
            "DeformConv", {"x": xd, "w": wd, "o": off, "b": bias, "m": mask}, ("w", "b"),
            group=2, offset_group=2, pads=[1, 0, 1, 1], strides=[1, 1]),
        "deform 2-d, run-time weights": _case(
            "DeformConv", {"x": xd, "w": wd, "o": off}, group=2, offset_group=2,
            pads=[1, 0, 1, 1]),
        "deform 3-d": _case("DeformConv", d3, dilations=[2, 1, 1]),
        "maxunpool": _case("MaxUnpool", {"x": pooled, "i": indices}, opset=11, exact=True,
                           kernel_shape=[2, 2], strides=[2, 2]),
        "maxunpool output_shape": _case(
            "MaxUnpool", {"x": pooled, "i": indices, "s": np.array([2, 3, 9, 11], I64)}, ("s",),
            opset=11, exact=True, kernel_shape=[2, 2], strides=[2, 2]),
        "centercroppad": _case("CenterCropPad", {"x": x, "s": np.array([9, 16], I64)}, ("s",),
                               opset=18, exact=True, axes=[-1, 2]),
    }  # fmt: skip


STATIC = _static_cases()


def _session(case: dict, **options) -> graphrt.Session:
    m = model(case["op"], case["inputs"], case["opset"], case["consts"], **case["attrs"])
    return graphrt.Session(m, **options)


@pytest.mark.parametrize("name", sorted(STATIC))
def test_steady_state_allocates_no_array_data(name):
    case = STATIC[name]
    modes = ["fast", "exact"] if case["exact"] else ["fast"]
    for mode in modes:
        sess = _session(case, intra_op_threads=1, mode=mode)
        feeds = feeds_of(case)
        out = {"y": np.empty_like(sess.run(None, feeds)[0])}
        for _ in range(2):
            sess.run(None, feeds, out=out)
        assert sess.cached_plans[0].static
        assert_no_numpy_allocation(lambda s=sess, f=feeds, o=out: s.run(None, f, out=o))


def _threads_cases() -> dict[str, dict]:
    cases = dict(STATIC)
    roi = STATIC["roi avg ratio 2"]["inputs"]
    cases["roi avg adaptive"] = _case("RoiAlign", roi, opset=16, output_height=3, output_width=2)
    cases["roi max adaptive"] = _case("RoiAlign", roi, opset=16, mode="max", output_height=2)
    return cases


THREADS = _threads_cases()


@pytest.mark.parametrize("name", sorted(THREADS))
def test_two_threads_and_concurrent_runs_give_the_bits_of_one_thread(name):
    """Plans, prepared data and kernels are shared by run states; every run state has its own
    scratch.  Two intra-op threads, and four Python threads running one session at once,
    give the one-thread bits every time."""
    case = THREADS[name]
    feeds = feeds_of(case)
    want = _session(case, intra_op_threads=1).run(None, feeds)[0]
    two = _session(case, intra_op_threads=2)
    for _ in range(15):
        np.testing.assert_array_equal(bits(two.run(None, feeds)[0]), bits(want))
    assert concurrent_mismatches(two, feeds, want) == 0


@pytest.mark.parametrize("name", ["maxunpool", "maxunpool output_shape", "centercroppad"])
def test_exact_copies_keep_every_bit(name):
    """Copies and zero fills: exact mode gives fast mode's bits, NaN payloads and -0 kept (they
    are the input's bits, the same on every machine)."""
    case = STATIC[name]
    feeds = {k: v.copy() for k, v in feeds_of(case).items()}
    x = feeds["x"].reshape(-1)
    x.view(np.uint32)[:3] = [0x7FC00123, 0xFF800001, 0x80000000]  # payload NaNs and -0
    fast = _session(case).run(None, feeds)[0]
    for threads in (1, 2):
        exact = _session(case, mode="exact", intra_op_threads=threads).run(None, feeds)[0]
        np.testing.assert_array_equal(bits(exact), bits(fast))
    kept = np.isin(bits(fast).reshape(-1), [0x7FC00123, 0xFF800001, 0x80000000])
    assert kept.sum() >= 1


# -- RoiAlign: chunks, huge grids, points outside -----------------------------------------------


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ratio", [0, 3])
def test_roi_align_chunks_change_no_result(mode, ratio, monkeypatch):
    """Regions far larger than the image make adaptive grids of hundreds of points per bin;
    chunks of a few values split regions, bin rows and a bin's points (partial sums and
    maxima combined), and the adaptive tables split the regions: the reference's result."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 6, 7)).astype(F32)
    rois = np.array([[-30, -20, 90, 120], [1, 1, 3, 4], [0, 0, 50, 3], [2, 3, 2, 3]], F32)
    feeds = {"x": x, "r": rois, "b": np.array([0, 1, 1, 0], I64)}
    m = model("RoiAlign", feeds, 16, mode=mode, output_height=2, output_width=3,
              sampling_ratio=ratio)  # fmt: skip
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    got = graphrt.Session(m).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for chunk in (64, 1):  # (at least one point of one bin row per chunk)
        monkeypatch.setattr(roi_align, "CHUNK", chunk)
        monkeypatch.setattr(roi_align, "TABLE_POINTS", chunk)
        small = graphrt.Session(m).run(None, feeds)[0]
        np.testing.assert_allclose(small, got, rtol=1e-5, atol=1e-6)


def test_roi_align_points_outside_weigh_zero():
    """A point beyond one pixel outside the image adds 0 (avg) and is a 0 candidate (max): a
    region wholly outside pools to 0, whatever the image holds."""
    x = np.full((1, 1, 4, 4), 5.0, F32)
    rois = np.array([[10, 10, 14, 12], [-9, -9, -3, -2]], F32)
    feeds = {"x": x, "r": rois, "b": np.zeros(2, I64)}
    for mode in ("avg", "max"):
        m = model("RoiAlign", feeds, 16, mode=mode, output_height=2, sampling_ratio=2)
        got = graphrt.Session(m).run(None, feeds)[0]
        np.testing.assert_array_equal(got, np.zeros((2, 1, 2, 1), F32))
        np.testing.assert_array_equal(got, ReferenceEvaluator(m).run(None, feeds)[0])


# -- DeformConv: the zero border ----------------------------------------------------------------


def test_deform_conv_neighbours_outside_read_exact_zeros():
    """A neighbour outside X counts as 0, so an inf pixel does not turn samples near the
    border into NaN (``0 * inf``): the reference's values."""
    x = np.ones((1, 1, 3, 3), F32)
    x[0, 0, 0, 0] = np.inf
    x[0, 0, 2, 1] = np.nan
    w = np.ones((1, 1, 1, 1), F32)
    off = np.zeros((1, 2, 3, 3), F32)
    off[0, :, 2, 2] = 10.0  # far outside
    off[0, 1, 0, 2] = 0.5  # between the last column and the border
    off[0, 0, 1, 0] = -1.5  # above the first row, both neighbours outside
    feeds = {"x": x, "w": w, "o": off}
    m = model("DeformConv", feeds)
    got = graphrt.Session(m).run(None, feeds)[0]
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    np.testing.assert_array_equal(got[0, 0, 2, 2], 0.0)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_deform_conv_half_precision_casts_run_time_weights_and_bias():
    case = STATIC["deform 2-d, groups, mask, bias"]
    inputs = case["inputs"]
    want = graphrt.Session(model("DeformConv", inputs, **case["attrs"])).run(None, inputs)[0]
    half = {k: v.astype(np.float16) for k, v in inputs.items()}
    got = graphrt.Session(model("DeformConv", half, **case["attrs"])).run(None, half)[0]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(F32), want, rtol=0.02, atol=0.05)
