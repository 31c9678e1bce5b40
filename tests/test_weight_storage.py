"""``weight_storage="float16"/"bfloat16"``: weights kept as half-precision arrays (docs/fp16.md).

What is checked: the process holds less memory (RSS measured in fresh subprocesses), results
are those of the model whose weights were rounded to the half type and stored as float32
(fast mode: close; exact mode: the same bits, on every kernel path and thread count), and the
native GEMM's half-precision panels give the bits of float32 panels of the same values.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphrt
from tests._models import make_model, small_cnn, tensor
from tests._transformers import encoder_feed, minilm_encoder

HALF = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}
PATHS = ("numpy", "scalar", "avx2", "avx512")
VOCAB = 16384  # a large embedding table: weights well above the run's own memory


def rounded(model: onnx.ModelProto, storage: str) -> onnx.ModelProto:
    """The model with every float32 initializer rounded to ``storage`` and kept float32: what
    a half-stored session must compute."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for i, t in enumerate(out.graph.initializer):
        if t.data_type == TensorProto.FLOAT:
            w = numpy_helper.to_array(t)
            if w.size > 1:
                w = w.astype(HALF[storage]).astype(np.float32)
            out.graph.initializer[i].CopyFrom(numpy_helper.from_array(w, t.name))
    return out


def session(model: onnx.ModelProto, path: str | None = None, **options) -> graphrt.Session:
    """A session on ``path`` (skipped where this machine does not have that kernel path)."""
    if path is not None:
        options["kernel_path"] = path
    try:
        return graphrt.Session(model, **options)
    except graphrt.SessionError as exc:
        if path is not None and exc.kind == "unsupported":
            pytest.skip(f"kernel path {path!r} is not available here: {exc}")
        raise


def half_arrays(s: graphrt.Session) -> list[np.ndarray]:
    g = s._graph
    return [g.constants[v] for v in g.half_weights]


def bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint32)


# -- the encoder: memory and results ------------------------------------------------------------

_MEASURE = textwrap.dedent(
    """
    import json, os, sys
    import ml_dtypes  # noqa: F401 (its import, ~8 MiB, is not weight memory: before the baseline)
    import numpy as np
    import graphrt
    from graphrt import proto

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    path, storage = sys.argv[1], sys.argv[2]
    model = proto.load_model(path)  # in memory before the baseline, in every process alike
    feed = {k: v for k, v in np.load(sys.argv[3]).items()}
    before = rss()
    s = graphrt.Session(model, weight_storage=storage)
    created = rss()
    s.run(None, feed)
    ran = rss()
    print(json.dumps({"created": created - before, "ran": ran - before}))
    """
)


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    """The issue's encoder (4 layers, hidden 512) saved once, with its feed."""
    folder = tmp_path_factory.mktemp("encoder")
    model = minilm_encoder(layers=4, hidden=512, heads=8, vocab=VOCAB)
    path = str(folder / "encoder.onnx")
    onnx.save(model, path)
    feed = encoder_feed(2, 64, vocab=VOCAB)  # 128 rows: the native GEMM on avx2 and avx512
    feed_path = str(folder / "feed.npz")
    np.savez(feed_path, **feed)
    return model, path, feed, feed_path


def _growth(path: str, feed_path: str, storage: str) -> dict[str, int]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, path, storage, feed_path],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux /proc RSS")
@pytest.mark.parametrize("storage", ["float16", "bfloat16"])
def test_half_storage_shrinks_the_process(encoder, storage):
    """The issue's bound: RSS growth after session creation, and after the first run, at most
    0.6x of original storage's (each in a fresh process)."""
    _, path, _, feed_path = encoder
    full = _growth(path, feed_path, "original")
    half = _growth(path, feed_path, storage)
    weights = 4 * sum(
        numpy_helper.to_array(t).size for t in onnx.load(path).graph.initializer
    )  # ~80 MiB of float32 weights: noise of a few MiB does not matter
    assert full["created"] > 0.8 * weights, (full, weights)  # the measure sees the weights
    assert half["created"] <= 0.6 * full["created"], (storage, half, full)  # the line
    # after the first run: on the numpy and scalar paths the products widen their half weight
    # into float32 plan scratch per run (the native GEMM reads half panels): the slab holds
    # one float32 copy of the widest product weight more
    model = onnx.load(path)
    sizes = {t.name: numpy_helper.to_array(t).size for t in model.graph.initializer}
    widest = max(
        (sizes.get(i, 0) for n in model.graph.node if n.op_type in ("MatMul", "Gemm")
         for i in n.input),
        default=0,
    )  # fmt: skip
    numpy_products = importlib.util.find_spec("graphrt_ops_simd") is None or os.environ.get(
        "GRAPHRT_KERNEL_PATH"
    ) in ("numpy", "scalar")
    allowance = 4 * widest if numpy_products else 0
    assert half["ran"] <= 0.6 * full["ran"] + allowance, (storage, half, full, allowance)


