"""The kernel paths in sessions: exact bits everywhere, fast close, fallbacks, refusals."""

from __future__ import annotations

import collections
import concurrent.futures

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import graphrt
from graphrt.cli import main
from tests._models import init, make_model, mlp, small_cnn, tensor
from tests.simd._simd import (
    ALL_PATHS,
    ISAS,
    bits,
    counting_gemm_batch,
    counting_gemm_call,
    path_or_skip,
    simd,
)

PATHS = ("numpy", *ALL_PATHS)


@pytest.fixture
def native_calls(monkeypatch) -> collections.Counter:
    """Counts the native GEMM calls; fast mode takes the native GEMM on every path."""
    import graphrt_ops_simd.kernels as kernels

    monkeypatch.setattr(kernels, "FAST_NATIVE", dict.fromkeys(ALL_PATHS, True))
    calls: collections.Counter = collections.Counter()
    real_exact = kernels._native.gemm_exact

    def exact(*args, **kw):
        calls["gemm_exact"] += 1
        return real_exact(*args, **kw)

    def fast(args) -> None:
        calls["gemm"] += 1

    monkeypatch.setattr(kernels._native, "gemm_exact", exact)
    monkeypatch.setattr(
        kernels._native, "GemmCall", counting_gemm_call(kernels._native.GemmCall, fast)
    )
    return calls


def _session(model: onnx.ModelProto, path: str, **kw) -> graphrt.Session:
    if path != "numpy":
        path_or_skip(path)
    return graphrt.Session(model, kernel_path=path, **kw)


def test_plugin_provides_the_three_paths_ranked():
    from graphrt_ops_simd.plugin import kernel_paths

    paths = {p.name: p for p in kernel_paths()}
    assert {n: p.rank for n, p in paths.items()} == {"scalar": 10, "avx2": 20, "avx512": 30}
    for name, p in paths.items():
        assert p.available() == (name in ISAS)
        ops = {
            "Conv",
            "MatMul",
            "Gemm",
            "Exp",
            "Tanh",
            "Sigmoid",
            "Erf",
            "Relu",
            "Gelu",
            "MaxPool",
            "AveragePool",
            "GlobalAveragePool",
            "Concat",
            "NonMaxSuppression",
            "RNN",
            "GRU",
            "LSTM",
            "Attention",
            "LayerNormalization",
            "Softmax",
            "BatchNormalization",
            "MatMulInteger",
            "QLinearMatMul",
            "DynamicQuantizeLinear",
            "ConvInteger",
            "QLinearConv",
        }
        ours = (
            "FusedConv", "FusedMatMul", "FusedGemm", "Gelu", "Attention", "LayerNormalization",
            "FusedBatchNormalization", "FusedConvPool",
            # the blocked layout's operators, which this plugin's own table defines
            "BlockedConv", "BlockedMaxPool", "BlockedGlobalAveragePool", "FromBlocked",
        )  # fmt: skip
        fused = {("com.graphrt", op) for op in ours}
        assert set(p.kernels) == {("", op) for op in ops} | fused
    assert graphrt.Session(mlp(), kernel_path="auto").kernel_path == ISAS[-1]  # the best


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("path", PATHS)
def test_exact_mlp_is_bit_identical_on_every_path(path, threads):
    model = mlp(hidden=(200, 130), n_in=70, n_out=33)
    x = np.random.default_rng(1).standard_normal((150, 70)).astype(np.float32)
    x[3, 5] = np.nan
    ref = graphrt.Session(model, mode="exact", kernel_path="numpy", intra_op_threads=1)
    want = ref.run(None, {"x": x})[0]
    with _session(model, path, mode="exact", intra_op_threads=threads) as sess:
        assert sess.kernel_path == path
        got = sess.run(None, {"x": x})[0]
    np.testing.assert_array_equal(bits(got), bits(want))
    assert np.isnan(got).any()


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("path", PATHS)
def test_exact_cnn_is_bit_identical_on_every_path(path, threads):
    """Conv (exact numpy path), BatchNormalization, pools, Relu and the Gemm head (native)."""
    model = small_cnn(seed=3)
    x = np.random.default_rng(2).standard_normal((2, 3, 16, 16)).astype(np.float32)
    ref = graphrt.Session(model, mode="exact", kernel_path="numpy", intra_op_threads=1)
    want = ref.run(None, {"x": x})[0]
    with _session(model, path, mode="exact", intra_op_threads=threads) as sess:
        got = sess.run(None, {"x": x})[0]
        again = sess.run(None, {"x": x})[0]  # a reused plan and run state
    np.testing.assert_array_equal(bits(got), bits(want))
    np.testing.assert_array_equal(bits(again), bits(want))


