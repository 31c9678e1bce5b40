"""The reduce family of graphrt-ops-basic, part 2: CumSum, CumProd, Det and Einsum, and the
family as a whole (part 1, test_reduce_search.py: the reductions, ArgMax, ArgMin, TopK, Unique).

Every operator's bad attributes and inputs through a session (the kind, the node named), a
steady state without allocations for each static kernel form, exact-mode bits for 1 and 2
threads against the spec's order, and a random model against onnxruntime.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphrt
from tests._models import onnxruntime_limits, ort_session
from tests._numpy_alloc import count_numpy_allocations
from tests._versions import ONNX
from tests.ops._reduce import (
    REDUCTIONS,
    RNG,
    error,
    evaluate,
    ints,
    reference,
    same,
    session,
    spec_top_k,
    steady,
    top_k_data,
)

# -- CumSum, CumProd ------------------------------------------------------------------------------


@np.errstate(invalid="ignore")
def spec_cumulative(op, x, axis, exclusive, reverse):
    """out[j] from the operator's text, element by element in the element type."""
    x = np.moveaxis(x, axis, 0)
    out = np.empty_like(x)
    n = x.shape[0]
    for j in range(n):
        if reverse:
            terms = range(n - 1, j, -1) if exclusive else range(n - 1, j - 1, -1)
        else:
            terms = range(j) if exclusive else range(j + 1)
        acc = None
        for t in terms:  # (inf + -inf is a NaN, on purpose in test_cumsum_is_exact)
            acc = x[t].copy() if acc is None else (acc + x[t] if op == "CumSum" else acc * x[t])
        out[j] = (0 if op == "CumSum" else 1) if acc is None else acc
    return np.moveaxis(out, 0, axis)


@pytest.mark.parametrize(("op", "opset"), [("CumSum", 11), ("CumSum", 14), ("CumProd", 26)])
@pytest.mark.parametrize("shape", [(5,), (1,), (3, 4), (2, 3, 4)])
@pytest.mark.parametrize("dtype", [np.int32, np.float32])
def test_cumulative_matches_the_spec(op, opset, shape, dtype):
    x = RNG.integers(-3, 4, shape).astype(dtype)
    for axis in range(-len(shape), len(shape)):
        for exclusive in (0, 1):
            for reverse in (0, 1):
                attrs = {"exclusive": exclusive, "reverse": reverse}
                want = spec_cumulative(op, x, axis % len(shape), exclusive, reverse)
                got = evaluate(op, x, np.array(axis, np.int32), opset=opset, **attrs)
                same(got, want)
                sess = session(
                    op, {"x": x}, [ints("axis", axis, ())], opset=opset, **attrs
                )  # the bound (static) path
                same(sess.run(None, {"x": x})[0], want)


def test_cumulative_run_time_axis_and_errors():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    sess = session("CumSum", {"x": x, "axis": np.array(0, np.int64)}, opset=14)
    for axis in (0, 1, -1):
        got = sess.run(None, {"x": x, "axis": np.array(axis, np.int64)})[0]
        same(got, spec_cumulative("CumSum", x, axis % 2, 0, 0))
    err = error(lambda: sess.run(None, {"x": x, "axis": np.array(2, np.int64)}))
    assert err.kind == "invalid_input" and err.node == "n"
    err = error(lambda: evaluate("CumSum", x, np.array([0, 1]), opset=14))
    assert err.kind == "invalid_input"
    err = error(lambda: evaluate("CumSum", x, np.array(0.0), opset=14))
    assert err.kind == "invalid_model"


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize(("op", "opset"), [("CumSum", 14), ("CumProd", 26)])
@pytest.mark.parametrize(("exclusive", "reverse"), [(0, 0), (1, 1)])
def test_cumulative_is_exact(dtype, op, opset, exclusive, reverse):
    """Exact mode: each result is the sequential sum (product) in the element type, NaN
    canonical, the same bits for any thread count."""
    scale = 1e3 if op == "CumSum" else 1 / 64
    x = (RNG.standard_normal((4, 257)) * scale + (op == "CumProd")).astype(dtype)
    x[1, 5] = np.inf
    x[1, 9] = -np.inf if op == "CumSum" else 0  # inf + -inf, inf * 0: a NaN
    payload = {np.float32: 0x7FC00123, np.float64: 0x7FF8000000000123, np.float16: 0x7E01}
    bits = {np.float32: np.uint32, np.float64: np.uint64, np.float16: np.uint16}[dtype]
    x[2, 3] = np.array(payload[dtype], bits).view(dtype)  # a NaN with a payload
    want = spec_cumulative(op, x, 1, exclusive, reverse)
    want = np.where(np.isnan(want), np.array(np.nan, dtype), want)
    attrs = {"exclusive": exclusive, "reverse": reverse}
    for threads in (1, 2):
        sess = session(
            op, {"x": x}, [ints("axis", 1, ())], opset, mode="exact", threads=threads, **attrs
        )
        same(sess.run(None, {"x": x})[0].view(bits), want.view(bits))


