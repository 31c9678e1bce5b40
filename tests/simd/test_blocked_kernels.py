"""The native kernels of the blocked (NCHWc) layout: MaxPool between blocked images, the
GlobalAveragePool of a blocked image into planar means and the layout copies both ways, against
plain numpy (and ops-basic's MaxPool for the zero a tie keeps) on every ISA, padding lanes of
NaN and infinities never reaching a channel, the same bits for any thread count, and each
refusal of bad arguments."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import strategies as st
from onnx import helper

import graphrt
from tests._models import make_model, tensor
from tests.simd._simd import ALL_PATHS, ISAS, bits, on_every_isa, path_or_skip, simd
from tests.simd.test_native_pool_gelu import maxpool_reference

_native = simd._native
F32 = np.float32
BLOCK = {"scalar": 8, "avx2": 8, "avx512": 16}


def _block(x: np.ndarray, b: int, fill: float = np.nan) -> np.ndarray:
    """Planar (N, C, H, W) -> blocked (N, CB, H, W, B), the padding lanes ``fill``."""
    n, c, h, w = x.shape
    cb = -(-c // b)
    full = np.full((n, cb * b, h, w), fill, F32)
    full[:, :c] = x
    return np.ascontiguousarray(full.reshape(n, cb, b, h, w).transpose(0, 1, 3, 4, 2))


def _unblock(xb: np.ndarray, c: int) -> np.ndarray:
    n, cb, h, w, b = xb.shape
    return np.ascontiguousarray(xb.transpose(0, 1, 4, 2, 3).reshape(n, cb * b, h, w)[:, :c])


def _same(got: np.ndarray, want: np.ndarray) -> None:
    """NaN where want has NaN (any payload), the same bits everywhere else."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    keep = ~np.isnan(want)
    np.testing.assert_array_equal(bits(got)[keep], bits(want)[keep])


