"""The neural-network operators of graphrt-ops-basic: convolutions, pools, normalizations.

Every onnx node case of these operators runs through its kernel (``node_cases.run_case``); the
ones that cannot pass would be listed in ``EXPECTED_FAILURES`` with the reason, strict.  Then
randomized single-node models against onnxruntime (grouped, depthwise, dilated, strided,
padded, 1-D to 3-D convolutions; pools with ceil_mode, pads and dilations; the
normalizations), run the way a plan runs a kernel: ``infer`` with the constant inputs known,
scratch full of garbage, ``bind``, call.  Finally: thread counts never change a bit, a
steady-state run allocates no numpy array data, and bad models or inputs are refused with the
right kind.
"""

from __future__ import annotations

import math
import tracemalloc

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import graphrt_ops_basic.conv as conv_module
import graphrt_ops_basic.norm as norm_module
from graphrt.attrs import node_info
from graphrt.errors import SessionError
from graphrt.kernel import InferContext, KernelContext
from graphrt.threads import IntraOpPool
from graphrt_ops_basic.table import OPERATORS
from tests._models import ort_session
from tests._numpy_alloc import count_numpy_allocations
from tests._versions import ONNX, onnxruntime_release
from tests.ops.node_cases import node_case_params, run_case

ort = pytest.importorskip("onnxruntime")

OPS = {
    "Conv",
    "ConvTranspose",
    "MaxPool",
    "AveragePool",
    "LpPool",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "GlobalLpPool",
    "BatchNormalization",
    "InstanceNormalization",
    "LayerNormalization",
    "LRN",
}
FACTORIES = {d.op_type: d.factory for d in OPERATORS if d.op_type in OPS and d.domain == ""}
#: Operators onnx has no single-node case for, and where they are tested instead.
WITHOUT_NODE_CASES = {"GlobalLpPool": "test_global_pools_match_onnxruntime"}

#: Node cases that cannot pass, with the reason.  Strict: a case that starts passing fails.
EXPECTED_FAILURES: dict[str, str] = {}

NODE_CASES = node_case_params(OPS, EXPECTED_FAILURES)


def test_every_operator_has_a_kernel_and_node_cases():
    assert set(FACTORIES) == OPS
    covered = {p.values[0].graph.node[0].op_type for p in NODE_CASES}
    assert covered == OPS - set(WITHOUT_NODE_CASES)
    assert len(NODE_CASES) >= 95


EXACT_NN = {
    "Conv",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "BatchNormalization",
    "InstanceNormalization",
    "LayerNormalization",
}


def test_the_table_covers_every_opset_version_onnx_defines():
    versions: dict[str, set[int]] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain == "" and schema.name in OPS:
            versions.setdefault(schema.name, set()).add(schema.since_version)
    for op, since in versions.items():
        defs = [d for d in OPERATORS if d.op_type == op and d.domain == ""]
        for v in since:
            assert any(d.covers(v) for d in defs), f"{op} opset {v} has no kernel"
        # exact mode (docs/exact-mode.md): the convolution's canonical order, maxima, window
        # sums tap by tap, fixed normalisation orders; not ConvTranspose, LpPool, LRN...
        assert all(d.flag("supports_exact") == (op in EXACT_NN) for d in defs), op


@pytest.mark.parametrize(("model", "inputs", "outputs"), NODE_CASES)
def test_onnx_node_case(model, inputs, outputs):
    with np.errstate(all="ignore"):
        run_case(FACTORIES[model.graph.node[0].op_type], model, inputs, outputs)


# -- helpers ------------------------------------------------------------------------------------


def make_node(op: str, n_inputs: int, n_outputs: int = 1, **attrs) -> onnx.NodeProto:
    inputs = [f"i{k}" for k in range(n_inputs)]
    outputs = [f"o{k}" for k in range(n_outputs)]
    return helper.make_node(op, inputs, outputs, **attrs)


class Bound:
    """A kernel prepared and bound the way a plan does it, on arrays made once."""

    def __init__(self, op, inputs, n_outputs=1, opset=22, known=(1, 2, 3, 4), pool=None, **attrs):
        node = make_node(op, len(inputs), n_outputs, **attrs)
        self.kernel = FACTORIES[op](node_info(node, opset))
        inputs = [None if x is None else np.asarray(x) for x in inputs]
        ictx = InferContext(
            [None if x is None else x.dtype for x in inputs],
            [None if x is None else x.shape for x in inputs],
            [x if i in known else None for i, x in enumerate(inputs)],
            n_outputs,
        )
        self.kernel.infer(ictx)
        self.outputs = [None if t is None else np.empty(t[1], t[0]) for t in ictx.output_types()]
        # scratch holds garbage, as slab memory another step used does
        scratch = [_garbage(d, s) for d, s in ictx.scratch]
        self.ctx = KernelContext(prepared=ictx.prepared, scratch=scratch, pool=pool)
        self.inputs = inputs
        self.step = self.kernel.bind(self.ctx, inputs, self.outputs)

    def __call__(self) -> list[np.ndarray]:
        self.step()
        return self.outputs


