"""The signal family of graphrt-ops-basic, part 2: TfIdfVectorizer, ImageDecoder and the
family as a whole (part 1, test_signal.py: DFT, STFT, the windows, MelWeightMatrix).

TfIdfVectorizer against a loop over every start, skip and length read from the spec;
ImageDecoder against Pillow's own decoding, and its refusal without Pillow.  Every operator's
bad attributes and inputs through a session (the kind, the node named), a steady state without
allocations for each static kernel form, and a random model against onnxruntime.
"""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

import graphrt
import graphrt_ops_basic.spectral as spectral
from graphrt.errors import SessionError
from tests._models import init, make_model, onnxruntime_limits, ort_session, tensor
from tests.ops._signal import (
    F32,
    HANN,
    HAS_OPSET_20,
    SOUND,
    TFIDF,
    WAVES,
    evaluate,
    kind_of,
    mel_inputs,
    one_node,
)

# -- TfIdfVectorizer ----------------------------------------------------------------------------


def spec_tfidf(x, mode, min_n, max_n, skip, counts, indexes, pool, weights=None):
    """Every start, skip in [0, skip] and length, one n-gram each (unigrams once), looked up in
    the pool n-gram by n-gram; Y[ngram_indexes[i]] = count (or 1) times weight."""
    x = np.asarray(x)
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    ends = list(counts[1:]) + [len(pool)]
    grams = [
        (n, tuple(pool[p : p + n]))
        for n, (a, b) in enumerate(zip(counts, ends), start=1)
        for p in range(a, b, n)
    ]
    out = np.zeros((rows.shape[0], max(indexes) + 1), np.float32)
    for r, row in enumerate(rows.tolist()):
        found = [0] * len(grams)
        for n in range(min_n, max_n + 1):
            for gap in range(1, skip + 2) if n > 1 else [1]:
                for i in range(len(row) - (n - 1) * gap):
                    t = tuple(row[i + j * gap] for j in range(n))
                    for g, gram in enumerate(grams):
                        if gram == (n, t):
                            found[g] += 1
                            break
        for g, c in enumerate(found):
            w = np.float32(1 if weights is None else weights[g])
            value = {"TF": c, "IDF": min(c, 1) * w, "TFIDF": c * w}[mode]
            out[r, indexes[g]] = value
    return out.reshape(-1) if x.ndim == 1 else out


def tfidf_case(rng, strings: bool):
    vocab = [f"w{i}" for i in range(6)] if strings else [3, -7, 10**12, 0, 5, 1]
    max_n = int(rng.integers(1, 4))
    min_n = int(rng.integers(1, max_n + 1))
    pool, counts, seen = [], [], set()
    for n in range(1, max_n + 1):
        counts.append(len(pool))
        for _ in range(int(rng.integers(1, 6))):
            gram = tuple(vocab[int(i)] for i in rng.integers(0, 6, n))
            if gram not in seen:
                seen.add(gram)
                pool.extend(gram)
    total = sum(
        len(pool[a:b]) // n for n, (a, b) in enumerate(zip(counts, counts[1:] + [len(pool)]), 1)
    )
    indexes = [int(v) for v in rng.permutation(total + 3)[:total]]
    attrs = dict(
        mode=str(rng.choice(["TF", "IDF", "TFIDF"])),
        min_gram_length=min_n,
        max_gram_length=max_n,
        max_skip_count=int(rng.integers(0, 4)),
        ngram_counts=counts,
        ngram_indexes=indexes,
    )
    attrs["pool_strings" if strings else "pool_int64s"] = pool
    if rng.random() < 0.6:
        attrs["weights"] = [float(np.float32(w)) for w in rng.uniform(0.25, 3, total)]
    shape = [(12,), (3, 7), (1, 9), (2, 1), (2, 0)][int(rng.integers(0, 5))]
    tokens = rng.integers(0, 7, shape)  # 6 is outside the pool's vocabulary
    if strings:
        x = np.array([f"w{i}" for i in tokens.ravel()], dtype=object).reshape(shape)
    else:
        x = np.array(vocab + [999])[tokens].astype(np.int64 if rng.random() < 0.5 else np.int32)
        if x.dtype == np.int32:  # 10**12 does not fit: take another token
            x = np.where(tokens == 2, 4, np.array(vocab + [999])[tokens]).astype(np.int32)
    return x, attrs


