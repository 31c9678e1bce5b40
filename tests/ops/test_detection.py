"""The detection family of graphrt-ops-basic: RoiAlign, NonMaxSuppression, DeformConv, Col2Im,
MaxUnpool and CenterCropPad.

Every onnx node case runs through its kernel; then random cases against onnx's reference
evaluator, onnxruntime or small spec implementations written here from the operator texts
(NonMaxSuppression's greedy loop box by box, DeformConv's sampling element by element in 1-D
and 3-D, Col2Im's sum in ascending tap order, CenterCropPad's window arithmetic); every opset
form; the bits exact mode promises (NonMaxSuppression, Col2Im, MaxUnpool, CenterCropPad);
steady-state runs without array allocations; errors with their kinds; and one model of the
whole family through ``graphrt.Session`` against onnxruntime.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import graphrt
from graphrt.attrs import node_info
from graphrt.errors import SessionError
from graphrt.kernel import InferContext, KernelContext
from graphrt_ops_basic.table import OPERATORS
from tests._models import onnxruntime_limits, ort_session
from tests._numpy_alloc import count_numpy_allocations
from tests._versions import ONNX
from tests.ops.node_cases import node_case_params, run_case

OPS = {"RoiAlign", "NonMaxSuppression", "DeformConv", "Col2Im", "MaxUnpool", "CenterCropPad"}
DEFS = {d.op_type: d for d in OPERATORS if d.op_type in OPS and d.domain == ""}
NODE_CASES = node_case_params(OPS, {})
F32 = np.float32


def test_every_operator_has_a_kernel_and_node_cases():
    assert set(DEFS) == OPS
    assert {p.values[0].graph.node[0].op_type for p in NODE_CASES} == OPS
    assert DEFS["RoiAlign"].since == 10 and DEFS["MaxUnpool"].since == 9
    assert DEFS["DeformConv"].since == 19 and DEFS["Col2Im"].since == 18


@pytest.mark.parametrize(("model", "inputs", "outputs"), NODE_CASES)
def test_node_case(model, inputs, outputs):
    run_case(DEFS[model.graph.node[0].op_type].factory, model, inputs, outputs)


# -- helpers ------------------------------------------------------------------------------------


def _model(op, inputs, opset, consts=(), out_type=None, n_outputs=1, **attrs):
    """One node; ``inputs`` maps names to arrays (None: an absent optional input), the names
    in ``consts`` become initializers."""
    names = [n if v is not None else "" for n, v in inputs.items()]
    outs = [f"y{k}" for k in range(n_outputs)]
    node = helper.make_node(op, names, outs, **attrs)
    decls = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for n, v in inputs.items()
        if v is not None and n not in consts
    ]
    inits = [numpy_helper.from_array(inputs[n], n) for n in consts]
    first = next(v for v in inputs.values() if v is not None)
    elem = out_type if out_type is not None else helper.np_dtype_to_tensor_dtype(first.dtype)
    outputs = [helper.make_tensor_value_info(o, elem, None) for o in outs]
    graph = helper.make_graph([node], "g", decls, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _feed(inputs, consts=()):
    return {n: v for n, v in inputs.items() if v is not None and n not in consts}


def ours(op, inputs, opset, consts=(), session_mode="fast", threads=1, path=None, **attrs):
    """One run of a one-node session; ``path`` "numpy" forces ops-basic's kernels (None: the
    session's default, a native kernel where graphrt-ops-simd has one)."""
    model = _model(op, inputs, opset, consts, **attrs)
    sess = graphrt.Session(model, mode=session_mode, intra_op_threads=threads, kernel_path=path)
    return sess.run(None, _feed(inputs, consts))[0]


def reference(op, inputs, opset, **attrs):
    model = _model(op, inputs, opset, **attrs)
    return ReferenceEvaluator(model).run(None, _feed(inputs))[0]


def onnxruntime(op, inputs, opset, **attrs):
    pytest.importorskip("onnxruntime")
    model = _model(op, inputs, opset, **attrs)
    try:
        sess = ort_session(model)
    except Exception as exc:  # an older onnxruntime without the kernel or the opset
        pytest.skip(f"onnxruntime cannot load {op}-{opset}: {str(exc)[:120]}")
    return sess.run(None, _feed(inputs))[0]


def error(fn) -> SessionError:
    with pytest.raises(SessionError) as err:
        fn()
    return err.value


def bound(op, inputs, opset, known=(), **attrs):
    """The kernel prepared and bound as a plan does it (scratch full of garbage): a callable
    and its output arrays."""
    node = helper.make_node(op, [f"i{k}" for k in range(len(inputs))], ["y"], **attrs)
    kernel = DEFS[op].factory(node_info(node, opset))
    ictx = InferContext(
        [x.dtype for x in inputs],
        [x.shape for x in inputs],
        [x if i in known else None for i, x in enumerate(inputs)],
        1,
    )
    kernel.infer(ictx)
    outputs = [np.empty(t[1], t[0]) for t in ictx.output_types()]
    scratch = []
    for dtype, shape in ictx.scratch:
        a = np.empty(shape, dtype)
        a.reshape(-1).view(np.uint8).fill(0xFF)
        scratch.append(a)
    ctx = KernelContext(prepared=ictx.prepared, scratch=scratch)
    return kernel.bind(ctx, inputs, outputs), outputs


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.dtype(f"u{a.dtype.itemsize}"))


# -- CenterCropPad ------------------------------------------------------------------------------


def spec_center_crop_pad(x, target, axes):
    """The spec text: crop starts at (d - t) // 2, pad puts (t - d) // 2 zeros first."""
    out = x
    for a, t in zip(axes, target):
        d = out.shape[a]
        if t <= d:
            start = (d - t) // 2
            out = np.take(out, np.arange(start, start + t), axis=a)
        else:
            before = (t - d) // 2
            widths = [(0, 0)] * out.ndim
            widths[a] = (before, t - d - before)
            out = np.pad(out, widths)
    return out


