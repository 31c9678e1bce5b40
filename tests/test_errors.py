"""Error kinds say whose fault a failure is (issue 13): a kernel's own bug is `kernel_error`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

import graphrt
from graphrt.errors import KINDS
from graphrt.kernel import OpKernel

X = np.array([[1.0, -2.0, 3.0]], np.float32)


def _model(op: str = "Relu") -> bytes:
    node = helper.make_node(op, ["x"], ["y"], name="the_node")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


class _Fails(OpKernel):
    """Raises ``error`` from the phase named by ``phase``, on inputs with a negative first value."""

    phase = "run"
    error: BaseException = ZeroDivisionError("division by zero")

    def infer(self, ctx):
        if self.phase == "infer":
            raise self.error
        ctx.set_output(0, ctx.dtype(0), ctx.shape(0))

    def bind(self, ctx, inputs, outputs):
        if self.phase == "bind":
            raise self.error
        return super().bind(ctx, inputs, outputs)

    def run(self, ctx, inputs, outputs):
        if inputs[0].reshape(-1)[0] < 0:
            raise self.error
        np.copyto(outputs[0], inputs[0])


def _session(phase: str, error: BaseException) -> graphrt.Session:
    kernel = type("Failing", (_Fails,), {"phase": phase, "error": error})
    return graphrt.Session(_model(), custom_kernels={"Relu": kernel}, plugins=[])


def _refusal(sess: graphrt.Session, x: np.ndarray) -> graphrt.SessionError:
    with pytest.raises(graphrt.SessionError) as caught:
        sess.run(None, {"x": x})
    return caught.value


def test_every_kind_is_documented():
    doc = (Path(__file__).parents[1] / "docs" / "errors.md").read_text()
    for kind in KINDS:
        assert f"| `{kind}` |" in doc


@pytest.mark.parametrize("error", [ZeroDivisionError("boom"), ValueError("boom"), KeyError("k")])
def test_a_kernel_raising_in_run_is_a_kernel_error_naming_node_operator_and_plugin(error):
    sess = _session("run", error)
    err = _refusal(sess, -X)
    assert err.kind == "kernel_error"
    assert err.node == "the_node"
    assert err.operators == ["Relu (opset 17)"]
    assert type(error).__name__ in str(err) and "plugin" in str(err)
    assert err.__cause__ is error
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], X)  # still usable


def test_a_kernel_raising_while_binding_is_a_kernel_error():
    err = _refusal(_session("bind", RuntimeError("bad prepare")), X)
    assert err.kind == "kernel_error" and err.node == "the_node" and "bad prepare" in str(err)


def test_an_exception_from_infer_reads_as_the_inputs_fault():
    err = _refusal(_session("infer", ValueError("shapes (1,3) and (2,) differ")), X)
    assert err.kind == "invalid_input" and err.node == "the_node"


def test_a_kernels_own_session_error_keeps_its_kind_and_gets_the_node():
    mine = graphrt.SessionError("invalid_input", "index 7 is out of range")
    err = _refusal(_session("run", mine), -X)
    assert err is mine and err.kind == "invalid_input" and err.node == "the_node"


def test_memory_error_in_a_kernel_is_resource_exhausted():
    sess = _session("run", MemoryError())
    err = _refusal(sess, -X)
    assert err.kind == "resource_exhausted" and err.node == "the_node"
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], X)


def test_kernel_errors_survive_pickling():
    import pickle

    err = _refusal(_session("run", ZeroDivisionError("boom")), -X)
    back = pickle.loads(pickle.dumps(err))
    assert (back.kind, back.node, back.operators) == (err.kind, err.node, err.operators)


def test_every_refusal_pickles_with_its_type_kind_node_operators_and_message():
    """Process pools and Dask workers send errors back pickled (issue 20): the caller must get
    the same type with the same fields, e.g. the full list of missing operators."""
    import pickle

    with pytest.raises(graphrt.SessionError) as caught:
        graphrt.Session(_model("NoSuchOp"), plugins=[])
    missing = caught.value
    assert missing.kind == "unsupported_operator" and missing.operators
    errors = [
        missing,
        graphrt.SessionError("kernel_error", "boom", node="n1", operators=["Relu (opset 17)"]),
        graphrt.PluginError("plugin 'x' ties with plugin 'y'"),
    ]
    for err in errors:
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err)
        assert (back.kind, back.node, back.operators) == (err.kind, err.node, err.operators)
        assert str(back) == str(err) and back.args == err.args
