"""Exact mode's own exp, tanh, sigmoid, erf and softmax (graphrt_ops_basic._exact_math).

* accuracy: ulp error against float64 references (numpy's float64 functions, math.erf, and
  long double for the float64 path where the platform has it) over sweeps of float32 inputs
  with edge values, with the bounds docs/exact-mode.md states;
* the documented operation order: a scalar re-implementation of the document's steps, one
  numpy scalar operation at a time (what a C kernel does), must give the same bits;
* bits do not depend on threads or plans, and no numpy transcendental routine is called.
"""

from __future__ import annotations

import math
import struct
from decimal import Decimal, getcontext

import numpy as np
import pytest
from onnx import TensorProto, helper

import graphrt
from graphrt_ops_basic import _exact_math as em
from graphrt_ops_basic import unary
from tests._models import make_model, tensor

F32 = np.float32
EDGES32 = np.array(
    [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-38, -1e-38, 1.1754942e-38, 3e-39,
     88.72283, 88.72284, 89.0, 100.0, -87.33, -103.28, -103.97, -104.0, -200.0, 0.5, -0.5,
     1e-8, -1e-8, 0.17328, 0.34657, -0.34657, 9.0, -9.0, 3.4028235e38, -3.4028235e38],
    F32,
)  # fmt: skip
#: Max ulp error bounds (float32) stated in docs/exact-mode.md; measured maxima over a sweep of
#: every 61st float32 bit pattern: exp 1.00, tanh 2.49, sigmoid 2.30, erf 5.16.
BOUNDS = {"exp": 1.5, "tanh": 3.0, "sigmoid": 3.0, "erf": 6.0}


