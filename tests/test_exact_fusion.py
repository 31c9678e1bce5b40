"""Exact mode and the graph passes: a pass never turns a model exact mode runs into one it refuses.

For every pass (the core's built-ins and every installed plugin's), a model holding the pattern
the pass rewrites runs in exact mode at the pass's level and at ``optimization_level="none"``,
on the numpy kernels and on the best native path: both give the same bits, or both refuse the
model naming the same operators.  Each pattern is also checked to be one the pass really rewrites
(in fast mode, where every pass runs), so a case cannot pass by matching nothing.  A pass that
does not preserve bits is skipped in exact mode; one that does must have a case here.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import helper

import graphrt
from graphrt.passes import builtin_passes
from graphrt.plugins import snapshot
from tests._fusion import op_list, rand_w, rand_x
from tests._models import init, make_model, tensor

PATHS = ["numpy", "auto"]
NAN = np.array(0xFFC12345, np.uint32).view(np.float32)  # a NaN with a payload


def _specials(x: np.ndarray) -> np.ndarray:
    """x with a NaN payload, infinities, signed zeros and large values along its first row
    (rand_x already put 0, -0 and a tiny value first)."""
    flat = x.reshape(-1)
    flat[3:9] = [NAN, np.inf, -np.inf, 88.0, -104.0, 1e-40]
    return x


# -- the patterns ---------------------------------------------------------------------------


def _tail(nodes: list, inits: list, last: str, bias: np.ndarray | None, act: str | None) -> None:
    if bias is not None:
        inits.append(init("bias", bias))
        nodes.append(helper.make_node("Add", [last, "bias"], ["biased"]))
        last = "biased"
    if act is not None:
        nodes.append(helper.make_node(act, [last], ["acted"]))
        last = "acted"
    nodes[-1].output[0] = "y"


def product(op: str, act: str | None, bias: bool) -> tuple[onnx.ModelProto, dict]:
    """MatMul / Gemm / Conv [-> Add bias] [-> act]."""
    if op == "Conv":
        inits = [init("w", rand_w(6, 3, 3, 3))]
        nodes = [helper.make_node("Conv", ["x", "w"], ["p"], pads=[1, 1, 1, 1], name="conv")]
        shape, b = [2, 3, 7, 7], rand_w(6, 1, 1)
    elif op == "Gemm":
        inits = [init("w", rand_w(5, 7))]
        nodes = [helper.make_node("Gemm", ["x", "w"], ["p"], transB=1, alpha=0.75, name="gemm")]
        shape, b = [4, 7], rand_w(5)
    else:
        inits = [init("w", rand_w(7, 5))]
        nodes = [helper.make_node("MatMul", ["x", "w"], ["p"], name="matmul")]
        shape, b = [3, 4, 7], rand_w(5)
    _tail(nodes, inits, "p", b if bias else None, act)
    model = make_model(nodes, [tensor("x", shape=shape)], [tensor("y")], inits, opset=20)
    return model, {"x": _specials(rand_x(*shape))}


def residual(act: str | None) -> tuple[onnx.ModelProto, dict]:
    """Conv(x) + Neg(s) (a residual connection) [-> act]: FusedConv's Z."""
    inits = [init("w", rand_w(6, 3, 3, 3)), init("b", rand_w(6))]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1] * 4),
        helper.make_node("Neg", ["s"], ["z"]),
        helper.make_node("Add", ["z", "c"], ["y"]),
    ]
    if act is not None:
        nodes[-1].output[0] = "a"
        nodes.append(helper.make_node(act, ["a"], ["y"]))
    inputs = [tensor("x", shape=[2, 3, 6, 6]), tensor("s", shape=[2, 6, 6, 6])]
    feed = {"x": _specials(rand_x(2, 3, 6, 6)), "s": _specials(rand_x(2, 6, 6, 6))}
    return make_model(nodes, inputs, [tensor("y")], inits), feed


def conv_pool(act: str | None) -> tuple[onnx.ModelProto, dict]:
    """Conv [-> act] -> MaxPool 3x3/2 (a CNN stem): FusedConvPool."""
    inits = [init("w", rand_w(16, 3, 3, 3)), init("b", rand_w(16))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=[2, 2])]
    if act is not None:
        nodes.append(helper.make_node(act, ["c"], ["a"]))
    pool_in = "a" if act is not None else "c"
    nodes.append(helper.make_node("MaxPool", [pool_in], ["y"], kernel_shape=[3, 3], strides=[2, 2]))
    feed = {"x": _specials(rand_x(2, 3, 33, 33))}
    return make_model(nodes, [tensor("x", shape=[2, 3, 33, 33])], [tensor("y")], inits), feed


def constant_subgraph() -> tuple[onnx.ModelProto, dict]:
    """Sigmoid(x + Exp(c)): Exp of a constant folds at creation (exact Exp, same kernel)."""
    nodes = [
        helper.make_node("Exp", ["c"], ["ec"]),
        helper.make_node("Add", ["x", "ec"], ["s"]),
        helper.make_node("Sigmoid", ["s"], ["y"]),
    ]
    c = rand_w(5, scale=3.0)
    model = make_model(nodes, [tensor("x", shape=[4, 5])], [tensor("y")], [init("c", c)])
    return model, {"x": _specials(rand_x(4, 5))}


