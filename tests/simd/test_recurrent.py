"""Native RNN, GRU and LSTM (graphrt_ops_simd.recurrent, src/native/rnn*.{cpp,inc,h}).

Sessions on each kernel path (scalar, avx2, avx512 where the CPU has it) against onnxruntime
as the oracle, over directions, layouts, sequence_lens, initial states, clip,
linear_before_reset, input_forget, peepholes, hidden sizes that are not multiples of any
vector width and batches above 1, on one and two threads (the same bits); the fallbacks to
ops-basic's kernel; a bound kernel that allocates nothing; and the native entry points'
refusal of bad arguments.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from onnx import helper

import graphrt
from graphrt.attrs import node_info
from graphrt.errors import SessionError
from graphrt.kernel import InferContext, KernelContext
from graphrt_ops_basic import rnn as basic_rnn
from tests._models import init, make_model, ort_session, tensor
from tests._numpy_alloc import count_numpy_allocations
from tests._versions import onnxruntime_release
from tests.ops.test_rnn import NAMES, random_inputs
from tests.simd._simd import ALL_PATHS, bits, path_or_skip, simd

recurrent = pytest.importorskip("graphrt_ops_simd.recurrent")

F32 = np.float32
RTOL, ATOL = 1e-4, 1e-5
OPS = ("RNN", "GRU", "LSTM")
DIRECTIONS = ("forward", "reverse", "bidirectional")
#: Hidden sizes off every vector width (4 scalar, 8 avx2, 16 avx512) and one on them.
HIDDEN = (1, 5, 13, 17, 8, 33)


def one_node(op, arrays, opset=14, const=("W", "R", "B", "P"), **attrs):
    """A model of one node with every output; arrays named in ``const`` are initializers,
    the others inputs (fed in the order of NAMES)."""
    present = [n for n in NAMES if n in arrays]
    names = [n if n in arrays else "" for n in NAMES[: NAMES.index(present[-1]) + 1]]
    outputs = ["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"]
    node = helper.make_node(op, names, outputs, name=f"{op.lower()}_node", **attrs)
    feeds = {n: arrays[n] for n in present if n not in const}
    decls = [
        tensor(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)) for n, v in feeds.items()
    ]
    inits = [init(n, arrays[n]) for n in present if n in const]
    elem = helper.np_dtype_to_tensor_dtype(arrays["X"].dtype)
    model = make_model([node], decls, [tensor(o, elem) for o in outputs], inits, opset)
    return model, feeds


def ort_reference(op, arrays, **attrs):
    """onnxruntime on the layout-0 form of the node (it refuses layout 1): inputs transposed
    in, outputs transposed back."""
    pytest.importorskip("onnxruntime")
    layout = attrs.pop("layout", 0)
    a = dict(arrays)
    if layout:
        a["X"] = a["X"].transpose(1, 0, 2).copy()
        for n in ("h0", "c0"):
            if n in a:
                a[n] = a[n].transpose(1, 0, 2).copy()
    model, feeds = one_node(op, a, opset=14, **attrs)
    got = ort_session(model).run(None, feeds)
    if layout:
        got = [got[0].transpose(2, 0, 1, 3)] + [g.transpose(1, 0, 2) for g in got[1:]]
    return got


def session(model, path, threads=1, **kw):
    return graphrt.Session(model, kernel_path=path, intra_op_threads=threads, **kw)


def native_steps(sess, feeds) -> int:
    """How many steps of the plan for these feeds run the native recurrence."""
    plan = sess.plan_for(list(feeds.values()))
    return sum(isinstance(s.prepared, recurrent._Plan) for s in plan.steps)


def assert_close(got, want, rtol=RTOL, atol=ATOL):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def _entries(value, keep, layout):
    """The batch entries ``keep`` of an output (batch axis by output rank and layout)."""
    axis = (2 if value.ndim == 4 else 1) if not layout else 0
    return np.compress(keep, value, axis=axis)


def run_both_thread_counts(model, feeds, path):
    """Outputs on one thread, checked bit-equal to two threads' (and the plan native)."""
    results = []
    for threads in (1, 2):
        sess = session(model, path, threads)
        assert native_steps(sess, feeds) == 1
        results.append(sess.run(None, feeds))
    for a, b in zip(*results):
        np.testing.assert_array_equal(bits(a), bits(b))
    return results[0]


