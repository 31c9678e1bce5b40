"""RNN, GRU and LSTM of graphrt-ops-basic (rnn.py, rnn_cells.py).

The oracle of most tests is ``spec_run`` below: the operators' equations as the ONNX text states
them, one batch entry and one time step at a time in float64.  Its two readings the text leaves
open follow onnxruntime, and tests pin both there: activation_alpha/beta values go, in order, to
the functions that take an alpha/beta; an entry of sequence length 0 has zero Y_h/Y_c.  Then
random-weight models against onnxruntime (a stacked bidirectional batch-first LSTM, GRU with both
linear_before_reset, RNN), every activation function, every opset form, run-time weights and
lengths, the float types, a bound kernel that allocates nothing and sees new input values, and
errors with their kinds.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import graphrt
from graphrt.attrs import node_info
from graphrt.errors import SessionError
from graphrt.kernel import InferContext, KernelContext, evaluate_node
from graphrt_ops_basic import rnn
from tests._models import init, make_model, ort_session, tensor
from tests._numpy_alloc import count_numpy_allocations
from tests.ops.node_cases import node_case_params

OPS = {"RNN": rnn.RNN, "GRU": rnn.GRU, "LSTM": rnn.LSTM}
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
FUNCS = {"RNN": 1, "GRU": 2, "LSTM": 3}
ACTIVATIONS = [
    "Sigmoid",
    "Tanh",
    "Relu",
    "Affine",
    "LeakyRelu",
    "ThresholdedRelu",
    "ScaledTanh",
    "HardSigmoid",
    "Elu",
    "Softsign",
    "Softplus",
]
RTOL, ATOL = 1e-4, 1e-5

# -- the spec, literally -------------------------------------------------------------------------

#: (alpha, beta) defaults: those of the ONNX operators of the same name.
_DEFAULTS = {
    "LeakyRelu": (0.01, None),
    "ThresholdedRelu": (1.0, None),
    "HardSigmoid": (0.2, 0.5),
    "Elu": (1.0, None),
    "Affine": (1.0, 0.0),
    "ScaledTanh": (1.0, 1.0),
}


def _function(name, a, b):
    return {
        "Sigmoid": lambda x: 1 / (1 + np.exp(-x)),
        "Tanh": np.tanh,
        "Relu": lambda x: np.maximum(x, 0),
        "Affine": lambda x: a * x + b,
        "LeakyRelu": lambda x: np.where(x >= 0, x, a * x),
        "ThresholdedRelu": lambda x: np.where(x >= a, x, 0),
        "ScaledTanh": lambda x: a * np.tanh(b * x),
        "HardSigmoid": lambda x: np.minimum(np.maximum(a * x + b, 0), 1),
        "Elu": lambda x: np.where(x >= 0, x, a * (np.exp(x) - 1)),
        "Softsign": lambda x: x / (1 + np.abs(x)),
        "Softplus": lambda x: np.log(1 + np.exp(x)),
    }[name]


def _functions(names, alphas, betas):
    alphas, betas = list(alphas or []), list(betas or [])
    out = []
    for n in names:
        a, b = _DEFAULTS.get(n, (None, None))
        if a is not None and alphas:
            a = alphas.pop(0)
        if b is not None and betas:
            b = betas.pop(0)
        out.append(_function(n, a, b))
    return out


def spec_run(*args, **attrs):
    """Y, Y_h, Y_c by the operator's equations, entry by entry and step by step, in float64
    (unbounded activations may overflow: inf is an answer too)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return _spec_run(*args, **attrs)


