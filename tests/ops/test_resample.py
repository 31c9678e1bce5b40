"""Resize, Upsample, GridSample and AffineGrid of graphrt-ops-basic (resize.py, resize_taps.py,
grid.py): every mode and attribute against onnx's reference evaluator, the corners where the
spec, onnxruntime and the reference part ways (checked by hand, with the choice documented in
the kernels), the legacy opsets against onnxruntime, the fast paths (repeats, strides, one flat
gather, split blocks), errors by kind, exact mode, and a random model against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import graphrt
from graphrt.errors import SessionError
from graphrt_ops_basic import grid as grid_module
from graphrt_ops_basic import resize as resize_module
from tests._models import onnxruntime_limits, ort_session
from tests._versions import ONNX
from tests.ops._threads import bits, concurrent_mismatches

F32 = np.float32


def _info(name: str, value: np.ndarray):
    return helper.make_tensor_value_info(
        name, helper.np_dtype_to_tensor_dtype(value.dtype), list(value.shape)
    )


def one_node(op, feeds: dict, consts: dict | None = None, opset=19, out_dtype=None, **attrs):
    """A one-node model: ``feeds`` are graph inputs, ``consts`` initializers; an input named
    "" (a key starting with "_") is an absent optional input."""
    consts = consts or {}
    names = [("" if k.startswith("_") else k) for k in [*feeds, *consts]]
    node = helper.make_node(op, names, ["y"], name=f"the_{op.lower()}", **attrs)
    first = next(iter(feeds.values()))
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(out_dtype or first.dtype))
    graph = helper.make_graph(
        [node],
        "g",
        [_info(k, v) for k, v in feeds.items() if not k.startswith("_")],
        [helper.make_tensor_value_info("y", elem, None)],
        [numpy_helper.from_array(v, k) for k, v in consts.items() if not k.startswith("_")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def ours(model, feeds, **kw):
    return graphrt.Session(model, intra_op_threads=kw.pop("threads", 1), **kw).run(None, feeds)[0]


def reference(model, feeds):
    return ReferenceEvaluator(model).run(None, feeds)[0]


def resize_reference(model, x: np.ndarray, out_size: int) -> np.ndarray:
    """onnx's reference Resize (from onnx 1.20 separable and vectorised; before, a Python loop
    per output element that also fails on empty outputs)."""
    if ONNX < (1, 20) and not 0 < out_size <= 400:
        pytest.skip("onnx < 1.20's reference Resize loops per element: small non-empty cases")
    return reference(model, {"x": x})


def resize_model(x, attrs, scales=None, sizes=None, roi=None, opset=19):
    consts = {"_roi" if roi is None else "roi": np.array(roi or [], F32)}
    if scales is not None:
        consts["scales"] = np.array(scales, F32)
    else:
        consts["_scales"] = np.array([], F32)
        consts["sizes"] = np.array(sizes, np.int64)
    return one_node("Resize", {"x": x}, consts, opset=opset, **attrs)


def assert_close(got, want, rtol=1e-4, atol=1e-5):
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
    if got.dtype.kind in "iu":
        np.testing.assert_allclose(got.astype(float), want.astype(float), atol=1)
    elif got.dtype.kind == "c":
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    else:
        np.testing.assert_allclose(got.astype(float), want.astype(float), rtol=rtol, atol=atol)


def kind_of(fn) -> SessionError:
    with pytest.raises(SessionError) as err:
        fn()
    return err.value


# -- Resize against the reference evaluator ----------------------------------------------------

MODES = ["nearest", "linear", "cubic"]
COORDS = [
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
]


def random_resize(seed: int):
    """A random Resize-19 case away from the corners the kernels document as choices (a
    pytorch_half_pixel or tf_crop_and_resize axis of one output position)."""
    rng = np.random.default_rng(seed)
    mode, ctm = MODES[seed % 3], COORDS[(seed // 3) % 6]
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm}
    if mode == "nearest":
        attrs["nearest_mode"] = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"][
            seed % 4
        ]
    else:
        attrs["antialias"] = int(rng.random() < 0.3)
    if mode == "cubic":
        attrs["cubic_coeff_a"] = float(rng.choice([-0.75, -0.5]))
        attrs["exclude_outside"] = int(rng.random() < 0.4)
    rank = int(rng.integers(1, 5))
    shape = [int(rng.integers(1, 7)) for _ in range(rank)]
    dtype = [F32, np.float64, np.float16, np.uint8, np.int32][seed % 5]
    x = (rng.random(shape) * 100).astype(dtype)
    axes = list(range(rank))
    if rng.random() < 0.4:
        axes = sorted(rng.choice(rank, size=int(rng.integers(1, rank + 1)), replace=False))
        axes = [int(a) for a in (axes[::-1] if rng.random() < 0.5 else axes)]
        attrs["axes"] = axes
    roi = None
    if ctm == "tf_crop_and_resize":
        start = rng.random(len(axes)) * 0.6 - 0.1
        roi = [float(v) for v in [*start, *(start + rng.random(len(axes)) * 0.9 + 0.1)]]
        attrs["extrapolation_value"] = 7.0
    if rng.random() < 0.5:
        scales = [float(rng.choice([0.5, 0.6, 1.0, 1.5, 2.0, 2.5, 3.0, 0.33])) for _ in axes]
        return x, attrs, {"scales": scales, "roi": roi}
    sizes = [int(rng.integers(2, 10)) for _ in axes]
    if len(axes) > 1 and rng.random() < 0.3:
        attrs["keep_aspect_ratio_policy"] = str(rng.choice(["not_larger", "not_smaller"]))
    return x, attrs, {"sizes": sizes, "roi": roi}


@pytest.mark.parametrize("seed", range(150))
def test_resize_matches_the_reference(seed):
    x, attrs, inputs = random_resize(seed)
    model = resize_model(x, attrs, **inputs)
    got = ours(model, {"x": x})
    ctm = attrs["coordinate_transformation_mode"]
    if ctm in ("pytorch_half_pixel", "tf_crop_and_resize") and any(
        n == 1 != d for n, d in zip(got.shape, x.shape)
    ):
        pytest.skip("one output position: the spec's choice, checked by hand below")
    assert_close(got, resize_reference(model, x, got.size), rtol=2e-3, atol=1e-3)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ctm", COORDS[:-1])
def test_resize_2d_images_match_the_reference(mode, ctm, monkeypatch):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 9, 7)).astype(F32)
    cases = [[1, 1, 2, 3], [1, 1, 0.6, 0.7], [1, 1, 1.3, 0.4], [1, 1, 0.5, 1 / 3]]
    if ctm == "half_pixel_symmetric":  # 9 * 0.5 lands x an ulp above 1.0, where the reference
        cases.pop()  # picks its taps from x + padding, rounded to 2.0: neighbours 0, 1, not 1, 2
    for scales in cases:
        model = resize_model(x, {"mode": mode, "coordinate_transformation_mode": ctm}, scales)
        got = ours(model, {"x": x})
        want = resize_reference(model, x, got.size)
        assert_close(got, want)
        with monkeypatch.context() as m:  # large steps: tap by tap, strided taps as views
            m.setattr(resize_module, "FUSE_LIMIT", 0)
            assert_close(ours(model, {"x": x}), want)


def test_one_output_position_follows_the_spec():
    """The spec: pytorch_half_pixel maps a single output position to 0 and tf_crop_and_resize
    to the roi's centre (onnxruntime agrees; the reference reads the real-valued output length
    scale * in, 1.8 here, and lands elsewhere)."""
    x = np.array([[10.0, 20.0, 30.0, 40.0, 50.0]], F32)
    model = resize_model(
        x,
        {"mode": "cubic", "coordinate_transformation_mode": "pytorch_half_pixel"},
        scales=[1.0, 0.36],
    )
    np.testing.assert_array_equal(ours(model, {"x": x}), [[10.0]])
    attrs = {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize"}
    model = resize_model(x, attrs, scales=[1.0, 0.36], roi=[0, 0.25, 1, 0.75])
    np.testing.assert_allclose(ours(model, {"x": x}), [[30.0]])  # centre 0.5 * 4 = 2


def test_align_corners_divides_by_the_real_output_length():
    """Backend case resize_downsample_scales_linear_align_corners: x = y * (4 - 1) / (2.4 - 1)
    with 2.4 = 4 * 0.6, not the integer length 2 (onnxruntime would read x[3])."""
    x = np.array([[1, 2, 3, 4]], F32)
    attrs = {"mode": "linear", "coordinate_transformation_mode": "align_corners"}
    got = ours(resize_model(x, attrs, scales=[1.0, 0.6]), {"x": x})
    np.testing.assert_allclose(got, [[1.0, 1 + 3 / 1.4]], rtol=1e-6)


def test_nearest_modes_by_hand():
    x = np.arange(3, dtype=F32).reshape(1, 3)
    ties = {  # asymmetric 2x: x = y / 2 = 0, .5, 1, 1.5, 2, 2.5 (clamped to 2)
        "round_prefer_floor": [0, 0, 1, 1, 2, 2],
        "round_prefer_ceil": [0, 1, 1, 2, 2, 2],
        "floor": [0, 0, 1, 1, 2, 2],
        "ceil": [0, 1, 1, 2, 2, 2],
    }
    others = {  # asymmetric 1.25x of 4: x = 0, .8, 1.6, 2.4, 3.2
        "round_prefer_floor": [0, 1, 2, 2, 3],
        "round_prefer_ceil": [0, 1, 2, 2, 3],
        "floor": [0, 0, 1, 2, 3],
        "ceil": [0, 1, 2, 3, 3],
    }
    x4 = np.arange(4, dtype=F32).reshape(1, 4)
    for nearest in ties:
        attrs = {"coordinate_transformation_mode": "asymmetric", "nearest_mode": nearest}
        got = ours(resize_model(x, attrs, scales=[1.0, 2.0]), {"x": x})
        np.testing.assert_array_equal(got, [ties[nearest]])
        got = ours(resize_model(x4, attrs, scales=[1.0, 1.25]), {"x": x4})
        np.testing.assert_array_equal(got, [others[nearest]])


def test_tf_crop_and_resize_extrapolates_every_axis():
    x = np.arange(16, dtype=F32).reshape(1, 1, 4, 4)
    attrs = {
        "mode": "linear",
        "coordinate_transformation_mode": "tf_crop_and_resize",
        "extrapolation_value": -1.0,
        "axes": [2, 3],
    }
    model = resize_model(x, attrs, sizes=[3, 3], roi=[-0.5, 0.0, 1.0, 1.5])
    got = ours(model, {"x": x})
    assert_close(got, reference(model, {"x": x}))
    assert (got[0, 0, 0] == -1).all() and (got[0, 0, :, 2] == -1).all()


def test_integers_round_to_even_and_saturate():
    x = np.array([[0, 255, 0, 255, 255, 0]], np.uint8)
    model = resize_model(x, {"mode": "cubic"}, scales=[1.0, 1.5])
    got = ours(model, {"x": x})
    assert_close(got, reference(model, {"x": x}))
    assert got.min() == 0 and got.max() == 255  # cubic overshoot is saturated
    x = np.array([[1, 2]], np.int64)  # half-way values go to the even neighbour
    attrs = {"mode": "linear", "coordinate_transformation_mode": "asymmetric"}
    np.testing.assert_array_equal(
        ours(resize_model(x, attrs, scales=[1, 2]), {"x": x}), [[1, 2, 2, 2]]
    )


def test_strings_and_booleans_are_selected():
    x = np.array([["a", "b"], ["c", "d"]], dtype=object)
    got = ours(resize_model(x, {"mode": "nearest"}, scales=[1.0, 2.0]), {"x": x})
    np.testing.assert_array_equal(got, [["a", "a", "b", "b"], ["c", "c", "d", "d"]])
    b = np.array([[True, True, False]])  # half_pixel 0.7x of 3: x = 0.21, 1.64 -> 0, 2
    got = ours(resize_model(b, {"mode": "nearest"}, scales=[2.0, 0.7]), {"x": b})
    np.testing.assert_array_equal(got, [[True, False], [True, False]])
    err = kind_of(lambda: ours(resize_model(x, {"mode": "linear"}, scales=[1.0, 2.0]), {"x": x}))
    assert err.kind == "invalid_model" and "the_resize" in str(err)


# -- the kernel's paths -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype", [F32, np.float64, np.float16, np.uint8, np.int16, np.bool_, np.complex64]
)
def test_integer_repeats_and_strides_are_copies(dtype):
    """Nearest upsampling by whole factors (a broadcast copy, or one widening multiply when
    the last axis' copies fit 8 bytes) and downsampling by whole factors (a strided copy)."""
    rng = np.random.default_rng(3)
    x = (rng.random((2, 3, 5, 4)) * 100).astype(dtype)
    for scales, ctm in [
        ([1, 1, 2, 2], "asymmetric"),
        ([1, 1, 3, 4], "asymmetric"),
        ([1, 1, 2, 1], "half_pixel"),
        ([1, 1, 1, 2], "half_pixel"),
        ([1, 1, 0.5, 0.5], "half_pixel"),
        ([1, 2, 1, 0.5], "asymmetric"),
    ]:
        attrs = {"mode": "nearest", "coordinate_transformation_mode": ctm}
        if ctm == "asymmetric":
            attrs["nearest_mode"] = "floor"
        model = resize_model(x, attrs, scales=scales)
        want = x
        for axis, s in enumerate(scales):
            n = int(x.shape[axis] * s)
            pick = np.arange(n) // int(s) if s >= 1 else np.arange(n) * int(1 / s)
            want = np.take(want, pick, axis=axis)
        np.testing.assert_array_equal(ours(model, {"x": x}), want)


def test_flat_gather_and_its_fallback(monkeypatch):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 5, 3, 6)).astype(F32)
    for scales in ([1, 1.7, 1, 1], [1, 1.4, 0.7, 1], [1.5, 1, 1, 1.3]):
        model = resize_model(x, {"mode": "nearest"}, scales=scales)
        got = ours(model, {"x": x})
        want = resize_reference(model, x, got.size)
        np.testing.assert_array_equal(got, want)
        monkeypatch.setattr(resize_module, "FLAT_LIMIT", 4)  # axis by axis instead
        np.testing.assert_array_equal(ours(model, {"x": x}), want)
        monkeypatch.undo()