@pytest.mark.parametrize("storage", ["float16", "bfloat16"])
def test_encoder_outputs_close_to_original(encoder, storage):
    model, _, feed, _ = encoder
    ref = session(model).run(None, feed)[0]
    s = session(model, weight_storage=storage)
    got = s.run(None, feed)[0]
    stored = half_arrays(s)
    assert len(stored) >= 24 and all(a.dtype == HALF[storage] for a in stored)
    assert got.dtype == np.float32
    # bfloat16 keeps 8 significant bits against float16's 11: a looser bound for it
    tol = 1e-2 if storage == "float16" else 5e-2
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
    # what it computes: the model with its weights rounded, stored as float32
    want = session(rounded(model, storage)).run(None, feed)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("path", PATHS)
def test_encoder_fast_mode_equals_the_rounded_model_on_each_path(encoder, path):
    model, _, feed, _ = encoder
    got = session(model, path, weight_storage="float16").run(None, feed)[0]
    want = session(rounded(model, "float16"), path).run(None, feed)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# -- exact mode: the same bits everywhere -------------------------------------------------------


def _exact_mlp(seed: int = 0) -> onnx.ModelProto:
    """Embedding, MatMul + bias + Relu, Gemm with a transposed B: weights from 32 KiB up."""
    rng = np.random.default_rng(seed)
    w = lambda *s: (rng.standard_normal(s) * 0.1).astype(np.float32)
    inits = [
        numpy_helper.from_array(w(300, 96), "emb"),
        numpy_helper.from_array(w(96, 256), "w1"),
        numpy_helper.from_array(w(256), "b1"),
        numpy_helper.from_array(w(40, 256), "w2"),  # Gemm transB: (n, k)
        numpy_helper.from_array(w(40), "b2"),
    ]
    nodes = [
        helper.make_node("Gather", ["emb", "ids"], ["e"]),
        helper.make_node("MatMul", ["e", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h"]),
        helper.make_node("Gemm", ["h", "w2", "b2"], ["y"], transB=1),
    ]
    return make_model(
        nodes,
        [tensor("ids", TensorProto.INT64, [150])],
        [tensor("y", shape=[150, 40])],
        inits,
    )


def _cnn(seed: int = 0) -> onnx.ModelProto:
    """Two 3x3 convolutions (32 -> 64 -> 64 channels), pooling and a Gemm head."""
    rng = np.random.default_rng(seed)
    w = lambda *s: (rng.standard_normal(s) * 0.05).astype(np.float32)
    inits = [
        numpy_helper.from_array(w(64, 32, 3, 3), "c1"),
        numpy_helper.from_array(w(64), "cb1"),
        numpy_helper.from_array(w(64, 64, 3, 3), "c2"),
        numpy_helper.from_array(w(10, 64), "fc"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "c1", "cb1"], ["a1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a1"], ["r1"]),
        helper.make_node("Conv", ["r1", "c2"], ["a2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["a2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1),
    ]
    return make_model(
        nodes, [tensor("x", shape=[2, 32, 20, 20])], [tensor("y", shape=[2, 10])], inits
    )


def _mlp_feed() -> dict[str, np.ndarray]:
    return {"ids": np.random.default_rng(1).integers(0, 300, 150)}


def _cnn_feed() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(2).standard_normal((2, 32, 20, 20)).astype(np.float32)}


MODELS = {"mlp": (_exact_mlp, _mlp_feed), "cnn": (_cnn, _cnn_feed)}


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("storage", ["float16", "bfloat16"])
def test_exact_mode_bits_are_the_rounded_models_everywhere(name, storage):
    """Exact mode with half weights: the bits of the rounded-float32 model in exact mode, on
    every kernel path (missing ones skipped) and at 1 and 2 threads."""
    make, feed_of = MODELS[name]
    model, feed = make(), feed_of()
    want = session(rounded(model, storage), "numpy", mode="exact").run(None, feed)[0]
    seen = 0
    for path in PATHS:
        for threads in (1, 2):
            try:
                s = graphrt.Session(
                    model,
                    kernel_path=path,
                    mode="exact",
                    weight_storage=storage,
                    intra_op_threads=threads,
                )
            except graphrt.SessionError as exc:
                assert exc.kind == "unsupported" and path != "numpy", exc
                continue
            assert half_arrays(s), "no weight was stored in half precision"
            got = s.run(None, feed)[0]
            np.testing.assert_array_equal(bits(got), bits(want), err_msg=f"{path} x{threads}")
            seen += 1
    assert seen >= 2


@pytest.mark.parametrize("path", PATHS)
def test_cnn_fast_mode_with_half_conv_weights(path):
    """A CNN whose convolution weights are stored float16 (the native conv packs them from a
    temporary float32 copy; numpy widens per run) computes the rounded model."""
    model, feed = _cnn(), _cnn_feed()
    s = session(model, path, weight_storage="float16")
    stored = {s._graph.names[v] for v in s._graph.half_weights}
    assert {"c1", "c2", "fc"} <= stored, stored
    got = s.run(None, feed)[0]
    want = session(rounded(model, "float16"), path).run(None, feed)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    ref = session(model, path).run(None, feed)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-2, atol=1e-3)