# -- Det ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (2, 1, 2, 2), (0, 3, 3), (2, 0, 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_det(shape, dtype):
    x = RNG.standard_normal(shape).astype(dtype)
    got = evaluate("Det", x, opset=22)
    want = np.linalg.det(x.astype(np.float64)).astype(dtype)
    assert got.shape == shape[:-2] and got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got, want, rtol=1e-2 if dtype == np.float16 else 1e-5, atol=1e-6)


def test_det_errors():
    err = error(lambda: evaluate("Det", np.zeros((2, 3), np.float32), opset=11))
    assert err.kind == "invalid_input" and "square" in str(err)
    assert error(lambda: evaluate("Det", np.zeros(3, np.float32), opset=11)).kind == "invalid_input"


# -- Einsum ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("equation", "shapes", "explicit"),
    [
        ("ij->ji", [(3, 4)], "ij->ji"),
        ("ii", [(4, 4)], "ii->"),
        ("ii->i", [(4, 4)], "ii->i"),
        ("i,i", [(5,), (5,)], "i,i->"),
        ("ij,jk", [(2, 3), (3, 4)], "ij,jk->ik"),
        ("ib,Ai", [(3, 2), (4, 3)], "ib,Ai->Ab"),  # upper case sorts first
        ("bij, bjk -> bik", [(5, 2, 3), (5, 3, 4)], "bij,bjk->bik"),
        ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)], "...ij,...jk->...ik"),
        ("...ii->...i", [(3, 5, 5)], "...ii->...i"),
        ("j...,...", [(3, 2), (2,)], "j...,...->...j"),
        ("abc,cd,de->ae", [(2, 3, 4), (4, 5), (5, 2)], "abc,cd,de->ae"),
        ("->", [()], "->"),
        ("i->", [(0,)], "i->"),
    ],
)
def test_einsum_matches_numpy(equation, shapes, explicit):
    inputs = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    got = evaluate("Einsum", *inputs, opset=12, equation=equation)
    want = np.einsum(explicit, *[x.astype(np.float64) for x in inputs])
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_einsum_matches_the_reference_on_its_equations():
    a = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    b = RNG.standard_normal((2, 4, 5)).astype(np.float32)
    for eq in ("bij,bjk->bik", "bij,bjk", "...ij,...jk", "bij,bjk->bk"):
        got = evaluate("Einsum", a, b, opset=12, equation=eq)
        np.testing.assert_allclose(got, reference("Einsum", a, b, opset=12, equation=eq), 1e-5)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.int32, np.float64])
def test_einsum_types(dtype):
    a = RNG.integers(-3, 4, (3, 4)).astype(dtype)
    b = RNG.integers(-3, 4, (4, 2)).astype(dtype)
    got = evaluate("Einsum", a, b, opset=12, equation="ij,jk->ik")
    same(got, (a.astype(np.float64) @ b.astype(np.float64)).astype(dtype))


