"""Models quantized here by ``onnxruntime.quantization``, run by graphrt and onnxruntime.

Float models built with onnx.helper (tests._models.mlp, small_cnn; tests._transformers'
encoder) are quantized in the test: dynamically (MLP, encoder) and statically with a seeded
calibration reader (QDQ and QOperator, per tensor and per channel, CNN and MLP).  onnxruntime
on the quantized model is the oracle:

* static models: the codes of the final QuantizeLinear (exposed as an extra output) within 1
  unit, and the dequantized output within two steps of its scale;
* dynamic models: every dynamically quantized product (the float ``Mul`` after MatMulInteger)
  within ``2 * s * max|b - b_zp|``, s = a_scale * b_scale of this run (read from onnxruntime):
  two activation-code steps of one term; the model's output within ``2 * G * sum`` of those
  steps over every product (each may move by a code), G the gain of the float layers after the
  last product (MLP: alpha times the head's largest row L1 norm; encoder: the last layer
  norm's max|gamma| / its smallest input row std, read from onnxruntime).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import graphrt
from tests._models import mlp, ort_session, small_cnn
from tests._transformers import encoder_feed, minilm_encoder

quantization = pytest.importorskip(
    "onnxruntime.quantization", reason="onnxruntime.quantization is not available"
)


class _Reader(quantization.CalibrationDataReader):
    """Seeded calibration batches."""

    def __init__(self, name: str, shape: tuple[int, ...], batches: int = 6) -> None:
        rng = np.random.default_rng(42)
        self._data = iter(
            [{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(batches)]
        )

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._data, None)


MODELS = {
    "mlp": (lambda: mlp(hidden=(48, 32), n_in=24), (16, 24)),
    "cnn": (lambda: small_cnn(bn=False), (2, 3, 16, 16)),
}


def _with_outputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """The model with extra graph outputs (types left to inference)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    m.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in names if n not in have)
    return m


def _run_both(model: onnx.ModelProto, feed: dict[str, np.ndarray]):
    ref = ort_session(model).run(None, feed)
    sess = graphrt.Session(model)
    return sess, ref, sess.run(None, feed)


def _static(tmp_path, kind: str, fmt: str, per_channel: bool):
    build, shape = MODELS[kind]
    src, dst = tmp_path / f"{kind}.onnx", tmp_path / f"{kind}_{fmt}_{per_channel}.onnx"
    onnx.save(build(), src)
    quantization.quantize_static(
        str(src),
        str(dst),
        _Reader("x", shape),
        quant_format=getattr(quantization.QuantFormat, fmt),
        per_channel=per_channel,
    )
    return onnx.load(dst), shape


@pytest.mark.parametrize("per_channel", [False, True], ids=["tensor", "channel"])
@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_static_quantized_models_equal_onnxruntime(tmp_path, kind, fmt, per_channel):
    model, shape = _static(tmp_path, kind, fmt, per_channel)
    last = next(n for n in reversed(model.graph.node) if n.op_type == "DequantizeLinear")
    assert last.output[0] == model.graph.output[0].name
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    step = float(inits[last.input[1]])
    model = _with_outputs(model, [last.input[0]])
    x = np.random.default_rng(7).standard_normal((shape[0] * 2, *shape[1:])).astype(np.float32)
    sess, (ref_y, ref_q), (got_y, got_q) = _run_both(model, {"x": x})
    assert got_q.dtype == ref_q.dtype and got_q.dtype in (np.int8, np.uint8)
    assert np.abs(got_q.astype(np.int32) - ref_q).max() <= 1
    assert np.abs(got_y - ref_y).max() <= 2 * step
    ops = {(n.info.domain, n.info.op_type) for n in sess.graph.nodes}
    if fmt == "QOperator":  # the contrib operators ran (the test would not reach here else)
        assert ("com.microsoft", "QGemm") in ops
    else:  # the QDQ pass fused every product: no float Conv/MatMul/Gemm is left
        assert not ops & {("", "Conv"), ("", "MatMul"), ("", "Gemm")}, ops
        assert ("com.microsoft", "QGemm") in ops