def test_small_weights_inputs_and_other_readers_stay_float32():
    """Below 1 KiB, weights a kernel without half support reads, and graph outputs are kept
    float32 (rounded): the rule of docs/fp16.md."""
    rng = np.random.default_rng(3)
    big = rng.standard_normal((64, 64)).astype(np.float32)
    small = rng.standard_normal((4, 64)).astype(np.float32)  # 1 KiB: the bound itself
    tiny = rng.standard_normal((2, 64)).astype(np.float32)
    model = make_model(
        [
            helper.make_node("MatMul", ["x", "big"], ["a"]),
            helper.make_node("MatMul", ["s", "small"], ["b"]),
            helper.make_node("MatMul", ["t", "tiny"], ["c"]),
            helper.make_node("Add", ["a", "big"], ["d"]),  # Add reads big too
        ],
        [tensor("x", shape=[64, 64]), tensor("s", shape=[3, 4]), tensor("t", shape=[3, 2])],
        [tensor("d", shape=[64, 64]), tensor("b", shape=[3, 64]), tensor("c", shape=[3, 64])],
        [numpy_helper.from_array(v, n) for n, v in (("big", big), ("small", small),
                                                     ("tiny", tiny))],
    )  # fmt: skip
    s = graphrt.Session(model, weight_storage="float16")
    assert {s._graph.names[v] for v in s._graph.half_weights} == {"small"}
    feed = {
        "x": rng.standard_normal((64, 64)).astype(np.float32),
        "s": rng.standard_normal((3, 4)).astype(np.float32),
        "t": rng.standard_normal((3, 2)).astype(np.float32),
    }
    got = s.run(None, feed)
    want = graphrt.Session(rounded(model, "float16")).run(None, feed)
    for g, w in zip(got, want):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


# -- the native GEMM's half panels --------------------------------------------------------------


def _special_half(rng: np.random.Generator, shape: tuple[int, int], dtype) -> np.ndarray:
    """Random values with zeros, -0, subnormals, infinities and the extremes mixed in."""
    x = rng.standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    finfo = ml_dtypes.finfo(dtype)
    specials = [
        0.0,
        -0.0,
        finfo.smallest_subnormal,
        -finfo.smallest_subnormal,
        finfo.smallest_normal,
        finfo.max,
        -finfo.max,
        3 * finfo.smallest_subnormal,
    ]
    count = min(len(specials), flat.size)
    flat[:count] = np.array(specials[:count]).astype(dtype)
    return x


@pytest.mark.parametrize("storage", ["float16", "bfloat16"])
def test_native_half_panels_give_the_float32_panels_bits(storage):
    simd = pytest.importorskip("graphrt_ops_simd", reason="graphrt-ops-simd is not installed")
    from graphrt_ops_simd import _native

    rng = np.random.default_rng(4)
    low = HALF[storage]
    for isa in simd.available_isas():
        for m, k, n in ((13, 37, 45), (130, 300, 70), (3, 5, 1)):
            a = (rng.standard_normal((m, k)) * 1e-3).astype(np.float32)
            for transposed in (False, True):
                w = _special_half(rng, (n, k) if transposed else (k, n), low)
                w = w.T if transposed else w
                with np.errstate(all="ignore"):
                    p32 = _native.pack_b(w.astype(np.float32), isa)
                ph = _native.pack_b_half(w.view(np.uint16), isa, storage)
                assert ph.nbytes * 2 == p32.nbytes
                bias = rng.standard_normal(n).astype(np.float32)
                for threads in (1, 2):
                    y32, yh = np.empty((m, n), np.float32), np.empty((m, n), np.float32)
                    with np.errstate(all="ignore"):
                        _native.gemm(a, p32, y32, bias, "col", 1.0, "relu", 0, 0, 0, -1, threads)
                        _native.gemm(a, ph, yh, bias, "col", 1.0, "relu", 0, 0, 0, -1, threads)
                    np.testing.assert_array_equal(bits(yh), bits(y32), err_msg=f"{isa} {m}x{k}x{n}")
    with pytest.raises(ValueError):
        _native.pack_b_half(np.zeros((2, 2), np.uint16), "scalar", "float8")
    with pytest.raises(TypeError):
        _native.pack_b_half(np.zeros((2, 2), np.float32), "scalar", "float16")