@pytest.mark.parametrize("strings", [False, True])
def test_tfidf_matches_the_spec_loop(strings):
    rng = np.random.default_rng(11 + strings)
    for _ in range(60):
        x, attrs = tfidf_case(rng, strings)
        got = evaluate("TfIdfVectorizer", x, opset=9, **attrs)
        pool = attrs.get("pool_strings") or attrs["pool_int64s"]
        want = spec_tfidf(
            x,
            attrs["mode"],
            attrs["min_gram_length"],
            attrs["max_gram_length"],
            attrs["max_skip_count"],
            attrs["ngram_counts"],
            attrs["ngram_indexes"],
            pool,
            attrs.get("weights"),
        )
        assert got.dtype == np.float32 and got.shape == want.shape, attrs
        np.testing.assert_array_equal(got, want, err_msg=str(attrs))


def test_tfidf_spec_example_with_skips():
    # the operator text's example: [94, 17, 36, 12, 28] with skip 2 has 2-grams (94, 12) and
    # (17, 28); the pool counts (94, 12) and (36, 12) (skip 0 reaches (36, 12) only)
    x = np.array([94, 17, 36, 12, 28])
    attrs = dict(
        min_gram_length=2,
        max_gram_length=2,
        ngram_counts=[0, 0],
        ngram_indexes=[1, 0],
        pool_int64s=[94, 12, 36, 12],
    )
    got = evaluate("TfIdfVectorizer", x, opset=9, mode="TF", max_skip_count=2, **attrs)
    assert got.tolist() == [1.0, 1.0]
    got = evaluate("TfIdfVectorizer", x, opset=9, mode="TF", max_skip_count=1, **attrs)
    assert got.tolist() == [1.0, 0.0]


def test_tfidf_repeated_output_column_keeps_the_last_pool_ngram():
    x = np.array([1, 1, 2])
    attrs = dict(min_gram_length=1, max_gram_length=1, max_skip_count=0, ngram_counts=[0])
    got = evaluate(
        "TfIdfVectorizer", x, opset=9, mode="TF", ngram_indexes=[0, 0], pool_int64s=[1, 2], **attrs
    )
    assert got.tolist() == [1.0]


def test_tfidf_errors():
    base = TFIDF
    x = np.array([1, 2, 3])
    assert evaluate("TfIdfVectorizer", x, opset=9, **base).tolist() == [1.0, 1.0, 1.0]

    def bad(**change):
        return kind_of(lambda: evaluate("TfIdfVectorizer", x, opset=9, **{**base, **change}))

    assert bad(mode="BM25") == "invalid_model"
    assert bad(min_gram_length=3) == "invalid_model"
    assert bad(ngram_counts=[0, 3]) == "invalid_model"  # one item is no 2-gram
    assert bad(ngram_indexes=[0, 1]) == "invalid_model"
    assert bad(weights=[1.0]) == "invalid_model"
    assert bad(pool_strings=["a"]) == "invalid_model"  # both pools
    strings = {k: v for k, v in base.items() if k != "pool_int64s"}
    with pytest.raises(SessionError) as err:
        evaluate("TfIdfVectorizer", x, opset=9, pool_strings=["a", "b", "a", "b"], **strings)
    assert err.value.kind == "invalid_model" and "string input" in str(err.value)
    assert kind_of(lambda: evaluate("TfIdfVectorizer", x.astype(np.float32), opset=9, **base)) == (
        "invalid_model"
    )
    assert kind_of(lambda: evaluate("TfIdfVectorizer", x.reshape(1, 1, 3), opset=9, **base)) == (
        "invalid_input"
    )


def test_tfidf_exact_mode_gives_the_fast_bits_and_canonical_nan():
    attrs = {**TFIDF, "mode": "TFIDF", "max_skip_count": 2, "weights": [0.1, float("nan"), 1 / 3]}
    model = make_model(
        [helper.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs)],
        [tensor("x", TensorProto.INT64, [4, 9])],
        [tensor("y")],
        opset=9,
    )
    x = np.random.default_rng(0).integers(0, 4, (4, 9))
    exact = graphrt.Session(model, mode="exact", intra_op_threads=2).run(None, {"x": x})[0]
    fast = graphrt.Session(model, intra_op_threads=1).run(None, {"x": x})[0]
    np.testing.assert_array_equal(exact, fast)
    np.testing.assert_array_equal(exact, spec_tfidf(x, *attrs.values()))
    nan = exact[np.isnan(exact)]
    assert nan.size and (nan.view(np.uint32) == 0x7FC00000).all()


