"""Native AveragePool (fast mode): values against onnxruntime over a grid of window geometries on
every ISA, the same bits at any thread count, the native kernel actually bound by sessions, and
the fallbacks to ops-basic (exact mode, float64, 1-D pooling)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper

import graphrt
from tests._models import make_model, ort_session, tensor
from tests._versions import onnxruntime_release
from tests.simd._simd import ALL_PATHS, bits, path_or_skip, recording, simd

_native = simd._native  # _simd skips the module when the plugin is not installed
simd_pool = pytest.importorskip("graphrt_ops_simd.pool")
F32 = np.float32
FAST_PATHS = ("avx2", "avx512")
TOL = dict(rtol=1e-6, atol=1e-6)


def _model(shape, elem=TensorProto.FLOAT, **attrs):
    node = helper.make_node("AveragePool", ["x"], ["y"], **attrs)
    # opset 19: AveragePool's dilations
    return make_model([node], [tensor("x", elem, list(shape))], [tensor("y", elem)], opset=19)


def _ort(x, **attrs):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3  # its ceil_mode shape warnings
    elem = TensorProto.DOUBLE if x.dtype == np.float64 else TensorProto.FLOAT
    model = _model(x.shape, elem, **attrs)
    return ort_session(model, options).run(None, {"x": x})[0]


def _geometries(count: int, seed: int):
    """Window geometries with kernels 1..5, strides 1..3, dilations 1..2, asymmetric pads,
    ceil_mode and count_include_pad, over odd and even extents (x big enough for one window)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        k = [int(rng.integers(1, 6)), int(rng.integers(1, 6))]
        s = [int(rng.integers(1, 4)), int(rng.integers(1, 4))]
        d = [int(rng.integers(1, 3)), int(rng.integers(1, 3))]
        pads = [int(rng.integers(0, k[a])) for a in (0, 1)] * 2
        pads[2:] = [int(rng.integers(0, k[a])) for a in (0, 1)]
        size = [int(rng.integers((k[a] - 1) * d[a] + 1, 24)) for a in (0, 1)]
        shape = (int(rng.integers(1, 3)), int(rng.integers(1, 6)), *size)
        attrs = dict(
            kernel_shape=k, strides=s, dilations=d, pads=pads,
            ceil_mode=int(rng.integers(0, 2)), count_include_pad=int(rng.integers(0, 2)),
        )  # fmt: skip
        out.append((shape, attrs))
    return out


def _oracle_cases(cases):
    """The geometries onnxruntime serves as the oracle of: every one from onnxruntime 1.21
    (tox -e numpy1 pins an older release, whose ceil_mode windows differ from the ONNX rule
    beyond the shape difference handled below: it is no oracle of those)."""
    if onnxruntime_release() >= (1, 21):
        return cases
    return [(shape, attrs) for shape, attrs in cases if not attrs.get("ceil_mode", 0)]