def test_blocks_for_threads_give_the_same_bits(monkeypatch):
    monkeypatch.setattr(resize_module, "BLOCK_ELEMENTS", 64)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 4, 10, 9)).astype(F32)
    for mode in MODES:
        model = resize_model(x, {"mode": mode}, scales=[1, 1, 1.7, 2.3])
        one = ours(model, {"x": x})
        two = graphrt.Session(model, intra_op_threads=2)
        for _ in range(10):  # blocks at different steps run at once: their scratch is apart
            np.testing.assert_array_equal(one, two.run(None, {"x": x})[0])
        assert_close(one, resize_reference(model, x, one.size))


def test_run_time_scales_make_the_node_dynamic():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 2, 4, 5)).astype(F32)
    model = one_node(
        "Resize", {"x": x, "_roi": np.zeros(0, F32), "scales": np.ones(4, F32)}, mode="linear"
    )
    session = graphrt.Session(model)
    for scales in ([1, 1, 2, 2], [1, 1, 0.5, 1.5]):
        s = np.array(scales, F32)
        const = resize_model(x, {"mode": "linear"}, scales=scales)
        np.testing.assert_allclose(
            session.run(None, {"x": x, "scales": s})[0],
            reference(const, {"x": x}),
            rtol=1e-5,
            atol=1e-6,
        )