def _spec_run(op, x, w, r, b=None, lens=None, h0=None, c0=None, p=None, **attrs):
    f64 = np.float64
    x, w, r = (np.asarray(v, f64) for v in (x, w, r))
    direction = attrs.get("direction", "forward")
    layout = attrs.get("layout", 0)
    dirs, g, n = (2 if direction == "bidirectional" else 1), GATES[op], FUNCS[op]
    if layout:
        x = x.transpose(1, 0, 2)
        h0 = None if h0 is None else np.asarray(h0).transpose(1, 0, 2)
        c0 = None if c0 is None else np.asarray(c0).transpose(1, 0, 2)
    seq, batch, _ = x.shape
    hid = r.shape[-1]
    names = (
        attrs.get("activations")
        or list(
            {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}[op]
        )
        * dirs
    )
    fs = _functions(names, attrs.get("activation_alpha"), attrs.get("activation_beta"))
    b = np.zeros((dirs, 2 * g * hid)) if b is None else np.asarray(b, f64)
    lens = np.full(batch, seq) if lens is None else lens
    h0 = np.zeros((dirs, batch, hid)) if h0 is None else np.asarray(h0, f64)
    c0 = np.zeros((dirs, batch, hid)) if c0 is None else np.asarray(c0, f64)
    p = np.zeros((dirs, 3 * hid)) if p is None else np.asarray(p, f64)
    clip = attrs.get("clip")

    def cl(v):
        return v if clip is None else np.clip(v, -clip, clip)

    y = np.zeros((seq, dirs, batch, hid))
    yh = np.zeros((dirs, batch, hid))
    yc = np.zeros((dirs, batch, hid))
    lbr = attrs.get("linear_before_reset", 0)
    for d in range(dirs):
        f = fs[d * n : (d + 1) * n]
        rev = direction == "reverse" or d == 1
        wd, rd = w[d], r[d]
        wb, rb = b[d, : g * hid], b[d, g * hid :]
        for e in range(batch):
            length = int(lens[e])
            h, c = h0[d, e].copy(), c0[d, e].copy()
            for t in reversed(range(length)) if rev else range(length):
                xw = wd @ x[t, e] + wb
                if op == "RNN":
                    h = f[0](cl(xw + rd @ h + rb))
                elif op == "GRU":
                    z = f[0](cl(xw[:hid] + rd[:hid] @ h + rb[:hid]))
                    rr = f[0](cl(xw[hid : 2 * hid] + rd[hid : 2 * hid] @ h + rb[hid : 2 * hid]))
                    if lbr:
                        hh = f[1](cl(xw[2 * hid :] + rr * (rd[2 * hid :] @ h + rb[2 * hid :])))
                    else:
                        hh = f[1](cl(xw[2 * hid :] + rd[2 * hid :] @ (rr * h) + rb[2 * hid :]))
                    h = (1 - z) * hh + z * h
                else:  # gates i, o, f, c; peepholes i, o, f
                    pre = xw + rd @ h + rb
                    pi, po, pf = p[d, :hid], p[d, hid : 2 * hid], p[d, 2 * hid :]
                    i = f[0](cl(pre[:hid] + pi * c))
                    ff = f[0](cl(pre[2 * hid : 3 * hid] + pf * c))
                    if attrs.get("input_forget"):
                        ff = 1 - i
                    c = ff * c + i * f[1](cl(pre[3 * hid :]))
                    o = f[0](cl(pre[hid : 2 * hid] + po * c))
                    h = o * f[2](c)
                y[t, d, e] = h
            if length:
                yh[d, e], yc[d, e] = h, c
    if layout:
        return y.transpose(2, 0, 1, 3), yh.transpose(1, 0, 2), yc.transpose(1, 0, 2)
    return y, yh, yc


# -- models --------------------------------------------------------------------------------------

NAMES = ["X", "W", "R", "B", "L", "h0", "c0", "P"]


def random_inputs(rng, op, seq, batch, inp, hid, dirs=1, layout=0, dtype=np.float32, **given):
    """X, W, R and whichever of B, L (lengths), h0, c0, P are asked for (True or an array)."""
    g = GATES[op]
    state = (batch, dirs, hid) if layout else (dirs, batch, hid)
    shapes = {
        "X": (batch, seq, inp) if layout else (seq, batch, inp),
        "W": (dirs, g * hid, inp),
        "R": (dirs, g * hid, hid),
        "B": (dirs, 2 * g * hid),
        "h0": state,
        "c0": state,
        "P": (dirs, 3 * hid),
    }
    out = {}
    for name in NAMES:
        want = given.get(name, name in ("X", "W", "R"))
        if want is False or want is None:
            continue
        if not isinstance(want, bool):
            out[name] = np.asarray(want)
        elif name == "L":
            out[name] = rng.integers(0, seq + 1, batch).astype(np.int32)
        else:
            scale = 1 / np.sqrt(shapes[name][-1]) if name in ("W", "R") else 1.0
            out[name] = (rng.standard_normal(shapes[name]) * scale).astype(dtype)
    return out