def _fused_products_model() -> onnx.ModelProto:
    """MatMul + Add(bias) + Relu, MatMul + Add(a (1,) bias) + Sigmoid, Gemm + Relu:
    fused into FusedMatMul and FusedGemm, whose exact epilogues are ops-basic's."""
    rng = np.random.default_rng(7)
    w0 = rng.standard_normal((40, 30)).astype(np.float32)
    b0 = rng.standard_normal(30).astype(np.float32)
    w0[:, 4] = np.abs(w0[:, 4])
    b0[4] = -np.inf  # + inf from the product: NaN, rewritten to the canonical NaN
    w1 = rng.standard_normal((30, 20)).astype(np.float32)
    b1 = rng.standard_normal(1).astype(np.float32)
    w2 = rng.standard_normal((11, 20)).astype(np.float32)
    c2 = rng.standard_normal(11).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w0"], ["m0"]),
        helper.make_node("Add", ["m0", "b0"], ["a0"]),
        helper.make_node("Relu", ["a0"], ["r0"]),
        helper.make_node("MatMul", ["r0", "w1"], ["m1"]),
        helper.make_node("Add", ["m1", "b1"], ["a1"]),
        helper.make_node("Sigmoid", ["a1"], ["s1"]),
        helper.make_node("Gemm", ["s1", "w2", "c2"], ["g2"], transB=1, alpha=0.75),
        helper.make_node("Relu", ["g2"], ["y"]),
    ]
    inits = [init(n, v) for n, v in (("w0", w0), ("b0", b0), ("w1", w1), ("b1", b1),
                                     ("w2", w2), ("c2", c2))]  # fmt: skip
    outputs = [tensor("y", shape=[9, 11]), tensor("r0", shape=[9, 30])]  # r0: inf - inf's NaN
    return make_model(nodes, [tensor("x", shape=[9, 40])], outputs, inits)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("path", ALL_PATHS)
def test_exact_fused_products_run_natively_with_the_tables_bits(path, threads):
    """Exact FusedMatMul and FusedGemm: the native exact product, then ops-basic's epilogue
    (bias, exact Relu and Sigmoid, the NaN rewrite): numpy's bits, and native steps."""
    from graphrt.explain import runs_on

    model = _fused_products_model()
    x = np.random.default_rng(8).standard_normal((9, 40)).astype(np.float32)
    x[2, 3] = np.nan
    x[5, :] = np.float32(1e38)  # row 5: product column 4 +inf, then inf - inf in the bias
    ref = graphrt.Session(model, mode="exact", kernel_path="numpy")
    want = ref.run(None, {"x": x})
    with _session(model, path, mode="exact", intra_op_threads=threads) as sess:
        fused = [s for s in sess.plan_for([x]).steps if s.node.info.op_type.startswith("Fused")]
        assert sorted(s.node.info.op_type for s in fused) == ["FusedGemm", *["FusedMatMul"] * 2]
        assert all(runs_on(s) == "native" for s in fused)
        got = sess.run(None, {"x": x})
    for g, w in zip(got, want):
        np.testing.assert_array_equal(bits(g), bits(w))
        assert np.isnan(w).any()