def _case(op, direction, layout, seed):
    """One node with a varied set of the optional inputs and attributes."""
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    seq, batch, inp = 6, 3, 5
    hid = HIDDEN[seed % len(HIDDEN)]
    lstm = op == "LSTM"
    given = {
        "B": seed % 4 != 1,
        "L": np.array([seq, 0, 3], np.int32) if seed % 3 else None,
        "h0": seed % 2 == 0,
        "c0": lstm and seed % 4 < 2,
        "P": lstm and seed % 3 != 2,
    }
    arrays = random_inputs(rng, op, seq, batch, inp, hid, dirs, layout, **given)
    attrs = {"hidden_size": hid, "direction": direction}
    if layout:
        attrs["layout"] = 1
    if seed % 3 == 1:
        attrs["clip"] = 0.75
    if op == "GRU":
        attrs["linear_before_reset"] = seed % 2
    if lstm and seed % 5 == 3:
        attrs["input_forget"] = 1
    return arrays, attrs


CASES = [
    (op, direction, layout, 7 * i + 3 * j + layout)
    for i, op in enumerate(OPS)
    for j, direction in enumerate(DIRECTIONS)
    for layout in (0, 1)
]


@pytest.mark.parametrize("path", ALL_PATHS)
@pytest.mark.parametrize(("op", "direction", "layout", "seed"), CASES)
def test_matches_onnxruntime(path, op, direction, layout, seed):
    path_or_skip(path)
    arrays, attrs = _case(op, direction, layout, seed)
    model, feeds = one_node(op, arrays, opset=14, **attrs)
    got = run_both_thread_counts(model, feeds, path)
    want = ort_reference(op, arrays, **attrs)
    if op == "RNN" and "L" in arrays and onnxruntime_release() < (1, 21):
        # onnxruntime < 1.21's RNN does not zero an entry of length 0 (Y and Y_h); the loop
        # below checks ours against the spec there, the other entries against onnxruntime
        live = np.asarray(arrays["L"]) > 0
        assert_close(
            [_entries(v, live, layout) for v in got], [_entries(v, live, layout) for v in want]
        )
    else:
        assert_close(got, want)
    if "L" in arrays:  # past an entry's length Y is zero; length 0: zero final states
        lens = arrays["L"]
        y = got[0] if not layout else got[0].transpose(1, 2, 0, 3)
        for b, n in enumerate(lens):
            assert not y[n:, :, b].any()
        assert not any(g[:, 1].any() if not layout else g[1].any() for g in got[1:])


@pytest.mark.parametrize("path", ALL_PATHS)
@pytest.mark.parametrize(
    ("op", "extra"),
    [
        ("LSTM", {}),
        ("LSTM", {"P": True, "clip": 3.0}),
        ("GRU", {"linear_before_reset": 1}),
        ("GRU", {"linear_before_reset": 0}),
        ("RNN", {}),
    ],
)
@pytest.mark.parametrize("batch", [1, 2])
def test_large_steps_split_over_threads(path, op, extra, batch):
    """Hidden 165: every step's product is large enough to be split over two threads (and
    165 is off every vector width); both directions, each on its own thread."""
    path_or_skip(path)
    rng = np.random.default_rng(batch)
    hid = 165 if op != "RNN" else 300  # an RNN step must reach the split threshold too
    peep = extra.get("P", False)
    arrays = random_inputs(rng, op, 7, batch, 24, hid, 2, B=True, h0=True, P=peep)
    attrs = {"hidden_size": hid, "direction": "bidirectional"}
    attrs.update({k: v for k, v in extra.items() if k != "P"})
    model, feeds = one_node(op, arrays, opset=14, **attrs)
    got = run_both_thread_counts(model, feeds, path)
    # a single direction: its steps' panels split over the threads
    fwd = {k: (v[:1] if k in ("W", "R", "B", "P", "h0") else v) for k, v in arrays.items()}
    model1, feeds1 = one_node(op, fwd, opset=14, **(attrs | {"direction": "forward"}))
    got1 = run_both_thread_counts(model1, feeds1, path)
    assert_close(got, ort_reference(op, arrays, **attrs), rtol=2e-4, atol=2e-5)
    np.testing.assert_array_equal(bits(got1[0][:, 0]), bits(got[0][:, 0]))