# -- older opsets and Upsample ------------------------------------------------------------------


def test_resize_11_and_13_forms():
    x = np.arange(12, dtype=F32).reshape(1, 1, 3, 4)
    roi, empty = np.array([], F32), np.array([], F32)
    for opset in (11, 13):
        model = one_node(
            "Resize",
            {"x": x},
            {"roi": roi, "scales": empty, "sizes": np.array([1, 1, 6, 8], np.int64)},
            opset=opset,
            mode="linear",
        )
        same = resize_model(x, {"mode": "linear"}, sizes=[1, 1, 6, 8])  # opset 19's form
        assert_close(ours(model, {"x": x}), reference(same, {"x": x}))
    # tf_half_pixel_for_nn (opsets 11 to 17): x = (y + 0.5) / scale
    model = one_node(
        "Resize",
        {"x": x},
        {"roi": roi, "scales": np.array([1, 1, 1, 0.5], F32)},
        opset=11,
        mode="nearest",
        coordinate_transformation_mode="tf_half_pixel_for_nn",
    )
    np.testing.assert_array_equal(ours(model, {"x": x}), x[..., [1, 3]])  # 1.0, 3.0
    err = kind_of(
        lambda: graphrt.Session(
            one_node(
                "Resize",
                {"x": x},
                {"roi": roi, "scales": empty},
                opset=19,
                coordinate_transformation_mode="tf_half_pixel_for_nn",
            )
        )
    )
    assert err.kind == "invalid_model"


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_10_and_upsample_follow_onnxruntime(mode):
    """ONNX leaves their rounding open: asymmetric coordinates, nearest rounds down when an
    axis grows and up when it shrinks, like onnxruntime."""
    pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 2, 5, 7)).astype(F32)
    for scales in ([1, 1, 1.5, 2.5], [1, 1, 0.6, 0.35], [1, 1, 2, 3]):
        s = {"scales": np.array(scales, F32)}
        cases = [one_node("Resize", {"x": x}, s, opset=10, mode=mode)]
        if min(scales) >= 1:
            cases.append(one_node("Upsample", {"x": x}, s, opset=9, mode=mode))
            floats = [float(v) for v in scales]
            cases.append(one_node("Upsample", {"x": x}, opset=7, mode=mode, scales=floats))
        for model in cases:
            want = ort_session(model).run(None, {"x": x})[0]
            assert_close(ours(model, {"x": x}), want)
    s = {"scales": np.array([1, 1, 1, 0.5], F32)}
    err = kind_of(lambda: ours(one_node("Upsample", {"x": x}, s, opset=9), {"x": x}))
    assert err.kind == "invalid_input" and ">= 1" in str(err)


