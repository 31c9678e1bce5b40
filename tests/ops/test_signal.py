"""The signal family of graphrt-ops-basic, part 1: DFT, STFT, the windows and
MelWeightMatrix (part 2, test_signal_family.py: TfIdfVectorizer, ImageDecoder and the family
as a whole).

DFT and STFT are checked against the spec's sums written out (a matrix of e^(-2 pi i k n / N)
in complex128, no FFT), in every attribute and opset form, and the transforms against np.fft;
the windows against their formulas, against cosines correctly rounded with Python's decimal
module and, in exact mode, bit for bit against their operation order in Python floats;
MelWeightMatrix against onnxruntime bit for bit and against the spec's triangles.
"""

from __future__ import annotations

import decimal

import numpy as np
import pytest
from onnx import TensorProto, helper

import graphrt
import graphrt_ops_basic.spectral as spectral
from graphrt.errors import SessionError
from graphrt_ops_basic import windows
from graphrt_ops_basic.table import OPERATORS
from tests._models import init, make_model, ort_session, tensor
from tests.ops._signal import (
    COEFFS,
    F32,
    HAS_OPSET_20,
    OPS,
    WAVES,
    dft_inputs,
    evaluate,
    kind_of,
    mel_inputs,
    to_complex,
)


def test_every_operator_is_in_the_table_once_with_its_opsets():
    since = {d.op_type: d.since for d in OPERATORS if d.op_type in OPS and d.domain == ""}
    assert since == {
        "DFT": 17,
        "STFT": 17,
        "HannWindow": 17,
        "HammingWindow": 17,
        "BlackmanWindow": 17,
        "MelWeightMatrix": 17,
        "TfIdfVectorizer": 9,
        "ImageDecoder": 20,
    }
    exact = {d.op_type for d in OPERATORS if d.op_type in OPS and d.factory.supports_exact}
    assert exact == OPS - {"DFT", "STFT"}


# -- DFT ----------------------------------------------------------------------------------------


def spec_dft(x: np.ndarray, n: int, axis: int, inverse: bool) -> np.ndarray:
    """The spec's sums along ``axis`` (complex128), x zero-padded or cut to n."""
    x = np.moveaxis(np.asarray(x, np.complex128), axis, -1)
    m = x.shape[-1]
    x = x[..., :n] if m >= n else np.concatenate([x, np.zeros(x.shape[:-1] + (n - m,))], -1)
    k = np.arange(n)
    sign = 1 if inverse else -1
    w = np.exp(sign * 2j * np.pi * np.outer(k, k) / n)
    y = x @ w.T
    if inverse:
        y = y / n
    return np.moveaxis(y, -1, axis)


def spec_irfft(bins: np.ndarray, n: int, axis: int) -> np.ndarray:
    """The real signal whose spectrum's first n // 2 + 1 bins are ``bins`` (Hermitian)."""
    b = np.moveaxis(bins, axis, -1)
    half = n // 2 + 1
    b = (
        b[..., :half]
        if b.shape[-1] >= half
        else np.concatenate([b, np.zeros(b.shape[:-1] + (half - b.shape[-1],))], -1)
    )
    full = np.concatenate([b, np.conj(b[..., 1 : n - half + 1][..., ::-1])], -1)
    return np.moveaxis(spec_dft(full, n, -1, True).real, -1, axis)


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("parts", [1, 2])
@pytest.mark.parametrize("inverse", [0, 1])
@pytest.mark.parametrize("length", [None, 3, 7, 12])
def test_dft_full_spectrum_matches_the_spec_sums(opset, parts, inverse, length):
    rng = np.random.default_rng(opset + 10 * parts + inverse)
    x = dft_inputs(rng, (2, 7, 5), parts)
    for axis in (0, 1, 2, -2, -3, -4):
        n_len = None if length is None else np.array(length, np.int64)
        if opset == 17:
            got = evaluate("DFT", x, n_len, opset=17, axis=axis, inverse=inverse)
        else:
            got = evaluate("DFT", x, n_len, np.array(axis), opset=20, inverse=inverse)
        a = axis % 4
        n = x.shape[a] if length is None else length
        want = spec_dft(to_complex(x), n, a, bool(inverse))
        assert got.shape == want.shape + (2,) and got.dtype == np.float32
        np.testing.assert_allclose(to_complex(got), want, rtol=1e-4, atol=1e-5)


