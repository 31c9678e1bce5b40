"""Numerics against onnxruntime on models with random weights.

The light models' weights are constants (ConstantOfShape), so they do not test arithmetic; these
models do.  ``kitchen_sink`` strings every ops-basic operator family into one network;
``test_every_operator_is_covered`` keeps it honest as the table grows.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import graphrt
from graphrt_ops_basic.table import OPERATORS
from tests._models import init, make_model, ort_session, small_cnn, tensor

ort = pytest.importorskip("onnxruntime")

F = TensorProto.FLOAT


class _Builder:
    """Appends nodes with fresh output names; weights are random and fixed by the seed."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.n = 0
        self.ops: set[str] = set()

    def const(self, value, dtype=np.float32) -> str:
        self.n += 1
        name = f"k{self.n}"
        self.inits.append(init(name, np.asarray(value, dtype=dtype)))
        return name

    def rand(self, *shape, scale=1.0, positive=False) -> str:
        v = self.rng.standard_normal(shape) * scale
        return self.const(np.abs(v) + 0.5 if positive else v)

    def op(self, op_type: str, *inputs: str, outputs: int = 1, **attrs) -> str | list[str]:
        self.n += 1
        names = [f"{op_type.lower()}{self.n}_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, **attrs))
        self.ops.add(op_type)
        return names[0] if outputs == 1 else names


def kitchen_sink(seed: int = 0) -> tuple[onnx.ModelProto, set[str]]:
    b = _Builder(seed)
    # -- convolutional trunk on x [2, 3, 12, 12]
    c = b.op("Conv", "x", b.rand(6, 3, 3, 3, scale=0.3), b.rand(6), pads=[1, 1, 1, 1])
    bn = b.op(
        "BatchNormalization",
        c,
        b.rand(6, positive=True),
        b.rand(6),
        b.rand(6),
        b.rand(6, positive=True),
    )
    lr = b.op("LeakyRelu", bn, alpha=0.1)
    mp = b.op("MaxPool", lr, kernel_shape=[2, 2], strides=[2, 2])  # [2, 6, 6, 6]
    ap = b.op("AveragePool", mp, kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=0)
    lrn = b.op("LRN", ap, size=3, alpha=1e-3, beta=0.75, bias=1.0)
    dw = b.op("Conv", lrn, b.rand(6, 1, 3, 3, scale=0.3), pads=[1, 1, 1, 1], group=6)  # depthwise
    gc = b.op("Conv", dw, b.rand(6, 3, 1, 1, scale=0.3), group=2)  # grouped 1x1
    r = b.op("Relu", gc)
    e = b.op("Elu", b.op("Sub", r, b.const(0.5)), alpha=0.7)
    s = b.op("Selu", e)
    hs = b.op("HardSigmoid", s, alpha=0.3, beta=0.4)
    sg = b.op("Sigmoid", b.op("Add", hs, b.rand(1, 6, 1, 1)))
    th = b.op("Tanh", b.op("Mul", sg, b.const(3.0)))
    sq = b.op("Sqrt", b.op("Abs", th))
    ex = b.op("Exp", b.op("Neg", sq))
    lg = b.op("Log", b.op("Add", ex, b.const(1.0)))
    ef = b.op("Erf", b.op("Div", lg, b.const(0.7)))
    pw = b.op("Pow", b.op("Softplus", ef), b.const(1.5))
    rc = b.op("Reciprocal", b.op("Add", pw, b.const(1.0)))
    cl = b.op("Clip", rc, b.const(0.2), b.const(0.9))
    mx = b.op("Max", cl, sg, th)
    mn = b.op("Min", cl, sg)
    me = b.op("Mean", mx, mn)
    sm = b.op("Sum", me, mx, mn)
    dr = b.op("Dropout", sm)
    gp = b.op("GlobalAveragePool", dr)  # [2, 6, 1, 1]
    gm = b.op("GlobalMaxPool", dr)
    # -- a flatten head through the shape subgraph exported models use
    shp = b.op("Shape", dr)
    n = b.op("Gather", shp, b.const(0, np.int64), axis=0)
    n1 = b.op("Unsqueeze", n, b.const([0], np.int64))
    new_shape = b.op("Concat", n1, b.const([-1], np.int64), axis=0)
    flat = b.op("Reshape", dr, new_shape)  # [2, 216]
    g = b.op("Gemm", flat, b.rand(32, 216, scale=0.1), b.rand(32), transB=1, alpha=0.9, beta=0.5)
    mm = b.op("MatMul", g, b.rand(32, 8, scale=0.2))  # [2, 8]
    soft = b.op("Softmax", mm, axis=-1)
    lsoft = b.op("LogSoftmax", mm, axis=-1)
    red = b.op("ReduceMean", soft, b.const([1], np.int64), keepdims=1)  # [2, 1]
    rsum = b.op("ReduceSum", lsoft, b.const([1], np.int64), keepdims=1)
    rmax = b.op("ReduceMax", mm, b.const([1], np.int64), keepdims=1)
    rmin = b.op("ReduceMin", mm, b.const([1], np.int64), keepdims=1)
    rprod = b.op("ReduceProd", b.op("Sigmoid", mm), b.const([1], np.int64), keepdims=1)
    both = b.op("Concat", red, rsum, rmax, rmin, rprod, axis=1)  # [2, 5]
    tr = b.op("Transpose", mm, perm=[1, 0])  # [8, 2]
    sl = b.op(
        "Slice",
        tr,
        b.const([1], np.int64),
        b.const([7], np.int64),
        b.const([0], np.int64),
        b.const([2], np.int64),
    )  # [3, 2]
    fl = b.op("Flatten", gp, axis=1)  # [2, 6]
    fm = b.op("Flatten", gm, axis=1)
    ex2 = b.op("Expand", red, b.const([2, 6], np.int64))
    gt = b.op("Greater", fl, ex2)
    lt = b.op("Less", fm, ex2)
    eq = b.op(
        "Equal",
        b.op("Floor", b.op("Mul", fl, b.const(4.0))),
        b.op("Ceil", b.op("Mul", fm, b.const(4.0))),
    )
    cond = b.op("Or", b.op("And", gt, b.op("Not", lt)), b.op("Xor", eq, lt))
    wh = b.op("Where", cond, fl, fm)
    sign = b.op("Sign", b.op("Sub", wh, ex2))
    cast = b.op("Cast", b.op("Cast", wh, to=TensorProto.DOUBLE), to=F)
    ge = b.op("GreaterOrEqual", cast, sign)
    le = b.op("LessOrEqual", cast, sign)
    ge_f = b.op("CastLike", b.op("Or", ge, le), cast)
    cos = b.op(
        "ConstantOfShape", b.const([2, 6], np.int64), value=helper.make_tensor("v", F, [1], [0.25])
    )
    rng = b.op("Range", b.const(0.0), b.const(6.0), b.const(1.0))
    hm = b.op("Hardmax", b.op("Add", b.op("Add", cast, cos), rng), axis=1)
    sq2 = b.op("Squeeze", b.op("Unsqueeze", hm, b.const([0], np.int64)), b.const([0], np.int64))
    ident = b.op("Identity", sq2)
    cst = b.op("Constant", value=helper.make_tensor("c", F, [6], list(range(6))))
    mod = b.op("Mod", b.op("Add", ident, cst), b.const(4.0), fmod=1)
    out1 = b.op("Add", b.op("Add", mod, ge_f), sign)
    # -- normalisations, more pools and indexing on the trunk's features [2, 6, 6, 6]
    inorm = b.op("InstanceNormalization", dr, b.rand(6, positive=True), b.rand(6))
    lnorm = b.op("LayerNormalization", inorm, b.rand(6, positive=True), b.rand(6), axis=-1)
    lp = b.op("LpPool", lnorm, kernel_shape=[2, 2], strides=[2, 2], p=2)  # [2, 6, 3, 3]
    ctr = b.op("ConvTranspose", lp, b.rand(6, 3, 3, 3, scale=0.3), pads=[1, 1, 1, 1], group=2)
    lp = b.op("Add", ctr, b.op("GlobalLpPool", lp, p=2))  # [2, 6, 3, 3]
    padded = b.op("Pad", lp, b.const([0, 0, 1, 0, 0, 0, 0, 1], np.int64), mode="reflect")
    halves = b.op("Split", padded, b.const([2, 2], np.int64), axis=3, outputs=2)  # [2, 6, 4, 2] x2
    tiled = b.op("Tile", halves[0], b.const([1, 1, 1, 2], np.int64))  # [2, 6, 4, 4]
    idx = b.const(b.rng.integers(0, 4, (2, 6, 4, 4)), np.int64)
    mixed = b.op("Add", tiled, b.op("Concat", halves[1], halves[1], axis=3))
    ge2 = b.op("GatherElements", mixed, idx, axis=3)
    sc = b.op(
        "ScatterElements",
        ge2,
        b.const(b.rng.integers(0, 4, (2, 6, 4, 1)), np.int64),
        b.const(b.rng.standard_normal((2, 6, 4, 1))),
        axis=3,
    )
    size = b.op("Cast", b.op("Size", sc), to=F)
    out2 = b.op("Div", sc, size)
    nz = b.op("NonZero", b.op("Greater", flat, b.const(0.0)))  # data-dependent shape
    nzf = b.op("Cast", b.op("ReduceSum", nz, b.const([1], np.int64), keepdims=0), to=F)
    model = make_model(
        b.nodes,
        [tensor("x", F, [2, 3, 12, 12])],
        [tensor(o, F, None) for o in (out1, both, sl, out2, nzf)],
        b.inits,
        opset=18,
    )
    return model, b.ops


#: Operators the kitchen sink leaves out, with the test that covers them instead.
COVERED_ELSEWHERE = {
    "BitShift": "integer-only (tests/ops/test_elementwise.py node cases)",
    "Gelu": "opset 20, above kitchen_sink's (tests/test_fusion.py, against onnxruntime)",
}


def _ort_session(model):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort_session(model, so)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kitchen_sink_matches_onnxruntime(seed):
    model, _ = kitchen_sink(seed)
    x = np.random.default_rng(100 + seed).standard_normal((2, 3, 12, 12)).astype(np.float32)
    want = _ort_session(model).run(None, {"x": x})
    for level in ("none", "all"):
        got = graphrt.Session(model, optimization_level=level).run(None, {"x": x})
        for w, g in zip(want, got):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


#: Operator families with test modules of their own; each family compares a random-weight model
#: with onnxruntime in one of its modules, and an operator its modules name counts as covered.
FAMILY_TESTS = {
    "math": ["ops/test_math.py", "ops/_math.py", "ops/test_math_contract.py"],
    "reduce": ["ops/test_reduce_search.py", "ops/test_reduce_family.py"],
    "indexing": ["ops/test_indexing.py"],
    "resample": ["ops/test_resample.py"],
    "detection": ["ops/test_detection.py", "ops/test_detection_contract.py"],
    "signal": ["ops/test_signal.py", "ops/test_signal_family.py"],
    "training": ["ops/test_training.py", "ops/test_training_contract.py"],
    "sequence": ["ops/test_rnn.py"],
    "attention": ["ops/test_attention.py"],
    "quantization": ["ops/test_quantization.py"],
}


def _named_in_family_tests() -> set[str]:
    names: set[str] = set()
    for family, paths in FAMILY_TESTS.items():
        text = "".join((Path(__file__).parent / path).read_text() for path in paths)
        assert "ort_session" in text, f"the {family} tests compare no model with onnxruntime"
        names |= set(re.findall(r"[\"']([A-Z][A-Za-z0-9]+)[\"']", text))
    return names


def test_every_operator_is_covered():
    _, used = kitchen_sink()
    provided = {d.op_type for d in OPERATORS if d.domain == ""}
    missing = provided - used - set(COVERED_ELSEWHERE) - _named_in_family_tests()
    assert not missing, f"add these operators to kitchen_sink: {sorted(missing)}"


@pytest.mark.parametrize("bn", [True, False])
def test_small_cnn_matches_onnxruntime_and_threads_agree(bn):
    model = small_cnn(seed=4, channels=8, bn=bn)
    x = np.random.default_rng(5).standard_normal((3, 3, 16, 16)).astype(np.float32)
    want = _ort_session(model).run(None, {"x": x})[0]
    outs = [graphrt.Session(model, intra_op_threads=t).run(None, {"x": x})[0] for t in (1, 2, 4)]
    np.testing.assert_allclose(outs[0], want, rtol=1e-4, atol=1e-6)
    assert outs[0].tobytes() == outs[1].tobytes() == outs[2].tobytes()