def twin_branches() -> tuple[onnx.ModelProto, dict]:
    """Two Conv -> Sigmoid branches on x whose weights are equal arrays under two names (a
    folded ConstantOfShape's), added: common subexpression elimination keeps one branch."""
    w = rand_w(4, 3, 3, 3)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1] * 4),
        helper.make_node("Conv", ["x", "w2"], ["c2"], pads=[1] * 4),
        helper.make_node("Sigmoid", ["c1"], ["s1"]),
        helper.make_node("Sigmoid", ["c2"], ["s2"]),
        helper.make_node("Add", ["s1", "s2"], ["y"]),
    ]
    inits = [init("w1", w), init("w2", w.copy())]
    model = make_model(nodes, [tensor("x", shape=[2, 3, 6, 6])], [tensor("y")], inits)
    return model, {"x": _specials(rand_x(2, 3, 6, 6))}


def dropout() -> tuple[onnx.ModelProto, dict]:
    nodes = [
        helper.make_node("Dropout", ["x", "ratio"], ["d"]),
        helper.make_node("Tanh", ["d"], ["y"]),
    ]
    inits = [init("ratio", np.float32(0.25))]
    model = make_model(nodes, [tensor("x", shape=[4, 5])], [tensor("y")], inits, opset=13)
    return model, {"x": _specials(rand_x(4, 5))}


def conv_batchnorm() -> tuple[onnx.ModelProto, dict]:
    c = 4
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1] * 4),
        helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"]),
        helper.make_node("Relu", ["n"], ["y"]),
    ]
    rng = np.random.default_rng(5)
    inits = [init("w", rand_w(c, 3, 3, 3)), init("b", rand_w(c)), init("s", rand_w(c) + 1)]
    inits += [init("bb", rand_w(c)), init("m", rand_w(c))]
    inits.append(init("v", (rng.random(c) + 0.5).astype(np.float32)))
    model = make_model(nodes, [tensor("x", shape=[2, 3, 6, 6])], [tensor("y")], inits)
    return model, {"x": _specials(rand_x(2, 3, 6, 6))}


def gelu_primitives() -> tuple[onnx.ModelProto, dict]:
    """0.5 * x * (1 + Erf(x / sqrt(2))): every node exact (Div, Erf, Add, Mul)."""
    nodes = [
        helper.make_node("Div", ["x", "root"], ["s"]),
        helper.make_node("Erf", ["s"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["p"]),
        helper.make_node("Mul", ["x", "p"], ["xp"]),
        helper.make_node("Mul", ["xp", "half"], ["y"]),
    ]
    inits = [init("root", np.float32(math.sqrt(2.0))), init("one", np.float32(1.0))]
    inits.append(init("half", np.float32(0.5)))
    model = make_model(nodes, [tensor("x", shape=[3, 16])], [tensor("y")], inits)
    return model, {"x": _specials(rand_x(3, 16) * 4)}


def attention() -> tuple[onnx.ModelProto, dict]:
    """Softmax(Q K^T / sqrt(D)) V on 4-D heads (BERT's eager form): Transpose, MatMul, Div,
    Softmax, MatMul, every one exact."""
    b, s, h, d = 2, 5, 2, 4
    nodes = [
        helper.make_node("Transpose", ["q"], ["qh"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["v"], ["vh"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("MatMul", ["qh", "kt"], ["qk"], name="qk"),
        helper.make_node("Div", ["qk", "root"], ["sc"]),
        helper.make_node("Softmax", ["sc"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "vh"], ["y"]),
    ]
    inputs = [tensor(n, shape=[b, s, h, d]) for n in "qkv"]
    inits = [init("root", np.float32(math.sqrt(d)))]
    model = make_model(nodes, inputs, [tensor("y")], inits)
    return model, {n: rand_x(b, s, h, d) for n in "qkv"}


def layernorm() -> tuple[onnx.ModelProto, dict]:
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["mean"], axes=[-1]),
        helper.make_node("Sub", ["x", "mean"], ["d"]),
        helper.make_node("Mul", ["d", "d"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["std"]),
        helper.make_node("Div", ["d", "std"], ["y"]),
    ]
    inits = [init("eps", np.float32(1e-5))]
    model = make_model(nodes, [tensor("x", shape=[3, 16])], [tensor("y")], inits, opset=13)
    return model, {"x": rand_x(3, 16)}


def rms_norm() -> tuple[onnx.ModelProto, dict]:
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1]),
        helper.make_node("Add", ["ms", "eps"], ["mse"]),
        helper.make_node("Sqrt", ["mse"], ["r"]),
        helper.make_node("Div", ["x", "r"], ["y"]),
    ]
    inits = [init("eps", np.float32(1e-6))]
    model = make_model(nodes, [tensor("x", shape=[3, 16])], [tensor("y")], inits, opset=13)
    return model, {"x": rand_x(3, 16)}