def _out(h, w, kernel, strides, dilations, pads, ceil=False, end=None):
    end = pads if end is None else end
    out = []
    for a, n in enumerate((h, w)):
        span = n + pads[a] + end[a] - dilations[a] * (kernel[a] - 1) - 1
        out.append((-(-span // strides[a]) if ceil else span // strides[a]) + 1)
    return tuple(out)


def _maxpool(isa, x, kernel, strides, dilations, pads, out, threads=1, fill=np.nan):
    """MaxPool of the planar x through BlockedMaxPoolCall (x blocked with ``fill`` in its
    padding lanes), unblocked; y's floats past its end checked unwritten."""
    b = _native.blocked_block(isa)
    xb = _block(x, b, fill)
    shape = (*xb.shape[:2], *out, b)
    size = int(np.prod(shape))
    buf = np.full(size + 64, 7.0, F32)
    yb = buf[:size].reshape(shape)
    args = [list(kernel), list(strides), list(dilations), list(pads)]
    _native.BlockedMaxPoolCall(xb, yb, *args, isa, threads)()
    np.testing.assert_array_equal(buf[size:], 7.0)
    return _unblock(yb, x.shape[1])


def _ops_basic_maxpool(x, kernel, strides, dilations, pads, out):
    """ops-basic's planar MaxPool (numpy kernel path) with end pads that give at least ``out``
    outputs, cut to ``out``."""
    h, w = x.shape[2:]
    end = [max(0, (out[a] - 1) * strides[a] + dilations[a] * (kernel[a] - 1) + 1 - n - pads[a])
           for a, n in enumerate((h, w))]  # fmt: skip
    node = helper.make_node(
        "MaxPool", ["x"], ["y"], kernel_shape=list(kernel), strides=list(strides),
        dilations=list(dilations), pads=[*pads, *end],
    )  # fmt: skip
    model = make_model([node], [tensor("x", shape=list(x.shape))], [tensor("y")])
    y = graphrt.Session(model, kernel_path="numpy").run(None, {"x": x})[0]
    return y[:, :, : out[0], : out[1]]


# ---- blocked_block ---------------------------------------------------------------------------


@pytest.mark.parametrize("isa", ALL_PATHS)
def test_block_is_the_isas_vector_width(isa):
    path_or_skip(isa)
    assert _native.blocked_block(isa) == BLOCK[isa]


def test_unknown_isa_is_refused():
    with pytest.raises(ValueError, match="unknown isa 'sse9'"):
        _native.blocked_block("sse9")
    x = np.zeros((1, 1, 2, 2, 8), F32)
    with pytest.raises(ValueError, match="unknown isa"):
        _native.BlockedMeanCall(x, np.zeros((1, 8, 1, 1), F32), "sse9")


@pytest.mark.parametrize("isa", [p for p in ALL_PATHS if p != "scalar"])
def test_an_isa_this_cpu_lacks_is_refused_as_elsewhere(isa):
    if isa in ISAS:
        pytest.skip(f"{isa} is available here: nothing to refuse")
    with pytest.raises(ValueError, match="not available"):
        _native.blocked_block(isa)


# ---- layout copies ---------------------------------------------------------------------------

# (N, C, H, W): C a partial last block of 16 (20, 28: a whole half and a partial one) and 8
# (5), whole blocks, one channel; H * W with tails of every tile (1, 15, 169), whole tiles (64),
# more than a part (256) and a unit (1600 > 1024)
COPY_SHAPES = [
    (1, 20, 13, 13),
    (2, 28, 5, 7),
    (2, 5, 3, 5),
    (1, 16, 8, 8),
    (2, 1, 1, 1),
    (1, 33, 7, 9),
    (1, 8, 40, 40),
    (3, 17, 1, 15),
]


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize("shape", COPY_SHAPES)
def test_copies_are_exact_and_the_padding_lanes_zero(isa, shape):
    """Every bit kept both ways (NaN payloads, -0, infinities, subnormals); to_blocked writes
    +0 into the padding lanes, from_blocked reads none of them (NaN and inf there); neither
    writes past its y."""
    path_or_skip(isa)
    b = _native.blocked_block(isa)
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(F32)
    flat = x.reshape(-1)
    specials = np.array([0x80000000, 0x7F800000, 0xFF800000, 0x7FC01234, 0xFFA00001, 1], np.uint32)
    where = rng.integers(0, x.size, min(x.size, 6))
    flat.view(np.uint32)[where] = specials[: len(where)]

    cb = -(-shape[1] // b)
    size = shape[0] * cb * shape[2] * shape[3] * b
    buf = np.full(size + 64, np.nan, F32)
    yb = buf[:size].reshape(shape[0], cb, *shape[2:], b)
    _native.ToBlockedCall(x, yb, isa)()
    np.testing.assert_array_equal(bits(yb), bits(_block(x, b, 0.0)))
    assert np.isnan(buf[size:]).all()

    for fill in (np.nan, np.inf, -np.inf):
        xb = _block(x, b, fill)
        buf = np.full(x.size + 64, 7.0, F32)
        y = buf[: x.size].reshape(shape)
        _native.FromBlockedCall(xb, y, isa)()
        np.testing.assert_array_equal(bits(y), bits(x))
        np.testing.assert_array_equal(buf[x.size :], 7.0)


@pytest.mark.parametrize("isa", ALL_PATHS)
def test_copies_over_threads_write_every_unit(isa):
    """Units of 1024 positions over 1, 2 and 3 threads (the parts of a plane included)."""
    path_or_skip(isa)
    b = _native.blocked_block(isa)
    x = np.random.default_rng(2).standard_normal((2, 2 * b + 3, 45, 47)).astype(F32)
    want = _block(x, b, 0.0)
    for threads in (1, 2, 3):
        yb = np.full_like(want, np.nan)
        _native.ToBlockedCall(x, yb, isa, threads)()
        np.testing.assert_array_equal(bits(yb), bits(want))
        y = np.full_like(x, np.nan)
        _native.FromBlockedCall(_block(x, b), y, isa, threads)()
        np.testing.assert_array_equal(bits(y), bits(x))


@pytest.mark.parametrize("isa", ALL_PATHS)
def test_copies_of_nothing(isa):
    """No image, no channel or no position: nothing to copy, nothing refused."""
    path_or_skip(isa)
    b = _native.blocked_block(isa)
    for shape in [(0, 3, 4, 4), (2, 0, 4, 4), (1, 3, 0, 5)]:
        x = np.zeros(shape, F32)
        yb = np.zeros((shape[0], -(-shape[1] // b), *shape[2:], b), F32)
        _native.ToBlockedCall(x, yb, isa)()
        _native.FromBlockedCall(yb, x, isa)()


# ---- MaxPool ---------------------------------------------------------------------------------

# (N, C, H, W, kernel, strides, dilations, pads (top, left), ceil_mode, end pads): 3 x 3/2 (the
# fused rows: pads, ceil_mode's partial last window, rows of 1 and 2 outputs), dilated and
# other strides (the column buffer), asymmetric windows and pads, 1 x 1, a window bigger than x
GEOMETRIES = [
    (1, 20, 55, 55, (3, 3), (2, 2), (1, 1), (0, 0), False, None),
    (2, 5, 13, 13, (3, 3), (2, 2), (1, 1), (1, 1), False, None),
    (1, 20, 14, 14, (3, 3), (2, 2), (1, 1), (0, 0), True, None),
    (1, 9, 7, 20, (3, 3), (2, 2), (1, 1), (1, 1), True, (0, 0)),
    (1, 3, 4, 5, (3, 3), (2, 2), (1, 1), (0, 0), False, None),
    (1, 3, 3, 3, (3, 3), (2, 2), (1, 1), (1, 1), False, None),
    (1, 17, 11, 12, (3, 3), (2, 2), (2, 2), (1, 2), False, None),
    (1, 5, 9, 10, (3, 3), (1, 1), (1, 1), (1, 1), False, None),
    (2, 20, 14, 14, (2, 2), (2, 2), (1, 1), (0, 0), False, None),
    (1, 5, 9, 40, (3, 3), (3, 3), (1, 2), (1, 2), False, None),
    (1, 8, 3, 5, (2, 4), (1, 2), (1, 1), (1, 3), False, None),
    (1, 20, 6, 7, (1, 1), (1, 1), (1, 1), (0, 0), False, None),
    (1, 5, 5, 8, (5, 8), (1, 1), (1, 1), (0, 0), False, None),
    (1, 3, 4, 4, (6, 2), (1, 3), (1, 1), (2, 1), False, (3, 1)),
]


def _geometry_out(g):
    h, w, kernel, strides, dilations, pads, ceil, end = g[2:]
    return _out(h, w, kernel, strides, dilations, pads, ceil, end)


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("fill", [np.nan, np.inf])
def test_maxpool_values(isa, geometry, fill):
    """NaN and both infinities in windows' first, middle and last taps: exactly the reference
    window maxima, NaN where a window holds one; padding lanes of NaN or +inf reach no channel."""
    path_or_skip(isa)
    n, c, h, w, kernel, strides, dilations, pads = geometry[:8]
    out = _geometry_out(geometry)
    rng = np.random.default_rng(h * w + c)
    x = rng.standard_normal((n, c, h, w)).astype(F32)
    flat = x.reshape(n * c, h * w)
    flat[0, [0, -1, rng.integers(0, h * w)]] = np.nan
    flat[-1, rng.integers(0, h * w, 2)] = [np.inf, -np.inf]
    if n * c > 2:
        flat[1] = -np.inf
    got = _maxpool(isa, x, kernel, strides, dilations, pads, out, fill=fill)
    np.testing.assert_array_equal(got, maxpool_reference(x, kernel, strides, dilations, pads, out))


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_maxpool_keeps_ops_basics_zeros(isa, geometry):
    """Windows of -0, +0, -1 and -inf with some NaN: bit for bit ops-basic's planar MaxPool (the
    zero a tie keeps: columns down first, then across, the later tap on each tie)."""
    path_or_skip(isa)
    n, c, h, w, kernel, strides, dilations, pads = geometry[:8]
    out = _geometry_out(geometry)
    rng = np.random.default_rng(c * h + w)
    x = rng.choice(np.array([-0.0, 0.0, -0.0, 0.0, -1.0, -np.inf], F32), size=(n, c, h, w))
    x.reshape(-1)[rng.integers(0, x.size, 2)] = np.nan
    want = _ops_basic_maxpool(x, kernel, strides, dilations, pads, out)
    assert want.shape[2:] == out
    _same(_maxpool(isa, x, kernel, strides, dilations, pads, out), want)


def test_maxpool_same_bits_on_every_isa_and_thread_count():
    """Ties of signed zeros and NaN, over 1, 2 and 3 threads (above the split threshold) and
    every ISA's block: the same planar bits."""
    rng = np.random.default_rng(11)
    x = rng.choice(np.array([-0.0, 0.0, -2.0, 1.0], F32), size=(2, 20, 31, 29))
    x[1, 3, 4, 5] = np.nan
    for geometry in [((3, 3), (2, 2), (1, 1), (1, 1)), ((2, 3), (1, 2), (2, 1), (1, 0))]:
        out = _out(31, 29, *geometry)
        first = None
        for isa in [p for p in ALL_PATHS if p in ISAS]:
            for threads in (1, 2, 3):
                got = bits(_maxpool(isa, x, *geometry, out, threads))
                first = got if first is None else first
                np.testing.assert_array_equal(got, first, err_msg=f"{isa}, {threads} threads")


@pytest.mark.parametrize("isa", ALL_PATHS)
def test_maxpool_windows_wholly_in_the_pads_are_minus_infinity(isa):
    """Pads wider than the window: the first rows and columns of outputs see no tap of x (-inf);
    x with no row at all: every output -inf."""
    path_or_skip(isa)
    x = np.random.default_rng(1).standard_normal((1, 5, 4, 4)).astype(F32)
    got = _maxpool(isa, x, (2, 2), (1, 1), (1, 1), (3, 4), (6, 7))
    np.testing.assert_array_equal(got, maxpool_reference(x, (2, 2), (1, 1), (1, 1), (3, 4), (6, 7)))
    assert (got[:, :, :2] == -np.inf).all() and (got[:, :, :, :3] == -np.inf).all()
    assert np.isfinite(got[:, :, 2:, 3:]).all()
    empty = np.zeros((1, 5, 0, 4), F32)
    np.testing.assert_array_equal(
        _maxpool(isa, empty, (2, 2), (1, 1), (1, 1), (1, 1), (2, 2)), -np.inf
    )


@st.composite
def _windows(draw):
    kernel = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    strides = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilations = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pads = (draw(st.integers(0, kernel[0])), draw(st.integers(0, kernel[1])))
    end = (draw(st.integers(0, kernel[0])), draw(st.integers(0, kernel[1])))
    h, w = draw(st.integers(1, 12)), draw(st.integers(1, 23))
    out = _out(h, w, kernel, strides, dilations, pads, draw(st.booleans()), end)
    return dict(
        shape=(draw(st.integers(1, 2)), draw(st.integers(1, 35)), h, w),
        geometry=(kernel, strides, dilations, pads),
        out=tuple(max(o, 0) for o in out),
        seed=draw(st.integers(0, 2**31)),
    )


@on_every_isa(_windows())
def test_maxpool_property(isa, g):
    rng = np.random.default_rng(g["seed"])
    x = rng.standard_normal(g["shape"]).astype(F32)
    x.reshape(-1)[rng.integers(0, x.size, 2)] = [np.nan, np.inf]
    got = _maxpool(isa, x, *g["geometry"], g["out"], threads=1 + g["seed"] % 3)
    np.testing.assert_array_equal(got, maxpool_reference(x, *g["geometry"], g["out"]))


@pytest.mark.parametrize("isa", ALL_PATHS)
def test_maxpool_of_nothing(isa):
    """No output row or column, no image: nothing written, nothing refused."""
    path_or_skip(isa)
    b = _native.blocked_block(isa)
    x = np.zeros((1, 2, 5, 5, b), F32)
    for y in (np.zeros((1, 2, 0, 3, b), F32), np.zeros((1, 2, 3, 0, b), F32)):
        _native.BlockedMaxPoolCall(x, y, [3, 3], [1, 1], [1, 1], [0, 0], isa)()
    _native.BlockedMaxPoolCall(x[:0], np.zeros((0, 2, 3, 3, b), F32), [3, 3], [1, 1], [1, 1],
                               [0, 0], isa)()  # fmt: skip


# ---- GlobalAveragePool -----------------------------------------------------------------------


def _sequential_mean(x: np.ndarray) -> np.ndarray:
    """Each plane's float32 sum in ascending order (cumsum adds one by one), times 1 / (H * W)
    rounded once: the kernel's order, so its bits."""
    flat = x.reshape(*x.shape[:2], -1)
    with np.errstate(invalid="ignore"):  # inf - inf
        total = np.cumsum(flat, axis=2, dtype=F32)[..., -1]
    return (total * F32(1.0 / flat.shape[2]))[..., None, None]


# (N, C, H, W): light_squeezenet's last (1000 = 62.5 blocks of 16), partial blocks of 16 and 8,
# one position, block counts that leave groups of 4, 2 and 1 after those of 8
MEAN_SHAPES = [(1, 1000, 13, 13), (2, 20, 7, 7), (3, 5, 2, 3), (1, 16, 1, 1), (2, 121, 3, 1)]


@pytest.mark.parametrize("isa", ALL_PATHS)
@pytest.mark.parametrize("shape", MEAN_SHAPES)
def test_mean_values(isa, shape):
    """The ascending sum's bits, within a few ulps of the float64 mean; padding lanes of NaN
    reach no channel."""
    path_or_skip(isa)
    b = _native.blocked_block(isa)
    x = np.random.default_rng(sum(shape)).uniform(0.5, 1.5, shape).astype(F32)
    buf = np.full(shape[0] * shape[1] + 16, 7.0, F32)
    y = buf[: shape[0] * shape[1]].reshape(*shape[:2], 1, 1)
    _native.BlockedMeanCall(_block(x, b, np.nan), y, isa)()
    np.testing.assert_array_equal(bits(y), bits(_sequential_mean(x)))
    want = x.astype(np.float64).mean(axis=(2, 3), keepdims=True)
    np.testing.assert_allclose(y, want, rtol=1e-6)
    np.testing.assert_array_equal(buf[y.size :], 7.0)


@pytest.mark.parametrize("isa", ALL_PATHS)
def test_mean_of_specials_and_threads(isa):
    """NaN, infinities and zeros of both signs in real channels stay in their own channels, and
    padding lanes of +inf or NaN in none; the same bits over 1, 2 and 3 threads (above the split
    threshold)."""
    path_or_skip(isa)
    b = _native.blocked_block(isa)
    x = np.random.default_rng(9).standard_normal((2, 3 * b + 1, 23, 29)).astype(F32)
    x[0, 0, 3, 4] = np.nan
    x[0, 1, 0, 0] = np.inf
    x[1, 2, 5, 5], x[1, 2, 6, 6] = np.inf, -np.inf  # inf - inf: NaN
    x[1, 3] = -0.0  # all -0: the sum from -0 stays -0
    want = _sequential_mean(x)
    assert np.signbit(want[1, 3]).all() and np.isnan(want[0, 0]).all()
    for fill in (np.inf, np.nan):
        for threads in (1, 2, 3):
            y = np.full((2, 3 * b + 1, 1, 1), 7.0, F32)
            _native.BlockedMeanCall(_block(x, b, fill), y, isa, threads)()
            _same(y, want)


# ---- refusals --------------------------------------------------------------------------------


def test_bad_arguments_are_refused_by_name():
    isa = "scalar"  # B = 8
    x = np.zeros((1, 2, 6, 6, 8), F32)
    y = np.zeros((1, 2, 3, 3, 8), F32)
    pool = [[3, 3], [2, 2], [1, 1], [0, 0], isa]
    mp = _native.BlockedMaxPoolCall
    with pytest.raises(TypeError, match="x must be a float32 array"):
        mp(x.astype(np.float64), y, *pool)
    with pytest.raises(ValueError, match="x must have 5 dimension"):
        mp(x[0], y, *pool)
    with pytest.raises(
        ValueError, match="y's last axis must be the block 8 of isa 'scalar', got 16"
    ):
        mp(x, np.zeros((1, 2, 3, 3, 16), F32), *pool)
    with pytest.raises(ValueError, match="x must be C-contiguous"):
        mp(np.zeros((1, 2, 6, 12, 8), F32)[:, :, :, ::2], y, *pool)
    with pytest.raises(ValueError, match="images and channel blocks"):
        mp(x, np.zeros((1, 3, 3, 3, 8), F32), *pool)
    shared = np.zeros(x.size + y.size, F32)
    with pytest.raises(ValueError, match="out must not overlap x"):
        mp(
            shared[: x.size].reshape(x.shape),
            shared[x.size - 8 :][: y.size].reshape(y.shape),
            *pool,
        )
    with pytest.raises(ValueError, match="kernel must be two integers >= 1"):
        mp(x, y, [3, 0], *pool[1:])
    with pytest.raises(ValueError, match=r"pads must be two integers >= 0, got \(0, 0, 1, 1\)"):
        mp(x, y, *pool[:3], [0, 0, 1, 1], isa)
    with pytest.raises(ValueError, match="unsupported: the window reach"):
        mp(x, y, [3, 3], [2**62, 2], [1, 1], [0, 0], isa)
    with pytest.raises(ValueError, match="aligned float32"):
        raw = np.zeros(x.size + 1, F32).view(np.uint8)[2 : 2 + 4 * x.size]
        mp(raw.view(F32).reshape(x.shape), y, *pool)

    mean = _native.BlockedMeanCall
    with pytest.raises(ValueError, match=r"y must be \(N, C, 1, 1\)"):
        mean(x, np.zeros((1, 16, 2, 1), F32), isa)
    with pytest.raises(ValueError, match=r"y has 17 channels; 2 block\(s\) of 8 hold 9 to 16"):
        mean(x, np.zeros((1, 17, 1, 1), F32), isa)
    with pytest.raises(ValueError, match="y has 8 channels"):
        mean(x, np.zeros((1, 8, 1, 1), F32), isa)
    with pytest.raises(ValueError, match="no spatial position"):
        mean(np.zeros((1, 2, 0, 6, 8), F32), np.zeros((1, 16, 1, 1), F32), isa)
    with pytest.raises(ValueError, match="y must have 4 dimension"):
        mean(x, np.zeros((1, 16), F32), isa)

    planar = np.zeros((1, 13, 6, 6), F32)
    with pytest.raises(ValueError, match=r"x has 13 channels; 1 block\(s\) of 8 hold 1 to 8"):
        _native.ToBlockedCall(planar, np.zeros((1, 1, 6, 6, 8), F32), isa)
    with pytest.raises(ValueError, match="images and positions"):
        _native.ToBlockedCall(planar, np.zeros((1, 2, 6, 5, 8), F32), isa)
    with pytest.raises(ValueError, match=r"y has 13 channels; 1 block\(s\)"):
        _native.FromBlockedCall(np.zeros((1, 1, 6, 6, 8), F32), planar, isa)
    with pytest.raises(ValueError, match="x's last axis must be the block 8"):
        _native.FromBlockedCall(np.zeros((1, 1, 6, 6, 4), F32), planar, isa)
    with pytest.raises(ValueError, match="y must be C-contiguous"):
        _native.FromBlockedCall(x, np.zeros((1, 13, 6, 12), F32)[..., ::2], isa)
    both = np.zeros(16 * 36, F32)  # a planar x of 16 channels, a blocked y of 2 blocks: one buffer
    with pytest.raises(ValueError, match="out must not overlap x"):
        _native.ToBlockedCall(both.reshape(1, 16, 6, 6), both.reshape(1, 2, 6, 6, 8), isa)
