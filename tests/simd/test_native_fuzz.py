"""The native entry points called directly with hypothesis-drawn extreme arguments (issue 13).

Conv (plan, stage, run), MaxPool, Concat, GEMM (pack, repack, fast and exact), the
element-wise functions (exact and fast), NaN canonicalisation, NonMaxSuppression, attention
and LayerNormalization get zero, negative and huge sizes, strides, pads, dilations, unit and
row ranges and thread counts, and arrays of the wrong shape, dtype, rank or layout (Fortran
order, steps, negative and zero strides, read-only, misaligned, huge broadcast views).  Each
call runs in a worker process (tests/fuzz/harness.py; many calls per process) and must return
or raise a Python exception: a crash (a signal, or an ASan report under ``tox -e sanitize``)
or a hang fails the test with the call that caused it.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.fuzz.harness import Case, Pipeline, Worker
from tests.simd._simd import ISAS

EXAMPLES = int(os.environ.get("GRAPHRT_NATIVE_FUZZ_EXAMPLES", "150"))
TARGET = "tests.simd._native_calls:execute"

SIZES = [0, 1, 2, 3, 4, 5, 7, 8, 16, 17, 64]
EXTREME = [-1, -(2**63), 2**31 - 1, 2**31, 2**40, 2**62, 2**63 - 1]
THREADS = [1, 1, 2, 3, 0, -1, 4, 256, 257, 100000, 2**31 - 1, -(2**31)]
LAYOUTS = [
    "fortran",
    "step",
    "neg",
    "neg_last",
    "readonly",
    "zero_stride",
    "misaligned",
    "noncontig_view",
]
DTYPES = ["float64", "float16", "int32", "uint8", "bool"]


def clean(shape) -> tuple:
    return ("float32", tuple(shape), "c")


@st.composite
def hostile_array(draw, shape: tuple[int, ...]) -> tuple:
    """The array, made wrong in one way: its shape, rank, dtype or layout."""
    how = draw(st.sampled_from(["shape", "rank", "dtype", "layout", "layout"]))
    if how == "shape" and shape:
        shape = list(shape)
        i = draw(st.integers(0, len(shape) - 1))
        shape[i] = draw(st.sampled_from([0, 1, shape[i] + 1, max(shape[i] - 1, 0), 9]))
        return clean(shape)
    if how == "rank":
        return clean(draw(st.lists(st.sampled_from([0, 1, 2, 3]), max_size=5)))
    if how == "dtype":
        return (draw(st.sampled_from(DTYPES)), tuple(shape), "c")
    return ("float32", tuple(shape), draw(st.sampled_from(LAYOUTS)))


def hostile_ints(length: int) -> st.SearchStrategy[list[int]]:
    """A list of the right length with one extreme value, or a list of the wrong length."""
    one = st.sampled_from(EXTREME + [0, -1])
    return st.one_of(
        st.lists(one, min_size=length, max_size=length),
        st.lists(st.sampled_from([1, 2, 0, 2**62]), max_size=length + 2),
    )


def isa() -> st.SearchStrategy[str]:
    return st.sampled_from(ISAS)


BAD_ISA = st.sampled_from(["avx512", "sse9", "", "AVX2"])
ROW = st.sampled_from([1, -1, -2, 2**62, 2**63 - 1, -(2**63), 64, 65])


@st.composite
def corrupt(draw, spec: dict, hostile: dict) -> dict:
    """The consistent spec with zero to three of its arguments made hostile."""
    count = draw(st.sampled_from([0, 0, 1, 1, 1, 2, 3]))
    for key in draw(
        st.lists(st.sampled_from(sorted(hostile)), min_size=count, max_size=count, unique=True)
    ):
        spec[key] = draw(hostile[key])
    return spec


def extent(size: int, kernel: int, stride: int, dilation: int, pad: int) -> int:
    return (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1


@st.composite
def window(draw, spatial: int = 2) -> dict:
    """Kernel, strides, dilations and pads that fit an input, and the input and output."""
    kernel = [draw(st.sampled_from([1, 2, 3, 5])) for _ in range(spatial)]
    strides = [draw(st.sampled_from([1, 1, 2, 3])) for _ in range(spatial)]
    dilations = [draw(st.sampled_from([1, 1, 2])) for _ in range(spatial)]
    pads = [draw(st.sampled_from([0, 0, 1, 2])) for _ in range(spatial)]
    if draw(st.integers(0, 7)) == 0:  # huge but sane: a pad and a stride of 2**29 on one axis
        pads[0] = strides[0] = 2**29
    sizes, out = [], []
    for k, s, d, p in zip(kernel, strides, dilations, pads):
        n = draw(st.sampled_from([1, 2, 3, 5, 8, 17, 33]))
        n = max(n, d * (k - 1) + 1 - 2 * p)
        sizes.append(n)
        out.append(extent(n, k, s, d, p))
    return {
        "kernel": kernel,
        "strides": strides,
        "dilations": dilations,
        "pads": pads,
        "sizes": sizes,
        "out": out,
    }


@st.composite
def conv_spec(draw) -> dict:
    g = draw(window())
    n, c = draw(st.sampled_from([1, 1, 2, 0])), draw(st.sampled_from([1, 3, 4, 8, 16]))
    group = draw(st.sampled_from([1, 1, 1, c, 2 if c % 2 == 0 else 1]))
    m = group * draw(st.sampled_from([1, 2, 4, 8, 16, 3]))
    x_shape = [max(n, 1), c, *g["sizes"]]
    y_shape = (max(n, 1), m, *g["out"])
    spec = {
        "fn": "conv",
        "w": clean((m, c // group, *g["kernel"])),
        "group": group,
        "x_shape": x_shape,
        "strides": g["strides"],
        "dilations": g["dilations"],
        "pads": g["pads"],
        "out": g["out"],
        "isa": draw(isa()),
        "kernel": draw(
            st.sampled_from(["auto", "auto", "direct", "lanes", "packed", "stream", "winograd"])
        ),
        "x": "fit",
        "work": "fit",
        "y": "fit",
        "bias": draw(st.sampled_from([None, clean((m,))])),
        "z": draw(st.sampled_from([None, None, "fit"])),
        "activation": draw(st.sampled_from(["none", "relu"])),
        "u0": 0,
        "u1": -1,
        "threads": draw(st.sampled_from([1, 2, 3, 0])),
    }
    return draw(
        corrupt(
            spec,
            {
                "w": hostile_array((m, c // group, *g["kernel"])),
                "group": st.sampled_from([0, -1, 2**62, c + 1, 3]),
                "x_shape": st.one_of(hostile_ints(4), st.just([n, c, *g["sizes"]])),
                "strides": hostile_ints(2),
                "dilations": hostile_ints(2),
                "pads": hostile_ints(2),
                "out": hostile_ints(2),
                "isa": BAD_ISA,
                "kernel": st.just("bogus"),
                "x": hostile_array(tuple(x_shape)),
                "work": hostile_array((1,)),
                "y": hostile_array(y_shape),
                "bias": hostile_array((m,)),
                "z": hostile_array(y_shape),
                "activation": st.sampled_from(["clip", "sigmoid", "x"]),
                "u0": ROW,
                "u1": ROW,
                "threads": st.sampled_from(THREADS),
            },
        )
    )


@st.composite
def maxpool_spec(draw) -> dict:
    g = draw(window())
    n, c = draw(st.sampled_from([1, 2, 0])), draw(st.sampled_from([1, 3, 8, 0]))
    x_shape = (n, c, *g["sizes"])
    y_shape = (n, c, *g["out"])
    spec = {
        "fn": "maxpool2d",
        "x": clean(x_shape),
        "y": "fit",
        "y_shape": y_shape,
        "kernel": g["kernel"],
        "strides": g["strides"],
        "dilations": g["dilations"],
        "pads": g["pads"],
        "isa": draw(isa()),
        "plane_begin": 0,
        "plane_end": -1,
        "threads": draw(st.sampled_from([1, 2, 3, 0])),
    }
    return draw(
        corrupt(
            spec,
            {
                "x": hostile_array(x_shape),
                "y": hostile_array(y_shape),
                "kernel": hostile_ints(2),
                "strides": hostile_ints(2),
                "dilations": hostile_ints(2),
                "pads": hostile_ints(2),
                "isa": BAD_ISA,
                "plane_begin": ROW,
                "plane_end": ROW,
                "threads": st.sampled_from(THREADS),
                "y_shape": st.just((n, c, *(o + 1 for o in g["out"]))),
            },
        )
    )


@st.composite
def concat_spec(draw) -> dict:
    rank = draw(st.integers(1, 4))
    shape = [draw(st.sampled_from([1, 2, 3, 5, 0])) for _ in range(rank)]
    axis = draw(st.integers(0, rank - 1))
    xs, total = [], 0
    for _ in range(draw(st.integers(1, 4))):
        s = list(shape)
        s[axis] = draw(st.sampled_from([1, 2, 3, 0]))
        total += s[axis]
        xs.append(clean(s))
    out = list(shape)
    out[axis] = total
    spec = {
        "fn": "concat",
        "xs": xs,
        "out": clean(out),
        "axis": axis,
        "threads": draw(st.sampled_from([1, 2, 3])),
    }
    spec = draw(
        corrupt(
            spec,
            {
                "out": hostile_array(tuple(out)),
                "axis": st.sampled_from([-1, rank, *EXTREME]),
                "threads": st.sampled_from(THREADS),
                "xs": st.lists(hostile_array(tuple(shape)), max_size=3),
            },
        )
    )
    if draw(st.integers(0, 5)) == 0 and spec["xs"]:  # one input of the wrong shape or layout
        spec["xs"] = list(spec["xs"])
        spec["xs"][0] = draw(hostile_array(xs[0][1]))
    return spec


@st.composite
def gemm_spec(draw) -> dict:
    m, k, n = (draw(st.sampled_from([0, 1, 2, 3, 7, 16, 65, 130])) for _ in range(3))
    spec = {
        "fn": draw(st.sampled_from(["gemm", "gemm", "gemm_exact"])),
        "a": clean((m, k)),
        "b": clean((k, n)),
        "out": clean((m, n)),
        "repack": draw(st.sampled_from([None, None, clean((k, n))])),
        "bias": draw(st.sampled_from([None, clean((n,))])),
        "bias_axis": "col",
        "alpha": draw(st.sampled_from([1.0, 0.5, -2.0])),
        "activation": draw(st.sampled_from(["none", "relu", "clip", "sigmoid"])),
        "clip_min": 0.0,
        "clip_max": 6.0,
        "isa": draw(isa()),
        "row_begin": 0,
        "row_end": -1,
        "threads": draw(st.sampled_from([1, 2, 3, 0])),
    }
    if draw(st.booleans()):  # a strided a: any strides are allowed
        spec["a"] = ("float32", (m, k), draw(st.sampled_from(["fortran", "step", "neg"])))
    return draw(
        corrupt(
            spec,
            {
                "a": hostile_array((m, k)),
                "b": hostile_array((k, n)),
                "out": hostile_array((m, n)),
                "repack": hostile_array((k, n)),
                "bias": hostile_array((n,)),
                "bias_axis": st.sampled_from(["row", "diag"]),
                "alpha": st.sampled_from([float("nan"), float("inf")]),
                "activation": st.just("bogus"),
                "clip_min": st.sampled_from([float("nan"), 7.0]),
                "isa": BAD_ISA,
                "row_begin": ROW,
                "row_end": ROW,
                "threads": st.sampled_from(THREADS),
            },
        )
    )


@st.composite
def unary_spec(draw, fast: bool = False) -> dict:
    """unary (and canonicalize_nan), or with ``fast`` unary_fast (gelu, erf; exp is unknown)."""
    n = draw(st.sampled_from([0, 1, 7, 16, 1000, 1 << 17, 5]))
    shape = (n,) if draw(st.booleans()) else (2, n)
    fns = ["unary_fast"] if fast else ["unary"] * 4 + ["canonicalize_nan"]
    ops = ["gelu", "erf"] if fast else ["exp", "tanh", "sigmoid", "erf", "gelu"]
    spec = {
        "fn": draw(st.sampled_from(fns)),
        "op": draw(st.sampled_from(ops)),
        "x": clean(shape),
        "out": draw(st.sampled_from(["same", clean(shape)])),
        "isa": draw(isa()),
        "begin": 0,
        "end": -1,
        "threads": draw(st.sampled_from([1, 2, 3])),
    }
    return draw(
        corrupt(
            spec,
            {
                "op": st.sampled_from(["log", "exp"] if fast else ["log"]),
                "x": hostile_array(shape),
                "out": hostile_array(shape),
                "isa": BAD_ISA,
                "begin": ROW,
                "end": st.sampled_from([0, 3, n + 1, 2**62, -2]),
                "threads": st.sampled_from(THREADS),
            },
        )
    )


@st.composite
def nms_spec(draw) -> dict:
    b, c, n = (draw(st.sampled_from(v)) for v in ([1, 2, 0], [1, 3, 0], [0, 1, 5, 300]))
    spec = {
        "fn": "nms",
        "boxes": clean((b, n, 4)),
        "scores": clean((b, c, n)),
        "max_per_class": draw(st.sampled_from([3, 0, 1, 100])),
        "iou": draw(st.sampled_from([0.5, 0.0, 1.0])),
        "score_threshold": draw(st.sampled_from([None, 0.0, float("-inf")])),
        "center": draw(st.sampled_from([0, 1])),
        "isa": draw(isa()),
        "threads": draw(st.sampled_from([1, 2, 3])),
    }
    if draw(st.booleans()):  # any strides are allowed
        spec["boxes"] = ("float32", (b, n, 4), draw(st.sampled_from(["fortran", "neg", "step"])))
    return draw(
        corrupt(
            spec,
            {
                "boxes": hostile_array((b, n, 4)),
                "scores": hostile_array((b, c, n)),
                "max_per_class": st.sampled_from([2**62, 2**63 - 1, -1, -(2**63)]),
                "iou": st.sampled_from([float("nan"), -1.0, 2.0]),
                "score_threshold": st.sampled_from([float("nan")]),
                "center": st.sampled_from([2, -1]),
                "isa": BAD_ISA,
                "threads": st.sampled_from(THREADS),
            },
        )
    )


#: Zero-stride views of any size: huge head counts, lengths and head sizes in no memory.
HUGE = [
    ("float32", (1, 1 << 30, 1, 1), "broadcast"),
    ("float32", (1, 1, 1 << 40, 4), "broadcast"),
    ("float32", (1, 1, 2, 1 << 40), "broadcast"),
    ("float32", (1 << 20, 1 << 20, 1, 1), "broadcast"),
]


@st.composite
def attention_spec(draw) -> dict:
    b, hkv = draw(st.sampled_from([1, 2, 0])), draw(st.sampled_from([1, 2, 3]))
    hq = hkv * draw(st.sampled_from([1, 2, 4]))
    q_len, kv_len = (draw(st.sampled_from([0, 1, 3, 8, 17, 65])) for _ in range(2))
    d, dv = (draw(st.sampled_from([0, 1, 4, 16, 33])) for _ in range(2))
    q, k, v = (b, hq, q_len, d), (b, hkv, kv_len, d), (b, hkv, kv_len, dv)
    y, full = (b, hq, q_len, dv), (b, hq, q_len, kv_len)
    masks = [None, None, clean((b, 1, 1, kv_len)), clean(full), clean((1, 1, q_len, kv_len))]
    spec = {
        "fn": "attention",
        "q": clean(q),
        "k": clean(k),
        "v": clean(v),
        "mask": draw(st.sampled_from(masks)),
        "y": clean(y),
        "scale": draw(st.sampled_from([0.125, 1.0, 0.0, -3.0])),
        "isa": draw(isa()),
        "threads": draw(st.sampled_from([1, 2, 3, 0])),
    }
    for key, shape in (("q", q), ("k", k), ("v", v)):  # any strides are allowed
        if draw(st.integers(0, 3)) == 0:
            spec[key] = ("float32", shape, draw(st.sampled_from(["fortran", "step", "neg"])))
    huge = st.sampled_from(HUGE)
    return draw(
        corrupt(
            spec,
            {
                "q": st.one_of(hostile_array(q), huge),
                "k": st.one_of(hostile_array(k), huge),
                "v": st.one_of(hostile_array(v), huge),
                "mask": st.one_of(hostile_array(full), huge),
                "y": hostile_array(y),
                "scale": st.sampled_from([float("nan"), float("inf"), -float("inf"), 3e38]),
                "isa": BAD_ISA,
                "threads": st.sampled_from(THREADS),
            },
        )
    )


def rows_of(rows: int, n: int):
    """A row-wise kernel's hostile x: any hostile array, or extents of 2^40 rows (none or
    broadcast)."""
    return st.one_of(
        hostile_array((rows, n)),
        st.just(("float32", (1 << 40, 0), "c")),
        st.just(("float32", (1 << 40, n), "broadcast")),
    )


def rows_spec(draw, fn: str, rows: int, n: int, params: dict, hostile: dict) -> dict:
    """A row kernel's spec: x (rows, n), y (x itself or another array), the ISA, the threads
    and ``params``, some of them made hostile (``hostile``: the bad values of ``params``)."""
    spec = {
        "fn": fn,
        "x": clean((rows, n)),
        "y": draw(st.sampled_from(["same", clean((rows, n))])),
        **params,
        "isa": draw(isa()),
        "threads": draw(st.sampled_from([1, 2, 3, 0])),
    }
    bad = {
        "x": rows_of(rows, n),
        "y": hostile_array((rows, n)),
        **hostile,
        "isa": BAD_ISA,
        "threads": st.sampled_from(THREADS),
    }
    return draw(corrupt(spec, bad))


@st.composite
def layer_norm_spec(draw) -> dict:
    rows = draw(st.sampled_from([0, 1, 3, 129, 1024]))
    n = draw(st.sampled_from([0, 1, 7, 384]))
    params = {
        "scale": draw(st.sampled_from([clean((n,)), clean((1,))])),
        "bias": draw(st.sampled_from([None, clean((n,)), clean((1,))])),
        "eps": draw(st.sampled_from([1e-5, 1e-12, 0.0])),
    }
    hostile = {
        "scale": st.one_of(hostile_array((n,)), st.just(("float32", (n,), "broadcast"))),
        "bias": hostile_array((n,)),
        "eps": st.sampled_from([float("nan"), -1.0, float("inf")]),
    }
    return rows_spec(draw, "layer_norm", rows, n, params, hostile)


@st.composite
def softmax_spec(draw) -> dict:
    rows = draw(st.sampled_from([0, 1, 3, 129]))
    n = draw(st.sampled_from([0, 1, 7, 1000]))
    return rows_spec(draw, "softmax", rows, n, {}, {})


ENTRY_POINTS = {
    "attention": attention_spec(),
    "layer_norm": layer_norm_spec(),
    "softmax": softmax_spec(),
    "unary_fast": unary_spec(fast=True),
    "conv": conv_spec(),
    "maxpool2d": maxpool_spec(),
    "concat": concat_spec(),
    "gemm": gemm_spec(),
    "unary": unary_spec(),
    "nms": nms_spec(),
}


@pytest.fixture(scope="module")
def worker():
    w = Worker()
    yield w
    w.dispose()


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_native_entry_point_never_crashes(worker, entry) -> None:
    findings, pipeline = [], Pipeline(worker)

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(spec=ENTRY_POINTS[entry])
    def one(spec):
        findings.extend(pipeline.add(Case(label=f"native:{entry}", call=(TARGET, spec))))

    one()
    findings.extend(pipeline.flush())
    assert not findings, "\n\n".join(map(str, findings))
    # the strategies reach the kernels as well as the checks in front of them
    outcomes = [r["paths"]["call"]["outcome"] for r in pipeline.replies]
    ok = sum(o == "ok" for o in outcomes)
    assert 0 < ok < len(outcomes), f"{ok} of {len(outcomes)} calls returned"