GRID = _geometries(120, 7)
# the CNN shapes the native kernel's flat runs target (inception_v2, shufflenet, densenet)
COMMON = [
    ((1, 19, 28, 28), dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
    ((1, 9, 7, 7), dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
    ((1, 5, 7, 7), dict(kernel_shape=[7, 7])),
    ((1, 13, 14, 14), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((2, 3, 57, 31), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 3, 20, 45), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    (
        (1, 2, 9, 66),
        dict(kernel_shape=[3, 3], strides=[2, 2], count_include_pad=1, pads=[1, 1, 1, 1]),
    ),
    ((1, 17, 14, 14), dict(kernel_shape=[2, 2], strides=[2, 2])),
    ((1, 3, 56, 56), dict(kernel_shape=[2, 2], strides=[2, 2])),
    ((1, 3, 15, 9), dict(kernel_shape=[2, 2], strides=[2, 2], count_include_pad=1)),
    ((1, 2, 1, 40), dict(kernel_shape=[1, 3], strides=[1, 1], pads=[0, 1, 0, 1])),
    ((1, 2, 5, 5), dict(kernel_shape=[3, 3], pads=[2, 2, 2, 2], count_include_pad=1)),
    # one window over the whole plane (planes_whole): up to avx2's and avx512's widths
    ((2, 3, 5, 3), dict(kernel_shape=[5, 3])),
    ((1, 4, 4, 8), dict(kernel_shape=[4, 8])),
    ((1, 3, 3, 16), dict(kernel_shape=[3, 16], strides=[2, 2])),
    (
        (1, 3, 5, 5),
        dict(kernel_shape=[5, 5], strides=[2, 2], pads=[0, 0, 1, 1], count_include_pad=1),
    ),
]


def _attr_pads(attrs):
    return attrs.get("pads", [0, 0, 0, 0])


@pytest.mark.parametrize("isa", ALL_PATHS)
def test_native_call_matches_onnxruntime(isa):
    """The bound call itself on every ISA (scalar too: tests only), y shaped as onnxruntime's
    output (its ceil_mode rule drops a last window that starts in the end padding), planes in
    two ranges."""
    path_or_skip(isa)
    rng = np.random.default_rng(3)
    for shape, attrs in _oracle_cases(GRID + COMMON):
        x = rng.standard_normal(shape).astype(F32)
        want = _ort(x, **attrs)
        y = np.full(want.shape, np.nan, F32)
        args = [
            attrs["kernel_shape"], attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1]),
            _attr_pads(attrs), bool(attrs.get("count_include_pad", 0)), isa,
        ]  # fmt: skip
        planes = shape[0] * shape[1]
        _native.AvgPoolCall(x, y, *args, 0, planes // 2, 1)()
        _native.AvgPoolCall(x, y, *args, planes // 2, -1, 1)()
        np.testing.assert_allclose(y, want, **TOL, err_msg=f"{shape} {attrs}")


def test_same_bits_on_every_isa():
    """Every lane adds its taps in ascending order and then multiplies once, on every ISA (the
    avx512 path hands rows narrower than 16 floats to the avx2 kernel on that promise), with
    x's rows strided (a column slice of a wider array) and NaN and inf in the windows."""
    rng = np.random.default_rng(9)
    for shape, attrs in _oracle_cases(GRID[:40] + COMMON):
        wide = rng.standard_normal((*shape[:3], shape[3] + 5)).astype(F32)
        wide.flat[rng.integers(0, wide.size, 2)] = [np.nan, np.inf]
        x = wide[..., 2 : 2 + shape[3]]
        args = [
            attrs["kernel_shape"], attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1]),
            _attr_pads(attrs), bool(attrs.get("count_include_pad", 0)),
        ]  # fmt: skip
        want = _ort(np.ascontiguousarray(x), **attrs)
        results = []
        for isa in simd.available_isas():
            y = np.empty(want.shape, F32)
            _native.AvgPoolCall(x, y, *args, isa)()
            results.append(bits(y))
        for got in results[1:]:
            np.testing.assert_array_equal(got, results[0], err_msg=f"{shape} {attrs}")
        np.testing.assert_allclose(y, want, **TOL, err_msg=f"{shape} {attrs}")


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("shape", [(1, 3, 7, 7), (2, 2, 14, 14), (1, 2, 28, 28), (1, 2, 5, 4)])
def test_flat_planes_keep_the_row_kernels_bits(shape, count_include_pad):
    """3 x 3 windows at stride 1 with pads of 1: contiguous planes take the flat passes, a column
    slice of a wider array the row-at-a-time ones, with the same bits (NaN and infinities at the
    edges included), on every ISA and split."""
    rng = np.random.default_rng(sum(shape) + count_include_pad)
    h, w = shape[2:]
    wide = rng.standard_normal((*shape[:2], h, w + 3)).astype(F32)
    wide[0, 0, 0, 1] = np.nan
    wide[-1, -1, h - 1, w] = np.inf
    wide[0, -1, h // 2, 1] = -np.inf
    rows = wide[..., 1 : 1 + w]
    flat = np.ascontiguousarray(rows)
    attrs = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=count_include_pad)
    want = _ort(flat, **attrs)
    args = [[3, 3], [1, 1], [1, 1], [1, 1, 1, 1], bool(count_include_pad)]
    first = None
    for isa in simd.available_isas():
        for threads in (1, 2):
            for x in (flat, rows):
                y = np.empty(want.shape, F32)
                _native.AvgPoolCall(x, y, *args, isa, 0, -1, threads)()
                np.testing.assert_allclose(y, want, **TOL)
                first = bits(y) if first is None else first
                np.testing.assert_array_equal(bits(y), first, err_msg=f"{isa}, {threads} threads")


@pytest.mark.parametrize("hw", [(7, 7), (5, 3), (4, 8), (3, 16), (1, 1), (9, 2)])
def test_whole_plane_windows_add_in_the_two_passes_order(hw):
    """A window over the whole plane adds each column top to bottom, then the column sums left
    to right, then multiplies by 1 / count rounded once: bit for bit that order in numpy, on
    every ISA and split, with x's rows strided too (values of mixed magnitudes and signed zeros,
    where another order rounds differently)."""
    h, w = hw
    rng = np.random.default_rng(h * 31 + w)
    scale = rng.choice(np.array([1e-3, 1.0, 1e3, 1e6], F32), size=(3, 7, h, w + 2))
    wide = (rng.standard_normal((3, 7, h, w + 2)) * scale).astype(F32)
    wide[0, 0] = -0.0
    x = wide[..., 1 : 1 + w]
    cols = x[:, :, 0, :].copy()
    for r in range(1, h):
        cols = cols + x[:, :, r, :]
    sums = cols[:, :, 0].copy()
    for c in range(1, w):
        sums = sums + cols[:, :, c]
    want = (sums * (np.float32(1) / np.float32(h * w)))[..., None, None]
    for isa in simd.available_isas():
        for threads in (1, 2):
            for xs in (x, np.ascontiguousarray(x)):
                y = np.empty(want.shape, F32)
                _native.AvgPoolCall(
                    xs, y, [h, w], [1, 1], [1, 1], [0] * 4, False, isa, 0, -1, threads
                )()
                np.testing.assert_array_equal(
                    bits(y), bits(want), err_msg=f"{isa}, {threads} threads"
                )


@pytest.mark.parametrize("path", FAST_PATHS)
def test_sessions_match_onnxruntime(path):
    """Sessions on the native path against onnxruntime; where onnxruntime's ceil_mode output is
    a window shorter than ONNX's shape rule (which graphrt follows), against ops-basic."""
    path_or_skip(path)
    rng = np.random.default_rng(4)
    for shape, attrs in _oracle_cases(GRID[:60] + COMMON):
        x = rng.standard_normal(shape).astype(F32)
        got = graphrt.Session(_model(shape, **attrs), kernel_path=path).run(None, {"x": x})[0]
        want = _ort(x, **attrs)
        if want.shape != got.shape:
            numpy = graphrt.Session(_model(shape, **attrs), kernel_path="numpy")
            want = numpy.run(None, {"x": x})[0]
        np.testing.assert_allclose(got, want, **TOL, err_msg=f"{shape} {attrs}")


@pytest.mark.parametrize("path", FAST_PATHS)
def test_auto_pad_and_special_values(path):
    """auto_pad (the pads ops-basic resolves), and inf/NaN: a window with NaN is NaN, one
    with +inf and -inf too, one with +inf only is +inf."""
    path_or_skip(path)
    x = np.random.default_rng(5).standard_normal((1, 3, 11, 10)).astype(F32)
    x[0, 0, 2, 3] = np.nan
    x[0, 1, 5, 5] = np.inf
    x[0, 2, 4, 4], x[0, 2, 4, 5] = np.inf, -np.inf
    for auto_pad in ("SAME_UPPER", "SAME_LOWER", "VALID"):
        attrs = dict(kernel_shape=[3, 4], strides=[2, 1], auto_pad=auto_pad)
        got = graphrt.Session(_model(x.shape, **attrs), kernel_path=path).run(None, {"x": x})[0]
        np.testing.assert_allclose(got, _ort(x, **attrs), **TOL, err_msg=auto_pad)


def _counting(monkeypatch):
    calls: list = []
    monkeypatch.setattr(simd_pool._native, "AvgPoolCall", recording(_native.AvgPoolCall, calls))
    return calls


@pytest.mark.parametrize("path", FAST_PATHS)
def test_sessions_bind_the_native_kernel(path, monkeypatch):
    path_or_skip(path)
    calls = _counting(monkeypatch)
    shape, attrs = COMMON[0]
    x = np.random.default_rng(6).standard_normal(shape).astype(F32)
    sess = graphrt.Session(_model(shape, **attrs), kernel_path=path)
    got = sess.run(None, {"x": x})[0]
    assert len(calls) == 1 and calls[0][-1] >= 1
    np.testing.assert_allclose(got, _ort(x, **attrs), **TOL)
    # a strided (non-contiguous) input is made contiguous once per run, natively still
    x_wide = np.repeat(x, 2, axis=-1)[..., ::2]
    assert not x_wide.flags.c_contiguous
    np.testing.assert_allclose(sess.run(None, {"x": x_wide})[0], got, rtol=0, atol=0)


@pytest.mark.parametrize("threads", [2, 4])
@pytest.mark.parametrize("path", FAST_PATHS)
def test_same_bits_at_any_thread_count(path, threads, monkeypatch):
    """A pool large enough to split its planes over the plugin's threads: each plane is one
    thread's, summed in one order, so the bits are those of one thread."""
    path_or_skip(path)
    calls = _counting(monkeypatch)
    shape = (2, 37, 30, 29)
    attrs = dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    x = np.random.default_rng(7).standard_normal(shape).astype(F32)
    model = _model(shape, **attrs)
    one = graphrt.Session(model, kernel_path=path, intra_op_threads=1).run(None, {"x": x})[0]
    many = graphrt.Session(model, kernel_path=path, intra_op_threads=threads)
    got = many.run(None, {"x": x})[0]
    assert calls[-1][-1] == threads  # split over the plugin's threads
    np.testing.assert_array_equal(bits(got), bits(one))
    y = np.empty_like(got)
    for t in (1, 2, 4):  # the call itself, any split
        _native.AvgPoolCall(x, y, [3, 3], [1, 1], [1, 1], [1] * 4, False, path, 0, -1, t)()
        np.testing.assert_array_equal(bits(y), bits(one))


@pytest.mark.parametrize(
    "case",
    ["exact", "float64", "1-D"],
)
@pytest.mark.parametrize("path", FAST_PATHS)
def test_fallbacks_to_ops_basic(path, case, monkeypatch):
    """Exact mode (ops-basic's fixed tap order), other types and ranks never bind the native
    kernel, and give ops-basic's values."""
    path_or_skip(path)
    calls = _counting(monkeypatch)
    rng = np.random.default_rng(8)
    mode, attrs = "fast", dict(kernel_shape=[3, 3], strides=[1, 2], pads=[1, 1, 1, 1])
    shape, elem, dtype = (1, 5, 9, 11), TensorProto.FLOAT, F32
    if case == "exact":
        mode = "exact"
    elif case == "float64":
        elem, dtype = TensorProto.DOUBLE, np.float64
    else:
        shape, attrs = (2, 5, 13), dict(kernel_shape=[3], strides=[2], pads=[1, 0])
    model = _model(shape, elem, **attrs)
    x = rng.standard_normal(shape).astype(dtype)
    got = graphrt.Session(model, kernel_path=path, mode=mode).run(None, {"x": x})[0]
    want = graphrt.Session(model, kernel_path="numpy", mode=mode).run(None, {"x": x})[0]
    assert calls == []
    np.testing.assert_array_equal(got, want)
    if case == "1-D":  # (onnxruntime has no float64 AveragePool)
        np.testing.assert_allclose(got, _ort(x, **attrs), **TOL)


def test_refusals():
    x, y = np.ones((1, 2, 5, 5), F32), np.empty((1, 2, 3, 3), F32)
    ok = [(3, 3), (1, 1), (1, 1), (0, 0, 0, 0), False, "scalar"]
    _native.AvgPoolCall(x, y, *ok)()
    np.testing.assert_array_equal(y, np.ones_like(y))
    for i, bad, message in [
        (0, (0, 3), "kernel"),
        (1, (1,), "strides"),
        (3, (0, 0), "pads"),
        (3, (0, -1, 0, 0), "pads"),
        (5, "sse9", "unknown isa"),
    ]:
        args = list(ok)
        args[i] = bad
        with pytest.raises(ValueError, match=message):
            _native.AvgPoolCall(x, y, *args)
    with pytest.raises(ValueError, match="images and channels"):
        _native.AvgPoolCall(x, np.empty((1, 3, 3, 3), F32), *ok)
    with pytest.raises(ValueError, match="C-contiguous"):
        _native.AvgPoolCall(x, np.empty((1, 2, 3, 6), F32)[..., ::2], *ok)
    with pytest.raises(ValueError, match="unit column stride"):
        _native.AvgPoolCall(np.ones((1, 2, 5, 10), F32)[..., ::2], y, *ok)
    with pytest.raises(ValueError, match="plane range"):
        _native.AvgPoolCall(x, y, *ok, 0, 3)
    with pytest.raises(TypeError):
        _native.AvgPoolCall(x.astype(np.float64), y, *ok)
    with pytest.raises(ValueError, match="work buffer"):
        huge = np.empty((1, 1, 1, 1), F32)
        _native.AvgPoolCall(x[:, :1], huge, (1, 1), (1, 1), (1, 1), (0, 1 << 40, 0, 0), True,
                            "scalar")  # fmt: skip


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_counts_by_hand(count_include_pad):
    """A 3x3 window at stride 1 with pads of 1 over a 3x4 plane of ones times its position:
    the corner averages by hand (4 or 9 elements counted)."""
    x = np.arange(12, dtype=F32).reshape(1, 1, 3, 4)
    y = np.empty((1, 1, 3, 4), F32)
    for isa in simd.available_isas():
        _native.AvgPoolCall(x, y, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), bool(count_include_pad),
                            isa)()  # fmt: skip
        corner = (0 + 1 + 4 + 5) / (9 if count_include_pad else 4)
        centre = (0 + 1 + 2 + 4 + 5 + 6 + 8 + 9 + 10) / 9
        np.testing.assert_allclose(y[0, 0, 0, 0], corner, rtol=1e-6)
        np.testing.assert_allclose(y[0, 0, 1, 1], centre, rtol=1e-6)


