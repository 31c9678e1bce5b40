"""Types, shapes and tensors for the fuzz suite's models.

Shapes lean on the small and the odd (0, 1, 3, 7) with empty dims, scalars and, now and then,
a large but bounded tensor (at most ``LARGE_ELEMENTS``).  Tensor contents come from a numpy
generator seeded by hypothesis (one draw per tensor, not per element) in one of a few flavours:
plain normal values, small integers, specials (NaN, infinities, signed zeros, extremes).
"""

from __future__ import annotations

import math
import re

import numpy as np
from hypothesis import strategies as st
from onnx import TensorProto

from graphrt import dtypes

#: The integers every integer-valued field is tried with.
EXTREME_INTS = (0, -1, 2**31, 2**62, 2**63 - 1, -(2**63), 2**31 - 1, -(2**31), 2**32)
SPECIAL_FLOATS = (math.nan, math.inf, -math.inf, 0.0, -0.0, 1e30, -1e30, 1e-40, 3.4e38)
#: The most elements of one generated tensor ("large but bounded").
LARGE_ELEMENTS = 1 << 20
SMALL_DIMS = (3, 1, 2, 4, 1, 2, 3, 5, 7, 0)

_ELEM = {TensorProto.DataType.Name(c).lower(): c for c in TensorProto.DataType.values()}
_TYPE = re.compile(r"^(tensor|seq|optional|sparse_tensor|map)\((.*)\)$")


def elem_code(name: str) -> int:
    return _ELEM.get(name, 0)


def rare(draw, n: int) -> bool:
    """True once in ``n`` draws; hypothesis's simplest draw (0) is the common case."""
    return draw(st.integers(0, n - 1)) == n - 1


def parse_type(type_str: str) -> tuple[str, object]:
    """("tensor", elem code), ("seq", inner), ("optional", inner) or ("other", text)."""
    m = _TYPE.match(type_str.strip())
    if not m:
        return ("other", type_str)
    kind, inner = m.groups()
    if kind == "tensor":
        return ("tensor", elem_code(inner))
    if kind in ("seq", "optional"):
        return (kind, parse_type(inner))
    return ("other", type_str)


def np_dtype(code: int) -> np.dtype | None:
    """The numpy dtype graphrt holds this element type in (None: graphrt cannot)."""
    try:
        return dtypes.from_onnx(code)
    except KeyError:
        return None


def usable_type(type_str: str) -> bool:
    kind, inner = parse_type(type_str)
    if kind == "tensor":
        return np_dtype(inner) is not None
    if kind in ("seq", "optional"):
        return usable_type_parsed(inner)
    return False


def usable_type_parsed(parsed: tuple[str, object]) -> bool:
    kind, inner = parsed
    if kind == "tensor":
        return np_dtype(inner) is not None
    if kind in ("seq", "optional"):
        return usable_type_parsed(inner)
    return False


@st.composite
def type_choice(draw, allowed: list[str]) -> str:
    """One of the allowed type strings, float32 tensors favoured (most kernels' home)."""
    usable = [t for t in allowed if usable_type(t)] or list(allowed)
    favoured = [t for t in usable if t in ("tensor(float)", "seq(tensor(float))")]
    if favoured and draw(st.integers(0, 9)) < 5:
        return favoured[0]
    return draw(st.sampled_from(sorted(usable)))