def sweep32(n: int = 1 << 17, seed: int = 0) -> np.ndarray:
    """Random float32 bit patterns (every magnitude and sign), a dense grid over the range
    where the functions vary, and the edge values."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32).view(F32)
    grid = np.linspace(-110, 100, n, dtype=F32)
    fine = np.linspace(-1, 1, n // 4, dtype=F32)
    return np.concatenate([bits, grid, fine, EDGES32])


def work(dtype, n: int) -> em.ExpWork:
    return em.make_work([np.empty(s, d) for d, s in em.work_specs(dtype, n)])


def exact(name: str, x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    w = work(x.dtype, x.size)
    if name == "exp":
        em.exp_into(x, out, w)
    elif name == "tanh":
        em.tanh_into(x, out, w)
    elif name == "sigmoid":
        em.sigmoid_into(x, out, w, np.empty_like(x))
    else:
        scratch = [np.empty_like(x) for _ in range(5)]
        top = np.empty((), x.dtype)
        em.erf_exact_into(x, out, scratch, np.empty(x.shape, bool), top, w)
    return out


def reference(name: str, x64: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        if name == "exp":
            return np.exp(x64)
        if name == "tanh":
            return np.tanh(x64)
        if name == "sigmoid":
            return 1 / (1 + np.exp(-x64))
        return np.frompyfunc(math.erf, 1, 1)(x64).astype(np.float64)


def ulp_error(got: np.ndarray, ref: np.ndarray, dtype) -> np.ndarray:
    """|got - ref| in units of the last place of ref rounded to ``dtype`` (2^-149 in float32's
    subnormals); 0 where ref or got is not finite (those are checked for equality)."""
    with np.errstate(all="ignore"):
        rounded = ref.astype(dtype)
        ok = np.isfinite(rounded) & np.isfinite(got)
        wide = np.longdouble if dtype == np.float64 else np.float64
        spacing = np.spacing(np.abs(rounded)).astype(wide)
        err = np.abs(got.astype(wide) - ref.astype(wide)) / spacing
        return np.where(ok, err, 0).astype(np.float64)


@pytest.mark.parametrize("name", ["exp", "tanh", "sigmoid", "erf"])
def test_float32_ulp_error_within_the_documented_bound(name):
    x = sweep32()
    if name == "erf":  # math.erf per element: a smaller, denser sweep
        x = np.concatenate([np.linspace(-4.5, 4.5, 60001, dtype=F32), sweep32(1 << 12), EDGES32])
    got = exact(name, x)
    with np.errstate(invalid="ignore"):
        ref = reference(name, x.astype(np.float64))
    err = ulp_error(got, ref, F32)
    worst = int(np.argmax(err))
    assert err[worst] <= BOUNDS[name], (x[worst], got[worst], ref[worst])
    # infinities, zeros and NaN where the reference has them
    nan = np.isnan(x)
    with np.errstate(all="ignore"):
        rounded = ref.astype(F32)
    assert np.array_equal(np.isinf(got[~nan]), np.isinf(rounded[~nan]))
    assert np.array_equal(got[~nan] == 0, rounded[~nan] == 0)
    assert set(got[nan].view(np.uint32).tolist()) == {0x7FC00000}


@pytest.mark.skipif(np.finfo(np.longdouble).nmant <= 52, reason="needs an extended long double")
@pytest.mark.parametrize("name", ["exp", "tanh", "sigmoid"])
def test_float64_ulp_error_within_the_documented_bound(name):
    rng = np.random.default_rng(4)
    edges = [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 709.78, 709.79, -745.1, -746]
    x = np.concatenate([rng.uniform(-750, 720, 100_000), rng.uniform(-3, 3, 100_000), edges])
    got = exact(name, x)
    xl = x.astype(np.longdouble)
    with np.errstate(all="ignore"):
        ref = {"exp": np.exp, "tanh": np.tanh}.get(name, lambda v: 1 / (1 + np.exp(-v)))(xl)
    err = ulp_error(got, ref, np.float64)
    assert err.max() <= BOUNDS[name], x[int(np.argmax(err))]
    assert got[np.isnan(x)].view(np.uint64)[0] == 0x7FF8000000000000


def test_edge_values_bit_for_bit():
    x = np.array([0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-45, -200.0], F32)
    u32 = lambda a: a.view(np.uint32).tolist()
    assert u32(exact("exp", x)) == u32(np.array([1, 1, np.inf, 0, 1, 1, 0], F32))
    assert u32(exact("tanh", x)) == u32(np.array([0, -0.0, 1, -1, 1e-45, -1e-45, -1], F32))
    assert u32(exact("sigmoid", x)) == u32(np.array([0.5, 0.5, 1, 0, 0.5, 0.5, 0], F32))
    assert u32(exact("erf", x[:4])) == u32(np.array([0, -0.0, 1, -1], F32))
    # the largest finite result and the first overflow; gradual underflow
    assert np.isfinite(exact("exp", np.array([88.72283], F32))[0])
    assert np.isinf(exact("exp", np.array([88.7229], F32))[0])
    tiny = exact("exp", np.array([-100.0, -103.0], F32))
    assert np.all((tiny > 0) & (tiny < np.finfo(F32).tiny))
    # every NaN payload and sign becomes 0x7FC00000
    nans = np.array([0x7FC12345, 0xFFC00001, 0x7F800001, 0xFF800001], np.uint32).view(F32)
    for name in ("exp", "tanh", "sigmoid", "erf"):
        assert set(u32(exact(name, nans))) == {0x7FC00000}, name


def test_reduction_constants_are_what_the_document_says():
    getcontext().prec = 60
    ln2 = Decimal(2).ln()
    for dtype, sig_bits in ((np.dtype(F32), 15), (np.dtype(np.float64), 33)):
        k = em.CONSTS[dtype]
        hi, lo = Decimal(float(k.ln2_hi)), Decimal(float(k.ln2_lo))
        mant = np.finfo(dtype).nmant
        frac, _ = math.frexp(float(k.ln2_hi))
        assert (int(frac * 2 ** (mant + 1)) % 2 ** (mant + 1 - sig_bits)) == 0  # few bits
        assert float(k.ln2_lo) == float(dtype.type(float(ln2 - hi)))  # the rest, rounded
        assert abs(hi + lo - ln2) <= Decimal(float(np.spacing(k.ln2_lo))) / 2
        assert float(k.log2e) == float(dtype.type(float(1 / ln2)))
        assert [float(c) for c in k.coeffs] == [
            float(dtype.type(1 / math.factorial(j))) for j in range(2, len(k.coeffs) + 2)
        ]


# -- the documented order, one scalar operation at a time ---------------------------------------


def _pow2_32(n: int) -> F32:
    return F32(struct.unpack("<f", struct.pack("<I", (n + 127) << 23))[0])


def _em1_scalar(x: F32) -> tuple[int, F32]:
    """docs/exact-mode.md, exp steps 1-3 for a non-NaN float32: n and em1 = e^r - 1."""
    x = min(max(x, F32(-104.0)), F32(89.0))
    n = F32(np.rint(x * F32(1.4426950216293335)))
    r = F32(x - n * F32(0.693145751953125))
    r = F32(r - n * F32(1.428606765330187e-06))
    c = [F32(1 / math.factorial(j)) for j in range(2, 8)]
    q = F32(r * c[-1])
    q = F32(q + c[-2])
    for coeff in reversed(c[:-2]):
        q = F32(q * r)
        q = F32(q + coeff)
    return int(n), F32(F32(F32(q * r) * r) + r)


def _exp_scalar(x: F32) -> F32:
    n, em1 = _em1_scalar(x)
    n1 = n >> 1
    return F32(F32(F32(em1 + F32(1)) * _pow2_32(n1)) * _pow2_32(n - n1))


def _tanh_scalar(x: F32) -> F32:
    z = max(F32(abs(x) * F32(-2)), F32(-20.0))
    n, em1 = _em1_scalar(z)
    s = _pow2_32(n)
    t = F32(F32(em1 * s) + F32(s - F32(1)))
    return F32(math.copysign(abs(F32(t / F32(t + F32(2)))), x))


def _sigmoid_scalar(x: F32) -> F32:
    e = _exp_scalar(F32(-abs(x)))
    num = max(e, F32(np.sign(x)))
    return F32(num / F32(e + F32(1)))


@pytest.mark.parametrize(
    ("name", "scalar"), [("exp", _exp_scalar), ("tanh", _tanh_scalar), ("sigmoid", _sigmoid_scalar)]
)
def test_vectorised_code_follows_the_documented_scalar_steps(name, scalar):
    rng = np.random.default_rng(7)
    x = np.concatenate(
        [rng.uniform(-110, 95, 1500).astype(F32), rng.standard_normal(1500).astype(F32) * 0.3,
         EDGES32[~np.isnan(EDGES32)]]
    )  # fmt: skip
    with np.errstate(all="ignore"):
        want = np.array([scalar(v) for v in x], F32)
    assert exact(name, x).tobytes() == want.tobytes()


# -- through sessions: threads, plans, no numpy transcendental ----------------------------------

UNARY = ["Exp", "Tanh", "Sigmoid", "Erf"]


def _model(op: str, shape, elem=TensorProto.FLOAT, **attrs):
    return make_model(
        [helper.make_node(op, ["x"], ["y"], **attrs)],
        [tensor("x", elem, list(shape))],
        [tensor("y", elem, list(shape))],
    )


@pytest.mark.parametrize("op", [*UNARY, "Softmax"])
def test_exact_bits_do_not_depend_on_threads_or_plans(op):
    shape = (3, 50_000)  # 150000 elements: three blocks of the element-wise functions
    x = (np.random.default_rng(1).standard_normal(shape) * 4).astype(F32)
    model = _model(op, ("N", shape[1]))
    seen = set()
    for threads in (1, 2, 4):
        sess = graphrt.Session(model, mode="exact", intra_op_threads=threads)
        seen.add(sess.run(None, {"x": x})[0].tobytes())  # fresh plan
        sess.run(None, {"x": x[:1]})  # another plan in between
        seen.add(sess.run(None, {"x": x})[0].tobytes())  # reused plan and run state
    assert len(seen) == 1
    got = np.frombuffer(seen.pop(), F32).reshape(shape)
    fast = graphrt.Session(model).run(None, {"x": x})[0]
    # Softmax: 50000 float32 terms added one by one (canonical order) drift more than numpy's
    # pairwise sum: the error bound is about K * 2^-24
    np.testing.assert_allclose(got, fast, rtol=5e-4 if op == "Softmax" else 2e-6, atol=1e-30)


def test_exact_kernels_call_no_numpy_transcendental(monkeypatch):
    x = np.linspace(-30, 30, 4096, dtype=F32).reshape(4, 1024)
    models = [_model(op, x.shape) for op in UNARY] + [_model("Softmax", x.shape, axis=1)]
    # kernel_path numpy: ops-basic's own kernels (a native path's fast Sigmoid/Erf call no numpy)
    sessions = [
        (
            graphrt.Session(m, mode="exact", kernel_path=path),
            graphrt.Session(m, kernel_path="numpy"),
        )
        for m in models
        for path in ("numpy", "auto")
    ]

    def forbidden(*args, **kwargs):
        raise AssertionError("a numpy transcendental was called")

    for fn in ("exp", "exp2", "expm1", "tanh", "log", "log1p", "logaddexp", "power"):
        monkeypatch.setattr(np, fn, forbidden)
    for kernel in (unary.Exp, unary.Tanh):  # fast mode's ufunc, read when a plan is bound
        monkeypatch.setattr(kernel, "ufunc", forbidden)
    for exact_sess, fast_sess in sessions:
        exact_sess.run(None, {"x": x})  # a new plan and run, all under the patch
        with pytest.raises(graphrt.SessionError, match="transcendental") as caught:
            fast_sess.run(None, {"x": x})  # the patch does catch numpy's own
        assert caught.value.kind == "kernel_error"
        assert isinstance(caught.value.__cause__, AssertionError)


def test_softmax_sums_in_ascending_order_and_divides_once():
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((5, 37)) * 10).astype(F32)
    got = graphrt.Session(_model("Softmax", x.shape, axis=1), mode="exact").run(None, {"x": x})[0]
    want = np.empty_like(x)
    with np.errstate(all="ignore"):
        for i, row in enumerate(x):
            m = max(row)
            t = [_exp_scalar(F32(v - m)) for v in row]
            acc = t[0]
            for term in t[1:]:
                acc = F32(acc + term)
            want[i] = [F32(v / acc) for v in t]
    assert got.tobytes() == want.tobytes()
    ref = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got, ref / ref.sum(axis=1, keepdims=True), rtol=3e-6)


def test_softmax_along_a_middle_axis_and_legacy_coercion():
    x = np.random.default_rng(3).standard_normal((2, 6, 3)).astype(F32)
    for opset, axis, view, red in ((13, 1, (2, 6, 3), 1), (11, 1, (2, 18), 1)):
        model = make_model(
            [helper.make_node("Softmax", ["x"], ["y"], axis=axis)],
            [tensor("x", shape=list(x.shape))],
            [tensor("y", shape=list(x.shape))],
            opset=opset,
        )
        got = graphrt.Session(model, mode="exact").run(None, {"x": x})[0].reshape(view)
        xv = x.reshape(view)
        e = exact("exp", (xv - xv.max(axis=red, keepdims=True)).reshape(-1)).reshape(view)
        acc = np.take(e, [0], axis=red)
        for k in range(1, view[red]):
            acc = acc + np.take(e, [k], axis=red)  # float32 adds, ascending
        assert got.tobytes() == (e / acc).tobytes()


def test_float16_computes_in_float32_and_rounds_once():
    x = np.linspace(-12, 12, 999, dtype=np.float16).reshape(9, 111)
    for op in UNARY:
        model = _model(op, x.shape, TensorProto.FLOAT16)
        got = graphrt.Session(model, mode="exact").run(None, {"x": x})[0]
        assert got.dtype == np.float16
        with np.errstate(over="ignore"):  # exp(12) is inf in float16
            want = exact(op.lower(), x.astype(F32).reshape(-1)).astype(np.float16)
        want = want.reshape(x.shape)
        assert got.tobytes() == want.tobytes(), op
    # Softmax: the whole computation in float32, one rounding to float16 at the end
    f16 = graphrt.Session(_model("Softmax", x.shape, TensorProto.FLOAT16, axis=1), mode="exact")
    f32 = graphrt.Session(_model("Softmax", x.shape, axis=1), mode="exact")
    want = f32.run(None, {"x": x.astype(F32)})[0].astype(np.float16)
    assert f16.run(None, {"x": x})[0].tobytes() == want.tobytes()


def test_float64_sessions_are_exact_too():
    x = np.random.default_rng(5).standard_normal((4, 300)) * 6
    for op in UNARY:
        model = _model(op, x.shape, TensorProto.DOUBLE)
        runs = {
            graphrt.Session(model, mode="exact", intra_op_threads=t)
            .run(None, {"x": x})[0]
            .tobytes()
            for t in (1, 3)
        }
        assert len(runs) == 1
        got = np.frombuffer(runs.pop(), np.float64).reshape(x.shape)
        ref = reference(op.lower(), x)
        np.testing.assert_allclose(got, ref, rtol=1e-14, atol=1e-300)