def test_upsample_nearest_reference():
    x = np.array([[[[1, 2], [3, 4]]]], F32)
    model = one_node("Upsample", {"x": x}, {"s": np.array([1, 1, 2, 3], F32)}, opset=9)
    np.testing.assert_array_equal(ours(model, {"x": x}), reference(model, {"x": x}))


# -- Resize errors ------------------------------------------------------------------------------


def test_resize_errors_name_the_node_and_their_kind():
    """Bad inputs (values of scales, sizes and roi; their types) are invalid_input, bad
    attributes (unknown names, axes, antialias with nearest, wrong types) invalid_model; never a
    raw numpy or Python exception."""
    x = np.zeros((1, 1, 2, 2), F32)
    s4, z4 = np.ones(4, F32), np.array([1, 1, 4, 4], np.int64)
    roi0 = np.zeros(0, F32)
    sizes2 = {"_r": roi0, "_s": roi0, "sizes": np.array([2, 2], np.int64)}
    crop = {"coordinate_transformation_mode": "tf_crop_and_resize", "mode": "linear"}
    cases = {
        "invalid_input": [
            ({"roi": roi0, "scales": s4, "sizes": z4}, {}),  # both
            ({"roi": roi0, "_s": roi0, "_z": z4[:0]}, {}),  # neither
            ({"_r": roi0, "scales": np.ones(3, F32)}, {}),  # wrong length
            ({"_r": roi0, "scales": np.array([1, 1, -2, 1], F32)}, {}),
            ({"_r": roi0, "scales": np.array([1, 1, 0, 1], F32)}, {}),
            ({"_r": roi0, "scales": np.array([1, 1, np.nan, 1], F32)}, {}),
            ({"_r": roi0, "scales": np.array([1, 1, 1e30, 1], F32)}, {}),  # too large
            ({"_r": roi0, "scales": np.ones(4, np.int64)}, {}),  # not float
            ({"_r": roi0, "_s": roi0, "sizes": np.array([1, 1, -1, 2], np.int64)}, {}),
            ({"_r": roi0, "_s": roi0, "sizes": np.array([1, 1, 0, 2], np.int64)}, {}),
            ({"_r": roi0, "_s": roi0, "sizes": np.array([1, 1, 0, 2], np.int64)},
             {"keep_aspect_ratio_policy": "not_larger"}),
            ({"_r": roi0, "_s": roi0, "sizes": np.array([1, 1, 4], np.int64)}, {}),
            ({"_r": roi0, "_s": roi0, "sizes": z4.astype(np.int32)}, {}),
            ({"_r": roi0, "scales": s4}, {"coordinate_transformation_mode": "tf_crop_and_resize"}),
            ({"roi": np.zeros(3, F32), "scales": s4}, crop),  # roi of the wrong length
            ({"roi": np.array([0, 0, 0, np.inf, 1, 1, 1, 1], F32), "scales": s4}, crop),
        ],
        "invalid_model": [
            ({"_r": roi0, "scales": s4}, {"mode": "bicubic"}),
            ({"_r": roi0, "scales": s4}, {"mode": "area"}),
            ({"_r": roi0, "scales": s4}, {"coordinate_transformation_mode": "centre"}),
            ({"_r": roi0, "scales": s4}, {"nearest_mode": "up"}),
            ({"_r": roi0, "scales": s4}, {"keep_aspect_ratio_policy": "fit"}),
            ({"_r": roi0, "scales": s4}, {"antialias": 1}),  # nearest
            ({"_r": roi0, "scales": s4}, {"mode": "cubic", "cubic_coeff_a": "soft"}),
            ({"_r": roi0, "scales": s4}, {"extrapolation_value": "zero"}),
            (sizes2, {"axes": [1, 4]}),
            (sizes2, {"axes": [2, -2]}),
            (sizes2, {"axes": [-5, 0]}),
        ],
    }  # fmt: skip
    for kind, items in cases.items():
        for consts, attrs in items:
            model = one_node("Resize", {"x": x}, consts, **attrs)
            err = kind_of(lambda model=model: ours(model, {"x": x}))
            assert err.kind == kind, (consts, attrs, err)
            assert "the_resize" in str(err) and "Error:" not in str(err), err


