"""check_shapes=True: seed 002's run-time meaning of shape annotations.

The oracle for which runs are accepted is ``onnx.reference.ReferenceEvaluator`` with
``check_shape_annotations=True``; the messages are fixed here word for word.
"""

from __future__ import annotations

import importlib.util
import re

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import graphrt
from graphrt.cli import main
from graphrt.plugins import loaded_plugins
from tests._models import tensor

needs_controlflow = pytest.mark.skipif(
    "ops-controlflow" not in loaded_plugins(),
    reason="graphrt-ops-controlflow is not installed (tox env no-controlflow)",
)
#: The oracle of the property tests: ReferenceEvaluator(check_shape_annotations=True), whose
#: checker module onnx ships from 1.23 on.
needs_shape_annotation_checker = pytest.mark.skipif(
    importlib.util.find_spec("onnx.reference.shape_annotation_checker") is None,
    reason=f"onnx {onnx.__version__} has no onnx.reference.shape_annotation_checker "
    "(onnx >= 1.23), the oracle of this test",
)


def make_model(nodes, inputs, outputs, value_info=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, value_info=list(value_info))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def chain(x_dims, v_dims, y_dims) -> onnx.ModelProto:
    """x -> Relu -> v (value_info) -> Transpose -> y; dims None means no shape at all."""
    return make_model(
        [
            helper.make_node("Relu", ["x"], ["v"]),
            helper.make_node("Transpose", ["v"], ["y"], perm=[1, 0]),
        ],
        [tensor("x", shape=x_dims)],
        [tensor("y", shape=y_dims)],
        value_info=[tensor("v", shape=v_dims)],
    )


def _error(model: onnx.ModelProto, x: np.ndarray, **options) -> graphrt.SessionError:
    sess = graphrt.Session(model, check_shapes=True, **options)
    with pytest.raises(graphrt.SessionError) as info:
        sess.run(None, {"x": x})
    return info.value


X23 = np.ones((2, 3), np.float32)


# -- each kind of violation, word for word -----------------------------------------------------


def test_graph_input_symbol_bound_twice_differently_is_invalid_input():
    err = _error(chain(["N", "N"], None, None), X23)
    assert err.kind == "invalid_input"
    assert str(err) == (
        "[invalid_input] check_shapes: 'x' axis 1 is 3 but its annotation [N, N] needs N = 2, "
        "bound by 'x' axis 0"
    )


def test_intermediate_fixed_extent_is_invalid_model():
    err = _error(chain(["N", "M"], ["N", 4], None), X23)
    assert err.kind == "invalid_model"
    assert str(err) == (
        "[invalid_model] check_shapes: 'v' axis 1 is 3 but its annotation [N, 4] requires 4"
    )


def test_intermediate_rank_mismatch():
    err = _error(chain(["N", "M"], ["N", "M", 1], None), X23)
    assert str(err) == (
        "[invalid_model] check_shapes: 'v' has rank 2 (shape [2, 3]) but its annotation "
        "[N, M, 1] has rank 3"
    )


def test_output_symbol_bound_by_the_input_names_the_binder():
    err = _error(chain(["N", "M"], None, ["N", "M"]), X23)
    assert str(err) == (
        "[invalid_model] check_shapes: 'y' axis 0 is 3 but its annotation [N, M] needs N = 2, "
        "bound by 'x' axis 0"
    )


def test_anonymous_dims_and_missing_shapes_assert_nothing():
    (y,) = graphrt.Session(chain([None, None], None, [None, "K"]), check_shapes=True).run(
        None, {"x": X23}
    )
    assert y.shape == (3, 2)


def test_symbols_bind_per_run_not_per_session():
    sess = graphrt.Session(chain(["N", "M"], ["N", "M"], ["M", "N"]), check_shapes=True)
    for shape in [(2, 3), (5, 1), (4, 4)]:
        (y,) = sess.run(None, {"x": np.ones(shape, np.float32)})
        assert y.shape == shape[::-1]


def test_always_on_input_checks_without_the_option():
    """Rank and fixed extents of graph inputs are checked before a plan is made, always."""
    sess = graphrt.Session(chain(["N", 3], None, None))
    with pytest.raises(graphrt.SessionError) as info:
        sess.run(None, {"x": np.ones((2, 4), np.float32)})
    assert info.value.kind == "invalid_input"
    assert str(info.value) == (
        "[invalid_input] input 'x' axis 1 must be 3 (shape [N, 3]), got shape [2, 4]"
    )