def _gemm_model(ta: int, tb: int, c_shape, alpha: float, beta: float, const_b: bool):
    rng = np.random.default_rng(4)
    m, k, n = 19, 37, 23
    a_shape = (k, m) if ta else (m, k)
    b_shape = (n, k) if tb else (k, n)
    inits = [init("c", rng.standard_normal(c_shape).astype(np.float32))] if c_shape else []
    inputs = [tensor("a", shape=list(a_shape))]
    if const_b:
        inits.append(init("b", rng.standard_normal(b_shape).astype(np.float32)))
    else:
        inputs.append(tensor("b", shape=list(b_shape)))
    node = helper.make_node(
        "Gemm",
        ["a", "b", "c"] if c_shape else ["a", "b"],
        ["y"],
        transA=ta,
        transB=tb,
        alpha=alpha,
        beta=beta,
    )
    model = make_model([node], inputs, [tensor("y", shape=[m, n])], inits)
    feed = {"a": rng.standard_normal(a_shape).astype(np.float32)}
    if not const_b:
        feed["b"] = rng.standard_normal(b_shape).astype(np.float32)
    return model, feed


GEMM_CASES = [
    (0, 0, (23,), 1.0, 1.0, True),
    (1, 0, (1, 23), 0.5, 2.0, True),
    (0, 1, (19, 1), 1.5, -1.0, True),
    (1, 1, (19, 23), 1.0, 0.25, True),
    (0, 0, (), 2.0, 3.0, False),
    (0, 1, (23,), 1.0, 1.0, False),
    (1, 0, None, 0.75, 1.0, True),
]


@pytest.mark.parametrize("path", ALL_PATHS)
@pytest.mark.parametrize("case", GEMM_CASES, ids=lambda c: "ta{}tb{}c{}a{}b{}k{}".format(*c))
def test_gemm_exact_bits_and_fast_values(path, case, native_calls):
    model, feed = _gemm_model(*case)
    for mode in ("exact", "fast"):
        want = graphrt.Session(model, mode=mode, kernel_path="numpy").run(None, feed)[0]
        native_calls.clear()
        got = _session(model, path, mode=mode).run(None, feed)[0]
        if mode == "exact":
            np.testing.assert_array_equal(bits(got), bits(want))
            transposed_run_time_b = case[1] and not case[5]  # the one exact fallback
            assert (native_calls["gemm_exact"] > 0) != transposed_run_time_b
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
            assert (native_calls["gemm"] > 0) == case[5]  # native for a constant B


def _matmul_model(a_shape, b_shape, const_b: bool, dtype=TensorProto.FLOAT):
    rng = np.random.default_rng(6)
    npdt = helper.tensor_dtype_to_np_dtype(dtype)
    b = rng.standard_normal(b_shape).astype(npdt)
    inputs = [tensor("a", dtype, shape=list(a_shape))]
    inits = [init("b", b)] if const_b else []
    if not const_b:
        inputs.append(tensor("b", dtype, shape=list(b_shape)))
    model = make_model(
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        inputs,
        [helper.make_tensor_value_info("y", dtype, None)],
        inits,
    )
    feed = {"a": rng.standard_normal(a_shape).astype(npdt)}
    if not const_b:
        feed["b"] = b
    return model, feed


MATMUL_CASES = [
    ((7, 17), (17, 65), True),
    ((3, 5, 17), (17, 9), True),  # batch rows flattened onto one B
    ((2, 1, 5, 8), (3, 8, 4), False),  # broadcast batch dims
    ((4, 6), (2, 6, 3), True),
    ((9,), (9, 4), True),  # 1-D operands
    ((2, 9), (9,), False),
    ((65, 0), (0, 7), False),  # K = 0
    ((300, 64), (64, 70), True),  # several row blocks for the threads
]


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("path", ALL_PATHS)
@pytest.mark.parametrize("case", MATMUL_CASES, ids=str)
def test_matmul_exact_bits_and_fast_values(path, case, threads, native_calls):
    model, feed = _matmul_model(*case)
    for mode in ("exact", "fast"):
        want = graphrt.Session(model, mode=mode, kernel_path="numpy").run(None, feed)[0]
        native_calls.clear()
        got = _session(model, path, mode=mode, intra_op_threads=threads).run(None, feed)[0]
        assert got.shape == want.shape
        if mode == "exact":
            np.testing.assert_array_equal(bits(got), bits(want))
            assert native_calls["gemm_exact"] > 0
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
            native = case[2] and len(case[1]) == 2  # a constant matrix B
            assert (native_calls["gemm"] > 0) == native