def test_upsample_errors_name_the_node_and_their_kind():
    x = np.zeros((1, 1, 2, 2), F32)
    cases = [
        ("invalid_model", {}, {"opset": 7}),  # no scales attribute
        ("invalid_model", {}, {"opset": 7, "scales": [1.0, 2.0]}),
        ("invalid_model", {}, {"opset": 7, "scales": [1.0, 1.0, 0.5, 1.0]}),
        ("invalid_model", {"s": np.ones(4, F32)}, {"opset": 9, "mode": "cubic"}),
        ("invalid_input", {"s": np.ones(3, F32)}, {"opset": 9}),
        ("invalid_input", {"s": np.array([1, 1, np.inf, 1], F32)}, {"opset": 9}),
        ("invalid_input", {"s": np.array([1, 1, np.nan, 1], F32)}, {"opset": 9}),
    ]
    for kind, consts, attrs in cases:
        model = one_node("Upsample", {"x": x}, consts, **attrs)
        err = kind_of(lambda model=model: ours(model, {"x": x}))
        assert err.kind == kind, (consts, attrs, err)
        assert "the_upsample" in str(err) and "Error:" not in str(err), err


# -- exact mode ---------------------------------------------------------------------------------


def spec_linear_1d(x: np.ndarray, axis: int, out_len: int, scale: float) -> np.ndarray:
    """half_pixel linear along one axis in float32: acc = w0 * x[i0]; acc = acc + w1 * x[i1],
    the weights computed in float64 from the spec's formula and rounded once."""
    n = x.shape[axis]
    y = np.arange(out_len, dtype=np.float64)
    xo = (y + 0.5) / scale - 0.5
    left = np.ceil(xo) - 1
    ratio = xo - left
    i0 = np.clip(left, 0, n - 1).astype(int)
    i1 = np.clip(left + 1, 0, n - 1).astype(int)
    shape = [1] * x.ndim
    shape[axis] = out_len
    w0 = (1 - ratio).astype(x.dtype).reshape(shape)
    w1 = ratio.astype(x.dtype).reshape(shape)
    acc = np.multiply(np.take(x, i0, axis=axis), w0)
    return np.add(acc, np.multiply(np.take(x, i1, axis=axis), w1))


def test_exact_linear_is_the_canonical_order(monkeypatch):
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 2, 6, 5)).astype(F32)
    model = resize_model(x, {"mode": "linear"}, scales=[1, 1, 1.5, 2])
    got = ours(model, {"x": x}, mode="exact")
    # the plan's order: the last axis (gathered element by element) where it is smaller
    want = spec_linear_1d(spec_linear_1d(x, 3, 10, 2.0), 2, 9, 1.5)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    np.testing.assert_array_equal(got, ours(model, {"x": x}, mode="exact", threads=2))
    monkeypatch.setattr(resize_module, "FUSE_LIMIT", 0)  # tap by tap instead of all at once
    again = ours(model, {"x": x}, mode="exact")
    np.testing.assert_array_equal(again.view(np.uint32), want.view(np.uint32))


def test_exact_mode_rewrites_nan_and_refuses_complex():
    x = np.full((1, 1, 2, 2), 1.0, F32)
    x.view(np.uint32)[0, 0, 0, 0] = 0x7FC00001  # a NaN with a payload
    model = resize_model(x, {"mode": "cubic"}, scales=[1, 1, 2, 2])
    got = ours(model, {"x": x}, mode="exact")
    bits = got.view(np.uint32)[np.isnan(got)]
    assert bits.size and (bits == 0x7FC00000).all()
    xc = np.ones((1, 1, 2, 2), np.complex64)
    model = resize_model(xc, {"mode": "linear"}, scales=[1, 1, 2, 2])
    assert_close(ours(model, {"x": xc}), np.ones((1, 1, 4, 4), np.complex64))
    err = kind_of(lambda: ours(model, {"x": xc}, mode="exact"))
    assert err.kind == "exact_mode_unavailable"


# -- GridSample ---------------------------------------------------------------------------------


def grid_model(x, grid, opset=20, **attrs):
    return one_node("GridSample", {"x": x, "grid": grid}, opset=opset, **attrs)


def random_grid(rng, n, spatial_out, r, ties=False):
    g = (rng.random((n, *spatial_out, r)) * 3.4 - 1.7).astype(F32)
    return np.round(g * 4) / 4 if ties else g


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_gridsample_2d_matches_the_reference(mode, padding, align):
    rng = np.random.default_rng(10)
    x = rng.standard_normal((2, 2, 3, 4)).astype(F32)
    grid = random_grid(rng, 2, (3, 2), 2, ties=mode == "nearest")
    model = grid_model(x, grid, mode=mode, padding_mode=padding, align_corners=align)
    got = ours(model, {"x": x, "grid": grid})
    if mode == "cubic" and padding == "border":  # torch and onnxruntime clamp each tap
        pytest.importorskip("onnxruntime")
        want = ort_session(model).run(None, {"x": x, "grid": grid})[0]
    else:
        want = reference(model, {"x": x, "grid": grid})
    assert_close(got, want)


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("rank", [1, 3])
def test_gridsample_nd_matches_the_reference(mode, rank):
    rng = np.random.default_rng(11 + rank)
    spatial = [3, 2, 4][:rank]
    x = rng.standard_normal((1, 2, *spatial)).astype(np.float64)
    grid = random_grid(rng, 1, [2, 3, 2][:rank], rank).astype(np.float64)
    for padding in ("zeros", "reflection"):
        model = grid_model(x, grid, mode=mode, padding_mode=padding, opset=22)
        assert_close(ours(model, {"x": x, "grid": grid}), reference(model, {"x": x, "grid": grid}))


