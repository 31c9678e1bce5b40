"""Small random-weight models that combine the operator families of the breadth issue, as a
user's exported model would, run by graphrt and compared with onnxruntime (rtol 1e-4).

Each model mixes families on purpose (a detection head: Resize, Conv, NonMaxSuppression, TopK,
GatherND; an audio front end: STFT, a window, MelWeightMatrix; a loss head; a decoder block's
mask and position arithmetic), so the kernels are checked together inside plans, with dynamic
and data-dependent nodes next to static ones, not only one node at a time.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import graphrt
from tests._models import init, make_model, onnxruntime_limits, ort_session, tensor

pytest.importorskip("onnxruntime")

RTOL = 1e-4


def _needs_opset(opset: int) -> None:
    if onnxruntime_limits()[1] < opset:
        limit = onnxruntime_limits()[1]
        pytest.skip(f"the installed onnxruntime loads ai.onnx up to opset {limit}")


def _compare(model, feed, rtol=RTOL, atol=1e-5, **options):
    ours = graphrt.Session(model, **options).run(None, feed)
    theirs = ort_session(model).run(None, feed)
    assert len(ours) == len(theirs)
    for k, (a, b) in enumerate(zip(ours, theirs)):
        assert a.dtype == b.dtype, (k, a.dtype, b.dtype)
        assert a.shape == b.shape, (k, a.shape, b.shape)
        if a.dtype.kind in "fc":
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"output {k}")
        else:
            np.testing.assert_array_equal(a, b, err_msg=f"output {k}")
    return ours


def _c(name, values, dtype=np.int64):
    return init(name, np.asarray(values, dtype))


def detection_head(seed: int = 0):
    """Feature map -> 2x Resize (linear) -> 1x1 Conv to 5 channels per anchor (box + score)
    -> boxes [1, A, 4] (center form, positive sizes) and scores [1, 1, A] -> NonMaxSuppression
    -> GatherND of the kept boxes; TopK of the raw scores on the side."""
    rng = np.random.default_rng(seed)
    c_in, side = 6, 8
    anchors = (2 * side) ** 2
    w = rng.standard_normal((5, c_in, 1, 1)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    nodes = [
        helper.make_node(
            "Resize", ["x", "", "scales"], ["up"], mode="linear",
            coordinate_transformation_mode="half_pixel",
        ),
        helper.make_node("Conv", ["up", "w", "b"], ["head"]),
        helper.make_node("Reshape", ["head", "flat_shape"], ["flat"]),  # [1, 5, A]
        helper.make_node("Transpose", ["flat"], ["per_anchor"], perm=[0, 2, 1]),  # [1, A, 5]
        helper.make_node("Split", ["per_anchor", "split"], ["centers", "sizes", "logit"], axis=2),
        helper.make_node("Sigmoid", ["centers"], ["centers01"]),
        helper.make_node("Mul", ["centers01", "extent"], ["centers_px"]),
        helper.make_node("Softplus", ["sizes"], ["sizes_px"]),
        helper.make_node("Concat", ["centers_px", "sizes_px"], ["boxes"], axis=2),
        helper.make_node("Sigmoid", ["logit"], ["score_col"]),
        helper.make_node("Transpose", ["score_col"], ["scores"], perm=[0, 2, 1]),  # [1, 1, A]
        helper.make_node(
            "NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "min_score"],
            ["selected"], center_point_box=1,
        ),
        helper.make_node("Gather", ["selected", "batch_and_box"], ["keys"], axis=1),
        helper.make_node("GatherND", ["boxes", "keys"], ["kept_boxes"]),
        helper.make_node("Reshape", ["scores", "score_shape"], ["score_row"]),
        helper.make_node("TopK", ["score_row", "k"], ["top_scores", "top_index"], axis=1),
    ]  # fmt: skip
    inits = [
        init("scales", np.array([1, 1, 2, 2], np.float32)),
        init("w", w),
        init("b", b),
        _c("flat_shape", [1, 5, anchors]),
        _c("split", [2, 2, 1]),
        init("extent", np.array([16.0, 16.0], np.float32)),
        _c("max_out", [12]),
        init("iou", np.array([0.4], np.float32)),
        init("min_score", np.array([0.2], np.float32)),
        _c("batch_and_box", [0, 2]),
        _c("score_shape", [1, anchors]),
        _c("k", [10]),
    ]
    model = make_model(
        nodes,
        [tensor("x", shape=[1, c_in, side, side])],
        [
            tensor("selected", TensorProto.INT64),
            tensor("kept_boxes"),
            tensor("top_scores"),
            tensor("top_index", TensorProto.INT64),
        ],
        inits,
        opset=19,
    )
    feed = {"x": rng.standard_normal((1, c_in, side, side)).astype(np.float32)}
    return model, feed


def test_detection_head_matches_onnxruntime():
    _needs_opset(19)
    model, feed = detection_head()
    selected, _, _, _ = _compare(model, feed)
    assert 0 < len(selected) <= 12  # the case is not vacuous: some boxes survive


def audio_front_end(seed: int = 1, frames_of: int = 4000):
    """Waveform -> STFT with a Hann window -> power spectrum -> mel filter bank -> log."""
    rng = np.random.default_rng(seed)
    n_fft, hop, mels = 256, 128, 24
    nodes = [
        helper.make_node("HannWindow", ["n_fft"], ["window"]),
        helper.make_node("STFT", ["signal", "hop", "window", "n_fft"], ["spec"], onesided=1),
        helper.make_node("Mul", ["spec", "spec"], ["sq"]),
        helper.make_node("ReduceSum", ["sq", "last"], ["power"], keepdims=0),  # [1, F, bins]
        helper.make_node(
            "MelWeightMatrix", ["mels", "n_fft", "rate", "low", "high"], ["mel_w"],
        ),
        helper.make_node("MatMul", ["power", "mel_w"], ["mel"]),
        helper.make_node("Add", ["mel", "eps"], ["mel_eps"]),
        helper.make_node("Log", ["mel_eps"], ["log_mel"]),
    ]  # fmt: skip
    inits = [
        _c("n_fft", n_fft),
        _c("hop", hop),
        _c("last", [-1]),
        _c("mels", mels),
        _c("rate", 16000),
        init("low", np.array(20.0, np.float32)),
        init("high", np.array(7600.0, np.float32)),
        init("eps", np.array(1e-6, np.float32)),
    ]
    model = make_model(
        nodes, [tensor("signal", shape=[1, frames_of, 1])], [tensor("log_mel")], inits, opset=17
    )
    feed = {"signal": rng.standard_normal((1, frames_of, 1)).astype(np.float32)}
    return model, feed


def test_audio_front_end_matches_onnxruntime():
    _needs_opset(17)
    model, feed = audio_front_end()
    (log_mel,) = _compare(model, feed, rtol=1e-4, atol=1e-4)
    assert log_mel.shape == (1, (4000 - 256) // 128 + 1, 24)


def loss_head(seed: int = 2, batch: int = 6, classes: int = 5):
    """Logits from a Gemm -> SoftmaxCrossEntropyLoss (weights, ignore_index, mean) and, on the
    side, NegativeLogLikelihoodLoss of a LogSoftmax per position (reduction none)."""
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("Gemm", ["x", "w", "b"], ["logits"], transB=1),
        helper.make_node(
            "SoftmaxCrossEntropyLoss", ["logits", "labels", "class_w"], ["loss", "log_prob"],
            reduction="mean", ignore_index=1,
        ),
        helper.make_node("LogSoftmax", ["logits"], ["lsm"], axis=1),
        helper.make_node("NegativeLogLikelihoodLoss", ["lsm", "labels"], ["nll"], reduction="none"),
    ]  # fmt: skip
    inits = [
        init("w", rng.standard_normal((classes, 8)).astype(np.float32)),
        init("b", rng.standard_normal(classes).astype(np.float32)),
        init("class_w", rng.uniform(0.5, 2.0, classes).astype(np.float32)),
    ]
    model = make_model(
        nodes,
        [tensor("x", shape=[batch, 8]), tensor("labels", TensorProto.INT64, [batch])],
        [tensor("loss"), tensor("log_prob"), tensor("nll")],
        inits,
        opset=13,
    )
    labels = rng.integers(0, classes, batch).astype(np.int64)
    labels[0] = 1  # an ignored target
    feed = {"x": rng.standard_normal((batch, 8)).astype(np.float32), "labels": labels}
    return model, feed


def test_loss_head_matches_onnxruntime():
    model, feed = loss_head()
    loss, _, nll = _compare(model, feed)
    assert loss.shape == () and nll.shape == (6,)


def decoder_masks(seed: int = 3, seq: int = 7, dim: int = 8):
    """A decoder block's index arithmetic: positions by CumSum of a padding mask, a causal mask
    from Trilu, scores from Einsum, masked Softmax, and the argmax token per position."""
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("CumSum", ["pad_mask", "seq_axis"], ["positions"]),
        helper.make_node("ConstantOfShape", ["square"], ["ones"],
                         value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
        helper.make_node("Trilu", ["ones"], ["causal"], upper=0),
        helper.make_node("Einsum", ["q", "k"], ["scores"], equation="bid,bjd->bij"),
        helper.make_node("Sub", ["causal", "one"], ["neg_mask"]),
        helper.make_node("Mul", ["neg_mask", "big"], ["bias"]),
        helper.make_node("Add", ["scores", "bias"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["attn"], axis=-1),
        helper.make_node("ArgMax", ["attn"], ["best"], axis=-1, keepdims=0),
        helper.make_node("ReduceLogSumExp", ["masked", "last"], ["lse"], keepdims=0),
    ]  # fmt: skip
    inits = [
        _c("seq_axis", 1),
        _c("square", [seq, seq]),
        _c("last", [-1]),
        init("one", np.array(1.0, np.float32)),
        init("big", np.array(1e4, np.float32)),
    ]
    model = make_model(
        nodes,
        [
            tensor("pad_mask", TensorProto.INT64, [2, seq]),
            tensor("q", shape=[2, seq, dim]),
            tensor("k", shape=[2, seq, dim]),
        ],
        [
            tensor("positions", TensorProto.INT64),
            tensor("attn"),
            tensor("best", TensorProto.INT64),
            tensor("lse"),
        ],
        inits,
        opset=18,
    )
    pad = np.ones((2, seq), np.int64)
    pad[1, 5:] = 0
    feed = {
        "pad_mask": pad,
        "q": rng.standard_normal((2, seq, dim)).astype(np.float32),
        "k": rng.standard_normal((2, seq, dim)).astype(np.float32),
    }
    return model, feed


def test_decoder_masks_match_onnxruntime():
    model, feed = decoder_masks()
    positions, _, best, _ = _compare(model, feed)
    np.testing.assert_array_equal(positions[1], [1, 2, 3, 4, 5, 5, 5])
    assert np.all(best <= np.arange(7))  # the causal mask holds


@pytest.mark.parametrize("threads", [1, 2])
def test_models_run_again_from_cached_plans_with_the_same_results(threads):
    """A second and third run reuse the plan and pooled run state (data-dependent NMS and a
    dynamic TopK next to static steps) and must give the first run's bits."""
    for build in (detection_head, audio_front_end, decoder_masks):
        model, feed = build()
        sess = graphrt.Session(model, intra_op_threads=threads)
        first = sess.run(None, feed)
        for _ in range(2):
            again = sess.run(None, feed)
            for a, b in zip(first, again):
                np.testing.assert_array_equal(a, b)