def test_grid_covers_the_geometries():
    """The grid covers what the brief asks (kept honest if _geometries changes)."""
    kernels = {k for _, a in GRID for k in a["kernel_shape"]}
    strides = {s for _, a in GRID for s in a["strides"]}
    assert kernels == {1, 2, 3, 4, 5} and strides == {1, 2, 3}
    assert any(a["pads"][:2] != a["pads"][2:] for _, a in GRID)
    assert {a["ceil_mode"] for _, a in GRID} == {0, 1}
    assert {a["count_include_pad"] for _, a in GRID} == {0, 1}
    assert any(s[3] % 2 for s, _ in GRID) and any(s[1] % 16 for s, _ in GRID)
    assert list(itertools.chain(*(a["dilations"] for _, a in GRID))).count(2) > 0


def _global_model(shape, elem=TensorProto.FLOAT):
    node = helper.make_node("GlobalAveragePool", ["x"], ["y"])
    return make_model([node], [tensor("x", elem, list(shape))], [tensor("y", elem)])


def _global_plan(sess, x):
    (step,) = sess.plan_for([x]).steps
    return step.prepared


@pytest.mark.parametrize("path", FAST_PATHS)
@pytest.mark.parametrize(
    "shape",
    [
        (1, 1000, 13, 13),
        (2, 1024, 7, 7),
        (1, 3, 1, 1),
        (2, 5, 100),
        (1, 4, 3, 5, 7),
        (1, 70, 64, 64),
    ],
)
def test_global_average_pool_is_native_close_to_float64_and_thread_count_free(path, shape):
    """Fast mode: each plane's mean natively (tails of every length, rank 3 to 5, planes split
    over threads for the large one), within float32 rounding of the float64 mean, the same
    bits on 1 and 2 threads; exact mode keeps ops-basic's in-order sum."""
    path_or_skip(path)
    model = _global_model(shape)
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(F32) + 3
    want = x.astype(np.float64).mean(axis=tuple(range(2, len(shape))), keepdims=True)
    runs = []
    for threads in (1, 2):
        sess = graphrt.Session(model, kernel_path=path, intra_op_threads=threads)
        assert isinstance(_global_plan(sess, x), simd_pool._GlobalPlan)
        runs.append(sess.run(None, {"x": x})[0])
    np.testing.assert_allclose(runs[0], want, rtol=2e-6, atol=0)
    np.testing.assert_array_equal(bits(runs[0]), bits(runs[1]))
    exact = graphrt.Session(model, kernel_path=path, mode="exact")
    assert not isinstance(_global_plan(exact, x), simd_pool._GlobalPlan)


