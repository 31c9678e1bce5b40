"""Empty tensors flow through every operator as they do through onnxruntime.

Two oracles, both onnxruntime's CPU provider:

* generic: every single-node case of onnx's backend suite with one input emptied on its first
  or last axis (tests/_empty_variants.py builds and caches them; only the variants onnxruntime
  runs are kept), and
* curated: the shapes models meet (a batch of 0 through Conv, pools, normalisations; a product
  over K = 0; reductions over an empty axis; Concat with an empty piece...), on constant
  weights too, where the native kernels of graphrt-ops-simd take over.

graphrt must give the same output shapes, dtypes and values (float: rtol 1e-5, atol 1e-6;
integers and booleans exactly) on the numpy kernels, on the best native path ("auto"), and in
exact mode on both wherever the model's operators support it.  Where onnxruntime's answer is
not what the ONNX specification says, the test follows the specification and says why
(SPEC_REFUSALS, SPEC_RESULTS).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

import graphrt
import graphrt.session

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle of these tests")
if tuple(int(p) for p in ort.__version__.split(".")[:2]) < (1, 21):
    pytest.skip(
        "onnxruntime < 1.21 is no oracle for empty inputs: 1.20 aborts the process (SIGFPE) on a "
        "batch-0 TopK, and onnx < 1.20's loader gives node cases without in-memory models",
        allow_module_level=True,
    )

from tests._empty_variants import Variant, clear_shape, load_variants  # noqa: E402
from tests._models import init, make_model, ort_session, tensor  # noqa: E402

RUNS = [("fast", "numpy"), ("fast", "auto"), ("exact", "numpy"), ("exact", "auto")]

#: Variants onnxruntime runs where the specification says the input is invalid: graphrt
#: refuses them with an ``invalid_input`` error.  Keys match ``"<case> <label>"``.
SPEC_REFUSALS: dict[str, str] = {
    r"^test_attention_\w+ input 0 \(Q\) axis 0:": (
        "Q, K and V share one batch_size in the Attention specification; onnxruntime takes "
        "Q's batch of 0 and ignores K's and V's batch of 1"
    ),
    r"^test_gathernd_\w+ input 1 \(indices\) axis [12]:": (
        "GatherND: 'indices_shape[-1] should have a value between 1 (inclusive) and rank r-b "
        "(inclusive)'; onnxruntime accepts index tuples of length 0 (onnx's reference fails)"
    ),
    r"^test_gathernd_example_int32_batch_dim1 input 1 \(indices\) axis 0:": (
        "GatherND: 'the first b dimensions of the shape of indices tensor and data tensor must "
        "be equal' (indices batch 0, data batch 2)"
    ),
    r"^test_nonmaxsuppression_\w+ input [234] ": (
        "NonMaxSuppression's max_output_boxes_per_class, iou_threshold and score_threshold are "
        "scalars in the specification; onnxruntime reads an empty tensor as the input left out"
    ),
    r"^test_split_\w+ input 1 \(split\) axis 0:": (
        "Split: the sum of 'split' must equal the extent along 'axis' and give one value per "
        "output; onnxruntime reads an empty 'split' as the input left out (onnx's reference "
        "fails too)"
    ),
    r"^test_split_to_sequence_\w+ input 1 \(split\) axis 0: \(3, 6\), \(0,\)": (
        "SplitToSequence: the sum of a 1-D 'split' must equal the extent along 'axis' (0 != 3); "
        "onnxruntime reads an empty 'split' as the input left out"
    ),
}


def _squeeze_nothing(v: Variant, expected: list[Any]) -> list[Any]:
    return [v.feed[onnx.load_from_string(v.model).graph.input[0].name]]


def _initial_states(v: Variant, expected: list[Any]) -> list[Any]:
    """No time step: Y is empty, Y_h (and Y_c) the initial states (zero: none given)."""
    assert len(onnx.load_from_string(v.model).graph.input) <= 4  # no initial_h, initial_c
    return [e if e.size == 0 else np.zeros_like(e) for e in expected]


#: Variants where onnxruntime's result is not the specification's: (reason, what the
#: specification gives, from the variant and onnxruntime's outputs).
SPEC_RESULTS: dict[str, tuple[str, Callable[[Variant, list[Any]], list[Any]]]] = {
    r"^test_squeeze\w* input 1 \(axes\) axis 0:": (
        "Squeeze with 'axes' given as an empty list squeezes no axis (onnx's shape inference "
        "and reference agree: only axes left out squeeze every 1); onnxruntime squeezes every 1",
        _squeeze_nothing,
    ),
    r"^test_(lstm|gru|rnn|simple_rnn)_\w+ input 0 \(X\) axis 0:": (
        "a recurrence over 0 time steps ends in its initial states (zeros: none given); "
        "onnxruntime returns uninitialised memory for Y_h and Y_c (denormals, NaN: seen on "
        "test_lstm_bidirectional), so its stored answer is not an oracle",
        _initial_states,
    ),
}


def _matching(table: dict[str, Any], key: str) -> Any:
    for pattern, value in table.items():
        if re.search(pattern, key):
            return value
    return None


@pytest.fixture(scope="module", autouse=True)
def shared_table():
    """One operator table for every session of this module (a table is frozen at creation;
    building one per session, scanning the entry points each time, would dominate the run)."""
    table = graphrt.session.snapshot()
    original = graphrt.session.snapshot

    def snapshot(plugins=None, custom_kernels=None, strict=None):
        if plugins is None and custom_kernels is None and strict is None:
            return table
        return original(plugins, custom_kernels, strict)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(graphrt.session, "snapshot", snapshot)
        yield


def assert_same(got: Any, want: Any, where: str) -> None:
    """Same structure, shapes and dtypes; float values within rtol 1e-5 / atol 1e-6, the rest
    exactly."""
    if isinstance(want, list):
        assert isinstance(got, list), f"{where}: a sequence expected, got {type(got).__name__}"
        assert len(got) == len(want), (
            f"{where}: {len(got)} tensors in the sequence, not {len(want)}"
        )
        for k, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}[{k}]")
        return
    if want is None:
        assert got is None, f"{where}: no value expected"
        return
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{where}: shape {got.shape}, expected {want.shape}"
    assert got.dtype == want.dtype, f"{where}: dtype {got.dtype}, expected {want.dtype}"
    if want.dtype.kind in "fc":
        wide = np.complex128 if want.dtype.kind == "c" else np.float64
        np.testing.assert_allclose(
            got.astype(wide), want.astype(wide), rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=where
        )
    elif want.dtype.kind == "V":  # bfloat16, float8...: bits
        assert got.tobytes() == want.tobytes(), where
    else:
        np.testing.assert_array_equal(got, want, err_msg=where)


def run_graphrt(model: onnx.ModelProto | bytes, feed: dict, mode: str, path: str) -> list | None:
    """graphrt's outputs, or None where exact mode does not cover the model's operators."""
    try:
        sess = graphrt.Session(model, mode=mode, kernel_path=path, intra_op_threads=1)
        with np.errstate(all="ignore"):
            return sess.run(None, _copies(feed))
    except graphrt.SessionError as e:
        # exact mode refuses an operator at creation, or what it cannot do with these
        # attributes when planning (training statistics of BatchNormalization)
        if mode == "exact" and e.kind == "exact_mode_unavailable":
            return None
        raise


def _copies(feed: dict) -> dict:
    return {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in feed.items()}


# -- generic: onnx's node cases with an emptied input ---------------------------------------

VARIANTS = load_variants()
BY_CASE: dict[str, list[Variant]] = {}
for _v in VARIANTS:
    BY_CASE.setdefault(_v.case, []).append(_v)


def test_the_variants_cover_the_operators():
    """Not a toy oracle: hundreds of operators keep a variant onnxruntime runs."""
    assert len({v.op for v in VARIANTS}) >= 120 and len(VARIANTS) >= 900


@pytest.mark.parametrize("case", sorted(BY_CASE))
def test_backend_case_with_an_empty_input_matches_onnxruntime(case):
    failures = []
    for v in BY_CASE[case]:
        key = f"{v.case} {v.label}"
        refusal = _matching(SPEC_REFUSALS, key)
        special = _matching(SPEC_RESULTS, key)
        expected = special[1](v, v.expected) if special else v.expected
        for mode, path in RUNS:
            where = f"{v.label} [{mode}, {path}]"
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    got = run_graphrt(v.model, v.feed, mode, path)
            except graphrt.SessionError as e:
                if refusal is None or e.kind != "invalid_input":
                    failures.append(f"{where}: {e.kind}: {e}")
                continue
            if refusal is not None:
                if got is not None:
                    failures.append(f"{where}: accepted; the spec refuses it ({refusal})")
                continue
            if got is None:
                continue
            try:
                assert len(got) == len(expected), f"{len(got)} outputs, not {len(expected)}"
                for k, (g, w) in enumerate(zip(got, expected)):
                    assert_same(g, w, f"output {k}")
            except AssertionError as e:
                failures.append(f"{where}: {e}")
    assert not failures, "\n".join(failures)


def test_spec_exceptions_each_match_a_variant():
    """Every exception to onnxruntime's answer still names a variant (none is stale)."""
    keys = [f"{v.case} {v.label}" for v in VARIANTS]
    for pattern in [*SPEC_REFUSALS, *SPEC_RESULTS]:
        assert any(re.search(pattern, k) for k in keys), pattern