def test_off_by_default_and_planned_once_when_on():
    model = chain(["N", "M"], ["N", 4], None)  # v's annotation is wrong for every input
    off = graphrt.Session(model)
    off.run(None, {"x": X23})
    assert all(p.shape_checks is None for p in off.cached_plans)

    on = graphrt.Session(model, check_shapes=True)
    with pytest.raises(graphrt.SessionError):
        on.run(None, {"x": X23})
    (plan,) = on.cached_plans
    checks = plan.shape_checks
    assert [c.name for c in checks.inputs] == ["x"]
    assert [c.name for group in checks.after_step.values() for c in group] == ["v"]
    with pytest.raises(graphrt.SessionError):
        on.run(None, {"x": X23})
    assert on.cached_plans[0].shape_checks is checks  # not re-derived per run


def test_get_inputs_and_outputs_report_symbols():
    sess = graphrt.Session(chain(["batch", 3], None, [3, "batch"]))
    assert sess.get_inputs()[0].shape == ["batch", 3]
    assert sess.get_outputs()[0].shape == [3, "batch"]


def test_cli_run_check_shapes(tmp_path, capsys):
    path = str(tmp_path / "m.onnx")
    onnx.save(chain(["N", "M"], ["N", 4], None), path)
    assert main(["run", path, "--dim", "N=2", "--dim", "M=3"]) == 0
    assert "(declared [N, M], random, seed 0)" in capsys.readouterr().out
    main(["check", path])
    out = capsys.readouterr().out
    assert "inputs: x tensor(float) [N, M]\noutputs: y tensor(float)\n" in out
    assert main(["run", path, "--dim", "N=2", "--dim", "M=3", "--check-shapes"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (
        "graphrt: error: [invalid_model] check_shapes: 'v' axis 1 is 3 but its annotation "
        "[N, 4] requires 4"
    )


# -- inside bodies: one map per run -------------------------------------------------------------


def _t(name, elem, dims):
    """A value_info; ``dims`` None means a tensor type without any shape."""
    return helper.make_tensor_value_info(name, elem, dims)


F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def loop_graph(ann: dict) -> onnx.ModelProto:
    """x -> Relu v1 -> Transpose v2 -> Concat v3; Loop over v1 (body t = a+a, w = t*a, ao = relu w).

    The trip count M is a run-time input, so nothing is folded at creation.

    ``ann`` maps each value name to its annotation (a dims list, or None for no shape); a value
    missing from ``ann`` that is not a graph or body input/output gets no value_info at all.
    """

    def vi(name, elem=F):
        return _t(name, elem, ann.get(name))

    body_vi = [vi(n) for n in ("t", "w") if n in ann]
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["c"], ["co"]),
            helper.make_node("Add", ["a", "a"], ["t"]),
            helper.make_node("Mul", ["t", "a"], ["w"]),
            helper.make_node("Relu", ["w"], ["ao"]),
        ],
        "body",
        [vi("i", I64), vi("c", B), vi("a")],
        [vi("co", B), vi("ao")],
        value_info=body_vi,
    )
    top_vi = [vi(n) for n in ("v1", "v2") if n in ann]
    return make_model(
        [
            helper.make_node("Relu", ["x"], ["v1"]),
            helper.make_node("Transpose", ["v1"], ["v2"], perm=[1, 0]),
            helper.make_node("Concat", ["v2", "v2"], ["v3"], axis=0),
            helper.make_node("Loop", ["M", "cond", "v1"], ["y"], body=body),
        ],
        [vi("M", I64), vi("cond", B), vi("x")],
        [vi("v3"), vi("y")],
        value_info=top_vi,
    )


def true_shapes(a: int, b: int, m: int) -> dict[str, tuple[int, ...]]:
    return {
        "M": (), "cond": (), "x": (a, b), "v1": (a, b), "v2": (b, a), "v3": (2 * b, a),
        "y": (a, b), "i": (), "c": (), "a": (a, b), "t": (a, b), "w": (a, b),
        "co": (), "ao": (a, b),
    }  # fmt: skip


# value_info entries that may be absent.  No scan output: the reference evaluator concatenates
# Loop scan outputs instead of stacking them (onnxruntime and graphrt give [M, ...]), so their
# shapes would differ for reasons unrelated to annotations.
OPTIONAL_ANNOTATION = {"v1", "v2", "t", "w"}


@st.composite
def annotated_cases(draw):
    """Annotations mostly consistent with the true shapes, with faults at a per-case rate.

    Consistent symbols are named after their extent (``D3``); the faults are a wrong fixed
    extent, a free symbol (``A``/``B``, consistent or not depending on where else it is used)
    and a wrong rank.
    """
    a, b, m = draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(st.integers(1, 3))
    fault_percent = draw(st.sampled_from([0, 3, 10, 30]))

    def fault() -> bool:
        return draw(st.integers(0, 99)) < fault_percent

    ann: dict = {}
    for name, shape in true_shapes(a, b, m).items():
        if draw(st.integers(0, 9)) == 0:  # no shape at all, or no value_info entry
            if name not in OPTIONAL_ANNOTATION or draw(st.booleans()):
                ann[name] = None
            continue
        dims: list = []
        for extent in shape:
            if fault():
                dims.append(draw(st.sampled_from([extent + 1, "A", "B"])))
            else:
                dims.append(draw(st.sampled_from([extent, f"D{extent}", None])))
        if fault():
            dims = dims[:-1] if dims and draw(st.booleans()) else [*dims, 1]
        ann[name] = dims
    return ann, (a, b, m)