@pytest.mark.parametrize("path", ALL_PATHS)
def test_the_bench_exports_match_onnxruntime(path):
    """bench/bench_transformers.py's models (batch-first exports, GRU with
    linear_before_reset), at smaller sizes."""
    path_or_skip(path)
    from tests._transformers import rnn_export

    for op in ("LSTM", "GRU"):
        model = rnn_export(op, 40, 24, layers=2, bidirectional=op == "GRU", seed=3)
        x = np.random.default_rng(4).standard_normal((2, 11, 24)).astype(F32)
        got = session(model, path).run(None, {"x": x})[0]
        want = ort_session(model).run(None, {"x": x})[0]
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("path", ["scalar", "avx2"])
def test_weights_at_run_time_give_the_bits_of_constant_weights(path):
    path_or_skip(path)
    rng = np.random.default_rng(12)
    lens = np.array([5, 2, 4], np.int32)
    arrays = random_inputs(rng, "LSTM", 5, 3, 4, 9, 2, B=True, P=True, L=lens, h0=True)
    attrs = {"hidden_size": 9, "direction": "bidirectional", "clip": 1.0}
    a = session(*one_node("LSTM", arrays, const=("W", "R", "B", "P", "L"), **attrs)[:1], path)
    model_b, feeds_b = one_node("LSTM", arrays, const=(), **attrs)
    b = session(model_b, path)
    assert native_steps(b, feeds_b) == 1
    feeds_a = {"X": arrays["X"], "h0": arrays["h0"]}
    for x, y in zip(a.run(None, feeds_a), b.run(None, feeds_b)):
        np.testing.assert_array_equal(bits(x), bits(y))


def test_full_length_sequence_lens_give_the_bits_of_none():
    rng = np.random.default_rng(3)
    arrays = random_inputs(rng, "GRU", 4, 2, 3, 7, B=True, L=np.array([4, 4], np.int32))
    plain = {k: v for k, v in arrays.items() if k != "L"}
    for const in (("W", "R", "B", "L"), ("W", "R", "B")):
        model, feeds = one_node("GRU", arrays, const=const, hidden_size=7)
        model2, feeds2 = one_node("GRU", plain, hidden_size=7)
        for x, y in zip(
            session(model, "scalar").run(None, feeds), session(model2, "scalar").run(None, feeds2)
        ):
            np.testing.assert_array_equal(bits(x), bits(y))


def test_strided_feeds_are_copied():
    rng = np.random.default_rng(5)
    arrays = random_inputs(rng, "GRU", 4, 3, 6, 5, B=True, h0=True)
    model, feeds = one_node("GRU", arrays, hidden_size=5)
    sess = session(model, "scalar")
    want = sess.run(None, feeds)
    wide = np.zeros((4, 3, 12), F32)
    wide[:, :, ::2] = feeds["X"]
    got = sess.run(None, {"X": wide[:, :, ::2], "h0": feeds["h0"]})
    for x, y in zip(got, want):
        np.testing.assert_array_equal(x, y)


def test_concurrent_runs_of_one_session():
    rng = np.random.default_rng(6)
    arrays = random_inputs(rng, "LSTM", 9, 2, 8, 70, 2, B=True)
    model, feeds = one_node("LSTM", arrays, hidden_size=70, direction="bidirectional")
    sess = session(model, "scalar", threads=2)
    want = sess.run(None, feeds)
    errors = []

    def worker():
        for _ in range(5):
            got = sess.run(None, feeds)
            if not all(np.array_equal(a, b) for a, b in zip(got, want)):
                errors.append("different results")

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


