"""The native entry points against numpy: exact bit for bit, fast within tolerance."""

from __future__ import annotations

import numpy as np
import pytest

from tests.simd._simd import ALL_PATHS, ISAS, bits, exact_reference, path_or_skip, simd

SIZES = [1, 7, 17, 64, 65]
SHAPES = [(m, k, n) for m in SIZES for k in (0, 1, 17, 65) for n in SIZES if (m + k + n) % 3 != 1]
SHAPES += [(1, 300, 1), (3, 257, 40), (33, 520, 70), (130, 64, 130), (13, 530, 600), (7, 1030, 290)]
SHAPES += [(200, 300, 7), (70, 530, 49), (300, 40, 3)]  # narrow C: roles swapped


def _rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _case(isa: str, seed: int, m: int, k: int, n: int):
    """A and B drawn for this shape, and an output filled with garbage (NaN)."""
    path_or_skip(isa)
    rng = np.random.default_rng(seed)
    return _rand(rng, m, k), _rand(rng, k, n), np.full((m, n), np.nan, np.float32)


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize(("m", "k", "n"), SHAPES)
def test_exact_is_bit_identical_to_exact_matmul(isa, m, k, n):
    a, b, out = _case(isa, m * 10007 + k * 101 + n, m, k, n)
    simd.gemm_exact(a, b, out, isa)
    np.testing.assert_array_equal(bits(out), bits(exact_reference(a, b)))


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize(("m", "k", "n"), [(23, 40, 71), (100, 300, 9)])  # C wide / C narrow
def test_exact_special_values_and_strides(isa, m, k, n):
    """NaN (any payload), infinities, signed zeros, subnormals; A transposed, B a row slice;
    a narrow C runs the kernel with the operands' roles swapped, depth past one block."""
    path_or_skip(isa)
    rng = np.random.default_rng(5)
    at = _rand(rng, k, m)  # A = at.T: column stride != 1
    b_big = _rand(rng, k, n + 19)
    at[3, 4] = np.nan
    at[5, 6] = np.inf
    at[7, :] = -0.0
    at[:, 2] = -0.0  # a row of A all -0: -0 where every product is -0, not +0 (0 + -0)
    b_big[2, 10] = np.float32(1e-40)  # subnormal
    b_big[9, 11] = -np.inf
    b_big[k - 1, 7] = np.nan  # a NaN in the last depth block
    at.view(np.uint32)[8, 9] = 0x7FA00001  # a signalling NaN payload
    b_big[:, 5] = np.abs(b_big[:, 5])  # C[2, 0] sums only -0 products: -0, not 0 + -0 = +0
    a, b = at.T, b_big[:, 5 : 5 + n]
    out = np.empty((m, n), np.float32)
    simd.gemm_exact(a, b, out, isa)
    with np.errstate(invalid="ignore"):  # inf * 0 and NaN terms are the point of the test
        ref = exact_reference(np.ascontiguousarray(a), np.ascontiguousarray(b))
    np.testing.assert_array_equal(bits(out), bits(ref))
    assert set(bits(out)[np.isnan(out)].tolist()) == {0x7FC00000}
    assert bits(out)[2, 0] == 0x80000000


def test_exact_paths_agree_and_rows_split_freely():
    rng = np.random.default_rng(11)
    a, b = _rand(rng, 150, 333), _rand(rng, 333, 77)
    whole = {}
    for isa in ISAS:
        out = np.empty((150, 77), np.float32)
        simd.gemm_exact(a, b, out, isa)
        whole[isa] = bits(out)
        split = np.empty_like(out)
        for lo, hi in [(0, 1), (1, 64), (64, 149), (149, 150)]:
            simd.gemm_exact(a, b, split, isa, row_begin=lo, row_end=hi)
        np.testing.assert_array_equal(bits(split), whole[isa])
    for isa in ISAS:
        np.testing.assert_array_equal(whole[isa], whole["scalar"])


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize(("m", "k", "n"), SHAPES)
def test_fast_matches_numpy(isa, m, k, n):
    a, b, out = _case(isa, m * 7 + k * 13 + n, m, k, n)
    simd.gemm(a, simd.pack_b(b, isa), out)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * np.sqrt(max(k, 1)))