def test_dft_default_axis_is_1_at_opset_17_and_minus_2_at_20():
    x = dft_inputs(np.random.default_rng(0), (3, 4, 5), 2)
    np.testing.assert_allclose(
        to_complex(evaluate("DFT", x, opset=17)), spec_dft(to_complex(x), 4, 1, False), atol=1e-5
    )
    np.testing.assert_allclose(
        to_complex(evaluate("DFT", x, opset=20)), spec_dft(to_complex(x), 5, 2, False), atol=1e-5
    )


@pytest.mark.parametrize("length", [None, 4, 9, 12])
def test_dft_onesided_rfft_and_irfft(length):
    rng = np.random.default_rng(7)
    x = dft_inputs(rng, (3, 8), 1)
    n_len = None if length is None else np.array(length)
    got = evaluate("DFT", x, n_len, np.array(1), opset=20, onesided=1)
    n = 8 if length is None else length
    want = spec_dft(to_complex(x), n, 1, False)[:, : n // 2 + 1]
    assert got.shape == (3, n // 2 + 1, 2)
    np.testing.assert_allclose(to_complex(got), want, rtol=1e-4, atol=1e-5)
    # IRFFT: a half spectrum in, the real signal out ([..., 1]); default n = 2 (bins - 1)
    half = dft_inputs(rng, (3, 6), 2)
    got = evaluate("DFT", half, n_len, np.array(-2), opset=20, onesided=1, inverse=1)
    n = 10 if length is None else length
    assert got.shape == (3, n, 1)
    np.testing.assert_allclose(got[..., 0], spec_irfft(to_complex(half), n, 1), atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float64, np.float16, "bfloat16"])
def test_dft_other_float_types(dtype):
    import ml_dtypes

    dtype = np.dtype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    x = dft_inputs(np.random.default_rng(1), (2, 6), 2).astype(dtype)
    got = evaluate("DFT", x, opset=17, axis=1)
    assert got.dtype == dtype
    want = spec_dft(to_complex(x.astype(np.float64)), 6, 1, False)
    tol = 1e-12 if dtype == np.float64 else 2e-2
    np.testing.assert_allclose(to_complex(got.astype(np.float64)), want, rtol=tol, atol=tol * 10)


def test_dft_without_numpy_out_argument(monkeypatch):
    """numpy 1's np.fft has no ``out=``: the kernels compute into new arrays and copy."""
    monkeypatch.setattr(spectral, "FFT_OUT", False)
    x = dft_inputs(np.random.default_rng(2), (2, 6), 2)
    want = spec_dft(to_complex(x), 6, 1, True)
    np.testing.assert_allclose(to_complex(evaluate("DFT", x, axis=1, inverse=1)), want, atol=1e-5)
    s = dft_inputs(np.random.default_rng(3), (1, 32), 2)
    got = evaluate("STFT", s, np.array(4), None, np.array(8))
    np.testing.assert_allclose(to_complex(got), spec_stft(s, 4, None, 8, True), atol=1e-4)


def test_dft_errors():
    x = np.zeros((2, 4, 2), np.float32)
    real = np.zeros((2, 4, 1), np.float32)
    assert kind_of(lambda: evaluate("DFT", x, axis=-1)) == "invalid_model"
    assert kind_of(lambda: evaluate("DFT", x, axis=2)) == "invalid_model"
    assert kind_of(lambda: evaluate("DFT", x, None, np.array(-1), opset=20)) == "invalid_input"
    assert kind_of(lambda: evaluate("DFT", x, None, np.array(5), opset=20)) == "invalid_input"
    assert kind_of(lambda: evaluate("DFT", np.zeros((2, 4, 3), np.float32))) == "invalid_input"
    assert kind_of(lambda: evaluate("DFT", np.zeros(4, np.float32))) == "invalid_input"
    assert kind_of(lambda: evaluate("DFT", x, np.array(0))) == "invalid_input"
    assert kind_of(lambda: evaluate("DFT", x, onesided=1)) == "invalid_input"  # complex RFFT
    assert kind_of(lambda: evaluate("DFT", real, onesided=1, inverse=1)) == "invalid_input"
    assert kind_of(lambda: evaluate("DFT", real, inverse=2)) == "invalid_model"
    assert kind_of(lambda: evaluate("DFT", real.astype(np.int32))) == "invalid_model"
    with pytest.raises(SessionError) as err:
        evaluate("DFT", x, axis=-1)
    assert "DFT node" in str(err.value) and "axis -1" in str(err.value)


@pytest.mark.skipif(not HAS_OPSET_20, reason="the installed onnx has no opset 20")
def test_dft_run_time_axis_and_length_make_a_dynamic_node():
    node = helper.make_node("DFT", ["x", "n", "axis"], ["y"])
    model = make_model(
        [node],
        [
            tensor("x", shape=[3, 4, 5, 2]),
            tensor("n", TensorProto.INT64, []),
            tensor("axis", TensorProto.INT64, []),
        ],
        [tensor("y")],
        opset=20,
    )
    sess = graphrt.Session(model, intra_op_threads=1)
    x = dft_inputs(np.random.default_rng(4), (3, 4, 5), 2)
    for n, axis in ((4, 1), (6, 2), (2, 0), (5, -3)):
        y = sess.run(None, {"x": x, "n": np.array(n), "axis": np.array(axis)})[0]
        np.testing.assert_allclose(
            to_complex(y), spec_dft(to_complex(x), n, axis % 4, False), atol=1e-5
        )
    assert not sess.cached_plans[0].static


def test_dft_and_stft_refuse_exact_mode():
    model = make_model(
        [helper.make_node("DFT", ["x"], ["y"])], [tensor("x", shape=[2, 4, 1])], [tensor("y")]
    )
    with pytest.raises(SessionError) as err:
        graphrt.Session(model, mode="exact")
    assert err.value.kind == "exact_mode_unavailable" and "DFT (opset 17)" in err.value.operators


# -- STFT ---------------------------------------------------------------------------------------


def spec_stft(signal, step, window, length, onesided):
    """Frame by frame: the DFT of signal[b, f * step : f * step + length] * window."""
    s = to_complex(signal.astype(np.float64))
    frames = (s.shape[1] - length) // step + 1
    out = []
    for f in range(frames):
        frame = s[:, f * step : f * step + length]
        if window is not None:
            frame = frame * window.astype(np.float64)
        out.append(spec_dft(frame, length, 1, False))
    y = np.stack(out, 1)
    return y[..., : length // 2 + 1] if onesided else y


@pytest.mark.parametrize("parts", [1, 2])
@pytest.mark.parametrize("onesided", [0, 1])
@pytest.mark.parametrize("form", ["window", "length", "both", "neither"])
def test_stft_matches_the_spec_frame_by_frame(parts, onesided, form):
    rng = np.random.default_rng(parts + 2 * onesided)
    x = dft_inputs(rng, (2, 50), parts)
    window = rng.random(12).astype(np.float32) if form in ("window", "both") else None
    length = np.array(12) if form in ("length", "both") else None
    got = evaluate("STFT", x, np.array(5), window, length, onesided=onesided)
    frame = 50 if form == "neither" else 12
    want = spec_stft(x, 5, window, frame, onesided)
    assert got.shape == want.shape + (2,)
    np.testing.assert_allclose(to_complex(got), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_stft_other_float_types(dtype):
    rng = np.random.default_rng(5)
    x = dft_inputs(rng, (1, 40), 1, dtype)
    window = rng.random(8).astype(dtype)
    got = evaluate("STFT", x, np.array(4), window)
    assert got.dtype == dtype
    tol = 1e-12 if dtype == np.float64 else 1e-2
    want = spec_stft(x, 4, window, 8, True)
    np.testing.assert_allclose(to_complex(got.astype(np.float64)), want, rtol=tol, atol=tol * 10)


def test_stft_errors():
    x = np.zeros((1, 16, 1), np.float32)
    w = np.ones(4, np.float32)
    assert kind_of(lambda: evaluate("STFT", x, np.array(0), w)) == "invalid_input"
    assert kind_of(lambda: evaluate("STFT", x, np.array(2), w, np.array(5))) == "invalid_input"
    assert kind_of(lambda: evaluate("STFT", x, np.array(2), None, np.array(17))) == "invalid_input"
    assert kind_of(lambda: evaluate("STFT", x, np.array(2), np.ones((2, 2), np.float32))) == (
        "invalid_input"
    )
    assert kind_of(lambda: evaluate("STFT", x[0], np.array(2), w)) == "invalid_input"
    assert kind_of(lambda: evaluate("STFT", x, np.array(2), w.astype(np.float64))) == (
        "invalid_model"
    )


# -- windows ------------------------------------------------------------------------------------


def formula(op: str, size: int, periodic: bool) -> np.ndarray:
    a0, a1, a2 = COEFFS[op]
    n = np.arange(size)
    big = size if periodic else size - 1
    return a0 - a1 * np.cos(2 * np.pi * n / big) + a2 * np.cos(4 * np.pi * n / big)


@pytest.mark.parametrize("op", list(COEFFS))
@pytest.mark.parametrize("periodic", [0, 1])
def test_windows_match_their_formulas(op, periodic):
    for size in (0, 2, 3, 10, 64, 257):
        got = evaluate(op, np.array(size, np.int64), periodic=periodic, output_datatype=11)
        assert got.dtype == np.float64 and got.shape == (size,)
        np.testing.assert_allclose(got, formula(op, size, periodic), rtol=0, atol=1e-15)
        got = evaluate(op, np.array(size, np.int32), periodic=periodic)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, formula(op, size, periodic), rtol=0, atol=1e-7)


def test_window_output_types_and_a_symmetric_window_of_one():
    got = evaluate("HannWindow", np.array(9), periodic=0, output_datatype=TensorProto.FLOAT16)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, formula("HannWindow", 9, False), atol=1e-3)
    # integer types truncate; the Blackman peak of a symmetric odd window is 1
    got = evaluate("BlackmanWindow", np.array(5), periodic=0, output_datatype=TensorProto.INT32)
    assert got.dtype == np.int32 and got.tolist() == [0, 0, 1, 0, 0]
    assert evaluate("HannWindow", np.array(4), output_datatype=TensorProto.UINT8).tolist() == [
        0,
        0,
        1,
        0,
    ]
    # N = size - 1 = 0: 0 / 0, as the function body and onnxruntime give
    assert np.isnan(evaluate("HammingWindow", np.array(1), periodic=0)).all()
    assert evaluate("HammingWindow", np.array(1), periodic=0, output_datatype=6).tolist() == [0]
    assert evaluate("HammingWindow", np.array(1)).tolist() == [pytest.approx(4 / 46)]


def test_window_errors():
    assert kind_of(lambda: evaluate("HannWindow", np.array(-1))) == "invalid_input"
    assert kind_of(lambda: evaluate("HannWindow", np.array([3, 4]))) == "invalid_input"
    assert kind_of(lambda: evaluate("HannWindow", np.array(3.0))) == "invalid_model"
    assert kind_of(lambda: evaluate("HannWindow", np.array(3), periodic=2)) == "invalid_model"
    for bad in (TensorProto.STRING, TensorProto.BOOL, 999):
        assert kind_of(lambda b=bad: evaluate("HannWindow", np.array(3), output_datatype=b)) == (
            "invalid_model"
        )


def decimal_cos(turns: decimal.Decimal) -> decimal.Decimal:
    """cos(2 pi turns) by its Taylor series at 50 digits (independent of any libm)."""
    pi = decimal.Decimal("3.14159265358979323846264338327950288419716939937510582")
    x = 2 * pi * (turns % 1)
    total, term, k = decimal.Decimal(1), decimal.Decimal(1), 0
    while abs(term) > decimal.Decimal(10) ** -48:
        k += 2
        term = -term * x * x / (k * (k - 1))
        total += term
    return total


def test_cos_turns_is_within_a_float64_ulp_and_rounds_to_float32_correctly():
    with decimal.localcontext() as dc:
        dc.prec = 50
        for period in (3, 7, 10, 16, 97, 1000):
            m = np.arange(period, dtype=np.int64)
            got = windows.cos_turns(m, period)
            want = [decimal_cos(decimal.Decimal(int(k)) / period) for k in m]
            want64 = np.array([float(w) for w in want])
            assert np.abs(got - want64).max() <= np.spacing(1.0)
            # float32 of the float64 result is the correctly rounded float32 cosine
            np.testing.assert_array_equal(got.astype(np.float32), want64.astype(np.float32))


def test_windows_in_exact_mode_with_a_run_time_size():
    model = make_model(
        [helper.make_node("BlackmanWindow", ["s"], ["y"], periodic=0)],
        [tensor("s", TensorProto.INT64, [])],
        [tensor("y")],
    )
    exact = graphrt.Session(model, mode="exact", intra_op_threads=2)
    fast = graphrt.Session(model, intra_op_threads=1)
    for size in (7, 100, 7):
        s = {"s": np.array(size)}
        a, b = exact.run(None, s)[0], fast.run(None, s)[0]
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
        np.testing.assert_allclose(a, formula("BlackmanWindow", size, False), atol=1e-7)
    assert not exact.cached_plans[0].static


def test_constant_size_folds_the_window_into_a_constant():
    size = helper.make_tensor("s", TensorProto.INT64, [], [16])
    model = make_model([helper.make_node("HannWindow", ["s"], ["y"])], [], [tensor("y")], [size])
    sess = graphrt.Session(model, intra_op_threads=1, optimization_level="none")
    y = sess.run(None, {})[0]
    np.testing.assert_allclose(y, formula("HannWindow", 16, True), atol=1e-7)
    assert sess.cached_plans[0].steps == [] or all(
        st.node.info.op_type != "HannWindow" for st in sess.cached_plans[0].steps
    )


# -- MelWeightMatrix ----------------------------------------------------------------------------


def spec_mel(num, length, rate, lower, upper):
    """The backend case's recipe: num + 2 points evenly spaced in mel, bins by floor, then
    triangles element by element."""
    mel = lambda f: 2595 * np.log10(1 + f / 700)
    low, high = mel(np.float64(lower)), mel(np.float64(upper))
    step = (high - low) / (num + 2)
    points = [700 * (10 ** ((i * step + low) / 2595) - 1) for i in range(num + 2)]
    bins = [int(np.floor((length + 1) * p / rate)) for p in points]
    out = np.zeros((length // 2 + 1, num))
    for i in range(num):
        lo, c, hi = bins[i : i + 3]
        if c == lo:
            out[c, i] = 1
        else:
            for j in range(lo, c + 1):
                out[j, i] = (j - lo) / (c - lo)
        for j in range(c, hi):
            out[j, i] = (hi - j) / (hi - c)
    return out


@pytest.mark.parametrize(
    "args",
    [(8, 16, 8192, 0.0, 4096.0), (40, 512, 16000, 20.0, 8000.0), (13, 100, 22050, 300.0, 5000.0)],
)
def test_mel_weight_matrix_matches_the_spec_recipe(args):
    got = evaluate("MelWeightMatrix", *mel_inputs(*args))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, spec_mel(*args).astype(np.float32))
    got = evaluate("MelWeightMatrix", *mel_inputs(*args, np.float64), output_datatype=11)
    np.testing.assert_array_equal(got, spec_mel(*args))


def test_mel_weight_matrix_is_bit_identical_to_onnxruntime():
    pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(0)
    for _ in range(20):
        rate = int(rng.choice([8000, 16000, 44100]))
        lower = float(np.float32(rng.uniform(0, rate / 4)))
        args = (int(rng.integers(1, 64)), int(rng.integers(8, 600)), rate, lower)
        args += (float(np.float32(rng.uniform(lower, rate / 2))),)
        node = helper.make_node("MelWeightMatrix", ["a", "b", "c", "d", "e"], ["y"])
        inits = [init(k, v) for k, v in zip("abcde", mel_inputs(*args))]
        model = make_model([node], [], [tensor("y")], inits)
        want = ort_session(model).run(None, {})[0]
        np.testing.assert_array_equal(evaluate("MelWeightMatrix", *mel_inputs(*args)), want)


def test_mel_weight_matrix_errors():
    bad = [
        (8, 16, 8192, 0.0, 8192.0),  # filters beyond the last spectrogram bin
        (8, 0, 8192, 0.0, 100.0),
        (8, 16, 0, 0.0, 100.0),
        (-1, 16, 8192, 0.0, 100.0),
        (8, 16, 8192, float("nan"), 100.0),
    ]
    for args in bad:
        assert kind_of(lambda a=args: evaluate("MelWeightMatrix", *mel_inputs(*a))) == (
            "invalid_input"
        ), args
    ints = mel_inputs(8, 16, 8192, 0, 100, np.int64)
    assert kind_of(lambda: evaluate("MelWeightMatrix", *ints)) == "invalid_model"


# -- bits of the transforms and the windows -----------------------------------------------------


@pytest.mark.skipif(not spectral.FFT_OUT, reason="numpy 1 computes float32 in float64")
@pytest.mark.parametrize("kind", ["fft", "ifft", "rfft", "irfft"])
@pytest.mark.parametrize("n", [7, 8, 12])
def test_transforms_match_np_fft(kind, n):
    """The gufuncs called with the plan's scale factor: the inverses give np.fft's bits (the
    same factor), the forward transforms pocketfft's float32 loop, within float32 rounding of
    the complex128 transform (np.fft rounds a double result there)."""
    x = WAVES[..., 0] + 1j * WAVES[..., 1] if kind != "rfft" else WAVES[..., 0]
    x = x.astype(np.complex64 if kind != "rfft" else F32)
    want = getattr(np.fft, kind)(x, n, 1)
    out = np.empty_like(want)
    spectral.Transform.make(kind, n, np.dtype(F32))(x, 1, out=out)
    if kind in ("ifft", "irfft"):
        np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))
    else:
        wide = getattr(np.fft, kind)(x.astype(np.complex128 if kind == "fft" else np.float64), n, 1)
        scale = np.abs(wide).max()
        np.testing.assert_allclose(out, wide, rtol=0, atol=4 * np.finfo(F32).eps * scale)