def test_gridsample_16_names_and_types():
    rng = np.random.default_rng(12)
    x = (rng.random((1, 2, 4, 3)) * 200).astype(np.uint8)
    grid = random_grid(rng, 1, (3, 3), 2)
    for old, new in [("bilinear", "linear"), ("bicubic", "cubic"), ("nearest", "nearest")]:
        a = ours(grid_model(x, grid, opset=16, mode=old), {"x": x, "grid": grid})
        b = ours(grid_model(x, grid, opset=20, mode=new), {"x": x, "grid": grid})
        np.testing.assert_array_equal(a, b)
    xf = x.astype(np.float64)
    want = ours(grid_model(xf, grid, mode="linear"), {"x": xf, "grid": grid})
    np.testing.assert_array_equal(a.dtype, np.uint8)
    got = ours(grid_model(x, grid, mode="linear"), {"x": x, "grid": grid})
    np.testing.assert_array_equal(got, np.clip(np.rint(want), 0, 255).astype(np.uint8))
    b = rng.random((1, 1, 3, 3)) < 0.5  # booleans: nearest, zeros outside
    g = np.array([[[[-1.0, -1.0], [5.0, 5.0]]]], F32)
    np.testing.assert_array_equal(
        ours(grid_model(b, g, mode="nearest", align_corners=1), {"x": b, "grid": g}),
        [[[[b[0, 0, 0, 0], False]]]],
    )


def test_gridsample_strings_read_empty_outside():
    x = np.array([[[["a", "b"], ["c", "d"]]]], dtype=object)
    g = np.array([[[[-1.0, -1.0], [1.0, 1.0], [3.0, 0.0]]]], F32)
    model = grid_model(x, g, mode="nearest", align_corners=1)
    np.testing.assert_array_equal(ours(model, {"x": x, "grid": g}), [[[["a", "d", ""]]]])


def test_gridsample_errors():
    x, g = np.zeros((1, 1, 3, 3), F32), np.zeros((1, 2, 2, 2), F32)
    cases = [
        ("invalid_input", x[0], g, {}, 20),  # X rank 3 with a 2-d grid
        ("invalid_input", x, g[..., :1], {}, 20),  # the last dim is not the rank
        ("invalid_input", x, g[0], {}, 20),  # the grid's rank
        ("invalid_input", x, np.zeros((2, 2, 2, 2), F32), {}, 20),
        ("invalid_input", x, np.zeros((1, 2, 2, 2), np.int64), {}, 20),
        ("invalid_input", np.zeros((1, 1, 0, 3), F32), g, {}, 20),  # nothing to sample
        ("invalid_input", np.zeros((1, 1, 2, 2, 2), F32), np.zeros((1, 1, 1, 1, 3), F32), {}, 16),
        ("invalid_model", x, g, {"mode": "bicubic"}, 20),
        ("invalid_model", x, g, {"mode": "cubic"}, 16),
        ("invalid_model", x, g, {"padding_mode": "wrap"}, 20),
        ("invalid_model", x, g, {"align_corners": "yes"}, 20),
    ]
    for kind, xx, gg, attrs, opset in cases:
        model = grid_model(xx, gg, opset=opset, **attrs)
        err = kind_of(lambda model=model, xx=xx, gg=gg: ours(model, {"x": xx, "grid": gg}))
        assert err.kind == kind and "the_gridsample" in str(err), (attrs, err)
        assert "Error:" not in str(err), err