def test_fast_mode_takes_the_native_gemm_on_vector_paths(monkeypatch):
    """Default rule: on avx2 and avx512 every fast product with a constant B runs natively,
    tiny, few-row, mid-size and many-row alike; the scalar path's fast mode never does."""
    import graphrt_ops_simd.kernels as kernels

    calls = []
    real = kernels._native.GemmCall
    monkeypatch.setattr(
        kernels._native, "GemmCall", counting_gemm_call(real, lambda args: calls.append(1))
    )
    for shape in ((4, 24), (128, 256), (32, 256), (4, 8192), (16, 128)):
        model, feed = _matmul_model(shape, (shape[1], 32), True)
        for path in ALL_PATHS:
            if path not in ISAS:
                continue
            calls.clear()
            _session(model, path).run(None, feed)
            native = kernels.fast_native(path, shape[0], shape[1] * 32 * 4)
            assert bool(calls) == native, (path, shape)
            assert native == (path != "scalar"), (path, shape)
    # a matrix-vector product (and up to three rows: a row at a time) and four rows alike
    for rows in (1, 3, 4):
        model, feed = _matmul_model((rows, 2048), (2048, 10), True)
        for path in ISAS:
            calls.clear()
            _session(model, path).run(None, feed)
            assert bool(calls) == (path != "scalar"), (path, rows)
    # ... unless B is too large to hold twice (its packed copy beside the model's) under
    # fewer than FAST_ANY_B_ROWS rows
    monkeypatch.setattr(kernels, "FAST_VECTOR_MAX_B_BYTES", 2048 * 10 * 4 - 1)
    for rows in (1, 7, 8):
        model, feed = _matmul_model((rows, 2048), (2048, 10), True)
        for path in ISAS:
            calls.clear()
            _session(model, path).run(None, feed)
            assert bool(calls) == (path != "scalar" and rows >= kernels.FAST_ANY_B_ROWS), path


def _product_model(a_shape, b_shape, const: str | None):
    """MatMul of a and b, one of them (``const``) an initializer, the other a graph input."""
    rng = np.random.default_rng(8)
    arrays = {
        "a": rng.standard_normal(a_shape).astype(np.float32),
        "b": rng.standard_normal(b_shape).astype(np.float32),
    }
    model = make_model(
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        [tensor(n, shape=list(v.shape)) for n, v in arrays.items() if n != const],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [init(n, v) for n, v in arrays.items() if n == const],
    )
    return model, arrays


def _run_time_b_native(monkeypatch, isa: str = "avx512") -> list:
    """The path ``isa`` (or a skip) with run-time B products on the native GEMM as where
    numpy's BLAS lacks AVX-512 kernels; the list each native product's run appends to."""
    path_or_skip(isa)
    import graphrt_ops_simd.kernels as kernels

    monkeypatch.setattr(kernels, "numpy_blas_lacks_avx512", lambda: True)
    calls: list = []
    record = calls.append
    monkeypatch.setattr(
        kernels._native, "GemmCall", counting_gemm_call(kernels._native.GemmCall, record)
    )
    monkeypatch.setattr(
        kernels._native, "GemmBatch", counting_gemm_batch(kernels._native.GemmBatch, record)
    )
    return calls