def scalar_cos_turns(m: int, period: int) -> float:
    """cos(2 pi m / period) step by step in Python floats (IEEE double, one rounding per
    operation): windows.py's octant reduction and Horner polynomials, the order written out."""
    octant, r = divmod(8 * m, period)
    if octant % 2:
        r = period - r
    x = float(r) / float(period) * windows.PI_4
    y = x * x
    c, s = windows._COS[-1], windows._SIN[-1]
    for k in range(len(windows._COS) - 2, -1, -1):
        c = c * y + windows._COS[k]
        s = s * y + windows._SIN[k]
    s = s * x
    value = s if ((octant + 1) // 2) % 2 == 1 else c
    return -value if (octant + 2) // 4 == 1 else value


@pytest.mark.parametrize("op", list(COEFFS))
@pytest.mark.parametrize("size", [1, 2, 13, 64])
def test_windows_are_the_bits_of_their_operation_order(op, size):
    """Exact mode (1 and 2 threads) computes a0 - a1 cos + a2 cos in the documented order,
    in float64, rounded once to float32: the same bits as the scalar recipe on any machine."""
    a0, a1, a2 = COEFFS[op]
    for periodic in (0, 1):
        period = size if periodic else size - 1
        want = np.full(size, np.nan)
        if period > 0:
            for j in range(size):
                w = a0 - a1 * scalar_cos_turns(j % period, period)
                if a2:
                    w = w + a2 * scalar_cos_turns(2 * j % period, period)
                want[j] = w
        model = make_model(
            [helper.make_node(op, ["s"], ["y"], periodic=periodic)],
            [tensor("s", TensorProto.INT64, [])],
            [tensor("y")],
        )
        for threads in (1, 2):
            sess = graphrt.Session(model, mode="exact", intra_op_threads=threads)
            got = sess.run(None, {"s": np.array(size)})[0]
            np.testing.assert_array_equal(got.view(np.uint32), want.astype(F32).view(np.uint32))