def test_native_half_widening_is_exact_for_every_float16():
    """All 65536 float16 bit patterns through a 1 x 1 product with A = 1 on each ISA: the
    widened value (NaN: a NaN), as numpy widens it, plus the product's +0 start (-0 -> +0)."""
    simd = pytest.importorskip("graphrt_ops_simd", reason="graphrt-ops-simd is not installed")
    from graphrt_ops_simd import _native

    every = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    with np.errstate(invalid="ignore"):
        want = np.float32(0) + every.astype(np.float32)
    for isa in simd.available_isas():
        packed = _native.pack_b_half(every.reshape(1, -1).view(np.uint16), isa, "float16")
        got = np.empty((1, every.size), np.float32)
        with np.errstate(all="ignore"):
            _native.gemm(np.ones((1, 1), np.float32), packed, got)
        nan = np.isnan(want)
        assert np.isnan(got[0][nan]).all(), isa
        np.testing.assert_array_equal(bits(got[0][~nan]), bits(want[~nan]), err_msg=isa)


CASES = {
    # name: (node, A's shape, constant B's shape)
    "matmul_batched_b": (helper.make_node("MatMul", ["a", "w"], ["y"]), [2, 9, 64], [2, 64, 40]),
    "matmul_vector_b": (helper.make_node("MatMul", ["a", "w"], ["y"]), [9, 300], [300]),
    "matmul_rows": (helper.make_node("MatMul", ["a", "w"], ["y"]), [3, 130, 64], [64, 48]),
    "gemm_trans_a": (helper.make_node("Gemm", ["a", "w"], ["y"], transA=1), [64, 140], [64, 33]),
    "gemm_trans_b_gemv": (
        helper.make_node("Gemm", ["a", "w"], ["y"], transB=1, alpha=0.5),
        [2, 64],
        [40, 64],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_products_with_half_b_compute_the_rounded_model(case, mode):
    """Batched, vector and transposed B, row-split products, Gemm's small-row path: every
    path computes the rounded model (exact mode: its bits)."""
    node, a_shape, b_shape = CASES[case]
    rng = np.random.default_rng(5)
    w = rng.standard_normal(b_shape).astype(np.float32)
    a = rng.standard_normal(a_shape).astype(np.float32)
    model = make_model(
        [node], [tensor("a", shape=a_shape)], [tensor("y")], [numpy_helper.from_array(w, "w")]
    )
    want = session(rounded(model, "float16"), "numpy", mode=mode).run(None, {"a": a})[0]
    for path in PATHS:
        try:
            s = graphrt.Session(model, kernel_path=path, mode=mode, weight_storage="float16")
        except graphrt.SessionError as exc:
            assert exc.kind == "unsupported" and path != "numpy", exc
            continue
        assert half_arrays(s), path
        got = s.run(None, {"a": a})[0]
        if mode == "exact":
            np.testing.assert_array_equal(bits(got), bits(want), err_msg=path)
        else:
            ref = session(rounded(model, "float16"), path).run(None, {"a": a})[0]
            np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6, err_msg=path)


@pytest.mark.parametrize("path", ["numpy", "avx512", "avx2"])
def test_batchnorm_folded_weights_stay_float32_and_compute_the_rounded_model(path):
    """A Conv weight with a BatchNormalization folded in (a pass's product, in place) is not
    a half value: it stays float32, and the grouped Conv's and the Gemm's weights go half."""
    model = small_cnn(channels=32)
    x = np.random.default_rng(6).standard_normal((2, 3, 16, 16)).astype(np.float32)
    s = session(model, path, weight_storage="float16")
    g = s._graph
    stored = {g.names[v] for v in g.half_weights}
    assert {"w2", "wf"} <= stored and not any("w1" in n for n in stored), stored
    fused = [v for v, c in g.constants.items() if "w1" in g.names[v]]
    assert fused and all(g.constants[v].dtype == np.float32 for v in fused)
    got = s.run(None, {"x": x})[0]
    want = session(rounded(model, "float16"), path).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