def _rejected_value(message: str) -> str:
    found = re.search(r"check_shapes: '([^']+)'|input '([^']+)'", message)
    assert found, message
    return found.group(1) or found.group(2)


@needs_controlflow
@needs_shape_annotation_checker
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(annotated_cases())
def test_accepts_and_rejects_like_the_reference_evaluator(case):
    from onnx.reference import ReferenceEvaluator
    from onnx.reference.shape_annotation_checker import ShapeAnnotationError

    ann, (a, b, m) = case
    model = loop_graph(ann)
    rng = np.random.default_rng(0)
    feed = {
        "M": np.array(m, np.int64),
        "cond": np.array(True),
        "x": rng.standard_normal((a, b)).astype(np.float32),
    }
    try:
        want = ReferenceEvaluator(model, check_shape_annotations=True).run(None, feed)
        ref_rejected = None
    except ShapeAnnotationError as exc:
        ref_rejected = re.match(r"Value '([^']+)'", str(exc)).group(1)

    try:
        got = graphrt.Session(model, check_shapes=True).run(None, feed)
        ours_rejected = None
    except graphrt.SessionError as exc:
        ours_rejected = _rejected_value(str(exc))
        graph_input = ours_rejected in ("M", "cond", "x")
        assert exc.kind == ("invalid_input" if graph_input else "invalid_model")

    event(f"rejected on {ref_rejected}" if ref_rejected else "accepted")
    assert ours_rejected == ref_rejected
    if ref_rejected is None:
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6)


@needs_controlflow
def test_loop_body_annotation_shares_the_run_binding_map():
    ann = {"x": ["N", "M"], "a": ["N", "M"], "w": ["M", "N"]}
    model = loop_graph(ann)
    feed = {"M": np.array(2, np.int64), "cond": np.array(True), "x": X23}
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(model, check_shapes=True).run(None, feed)
    assert str(info.value) == (
        "[invalid_model] check_shapes: 'w' axis 0 is 2 but its annotation [M, N] needs M = 3, "
        "bound by 'x' axis 1"
    )
    square = {"M": feed["M"], "cond": feed["cond"], "x": np.ones((3, 3), np.float32)}
    (v3, y) = graphrt.Session(model, check_shapes=True).run(None, square)
    assert y.shape == (3, 3) and v3.shape == (6, 3)


def _function_model() -> onnx.ModelProto:
    """x -> Double (a model-local function, value_info t: [M, N]) -> y, x and y [N, M]."""
    fn = helper.make_function(
        "local",
        "Double",
        ["a"],
        ["b"],
        [helper.make_node("Add", ["a", "a"], ["t"]), helper.make_node("Relu", ["t"], ["b"])],
        [helper.make_opsetid("", 17)],
    )
    fn.value_info.append(tensor("t", shape=["M", "N"]))  # transposed symbols: only fits squares
    graph = helper.make_graph(
        [helper.make_node("Double", ["x"], ["y"], domain="local", name="call")],
        "g",
        [tensor("x", shape=["N", "M"])],
        [tensor("y", shape=["N", "M"])],
    )
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
        functions=[fn],
    )


def test_function_value_info_shares_the_run_binding_map():
    """A model-local function's value_info is checked at each call, against the run's map."""
    model = _function_model()
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(model, check_shapes=True).run(None, {"x": X23})
    assert str(info.value) == (
        "[invalid_model] check_shapes: 'call__call0__t' axis 0 is 2 but its annotation [M, N] "
        "needs M = 3, bound by 'x' axis 1"
    )
    (y,) = graphrt.Session(model, check_shapes=True).run(None, {"x": np.ones((3, 3), np.float32)})
    np.testing.assert_array_equal(y, np.full((3, 3), 2, np.float32))


@needs_shape_annotation_checker
def test_function_value_info_is_rejected_like_the_reference_evaluator():
    from onnx.reference import ReferenceEvaluator
    from onnx.reference.shape_annotation_checker import ShapeAnnotationError

    with pytest.raises(ShapeAnnotationError, match="Value 't', axis 0"):
        ReferenceEvaluator(_function_model(), check_shape_annotations=True).run(None, {"x": X23})
    (y,) = ReferenceEvaluator(_function_model(), check_shape_annotations=True).run(
        None, {"x": np.ones((3, 3), np.float32)}
    )
    np.testing.assert_array_equal(y, np.full((3, 3), 2, np.float32))