# -- what stays on ops-basic's kernel -------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "attrs", "dtype"),
    [
        ("GRU", {"activations": ["Sigmoid", "Relu"]}, F32),
        ("LSTM", {"activations": ["HardSigmoid", "Tanh", "Tanh"]}, F32),
        ("RNN", {"activations": ["Relu"]}, F32),
        ("LSTM", {}, np.float64),
    ],
)
def test_what_the_native_plan_does_not_cover_runs_the_numpy_kernel(op, attrs, dtype):
    rng = np.random.default_rng(7)
    arrays = random_inputs(rng, op, 4, 2, 3, 5, B=True, dtype=dtype)
    model, feeds = one_node(op, arrays, hidden_size=5, **attrs)
    sess = session(model, "avx2" if "avx2" in simd.available_isas() else "scalar")
    assert native_steps(sess, feeds) == 0
    want = session(model, "numpy").run(None, feeds)
    for x, y in zip(sess.run(None, feeds), want):
        np.testing.assert_array_equal(x, y)


def test_exact_mode_is_refused_as_by_the_table():
    rng = np.random.default_rng(8)
    arrays = random_inputs(rng, "LSTM", 3, 1, 3, 4)
    model, _ = one_node("LSTM", arrays, hidden_size=4)
    with pytest.raises(SessionError) as err:
        session(model, "scalar", mode="exact")
    assert err.value.kind == "exact_mode_unavailable"


def test_bad_run_time_sequence_lens_are_ops_basics_input_error():
    rng = np.random.default_rng(9)
    arrays = random_inputs(rng, "GRU", 4, 2, 3, 5, L=np.array([4, 5], np.int32))
    model, feeds = one_node("GRU", arrays, hidden_size=5)
    sess = session(model, "scalar")
    assert native_steps(sess, feeds) == 1
    with pytest.raises(SessionError) as err:
        sess.run(None, feeds)
    assert err.value.kind == "invalid_input"
    assert "sequence_lens values must lie in [0, 4], got [4, 5]" in str(err.value)


# -- a bound kernel --------------------------------------------------------------------------------


@pytest.mark.parametrize("known", [("W", "R", "B", "P", "L"), ("W", "R")])
def test_a_bound_kernel_allocates_no_array_data_and_ignores_stale_scratch(known):
    """Planned and bound as a run state does, scratch full of NaN bits (memory another step
    used); a run allocates no numpy array data, and new input values are seen."""
    rng = np.random.default_rng(10)
    lens = np.array([5, 3, 0], np.int32)
    arrays = random_inputs(rng, "LSTM", 5, 3, 4, 6, 2, B=True, L=lens, h0=True, c0=True, P=True)
    attrs = {"direction": "bidirectional", "clip": 2.0}
    names = list(NAMES)
    node = helper.make_node("LSTM", names, ["Y", "Y_h", "Y_c"], name="bound", **attrs)
    info = node_info(node, 22)
    kernel = recurrent.Recurrent(info, basic_rnn.LSTM, "scalar")
    inputs = [arrays[n].copy() for n in names]
    ictx = InferContext(
        [a.dtype for a in inputs],
        [a.shape for a in inputs],
        [a if n in known else None for n, a in zip(names, inputs)],
        3,
    )
    kernel.infer(ictx)
    assert isinstance(ictx.prepared, recurrent._Plan)
    outputs = [np.empty(t[1], t[0]) for t in ictx.output_types()]
    scratch = []
    for dt, shape in ictx.scratch:
        s = np.empty(shape, dt)
        s.view(np.uint8).fill(0xFF)
        scratch.append(s)
    step = kernel.bind(KernelContext(prepared=ictx.prepared, scratch=scratch), inputs, outputs)
    model, feeds = one_node("LSTM", arrays, **attrs)
    want = session(model, "scalar").run(None, feeds)
    step()
    for x, y in zip(outputs, want):
        np.testing.assert_array_equal(x, y)
    with count_numpy_allocations() as counter:
        step()
    assert counter.count == 0, f"{counter.count} numpy allocations ({counter.bytes} bytes)"
    inputs[0][...] = arrays["X"][::-1]
    step()
    feeds = dict(feeds, X=arrays["X"][::-1].copy())
    for x, y in zip(outputs, session(model, "scalar").run(None, feeds)):
        np.testing.assert_array_equal(x, y)