@pytest.mark.parametrize("path", FAST_PATHS)
def test_global_average_pool_views_nan_and_fallbacks(path):
    """A strided X (a transposed view, copied once per call), NaN and infinities kept in their
    planes, and float64 on ops-basic's kernel; the native call's own checks."""
    path_or_skip(path)
    x = np.random.default_rng(3).standard_normal((2, 6, 9, 11)).astype(F32)
    x[0, 1, 2, 3] = np.nan
    x[1, 4, 0, 0] = np.inf
    view = x.transpose(0, 1, 3, 2)
    sess = graphrt.Session(_global_model(view.shape), kernel_path=path)
    got = sess.run(None, {"x": view})[0]
    want = np.ascontiguousarray(view).astype(np.float64).mean(axis=(2, 3), keepdims=True)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)
    assert np.isnan(got[0, 1, 0, 0]) and got[1, 4, 0, 0] == np.inf
    assert np.isfinite(np.delete(got.reshape(-1), [1, 10])).all()
    x64 = x.astype(np.float64)
    sess64 = graphrt.Session(_global_model(x64.shape, TensorProto.DOUBLE), kernel_path=path)
    assert not isinstance(_global_plan(sess64, x64), simd_pool._GlobalPlan)
    np.testing.assert_allclose(
        sess64.run(None, {"x": x64})[0], x64.mean(axis=(2, 3), keepdims=True)
    )
    with pytest.raises(ValueError, match="must hold 12 floats"):
        _native.GlobalAvgPoolCall(x, np.empty((2, 5, 1, 1), F32), path)
    with pytest.raises(ValueError, match="spatial"):
        _native.GlobalAvgPoolCall(np.ones((2, 6), F32), np.empty((2, 6), F32), path)