def _garbage(dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    a = np.empty(shape, dtype)
    a.view(np.uint8).fill(0xFF)  # NaN in every float type
    return a


def ort_run(op, inputs, n_outputs=1, opset=22, **attrs) -> list[np.ndarray]:
    node = make_node(op, len(inputs), n_outputs, **attrs)
    decl = [
        helper.make_tensor_value_info(f"i{k}", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
        for k, x in enumerate(inputs)
    ]
    types = [helper.np_dtype_to_tensor_dtype(inputs[0].dtype)] * n_outputs
    if op == "MaxPool" and n_outputs > 1:
        types[1] = TensorProto.INT64
    if op == "LayerNormalization":
        types[1:] = [TensorProto.FLOAT] * (n_outputs - 1)
    outs = [helper.make_tensor_value_info(o, t, None) for o, t in zip(node.output, types)]
    graph = helper.make_graph([node], "g", decl, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort_session(model, so).run(None, {f"i{k}": x for k, x in enumerate(inputs)})


def reference_run(op, inputs, n_outputs=1, opset=22, **attrs) -> list[np.ndarray]:
    node = make_node(op, len(inputs), n_outputs, **attrs)
    decl = [
        helper.make_tensor_value_info(f"i{k}", TensorProto.UNDEFINED, None)
        for k in range(len(inputs))
    ]
    outs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in node.output]
    graph = helper.make_graph([node], "g", decl, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, {f"i{k}": x for k, x in enumerate(inputs)})


def assert_close(got, want, rtol=1e-4, atol=1e-5):
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def _same_pads_are_natural(spatial, kernel, strides, dilations) -> bool:
    """SAME padding both oracles agree on: no dilation and a window at least the stride (else
    the spec's pad formula turns negative; graphrt pads by zero there, TensorFlow's rule)."""
    return all(d == 1 and k >= s for k, s, d in zip(kernel, strides, dilations))


# -- convolutions against onnxruntime -----------------------------------------------------------


def random_conv(seed: int):
    rng = np.random.default_rng(seed)
    rank = (1, 2, 2, 2, 3)[seed % 5]
    kind = ("plain", "grouped", "depthwise", "pointwise")[seed // 5 % 4]
    group = {"plain": 1, "grouped": int(rng.integers(2, 4)), "pointwise": 1}.get(kind)
    cg = int(rng.integers(1, 4))
    if kind == "depthwise":
        group, cg = int(rng.integers(2, 6)), 1
    mg = 1 if kind == "depthwise" and rng.random() < 0.7 else int(rng.integers(1, 4))
    kernel = [1] * rank if kind == "pointwise" else [int(rng.integers(1, 4)) for _ in range(rank)]
    strides = [int(rng.integers(1, 4)) for _ in range(rank)]
    dilations = [int(rng.integers(1, 3)) for _ in range(rank)]
    spatial = [int(rng.integers(5, 11)) for _ in range(rank)]
    attrs = {"strides": strides, "dilations": dilations, "group": group}
    auto = str(rng.choice(["NOTSET", "NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    if auto.startswith("SAME") and not _same_pads_are_natural(spatial, kernel, strides, dilations):
        auto = "NOTSET"
    if auto == "NOTSET":
        attrs["pads"] = [int(rng.integers(0, 3)) for _ in range(2 * rank)]
    else:
        attrs["auto_pad"] = auto
    if kind == "pointwise" and rng.random() < 0.5:
        attrs = {"group": 1, "strides": [1] * rank}  # the no-copy path: X is the matrix
    x = rand(rng, int(rng.integers(1, 3)), group * cg, *spatial)
    w = rand(rng, group * mg, cg, *kernel)
    inputs = [x, w] + ([rand(rng, group * mg)] if rng.random() < 0.7 else [])
    return inputs, attrs


@pytest.mark.parametrize("seed", range(60))
def test_conv_matches_onnxruntime(seed):
    inputs, attrs = random_conv(seed)
    want = ort_run("Conv", inputs, **attrs)
    assert_close(Bound("Conv", inputs, **attrs)(), want)
    # W and B known only at run time: the weight matrix is not prepared
    assert_close(Bound("Conv", inputs, known=(), **attrs)(), want)


@pytest.mark.parametrize("seed", [s for s in range(60) if s // 5 % 4 == 2])
def test_depthwise_conv_multiply_adds_match_onnxruntime(monkeypatch, seed):
    """Small maps take the product path; these take the tap-by-tap one of large maps."""
    monkeypatch.setattr(conv_module, "DEPTHWISE_MIN", 1)
    inputs, attrs = random_conv(seed)
    want = ort_run("Conv", inputs, **attrs)
    assert_close(Bound("Conv", inputs, **attrs)(), want)
    assert_close(Bound("Conv", inputs, known=(), **attrs)(), want)


@pytest.mark.parametrize("strides", [[1, 1], [2, 2]])
def test_depthwise_conv_on_a_large_map(strides):
    rng = np.random.default_rng(0)
    x, w, b = rand(rng, 2, 16, 72, 72), rand(rng, 16, 1, 3, 3), rand(rng, 16)
    attrs = {"group": 16, "pads": [1, 1, 1, 1], "strides": strides}
    bound = Bound("Conv", [x, w, b], **attrs)
    assert bound.ctx.prepared.depthwise
    assert_close(bound(), ort_run("Conv", [x, w, b], **attrs))


@pytest.mark.parametrize("seed", range(6))
def test_conv_same_padding_with_dilation_follows_the_spec(seed):
    """onnxruntime refuses dilations with SAME padding; onnx's reference evaluator is the oracle."""
    rng = np.random.default_rng(seed)
    x, w = rand(rng, 1, 3, 9, 8), rand(rng, 4, 3, 3, 2)
    attrs = {"dilations": [2, 3], "strides": [1 + seed % 2, 2], "auto_pad": "SAME_UPPER"}
    attrs["auto_pad"] = ("SAME_UPPER", "SAME_LOWER")[seed % 2]
    if ONNX >= (1, 23):
        want = reference_run("Conv", [x, w], **attrs)
    else:
        # onnx's reference Conv before 1.23 misplaces SAME_LOWER windows with dilations; the
        # oracle is onnxruntime with the pads the spec's SAME formula gives
        explicit = {k: v for k, v in attrs.items() if k != "auto_pad"}
        explicit["pads"] = _spec_pads(x.shape[2:], w.shape[2:], attrs)
        want = ort_run("Conv", [x, w], **explicit)
    assert_close(Bound("Conv", [x, w], **attrs)(), want)


def _spec_pads(spatial, kernel, attrs: dict) -> list[int]:
    """The pads [begin..., end...] the spec gives for auto_pad and pads.  SAME: an output of
    ceil(in / stride) and the total padding that needs, split in two with the odd one at the
    end (SAME_UPPER) or the beginning (SAME_LOWER)."""
    rank = len(spatial)
    auto = attrs.get("auto_pad", "NOTSET")
    if auto == "NOTSET":
        return list(attrs.get("pads", [0] * 2 * rank))
    if auto == "VALID":
        return [0] * 2 * rank
    strides = attrs.get("strides", [1] * rank)
    dilations = attrs.get("dilations", [1] * rank)
    begin, end = [], []
    for n, k, s, d in zip(spatial, kernel, strides, dilations):
        total = max((-(-n // s) - 1) * s + (k - 1) * d + 1 - n, 0)
        small, large = total // 2, total - total // 2
        begin.append(large if auto == "SAME_LOWER" else small)
        end.append(total - begin[-1])
    return begin + end


@pytest.mark.parametrize("dtype", [np.float16, np.float64, ml_dtypes.bfloat16])
def test_conv_other_float_types(dtype):
    rng = np.random.default_rng(0)
    x, w, b = rand(rng, 2, 4, 9, 9), rand(rng, 6, 2, 3, 3), rand(rng, 6)
    attrs = {"pads": [1, 1, 1, 1], "strides": [2, 1], "group": 2}
    inputs = [a.astype(dtype) for a in (x, w, b)]  # what the kernel sees, in float32 for ort
    want = ort_run("Conv", [a.astype(np.float32) for a in inputs], opset=11, **attrs)[0]
    (got,) = Bound("Conv", inputs, **attrs)()
    assert got.dtype == dtype
    tol = {np.float64: 1e-5, np.float16: 1e-2, ml_dtypes.bfloat16: 5e-2}[dtype]
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=tol, atol=tol)


def random_conv_transpose(seed: int):
    rng = np.random.default_rng(seed)
    rank = (1, 2, 2, 3)[seed % 4]
    group = int(rng.integers(1, 3))
    cg, mg = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    kernel = [int(rng.integers(1, 4)) for _ in range(rank)]
    strides = [int(rng.integers(1, 4)) for _ in range(rank)]
    dilations = [int(rng.integers(1, 3)) for _ in range(rank)]
    spatial = [int(rng.integers(2, 6)) for _ in range(rank)]
    attrs = {"strides": strides, "dilations": dilations, "group": group}
    style = seed // 4 % 3
    if style == 0:
        attrs["pads"] = [int(rng.integers(0, k)) for k in kernel * 2]
        attrs["output_padding"] = [int(rng.integers(0, s)) for s in strides]
    elif style == 1:
        full = [
            (n - 1) * s + (k - 1) * d + 1 for n, s, k, d in zip(spatial, strides, kernel, dilations)
        ]
        attrs["output_shape"] = [f - int(rng.integers(0, 2)) for f in full]
    else:  # as for Conv: no dilation, and a window at least the stride (see above)
        attrs["auto_pad"] = "SAME_UPPER"
        attrs["dilations"] = [1] * rank
        kernel = [max(k, s) for k, s in zip(kernel, strides)]
    x = rand(rng, int(rng.integers(1, 3)), group * cg, *spatial)
    w = rand(rng, group * cg, mg, *kernel)
    inputs = [x, w] + ([rand(rng, group * mg)] if rng.random() < 0.6 else [])
    return inputs, attrs


@pytest.mark.parametrize("seed", range(24))
def test_conv_transpose_matches_onnxruntime(seed):
    inputs, attrs = random_conv_transpose(seed)
    want = ort_run("ConvTranspose", inputs, **attrs)
    assert_close(Bound("ConvTranspose", inputs, **attrs)(), want)
    assert_close(Bound("ConvTranspose", inputs, known=(), **attrs)(), want)


def test_conv_opset_1_and_resnet_shapes():
    """ResNet-50-sized layers take the blocked paths (and float32 BLAS)."""
    rng = np.random.default_rng(1)
    for cin, size, cout, k, s, p in [
        (3, 56, 16, 7, 2, 3),
        (64, 28, 64, 3, 1, 1),
        (128, 28, 64, 1, 2, 0),
    ]:
        x, w, b = rand(rng, 1, cin, size, size), rand(rng, cout, cin, k, k) * 0.1, rand(rng, cout)
        attrs = {"strides": [s, s], "pads": [p] * 4}
        want = ort_run("Conv", [x, w, b], opset=11, **attrs)
        assert_close(Bound("Conv", [x, w, b], opset=1, **attrs)(), want, rtol=1e-4, atol=1e-4)


# -- pools against onnxruntime ------------------------------------------------------------------


def random_pool(op: str, seed: int):
    rng = np.random.default_rng(seed)
    rank = (1, 2, 2, 3)[seed % 4]
    kernel = [int(rng.integers(1, 4)) for _ in range(rank)]
    strides = [int(rng.integers(1, 4)) for _ in range(rank)]
    dilations = [int(rng.integers(1, 3)) for _ in range(rank)]
    spatial = [int(rng.integers(5, 11)) for _ in range(rank)]
    attrs = {"kernel_shape": kernel, "strides": strides}
    if rng.random() < 0.5:
        attrs["dilations"] = dilations
    else:
        dilations = [1] * rank
    auto = str(rng.choice(["NOTSET", "NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    if auto.startswith("SAME") and not _same_pads_are_natural(spatial, kernel, strides, dilations):
        auto = "NOTSET"
    if auto == "NOTSET":
        attrs["pads"] = [int(rng.integers(0, k)) for k in kernel * 2]
        attrs["ceil_mode"] = int(rng.integers(0, 2))
    else:
        attrs["auto_pad"] = auto
    if op == "AveragePool":
        attrs["count_include_pad"] = int(rng.integers(0, 2))
    if op == "LpPool":
        attrs["p"] = int(rng.integers(1, 4))
    if op == "MaxPool":
        attrs["storage_order"] = int(rng.integers(0, 2))
    return rand(rng, int(rng.integers(1, 3)), 3, *spatial), attrs


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
def test_pools_match_onnxruntime(op, seed):
    x, attrs = random_pool(op, seed)
    if op == "LpPool" and attrs.get("ceil_mode"):
        attrs["ceil_mode"] = 0  # onnxruntime's LpPool does not know ceil_mode
    if _onnxruntime_pools_differ(op, attrs):
        want = [spec_pool(op, x, attrs)]
    else:
        want = ort_run(op, [x], opset=19 if op != "LpPool" else 18, **attrs)
    assert_close(Bound(op, [x], **attrs)(), want)


def _onnxruntime_pools_differ(op: str, attrs: dict) -> bool:
    """Pools where the installed onnxruntime departs from the spec, so that the spec's text
    (spec_pool) is the oracle: before 1.21 onnxruntime keeps ceil_mode windows that start in
    the right padding (one output too many) and averages AveragePool's last ceil_mode window
    over the whole kernel; from 1.21 to 1.24 it averages AveragePool windows with
    count_include_pad=1 over a wrong count where they overlap the padding.  (onnx's reference
    evaluator is no oracle there: it mis-sizes MaxPool with ceil_mode and uneven pads.)"""
    release = onnxruntime_release()
    if release < (1, 21):
        return bool(attrs.get("ceil_mode"))
    return release < (1, 25) and op == "AveragePool" and bool(attrs.get("count_include_pad"))


def spec_pool(op: str, x: np.ndarray, attrs: dict, indices: bool = False):
    """MaxPool or AveragePool by the spec's text, one window at a time (a test oracle).

    Output extents: floor or (ceil_mode) ceil of (in + pads - dilated kernel) / stride, + 1,
    less a last ceil_mode window that would start in the right padding.  A window's taps in
    the padding take no part in the maximum, nor in the average unless count_include_pad,
    which counts the taps inside the padded extent (not the ceil_mode overhang).  MaxPool's
    indices: flat over (N, C, spatial...), the spatial part column-major if storage_order=1;
    the first maximum wins.
    """
    spatial, rank = x.shape[2:], x.ndim - 2
    kernel = attrs["kernel_shape"]
    strides = attrs.get("strides", [1] * rank)
    dilations = attrs.get("dilations", [1] * rank)
    pads = _spec_pads(spatial, kernel, attrs)
    ceil = bool(attrs.get("ceil_mode"))
    out = []
    for i, (n, k, s, d) in enumerate(zip(spatial, kernel, strides, dilations)):
        span = n + pads[i] + pads[i + rank] - (k - 1) * d - 1
        o = (-(-span // s) if ceil else span // s) + 1
        if ceil and (o - 1) * s >= n + pads[i]:
            o -= 1
        out.append(o)
    y = np.empty(x.shape[:2] + tuple(out), x.dtype)
    idx = np.empty(y.shape, np.int64)
    flat = np.arange(x.size, dtype=np.int64).reshape(x.shape)
    if attrs.get("storage_order"):  # column-major spatial positions
        col = np.arange(math.prod(spatial), dtype=np.int64).reshape(spatial[::-1]).T
        flat = flat - flat % col.size + col
    for pos in np.ndindex(*out):
        taps, padded = [], 1
        for i, (p, n, k, s, d) in enumerate(zip(pos, spatial, kernel, strides, dilations)):
            at = p * s - pads[i] + d * np.arange(k)
            taps.append(at[(at >= 0) & (at < n)])
            padded *= int(((at >= -pads[i]) & (at < n + pads[i + rank])).sum())
        window = (slice(None), slice(None), *np.ix_(*taps))
        vals = x[window].reshape(*x.shape[:2], -1)
        if op == "MaxPool":
            first = vals.argmax(axis=-1)[..., None]
            y[(..., *pos)] = np.take_along_axis(vals, first, -1)[..., 0]
            where = flat[window].reshape(*x.shape[:2], -1)
            idx[(..., *pos)] = np.take_along_axis(where, first, -1)[..., 0]
        else:
            count = padded if attrs.get("count_include_pad") else vals.shape[-1]
            y[(..., *pos)] = vals.astype(np.float64).sum(axis=-1) / count
    return [y, idx] if indices else y


@pytest.mark.parametrize("seed", range(30))
def test_max_pool_indices_match_onnxruntime(seed):
    x, attrs = random_pool("MaxPool", seed)
    if _onnxruntime_pools_differ("MaxPool", attrs):
        want = spec_pool("MaxPool", x, attrs, indices=True)
    else:
        want = ort_run("MaxPool", [x], 2, opset=12, **attrs)
    assert_close(Bound("MaxPool", [x], 2, **attrs)(), want, rtol=0, atol=0)


def test_max_pool_integer_types_and_first_maximum_wins_ties():
    x = np.array([[[[1, 5, 5], [5, 2, -128], [0, 5, 3]]]], np.int8)
    y, idx = Bound("MaxPool", [x], 2, kernel_shape=[2, 2], pads=[1, 1, 0, 0])()
    assert y.tolist() == [[[[1, 5, 5], [5, 5, 5], [5, 5, 5]]]]
    assert idx.tolist() == [[[[0, 1, 1], [3, 1, 1], [3, 3, 7]]]]
    u = np.arange(16, dtype=np.uint8).reshape(1, 1, 4, 4)
    (y,) = Bound("MaxPool", [u], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])()
    assert y.tolist() == [[[[5, 7], [13, 15]]]]


@pytest.mark.parametrize("opset", [1, 2, 11, 18])
def test_lp_pool_p_attribute_by_opset(opset):
    x = np.random.default_rng(0).standard_normal((1, 2, 5, 5)).astype(np.float32)
    attrs = {"kernel_shape": [2, 2], "p": 3.0 if opset == 1 else 3}
    (got,) = Bound("LpPool", [x], opset=opset, **attrs)()
    want = np.cbrt(sum(np.abs(x[:, :, i : i + 4, j : j + 4]) ** 3 for i in (0, 1) for j in (0, 1)))
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
@pytest.mark.parametrize("shape", [(2, 3, 7), (1, 4, 7, 7), (2, 2, 3, 4, 5)])
def test_global_pools_match_onnxruntime(op, shape):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    assert_close(Bound(op, [x])(), ort_run(op, [x], opset=2 if op == "GlobalLpPool" else 1))
    if op == "GlobalLpPool":
        (got,) = Bound(op, [x], opset=1, p=3.0)()
        want = np.cbrt((np.abs(x) ** 3).sum(axis=tuple(range(2, x.ndim)), keepdims=True))
        np.testing.assert_allclose(got, want, rtol=1e-5)


# -- normalizations against onnxruntime ---------------------------------------------------------


def bn_inputs(rng, x_shape, dtype=np.float32):
    c = x_shape[1]
    return [
        rand(rng, *x_shape, dtype=dtype) * 2 + 1,
        (rng.random(c) + 0.5).astype(dtype),
        rand(rng, c, dtype=dtype),
        rand(rng, c, dtype=dtype),
        (rng.random(c) + 0.5).astype(dtype),
    ]


@pytest.mark.parametrize("known", [(1, 2, 3, 4), ()])
@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 5), (2, 3, 4, 5), (1, 2, 3, 4, 5)])
def test_batch_norm_inference_matches_onnxruntime(shape, known):
    inputs = bn_inputs(np.random.default_rng(len(shape)), shape)
    for opset in (7, 9, 15):
        want = ort_run("BatchNormalization", inputs, opset=opset, epsilon=1e-3)
        got = Bound("BatchNormalization", inputs, opset=opset, known=known, epsilon=1e-3)()
        assert_close(got, want)


@pytest.mark.parametrize(("opset", "n_outputs"), [(9, 5), (14, 3), (15, 3)])
def test_batch_norm_training_outputs_match_onnxruntime(opset, n_outputs):
    inputs = bn_inputs(np.random.default_rng(opset), (3, 4, 5, 6))
    attrs = {"momentum": 0.8, "epsilon": 1e-4}
    if opset >= 14:
        attrs["training_mode"] = 1
    want = ort_run("BatchNormalization", inputs, n_outputs, opset=opset, **attrs)
    got = Bound("BatchNormalization", inputs, n_outputs, opset=opset, **attrs)()
    assert_close(got, want)


def test_batch_norm_before_opset_7():
    rng = np.random.default_rng(0)
    x = rand(rng, 2, 3, 4)
    # spatial=0: one parameter per element of a sample
    scale, bias, mean = rand(rng, 3, 4), rand(rng, 3, 4), rand(rng, 3, 4)
    var = (rng.random((3, 4)) + 0.5).astype(np.float32)
    (got,) = Bound(
        "BatchNormalization", [x, scale, bias, mean, var], opset=6, spatial=0, is_test=1
    )()
    np.testing.assert_allclose(
        got, (x - mean) / np.sqrt(var + 1e-5) * scale + bias, rtol=1e-5, atol=1e-6
    )
    # is_test=0 with only Y asked for computes the inference result
    inputs = bn_inputs(rng, (2, 3, 4))
    (got,) = Bound(
        "BatchNormalization", inputs, opset=1, is_test=0, consumed_inputs=[0, 0, 0, 1, 1]
    )()
    assert_close([got], ort_run("BatchNormalization", inputs, opset=7))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 4, 6, 7), (2, 2, 3, 4, 5)])
def test_instance_norm_matches_onnxruntime(shape, dtype):
    rng = np.random.default_rng(3)
    inputs = [rand(rng, *shape) * 3 + 2, rand(rng, shape[1]), rand(rng, shape[1])]
    inputs = [a.astype(dtype) for a in inputs]
    f32 = [a.astype(np.float32) for a in inputs]
    want = ort_run("InstanceNormalization", f32, opset=6, epsilon=1e-3)[0]
    (got,) = Bound("InstanceNormalization", inputs, epsilon=1e-3)()
    assert got.dtype == dtype
    tol = 1e-2 if dtype == np.float16 else 1e-4
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(
    ("shape", "axis"), [((4, 7), -1), ((2, 3, 5), 1), ((2, 3, 4, 5), -2), ((3, 4), 0)]
)
def test_layer_norm_matches_onnxruntime(shape, axis, bias):
    rng = np.random.default_rng(len(shape))
    norm = shape[axis:]
    inputs = [rand(rng, *shape) * 2 + 1, rand(rng, *norm)] + ([rand(rng, *norm)] if bias else [])
    want = ort_run("LayerNormalization", inputs, 3, opset=17, axis=axis, epsilon=1e-3)
    got = Bound("LayerNormalization", inputs, 3, opset=17, axis=axis, epsilon=1e-3)()
    assert_close(got, want)
    # the scale broadcasts over the normalized axes (here: one value per last axis)
    inputs[1] = rand(rng, norm[-1])
    if onnxruntime_release() >= (1, 24) or len(norm) == 1:
        want = ort_run("LayerNormalization", inputs, opset=17, axis=axis)
    else:  # onnxruntime before 1.24 refuses a Scale or B shorter than X.shape[axis:]
        want = reference_run("LayerNormalization", inputs, opset=17, axis=axis)
    assert_close(Bound("LayerNormalization", inputs, opset=17, axis=axis)(), want)


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 9])
def test_lrn_matches_the_spec_and_onnxruntime(size):
    x = np.random.default_rng(size).standard_normal((2, 6, 4, 5)).astype(np.float32)
    attrs = {"size": size, "alpha": 1e-2, "beta": 0.6, "bias": 1.5}
    (got,) = Bound("LRN", [x], **attrs)()
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2  # channels before and after
    square = np.stack([(x[:, max(0, c - lo) : c + hi + 1] ** 2).sum(axis=1) for c in range(6)], 1)
    np.testing.assert_allclose(got, x / (1.5 + 1e-2 / size * square) ** 0.6, rtol=1e-5)
    if size % 2:  # onnxruntime refuses even sizes
        assert_close([got], ort_run("LRN", [x], opset=13, **attrs))


# -- threads ------------------------------------------------------------------------------------


@pytest.fixture
def tiny_blocks(monkeypatch):
    """Split even small products into many blocks, so small tests take the parallel paths."""
    monkeypatch.setattr(conv_module, "BLOCK_WORK", 8)
    monkeypatch.setattr(conv_module, "BLOCK_BYTES", 512)
    monkeypatch.setattr(conv_module, "MIN_COLS", 4)
    monkeypatch.setattr(conv_module, "MIN_ROWS", 2)


@pytest.mark.parametrize("seed", range(20))
def test_blocked_conv_matches_onnxruntime_on_any_thread_count(tiny_blocks, seed):
    inputs, attrs = random_conv(seed)
    want = ort_run("Conv", inputs, **attrs)
    results = []
    for threads in (1, 2, 3):
        pool = IntraOpPool(threads)
        try:
            results.append(Bound("Conv", inputs, pool=pool, **attrs)()[0].copy())
        finally:
            pool.shutdown()
    assert_close(results[:1], want)
    assert results[0].tobytes() == results[1].tobytes() == results[2].tobytes()


def test_resnet_sized_conv_gives_the_same_bits_on_any_thread_count():
    rng = np.random.default_rng(0)
    x, w, b = rand(rng, 2, 64, 56, 56), rand(rng, 64, 64, 3, 3) * 0.05, rand(rng, 64)
    plan = Bound("Conv", [x, w, b], pads=[1, 1, 1, 1])
    assert plan.ctx.prepared.split.count > 1  # the default sizes do split this product
    results = []
    for threads in (1, 2, 4):
        pool = IntraOpPool(threads)
        try:
            results.append(Bound("Conv", [x, w, b], pool=pool, pads=[1, 1, 1, 1])()[0].copy())
        finally:
            pool.shutdown()
    assert results[0].tobytes() == results[1].tobytes() == results[2].tobytes()
    assert_close(results[:1], ort_run("Conv", [x, w, b], pads=[1, 1, 1, 1]), atol=1e-4)


# -- the steady state allocates nothing ---------------------------------------------------------


def _alloc_cases():
    rng = np.random.default_rng(0)
    x = rand(rng, 2, 8, 15, 15)
    big = rand(rng, 1, 8, 40, 40)
    w3, w1, dw, b = (
        rand(rng, 8, 8, 3, 3),
        rand(rng, 16, 8, 1, 1),
        rand(rng, 8, 1, 3, 3),
        rand(rng, 8),
    )
    bn = bn_inputs(rng, x.shape)
    pool = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    cases = {
        "conv-3x3": ("Conv", [x, w3, b], 1, {"pads": [1, 1, 1, 1]}, (1, 2)),
        "conv-3x3-runtime-w": ("Conv", [x, w3, b], 1, {"pads": [1, 1, 1, 1]}, ()),
        "conv-3x3-stride2": ("Conv", [x, w3], 1, {"strides": [2, 2]}, (1,)),
        "conv-7x7-stride2": (
            "Conv",
            [x, rand(rng, 4, 8, 7, 7)],
            1,
            {"strides": [2, 2], "pads": [3] * 4},
            (1,),
        ),
        "conv-1x1": ("Conv", [x, w1], 1, {}, (1,)),
        "conv-1x1-stride2": ("Conv", [x, w1], 1, {"strides": [2, 2]}, (1,)),
        "conv-grouped": ("Conv", [x, rand(rng, 8, 2, 3, 3), b], 1, {"group": 4}, (1, 2)),
        "conv-depthwise": ("Conv", [big, dw, b], 1, {"group": 8, "pads": [1, 1, 1, 1]}, (1, 2)),
        "conv-depthwise-small": ("Conv", [x, dw, b], 1, {"group": 8}, (1, 2)),
        "conv-float16": ("Conv", [x.astype(np.float16), w3.astype(np.float16)], 1, {}, (1,)),
        "conv-transpose": (
            "ConvTranspose",
            [x, w3, b],
            1,
            {"strides": [2, 2], "pads": [1] * 4},
            (1, 2),
        ),
        "max-pool": ("MaxPool", [x], 1, pool, ()),
        "max-pool-indices": ("MaxPool", [x], 2, pool, ()),
        "average-pool": ("AveragePool", [x], 1, {**pool, "ceil_mode": 1}, ()),
        "average-pool-7x7": ("AveragePool", [x], 1, {"kernel_shape": [7, 7]}, ()),
        "lp-pool": ("LpPool", [x], 1, {**pool, "p": 3}, ()),
        "global-average": ("GlobalAveragePool", [x], 1, {}, ()),
        "global-max": ("GlobalMaxPool", [x], 1, {}, ()),
        "global-lp": ("GlobalLpPool", [x], 1, {}, ()),
        "batch-norm": ("BatchNormalization", bn, 1, {}, (1, 2, 3, 4)),
        "batch-norm-runtime": ("BatchNormalization", bn, 1, {}, ()),
        "instance-norm": ("InstanceNormalization", [x, b, b], 1, {}, (1, 2)),
        "layer-norm": ("LayerNormalization", [x, rand(rng, 15), rand(rng, 15)], 3, {}, (1, 2)),
        "lrn": ("LRN", [x], 1, {"size": 5}, ()),
    }
    return [pytest.param(*v, id=k) for k, v in cases.items()]


@pytest.mark.parametrize(("op", "inputs", "n_outputs", "attrs", "known"), _alloc_cases())
def test_a_bound_kernel_allocates_no_array_data(op, inputs, n_outputs, attrs, known):
    bound = Bound(op, inputs, n_outputs, known=known, **attrs)
    bound()
    filters = [tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)]
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot().filter_traces(filters)
        bound()
        after = tracemalloc.take_snapshot().filter_traces(filters)
    finally:
        tracemalloc.stop()
    grown = sum(max(0, s.size_diff) for s in after.compare_to(before, "lineno"))
    assert grown == 0, f"{grown} bytes of numpy array data kept"
    with count_numpy_allocations() as counter:  # transient allocations too
        bound()
    assert counter.count == 0, f"{counter.count} numpy allocations ({counter.bytes} bytes)"


@pytest.mark.parametrize(
    ("op", "extra", "attrs"),
    [
        ("Conv", [(6, 4, 1, 1)], {}),  # X itself would be the column matrix
        ("Conv", [(4, 1, 3, 3)], {"group": 4}),
        ("MaxPool", [], {"kernel_shape": [2, 2]}),
        ("GlobalAveragePool", [], {}),
        ("LayerNormalization", [(9,)], {}),
    ],
)
def test_bound_kernels_see_new_values_of_non_contiguous_inputs(op, extra, attrs):
    """A reshape of a strided array is a copy: binding must not freeze one."""
    rng = np.random.default_rng(0)
    x = rand(rng, 2, 4, 9, 20)[..., 3:12]  # rows of 9 out of 20: no flat view
    inputs = [x] + [rand(rng, *s) for s in extra]
    bound = Bound(op, inputs, known=(), **attrs)
    bound()
    x *= 2  # the plan's input array gets new values for the next run
    (got,) = bound()
    (want,) = Bound(op, [np.ascontiguousarray(x), *inputs[1:]], **attrs)()
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize(
    ("op", "extra", "attrs", "known"),
    [
        ("BatchNormalization", "bn", {}, (1, 2, 3, 4)),
        ("BatchNormalization", "bn", {}, ()),
        ("InstanceNormalization", [(4,), (4,)], {}, ()),
        ("LayerNormalization", [(9,), (9,)], {"axis": -2}, ()),
        ("LRN", [], {"size": 3}, ()),
    ],
)
def test_normalizations_may_write_over_their_input(op, extra, attrs, known):
    rng = np.random.default_rng(0)
    x = rand(rng, 2, 4, 9, 9)
    inputs = bn_inputs(rng, x.shape) if extra == "bn" else [x] + [rand(rng, *s) for s in extra]
    assert FACTORIES[op].in_place_input == 0
    (want,) = Bound(op, inputs, known=known, **attrs)()
    bound = Bound(op, inputs, known=known, **attrs)
    x = bound.inputs[0]
    bound.step = bound.kernel.bind(bound.ctx, bound.inputs, [x])  # Y is X's storage
    bound.step()
    np.testing.assert_allclose(x, want, rtol=1e-6, atol=1e-6)


@pytest.mark.skipif(not hasattr(np, "vecdot"), reason="numpy 1 has no vecdot to compare with")
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize(
    ("op", "shape", "attrs"),
    [
        ("InstanceNormalization", (2, 3, 5, 7), {}),
        ("InstanceNormalization", (1, 64, 33), {}),
        ("LayerNormalization", (4, 768), {}),
        ("LayerNormalization", (2, 3, 4, 5), {"axis": 1}),
    ],
)
def test_numpy1_variance_path_gives_the_same_bits(monkeypatch, op, shape, attrs, dtype):
    """Without np.vecdot (numpy 1) the row variances come from matmul: the same bits."""
    rng = np.random.default_rng(4)
    scale_shape = (shape[1],) if op == "InstanceNormalization" else shape[attrs.get("axis", -1) :]
    inputs = [rand(rng, *shape, dtype=dtype) * 3 + 1]
    inputs += [rand(rng, *scale_shape, dtype=dtype), rand(rng, *scale_shape, dtype=dtype)]
    want = [y.copy() for y in Bound(op, inputs, 3 if op == "LayerNormalization" else 1, **attrs)()]
    monkeypatch.setattr(norm_module, "_VECDOT", None)
    got = Bound(op, inputs, 3 if op == "LayerNormalization" else 1, **attrs)()
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


# -- refusals -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("Conv", {"auto_pad": "SAME"}),
        ("Conv", {"strides": [0, 1]}),
        ("Conv", {"pads": [-1, 0, 0, 0]}),
        ("Conv", {"group": 0}),
        ("MaxPool", {}),  # kernel_shape is required
        ("MaxPool", {"kernel_shape": [2, 2], "storage_order": 2}),
        ("AveragePool", {"kernel_shape": [2, 2], "ceil_mode": 3}),
        ("LpPool", {"kernel_shape": [2, 2], "p": 0}),
        ("LRN", {}),  # size is required
    ],
)
def test_bad_attributes_are_invalid_model(op, attrs):
    with pytest.raises(SessionError) as err:
        FACTORIES[op](node_info(make_node(op, 1, **attrs), 22))
    assert err.value.kind == "invalid_model"


@pytest.mark.parametrize(
    ("op", "inputs", "attrs"),
    [
        ("Conv", [(1, 3, 5, 5), (4, 2, 3, 3)], {}),  # channels do not match W
        ("Conv", [(1, 4, 5, 5), (4, 2, 3, 3)], {"group": 3}),
        ("Conv", [(1, 3, 5, 5), (4, 3, 3, 3), (3,)], {}),  # bias size
        ("Conv", [(1, 3, 2, 2), (4, 3, 3, 3)], {}),  # the window is larger than X
        ("Conv", [(3, 5), (4, 3, 3)], {}),  # rank
        ("ConvTranspose", [(1, 3, 5, 5), (2, 4, 3, 3)], {}),
        ("MaxPool", [(2, 3)], {"kernel_shape": [2]}),
        ("AveragePool", [(1, 1, 2, 2)], {"kernel_shape": [3, 3]}),
        ("BatchNormalization", [(2, 3, 4), (3,), (3,), (4,), (3,)], {}),
        ("InstanceNormalization", [(2, 3, 4), (2,), (3,)], {}),
    ],
)
def test_bad_shapes_are_invalid_input(op, inputs, attrs):
    arrays = [np.zeros(s, np.float32) for s in inputs]
    with pytest.raises(SessionError) as err:
        Bound(op, arrays, **attrs)
    assert err.value.kind == "invalid_input"