# -- the native entry points refuse bad arguments --------------------------------------------------


def _plan(op="LSTM", hidden=4, inp=3, reverse=(False,), **kw):
    return recurrent._native.RnnPlan(op, "scalar", inp, hidden, list(reverse), **kw)


def _packed(plan, op="LSTM", hidden=4, inp=3, dirs=1, peep=False):
    g = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    rng = np.random.default_rng(0)
    w = rng.standard_normal((dirs, g * hidden, inp)).astype(F32)
    r = rng.standard_normal((dirs, g * hidden, hidden)).astype(F32)
    p = rng.standard_normal((dirs, 3 * hidden)).astype(F32) if peep else None
    out = np.empty(plan.packed_floats, F32)
    plan.pack(w, r, None, p, out)
    return out


def _run_args(plan, seq=3, batch=2, inp=3, hidden=4, dirs=1):
    x = np.ones((seq, batch, inp), F32)
    y = np.empty((seq, dirs, batch, hidden), F32)
    yh = np.empty((dirs, batch, hidden), F32)
    work = np.empty(plan.work_floats(seq, batch), F32)
    return dict(sequence_lens=None, initial_h=None, initial_c=None, x=x, y=y, y_h=yh, y_c=None,
                work=work)  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (dict(op="LSTMX"), "unknown recurrent operator"),
        (dict(hidden=0), "hidden_size must be positive"),
        (dict(inp=-1), "input_size must not be negative"),
        (dict(reverse=()), "one or two directions"),
        (dict(reverse=(False, True, False)), "one or two directions"),
        (dict(layout=2), "layout must be 0 or 1"),
        (dict(clip=-1.0), "clip must be a positive finite number"),
        (dict(clip=float("inf")), "clip must be a positive finite number"),
        (dict(op="LSTM", linear_before_reset=True), "linear_before_reset is a GRU attribute"),
        (dict(op="GRU", peepholes=True), "LSTM attributes"),
        (dict(hidden=1 << 40), "unsupported: "),
        (dict(hidden=1 << 62), "unsupported: "),
        (dict(inp=1 << 62), "unsupported: "),
        (dict(hidden=20000, inp=20000), "unsupported: "),
    ],
)
def test_plan_refuses_bad_attributes(args, message):
    with pytest.raises(ValueError, match=message):
        _plan(**args)


def test_plan_refuses_huge_work():
    with pytest.raises(ValueError, match="unsupported: "):
        _plan().work_floats(1 << 40, 1 << 40)
    with pytest.raises(ValueError, match="unsupported: "):
        _plan().work_floats(1 << 20, 1 << 10)
    with pytest.raises(ValueError, match="must not be negative"):
        _plan().work_floats(-1, 2)


def test_pack_checks_its_arguments():
    plan = _plan()
    w = np.zeros((1, 16, 3), F32)
    r = np.zeros((1, 16, 4), F32)
    out = np.empty(plan.packed_floats, F32)
    with pytest.raises(ValueError, match=r"W must have shape \(1, 16, 3\)"):
        plan.pack(np.zeros((1, 16, 2), F32), r, None, None, out)
    with pytest.raises(ValueError, match="R must have shape"):
        plan.pack(w, np.zeros((2, 16, 4), F32), None, None, out)
    with pytest.raises(ValueError, match="B must have shape"):
        plan.pack(w, r, np.zeros((1, 31), F32), None, out)
    with pytest.raises(ValueError, match="no peepholes"):
        plan.pack(w, r, None, np.zeros((1, 12), F32), out)
    with pytest.raises(ValueError, match="out must have shape"):
        plan.pack(w, r, None, None, out[:-1])
    with pytest.raises(TypeError):
        plan.pack(w.astype(np.float64), r, None, None, out)
    with pytest.raises(ValueError, match="C-contiguous"):
        plan.pack(np.zeros((1, 3, 16), F32).transpose(0, 2, 1), r, None, None, out)
    with pytest.raises(ValueError, match="overlap"):
        plan.pack(out[: 16 * 3].reshape(1, 16, 3), r, None, None, out)
    with pytest.raises(ValueError, match="needs the peepholes"):
        _plan(peepholes=True).pack(
            w, r, None, None, np.empty(_plan(peepholes=True).packed_floats, F32)
        )


