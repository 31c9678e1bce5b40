"""Native exp/tanh/sigmoid/erf and exact Relu: the bits of ops-basic's exact functions on every
path, in sessions under every kernel path and thread count, and Python errors for bad
arguments."""

from __future__ import annotations

import types

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import graphrt
from graphrt.kernel import KernelContext
from tests._models import init, make_model, tensor
from tests.simd._simd import ALL_PATHS, ISAS, bits, path_or_skip, simd
from tests.test_exact_math import exact

FUNCTIONS = ("exp", "tanh", "sigmoid", "erf", "relu")
OPS = {"exp": "Exp", "tanh": "Tanh", "sigmoid": "Sigmoid", "erf": "Erf", "relu": "Relu"}


def exact_numpy(fn: str, x: np.ndarray) -> np.ndarray:
    """ops-basic's exact function (the reference the native kernels must reproduce)."""
    x = np.ascontiguousarray(x, np.float32).reshape(-1)
    if fn == "relu":  # docs/exact-mode.md: max(x, 0), + 0 (no -0), NaN canonical
        with np.errstate(invalid="ignore"):
            y = np.maximum(x, np.float32(0)) + np.float32(0)
        y[np.isnan(y)] = np.uint32(0x7FC00000).view(np.float32)
        return y
    return exact(fn, x)


def _f32(*values: float) -> list[int]:
    return [int(v) for v in np.array(values, np.float32).view(np.uint32)]


def edge_values() -> np.ndarray:
    """+-0, +-inf, NaN payloads, subnormals, extremes and the thresholds of every function,
    each with its 8 neighbours on either side."""
    patterns = [
        0x00000000, 0x80000000, 0x7F800000, 0xFF800000,  # +-0, +-inf
        0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FBFFFFF, 0x7FC00001, 0xFFFFFFFF,
        0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00400000,  # subnormals
        0x00800000, 0x80800000, 0x7F7FFFFF, 0xFF7FFFFF,  # smallest normal, largest finite
    ]  # fmt: skip
    thresholds = _f32(
        88.72283, 89.0, -87.33655, -103.97208, -104.0, 104.0,  # exp: overflow, subnormal, +0
        9.010913, 8.66434, 20.0, 10.0, 1e-4, 0.5493,  # tanh: rounds to 1, clamp, small
        16.635532, 0.46875, 3.9192, 4.0, 1.0, 0.0625, 1.0 / 3.0,  # sigmoid, erf intervals
        0.34657359, 0.69314718, 1.4426950,  # ln2/2, ln 2, log2 e
    )  # fmt: skip
    for t in thresholds:
        patterns += [t, t | 0x80000000]
    near = np.array(patterns, np.int64)[:, None] + np.arange(-8, 9)[None, :]
    near = near[(near >= 0) & (near < 1 << 32)]
    return np.unique(near).astype(np.uint32).view(np.float32)


def sweep(step: int, offset: int) -> np.ndarray:
    """Every step-th float32 bit pattern from ``offset``, the edge values appended."""
    grid = (np.arange(offset, 1 << 32, step, dtype=np.uint64)).astype(np.uint32)
    return np.concatenate([grid.view(np.float32), edge_values()])


@pytest.fixture(scope="module")
def inputs() -> np.ndarray:
    # every 2^11-th bit pattern (2 million) from an odd offset, so that every exponent and many
    # mantissas of every binade are hit, plus the edge values
    return sweep(1 << 11, 1013)