def _dynamic_checks(model: onnx.ModelProto) -> tuple[list[str], list[float]]:
    """(names of the scaled products and of their scales, max|b - b_zp| per product)."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in model.graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    names, spans = [], []
    for n in model.graph.node:
        if n.op_type != "MatMulInteger":
            continue
        (cast,) = readers[n.output[0]]
        (mul,) = readers[cast.output[0]]
        scale = next(i for i in mul.input if i != cast.output[0])
        b = inits[n.input[1]].astype(np.int64)
        bz = inits[n.input[3]].astype(np.int64) if len(n.input) > 3 and n.input[3] else 0
        names += [mul.output[0], scale]
        spans.append(float(np.abs(b - bz).max()))
    return names, spans


def _dynamic(tmp_path, float_model: onnx.ModelProto) -> onnx.ModelProto:
    src, dst = tmp_path / "float.onnx", tmp_path / "dynamic.onnx"
    onnx.save(float_model, src)
    quantization.quantize_dynamic(str(src), str(dst))
    return onnx.load(dst)


def _check_dynamic(model, feed, gain_of) -> None:
    names, spans = _dynamic_checks(model)
    assert spans, "quantize_dynamic quantized no MatMul"
    extra = names + gain_of.extra
    m = _with_outputs(model, extra)
    _, ref, got = _run_both(m, feed)
    n_out = len(model.graph.output)
    ref_x = dict(zip(extra, ref[n_out:]))
    got_x = dict(zip(extra, got[n_out:]))
    steps = []
    for k, span in enumerate(spans):
        product, scale = names[2 * k], names[2 * k + 1]
        step = float(np.max(ref_x[scale])) * span
        steps.append(step)
        assert np.abs(got_x[product] - ref_x[product]).max() <= 2 * step, product
    tol = 2 * gain_of(ref_x) * sum(steps)
    assert np.abs(got[0] - ref[0]).max() <= tol


def test_dynamic_quantized_mlp_equals_onnxruntime(tmp_path):
    float_model = mlp(hidden=(48, 32), n_in=24)
    model = _dynamic(tmp_path, float_model)
    head = next(numpy_helper.to_array(i) for i in float_model.graph.initializer if i.name == "wo")

    def gain(_values):  # Gemm(alpha=0.5) of relu: each output moves by alpha * |row| * error
        return 0.5 * float(np.abs(head).sum(axis=1).max())

    gain.extra = []
    feed = {"x": np.random.default_rng(3).standard_normal((32, 24)).astype(np.float32)}
    _check_dynamic(model, feed, gain)


def test_dynamic_quantized_encoder_equals_onnxruntime(tmp_path):
    float_model = minilm_encoder(layers=2, hidden=64, heads=4)
    model = _dynamic(tmp_path, float_model)
    sqrt = [n for n in model.graph.node if n.op_type == "Sqrt"][-1]  # the last layer norm's
    gammas = [n for n in model.graph.node if n.op_type == "Mul"]
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    gamma = next(inits[i] for n in reversed(gammas) for i in n.input if i in inits)

    def gain(values):
        return float(np.abs(gamma).max() / np.min(values[sqrt.output[0]]))

    gain.extra = [sqrt.output[0]]
    _check_dynamic(model, encoder_feed(2, 24), gain)


def test_the_qdq_pass_keeps_a_weight_that_is_not_quantized(tmp_path):
    """A float weight that no int8 code and scale give back exactly stays a float MatMul."""
    model, shape = _static(tmp_path, "mlp", "QDQ", False)
    inits = {i.name: i for i in model.graph.initializer}
    dq = next(
        n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in inits
        and numpy_helper.to_array(inits[n.input[0]]).ndim == 2
    )  # fmt: skip
    w = numpy_helper.to_array(inits[dq.input[0]]).astype(np.float32)
    w *= numpy_helper.to_array(inits[dq.input[1]])
    w[0, 0] += 1e-3  # no longer codes times a scale
    reader = next(n for n in model.graph.node if dq.output[0] in n.input)
    assert reader.op_type == "MatMul"
    model.graph.node.remove(dq)
    model.graph.initializer.append(numpy_helper.from_array(w, dq.output[0]))
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    sess, ref, got = _run_both(model, {"x": x})
    ops = [n.info.op_type for n in sess.graph.nodes]
    assert ops.count("QLinearMatMul") == 1 and ops.count("QGemm") == 1  # the others fused
    assert "MatMul" in ops or "FusedMatMul" in ops, ops
    step = float(numpy_helper.to_array(inits[model.graph.node[-1].input[1]]))
    assert np.abs(got[0] - ref[0]).max() <= 2 * step


def test_the_qdq_pass_fuses_a_product_of_two_run_time_values():
    """Attention's Q @ K^T shape: both operands dequantized at run time, per tensor."""
    i8 = onnx.TensorProto.INT8
    consts = {"sa": np.float32(0.031), "za": np.int8(3), "sb": np.float32(0.017)}
    consts |= {"zb": np.int8(-7), "sy": np.float32(0.45), "zy": np.int8(2)}
    nodes = [
        helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["ad"]),
        helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["bd"]),
        helper.make_node("MatMul", ["ad", "bd"], ["p"]),
        helper.make_node("QuantizeLinear", ["p", "sy", "zy"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("a", i8, [2, 8, 64]),
         helper.make_tensor_value_info("b", i8, [2, 64, 8])],
        [helper.make_tensor_value_info("y", i8, None)],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(2)
    feed = {k: rng.integers(-128, 128, s).astype(np.int8) for k, s in
            (("a", (2, 8, 64)), ("b", (2, 64, 8)))}  # fmt: skip
    sess, (ref,), (got,) = _run_both(model, feed)
    assert [n.info.op_type for n in sess.graph.nodes] == ["QLinearMatMul"]
    assert np.abs(got.astype(np.int32) - ref).max() <= 1


def test_a_qoperator_model_runs_in_exact_mode_with_the_same_bits_on_any_thread_count(tmp_path):
    model, shape = _static(tmp_path, "mlp", "QOperator", True)
    x = np.random.default_rng(9).standard_normal((64, shape[1])).astype(np.float32)
    runs = [
        graphrt.Session(model, mode="exact", intra_op_threads=t).run(None, {"x": x})[0]
        for t in (1, 2)
    ]
    assert runs[0].tobytes() == runs[1].tobytes()
    (ref,) = ort_session(model).run(None, {"x": x})
    step = float(numpy_helper.to_array(
        next(i for i in model.graph.initializer if i.name == model.graph.node[-1].input[1])
    ))  # fmt: skip
    assert np.abs(runs[0] - ref).max() <= 2 * step