# -- ImageDecoder -------------------------------------------------------------------------------


def encoded(image: np.ndarray, fmt: str, mode: str | None = None) -> np.ndarray:
    from PIL import Image

    with io.BytesIO() as f:
        Image.fromarray(image, mode).save(f, format=fmt)
        return np.frombuffer(f.getvalue(), np.uint8).copy()


@pytest.mark.skipif(not HAS_OPSET_20, reason="the installed onnx has no opset 20")
@pytest.mark.parametrize("fmt", ["png", "bmp", "jpeg", "tiff", "ppm", "webp"])
def test_image_decoder_matches_pillow(fmt):
    image_module = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(0)
    image = np.repeat(np.repeat(rng.integers(0, 256, (4, 5, 3), np.uint8), 6, 0), 6, 1)
    data = encoded(image, fmt)
    decoded = image_module.open(io.BytesIO(data.tobytes()))
    rgb = np.asarray(decoded.convert("RGB"))
    for pixel_format, want in (
        ("RGB", rgb),
        ("BGR", rgb[:, :, ::-1]),
        ("Grayscale", np.asarray(decoded.convert("L"))[:, :, None]),
    ):
        got = evaluate("ImageDecoder", data, opset=20, pixel_format=pixel_format)
        assert got.dtype == np.uint8 and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    if fmt in ("png", "bmp", "tiff", "ppm"):  # lossless: the image itself
        np.testing.assert_array_equal(evaluate("ImageDecoder", data, opset=20), image)


@pytest.mark.skipif(not HAS_OPSET_20, reason="the installed onnx has no opset 20")
def test_image_decoder_other_modes_and_undecodable_streams():
    pytest.importorskip("PIL")
    rng = np.random.default_rng(1)
    rgba = rng.integers(0, 256, (5, 7, 4), np.uint8)
    got = evaluate("ImageDecoder", encoded(rgba, "png"), opset=20)
    np.testing.assert_array_equal(got, rgba[:, :, :3])  # alpha dropped
    gray = rng.integers(0, 256, (5, 7), np.uint8)
    got = evaluate("ImageDecoder", encoded(gray, "png"), opset=20, pixel_format="BGR")
    np.testing.assert_array_equal(got, np.repeat(gray[:, :, None], 3, 2))
    got = evaluate("ImageDecoder", encoded(gray, "png"), opset=20, pixel_format="Grayscale")
    np.testing.assert_array_equal(got, gray[:, :, None])
    # "If it can't decode for any reason ... it will return an empty matrix"
    for junk in (np.zeros(0, np.uint8), np.arange(100, dtype=np.uint8), encoded(gray, "png")[:40]):
        got = evaluate("ImageDecoder", junk, opset=20)
        assert got.shape == (0, 0, 3) and got.dtype == np.uint8
    assert kind_of(lambda: evaluate("ImageDecoder", junk, opset=20, pixel_format="HSV")) == (
        "invalid_model"
    )


@pytest.mark.skipif(not HAS_OPSET_20, reason="the installed onnx has no opset 20")
def test_image_decoder_without_pillow_refuses_the_session(monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)  # "import PIL" now raises ImportError
    monkeypatch.setitem(sys.modules, "PIL.Image", None)
    model = make_model(
        [helper.make_node("ImageDecoder", ["data"], ["y"], name="decode")],
        [tensor("data", TensorProto.UINT8, ["n"])],
        [tensor("y", TensorProto.UINT8)],
        opset=20,
    )
    with pytest.raises(SessionError) as err:
        graphrt.Session(model)
    assert err.value.kind == "unsupported_operator"
    assert err.value.operators == ["ImageDecoder (opset 20)"]
    assert err.value.node == "decode"
    assert "pip install graphrt-ops-basic[image]" in str(err.value)