@pytest.mark.parametrize(
    ("equation", "n_inputs", "message"),
    [
        ("ij,jk", 1, "2 input terms for 1 inputs"),
        ("i1->i", 1, "unexpected character '1'"),
        ("i..j->i", 1, "unexpected character '.'"),
        ("...i...->i", 1, "more than one '...'"),
        ("ij->ii", 1, "repeats a label"),
        ("ij->k", 1, "appear in no input"),
        ("ij->...", 1, "no input does"),
        ("i->i->i", 1, "more than once"),
    ],
)
def test_einsum_bad_equations_are_invalid_models(equation, n_inputs, message):
    x = np.zeros((2, 2), np.float32)
    err = error(lambda: evaluate("Einsum", *[x] * n_inputs, opset=12, equation=equation))
    assert err.kind == "invalid_model" and message in str(err) and "'n'" in str(err)


def test_einsum_mismatched_inputs_are_invalid_inputs():
    def kind(equation, *shapes):
        inputs = [np.zeros(s, np.float32) for s in shapes]
        return error(lambda: evaluate("Einsum", *inputs, opset=12, equation=equation)).kind

    assert kind("ij->i", (2, 3, 4)) == "invalid_input"  # rank
    assert kind("ij,jk->ik", (2, 3), (4, 5)) == "invalid_input"  # extents of j
    assert kind("...i,...i->...", (2, 3), (4, 3)) == "invalid_input"  # '...' broadcast
    assert kind("i...->i", ()) == "invalid_input"
    err = error(lambda: evaluate("Einsum", np.zeros(2), np.zeros(2, np.float32), equation="i,i"))
    assert err.kind == "invalid_model"
    assert error(lambda: evaluate("Einsum", np.zeros(2), opset=12)).kind == "invalid_model"


# -- the family: steady state, errors ------------------------------------------------------------


X3 = RNG.standard_normal((8, 16, 4)).astype(np.float32)
F16 = RNG.standard_normal((6, 6)).astype(np.float16)

# Every operator of the family whose output shapes follow from the input shapes, in each of its
# kernel's forms: a steady run allocates no array data (outputs given, so the session copies
# nothing out).  Not listed, by design: Unique (its shapes depend on the values); TopK's paths
# for long rows and for 64-bit integers (their selections make temporaries whose sizes depend on
# the values, and np.argsort has no out=); Det (np.linalg.det has no out= and copies each matrix
# for LAPACK); Einsum over a large iteration space (numpy's pairwise matmul contractions make
# their own temporaries).
STATIC = [
    *[(op, {"x": np.abs(X3)}, [ints("axes", [1])], 18, {"keepdims": 0}) for op in REDUCTIONS],
    *[(op, {"x": np.abs(X3)}, [], 18, {"noop_with_empty_axes": 1}) for op in REDUCTIONS],
    ("ReduceL2", {"x": (X3 * 9).astype(np.int32)}, [ints("axes", [0, 2])], 18, {}),
    ("ReduceLogSumExp", {"x": X3.astype(np.float16)}, [ints("axes", [1])], 18, {}),
    ("ArgMax", {"x": X3}, [], 13, {"axis": 1}),
    ("ArgMax", {"x": X3}, [], 13, {"axis": 2, "select_last_index": 1}),
    ("ArgMin", {"x": X3}, [], 13, {"axis": 2, "keepdims": 0}),
    ("TopK", {"x": X3}, [ints("k", [3])], 13, {"axis": -1}),
    ("TopK", {"x": X3}, [ints("k", [5])], 13, {"axis": 1}),
    ("TopK", {"x": X3.astype(np.float16)}, [ints("k", [2])], 13, {"axis": 0, "largest": 0}),
    ("TopK", {"x": (X3 * 9).astype(np.int32)}, [ints("k", [16])], 13, {"axis": 1}),
    ("CumSum", {"x": X3}, [ints("a", 1, ())], 14, {}),
    ("CumSum", {"x": X3}, [ints("a", 2, ())], 14, {"exclusive": 1, "reverse": 1}),
    ("CumSum", {"x": X3, "a": np.array(0, np.int64)}, [], 14, {}),
    ("CumProd", {"x": X3}, [ints("a", 0, ())], 26, {"exclusive": 1}),
    ("Einsum", {"a": X3, "b": X3}, [], 12, {"equation": "ijk,ijk->ik"}),
    ("Einsum", {"a": X3, "b": X3[:, :4].copy()}, [], 12, {"equation": "bij,bjk->bik"}),
    ("Einsum", {"x": F16}, [], 12, {"equation": "ii->i"}),
]