def spec_gridsample_linear_zeros(x: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """grid.py's exact-mode order for 2-D linear sampling, zeros padding, align_corners 0, in
    float32: per axis c = ((g + 1) * L - 1) / 2 clamped to [-2, L], t = c - floor(c), weights
    (1 - t, t); the taps in row-major order (y outer), w = wy * wx, and acc = w0 * v0;
    acc = acc + w1 * v1; ...  (a tap outside reads 0); NaN canonical."""
    n, c, h, w = x.shape
    pad = np.zeros((n, c, h + 4, w + 4), F32)
    pad[:, :, 2 : h + 2, 2 : w + 2] = x
    one, two = F32(1), F32(2)
    taps = []
    for g, length in ((grid[..., 1], h), (grid[..., 0], w)):  # y, then x
        co = (((g + one) * F32(length)) - one) / two
        co = np.fmin(np.fmax(co, F32(-2)), F32(length))
        x0 = np.floor(co)
        t = co - x0
        taps.append((x0.astype(np.intp) + 2, (one - t, t)))
    (y0, wy), (x0, wx) = taps
    batch = np.arange(n)[:, None, None]
    acc = None
    for jy in (0, 1):
        for jx in (0, 1):
            v = pad[batch, :, y0 + jy, x0 + jx]  # (n, ho, wo, c)
            term = np.moveaxis(v, -1, 1) * (wy[jy] * wx[jx])[:, None]
            acc = term if acc is None else acc + term
    acc[np.isnan(acc)] = np.float32(np.nan)
    return acc


def test_gridsample_exact_is_the_canonical_order(monkeypatch):
    rng = np.random.default_rng(13)
    x = rng.standard_normal((2, 3, 5, 6)).astype(F32)
    x.view(np.uint32)[0, 1, 2, 3] = 0x7FC0ABCD  # a NaN with a payload
    grid = random_grid(rng, 2, (4, 7), 2)
    feeds = {"x": x, "grid": grid}
    model = grid_model(x, grid, mode="linear")
    want = spec_gridsample_linear_zeros(x, grid).view(np.uint32)
    np.testing.assert_array_equal(ours(model, feeds, mode="exact").view(np.uint32), want)
    monkeypatch.setattr(grid_module, "BLOCK_WORK", 16)  # a block per image and channel
    two = graphrt.Session(model, mode="exact", intra_op_threads=2)
    for _ in range(5):
        np.testing.assert_array_equal(two.run(None, feeds)[0].view(np.uint32), want)


def test_gridsample_exact_mode_and_threads():
    rng = np.random.default_rng(13)
    x = rng.standard_normal((2, 3, 5, 6)).astype(F32)
    grid = random_grid(rng, 2, (4, 7), 2)
    for mode in ("linear", "cubic"):
        model = grid_model(x, grid, mode=mode)
        feeds = {"x": x, "grid": grid}
        fast = ours(model, feeds)
        exact = ours(model, feeds, mode="exact")
        np.testing.assert_array_equal(exact, fast)
        np.testing.assert_array_equal(exact, ours(model, feeds, mode="exact", threads=2))


# -- AffineGrid ---------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [[2, 3, 4, 5], [1, 2, 3, 4, 5], [2, 1, 2, 1]])
@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid_matches_the_reference(size, align):
    rng = np.random.default_rng(14)
    r = len(size) - 2
    theta = rng.standard_normal((size[0], r, r + 1)).astype(F32)
    model = one_node(
        "AffineGrid",
        {"theta": theta},
        {"size": np.array(size, np.int64)},
        opset=20,
        align_corners=align,
    )
    got = ours(model, {"theta": theta})  # a batched matmul
    exact = ours(model, {"theta": theta}, mode="exact")  # float64, the canonical order
    if align and 1 in size[2:]:
        pytest.skip("one position with align_corners: the centre (below)")
    want = reference(model, {"theta": theta})
    assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert_close(exact, want, rtol=1e-6, atol=1e-7)


def test_affine_grid_single_position_is_the_centre():
    """torch's affine_grid puts a lone position at 0 (the reference computes -1,
    onnxruntime +1)."""
    theta = np.array([[[2.0, 0.0, 0.5], [0.0, 3.0, 0.25]]], F32)
    model = one_node(
        "AffineGrid",
        {"theta": theta},
        {"size": np.array([1, 1, 1, 3], np.int64)},
        opset=20,
        align_corners=1,
    )
    got = ours(model, {"theta": theta})
    np.testing.assert_allclose(got[0, 0], [[-1.5, 0.25], [0.5, 0.25], [2.5, 0.25]])
    theta64 = theta.astype(np.float64)
    model = one_node(
        "AffineGrid", {"theta": theta64}, {"size": np.array([1, 1, 1, 3], np.int64)}, opset=20
    )
    assert ours(model, {"theta": theta64}).dtype == np.float64


def test_affine_grid_errors():
    theta = np.zeros((2, 2, 3), F32)
    cases = [
        (theta, np.array([2, 1, 3], np.int64), {}),  # size of the wrong length
        (theta, np.array([3, 1, 2, 2], np.int64), {}),  # theta's batch
        (theta, np.array([2, 1, 2, 2, 2], np.int64), {}),  # theta (N, 2, 3) with 3-d size
        (np.zeros((2, 3, 3), F32), np.array([2, 1, 2, 2], np.int64), {}),
        (np.zeros((2, 6), F32), np.array([2, 1, 2, 2], np.int64), {}),
        (theta, np.array([2, 1, -2, 2], np.int64), {}),
        (theta, np.array([2, 1, 2, 2], np.int32), {}),
        (theta, np.array([[2, 1], [2, 2]], np.int64), {}),
        (theta.astype(np.int64), np.array([2, 1, 2, 2], np.int64), {}),
    ]
    for th, size, attrs in cases + [
        (theta, np.array([2, 1, 2, 2], np.int64), {"align_corners": 0.5})
    ]:
        model = one_node("AffineGrid", {"theta": th}, {"size": size}, opset=20, **attrs)
        err = kind_of(lambda model=model, th=th: ours(model, {"theta": th}))
        want = "invalid_model" if attrs else "invalid_input"
        assert err.kind == want and "the_affinegrid" in str(err), (th.shape, size, err)
        assert "Error:" not in str(err), err


def test_affine_grid_exact_is_the_float64_formula_with_canonical_nan():
    """out_j = ((t_j0 * x + t_j1 * y) + t_j2 * z) + t_j3 in float64, rounded once; a NaN
    theta (any payload) gives the canonical NaN."""
    rng = np.random.default_rng(21)
    theta = rng.standard_normal((2, 3, 4)).astype(F32)
    theta.view(np.uint32)[1, 2, 0] = 0x7FC00ABC
    size = [2, 1, 3, 4, 5]
    model = one_node("AffineGrid", {"theta": theta}, {"size": np.array(size, np.int64)}, opset=20)
    got = ours(model, {"theta": theta}, mode="exact")
    t = theta.astype(np.float64)
    axes = [(2 * np.arange(n) + 1) / n - 1 for n in size[2:]]  # d, h, w
    z, y, x = np.meshgrid(*axes, indexing="ij")
    want = np.empty((2, 3, 4, 5, 3))
    for n in range(2):
        for j in range(3):
            acc = t[n, j, 0] * x
            acc = acc + t[n, j, 1] * y
            acc = acc + t[n, j, 2] * z
            want[n, ..., j] = acc + t[n, j, 3]
    want = want.astype(F32)
    want[np.isnan(want)] = np.float32(np.nan)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    nan = got.view(np.uint32)[np.isnan(got)]
    assert nan.size and (nan == 0x7FC00000).all()


# -- steady state and threads ------------------------------------------------------------------


def _static_cases() -> dict:
    """name -> (model, feeds, exact?): static plans of every kernel path."""
    rng = np.random.default_rng(30)
    x = rng.standard_normal((2, 3, 17, 19)).astype(F32)
    grid = random_grid(rng, 2, (9, 11), 2)
    cases = {}
    for mode in MODES:
        for scales in ([1, 1, 2, 2], [1, 1, 1.7, 0.6]):
            model = resize_model(x, {"mode": mode}, scales=scales)
            cases[f"resize {mode} {scales[2:]}"] = (model, {"x": x}, True)
    crop = {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize"}
    more = {
        "resize antialias": resize_model(
            x, {"mode": "cubic", "antialias": 1}, scales=[1, 1, 0.4, 0.45]
        ),
        "resize tf_crop_and_resize": resize_model(
            x, crop, sizes=[2, 3, 7, 9], roi=[0, 0, -0.1, 0.2, 1, 1, 0.9, 1.3]
        ),
        "resize nearest flat gather": resize_model(x, {"mode": "nearest"}, scales=[1.5, 1, 1, 1.3]),
        "upsample": one_node("Upsample", {"x": x}, {"s": np.array([1, 1, 2, 3], F32)}, opset=9),
    }
    cases.update((k, (m, {"x": x}, True)) for k, m in more.items())
    xu = (x * 40).astype(np.uint8)
    model = resize_model(xu, {"mode": "cubic"}, scales=[1, 1, 1.5, 1.5])
    cases["resize uint8 cubic"] = (model, {"x": xu}, True)
    for mode in ("linear", "nearest", "cubic"):
        for padding in ("zeros", "border", "reflection"):
            model = grid_model(x, grid, mode=mode, padding_mode=padding)
            cases[f"gridsample {mode} {padding}"] = (model, {"x": x, "grid": grid}, True)
    x3 = rng.standard_normal((1, 2, 4, 5, 3)).astype(F32)
    g3 = random_grid(rng, 1, (3, 2, 4), 3)
    cases["gridsample 3-d"] = (grid_model(x3, g3, opset=22), {"x": x3, "grid": g3}, True)
    for size in ([2, 1, 5, 6], [2, 1, 3, 4, 5]):
        theta = rng.standard_normal((2, len(size) - 2, len(size) - 1)).astype(F32)
        sizes = {"size": np.array(size, np.int64)}
        model = one_node("AffineGrid", {"theta": theta}, sizes, opset=20)
        cases[f"affinegrid {len(size) - 2}-d"] = (model, {"theta": theta}, True)
    return cases


STATIC = _static_cases()


@pytest.mark.parametrize("name", sorted(STATIC))
def test_steady_state_allocates_no_array_data(name):
    from tests.test_alloc import assert_no_numpy_allocation

    model, feeds, exact = STATIC[name]
    for mode in ("fast", "exact") if exact else ("fast",):
        sess = graphrt.Session(model, intra_op_threads=1, mode=mode)
        out = {"y": np.empty_like(sess.run(None, feeds)[0])}
        for _ in range(2):
            sess.run(None, feeds, out=out)
        assert sess.cached_plans[0].static
        assert_no_numpy_allocation(lambda s=sess, o=out: s.run(None, feeds, out=o))


@pytest.mark.parametrize("name", sorted(STATIC))
def test_two_threads_and_concurrent_runs_give_the_bits_of_one_thread(name, monkeypatch):
    """Resize and GridSample split their work in blocks for the intra-op threads, each block
    with its own scratch (a block of another step never shares one); tiny blocks make many.
    Two threads, and four Python threads running one session at once, give one thread's
    bits, in both modes."""
    monkeypatch.setattr(resize_module, "BLOCK_ELEMENTS", 64)
    monkeypatch.setattr(grid_module, "BLOCK_WORK", 16)
    model, feeds, exact = STATIC[name]
    for mode in ("fast", "exact") if exact else ("fast",):
        want = graphrt.Session(model, intra_op_threads=1, mode=mode).run(None, feeds)[0]
        two = graphrt.Session(model, intra_op_threads=2, mode=mode)
        for _ in range(10):
            np.testing.assert_array_equal(bits(two.run(None, feeds)[0]), bits(want))
        assert concurrent_mismatches(two, feeds, want, runs=5) == 0, mode


# -- a random model against onnxruntime ---------------------------------------------------------


def test_random_model_matches_onnxruntime():
    """Conv -> Resize (linear, scales) -> AffineGrid + GridSample -> Resize (cubic, sizes)
    -> Resize (nearest, 2x) with random weights."""
    pytest.importorskip("onnxruntime")
    if onnxruntime_limits()[1] < 20:
        pytest.skip("the installed onnxruntime cannot load opset 20 (AffineGrid)")
    rng = np.random.default_rng(15)
    w = (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(F32)
    theta = np.array([[[0.9, 0.1, 0.05], [-0.1, 0.95, -0.02]]], F32)
    t = helper.make_tensor
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(theta, "theta"),
        t("s1", TensorProto.FLOAT, [4], [1, 1, 1.5, 1.5]),
        t("size", TensorProto.INT64, [4], [1, 4, 20, 22]),
        t("z2", TensorProto.INT64, [4], [1, 4, 13, 17]),
        t("s3", TensorProto.FLOAT, [4], [1, 1, 2, 2]),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Resize", ["c", "", "s1"], ["r1"], mode="linear"),
        helper.make_node("AffineGrid", ["theta", "size"], ["grid"]),
        helper.make_node("GridSample", ["r1", "grid"], ["gs"], mode="linear"),
        helper.make_node("Resize", ["gs", "", "", "z2"], ["r2"], mode="cubic"),
        helper.make_node(
            "Resize",
            ["r2", "", "s3"],
            ["y"],
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        ),
    ]
    x = rng.standard_normal((1, 3, 12, 12)).astype(F32)
    graph = helper.make_graph(
        nodes,
        "g",
        [_info("x", x)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    want = ort_session(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(ours(model, {"x": x}), want, rtol=1e-4, atol=1e-5)