@pytest.mark.skipif(not HAS_OPSET_20, reason="the installed onnx has no opset 20")
def test_image_decoder_in_a_session_in_exact_mode():
    pytest.importorskip("PIL")
    image = np.random.default_rng(2).integers(0, 256, (9, 11, 3), np.uint8)
    model = make_model(
        [helper.make_node("ImageDecoder", ["data"], ["y"], pixel_format="BGR")],
        [tensor("data", TensorProto.UINT8, ["n"])],
        [tensor("y", TensorProto.UINT8)],
        opset=20,
    )
    sess = graphrt.Session(model, mode="exact")
    for fmt in ("png", "bmp"):
        np.testing.assert_array_equal(
            sess.run(None, {"data": encoded(image, fmt)})[0], image[:, :, ::-1]
        )


# -- errors through a session, steady state --------------------------------------------------------


C = np.zeros((1, 8, 2), np.float32)
SIGNAL = np.zeros((1, 16, 1), np.float32)
STEP = ("step", np.array(4))
LENGTH = ["s", "step", "", "length"]


def mel(num=8, length=16, rate=8192, lower=0.0, upper=4096.0, ftype=F32):
    """MelWeightMatrix's inputs as initializers."""
    names = ("num", "length", "rate", "lower", "upper")
    return list(zip(names, mel_inputs(num, length, rate, lower, upper, ftype)))


def tfidf_bad(x=None, **change):
    x = np.array([[1, 2, 3]]) if x is None else x
    return ("TfIdfVectorizer", {"x": x}, [], 9, None, {**TFIDF, **change})