@pytest.mark.parametrize(
    ("op", "feeds", "inits", "opset", "attrs"),
    STATIC,
    ids=[f"{c[0]}-{k}" for k, c in enumerate(STATIC)],
)
def test_static_steps_allocate_nothing(op, feeds, inits, opset, attrs):
    if opset >= 26 and ONNX < (1, 20):
        pytest.skip("onnx < 1.20 has no CumProd (opset 26) schema")
    n_outputs = 2 if op == "TopK" else 1
    sess = session(op, feeds, inits, opset=opset, n_outputs=n_outputs, **attrs)
    run = steady(sess, feeds)
    with count_numpy_allocations() as counter:
        run()
    assert counter.count == 0, f"{counter.count} allocations ({counter.bytes} bytes)"


X23 = np.zeros((2, 3), np.float32)
TEXT = np.array(["b", "a"], dtype=object)
I64 = np.array([3], np.int64)

# Bad attributes (invalid_model) and bad inputs (invalid_input), constant or fed at run time:
# (op, feeds, initializers, opset, outputs, attributes, kind).
BAD = {
    "axes attribute out of range": ("ReduceL1", {"x": X23}, [], 13, 1, {"axes": [5]}, "M"),
    "axes input out of range": ("ReduceL2", {"x": X23}, [ints("a", [2])], 18, 1, {}, "I"),
    "run-time axes out of range": ("ReduceSumSquare", {"x": X23, "a": -I64}, [], 18, 1, {}, "I"),
    "reduction of strings": ("ReduceLogSumExp", {"x": TEXT}, [], 18, 1, {}, "M"),
    "arg axis out of range": ("ArgMax", {"x": X23}, [], 13, 1, {"axis": 2}, "M"),
    "arg of an empty axis": ("ArgMin", {"x": X23[:, :0]}, [], 13, 1, {"axis": 1}, "I"),
    "arg of strings": ("ArgMax", {"x": TEXT}, [], 13, 1, {}, "M"),
    "k above the axis": ("TopK", {"x": X23}, [ints("k", [4])], 11, 2, {}, "I"),
    "negative k": ("TopK", {"x": X23}, [ints("k", [-1])], 11, 2, {}, "I"),
    "run-time k above the axis": ("TopK", {"x": X23, "k": I64 + 1}, [], 11, 2, {}, "I"),
    "two values of k": ("TopK", {"x": X23}, [ints("k", [1, 2])], 11, 2, {}, "I"),
    "float k": ("TopK", {"x": X23, "k": np.array([1.0], np.float32)}, [], 11, 2, {}, "M"),
    "k attribute missing": ("TopK", {"x": X23}, [], 1, 2, {}, "M"),
    "negative k attribute": ("TopK", {"x": X23}, [], 1, 2, {"k": -2}, "M"),
    "k attribute above the axis": ("TopK", {"x": X23}, [], 1, 2, {"k": 4}, "I"),
    "top-k axis out of range": ("TopK", {"x": X23}, [ints("k", [1])], 11, 2, {"axis": -3}, "M"),
    "top-k of strings": ("TopK", {"x": TEXT}, [ints("k", [1])], 11, 2, {}, "M"),
    "unique axis out of range": ("Unique", {"x": X23}, [], 11, 4, {"axis": 2}, "M"),
    "cumulative axis out of range": ("CumSum", {"x": X23}, [ints("a", 2, ())], 14, 1, {}, "I"),
    "run-time cumulative axis": ("CumSum", {"x": X23, "a": np.array(-3)}, [], 14, 1, {}, "I"),
    "two cumulative axes": ("CumSum", {"x": X23}, [ints("a", [0, 1])], 14, 1, {}, "I"),
    "float cumulative axis": ("CumSum", {"x": X23, "a": np.array(0.0)}, [], 14, 1, {}, "M"),
    "running sum of strings": ("CumSum", {"x": TEXT}, [ints("a", 0, ())], 14, 1, {}, "M"),
    "determinant of a 2x3": ("Det", {"x": X23}, [], 11, 1, {}, "I"),
    "determinant of integers": ("Det", {"x": np.zeros((2, 2), np.int32)}, [], 11, 1, {}, "M"),
    "equation character": ("Einsum", {"x": X23}, [], 12, 1, {"equation": "i$->i"}, "M"),
    "two arrows": ("Einsum", {"x": X23}, [], 12, 1, {"equation": "ij->i->j"}, "M"),
    "terms for inputs": ("Einsum", {"x": X23}, [], 12, 1, {"equation": "ij,jk->ik"}, "M"),
    "output label unknown": ("Einsum", {"x": X23}, [], 12, 1, {"equation": "ij->k"}, "M"),
    "term rank": ("Einsum", {"x": X23}, [], 12, 1, {"equation": "ijk->i"}, "I"),
    "label extents": ("Einsum", {"a": X23, "b": X23}, [], 12, 1, {"equation": "ij,ji->i"}, "I"),
    "einsum of strings": ("Einsum", {"x": TEXT}, [], 12, 1, {"equation": "i->i"}, "M"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_attributes_and_inputs_name_the_node_and_their_kind(case):
    """Through a session, at creation (constants) or in a run: never a raw numpy error."""
    op, feeds, inits, opset, n_outputs, attrs, kind = BAD[case]
    err = error(
        lambda: session(op, feeds, inits, opset=opset, n_outputs=n_outputs, **attrs).run(
            None, feeds
        )
    )
    assert err.kind == {"M": "invalid_model", "I": "invalid_input"}[kind], str(err)
    assert err.node == "n" and f"{op} node 'n'" in str(err)
    assert "failed:" not in str(err)  # the kernel's own message, not a wrapped exception


# -- exact mode, a random model against onnxruntime -----------------------------------------------


@pytest.mark.parametrize(
    ("op", "attrs", "n_outputs"),
    [
        ("ArgMax", {"axis": 1}, 1),
        ("ArgMin", {"axis": 0, "select_last_index": 1}, 1),
        ("Unique", {"axis": 1}, 4),
    ],
)
def test_selections_run_in_exact_mode(op, attrs, n_outputs):
    """The same bits as fast mode, for 1 and 2 threads."""
    x = top_k_data((60, 90), np.float32, nan=True)
    opset = 13 if op != "Unique" else 11
    fast = session(op, {"x": x}, opset=opset, n_outputs=n_outputs, **attrs).run(None, {"x": x})
    for threads in (1, 2):
        exact = session(
            op, {"x": x}, opset=opset, n_outputs=n_outputs, mode="exact", threads=threads, **attrs
        )
        for a, b in zip(fast, exact.run(None, {"x": x})):
            same(np.asarray(b).view(np.uint8), np.asarray(a).view(np.uint8))


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize(
    ("shape", "k", "dtype"),
    [  # pairs sorted whole (float32, float16); argsort (int64); partition; prefilter
        ((50, 40), 5, np.float32),
        ((7, 64), 64, np.float16),
        ((9, 30), 4, np.int64),
        ((3, 1000), 200, np.float32),
        ((3, 5000), 10, np.int32),
    ],
)
def test_top_k_is_exact_on_every_path(largest, shape, k, dtype):
    """Exact mode, 1 and 2 threads: the positions and the bits of the values the spec's order
    picks (NaN above every number, -0 equal to +0, ties by position)."""
    x = top_k_data(shape, dtype, nan=np.dtype(dtype).kind == "f")
    want_v, want_i = spec_top_k(x, k, 1, largest)
    bits = np.dtype(f"u{np.dtype(dtype).itemsize}")
    for threads in (1, 2):
        sess = session(
            "TopK",
            {"x": x},
            [ints("k", [k])],
            opset=11,
            n_outputs=2,
            mode="exact",
            threads=threads,
            largest=largest,
        )
        values, indices = sess.run(None, {"x": x})
        same(indices, want_i)
        same(values.view(bits), want_v.view(bits))


def test_top_k_in_exact_mode_and_what_is_not_exact():
    x = top_k_data((4, 300), np.float32, nan=True)
    exact = session("TopK", {"x": x}, [ints("k", [5])], n_outputs=2, mode="exact")
    got = exact.run(None, {"x": x})
    want = spec_top_k(x, 5, 1, True)
    same(got[1], want[1])
    same(got[0].view(np.int32), want[0].view(np.int32))
    m = np.zeros((3, 3), np.float32)
    for op, attrs in (("Det", {}), ("ReduceL2", {}), ("Einsum", {"equation": "ij->i"})):
        err = error(lambda op=op, attrs=attrs: session(op, {"x": m}, mode="exact", **attrs))
        assert err.kind == "exact_mode_unavailable"


def _random_model(opset):
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((6, 5)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Einsum", ["x", "w"], ["e"], equation="bij,jk->bik"),
        helper.make_node("CumSum", ["e", "ax"], ["c"], exclusive=1),
        helper.make_node("ReduceLogSumExp", ["c", "axes"], ["r"], keepdims=0),
        helper.make_node("ReduceL2", ["e", "axes"], ["l2"], keepdims=1),
        helper.make_node("TopK", ["r", "k"], ["tv", "ti"], axis=1),
        helper.make_node("ArgMax", ["c"], ["am"], axis=2, keepdims=0),
        helper.make_node("ReduceSumSquare", ["tv"], ["ss"]),
    ]
    inits = [w, ints("ax", 1, ()), ints("axes", [1]), ints("k", [3])]
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "reduce_family",
        [helper.make_tensor_value_info("x", f32, [2, 4, 6])],
        [
            helper.make_tensor_value_info("tv", f32, None),
            helper.make_tensor_value_info("ti", TensorProto.INT64, None),
            helper.make_tensor_value_info("am", TensorProto.INT64, None),
            helper.make_tensor_value_info("l2", f32, None),
            helper.make_tensor_value_info("ss", f32, None),
        ],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_a_random_model_matches_onnxruntime():
    pytest.importorskip("onnxruntime")
    opset = 18
    if onnxruntime_limits()[1] < opset:
        pytest.skip(f"the installed onnxruntime loads opsets up to {onnxruntime_limits()[1]}")
    model = _random_model(opset)
    x = np.random.default_rng(4).standard_normal((2, 4, 6)).astype(np.float32)
    ours = graphrt.Session(model).run(None, {"x": x})
    theirs = ort_session(model).run(None, {"x": x})
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(ONNX < (1, 20), reason="onnx < 1.20 has no CumProd (opset 26) schema")
def test_cumprod_matches_the_reference():
    x = RNG.integers(1, 4, (3, 4)).astype(np.float32)
    for attrs in ({}, {"exclusive": 1}, {"reverse": 1}, {"exclusive": 1, "reverse": 1}):
        got = evaluate("CumProd", x, np.array(1), opset=26, **attrs)
        same(got, reference("CumProd", x, np.array(1), opset=26, **attrs))