def _epilogue_reference(a, b, alpha, bias, axis, act, lo, hi):
    y = alpha * (a.astype(np.float64) @ b.astype(np.float64))
    if bias is not None:
        y = y + (bias[None, :] if axis == "col" else bias[:, None])
    if act == "relu":
        y = np.maximum(y, 0)
    elif act == "clip":
        y = np.clip(y, lo, hi)
    elif act == "sigmoid":
        y = 1 / (1 + np.exp(-y))
    return y


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize("act", ["none", "relu", "clip", "sigmoid"])
@pytest.mark.parametrize("axis", [None, "col", "row"])
def test_fast_epilogues(isa, act, axis):
    path_or_skip(isa)
    rng = np.random.default_rng(3)
    m, k, n = 37, 300, 45  # two depth blocks: the epilogue runs once, after the last
    a, b = _rand(rng, m, k), _rand(rng, k, n)
    bias = None if axis is None else _rand(rng, n if axis == "col" else m)
    out = np.empty((m, n), np.float32)
    kw = {"bias": bias, "bias_axis": axis or "col", "alpha": 0.25, "activation": act}
    simd.gemm(a, simd.pack_b(b, isa), out, clip_min=-1.5, clip_max=2.0, **kw)
    ref = _epilogue_reference(a, b, 0.25, bias, axis, act, -1.5, 2.0)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("isa", ALL_PATHS)
def test_fast_rows_split_gives_the_same_bits(isa):
    """Row ranges are the thread split: they must not change a single bit."""
    path_or_skip(isa)
    rng = np.random.default_rng(8)
    a, b = _rand(rng, 131, 600), _rand(rng, 600, 70)
    packed = simd.pack_b(b, isa)
    whole, split = np.empty((131, 70), np.float32), np.empty((131, 70), np.float32)
    simd.gemm(a, packed, whole, activation="relu")
    for lo in range(0, 131, 64):
        simd.gemm(a, packed, split, activation="relu", row_begin=lo, row_end=min(131, lo + 64))
    np.testing.assert_array_equal(bits(split), bits(whole))