@pytest.mark.parametrize("isa", ["avx512", "avx2"])
@pytest.mark.parametrize(
    "a_shape, b_shape, const",
    [
        ((64, 128), (128, 96), None),  # two run-time operands
        ((3, 40, 64), (64, 48), None),  # A's batch rows flattened onto one B
        ((2, 3, 40, 64), (3, 64, 48), None),  # batch dims broadcast, one B per batch element
        ((96, 64), (64, 40), "a"),  # W @ X: a constant A
    ],
)
def test_fast_products_of_a_run_time_b_pack_it_per_run(a_shape, b_shape, const, isa, monkeypatch):
    """Where numpy's BLAS lacks AVX-512 kernels, a fast MatMul with a run-time B packs it into
    its run state's buffer at every run, on the avx512 and the avx2 path: the values of the B
    of that run (within fast mode's tolerance of float64), the same bits at 1 and 2 threads
    and for runs of different threads at once."""
    calls = _run_time_b_native(monkeypatch, isa)
    model, arrays = _product_model(a_shape, b_shape, const)
    feeds = [
        {n: v * scale + shift for n, v in arrays.items() if n != const}
        for scale, shift in ((1.0, 0.0), (-2.0, 0.5), (0.25, -1.0))
    ]
    one = _session(model, isa, intra_op_threads=1)
    two = _session(model, isa, intra_op_threads=2)
    serial = []
    for feed in feeds:
        operands = {**{n: v for n, v in arrays.items() if n == const}, **feed}
        want = np.matmul(operands["a"].astype(np.float64), operands["b"].astype(np.float64))
        calls.clear()
        got = one.run(None, feed)[0]
        assert calls, "the native GEMM did not run"
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(bits(two.run(None, feed)[0]), bits(got))
        serial.append(got)
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda i: one.run(None, feeds[i % 3])[0], range(24)))
    for i, got in enumerate(results):
        np.testing.assert_array_equal(bits(got), bits(serial[i % 3]))


@pytest.mark.parametrize(
    "a_shape, b_shape",
    [
        ((2, 3, 150, 64), (1, 3, 64, 40)),  # B matrices shared by two pairs (broadcast)
        ((2, 6, 150, 64), (2, 6, 64, 40)),  # one B a pair: whole pairs, with their repack
    ],
)
def test_batched_run_time_b_products_run_as_one_native_call_with_each_pairs_bits(
    monkeypatch, a_shape, b_shape
):
    """A batched MatMul of two run-time operands (attention's heads) repacks every B matrix
    and runs every product in one native call (_native.GemmBatch: rows in blocks over the
    plugin's threads, or, where each B serves one pair and the pairs alone fill the threads,
    each pair with its repack on one thread): each output matrix has the bits of its pair's
    own 2-D product, at 1, 2 and 4 threads."""
    calls = _run_time_b_native(monkeypatch)
    import graphrt_ops_simd.kernels as kernels

    batches: list = []
    real = kernels._native.GemmBatch
    monkeypatch.setattr(
        kernels._native, "GemmBatch", lambda *a, **kw: batches.append(1) or real(*a, **kw)
    )
    model, arrays = _product_model(a_shape, b_shape, None)  # 150 rows: 3 blocks
    pair_model, _ = _product_model((150, 64), (64, 40), None)
    pair = _session(pair_model, "avx512", intra_op_threads=1)
    a, b = arrays["a"], np.broadcast_to(arrays["b"], (*a_shape[:2], *b_shape[2:]))
    want = np.stack(
        [
            np.stack([pair.run(None, {"a": a[i, j], "b": b[i, j]})[0] for j in range(a_shape[1])])
            for i in range(a_shape[0])
        ]
    )
    assert calls, "the pairs' 2-D products did not run on the native GEMM"
    for threads in (1, 2, 4):
        batches.clear()
        session = _session(model, "avx512", intra_op_threads=threads)
        for _ in range(2):  # the second run repacks into the same buffers
            got = session.run(None, arrays)[0]
            np.testing.assert_array_equal(bits(got), bits(want))
        assert batches == [1], "the products were not one GemmBatch"