@pytest.mark.parametrize("seed", range(12))
def test_center_crop_pad_matches_the_spec(seed):
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(1, 5))
    shape = [int(v) for v in rng.integers(1, 8, rank)]
    axes = sorted(rng.choice(rank, int(rng.integers(1, rank + 1)), replace=False).tolist())
    target = [int(v) for v in rng.integers(0, 10, len(axes))]
    x = rng.standard_normal(shape).astype(F32)
    signed = [a - rank if rng.random() < 0.5 else a for a in axes]
    attrs = {} if axes == list(range(rank)) and seed % 2 else {"axes": signed}
    want = spec_center_crop_pad(x, target, axes)
    inputs = {"x": x, "shape": np.array(target, np.int64)}
    np.testing.assert_array_equal(ours("CenterCropPad", inputs, 18, **attrs), want)
    if ONNX < (1, 20) and any(t == a != shape[a] for a, t in zip(axes, target)):
        # onnx 1.19's reference leaves an axis alone when its target equals the axis' index
        # (`sh == a`, onnx/onnx#6572): a crop to 0 on axis 0 keeps the axis.  The 1.23 of the
        # default env compares with the dimension; onnxruntime's CenterCropPad checks there.
        oracle = onnxruntime
    else:
        oracle = reference
    np.testing.assert_array_equal(oracle("CenterCropPad", inputs, 18, **attrs), want)


@pytest.mark.parametrize(
    "x", [np.arange(30, dtype=np.int32).reshape(5, 6), np.array([["a", "b", "c"]] * 5, object)]
)
def test_center_crop_pad_keeps_integer_and_string_types(x):
    target = np.array([3, 8], np.int32)
    got = ours("CenterCropPad", {"x": x, "shape": target}, 18)
    want = spec_center_crop_pad(x, [3, 8], [0, 1])
    if x.dtype == object:
        want = np.where(want == 0, "", want)  # zeros of a string tensor are empty strings
    np.testing.assert_array_equal(got, want)
    assert got.dtype == x.dtype


def test_center_crop_pad_refuses_bad_shapes_and_axes():
    x = np.zeros((4, 5), F32)
    e = error(lambda: ours("CenterCropPad", {"x": x, "shape": np.array([2], np.int64)}, 18))
    assert e.kind == "invalid_input" and "1 values for 2 axes" in str(e)
    e = error(lambda: ours("CenterCropPad", {"x": x, "shape": np.array([2, -1], np.int64)}, 18))
    assert e.kind == "invalid_input"
    shape = {"x": x, "shape": np.array([2], np.int64)}
    assert error(lambda: ours("CenterCropPad", shape, 18, axes=[2])).kind == "invalid_model"


# -- MaxUnpool ----------------------------------------------------------------------------------


def _pooled(x, **attrs):
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("i", TensorProto.INT64, None),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    return graphrt.Session(model).run(None, {"x": x})