def one_node(op, arrays, outputs=None, opset=14, const=("W", "R", "B", "P"), **attrs):
    """A model of one node; arrays named in ``const`` are initializers, the others inputs."""
    present = [n for n in NAMES if n in arrays]
    last = NAMES.index(present[-1])
    names = [n if n in arrays else "" for n in NAMES[: last + 1]]
    if outputs is None:
        outputs = ["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"]
    node = helper.make_node(op, names, outputs, name=f"{op.lower()}_node", **attrs)
    feeds = {n: arrays[n] for n in present if n not in const}
    decls = [
        tensor(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)) for n, v in feeds.items()
    ]
    inits = [init(n, arrays[n]) for n in present if n in const]
    elem = helper.np_dtype_to_tensor_dtype(arrays["X"].dtype)  # outputs have X's type
    model = make_model([node], decls, [tensor(o, elem) for o in outputs if o], inits, opset)
    return model, feeds


def run_graphrt(model, feeds):
    return graphrt.Session(model, intra_op_threads=1).run(None, feeds)


def expected(op, arrays, outputs=None, **attrs):
    y, yh, yc = spec_run(
        op,
        arrays["X"],
        arrays["W"],
        arrays["R"],
        arrays.get("B"),
        arrays.get("L"),
        arrays.get("h0"),
        arrays.get("c0"),
        arrays.get("P"),
        **attrs,
    )
    if outputs is None:
        outputs = ["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"]
    table = {"Y": y, "Y_h": yh, "Y_c": yc}
    return [table[o] for o in outputs if o]


def assert_close(got, want, rtol=RTOL, atol=ATOL):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=rtol, atol=atol)


# -- onnx's node cases, through the kernels ------------------------------------------------------

NODE_CASES = node_case_params(set(OPS), {})


def test_every_operator_has_node_cases():
    covered = {p.values[0].graph.node[0].op_type for p in NODE_CASES}
    assert covered == set(OPS)


@pytest.mark.parametrize(("model", "inputs", "outputs"), NODE_CASES)
def test_node_case(model, inputs, outputs):
    """node_cases.run_case pairs node outputs with graph outputs; some of these nodes leave Y
    out (an empty name), so the node's outputs are matched to the graph's by name here."""
    node = model.graph.node[0]
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    kernel = OPS[node.op_type](node_info(node, opset))
    feed = {i.name: _array(v) for i, v in zip(model.graph.input, inputs)}
    got = evaluate_node(kernel, [feed.get(n) if n else None for n in node.input], len(node.output))
    by_name = dict(zip(node.output, got))
    for o, want in zip(model.graph.output, outputs):
        np.testing.assert_allclose(by_name[o.name], _array(want), 1e-4, 1e-6)


def _array(v):
    return v if isinstance(v, np.ndarray) else numpy_helper.to_array(v)


# -- the spec, randomized ------------------------------------------------------------------------