def test_gemm_batch_refuses_packs_that_do_not_match_their_b():
    """GemmBatch checks its B matrices against their PackedB before anything runs."""
    native = simd._native
    isa = ISAS[-1]
    b = np.ones((8, 16), np.float32)
    packed = native.pack_b(b, isa)
    with pytest.raises(ValueError, match="one B matrix per PackedB"):
        native.GemmBatch([packed], [], [], 1)
    with pytest.raises(ValueError, match="its PackedB's shape"):
        native.GemmBatch([packed], [np.ones((16, 8), np.float32)], [], 1)
    with pytest.raises(TypeError, match="GemmCall objects"):
        native.GemmBatch([packed], [b], [lambda: None], 1)
    with pytest.raises(TypeError, match="PackedB objects"):
        native.GemmBatch([b], [b], [], 1)


def test_a_fused_product_of_a_run_time_b_runs_natively_with_the_unfused_bits(monkeypatch):
    """A com.graphrt.FusedMatMul (bias, Relu) of two run-time operands (fuse_product_activation
    fuses constant weights only; a model or another pass may write one) runs its bias and Relu
    in the epilogue of the GEMM on the B packed per run: the values of relu(a @ b + bias), and
    the bits of MatMul -> Add -> Relu (the same GEMM, then numpy's add and maximum) at 1 and 2
    threads."""
    calls = _run_time_b_native(monkeypatch)
    rng = np.random.default_rng(9)
    bias = rng.standard_normal(48).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["a", "b"], ["p"]),
        helper.make_node("Add", ["p", "bias"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    inputs = [tensor("a", shape=[64, 96]), tensor("b", shape=[96, 48])]
    unfused = make_model(nodes, inputs, [tensor("y")], [init("bias", bias)])
    node = helper.make_node(
        "FusedMatMul", ["a", "b", "bias"], ["y"], domain="com.graphrt", activation="Relu"
    )
    model = make_model([node], inputs, [tensor("y")], [init("bias", bias)], domains=["com.graphrt"])
    fused = [_session(model, "avx512", intra_op_threads=t) for t in (1, 2)]
    plain = _session(unfused, "avx512", optimization_level="none")
    for seed in (1, 2):
        feed = {
            "a": rng.standard_normal((64, 96)).astype(np.float32) * seed,
            "b": rng.standard_normal((96, 48)).astype(np.float32) - seed,
        }
        want = np.maximum(feed["a"].astype(np.float64) @ feed["b"] + bias, 0.0)
        calls.clear()
        got = fused[0].run(None, feed)[0]
        assert calls, "the native GEMM did not run"
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(bits(fused[1].run(None, feed)[0]), bits(got))
        np.testing.assert_array_equal(bits(plain.run(None, feed)[0]), bits(got))


def test_run_time_b_products_stay_on_numpy_below_the_bounds(monkeypatch):
    """Fewer than FAST_ANY_B_ROWS rows, fewer than DYNAMIC_B_MIN_MACS multiply-adds per
    product, the scalar path, or a BLAS with AVX-512 kernels: numpy's product."""
    import graphrt_ops_simd.kernels as kernels

    monkeypatch.setattr(kernels, "numpy_blas_lacks_avx512", lambda: True)
    assert kernels.dynamic_b_native("avx512", 8, 1 << 16)
    assert not kernels.dynamic_b_native("avx512", 7, 1 << 20)
    assert not kernels.dynamic_b_native("avx512", 64, (1 << 16) - 1)
    assert kernels.dynamic_b_native("avx2", 64, 1 << 20)
    assert not kernels.dynamic_b_native("scalar", 64, 1 << 20)  # (exact mode's path)
    monkeypatch.setattr(kernels, "numpy_blas_lacks_avx512", lambda: False)
    assert not kernels.dynamic_b_native("avx512", 64, 1 << 20)


@pytest.mark.parametrize(
    "libs, lacks",
    [
        ([{"internal_api": "openblas", "filepath": "/x/numpy.libs/libopenblas.so",
           "architecture": "Haswell"}], True),
        ([{"internal_api": "openblas", "filepath": "/x/numpy.libs/libopenblas.so",
           "architecture": "SkylakeX"}], False),
        ([{"internal_api": "openblas", "filepath": "/x/scipy.libs/libopenblas.so",
           "architecture": "Haswell"}], False),  # not numpy's
        ([{"internal_api": "mkl", "filepath": "/x/numpy/libmkl_rt.so"}], False),
        ([{"internal_api": "openblas", "filepath": "/x/numpy.libs/libopenblas.so",
           "architecture": None}], False),
        ([], False),
    ],
)  # fmt: skip
def test_which_blas_lacks_avx512(libs, lacks, monkeypatch):
    """numpy's OpenBLAS core as threadpoolctl reports it; any other BLAS keeps numpy."""
    import threadpoolctl

    import graphrt_ops_simd.kernels as kernels

    monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda: libs)
    kernels.numpy_blas_lacks_avx512.cache_clear()
    try:
        assert kernels.numpy_blas_lacks_avx512() is lacks
    finally:
        kernels.numpy_blas_lacks_avx512.cache_clear()


@pytest.mark.parametrize("path", ["avx2", "avx512"])
def test_fast_products_of_few_rows_split_their_columns_over_threads(path, monkeypatch):
    """A fast native product of up to a row block (64 rows) from PARALLEL_THRESHOLD
    multiply-adds on gives its threads to gemm's column chunks (an MLP at batch 16), below it
    runs on one; the bits are those of a one-thread session."""
    path_or_skip(path)
    import graphrt_ops_simd.kernels as kernels

    threads_of = []
    real = kernels._native.GemmCall
    monkeypatch.setattr(
        kernels._native,
        "GemmCall",
        counting_gemm_call(real, lambda args: threads_of.append(args[11])),
    )
    for k, split in ((512, 2), (511, 1)):  # 16 x k @ k x 256: 2^21 multiply-adds at 512
        model, feed = _matmul_model((16, k), (k, 256), True)
        one = _session(model, path).run(None, feed)[0]
        threads_of.clear()
        two = _session(model, path, intra_op_threads=2).run(None, feed)[0]
        assert threads_of == [split], k
        np.testing.assert_array_equal(bits(two), bits(one))


@pytest.mark.parametrize("path", ALL_PATHS)
def test_other_dtypes_fall_back_to_numpy(path):
    model, feed = _matmul_model((5, 6), (6, 7), True, TensorProto.DOUBLE)
    for mode in ("exact", "fast"):
        want = graphrt.Session(model, mode=mode, kernel_path="numpy").run(None, feed)[0]
        got = _session(model, path, mode=mode).run(None, feed)[0]
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, want)