@pytest.mark.parametrize(
    ("shape", "attrs"),
    [
        ((1, 2, 6, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
        ((2, 3, 7, 5), {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1]}),
        ((1, 2, 9), {"kernel_shape": [3], "strides": [3]}),
        ((1, 1, 4, 4, 6), {"kernel_shape": [2, 2, 3], "strides": [2, 2, 3]}),
    ],
)
@pytest.mark.parametrize("opset", [9, 11, 22])
def test_max_unpool_puts_the_pooled_maxima_back(shape, attrs, opset):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(F32)
    y, idx = _pooled(x, **attrs)
    got = ours("MaxUnpool", {"y": y, "i": idx}, opset, **attrs)
    # zeros but at the maxima; the inferred extents (in - 1) * stride + kernel - pads
    rank = len(shape) - 2
    pads = attrs.get("pads", [0] * 2 * rank)
    spatial = [
        (n - 1) * s + k - pads[a] - pads[a + rank]
        for a, (n, s, k) in enumerate(zip(y.shape[2:], attrs["strides"], attrs["kernel_shape"]))
    ]
    want = np.zeros((*shape[:2], *spatial), F32).reshape(-1)
    want[idx.reshape(-1)] = y.reshape(-1)
    np.testing.assert_array_equal(got, want.reshape((*shape[:2], *spatial)))
    np.testing.assert_array_equal(got, reference("MaxUnpool", {"y": y, "i": idx}, opset, **attrs))


def test_max_unpool_output_shape_places_the_inferred_block_first():
    # onnx's reading (the backend case): indices address the inferred 4x4 block, which sits at
    # the start of the larger output; onnxruntime reads them as positions of output_shape
    x = np.array([[[[5, 6], [7, 8]]]], F32)
    idx = np.array([[[[5, 7], [13, 15]]]], np.int64)
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    for shape in ([1, 1, 5, 5], [1, 1, 6, 4], [2, 1, 4, 4]):
        inputs = {"x": x, "i": idx, "s": np.array(shape, np.int64)}
        got = ours("MaxUnpool", inputs, 11, **attrs)
        np.testing.assert_array_equal(got, reference("MaxUnpool", inputs, 11, **attrs))
        assert got.shape == tuple(shape)
    inputs = {"x": x, "i": idx, "s": np.array([1, 1, 4, 4], np.int64)}  # where both agree
    np.testing.assert_array_equal(
        ours("MaxUnpool", inputs, 11, **attrs), onnxruntime("MaxUnpool", inputs, 11, **attrs)
    )
    # a constant output_shape gives a static plan with the same result
    inputs = {"x": x, "i": idx, "s": np.array([1, 1, 5, 5], np.int64)}
    np.testing.assert_array_equal(
        ours("MaxUnpool", inputs, 11, consts=("s",), **attrs),
        reference("MaxUnpool", inputs, 11, **attrs),
    )


def test_max_unpool_refuses_bad_indices_and_shapes():
    x = np.ones((1, 1, 2, 2), F32)
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    for bad in (16, -1):
        idx = np.array([[[[0, 1], [2, bad]]]], np.int64)
        e = error(lambda idx=idx: ours("MaxUnpool", {"x": x, "i": idx}, 11, **attrs))
        assert e.kind == "invalid_input" and f"index {bad}" in str(e)
    idx = np.zeros((1, 1, 2, 2), np.int64)
    small = {"x": x, "i": idx, "s": np.array([1, 1, 3, 4], np.int64)}
    assert error(lambda: ours("MaxUnpool", small, 11, **attrs)).kind == "invalid_input"
    wrong = {"x": x, "i": np.zeros((1, 1, 2, 3), np.int64)}
    assert error(lambda: ours("MaxUnpool", wrong, 11, **attrs)).kind == "invalid_input"
    e = error(lambda: ours("MaxUnpool", {"x": x, "i": idx}, 11, strides=[2, 2]))
    assert e.kind == "invalid_model" and "kernel_shape" in str(e)


# -- Col2Im -------------------------------------------------------------------------------------


def spec_col2im(x, image, block, dilations, pads, strides, acc_type=None):
    """Terms added tap by tap in row-major tap order, each image element starting from its
    first term (docs/exact-mode.md rule 2); elements no block reaches are +0."""
    rank = len(image)
    acc_type = acc_type or x.dtype
    n, ck, _ = x.shape
    k = math.prod(block)
    grid = [
        (image[a] + pads[a] + pads[a + rank] - dilations[a] * (block[a] - 1) - 1) // strides[a] + 1
        for a in range(rank)
    ]
    cols = x.reshape(n, ck // k, *block, *grid).astype(acc_type)
    out = np.zeros((n, ck // k, *image), acc_type)
    seen = np.zeros(image, bool)
    for tap in itertools.product(*(range(b) for b in block)):
        for pos in itertools.product(*(range(g) for g in grid)):
            where = tuple(
                p * s + t * d - pads[a]
                for a, (p, s, t, d) in enumerate(zip(pos, strides, tap, dilations))
            )
            if all(0 <= w < m for w, m in zip(where, image)):
                term = cols[(slice(None), slice(None), *tap, *pos)]
                if seen[where]:
                    out[(slice(None), slice(None), *where)] += term
                else:
                    out[(slice(None), slice(None), *where)] = term
                    seen[where] = True
    return out


def _col2im_case(rng, rank, dtype=F32):
    image = [int(v) for v in rng.integers(3, 7, rank)]
    block = [int(v) for v in rng.integers(1, 4, rank)]
    dil = [int(v) for v in rng.integers(1, 3, rank)]
    strides = [int(v) for v in rng.integers(1, 3, rank)]
    pads = [int(v) for v in rng.integers(0, 2, 2 * rank)]
    for a in range(rank):  # keep one block inside the padded image
        while dil[a] * (block[a] - 1) + 1 > image[a] + pads[a] + pads[a + rank]:
            block[a] -= 1
    grid = [
        (image[a] + pads[a] + pads[a + rank] - dil[a] * (block[a] - 1) - 1) // strides[a] + 1
        for a in range(rank)
    ]
    x = rng.standard_normal((2, 3 * math.prod(block), math.prod(grid))).astype(dtype)
    attrs = {"dilations": dil, "pads": pads, "strides": strides}
    return x, image, block, attrs


@pytest.mark.parametrize("seed", range(10))
def test_col2im_adds_blocks_in_ascending_tap_order(seed):
    rng = np.random.default_rng(seed)
    x, image, block, attrs = _col2im_case(rng, 2 + seed % 2)
    inputs = {"x": x, "image": np.array(image, np.int64), "block": np.array(block, np.int64)}
    want = spec_col2im(x, image, block, attrs["dilations"], attrs["pads"], attrs["strides"])
    for mode in ("fast", "exact"):
        got = ours("Col2Im", inputs, 18, session_mode=mode, **attrs)
        np.testing.assert_array_equal(bits(got), bits(want))
    got = ours("Col2Im", inputs, 18, consts=("image", "block"), **attrs)  # a static plan
    np.testing.assert_array_equal(bits(got), bits(want))
    np.testing.assert_allclose(got, reference("Col2Im", inputs, 18, **attrs), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", range(6))
def test_col2im_slab_and_strided_plans_give_the_same_bits(seed, monkeypatch):
    # small images add contiguous tap slabs, larger ones strided slices: the same sums
    from graphrt_ops_basic import col2im

    rng = np.random.default_rng(40 + seed)
    x, image, block, attrs = _col2im_case(rng, 1 + seed % 3)
    x.reshape(-1)[rng.integers(0, x.size, 3)] = [np.nan, -0.0, np.inf]
    inputs = {"x": x, "image": np.array(image, np.int64), "block": np.array(block, np.int64)}
    want = spec_col2im(x, image, block, attrs["dilations"], attrs["pads"], attrs["strides"])
    want[np.isnan(want)] = np.nan  # exact mode's canonical NaN
    for most in (0, 1 << 30):
        monkeypatch.setattr(col2im, "SLAB_MAX", most)
        for mode in ("fast", "exact"):
            got = ours("Col2Im", inputs, 18, consts=("image", "block"), session_mode=mode,
                       path="numpy", **attrs)  # fmt: skip
            if mode == "fast":
                np.testing.assert_array_equal(got, want)
            else:
                np.testing.assert_array_equal(bits(got), bits(want))


def test_col2im_exact_bits_of_zeros_and_nan():
    # every term -0: the sum is -0 (acc = t0); no term: +0; NaN: the canonical quiet NaN
    x = np.full((1, 4, 4), -0.0, F32)
    x[0, 0, 0] = np.frombuffer(np.uint32(0x7FC00123).tobytes(), F32)[0]  # a NaN payload
    inputs = {"x": x, "image": np.array([5, 5], np.int64), "block": np.array([2, 2], np.int64)}
    got = ours("Col2Im", inputs, 18, session_mode="exact", strides=[3, 3])
    assert bits(got)[0, 0, 0, 0] == 0x7FC00000
    reached = [0, 1, 3, 4]  # blocks at 0 and 3 of stride 3; row and column 2 are never reached
    assert np.all(np.signbit(got[0, 0][np.ix_(reached, reached)].reshape(-1)[1:]))  # -0 terms
    assert not np.any(np.signbit(got[0, 0, 2, :])) and not np.any(np.signbit(got[0, 0, :, 2]))


def test_col2im_threads_and_half_precision():
    rng = np.random.default_rng(3)
    x, image, block, attrs = _col2im_case(rng, 2)
    inputs = {"x": x, "image": np.array(image, np.int64), "block": np.array(block, np.int64)}
    one = ours("Col2Im", inputs, 18, session_mode="exact", threads=1, **attrs)
    two = ours("Col2Im", inputs, 18, session_mode="exact", threads=2, **attrs)
    np.testing.assert_array_equal(bits(one), bits(two))
    half = dict(inputs, x=x.astype(np.float16))
    got = ours("Col2Im", half, 18, **attrs)
    dil, pads, strides = attrs["dilations"], attrs["pads"], attrs["strides"]
    want = spec_col2im(half["x"], image, block, dil, pads, strides, acc_type=F32)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, want.astype(np.float16))  # float32 sums, one rounding
    ints = dict(inputs, x=(x * 10).astype(np.int32))
    got = ours("Col2Im", ints, 18, **attrs)
    np.testing.assert_array_equal(got, spec_col2im(ints["x"], image, block, dil, pads, strides))


def test_col2im_refuses_inputs_that_do_not_fit():
    x = np.zeros((1, 4, 9), F32)
    inputs = {"x": x, "image": np.array([4, 4], np.int64), "block": np.array([2, 2], np.int64)}
    e = error(lambda: ours("Col2Im", dict(inputs, x=np.zeros((1, 4, 8), F32)), 18))
    assert e.kind == "invalid_input" and "must be (N, C * 4, 9)" in str(e)
    e = error(lambda: ours("Col2Im", dict(inputs, block=np.array([5, 2], np.int64)), 18))
    assert e.kind == "invalid_input"
    e = error(lambda: ours("Col2Im", dict(inputs, block=np.array([2], np.int64)), 18))
    assert e.kind == "invalid_input"
    e = error(lambda: ours("Col2Im", inputs, 18, strides=[1, 1, 1]))
    assert e.kind == "invalid_input"


# -- NonMaxSuppression --------------------------------------------------------------------------


def spec_iou_suppresses(a, b, center, threshold):
    """The spec's test box by box, in float32 (onnxruntime's arithmetic)."""
    if center:
        ax1, ax2 = a[0] - a[2] / F32(2), a[0] + a[2] / F32(2)
        ay1, ay2 = a[1] - a[3] / F32(2), a[1] + a[3] / F32(2)
        bx1, bx2 = b[0] - b[2] / F32(2), b[0] + b[2] / F32(2)
        by1, by2 = b[1] - b[3] / F32(2), b[1] + b[3] / F32(2)
    else:
        ay1, ay2 = min(a[0], a[2]), max(a[0], a[2])
        ax1, ax2 = min(a[1], a[3]), max(a[1], a[3])
        by1, by2 = min(b[0], b[2]), max(b[0], b[2])
        bx1, bx2 = min(b[1], b[3]), max(b[1], b[3])
    ix = max(F32(0), min(ax2, bx2) - max(ax1, bx1))
    iy = max(F32(0), min(ay2, by2) - max(ay1, by1))
    inter = ix * iy
    area_a, area_b = (ax2 - ax1) * (ay2 - ay1), (bx2 - bx1) * (by2 - by1)
    if inter <= 0 or area_a <= 0 or area_b <= 0:
        return False
    return inter / ((area_a + area_b) - inter) > threshold


def spec_nms(boxes, scores, limit, iou, floor, center):
    out = []
    for b in range(scores.shape[0]):
        for c in range(scores.shape[1]):
            s = scores[b, c]
            order = sorted(
                (i for i in range(s.size) if floor is None or s[i] > floor),
                key=lambda i: (-s[i], i),
            )
            chosen = []
            for i in order:
                if len(chosen) == limit:
                    break
                if not any(spec_iou_suppresses(boxes[b, i], boxes[b, j], center, iou)
                           for j in chosen):  # fmt: skip
                    chosen.append(i)
            out += [[b, c, i] for i in chosen]
    return np.array(out, np.int64).reshape(-1, 3)


def _nms_case(rng, batches, classes, n, center, coarse=False):
    xy = rng.uniform(0, 20, (batches, n, 2))
    wh = rng.uniform(1, 8, (batches, n, 2))
    if center:
        boxes = np.concatenate([xy + wh / 2, wh], -1)
    else:  # [y1, x1, y2, x2], corners in any order
        far = xy + wh * rng.choice([-1, 1], (batches, n, 2))
        boxes = np.concatenate([xy, far], -1)[..., [1, 0, 3, 2]]
    scores = rng.random((batches, classes, n))
    if coarse:  # many ties
        scores = np.round(scores * 4) / 4
    return boxes.astype(F32), scores.astype(F32)


@pytest.mark.parametrize("seed", range(8))
def test_nms_matches_the_greedy_loop_box_by_box(seed):
    rng = np.random.default_rng(seed)
    center = seed % 2
    n = [6, 40, 150, 300][seed % 4]
    boxes, scores = _nms_case(rng, 2, 3, n, center, coarse=seed >= 4)
    limit = int(rng.choice([1, 3, 20, 1000]))
    iou = F32(rng.choice([0.0, 0.2, 0.5]))
    floor = None if seed % 3 == 0 else F32(0.3)
    inputs = {
        "boxes": boxes,
        "scores": scores,
        "limit": np.array([limit], np.int64),
        "iou": np.array([iou], F32),
        "floor": None if floor is None else np.array([floor], F32),
    }
    want = spec_nms(boxes, scores, limit, iou, floor, center)
    for mode, path in itertools.product(("fast", "exact"), ("numpy", None)):
        got = ours("NonMaxSuppression", inputs, 11, session_mode=mode, path=path,
                   center_point_box=center)  # fmt: skip
        np.testing.assert_array_equal(got, want)
        assert got.dtype == np.int64


@pytest.mark.parametrize("limit", [2, 7, 60])
def test_nms_rows_run_out_of_candidates_at_different_blocks(limit):
    # numpy's kernel: the rows advance together through blocks; a row leaves when it has its
    # limit or no candidates left (here 0, 3, 20 and 90 of 90 boxes per class)
    rng = np.random.default_rng(limit)
    boxes, scores = _nms_case(rng, 2, 2, 90, 0)
    scores[0, 0] -= 2  # no candidate
    scores[0, 1, 3:] -= 2
    scores[1, 0, 20:] -= 2
    inputs = {
        "boxes": boxes,
        "scores": scores,
        "limit": np.array([limit], np.int64),
        "iou": np.array([0.2], F32),
        "floor": np.array([-0.5], F32),
    }
    want = spec_nms(boxes, scores, limit, F32(0.2), F32(-0.5), 0)
    for path in ("numpy", None):
        np.testing.assert_array_equal(ours("NonMaxSuppression", inputs, 11, path=path), want)


@pytest.mark.parametrize("seed", range(4))
def test_nms_matches_onnxruntime(seed):
    rng = np.random.default_rng(100 + seed)
    boxes, scores = _nms_case(rng, 2, 2, 200, seed % 2)
    inputs = {
        "boxes": boxes,
        "scores": scores,
        "limit": np.array([50], np.int64),
        "iou": np.array([0.4], F32),
        "floor": np.array([0.1], F32),
    }
    attrs = {"center_point_box": seed % 2, "out_type": TensorProto.INT64}
    got = ours("NonMaxSuppression", inputs, 11, **attrs)
    np.testing.assert_array_equal(got, onnxruntime("NonMaxSuppression", inputs, 11, **attrs))


def test_nms_chains_of_suppression_need_the_greedy_order():
    # box 1 overlaps 0 and 2, box 0 does not overlap 2: 0 suppresses 1, so 2 survives
    boxes = np.array([[[0, 0, 1, 1], [0, 0.5, 1, 1.5], [0, 1, 1, 2], [0, 1.5, 1, 2.5]]], F32)
    scores = np.array([[[0.9, 0.8, 0.7, 0.6]]], F32)
    inputs = {
        "boxes": boxes,
        "scores": scores,
        "limit": np.array([10], np.int64),
        "iou": np.array([0.3], F32),
    }
    got = ours("NonMaxSuppression", inputs, 10)
    np.testing.assert_array_equal(got, [[0, 0, 0], [0, 0, 2]])


def test_nms_ties_nan_scores_and_signed_zeros():
    # equal scores (+0 and -0 among them) keep index order; NaN scores come last
    boxes = np.array([[[0, 10 * i, 1, 10 * i + 1] for i in range(6)]], F32)
    scores = np.array([[[0.0, np.nan, -0.0, 0.5, 0.5, 0.0]]], F32)
    inputs = {"boxes": boxes, "scores": scores, "limit": np.array([6], np.int64)}
    got = ours("NonMaxSuppression", inputs, 11)
    np.testing.assert_array_equal(got[:, 2], [3, 4, 0, 2, 5, 1])
    floor = dict(inputs, iou=np.array([0.5], F32), floor=np.array([-0.0], F32))
    np.testing.assert_array_equal(ours("NonMaxSuppression", floor, 11)[:, 2], [3, 4])


def test_nms_optional_inputs_default_to_no_output_and_no_threshold():
    boxes, scores = _nms_case(np.random.default_rng(1), 1, 1, 10, 0)
    got = ours("NonMaxSuppression", {"boxes": boxes, "scores": scores}, 11)
    assert got.shape == (0, 3) and got.dtype == np.int64
    inputs = {"boxes": boxes, "scores": scores, "limit": np.array(4, np.int64)}
    want = spec_nms(boxes, scores, 4, F32(0), None, 0)
    np.testing.assert_array_equal(ours("NonMaxSuppression", inputs, 11), want)
    zero = dict(inputs, limit=np.array([0], np.int64))
    assert ours("NonMaxSuppression", zero, 11).shape == (0, 3)


def test_nms_float64_boxes_follow_the_same_rule():
    boxes, scores = _nms_case(np.random.default_rng(5), 2, 2, 60, 1, coarse=True)
    inputs = {
        "boxes": boxes.astype(np.float64),
        "scores": scores.astype(np.float64),
        "limit": np.array([100], np.int64),
        "iou": np.array([0.25], np.float64),
    }
    got = ours("NonMaxSuppression", inputs, 11, center_point_box=1)
    np.testing.assert_array_equal(got, spec_nms(boxes, scores, 100, F32(0.25), None, 1))


def test_nms_refuses_bad_inputs():
    boxes, scores = _nms_case(np.random.default_rng(2), 1, 1, 5, 0)
    base = {"boxes": boxes, "scores": scores, "limit": np.array([3], np.int64)}
    e = error(lambda: ours("NonMaxSuppression", dict(base, iou=np.array([1.5], F32)), 11))
    assert e.kind == "invalid_input" and "iou_threshold" in str(e)
    e = error(lambda: ours("NonMaxSuppression", dict(base, limit=np.array([1, 2], np.int64)), 11))
    assert e.kind == "invalid_input" and "one value" in str(e)
    e = error(lambda: ours("NonMaxSuppression", dict(base, scores=scores[:, :, :4]), 11))
    assert e.kind == "invalid_input" and e.node is not None
    e = error(lambda: ours("NonMaxSuppression", base, 11, center_point_box=2))
    assert e.kind == "invalid_model"


# -- RoiAlign -----------------------------------------------------------------------------------


def _roi_case(rng, dtype=F32):
    n, c, h, w = 2, 3, int(rng.integers(4, 16)), int(rng.integers(4, 16))
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    corner = rng.uniform(-3, max(h, w) + 2, (6, 2))
    rois = np.concatenate([corner, corner + rng.uniform(-1, 9, (6, 2))], 1).astype(dtype)
    return x, rois, rng.integers(0, n, 6).astype(np.int64)


@pytest.mark.parametrize("seed", range(12))
def test_roi_align_matches_the_reference(seed):
    rng = np.random.default_rng(seed)
    x, rois, batch = _roi_case(rng, np.float64 if seed % 4 == 3 else F32)
    attrs = {
        "mode": ["avg", "max"][seed % 2],
        "coordinate_transformation_mode": ["half_pixel", "output_half_pixel"][seed // 2 % 2],
        "output_height": int(rng.integers(1, 5)),
        "output_width": int(rng.integers(1, 5)),
        "sampling_ratio": int(rng.integers(0, 3)),
        "spatial_scale": float(rng.choice([1.0, 0.5])),
    }
    inputs = {"x": x, "rois": rois, "batch": batch}
    opset = 16 if seed < 6 else 22
    got = ours("RoiAlign", inputs, opset, **attrs)
    want = reference("RoiAlign", inputs, opset, **attrs)
    assert got.dtype == x.dtype
    assert got.shape == (6, 3, attrs["output_height"], attrs["output_width"])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_roi_align_opset_10_has_no_half_pixel_shift():
    x, rois, batch = _roi_case(np.random.default_rng(7))
    inputs = {"x": x, "rois": rois, "batch": batch}
    attrs = {"output_height": 3, "output_width": 2, "sampling_ratio": 2}
    old = ours("RoiAlign", inputs, 10, **attrs)
    same = ours("RoiAlign", inputs, 16, coordinate_transformation_mode="output_half_pixel", **attrs)
    np.testing.assert_array_equal(old, same)
    np.testing.assert_allclose(
        old, onnxruntime("RoiAlign", inputs, 10, **attrs), rtol=1e-5, atol=1e-6
    )
    e = error(lambda: ours("RoiAlign", inputs, 16, coordinate_transformation_mode="corner"))
    assert e.kind == "invalid_model"


def test_roi_align_half_precision_and_empty_rois():
    x, rois, batch = _roi_case(np.random.default_rng(8))
    inputs = {"x": x, "rois": rois, "batch": batch}
    want = ours("RoiAlign", inputs, 16, output_height=2, output_width=3)
    half = {"x": x.astype(np.float16), "rois": rois.astype(np.float16), "batch": batch}
    got = ours("RoiAlign", half, 16, output_height=2, output_width=3)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, want, rtol=0.05, atol=0.05)
    empty = {"x": x, "rois": np.zeros((0, 4), F32), "batch": np.zeros(0, np.int64)}
    assert ours("RoiAlign", empty, 16, output_height=2).shape == (0, 3, 2, 1)


def test_roi_align_refuses_bad_batch_indices_and_shapes():
    x, rois, batch = _roi_case(np.random.default_rng(9))
    bad = {"x": x, "rois": rois, "batch": np.full(6, 2, np.int64)}
    e = error(lambda: ours("RoiAlign", bad, 16))
    assert e.kind == "invalid_input" and "batch index 2" in str(e)
    bad = {"x": x, "rois": rois[:, :3], "batch": batch}
    assert error(lambda: ours("RoiAlign", bad, 16)).kind == "invalid_input"
    inputs = {"x": x, "rois": rois, "batch": batch}
    assert error(lambda: ours("RoiAlign", inputs, 16, mode="sum")).kind == "invalid_model"


# -- DeformConv ---------------------------------------------------------------------------------


def spec_deform_conv(x, w, offset, bias, mask, group, offset_group, strides, pads, dilations):
    """Element by element: N-linear interpolation with zeros outside X, any rank."""
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    kshape = w.shape[2:]
    nd = len(kshape)
    out = offset.shape[2:]
    taps = list(itertools.product(*(range(k) for k in kshape)))
    y = np.zeros((n, m, *out))
    for b, o in itertools.product(range(n), itertools.product(*(range(d) for d in out))):
        for ch in range(c):
            og = ch // (c // offset_group)
            for t, tap in enumerate(taps):
                row = (og * len(taps) + t) * nd
                p = [
                    o[a] * strides[a] - pads[a] + tap[a] * dilations[a]
                    + offset[(b, row + a, *o)]
                    for a in range(nd)
                ]  # fmt: skip
                value = 0.0
                for corner in itertools.product((0, 1), repeat=nd):
                    at, weight = [], 1.0
                    for a in range(nd):
                        lo = math.floor(p[a])
                        at.append(lo + corner[a])
                        weight *= (p[a] - lo) if corner[a] else (1 - (p[a] - lo))
                    if all(0 <= i < s for i, s in zip(at, x.shape[2:])):
                        value += weight * x[(b, ch, *at)]
                if mask is not None:
                    value *= mask[(b, og * len(taps) + t, *o)]
                g = ch // cg
                for oc in range(g * (m // group), (g + 1) * (m // group)):
                    y[(b, oc, *o)] += w[(oc, ch - g * cg, *tap)] * value
    if bias is not None:
        y += bias.reshape(1, m, *([1] * nd))
    return y


def _deform_case(rng, spatial, kernel, group, offset_group, strides, pads, dilations, masked):
    nd = len(spatial)
    c, m = 4, 4
    x = rng.standard_normal((2, c, *spatial)).astype(F32)
    w = rng.standard_normal((m, c // group, *kernel)).astype(F32)
    out = [
        (s + pads[a] + pads[a + nd] - d * (k - 1) - 1) // st + 1
        for a, (s, k, st, d) in enumerate(zip(spatial, kernel, strides, dilations))
    ]
    k = math.prod(kernel)
    offset = (rng.standard_normal((2, offset_group * k * nd, *out)) * 1.5).astype(F32)
    mask = rng.random((2, offset_group * k, *out)).astype(F32) if masked else None
    bias = rng.standard_normal(m).astype(F32)
    return x, w, offset, bias, mask


@pytest.mark.parametrize(
    ("spatial", "kernel", "group", "offset_group", "strides", "pads", "dilations", "masked"),
    [
        ((6, 7), (3, 3), 1, 1, (1, 1), (1, 1, 1, 1), (1, 1), False),
        ((6, 7), (2, 3), 2, 1, (2, 1), (0, 1, 1, 0), (1, 2), True),
        ((7, 5), (3, 2), 1, 2, (1, 2), (1, 0, 0, 1), (2, 1), True),
        ((5, 5), (1, 1), 4, 4, (1, 1), (0, 0, 0, 0), (1, 1), False),
        ((6, 6), (2, 2), 2, 2, (1, 1), (0, 0, 0, 0), (1, 1), True),
    ],
)
def test_deform_conv_matches_the_reference(
    spatial, kernel, group, offset_group, strides, pads, dilations, masked
):
    rng = np.random.default_rng(sum(spatial) + group)
    x, w, offset, bias, mask = _deform_case(
        rng, spatial, kernel, group, offset_group, strides, pads, dilations, masked
    )
    inputs = {"x": x, "w": w, "offset": offset, "b": bias, "mask": mask}
    attrs = {
        "group": group,
        "offset_group": offset_group,
        "strides": list(strides),
        "pads": list(pads),
        "dilations": list(dilations),
    }
    got = ours("DeformConv", inputs, 19, **attrs)
    np.testing.assert_allclose(
        got, reference("DeformConv", inputs, 19, **attrs), rtol=1e-4, atol=1e-4
    )
    consts = ours("DeformConv", inputs, 22, consts=("w", "b"), kernel_shape=list(kernel), **attrs)
    np.testing.assert_allclose(consts, got, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("spatial", "kernel", "strides", "pads", "dilations"),
    [
        ((9,), (3,), (2,), (1, 0), (1,)),
        ((4, 3, 5), (2, 1, 2), (1, 1, 2), (0, 1, 0, 1, 0, 1), (1, 1, 1)),
    ],
)
def test_deform_conv_in_one_and_three_dimensions(spatial, kernel, strides, pads, dilations):
    rng = np.random.default_rng(len(spatial))
    x, w, offset, bias, mask = _deform_case(
        rng, spatial, kernel, 2, 2, strides, pads, dilations, True
    )
    inputs = {"x": x, "w": w, "offset": offset, "b": bias, "mask": mask}
    attrs = {"group": 2, "offset_group": 2, "strides": list(strides), "pads": list(pads)}
    attrs["dilations"] = list(dilations)
    got = ours("DeformConv", inputs, 19, **attrs)
    want = spec_deform_conv(x, w, offset, bias, mask, 2, 2, strides, pads, dilations)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_deform_conv_without_offsets_is_a_convolution():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 4, 7, 7)).astype(F32)
    w = rng.standard_normal((6, 2, 3, 3)).astype(F32)
    offset = np.zeros((1, 18, 7, 7), F32)
    attrs = {"group": 2, "pads": [1, 1, 1, 1]}
    got = ours("DeformConv", {"x": x, "w": w, "offset": offset}, 19, **attrs)
    np.testing.assert_allclose(
        got, reference("Conv", {"x": x, "w": w}, 19, **attrs), rtol=1e-4, atol=1e-5
    )
    far = np.full_like(offset, 100.0)  # every sample outside X: the bias alone
    far[0, 0, 0, 0] = np.nan  # a NaN position reads nothing too
    bias = rng.standard_normal(6).astype(F32)
    got = ours("DeformConv", {"x": x, "w": w, "offset": far, "b": bias}, 19, **attrs)
    np.testing.assert_array_equal(got, np.broadcast_to(bias.reshape(1, 6, 1, 1), got.shape))
    half = {
        "x": x.astype(np.float16),
        "w": w.astype(np.float16),
        "offset": offset.astype(np.float16),
    }
    got = ours("DeformConv", half, 19, **attrs)
    assert got.dtype == np.float16
    np.testing.assert_allclose(
        got, reference("Conv", {"x": x, "w": w}, 19, **attrs), rtol=0.02, atol=0.05
    )


def test_deform_conv_refuses_shapes_that_do_not_fit():
    x = np.zeros((1, 4, 5, 5), F32)
    w = np.zeros((2, 4, 3, 3), F32)
    bad = {"x": x, "w": w, "offset": np.zeros((1, 18, 4, 4), F32)}
    e = error(lambda: ours("DeformConv", bad, 19))
    assert e.kind == "invalid_input" and "offset must have shape [1, 18, 3, 3]" in str(e)
    good = {"x": x, "w": w, "offset": np.zeros((1, 18, 3, 3), F32)}
    assert error(lambda: ours("DeformConv", good, 19, group=2)).kind == "invalid_input"
    assert error(lambda: ours("DeformConv", good, 19, offset_group=3)).kind == "invalid_input"
    assert error(lambda: ours("DeformConv", good, 19, offset_group=0)).kind == "invalid_model"


# -- steady state and the family in one model ---------------------------------------------------


@pytest.mark.parametrize(
    ("op", "inputs", "opset", "known", "attrs"),
    [
        ("CenterCropPad", [np.ones((6, 5, 3), F32), np.array([4, 8], np.int64)], 18, (1,),
         {"axes": [0, 1]}),
        ("MaxUnpool", [np.ones((1, 2, 3, 3), F32), np.arange(18).reshape(1, 2, 3, 3) * 2], 11, (),
         {"kernel_shape": [2, 2], "strides": [2, 2]}),
        ("Col2Im", [np.ones((2, 12, 36), F32), np.array([6, 7], np.int64),
                    np.array([2, 3], np.int64)], 18, (1, 2), {"pads": [1, 0, 0, 1]}),
    ],
)  # fmt: skip
def test_a_bound_kernel_allocates_no_array_data(op, inputs, opset, known, attrs):
    step, outputs = bound(op, inputs, opset, known, **attrs)
    step()
    first = [o.copy() for o in outputs]
    with count_numpy_allocations() as counter:
        step()
    assert counter.count == 0, f"{counter.count} numpy allocations ({counter.bytes} bytes)"
    for a, b in zip(first, outputs):
        np.testing.assert_array_equal(a, b)


def _family_model():
    """DeformConv (offsets from a Conv) -> MaxPool with indices -> MaxUnpool -> CenterCropPad;
    RoiAlign on the deformed map; Col2Im of an Unfold-like column matrix; NonMaxSuppression
    of boxes computed from the input."""
    rng = np.random.default_rng(0)
    f = TensorProto.FLOAT
    inits = {
        "w_off": (rng.standard_normal((18, 4, 3, 3)) * 0.1).astype(F32),
        "w": (rng.standard_normal((8, 4, 3, 3)) * 0.3).astype(F32),
        "b": rng.standard_normal(8).astype(F32),
        "rois": np.array([[0, 0, 6, 6], [2, 1, 9, 7], [4, 4, 11, 11]], F32),
        "batch": np.array([0, 1, 0], np.int64),
        "crop": np.array([10, 9], np.int64),
        "image": np.array([6, 6], np.int64),
        "block": np.array([2, 2], np.int64),
        "limit": np.array([4], np.int64),
        "iou": np.array([0.3], F32),
        "floor": np.array([0.1], F32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w_off"], ["offset"], pads=[1, 1, 1, 1]),
        helper.make_node("DeformConv", ["x", "w", "offset", "b"], ["d"], pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["d"], ["p", "pi"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("MaxUnpool", ["p", "pi"], ["u"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("CenterCropPad", ["u", "crop"], ["cc"], axes=[2, 3]),
        helper.make_node("RoiAlign", ["d", "rois", "batch"], ["ra"], output_height=3,
                         output_width=3, sampling_ratio=2, spatial_scale=0.5),
        helper.make_node("Col2Im", ["cols", "image", "block"], ["im"], pads=[1, 1, 1, 1],
                         strides=[2, 2]),
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "limit", "iou", "floor"],
                         ["sel"], center_point_box=1),
    ]  # fmt: skip
    outputs = [
        helper.make_tensor_value_info(n, t, None)
        for n, t in [("cc", f), ("ra", f), ("im", f), ("sel", TensorProto.INT64)]
    ]
    inputs = [
        helper.make_tensor_value_info("x", f, [2, 4, 12, 12]),
        helper.make_tensor_value_info("cols", f, [2, 12, 16]),
        helper.make_tensor_value_info("boxes", f, [2, 30, 4]),
        helper.make_tensor_value_info("scores", f, [2, 3, 30]),
    ]
    graph = helper.make_graph(
        nodes, "family", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    boxes, scores = _nms_case(rng, 2, 3, 30, 1)
    feed = {
        "x": rng.standard_normal((2, 4, 12, 12)).astype(F32),
        "cols": rng.standard_normal((2, 12, 16)).astype(F32),
        "boxes": boxes,
        "scores": scores,
    }
    return model, feed


def test_a_model_of_the_family_matches_onnxruntime():
    pytest.importorskip("onnxruntime")
    if onnxruntime_limits()[1] < 19:
        pytest.skip("the installed onnxruntime does not load opset 19 (DeformConv)")
    model, feed = _family_model()
    try:
        theirs = ort_session(model).run(None, feed)
    except Exception as exc:  # an onnxruntime without a DeformConv kernel
        pytest.skip(f"onnxruntime cannot run the model: {str(exc)[:120]}")
    for threads in (1, 2):
        got = graphrt.Session(model, intra_op_threads=threads).run(None, feed)
        for a, b in zip(got, theirs):
            assert a.shape == b.shape and a.dtype == b.dtype
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
