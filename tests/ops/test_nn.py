"""The neural-network operators of graphrt-ops-basic: convolutions, pools, normalizations.

Every onnx node case of these operators runs through its kernel (``node_cases.run_case``); the
ones that cannot pass would be listed in ``EXPECTED_FAILURES`` with the reason, strict.  Then
randomized single-node convolutions against onnxruntime (grouped, depthwise, dilated, strided,
padded, 1-D to 3-D), run the way a plan runs a kernel (tests/ops/_nn.py's ``Bound``: ``infer``
with the constant inputs known, scratch full of garbage, ``bind``, call); the pools and
normalizations the same way in test_pool_norm.py.  Finally, for all of them: thread counts never
change a bit, a steady-state run allocates no numpy array data, and bad models or inputs are
refused with the right kind.
"""

from __future__ import annotations

import tracemalloc

import ml_dtypes
import numpy as np
import onnx
import pytest

import graphrt_ops_basic.conv as conv_module
import graphrt_ops_basic.norm as norm_module
from graphrt.attrs import node_info
from graphrt.errors import SessionError
from graphrt.threads import IntraOpPool
from graphrt_ops_basic.table import OPERATORS
from tests._numpy_alloc import count_numpy_allocations
from tests._versions import ONNX
from tests.ops._nn import (
    FACTORIES,
    OPS,
    Bound,
    _same_pads_are_natural,
    _spec_pads,
    assert_close,
    bn_inputs,
    make_node,
    ort_run,
    rand,
    reference_run,
)
from tests.ops.node_cases import node_case_params, run_case

ort = pytest.importorskip("onnxruntime")

#: Operators onnx has no single-node case for, and where they are tested instead.
WITHOUT_NODE_CASES = {"GlobalLpPool": "test_pool_norm.py::test_global_pools_match_onnxruntime"}

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