def _random_case(seed):
    rng = np.random.default_rng(seed)
    op = ["RNN", "GRU", "LSTM"][seed % 3]
    direction = ["forward", "reverse", "bidirectional"][(seed // 3) % 3]
    dirs = 2 if direction == "bidirectional" else 1
    layout = int(rng.integers(2))
    seq, batch, inp, hid = (int(v) for v in rng.integers(1, 6, 4))
    attrs = {"hidden_size": hid, "direction": direction}
    if layout:
        attrs["layout"] = 1
    if rng.random() < 0.3:
        attrs["clip"] = float(rng.uniform(0.3, 2.0))
    if op == "GRU" and rng.random() < 0.5:
        attrs["linear_before_reset"] = 1
    if op == "LSTM" and rng.random() < 0.25:
        attrs["input_forget"] = 1
    given = {n: bool(rng.random() < 0.6) for n in ("B", "L", "h0", "c0", "P")}
    if op != "LSTM":
        given["c0"] = given["P"] = False
    arrays = random_inputs(rng, op, seq, batch, inp, hid, dirs, layout, **given)
    outputs = ["Y", "Y_h", "Y_c"][: 3 if op == "LSTM" else 2]
    hole = int(rng.integers(len(outputs) + 1))  # one output absent, or none
    outputs = ["" if i == hole else o for i, o in enumerate(outputs)]
    while outputs[-1] == "":
        outputs.pop()
    const = ("W", "R", "B", "P") if rng.random() < 0.6 else ()  # weights fed at run time
    return op, arrays, outputs, const, attrs


@pytest.mark.parametrize("seed", range(72))
def test_random_nodes_follow_the_spec(seed):
    op, arrays, outputs, const, attrs = _random_case(seed)
    model, feeds = one_node(op, arrays, outputs, 22, const, **attrs)
    session = graphrt.Session(model, intra_op_threads=1)
    got = session.run(None, feeds)
    assert_close(got, expected(op, arrays, outputs, **attrs))
    again = session.run(None, feeds)  # a second run of the same plan, same bits
    for a, b in zip(got, again):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", ACTIVATIONS)
@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_every_activation_in_every_position(op, name):
    """``name`` as each of the op's functions in turn (f, then g, then h), the others default."""
    rng = np.random.default_rng(ACTIVATIONS.index(name))
    arrays = random_inputs(rng, op, 4, 3, 3, 4, 2, B=True, h0=True)
    defaults = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
    for k in range(FUNCS[op]):
        acts = list(defaults[op])
        acts[k] = name
        attrs = {
            "hidden_size": 4,
            "direction": "bidirectional",
            "activations": acts + defaults[op],
            "activation_alpha": [0.7],
            "activation_beta": [0.3],
        }
        model, feeds = one_node(op, arrays, **attrs)
        assert_close(run_graphrt(model, feeds), expected(op, arrays, **attrs))


def test_activation_defaults_apply_without_alpha_and_beta():
    rng = np.random.default_rng(1)
    arrays = random_inputs(rng, "LSTM", 3, 2, 3, 4, 2, B=True)
    attrs = {
        "hidden_size": 4,
        "direction": "bidirectional",
        "activations": ["HardSigmoid", "Elu", "ScaledTanh", "LeakyRelu", "Affine", "Tanh"],
    }
    model, feeds = one_node("LSTM", arrays, **attrs)
    assert_close(run_graphrt(model, feeds), expected("LSTM", arrays, **attrs))


# -- sequence_lens -------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_shorter_sequences_zero_their_tail_and_end_at_their_last_step(op, direction):
    rng = np.random.default_rng(2)
    dirs = 2 if direction == "bidirectional" else 1
    lens = np.array([5, 2, 0, 4], np.int32)
    arrays = random_inputs(rng, op, 5, 4, 3, 3, dirs, B=True, L=lens, h0=True, c0=op == "LSTM")
    attrs = {"hidden_size": 3, "direction": direction}
    for const in (("W", "R", "B", "L"), ("W", "R", "B")):  # lengths known at plan time, or not
        model, feeds = one_node(op, arrays, const=const, **attrs)
        got = run_graphrt(model, feeds)
        assert_close(got, expected(op, arrays, **attrs))
        y, yh = got[0], got[1]
        assert not y[2:, :, 1].any() and not y[:, :, 2].any() and not y[4:, :, 3].any()
        assert not yh[:, 2].any()  # length 0: zero final state (onnxruntime's choice)
        for d in range(dirs):  # the forward direction ends at the last valid step
            if direction != "reverse" and d == 0:
                np.testing.assert_array_equal(yh[d, 1], y[1, d, 1])
            else:  # the reverse one at time 0
                np.testing.assert_array_equal(yh[d, 1], y[0, d, 1])


def test_full_length_sequence_lens_change_nothing():
    rng = np.random.default_rng(3)
    arrays = random_inputs(rng, "GRU", 4, 2, 3, 3, B=True, L=np.array([4, 4], np.int32))
    model, feeds = one_node("GRU", arrays, const=("W", "R", "B", "L"), hidden_size=3)
    plain = {k: v for k, v in arrays.items() if k != "L"}
    model2, feeds2 = one_node("GRU", plain, hidden_size=3)
    for a, b in zip(run_graphrt(model, feeds), run_graphrt(model2, feeds2)):
        np.testing.assert_array_equal(a, b)


# -- against onnxruntime -------------------------------------------------------------------------


def _ort(model, feeds):
    pytest.importorskip("onnxruntime")
    return ort_session(model).run(None, feeds)


def _transposed(name, perm):
    return helper.make_node("Transpose", [name], [name + "_t"], perm=perm)


def _stacked_lstm(rng, layout, batch=3, seq=6, inp=5, hid=4):
    """Two bidirectional LSTM layers with peepholes, initial states and sequence_lens. With
    layout 1 (batch first) for graphrt; onnxruntime refuses LSTM's layout 1, so its model is
    the same network in layout 0 with Transposes around."""
    nodes, inits = [], []
    lens = np.array([seq, seq - 2, 1], np.int32)
    inits.append(init("L", lens))
    x = "X" if layout else "X_t"
    if not layout:
        nodes.append(_transposed("X", [1, 0, 2]))
    outputs = []
    for k, width in enumerate((inp, 2 * hid)):
        arrays = random_inputs(
            rng, "LSTM", seq, batch, width, hid, 2, B=True, P=True, h0=True, c0=True, layout=1
        )
        for n in ("W", "R", "B", "P", "h0", "c0"):
            value = arrays[n] if layout or n not in ("h0", "c0") else arrays[n].transpose(1, 0, 2)
            inits.append(init(f"{n}{k}", value))
        names = [x, f"W{k}", f"R{k}", f"B{k}", "L", f"h0{k}", f"c0{k}", f"P{k}"]
        attrs = {"hidden_size": hid, "direction": "bidirectional"}
        if layout:
            attrs["layout"] = 1
        nodes.append(helper.make_node("LSTM", names, [f"Y{k}", f"Yh{k}", f"Yc{k}"], **attrs))
        if layout:  # Y [batch, seq, 2, hid] -> [batch, seq, 2*hid]
            y = f"Y{k}"
            outputs += [f"Yh{k}", f"Yc{k}"]
        else:  # Y [seq, 2, batch, hid] -> [batch, seq, 2, hid]; states [2, b, h] -> [b, 2, h]
            nodes += [
                _transposed(f"Y{k}", [2, 0, 1, 3]),
                _transposed(f"Yh{k}", [1, 0, 2]),
                _transposed(f"Yc{k}", [1, 0, 2]),
            ]
            y = f"Y{k}_t"
            outputs += [f"Yh{k}_t", f"Yc{k}_t"]
        inits.append(init("shape", np.array([batch, seq, 2 * hid], np.int64)))
        nodes.append(helper.make_node("Reshape", [y, "shape"], [f"Z{k}"]))
        x = f"Z{k}"
        if not layout:
            nodes.append(_transposed(x, [1, 0, 2]))
            x += "_t"
    outputs.insert(0, "Z1")
    unique = {t.name: t for t in inits}.values()
    model = make_model(
        nodes,
        [tensor("X", shape=[batch, seq, inp])],
        [tensor(o) for o in outputs],
        list(unique),
        opset=14,
    )
    return model


def test_stacked_bidirectional_batch_first_lstm_matches_onnxruntime():
    ours = _stacked_lstm(np.random.default_rng(4), layout=1)
    theirs = _stacked_lstm(np.random.default_rng(4), layout=0)
    x = np.random.default_rng(5).standard_normal((3, 6, 5)).astype(np.float32)
    got = run_graphrt(ours, {"X": x})
    want = _ort(theirs, {"X": x})
    assert_close(got, [w.astype(np.float64) for w in want])
    assert not got[0][2, 1:].any()  # past entry 2's length of 1, both directions give zeros


@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_gru_matches_onnxruntime(linear_before_reset):
    rng = np.random.default_rng(6 + linear_before_reset)
    lens = np.array([7, 3, 5, 7], np.int32)
    arrays = random_inputs(rng, "GRU", 7, 4, 6, 5, 2, B=True, L=lens, h0=True)
    attrs = {
        "hidden_size": 5,
        "direction": "bidirectional",
        "linear_before_reset": linear_before_reset,
    }
    model, feeds = one_node("GRU", arrays, **attrs)
    assert_close(run_graphrt(model, feeds), [w.astype(np.float64) for w in _ort(model, feeds)])


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_random_weights_match_onnxruntime(op):
    rng = np.random.default_rng(8)
    lens = np.array([6, 4, 1], np.int32)
    lstm = op == "LSTM"
    arrays = random_inputs(rng, op, 6, 3, 8, 16, 1, B=True, L=lens, h0=True, c0=lstm, P=lstm)
    attrs = {"hidden_size": 16, "direction": "reverse", "clip": 1.5}
    if lstm:
        attrs["input_forget"] = 1
    model, feeds = one_node(op, arrays, **attrs)
    assert_close(run_graphrt(model, feeds), [w.astype(np.float64) for w in _ort(model, feeds)])


def test_alpha_and_beta_go_to_the_functions_that_take_them_as_onnxruntime_reads_them():
    rng = np.random.default_rng(9)
    arrays = random_inputs(rng, "GRU", 5, 3, 4, 3, 2, B=True)
    attrs = {
        "hidden_size": 3,
        "direction": "bidirectional",
        "activations": ["Sigmoid", "LeakyRelu", "HardSigmoid", "ScaledTanh"],
        "activation_alpha": [0.5, 0.3, 1.5],  # LeakyRelu, HardSigmoid, ScaledTanh
        "activation_beta": [0.4, 0.6],  # HardSigmoid, ScaledTanh
    }
    model, feeds = one_node("GRU", arrays, **attrs)
    got = run_graphrt(model, feeds)
    assert_close(got, expected("GRU", arrays, **attrs))
    assert_close(got, [w.astype(np.float64) for w in _ort(model, feeds)])


# -- opsets, types, inputs known at run time -----------------------------------------------------


@pytest.mark.parametrize(
    ("op", "opset", "attrs"),
    [
        ("RNN", 1, {"output_sequence": 1}),
        ("GRU", 1, {"output_sequence": 1}),
        ("GRU", 3, {"linear_before_reset": 1}),
        ("LSTM", 1, {"output_sequence": 1, "input_forget": 1}),
        ("RNN", 7, {}),
        ("GRU", 7, {"linear_before_reset": 1}),
        ("LSTM", 7, {}),
        ("LSTM", 14, {"layout": 1}),
        ("GRU", 22, {"layout": 1}),
        ("RNN", 22, {"layout": 1}),
    ],
)
def test_every_opset_form(op, opset, attrs):
    rng = np.random.default_rng(opset)
    layout = attrs.get("layout", 0)
    lstm = op == "LSTM"
    arrays = random_inputs(rng, op, 4, 2, 3, 5, 1, layout, B=True, h0=True, P=lstm, c0=lstm)
    model, feeds = one_node(op, arrays, opset=opset, hidden_size=5, **attrs)
    spec_attrs = {k: v for k, v in attrs.items() if k != "output_sequence"}
    assert_close(run_graphrt(model, feeds), expected(op, arrays, **spec_attrs))


def test_hidden_size_defaults_to_r():
    rng = np.random.default_rng(10)
    arrays = random_inputs(rng, "LSTM", 3, 2, 3, 6)
    model, feeds = one_node("LSTM", arrays)
    assert_close(run_graphrt(model, feeds), expected("LSTM", arrays))


@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16"])
@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_float_types(op, dtype):
    """float16 and bfloat16 compute in float32 and round once; float64 stays float64.  Run
    through the kernel (``Bound``): older onnx cannot serialize ml_dtypes' bfloat16."""
    if dtype == "bfloat16":
        dtype = pytest.importorskip("ml_dtypes").bfloat16
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(11)
    lstm = op == "LSTM"
    arrays = random_inputs(
        rng, op, 4, 2, 3, 5, 2, dtype=dtype, B=True, h0=True, c0=lstm, P=lstm,
        L=np.array([4, 2], np.int32),
    )  # fmt: skip
    attrs = {"hidden_size": 5, "direction": "bidirectional"}
    want = expected(op, {k: v.astype(np.float64) for k, v in arrays.items()}, **attrs)
    tol = {"float64": 1e-12, "float16": 3e-3, "bfloat16": 2e-2}[dtype.name]
    for known in (("W", "R", "B", "P"), ()):
        got = Bound(op, arrays, known=known, **attrs)()
        assert all(g.dtype == dtype for g in got)
        assert_close([g.astype(np.float64) for g in got], want, rtol=tol, atol=tol)
    if dtype.name == "float16":  # and through a session
        got = run_graphrt(*one_node(op, arrays, opset=22, **attrs))
        assert_close([g.astype(np.float64) for g in got], want, rtol=tol, atol=tol)


def test_weights_fed_at_run_time_match_constant_weights():
    rng = np.random.default_rng(12)
    arrays = random_inputs(rng, "LSTM", 5, 3, 4, 4, 2, B=True, P=True, L=True)
    attrs = {"hidden_size": 4, "direction": "bidirectional"}
    a = run_graphrt(*one_node("LSTM", arrays, const=("W", "R", "B", "P", "L"), **attrs))
    b = run_graphrt(*one_node("LSTM", arrays, const=(), **attrs))
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_a_symbolic_batch_gets_a_plan_per_shape():
    rng = np.random.default_rng(13)
    arrays = random_inputs(rng, "GRU", 4, 3, 3, 4, B=True)
    node = helper.make_node("GRU", ["X", "W", "R", "B"], ["Y", "Y_h"], hidden_size=4)
    inits = [init(n, arrays[n]) for n in ("W", "R", "B")]
    model = make_model(
        [node], [tensor("X", shape=[4, "N", 3])], [tensor("Y"), tensor("Y_h")], inits, 14
    )
    session = graphrt.Session(model, intra_op_threads=1)
    for batch in (1, 3, 5):  # a batch of 1 takes the transposed-R path
        x = rng.standard_normal((4, batch, 3)).astype(np.float32)
        assert_close(session.run(None, {"X": x}), expected("GRU", {**arrays, "X": x}))


@pytest.mark.parametrize(("seq", "batch"), [(0, 2), (3, 0)])
def test_empty_sequences_and_batches(seq, batch):
    rng = np.random.default_rng(14)
    arrays = random_inputs(rng, "LSTM", seq, batch, 3, 2, 2, B=True, h0=True)
    model, feeds = one_node("LSTM", arrays, hidden_size=2, direction="bidirectional")
    got = run_graphrt(model, feeds)
    assert [g.shape for g in got] == [(seq, 2, batch, 2), (2, batch, 2), (2, batch, 2)]
    assert not any(g.any() for g in got)


# -- a bound kernel ------------------------------------------------------------------------------


class Bound:
    """A kernel planned and bound the way a run state does: infer with the ``known`` inputs,
    scratch full of NaN (slab memory another step used), bind, call."""

    def __init__(self, op, arrays, known=("W", "R", "B", "P"), outputs=None, **attrs):
        present = [n for n in NAMES if n in arrays]
        names = [n if n in arrays else "" for n in NAMES[: NAMES.index(present[-1]) + 1]]
        outputs = outputs or (["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"])
        node = helper.make_node(op, names, outputs, name="bound", **attrs)
        self.kernel = OPS[op](node_info(node, 22))
        self.inputs = [arrays[n].copy() if n else None for n in names]
        ictx = InferContext(
            [None if a is None else a.dtype for a in self.inputs],
            [None if a is None else a.shape for a in self.inputs],
            [a if n in known else None for n, a in zip(names, self.inputs)],
            len(outputs),
        )
        self.kernel.infer(ictx)
        self.outputs = [None if t is None else np.empty(t[1], t[0]) for t in ictx.output_types()]
        scratch = []
        for dt, shape in ictx.scratch:
            a = np.empty(shape, dt)
            a.view(np.uint8).fill(0xFF)
            scratch.append(a)
        ctx = KernelContext(prepared=ictx.prepared, scratch=scratch)
        self.step = self.kernel.bind(ctx, self.inputs, self.outputs)

    def __call__(self):
        self.step()
        return [o.copy() for o in self.outputs if o is not None]


def _bound_cases():
    rng = np.random.default_rng(15)
    lens = np.array([5, 3, 0], np.int32)
    lstm = random_inputs(rng, "LSTM", 5, 3, 4, 6, 2, B=True, L=lens, h0=True, c0=True, P=True)
    gru = random_inputs(rng, "GRU", 5, 3, 4, 6, 2, B=True, L=lens, h0=True)
    rnn1 = random_inputs(rng, "RNN", 5, 1, 4, 6, 1, B=True)
    thr = ["ThresholdedRelu", "Elu", "Relu", "Softsign"]
    bi = {"direction": "bidirectional"}
    return {
        "lstm-runtime-lens-and-weights": ("LSTM", lstm, (), {**bi, "clip": 2.0}),
        "lstm-constant-lens": ("LSTM", lstm, ("W", "R", "B", "P", "L"), bi),
        "gru-lbr-activations": ("GRU", gru, ("W", "R"), {**bi, "linear_before_reset": 1,
                                                         "activations": thr}),
        "rnn-batch-1-reverse": ("RNN", rnn1, ("W", "R", "B"), {"direction": "reverse"}),
    }  # fmt: skip


@pytest.mark.parametrize("case", list(_bound_cases()))
def test_a_bound_kernel_allocates_no_array_data_and_sees_new_values(case):
    op, arrays, known, attrs = _bound_cases()[case]
    bound = Bound(op, arrays, known=known, **attrs)
    assert_close(bound(), expected(op, arrays, **attrs))
    with count_numpy_allocations() as counter:
        bound.step()
    assert counter.count == 0, f"{counter.count} numpy allocations ({counter.bytes} bytes)"
    changed = dict(arrays)
    changed["X"] = arrays["X"][::-1].copy()
    if "L" in arrays and "L" not in known:
        changed["L"] = arrays["L"][::-1].copy()
    for name, value in changed.items():  # new values in the same arrays, as a new run has
        if name not in known:
            bound.inputs[NAMES.index(name)][...] = value
    assert_close(bound(), expected(op, changed, **attrs))


def test_supports_exact_is_false():
    assert not any(k.supports_exact for k in OPS.values())


# -- errors --------------------------------------------------------------------------------------


def _error(model, feeds=None):
    with pytest.raises(SessionError) as err:
        graphrt.Session(model, intra_op_threads=1).run(None, feeds or {})
    return err.value


def test_hidden_size_against_the_weights_is_an_input_error_naming_the_node():
    rng = np.random.default_rng(16)
    arrays = random_inputs(rng, "LSTM", 3, 2, 3, 4)
    model, feeds = one_node("LSTM", arrays, hidden_size=5)
    err = _error(model, feeds)
    assert err.kind == "invalid_input"
    assert "lstm_node" in str(err) and err.node == "lstm_node"
    assert "W has shape [1, 16, 3], expected [1, 20, 3]" in str(err)


@pytest.mark.parametrize(
    ("what", "arrays_given", "message"),
    [
        ("B", {"B": np.zeros((1, 7), np.float32)}, "B has shape [1, 7]"),
        ("h0", {"h0": np.zeros((2, 2, 4), np.float32)}, "initial_h has shape [2, 2, 4]"),
        ("L", {"L": np.zeros(3, np.int32)}, "sequence_lens has shape [3]"),
    ],
)
def test_input_shapes_are_checked(what, arrays_given, message):
    rng = np.random.default_rng(17)
    arrays = {**random_inputs(rng, "GRU", 3, 2, 3, 4), **arrays_given}
    err = _error(*one_node("GRU", arrays, const=("W", "R"), hidden_size=4))
    assert err.kind == "invalid_input" and message in str(err) and err.node == "gru_node"


@pytest.mark.parametrize(
    ("attrs", "opset", "message"),
    [
        ({"direction": "sideways"}, 14, "direction must be"),
        ({"activations": ["Sigmoid", "Cosine"]}, 14, "unknown activation function 'Cosine'"),
        ({"activations": ["Sigmoid"]}, 14, "activations lists 1 functions, expected 2"),
        ({"layout": 1}, 7, "layout is an attribute of opset 14"),
        ({"layout": 2}, 14, "layout must be 0 or 1"),
        ({"clip": 0.0}, 14, "clip must be positive"),
        ({"hidden_size": 0}, 14, "hidden_size must be positive"),
    ],
)
def test_bad_attributes_are_model_errors(attrs, opset, message):
    rng = np.random.default_rng(18)
    arrays = random_inputs(rng, "GRU", 3, 2, 3, 4)
    attrs = {"hidden_size": 4, **attrs}
    err = _error(*one_node("GRU", arrays, opset=opset, **attrs))
    assert err.kind == "invalid_model" and message in str(err) and "gru_node" in str(err)


def test_mixed_types_are_model_errors():
    rng = np.random.default_rng(19)
    arrays = random_inputs(rng, "RNN", 3, 2, 3, 4)
    arrays["R"] = arrays["R"].astype(np.float64)
    err = _error(*one_node("RNN", arrays, hidden_size=4))
    assert err.kind == "invalid_model" and "R is float64, X is float32" in str(err)


@pytest.mark.parametrize("bad", [[4, 2], [-1, 2]])
def test_lengths_out_of_range_are_input_errors(bad):
    rng = np.random.default_rng(20)
    arrays = random_inputs(rng, "LSTM", 3, 2, 3, 4, L=np.array([3, 1], np.int32))
    model, feeds = one_node("LSTM", arrays, hidden_size=4)
    session = graphrt.Session(model, intra_op_threads=1)
    session.run(None, feeds)
    with pytest.raises(SessionError) as err:
        session.run(None, {**feeds, "L": np.array(bad, np.int32)})
    assert err.value.kind == "invalid_input" and "sequence_lens values must lie in [0, 3]" in str(
        err.value
    )
    model, feeds = one_node("LSTM", {**arrays, "L": np.array(bad, np.int32)}, const=("W", "R", "L"))
    assert _error(model, feeds).kind == "invalid_input"


def test_rank_errors():
    rng = np.random.default_rng(21)
    arrays = random_inputs(rng, "RNN", 3, 2, 3, 4)
    arrays["X"] = arrays["X"][0]
    err = _error(*one_node("RNN", arrays, hidden_size=4))
    assert err.kind == "invalid_input" and "X must have rank 3" in str(err)


def test_graph_inputs_of_other_types_for_lengths_are_refused():
    rng = np.random.default_rng(22)
    arrays = random_inputs(rng, "RNN", 3, 2, 3, 4, L=np.array([3, 1], np.float32))
    err = _error(*one_node("RNN", arrays, hidden_size=4))
    assert err.kind == "invalid_model" and "sequence_lens must be integers" in str(err)