@pytest.fixture(scope="module")
def references(inputs) -> dict[str, np.ndarray]:
    return {fn: exact_numpy(fn, inputs) for fn in FUNCTIONS}


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize("fn", FUNCTIONS)
def test_bit_identical_to_exact_math_on_every_path(fn, isa, inputs, references):
    path_or_skip(isa)
    want = references[fn]
    out = np.full_like(inputs, 123.0)
    simd.unary(fn, inputs, out, isa)
    wrong = np.flatnonzero(bits(out) != bits(want))
    assert wrong.size == 0, [
        (hex(int(bits(inputs)[i])), hex(int(bits(want)[i])), hex(int(bits(out)[i])))
        for i in wrong[:5]
    ]


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize("fn", FUNCTIONS)
def test_in_place_ranges_and_tails(fn, isa):
    """Every length 0..40 (vector tails), in place, and element ranges of one array."""
    path_or_skip(isa)
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(300) * 6).astype(np.float32)
    x[7] = np.nan
    want = exact_numpy(fn, x)
    for n in range(41):
        y = x[:n].copy()
        simd.unary(fn, y, y, isa)  # in place
        np.testing.assert_array_equal(bits(y), bits(want[:n]))
    out = np.zeros_like(x)
    for lo, hi in [(0, 5), (5, 37), (37, 38), (38, 38), (38, 300)]:
        simd.unary(fn, x, out, isa, lo, hi)
    np.testing.assert_array_equal(bits(out), bits(want))
    part = np.zeros_like(x)
    simd.unary(fn, x, part, isa, 10, 20)  # only the range is written
    assert not part[:10].any() and not part[20:].any()
    np.testing.assert_array_equal(bits(part[10:20]), bits(want[10:20]))
    x2 = x.reshape(3, 10, 10)  # any C-contiguous shape
    out2 = np.empty((300,), np.float32)
    simd.unary(fn, x2, out2, isa)
    np.testing.assert_array_equal(bits(out2), bits(want))


def test_values_are_close_to_the_true_functions():
    """A cheap sanity check of the reference itself on moderate arguments."""
    import math

    x = np.linspace(-5, 5, 1001, dtype=np.float32)
    out = np.empty_like(x)
    truth = {
        "exp": np.exp(x.astype(np.float64)),
        "tanh": np.tanh(x.astype(np.float64)),
        "sigmoid": 1 / (1 + np.exp(-x.astype(np.float64))),
        "erf": np.array([math.erf(v) for v in x.astype(np.float64)]),
        "relu": np.maximum(x.astype(np.float64), 0),
    }
    for fn in FUNCTIONS:
        simd.unary(fn, x, out, ISAS[-1])
        np.testing.assert_allclose(out, truth[fn], rtol=2e-6, atol=1e-30)


# ---- sessions -------------------------------------------------------------------------------


def _model(op: str, shape: list[int]):
    """x -> op -> op -> Neg -> op: the first call reads the graph input, the later ones
    intermediates, which the planner may compute in place."""
    nodes = [
        helper.make_node(op, ["x"], ["a"]),
        helper.make_node(op, ["a"], ["b"]),
        helper.make_node("Neg", ["b"], ["c"]),
        helper.make_node(op, ["c"], ["y"]),
    ]
    return make_model(nodes, [tensor("x", shape=shape)], [tensor("y", shape=shape)])


def _session_input(n: int) -> np.ndarray:
    rng = np.random.default_rng(9)
    x = (rng.standard_normal(n) * 4).astype(np.float32)
    e = edge_values()
    x[: e.size] = e[: min(e.size, n)]
    return x


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("path", ["numpy", *ALL_PATHS])
def test_exact_sessions_are_bit_identical(path, threads, monkeypatch):
    """Native blocks on every path, the same bits as ops-basic's exact kernels (numpy)."""
    if path != "numpy":
        path_or_skip(path)
    import graphrt_ops_simd.elementwise as elementwise

    calls = []
    real = elementwise._native.unary
    monkeypatch.setattr(elementwise._native, "unary", lambda *a: calls.append(a) or real(*a))
    shape = [3, 70001]  # four native blocks and a tail
    x = _session_input(3 * 70001).reshape(shape)
    for fn, op in OPS.items():
        model = _model(op, shape)
        want = exact_numpy(fn, -exact_numpy(fn, exact_numpy(fn, x)))
        with graphrt.Session(
            model, mode="exact", kernel_path=path, intra_op_threads=threads
        ) as sess:
            assert sess.kernel_path == path
            got = sess.run(None, {"x": x})[0]
        np.testing.assert_array_equal(bits(got).reshape(-1), bits(want), err_msg=op)
    # one native call per node (three per function), its blocks on the plugin's threads
    assert len(calls) == (0 if path == "numpy" else 3 * len(OPS))
    assert all(call[-1] == threads for call in calls)