# -- shapes ------------------------------------------------------------------------------------
def _capped(shape: tuple[int, ...], cap: int = LARGE_ELEMENTS) -> tuple[int, ...]:
    """The shape, with dims halved until it holds at most ``cap`` elements."""
    dims = list(shape)
    while math.prod(dims) > cap:
        i = max(range(len(dims)), key=lambda k: dims[k])
        dims[i] = max(1, dims[i] // 2)
    return tuple(dims)


@st.composite
def dims(draw, rank: int) -> tuple[int, ...]:
    flavour = draw(st.integers(0, 99))
    if flavour < 80:
        return tuple(draw(st.sampled_from(SMALL_DIMS)) for _ in range(rank))
    if flavour < 95:
        return tuple(draw(st.integers(0, 17)) for _ in range(rank))
    # a large but bounded tensor: one long axis or a big square
    big = [draw(st.sampled_from(SMALL_DIMS[:6])) for _ in range(rank)]
    if rank:
        big[draw(st.integers(0, rank - 1))] = draw(st.sampled_from([1000, 4096, 65537, 1 << 20]))
        if rank >= 2 and draw(st.booleans()):
            big[-1] = big[-2] = draw(st.sampled_from([256, 513, 1024]))
    return _capped(tuple(big))


@st.composite
def base_shape(draw) -> tuple[int, ...]:
    rank = draw(st.sampled_from([2, 3, 4, 1, 0, 2, 3, 4, 4, 5]))
    return draw(dims(rank))


@st.composite
def related_shape(draw, base: tuple[int, ...]) -> tuple[int, ...]:
    """A shape for another operand: mostly the base, else broadcastable, empty or random."""
    how = draw(st.integers(0, 99))
    if how < 60:
        return base
    if how < 75 and base:  # broadcastable: leading dims dropped, some dims set to 1
        keep = draw(st.integers(0, len(base)))
        tail = list(base[len(base) - keep :])
        return tuple(1 if draw(st.integers(0, 3)) == 0 else d for d in tail)
    if how < 80:
        return ()
    if how < 85 and base:
        i = draw(st.integers(0, len(base) - 1))
        return base[:i] + (0,) + base[i + 1 :]
    return draw(dims(draw(st.integers(0, 5))))


# -- contents ----------------------------------------------------------------------------------
def fill(dtype: np.dtype, shape: tuple[int, ...], seed: int, flavour: int) -> np.ndarray:
    """A tensor of this dtype and shape; ``flavour`` 0 normal, 1 small ints, 2 specials,
    3 extremes of the type, 4 zeros."""
    rng = np.random.default_rng(seed)
    n = math.prod(shape)
    dtype = np.dtype(dtype)
    if dtype.kind == "O":
        words = np.array(["", "a", "hello", "\u00fcn\u00ef", "x" * 40, "0", "-1"], object)
        return words[rng.integers(0, len(words), n)].reshape(shape)
    if dtype == np.bool_:
        return (rng.random(n) < 0.5).reshape(shape)
    if dtype.kind == "c":
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype).reshape(shape)
    if flavour == 4:
        return np.zeros(shape, dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if flavour == 3:
            pool = np.array([info.min, info.max, 0, 1, info.max // 2], dtype)
            return pool[rng.integers(0, len(pool), n)].reshape(shape)
        if flavour == 0:
            return rng.integers(info.min, int(info.max) + 1, n, dtype=dtype).reshape(shape)
        lo = max(int(info.min), -3)
        return rng.integers(lo, 6, n).astype(dtype).reshape(shape)
    if dtype.kind not in "f" and dtype.itemsize <= 1 and "int" in dtype.name:  # int4/int2
        return rng.integers(-2, 2, n).astype(dtype).reshape(shape)
    x = rng.standard_normal(n) * (3.0 if flavour == 0 else 1.0)
    if flavour == 1:
        x = np.round(x * 2)
    elif flavour in (2, 3):
        pick = rng.random(n) < (0.3 if flavour == 2 else 0.8)
        x[pick] = np.array(SPECIAL_FLOATS)[rng.integers(0, len(SPECIAL_FLOATS), int(pick.sum()))]
    with np.errstate(all="ignore"):
        return x.astype(dtype).reshape(shape)


@st.composite
def tensor(draw, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    flavour = draw(st.sampled_from([0, 0, 0, 1, 1, 2, 3, 4]))
    return fill(dtype, shape, draw(st.integers(0, 2**32 - 1)), flavour)


@st.composite
def index_values(draw, base: tuple[int, ...], scalar: bool) -> list[int]:
    """Integers for an input that indexes, counts or shapes: near the base's rank and dims,
    now and then an extreme."""
    rank = len(base)
    if scalar:
        length = 1
    else:
        length = draw(st.sampled_from([rank, rank, rank, 1, 0, rank + 1, 2 * rank, 3]))
    near = st.sampled_from(sorted({*range(-rank - 1, rank + 2), *base, 0, 1, 2, 3}))
    value = st.one_of(near, near, near, near, near, near, st.sampled_from(EXTREME_INTS))
    return [draw(value) for _ in range(length)]