@pytest.mark.parametrize("isa", ALL_PATHS)
def test_fast_products_of_any_row_count_have_the_bits_of_those_rows_in_whole_tiles(isa):
    """A last tile of mr < MR rows computes those rows only (into C, or through the edge buffer
    for partial columns): every row count up to past two tiles on every ISA gives each row
    the bits it has in a product of many rows."""
    path_or_skip(isa)
    rng = np.random.default_rng(12)
    a, b, bias = _rand(rng, 48, 300), _rand(rng, 300, 70), _rand(rng, 70)
    packed = simd.pack_b(b, isa)
    kw = {"bias": bias, "bias_axis": "col", "activation": "relu"}
    whole = np.empty((48, 70), np.float32)
    simd.gemm(a, packed, whole, **kw)
    for m in range(4, 34):
        part = np.full((m, 70), np.nan, np.float32)
        simd.gemm(a[:m], packed, part, **kw)
        np.testing.assert_array_equal(bits(part), bits(whole[:m]), err_msg=f"{m} rows")


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize("k", [1024, 2048])
def test_fast_rows_4_kib_apart_have_the_bits_of_the_same_rows_further_apart(isa, k):
    """A whose rows lie 4 KiB apart runs shorter row tiles (the L1 cache's sets): the same
    values with a wider row stride, hence whole tiles, must give the same bits."""
    path_or_skip(isa)
    rng = np.random.default_rng(k)
    a, b, bias = _rand(rng, 40, k), _rand(rng, k, 70), _rand(rng, 70)
    wide = np.zeros((40, k + 16), np.float32)
    wide[:, :k] = a
    packed = simd.pack_b(b, isa)
    kw = {"bias": bias, "bias_axis": "col", "activation": "relu"}
    aliased, apart = np.empty((40, 70), np.float32), np.empty((40, 70), np.float32)
    simd.gemm(a, packed, aliased, **kw)
    simd.gemm(wide[:, :k], packed, apart, **kw)
    np.testing.assert_array_equal(bits(aliased), bits(apart))
    ref = np.maximum(a.astype(np.float64) @ b + bias, 0)
    np.testing.assert_allclose(aliased, ref, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize(("act", "axis"), [("relu", "col"), ("none", "row"), ("none", None)])
@pytest.mark.parametrize(("k", "n"), [(2048, 10), (1030, 200), (300, 129), (17, 1)])
def test_fast_rows_of_a_short_product_have_the_bits_of_the_same_rows_in_tiles(isa, act, axis, k, n):
    """A product of at most three rows runs a row at a time over several panels of B; each row
    must come out as it does inside a product of many rows (the micro-tiles), whatever the
    panels left over, the depth blocks (1030: three) and the epilogue."""
    path_or_skip(isa)
    rng = np.random.default_rng(k + n)
    m = 40
    a, b = _rand(rng, m, k), _rand(rng, k, n)
    bias = None if axis is None else _rand(rng, n if axis == "col" else m)
    packed = simd.pack_b(b, isa)
    kw = {"bias_axis": axis or "col", "alpha": 0.5, "activation": act}
    tiles = np.empty((m, n), np.float32)
    simd.gemm(a, packed, tiles, bias=bias, **kw)
    for lo, hi in [(0, 1), (5, 7), (37, 40)]:
        short = np.full((hi - lo, n), np.nan, np.float32)
        rows_bias = bias[lo:hi] if axis == "row" else bias
        simd.gemm(a[lo:hi], packed, short, bias=rows_bias, **kw)
        np.testing.assert_array_equal(bits(short), bits(tiles[lo:hi]))
        ranged = tiles.copy()  # and as a row range of the whole call
        simd.gemm(a, packed, ranged, bias=bias, row_begin=lo, row_end=hi, **kw)
        np.testing.assert_array_equal(bits(ranged), bits(tiles))
    ref = _epilogue_reference(a, b, 0.5, bias, axis, act, 0.0, 0.0)
    np.testing.assert_allclose(tiles, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_fast_one_row_splits_its_columns_over_threads_with_the_same_bits(isa, threads):
    path_or_skip(isa)
    rng = np.random.default_rng(21)
    a, b, bias = _rand(rng, 1, 3000), _rand(rng, 3000, 1100), _rand(rng, 1100)
    packed = simd.pack_b(b, isa)
    one, many = np.empty((1, 1100), np.float32), np.empty((1, 1100), np.float32)
    simd.gemm(a, packed, one, bias=bias, activation="relu")
    simd.gemm(a, packed, many, bias=bias, activation="relu", threads=threads)
    np.testing.assert_array_equal(bits(many), bits(one))
    ref = np.maximum(a.astype(np.float64) @ b + bias, 0)
    np.testing.assert_allclose(one, ref, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize(("act", "axis"), [("relu", "col"), ("sigmoid", "row"), ("none", None)])
@pytest.mark.parametrize("threads", [2, 3, 8])
def test_fast_thread_split_over_rows_and_columns_gives_the_same_bits(isa, act, axis, threads):
    """With threads the rows and the columns of B are cut into work items (a partial last
    panel, a column bias shifted with its chunk): not a bit may change."""
    path_or_skip(isa)
    rng = np.random.default_rng(11)
    m, k, n = 200, 384, 1000
    a, b = _rand(rng, m, k), _rand(rng, k, n)
    bias = None if axis is None else _rand(rng, n if axis == "col" else m)
    packed = simd.pack_b(b, isa)
    kw = {"bias": bias, "bias_axis": axis or "col", "activation": act}
    one, many = np.empty((m, n), np.float32), np.empty((m, n), np.float32)
    simd.gemm(a, packed, one, threads=1, **kw)
    simd.gemm(a, packed, many, threads=threads, **kw)
    np.testing.assert_array_equal(bits(many), bits(one))
    ref = _epilogue_reference(a, b, 1.0, bias, axis, act, 0.0, 0.0)
    np.testing.assert_allclose(many, ref, rtol=1e-4, atol=1e-4)


def test_fast_paths_agree_within_tolerance_and_repack():
    rng = np.random.default_rng(9)
    a, b, b2 = _rand(rng, 50, 129), _rand(rng, 129, 33), _rand(rng, 129, 33)
    outs = {}
    for isa in ISAS:
        packed = simd.pack_b(b, isa)
        assert (packed.k, packed.n, packed.isa) == (129, 33, isa)
        outs[isa] = np.empty((50, 33), np.float32)
        packed.repack(b2)
        simd.gemm(a, packed, outs[isa])
    for isa in ISAS:
        np.testing.assert_allclose(outs[isa], outs["scalar"], rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(outs[isa], a @ b2, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("isa", ALL_PATHS)
def test_pack_b_reads_any_strides(isa):
    path_or_skip(isa)
    rng = np.random.default_rng(10)
    big = _rand(rng, 80, 90)
    b = big[::-2, 3::3].T  # negative and non-unit strides
    a = _rand(rng, 9, b.shape[0])
    out = np.empty((9, b.shape[1]), np.float32)
    simd.gemm(a, simd.pack_b(b, isa), out)
    np.testing.assert_allclose(out, a @ np.ascontiguousarray(b), rtol=1e-5, atol=1e-4)


# B as views of other arrays: transposed (Gemm transB=1, packed column by column), with
# negative and non-unit strides on either axis, and row-major views (packed row by row).
B_VIEWS = {
    "transposed": lambda w, k, n: w[:n, :k].T,
    "transposed_rows_reversed": lambda w, k, n: w[:n, :k][::-1].T,
    "transposed_cols_reversed": lambda w, k, n: w[:n, :k][:, ::-1].T,
    "transposed_stepped": lambda w, k, n: w[: 2 * n : 2, : 3 * k : 3].T,
    "rows_reversed": lambda w, k, n: w[:k, :n][::-1],
    "columns_stepped": lambda w, k, n: w[:k, : 2 * n : 2],
}


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize("view", sorted(B_VIEWS))
@pytest.mark.parametrize(
    ("k", "n"), [(1, 1), (1, 45), (300, 1), (64, 32), (65, 33), (129, 70), (257, 17), (3, 100)]
)
def test_pack_b_of_a_view_gives_the_bits_of_its_contiguous_copy(isa, view, k, n):
    """Packing reads B in whichever order suits its strides; the panels, and so every
    product, must be those of the contiguous copy: I @ B is B itself, bit for bit."""
    path_or_skip(isa)
    rng = np.random.default_rng(k * 1009 + n)
    b = B_VIEWS[view](_rand(rng, 3 * max(k, n), 3 * max(k, n)), k, n)
    assert b.shape == (k, n)
    contiguous = np.ascontiguousarray(b)
    eye = np.eye(k, dtype=np.float32)
    out = np.full((k, n), np.nan, np.float32)
    simd.gemm(eye, simd.pack_b(b, isa), out)
    np.testing.assert_array_equal(bits(out), bits(contiguous))
    a = _rand(rng, 7, k)
    got, want = np.empty((7, n), np.float32), np.empty((7, n), np.float32)
    simd.gemm(a, simd.pack_b(b, isa), got)
    simd.gemm(a, simd.pack_b(contiguous, isa), want)
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize(("m", "threads"), [(1, 1), (3, 1), (200, 2)])
def test_gemm_call_gives_gemm_bits_and_keeps_its_arrays(isa, m, threads):
    """A GemmCall is gemm with its arguments checked once: the same bits on every call, its
    arrays held (nothing the caller dropped is read), bad arguments refused when it is made."""
    path_or_skip(isa)
    rng = np.random.default_rng(4)
    k, n = 32, 70
    a, bias = _rand(rng, m, k), _rand(rng, n)
    packed = simd.pack_b(_rand(rng, k, n), isa)
    want = np.empty((m, n), np.float32)
    simd.gemm(a, packed, want, bias=bias, activation="relu", threads=threads)
    out = np.empty((m, n), np.float32)
    call = simd.GemmCall(
        a.copy(), packed, out, bias.copy(), "col", 1.0, "relu", 0.0, 0.0, 0, -1, threads
    )
    del packed
    for _ in range(3):
        out[...] = np.nan
        call()
        np.testing.assert_array_equal(bits(out), bits(want))
    with pytest.raises(ValueError, match="columns but b was packed"):
        simd.GemmCall(_rand(rng, m, k + 1), simd.pack_b(_rand(rng, k, n), isa), out)
    with pytest.raises(ValueError, match="bias must have"):
        simd.GemmCall(a, simd.pack_b(_rand(rng, k, n), isa), out, bias=_rand(rng, n + 1))