@pytest.mark.parametrize("path", ALL_PATHS)
def test_environment_variable_selects_the_path(path, monkeypatch):
    path_or_skip(path)
    monkeypatch.setenv("GRAPHRT_KERNEL_PATH", path)
    x = _session_input(1000).reshape(10, 100)
    for fn, op in OPS.items():
        sess = graphrt.Session(_model(op, [10, 100]), mode="exact")
        assert sess.kernel_path == path
        got = sess.run(None, {"x": x})[0]
        want = exact_numpy(fn, -exact_numpy(fn, exact_numpy(fn, x)))
        np.testing.assert_array_equal(bits(got).reshape(-1), bits(want), err_msg=op)


@pytest.mark.parametrize("path", ALL_PATHS)
def test_native_kernel_runs_where_planned(path, monkeypatch):
    """Exact float32: native; fast: native only for FAST_NATIVE; float64: numpy kernel."""
    path_or_skip(path)
    import graphrt_ops_simd.elementwise as unary

    calls: list[str] = []
    real = unary._native.unary

    def counted(fn, *args):
        calls.append(fn)
        return real(fn, *args)

    monkeypatch.setattr(unary._native, "unary", counted)
    x = _session_input(500).reshape(5, 100)
    for fn, op in OPS.items():
        for mode, elem, native in [
            ("exact", TensorProto.FLOAT, True),
            ("fast", TensorProto.FLOAT, fn in unary.FAST_NATIVE[path]),
            ("exact", TensorProto.DOUBLE, False),
            ("fast", TensorProto.DOUBLE, False),
        ]:
            node = helper.make_node(op, ["x"], ["y"])
            model = make_model([node], [tensor("x", elem, [5, 100])], [tensor("y", elem, [5, 100])])
            calls.clear()
            with np.errstate(invalid="ignore"):  # signalling NaN payloads
                feed = x.astype(np.float64) if elem == TensorProto.DOUBLE else x
            got = graphrt.Session(model, mode=mode, kernel_path=path).run(None, {"x": feed})[0]
            want = graphrt.Session(model, mode=mode, kernel_path="numpy").run(None, {"x": feed})
            assert calls == ([fn] if native else []), (op, mode, elem)
            if mode == "exact":
                np.testing.assert_array_equal(got, want[0])
            else:
                np.testing.assert_allclose(got, want[0], rtol=3e-6, atol=1e-37)


# ---- bad arguments --------------------------------------------------------------------------

ERRORS = (TypeError, ValueError)
DTYPES = [np.float32, np.float64, np.float16, np.int32, np.uint8, np.bool_]


@st.composite
def unary_args(draw):
    n = draw(st.integers(0, 50))
    dt_x, dt_o = (
        draw(st.sampled_from(DTYPES)) if draw(st.booleans()) else np.float32 for _ in range(2)
    )
    n_out = n if draw(st.booleans()) else draw(st.integers(0, 50))
    x = np.arange(n, dtype=np.float64).astype(dt_x)
    out = np.zeros(n_out, dt_o)
    arrays = {"x": x, "out": out}
    layout = draw(st.sampled_from(["c", "step", "2d-fortran", "readonly", "alias"]))
    which = draw(st.sampled_from(["x", "out"]))
    a = arrays[which]
    if layout == "step":
        a = np.repeat(a, 2)[::2]
    elif layout == "2d-fortran" and a.size >= 4 and a.size % 2 == 0:
        a = np.asfortranarray(a.reshape(2, -1))
    elif layout == "readonly":
        a = a.copy()
        a.flags.writeable = False
    elif layout == "alias" and x.dtype == out.dtype and x.size >= 2:
        buf = np.zeros(x.size + 1, x.dtype)  # out overlaps x, shifted by one element
        arrays["x"], a, which = buf[:-1], buf[1:], "out"
    arrays[which] = a
    fn = draw(st.sampled_from([*FUNCTIONS, "log", ""]))
    isa = draw(st.sampled_from([*ISAS, "sse9"]))
    rng = (draw(st.integers(-3, 60)), draw(st.integers(-3, 60))) if draw(st.booleans()) else None
    return fn, arrays["x"], arrays["out"], isa, rng