Builder = Callable[[], tuple[onnx.ModelProto, dict]]

#: pass name -> the patterns it rewrites (every one is checked to be rewritten in fast mode)
CASES: dict[str, list[tuple[str, Builder]]] = {
    "constant_folding": [("exp_of_constant", constant_subgraph)],
    "eliminate_inference_dropout": [("dropout", dropout)],
    "eliminate_common_subexpressions": [("twin_branches", twin_branches)],
    "fuse_product_activation": [
        (
            f"{op}_{act}_{'bias' if bias else 'nobias'}",
            lambda op=op, act=act, bias=bias: product(op, act, bias),
        )
        for op in ("MatMul", "Gemm", "Conv")
        for act in ("Sigmoid", "Relu", None)
        for bias in (True, False)
        if act is not None or bias
    ]
    + [(f"residual_{act}", lambda act=act: residual(act)) for act in ("Sigmoid", "Relu", None)],
    "fuse_conv_pool": [
        (f"conv_{act}_pool", lambda act=act: conv_pool(act)) for act in ("Relu", None)
    ],
    "fuse_batchnorm_into_conv": [("conv_bn_relu", conv_batchnorm)],
    "fuse_gelu": [("gelu", gelu_primitives)],
    "fuse_attention": [("attention", attention)],
    "fuse_layernorm": [("layernorm", layernorm)],
    "fuse_rms_norm": [("rms_norm", rms_norm)],
}

PARAMS = [
    pytest.param(name, build, id=f"{name}-{case}")
    for name, cases in CASES.items()
    for case, build in cases
]


def _all_passes() -> dict:
    return {p.name: p for p in [*builtin_passes(), *snapshot().passes]}


def _outcome(model: onnx.ModelProto, feed: dict, level: str, path: str):
    """(session, output) in exact mode, or (None, the refusal's kind and operators)."""
    try:
        sess = graphrt.Session(model, mode="exact", optimization_level=level, kernel_path=path)
        return sess, sess.run(None, feed)[0]
    except graphrt.SessionError as e:
        return None, (e.kind, sorted(getattr(e, "operators", None) or []))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("name", "build"), PARAMS)
def test_a_pass_keeps_the_exact_outcome_of_the_unoptimised_graph(name, build, path):
    p = _all_passes()[name]
    model, feed = build()
    fast = graphrt.Session(model, optimization_level=p.min_level, kernel_path=path)
    assert name in fast.graph.passes_run, f"the {name} pattern was not rewritten"
    sess, got = _outcome(model, feed, p.min_level, path)
    _, want = _outcome(model, feed, "none", path)
    if isinstance(want, np.ndarray):
        assert sess is not None, f"{name} turned an exact model into a refused one: {got}"
        assert got.tobytes() == want.tobytes()
        if p.preserves_bits and name != "constant_folding":
            assert name in sess.graph.passes_run  # and it did fuse in exact mode
    else:
        assert sess is None and got == want  # refused alike, naming the model's operators


@pytest.mark.parametrize("op", ["MatMul", "Gemm", "Conv"])
def test_exact_fused_sigmoid_is_one_node_with_canonical_nans_on_any_thread_count(op):
    model, feed = product(op, "Sigmoid", bias=True)
    _, want = _outcome(model, feed, "none", "numpy")
    for threads in (1, 3):
        sess = graphrt.Session(model, mode="exact", intra_op_threads=threads)
        assert op_list(sess) == [f"com.graphrt.Fused{op}"]
        got = sess.run(None, feed)[0]
        assert got.tobytes() == want.tobytes()
    assert np.isnan(got).any() and (got[np.isnan(got)].view(np.uint32) == 0x7FC00000).all()


@pytest.mark.parametrize("act", ["Clip", "Gelu"])
def test_an_activation_with_no_exact_fused_form_stays_its_own_node(act):
    """Exact mode refuses Clip and Gelu; the refusal names them, not a fused node, and the
    bias still fuses in fast mode."""
    if act == "Clip":
        model, _ = product("MatMul", "Relu", bias=True)
        model.graph.node[-1].op_type = "Clip"
    else:
        model, _ = product("MatMul", "Gelu", bias=True)
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(model, mode="exact")
    assert info.value.kind == "exact_mode_unavailable"
    assert any(o.startswith(act) for o in info.value.operators)
    assert op_list(graphrt.Session(model)) == ["com.graphrt.FusedMatMul"]


def test_every_pass_is_covered_or_skipped_in_exact_mode():
    """A pass that preserves bits runs in exact mode: it needs a case above.  One that does not
    is never selected in exact mode, at any level."""
    for name, p in _all_passes().items():
        if p.preserves_bits:
            assert name in CASES, f"pass {name} runs in exact mode and has no case here"
        else:
            assert not any(p.selected(level, exact=True) for level in ("basic", "all")), name