# (op, feeds, initializers, opset, input order, attributes) -> the kind: M(odel), I(nput),
# U(nsupported: a table over the planner's 2 GiB).
BAD = {
    "DFT over the last axis": (("DFT", {"x": C}, [], 17, None, {"axis": 2}), "M"),
    "dft_length 0": (("DFT", {"x": C}, [("n", np.array(0))], 17, None, {}), "I"),
    "run-time dft_length -3": (("DFT", {"x": C, "n": np.array(-3)}, [], 17, None, {}), "I"),
    "float dft_length": (("DFT", {"x": C}, [("n", np.array(4.0, F32))], 17, None, {}), "M"),
    "a last dimension of 3": (("DFT", {"x": np.zeros((1, 8, 3), F32)}, [], 17, None, {}), "I"),
    "inverse 2": (("DFT", {"x": C}, [], 17, None, {"inverse": 2}), "M"),
    "onesided complex input": (("DFT", {"x": C}, [], 17, None, {"onesided": 1}), "I"),
    "frame_length above the signal": (
        ("STFT", {"s": SIGNAL}, [STEP, ("length", np.array(20))], 17, LENGTH, {}),
        "I",
    ),
    "frame_step 0": (("STFT", {"s": SIGNAL}, [("step", np.array(0))], 17, None, {}), "I"),
    "float frame_step": (
        ("STFT", {"s": SIGNAL}, [("step", np.array(1.0, F32))], 17, None, {}),
        "M",
    ),
    "2-D window": (("STFT", {"s": SIGNAL}, [STEP, ("w", np.ones((2, 4), F32))], 17, None, {}), "I"),
    "window and frame_length differ": (
        (
            "STFT",
            {"s": SIGNAL},
            [STEP, ("w", np.ones(4, F32)), ("length", np.array(8))],
            17,
            None,
            {},
        ),
        "I",
    ),
    "negative window size": (("HannWindow", {}, [("n", np.array(-1))], 17, None, {}), "I"),
    "run-time negative size": (("BlackmanWindow", {"n": np.array(-4)}, [], 17, None, {}), "I"),
    "float window size": (("HammingWindow", {}, [("n", np.array(4.0, F32))], 17, None, {}), "M"),
    "string window type": (
        ("HannWindow", {}, [("n", np.array(4))], 17, None, {"output_datatype": 8}),
        "M",
    ),
    "window of 2^40": (("HannWindow", {}, [("n", np.array(1 << 40))], 17, None, {}), "U"),
    "edges above Nyquist": (("MelWeightMatrix", {}, mel(upper=10000.0), 17, None, {}), "I"),
    "edge below -700 Hz": (("MelWeightMatrix", {}, mel(lower=-800.0), 17, None, {}), "I"),
    "NaN edge": (("MelWeightMatrix", {}, mel(upper=float("nan")), 17, None, {}), "I"),
    "negative mel bins": (("MelWeightMatrix", {}, mel(num=-1), 17, None, {}), "I"),
    "sample rate 0": (("MelWeightMatrix", {}, mel(rate=0), 17, None, {}), "I"),
    "integer edge": (
        ("MelWeightMatrix", {}, mel(lower=0, upper=100, ftype=np.int64), 17, None, {}),
        "M",
    ),
    "2^40 mel bins": (("MelWeightMatrix", {}, mel(num=1 << 40), 17, None, {}), "U"),
    "ngram_counts beyond the pool": (tfidf_bad(ngram_counts=[0, 9]), "M"),
    "falling ngram_counts": (tfidf_bad(ngram_counts=[2, 0]), "M"),
    "ngram_indexes too few": (tfidf_bad(ngram_indexes=[0, 1]), "M"),
    "weights too few": (tfidf_bad(mode="TFIDF", weights=[1.0]), "M"),
    "ngram_counts missing": (tfidf_bad(ngram_counts=None), "M"),
    "min_gram_length above max": (tfidf_bad(min_gram_length=3), "M"),
    "float tokens": (tfidf_bad(np.zeros((1, 3), F32)), "M"),
    "uint64 tokens": (tfidf_bad(np.zeros((1, 3), np.uint64)), "M"),
    "3-D tokens": (tfidf_bad(np.zeros((1, 1, 3), np.int64)), "I"),
    "a column at 2^40": (tfidf_bad(ngram_indexes=[0, 1, 1 << 40]), "U"),
    "2-D encoded stream": (
        ("ImageDecoder", {"d": np.zeros((2, 4), np.uint8)}, [], 20, None, {}),
        "I",
    ),
    "int32 encoded stream": (("ImageDecoder", {"d": np.zeros(8, np.int32)}, [], 20, None, {}), "M"),
    "pixel format CMYK": (
        ("ImageDecoder", {"d": np.zeros(8, np.uint8)}, [], 20, None, {"pixel_format": "CMYK"}),
        "M",
    ),
}
KINDS = {"M": "invalid_model", "I": "invalid_input", "U": "unsupported"}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_attributes_and_inputs_name_the_node_and_their_kind(case):
    """Through a session, at creation (constants) or in a run: never a raw numpy error."""
    (op, feeds, inits, opset, order, attrs), kind = BAD[case]
    if opset >= 20 and not HAS_OPSET_20:
        pytest.skip("the installed onnx has no opset 20")
    if op == "ImageDecoder":
        pytest.importorskip("PIL")
    attrs = {k: v for k, v in attrs.items() if v is not None}
    with pytest.raises(SessionError) as err:
        model = one_node(op, feeds, inits, opset, order, **attrs)
        graphrt.Session(model, intra_op_threads=1).run(None, feeds)
    assert err.value.kind == KINDS[kind], str(err.value)
    assert err.value.node == "n" and f"{op} node 'n'" in str(err.value)
    assert "failed:" not in str(err.value)  # the kernel's own message, not a wrapped exception


# Static steps of the family, in each kernel form: a steady run allocates no array data.  Not
# listed, by design: TfIdfVectorizer (np.bincount allocates its counts, and only the pool's
# n-grams are counted, a number known from the values), ImageDecoder (its shape is the
# image's).  The windows and MelWeightMatrix of run-time sizes are dynamic but their tables
# come from a memo: listed too.
STATIC = [
    ("DFT", {"x": WAVES}, [], 17, None, {"axis": 1}),
    ("DFT", {"x": WAVES}, [("n", np.array(20))], 17, None, {"axis": 2, "inverse": 1}),
    ("DFT", {"x": WAVES[..., :1].copy()}, [], 17, None, {"axis": 1, "onesided": 1}),
    ("DFT", {"x": WAVES}, [], 17, None, {"axis": 1, "onesided": 1, "inverse": 1}),
    ("DFT", {"x": WAVES.astype(np.float16)}, [], 17, None, {"axis": 2}),
    ("DFT", {"x": WAVES.astype(np.float64)}, [], 17, None, {"axis": 1}),
    ("STFT", {"s": SOUND}, [STEP, ("w", HANN)], 17, None, {}),
    ("STFT", {"s": SOUND}, [STEP, ("length", np.array(16))], 17, ["s", "step", "", "length"], {}),
    ("STFT", {"s": np.concatenate([SOUND, SOUND], axis=2)}, [STEP, ("w", HANN)], 17, None, {}),
    ("STFT", {"s": SOUND.astype(np.float16)}, [STEP, ("w", HANN.astype(np.float16))], 17, None, {}),
    ("HannWindow", {"n": np.array(64)}, [], 17, None, {}),
    ("MelWeightMatrix", dict((k, v) for k, v in mel()), [], 17, None, {}),
]