def _bad_runs():
    plan = _plan()
    packed = _packed(plan)
    ok = _run_args(plan)
    x, work = ok["x"], ok["work"]
    return plan, packed, ok, [
        (dict(x=np.ones((3, 2, 4), F32)), "x has 4 features"),
        (dict(x=np.ones((3, 2), F32)), "x must have 3 dimension"),
        (dict(x=np.ones((3, 2, 3), np.float64)), "x must be a float32"),
        (dict(x=np.ones((3, 3, 2), F32).transpose(0, 2, 1)), "x must be C-contiguous"),
        (dict(work=work[:-1]), "work must hold at least"),
        (dict(y=np.empty((3, 1, 2, 5), F32)), r"y must have shape \(3, 1, 2, 4\)"),
        (dict(y_h=np.empty((1, 3, 4), F32)), "y_h must have shape"),
        (dict(y_c=np.empty((1, 2, 4), np.float64)), "y_c must be a float32"),
        (dict(initial_h=np.empty((2, 1, 4), F32)), "initial_h must have shape"),
        (dict(initial_c=np.empty((1, 2, 3), F32)), "initial_c must have shape"),
        (dict(sequence_lens=np.array([1, 4], np.int32)), r"values must lie in \[0, 3\]"),
        (dict(sequence_lens=np.array([-1, 2], np.int64)), "sequence_lens values must lie"),
        (dict(sequence_lens=np.array([1, 2, 3], np.int32)), r"lens must have shape \(2,\)"),
        (dict(sequence_lens=np.array([1.0, 2.0], F32)), "int32 or int64"),
        (dict(y=work[:24].reshape(3, 1, 2, 4)), "overlaps"),
        (dict(y_h=x.reshape(-1)[:8].reshape(1, 2, 4)), "overlaps"),
        (dict(initial_h=work[-8:].reshape(1, 2, 4)), "overlaps"),
        (dict(work=packed), "overlaps"),
    ]  # fmt: skip


@pytest.mark.parametrize("index", range(len(_bad_runs()[3])))
def test_run_checks_its_arguments(index):
    plan, packed, ok, cases = _bad_runs()
    change, message = cases[index]
    args = dict(ok, **change)
    if "work" in change and change["work"] is packed:
        args["work"] = np.empty(plan.work_floats(3, 2) + plan.packed_floats, F32)
        packed = args["work"][: plan.packed_floats]
    with pytest.raises((ValueError, TypeError), match=message):
        plan.run(packed, threads=1, **args)


def test_run_checks_the_packed_weights_and_the_ops_inputs():
    plan = _plan(op="GRU")
    packed = _packed(plan, op="GRU")
    ok = _run_args(plan)
    with pytest.raises(ValueError, match="packed must have shape"):
        plan.run(packed[:-1], threads=1, **ok)
    with pytest.raises(ValueError, match="initial_c is an LSTM input"):
        plan.run(packed, threads=1, **dict(ok, initial_c=np.zeros((1, 2, 4), F32)))
    with pytest.raises(ValueError, match="y_c is an LSTM output"):
        plan.run(packed, threads=1, **dict(ok, y_c=np.zeros((1, 2, 4), F32)))


@pytest.mark.parametrize("threads", [-5, 0, 1, 2, 1 << 30])
def test_any_thread_count_runs_with_the_same_bits(threads):
    plan = _plan(hidden=40, inp=3, reverse=(False, True))
    packed = _packed(plan, hidden=40, dirs=2)
    args = _run_args(plan, hidden=40, dirs=2)
    plan.run(packed, threads=1, **args)
    want = [args["y"].copy(), args["y_h"].copy()]
    plan.run(packed, threads=threads, **args)
    np.testing.assert_array_equal(bits(args["y"]), bits(want[0]))
    np.testing.assert_array_equal(bits(args["y_h"]), bits(want[1]))


def test_unknown_isa_is_refused():
    with pytest.raises(ValueError, match="isa"):
        recurrent._native.RnnPlan("LSTM", "neon", 3, 4, [False])