def test_shape_errors_are_the_tables_own():
    model, _ = _matmul_model((5, 6), (6, 7), False)
    feed = {"a": np.ones((5, 6), np.float32), "b": np.ones((5, 7), np.float32)}
    messages = []
    for path in ("numpy", ISAS[-1]):
        with pytest.raises(graphrt.SessionError) as info:
            graphrt.Session(model, kernel_path=path).run(None, feed)
        messages.append((info.value.kind, str(info.value)))
    assert messages[0] == messages[1]
    assert messages[0][0] == "invalid_input"


def test_forcing_an_unavailable_path_is_unsupported(monkeypatch):
    import graphrt_ops_simd.plugin as plugin

    monkeypatch.setattr(plugin._native, "available_isas", lambda: ["scalar"])
    for name in ("avx2", "avx512"):
        with pytest.raises(graphrt.SessionError) as info:
            graphrt.Session(mlp(), kernel_path=name)
        assert info.value.kind == "unsupported"
        assert name in str(info.value)
    auto = graphrt.Session(mlp(), kernel_path="auto")
    assert auto.kernel_path == "scalar"  # auto skips what is not available
    monkeypatch.setenv("GRAPHRT_KERNEL_PATH", "avx512")
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(mlp())
    assert info.value.kind == "unsupported"