@pytest.mark.skipif(spectral._gufuncs is None, reason="numpy 1's np.fft allocates its results")
@pytest.mark.parametrize(
    ("op", "feeds", "inits", "opset", "order", "attrs"),
    STATIC,
    ids=[f"{c[0]}-{k}" for k, c in enumerate(STATIC)],
)
def test_steady_runs_allocate_nothing(op, feeds, inits, opset, order, attrs):
    from tests._numpy_alloc import count_numpy_allocations

    sess = graphrt.Session(one_node(op, feeds, inits, opset, order, **attrs), intra_op_threads=1)
    out = {"y": np.empty_like(sess.run(None, feeds)[0])}
    for _ in range(3):
        sess.run(None, feeds, out=out)
    with count_numpy_allocations() as counter:
        sess.run(None, feeds, out=out)
    assert counter.count == 0, f"{counter.count} allocations ({counter.bytes} bytes)"


# -- a model of the family against onnxruntime --------------------------------------------------


def test_random_signal_model_matches_onnxruntime():
    pytest.importorskip("onnxruntime")
    if onnxruntime_limits()[1] < 17:
        pytest.skip("the installed onnxruntime cannot load opset 17")
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("HannWindow", ["size"], ["window"]),
        helper.make_node("STFT", ["signal", "step", "window"], ["spectrum"]),
        helper.make_node("DFT", ["x", "n"], ["dft"], axis=2, inverse=1),
        helper.make_node("HammingWindow", ["size"], ["hamming"], periodic=0),
        helper.make_node("BlackmanWindow", ["size"], ["blackman"], output_datatype=11),
        helper.make_node("MelWeightMatrix", ["bins", "n", "rate", "low", "high"], ["mel"]),
        helper.make_node(
            "TfIdfVectorizer",
            ["tokens"],
            ["tfidf"],
            mode="TFIDF",
            min_gram_length=1,
            max_gram_length=3,
            max_skip_count=2,
            ngram_counts=[0, 3, 7],
            ngram_indexes=list(range(6)),  # onnxruntime < 1.21 reads weights by column
            pool_int64s=[1, 2, 3, 1, 2, 2, 3, 1, 2, 3],
            weights=rng.uniform(0.5, 2, 6).tolist(),
        ),
    ]
    inits = [
        init("size", np.array(16)),
        init("step", np.array(6)),
        init("n", np.array(20)),
        init("bins", np.array(10)),
        init("rate", np.array(16000)),
        init("low", np.array(100.0, np.float32)),
        init("high", np.array(7000.0, np.float32)),
    ]
    outs = ["spectrum", "dft", "hamming", "blackman", "mel", "tfidf"]
    model = make_model(
        nodes,
        [
            tensor("signal", shape=[2, 100, 1]),
            tensor("x", shape=[3, 2, 16, 2]),
            tensor("tokens", TensorProto.INT64, [3, 15]),
        ],
        [tensor(o, TensorProto.DOUBLE if o == "blackman" else TensorProto.FLOAT) for o in outs],
        inits,
    )
    feeds = {
        "signal": rng.standard_normal((2, 100, 1)).astype(np.float32),
        "x": rng.standard_normal((3, 2, 16, 2)).astype(np.float32),
        "tokens": rng.integers(0, 5, (3, 15)),
    }
    got = graphrt.Session(model, intra_op_threads=1).run(outs, feeds)
    want = ort_session(model).run(outs, feeds)
    for name, g, w in zip(outs, got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, name
        np.testing.assert_allclose(
            g, w, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(w).max()), err_msg=name
        )