# -- curated: the empty shapes models meet ------------------------------------------------


def _rng_array(shape, dtype=np.float32, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def one_node(
    op: str,
    inputs: dict[str, np.ndarray],
    consts: dict[str, np.ndarray] | None = None,
    n_out: int = 1,
    opset: int = 17,
    **attrs,
) -> tuple[onnx.ModelProto, dict]:
    """A one-node model: ``inputs`` are fed (declared with their shapes), ``consts`` are
    initializers; the node reads them in the order given (an empty name for "")."""
    consts = consts or {}
    names = [*inputs, *consts]
    order = attrs.pop("order", names)
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, order, outs, **attrs)
    declared = [
        tensor(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
        for n, a in inputs.items()
    ]
    model = make_model(
        [node],
        declared,
        [helper.make_empty_tensor_value_info(o) for o in outs],
        [init(n, a) for n, a in consts.items()],
        opset=opset,
    )
    return typed_outputs(model), inputs


def typed_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """The outputs' element types from onnx's shape inference, their shapes unknown."""
    model = onnx.shape_inference.infer_shapes(model)
    for vi in model.graph.output:
        clear_shape(vi.type)
    model.graph.ClearField("value_info")
    return model


def _conv_w(m: int, c: int, k: int = 3) -> np.ndarray:
    return _rng_array((m, c, k, k), seed=m * 100 + c)


CURATED: dict[str, Callable[[], tuple[onnx.ModelProto, dict]]] = {
    # convolution: a batch of 0 on the native kernel (16 channels, constant weight), fused too
    "conv_batch0": lambda: one_node(
        "Conv",
        {"x": _rng_array((0, 8, 9, 9))},
        {"w": _conv_w(16, 8), "b": _rng_array(16)},
        pads=[1] * 4,
    ),
    "conv_batch0_grouped": lambda: one_node(
        "Conv", {"x": _rng_array((0, 4, 6, 6))}, {"w": _conv_w(4, 1)}, group=4
    ),
    "conv_zero_channels_out": lambda: one_node(
        "Conv", {"x": _rng_array((2, 3, 5, 5))}, {"w": _conv_w(0, 3)}
    ),
    "conv_1d_batch0": lambda: one_node(
        "Conv", {"x": _rng_array((0, 2, 7))}, {"w": _rng_array((3, 2, 3))}, strides=[2]
    ),
    "conv_zero_channels_in": lambda: one_node(
        "Conv", {"x": _rng_array((2, 0, 5, 5))}, {"w": _conv_w(4, 0), "b": _rng_array(4)}
    ),
    "convtranspose_no_input_position_bias": lambda: one_node(
        "ConvTranspose", {"x": _rng_array((1, 3, 4, 0))}, {"w": _conv_w(3, 2), "b": _rng_array(2)}
    ),
    "convtranspose_batch0": lambda: one_node(
        "ConvTranspose", {"x": _rng_array((0, 3, 4, 4))}, {"w": _conv_w(3, 2)}, strides=[2, 2]
    ),
    # pools and normalisations over a batch of 0
    "maxpool_batch0": lambda: one_node(
        "MaxPool", {"x": _rng_array((0, 3, 8, 8))}, kernel_shape=[3, 3], pads=[1] * 4
    ),
    "maxpool_batch0_indices": lambda: one_node(
        "MaxPool", {"x": _rng_array((0, 3, 8, 8))}, n_out=2, kernel_shape=[2, 2], strides=[2, 2]
    ),
    "averagepool_batch0": lambda: one_node(
        "AveragePool",
        {"x": _rng_array((0, 3, 8, 8))},
        kernel_shape=[3, 3],
        count_include_pad=1,
        pads=[1] * 4,
    ),
    "globalaveragepool_batch0": lambda: one_node(
        "GlobalAveragePool", {"x": _rng_array((0, 3, 4, 4))}
    ),
    "globalmaxpool_batch0": lambda: one_node("GlobalMaxPool", {"x": _rng_array((0, 3, 4, 4))}),
    "lppool_batch0": lambda: one_node(
        "LpPool", {"x": _rng_array((0, 2, 5, 5))}, kernel_shape=[2, 2]
    ),
    "batchnorm_batch0": lambda: one_node(
        "BatchNormalization",
        {"x": _rng_array((0, 3, 4, 4))},
        {"s": _rng_array(3), "b": _rng_array(3), "m": _rng_array(3), "v": np.ones(3, np.float32)},
    ),
    "instancenorm_batch0": lambda: one_node(
        "InstanceNormalization",
        {"x": _rng_array((0, 3, 4, 4))},
        {"s": _rng_array(3), "b": _rng_array(3)},
    ),
    "layernorm_batch0": lambda: one_node(
        "LayerNormalization",
        {"x": _rng_array((0, 5, 16))},
        {"s": _rng_array(16), "b": _rng_array(16)},
        n_out=3,
    ),
    "groupnorm_batch0": lambda: one_node(
        "GroupNormalization",
        {"x": _rng_array((0, 4, 3, 3))},
        {"s": _rng_array(4), "b": _rng_array(4)},
        opset=21,
        num_groups=2,
    ),
    "lrn_batch0": lambda: one_node("LRN", {"x": _rng_array((0, 3, 4, 4))}, size=3),
    "softmax_batch0": lambda: one_node("Softmax", {"x": _rng_array((0, 10))}),
    "softmax_empty_axis": lambda: one_node("Softmax", {"x": _rng_array((3, 0))}),
    "logsoftmax_batch0": lambda: one_node("LogSoftmax", {"x": _rng_array((0, 10))}),
    # products: rows of 0, K of 0 (the sum of nothing is 0), N of 0
    "matmul_batch0_const_b": lambda: one_node(
        "MatMul", {"a": _rng_array((0, 16))}, {"b": _rng_array((16, 8))}
    ),
    "matmul_zero_k": lambda: one_node("MatMul", {"a": _rng_array((3, 0)), "b": _rng_array((0, 4))}),
    "matmul_zero_k_const_b": lambda: one_node(
        "MatMul", {"a": _rng_array((2, 3, 0))}, {"b": _rng_array((0, 4))}
    ),
    "matmul_zero_n": lambda: one_node(
        "MatMul", {"a": _rng_array((3, 5))}, {"b": _rng_array((5, 0))}
    ),
    "gemm_zero_k_with_c": lambda: one_node(
        "Gemm", {"a": _rng_array((3, 0)), "b": _rng_array((0, 4))}, {"c": _rng_array(4)}, beta=0.5
    ),
    "gemm_batch0_const_b": lambda: one_node(
        "Gemm", {"a": _rng_array((0, 6))}, {"b": _rng_array((4, 6)), "c": _rng_array(4)}, transB=1
    ),
    # reductions over an empty axis, with keepdims and noop_with_empty_axes
    **{
        f"{op.lower()}_empty_axis_keepdims{keep}": (
            lambda op=op, keep=keep: one_node(
                op,
                {"x": _rng_array((2, 0, 3))},
                {"axes": np.array([1], np.int64)},
                opset=18,
                keepdims=keep,
            )
        )
        for op in (
            "ReduceSum",
            "ReduceMean",
            "ReduceMax",
            "ReduceMin",
            "ReduceProd",
            "ReduceL1",
            "ReduceL2",
            "ReduceSumSquare",
            "ReduceLogSum",
            "ReduceLogSumExp",
        )
        for keep in (0, 1)
    },
    "reducesum_empty_axes_noop": lambda: one_node(
        "ReduceSum",
        {"x": _rng_array((0, 3))},
        {"axes": np.zeros(0, np.int64)},
        opset=18,
        noop_with_empty_axes=1,
    ),
    "reducesum_empty_axes_all": lambda: one_node(
        "ReduceSum",
        {"x": _rng_array((0, 3))},
        {"axes": np.zeros(0, np.int64)},
        opset=18,
    ),
    "reducemax_batch0_other_axis": lambda: one_node(
        "ReduceMax", {"x": _rng_array((0, 3))}, {"axes": np.array([1], np.int64)}, opset=18
    ),
    "argmax_batch0": lambda: one_node("ArgMax", {"x": _rng_array((0, 3))}, axis=1),
    "topk_batch0": lambda: one_node(
        "TopK", {"x": _rng_array((0, 5))}, {"k": np.array([2], np.int64)}, n_out=2
    ),
    "cumsum_batch0": lambda: one_node(
        "CumSum", {"x": _rng_array((0, 3))}, {"axis": np.array(1, np.int64)}
    ),
    # data movement with an empty piece
    "concat_empty_piece": lambda: one_node(
        "Concat",
        {"a": _rng_array((2, 3)), "b": _rng_array((0, 3)), "c": _rng_array((1, 3))},
        axis=0,
    ),
    "concat_empty_piece_inner_axis": lambda: one_node(
        "Concat", {"a": _rng_array((2, 0, 3)), "b": _rng_array((2, 2, 3))}, axis=1
    ),
    "concat_all_empty": lambda: one_node(
        "Concat", {"a": _rng_array((0, 3)), "b": _rng_array((0, 3))}, axis=1
    ),
    "split_batch0": lambda: one_node(
        "Split", {"x": _rng_array((0, 4))}, n_out=2, axis=1, opset=18, num_outputs=2
    ),
    "split_zero_parts": lambda: one_node(
        "Split", {"x": _rng_array((2, 3))}, {"s": np.array([0, 3, 0], np.int64)}, n_out=3, axis=1
    ),
    "gather_empty_indices": lambda: one_node(
        "Gather", {"x": _rng_array((4, 3))}, {"i": np.zeros(0, np.int64)}, axis=0
    ),
    "gather_empty_indices_2d": lambda: one_node(
        "Gather", {"x": _rng_array((4, 3))}, {"i": np.zeros((2, 0), np.int64)}, axis=1
    ),
    "gather_from_empty_other_axis": lambda: one_node(
        "Gather", {"x": _rng_array((0, 3))}, {"i": np.array([2, 0], np.int64)}, axis=1
    ),
    "pad_empty_to_constant": lambda: one_node(
        "Pad",
        {"x": _rng_array((0, 3))},
        {"p": np.array([1, 0, 2, 0], np.int64), "v": np.float32(7)},
    ),
    "transpose_batch0": lambda: one_node("Transpose", {"x": _rng_array((0, 3, 2))}, perm=[2, 0, 1]),
    "reshape_batch0": lambda: one_node(
        "Reshape", {"x": _rng_array((0, 6))}, {"s": np.array([0, 2, 3], np.int64)}
    ),
    "resize_batch0": lambda: one_node(
        "Resize",
        {"x": _rng_array((0, 2, 3, 3))},
        {"r": np.zeros(0, np.float32), "sc": np.array([1, 1, 2, 2], np.float32)},
        order=["x", "", "sc"],
    ),
    "where_broadcast_empty": lambda: one_node(
        "Where", {"c": np.zeros((0, 3), bool), "a": _rng_array(3), "b": _rng_array((1, 3))}
    ),
    "add_broadcast_empty": lambda: one_node("Add", {"a": _rng_array((0, 3)), "b": _rng_array(3)}),
    # exact transcendental functions on (3, 0) (the native exact kernels too)
    **{
        f"{op.lower()}_3x0": (lambda op=op: one_node(op, {"x": _rng_array((3, 0))}, opset=20))
        for op in ("Exp", "Tanh", "Sigmoid", "Erf", "Relu", "Gelu")
    },
    "lstm_zero_steps": lambda: one_node(
        "LSTM",
        {"x": _rng_array((0, 2, 3))},
        {"w": _rng_array((1, 16, 3)), "r": _rng_array((1, 16, 4))},
        n_out=3,
        hidden_size=4,
    ),
}

#: Curated models where onnxruntime's result is not the specification's, or onnxruntime fails:
#: (reason, the specification's outputs from the feed and onnxruntime's outputs or None).
CURATED_SPEC: dict[str, tuple[str, Callable[[dict, list[Any] | None], list[Any]]]] = {
    "groupnorm_batch0": (
        "onnxruntime runs GroupNormalization as its function body, whose Reshape to "
        "[N, num_groups, -1] fails on a batch of 0 (-1 is ambiguous); the specification's Y "
        "has X's shape",
        lambda feed, expected: [np.empty_like(feed["x"])],
    ),
    "lstm_zero_steps": (
        "an LSTM over 0 time steps ends in its initial states (zeros: none given); onnxruntime "
        "returns uninitialised memory for Y_h and Y_c (NaN in one run of three)",
        lambda feed, expected: [e if e.size == 0 else np.zeros_like(e) for e in expected],
    ),
}


def _fused(op: str, act: str) -> tuple[onnx.ModelProto, dict]:
    """A product then an activation (fused into one node by fuse_product_activation)."""
    if op == "Conv":
        x, w = _rng_array((0, 8, 5, 5)), _conv_w(16, 8)
    else:
        x, w = _rng_array((0, 6)), _rng_array((6, 4))
    nodes = [helper.make_node(op, ["x", "w"], ["p"]), helper.make_node(act, ["p"], ["y0"])]
    model = make_model(
        nodes,
        [tensor("x", shape=list(x.shape))],
        [helper.make_empty_tensor_value_info("y0")],
        [init("w", w)],
    )
    return typed_outputs(model), {"x": x}


for _op in ("Conv", "MatMul", "Gemm"):
    for _act in ("Relu", "Sigmoid"):
        CURATED[f"fused_{_op.lower()}_{_act.lower()}_batch0"] = lambda op=_op, act=_act: _fused(
            op, act
        )


#: Empty inputs both runtimes refuse (an operator over no element where the specification
#: gives no value): graphrt with an ``invalid_input`` error naming the node, not a kernel bug.
REFUSED: dict[str, Callable[[], tuple[onnx.ModelProto, dict]]] = {
    "globalaveragepool_empty_spatial": lambda: one_node(
        "GlobalAveragePool", {"x": _rng_array((2, 3, 0, 4))}
    ),
    "globalmaxpool_empty_spatial": lambda: one_node(
        "GlobalMaxPool", {"x": _rng_array((2, 3, 0, 4))}
    ),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_empty_input_refused_by_both(name):
    model, feed = REFUSED[name]()
    with pytest.raises(Exception), warnings.catch_warnings():  # noqa: B017 (onnxruntime's own)
        warnings.simplefilter("ignore")
        ort_session(model).run(None, feed)
    for mode, path in RUNS:
        with pytest.raises(graphrt.SessionError) as info:
            run_graphrt(model, feed, mode, path)
        assert info.value.kind == "invalid_input", (mode, path)


@pytest.mark.parametrize("name", sorted(CURATED))
def test_curated_empty_model_matches_onnxruntime(name):
    model, feed = CURATED[name]()
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            expected = [np.asarray(v) for v in ort_session(model).run(None, feed)]
    except Exception:  # onnxruntime fails: only where the specification's answer is given
        if name not in CURATED_SPEC:
            raise
        expected = None
    if name in CURATED_SPEC:
        expected = CURATED_SPEC[name][1](feed, expected)
    assert any(isinstance(v, np.ndarray) and v.size == 0 for v in feed.values()) or any(
        e.size == 0 for e in expected
    )
    for mode, path in RUNS:
        got = run_graphrt(model, feed, mode, path)
        if got is None:
            continue
        assert len(got) == len(expected)
        for k, (g, w) in enumerate(zip(got, expected)):
            assert_same(g, w, f"{name} output {k} [{mode}, {path}]")


EXACT_CURATED = [
    "exp_3x0",
    "tanh_3x0",
    "sigmoid_3x0",
    "erf_3x0",
    "softmax_batch0",
    "softmax_empty_axis",
    "conv_batch0",
    "conv_zero_channels_out",
    "matmul_zero_k",
    "gemm_zero_k_with_c",
    "globalaveragepool_batch0",
    "batchnorm_batch0",
    "layernorm_batch0",
    "concat_empty_piece",
    "fused_matmul_sigmoid_batch0",
    "fused_conv_sigmoid_batch0",
]


@pytest.mark.parametrize("name", EXACT_CURATED)
def test_exact_mode_runs_the_empty_cases_of_its_operators(name):
    """These operators support exact mode: an empty input must not make it refuse them."""
    model, feed = CURATED[name]()
    for path in ("numpy", "auto"):
        got = run_graphrt(model, feed, "exact", path)
        assert got is not None, path
        if name == "matmul_zero_k":  # docs/exact-mode.md: an empty reduction gives +0
            assert got[0].size and not np.signbit(got[0]).any()