def test_the_cpu_has_the_paths_the_run_expects():
    """`tox -e avx2-cpu` runs tests/simd under qemu on a Zen 3 model (no AVX-512) and names the
    paths it must see: were AVX-512 to show through, its other tests would prove nothing."""
    import os

    expected = os.environ.get("GRAPHRT_EXPECT_ISAS")
    if not expected:
        pytest.skip("GRAPHRT_EXPECT_ISAS is not set (tox -e avx2-cpu sets it)")
    assert ISAS == expected.split(",")
    assert graphrt.Session(mlp(), kernel_path="auto").kernel_path == ISAS[-1]


def test_native_refuses_an_unavailable_isa(monkeypatch):
    missing = [isa for isa in ALL_PATHS if isa not in ISAS]
    if not missing:
        pytest.skip("every ISA is available on this machine; nothing to refuse")
    a = np.ones((2, 2), np.float32)
    with pytest.raises(ValueError, match="not available"):
        simd.gemm_exact(a, a, np.empty((2, 2), np.float32), missing[0])
    with pytest.raises(ValueError, match="not available"):
        simd.pack_b(a, missing[0])


def test_cli_ops_shows_paths_and_the_auto_choice(capsys):
    assert main(["ops", "-q"]) == 0
    out = capsys.readouterr().out
    assert "kernel paths:" in out
    for name in ALL_PATHS:
        state = "available" if name in ISAS else "not available"
        assert f"  {name} (rank" in out and state in out
    assert f"auto picks: {ISAS[-1]}" in out


def test_env_path_applies_only_to_sessions_with_kernel_paths(monkeypatch):
    monkeypatch.setenv("GRAPHRT_KERNEL_PATH", "scalar")
    assert graphrt.Session(mlp()).kernel_path == "scalar"
    assert graphrt.Session(mlp(), plugins=["ops-basic"]).kernel_path == "numpy"
    with pytest.raises(graphrt.SessionError) as info:  # the option itself is never ignored
        graphrt.Session(mlp(), plugins=["ops-basic"], kernel_path="scalar")
    assert info.value.kind == "unsupported"
    monkeypatch.setenv("GRAPHRT_KERNEL_PATH", "avx5l2")  # a typo still fails where paths exist
    with pytest.raises(graphrt.SessionError, match="unknown kernel path 'avx5l2'"):
        graphrt.Session(mlp())


def _products_model() -> onnx.ModelProto:
    """MatMul then Gemm (alpha, beta, a per-column C): only operators ops-simd replaces."""
    rng = np.random.default_rng(2)
    w = rng.standard_normal((24, 40)).astype(np.float32)
    wo = rng.standard_normal((10, 40)).astype(np.float32)
    bo = rng.standard_normal(10).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Gemm", ["h", "wo", "bo"], ["y"], transB=1, alpha=0.5, beta=2.0),
    ]
    return make_model(
        nodes,
        [tensor("x", shape=[8, 24])],
        [tensor("y", shape=[8, 10])],
        [init("w", w), init("wo", wo), init("bo", bo)],
    )


@pytest.mark.parametrize("mode", ["fast", "exact"])
@pytest.mark.parametrize("path", ALL_PATHS)
def test_native_steady_state_allocates_no_array_data(path, mode, native_calls):
    from tests.test_alloc import assert_no_numpy_allocation

    sess = _session(_products_model(), path, mode=mode, intra_op_threads=2)
    x = np.random.default_rng(0).standard_normal((8, 24)).astype(np.float32)
    out = {"y": np.empty((8, 10), np.float32)}
    for _ in range(3):
        sess.run(None, {"x": x}, out=out)
    assert native_calls["gemm_exact" if mode == "exact" else "gemm"] > 0
    assert_no_numpy_allocation(lambda: sess.run(None, {"x": x}, out=out))