def _valid(fn, x, out, isa, rng) -> bool:
    if fn not in FUNCTIONS or isa not in ISAS:
        return False
    if x.dtype != np.float32 or out.dtype != np.float32 or x.size != out.size:
        return False
    if not (x.flags.c_contiguous and out.flags.c_contiguous and out.flags.writeable):
        return False
    if np.shares_memory(x, out) and x.ctypes.data != out.ctypes.data:
        return False
    if rng is not None:
        lo, hi = rng
        hi = x.size if hi == -1 else hi
        return 0 <= lo <= hi <= x.size
    return True


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(unary_args())
def test_entry_point_validates_everything(case):
    fn, x, out, isa, rng = case
    extra = rng or ()
    if not _valid(fn, x, out, isa, rng):
        before = out.copy()
        with pytest.raises(ERRORS):
            simd.unary(fn, x, out, isa, *extra)
        np.testing.assert_array_equal(out, before)  # nothing written
        return
    simd.unary(fn, x, out, isa, *extra)
    lo, hi = (0, x.size) if rng is None else (rng[0], x.size if rng[1] == -1 else rng[1])
    want = exact_numpy(fn, x.reshape(-1)[lo:hi])
    np.testing.assert_array_equal(bits(out.reshape(-1)[lo:hi]), bits(want))


def test_strided_views_in_sessions_give_the_same_bits():
    """Slice with a step and Transpose before the function (the runtime hands kernels
    contiguous arrays; the kernel copes with strided ones too, tested below)."""
    x = _session_input(1200).reshape(20, 60)
    steps = [init(n, np.array([v], np.int64)) for n, v in zip("sead", (0, 60, 1, 2))]
    for op in OPS.values():
        nodes = [
            helper.make_node("Slice", ["x", "s", "e", "a", "d"], ["h"]),
            helper.make_node("Transpose", ["h"], ["t"], perm=[1, 0]),
            helper.make_node(op, ["t"], ["y"]),
        ]
        model = make_model(
            nodes, [tensor("x", shape=[20, 60])], [tensor("y", shape=[30, 20])], steps
        )
        want = graphrt.Session(model, mode="exact", kernel_path="numpy").run(None, {"x": x})[0]
        got = graphrt.Session(model, mode="exact").run(None, {"x": x})[0]
        np.testing.assert_array_equal(bits(got), bits(want), err_msg=op)


def _context(plan) -> KernelContext:
    """A context of two intra-op threads (the blocks of a large tensor are split over the
    plugin's threads): a pool that is never asked to run anything."""
    return KernelContext(plan, pool=types.SimpleNamespace(threads=2))


@pytest.mark.parametrize("isa", ALL_PATHS)
def test_strided_operands_are_copied_not_misread(isa):
    """A strided input or output (never handed over by today's runtime) still gives the
    right bits, in one block and in several, and in place."""
    path_or_skip(isa)
    from graphrt_ops_simd import elementwise

    for n in (1000, elementwise.BLOCK + 1000):
        plan = elementwise._Plan(n, -(-n // elementwise.BLOCK))
        base = (np.random.default_rng(n).standard_normal(2 * n) * 5).astype(np.float32)
        for fn, op in OPS.items():
            kernel = elementwise.UNARY[op](None, lambda node: None, isa)
            want = exact_numpy(fn, base[::2])
            cases = {
                "x": (base[::2], np.empty(n, np.float32)),
                "out": (base[::2].copy(), np.zeros(2 * n, np.float32)[::2]),
            }
            x_in_place = base.copy()[::2]
            cases["in place"] = (x_in_place, x_in_place)
            for case, (x, out) in cases.items():
                kernel.bind(_context(plan), [x], [out])()
                np.testing.assert_array_equal(bits(out), bits(want), err_msg=f"{op} {case}")
