"""Normalizer, Scaler, Binarizer and Imputer (graphrt_ops_ml.preprocess) against onnxruntime
(onnx's reference evaluator for the input types onnxruntime has no kernel for), and
scikit-learn pipelines with missing values converted with skl2onnx.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import graphrt
from graphrt.errors import SessionError
from tests._models import ort_session, tensor
from tests.ml.conftest import REASON

pytest.importorskip("graphrt_ops_ml", reason=REASON)

ML = "ai.onnx.ml"
F, D, I64, I32 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64, TensorProto.INT32
NP_OF = {F: np.float32, D: np.float64, I64: np.int64, I32: np.int32}
TYPES = pytest.mark.parametrize(
    "x_type", [F, D, I64, I32], ids=["float", "double", "int64", "int32"]
)


def model_of(op, attrs, x_type=F, y_type=F):
    node = helper.make_node(op, ["x"], ["y"], domain=ML, **attrs)
    graph = helper.make_graph([node], "ml", [tensor("x", x_type)], [tensor("y", y_type)])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(ML, 1)]
    return helper.make_model(graph, opset_imports=opsets)


def run(model, x):
    return graphrt.Session(model.SerializeToString()).run(None, {"x": x})[0]


def check(model, x, reference=False, rtol=1e-6):
    got = run(model, x)
    if reference:
        want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    else:
        want = ort_session(model).run(None, {"x": x})[0]
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-7, equal_nan=True)
    return got


def data(n=30, f=4, seed=0):
    x = np.random.default_rng(seed).normal(size=(n, f)) * 3
    x[0] = 0  # a zero row: its divisor is zero, the row stays as it is
    x[1] = -np.abs(x[1])  # a row of negatives: MAX divides by a negative
    return x


# -- Normalizer --------------------------------------------------------------------------------
@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
@TYPES
def test_normalizer(norm, x_type):
    x = data().astype(NP_OF[x_type])
    model = model_of("Normalizer", {"norm": norm}, x_type)
    got = check(model, x)
    np.testing.assert_array_equal(got[0], 0)


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_normalizer_one_row(norm):
    check(model_of("Normalizer", {"norm": norm}), data()[3].astype(np.float32))


def test_normalizer_max_of_negatives_flips_signs():
    """The spec's MAX divides by the largest value, signed (scikit-learn's by the largest
    magnitude): onnxruntime does the same."""
    x = np.array([[-1.0, -2.0, -4.0]], np.float32)
    got = check(model_of("Normalizer", {"norm": "MAX"}), x)
    np.testing.assert_array_equal(got, [[1.0, 2.0, 4.0]])


def test_normalizer_refuses_a_bad_norm():
    with pytest.raises(SessionError) as info:
        run(model_of("Normalizer", {"norm": "L3"}), data().astype(np.float32))
    assert info.value.kind == "invalid_model"


# -- Scaler ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "attrs",
    [
        {"offset": [1.5], "scale": [2.0]},
        {"offset": [1.0, -2.0, 0.5, 3.0], "scale": [0.5, 2.0, -1.0, 0.25]},
    ],
    ids=["one", "per-feature"],
)
@TYPES
def test_scaler(attrs, x_type):
    check(model_of("Scaler", attrs, x_type), data().astype(NP_OF[x_type]))


def test_scaler_on_three_dimensions_scales_the_last_axis():
    x = data(24).reshape(2, 3, 4, 4)[0].astype(np.float32)
    check(model_of("Scaler", {"offset": [1.0, 2, 3, 4], "scale": [4.0, 3, 2, 1]}), x)


def test_scaler_without_scale():
    """onnxruntime refuses a Scaler without scale; the spec's defaults: scale 1, offset 0."""
    x = data().astype(np.float32)
    np.testing.assert_array_equal(run(model_of("Scaler", {"offset": [1.0]}), x), x - 1)
    np.testing.assert_array_equal(run(model_of("Scaler", {"scale": [2.0]}), x), x * 2)


def test_scaler_refuses_offset_and_scale_of_different_lengths():
    attrs = {"offset": [1.0], "scale": [0.5, 2.0, -1.0, 0.25]}
    with pytest.raises(SessionError) as info:
        run(model_of("Scaler", attrs), data().astype(np.float32))
    assert info.value.kind == "invalid_model"


def test_scaler_refuses_a_wrong_feature_count():
    with pytest.raises(SessionError) as info:
        run(
            model_of("Scaler", {"offset": [1.0, 2.0], "scale": [1.0, 3.0]}),
            data().astype(np.float32),
        )
    assert info.value.kind == "invalid_input"


# -- Binarizer ---------------------------------------------------------------------------------
@pytest.mark.parametrize("threshold", [0.0, 1.5, -2.0])
def test_binarizer(threshold):
    x = data().astype(np.float32)
    x[2, :2] = threshold  # equal to the threshold: 0
    got = check(model_of("Binarizer", {"threshold": threshold}), x)
    assert got[2, 0] == 0


@pytest.mark.parametrize("x_type", [D, I64, I32], ids=["double", "int64", "int32"])
def test_binarizer_other_types(x_type):
    """onnxruntime has a float kernel only: onnx's reference evaluator is the oracle."""
    x = data().astype(NP_OF[x_type])
    check(model_of("Binarizer", {"threshold": 0.5}, x_type, x_type), x, reference=True)


def test_binarizer_nan_is_not_above_the_threshold():
    """onnxruntime fails on NaN; the spec (and onnx's reference) give 0."""
    x = np.array([np.nan, 1.0, -1.0], np.float32)
    check(model_of("Binarizer", {"threshold": 0.0}), x, reference=True)


# -- Imputer -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "attrs",
    [
        {"imputed_value_floats": [5.0], "replaced_value_float": float("nan")},
        {"imputed_value_floats": [5.0, 6.0, 7.0, 8.0], "replaced_value_float": float("nan")},
        {"imputed_value_floats": [5.0, 6.0, 7.0, 8.0]},  # replaces 0 (the default)
        {"imputed_value_floats": [-1.0], "replaced_value_float": 2.0},
    ],
    ids=["nan", "nan-per-feature", "zero", "two"],
)
def test_imputer_floats(attrs):
    x = np.round(data()).astype(np.float32)
    x[np.random.default_rng(1).uniform(size=x.shape) < 0.2] = np.nan
    got = check(model_of("Imputer", attrs), x)
    if np.isnan(attrs.get("replaced_value_float", 0.0)):
        assert not np.isnan(got).any()


@pytest.mark.parametrize("values", [[9], [9, 8, 7, 6]])
def test_imputer_int64(values):
    x = np.round(data()).astype(np.int64)
    attrs = {"imputed_value_int64s": values, "replaced_value_int64": -1}
    got = check(model_of("Imputer", attrs, I64, I64), x)
    assert (x == -1).any() and not (got == -1).any()


@pytest.mark.parametrize("x_type", [D, I32], ids=["double", "int32"])
def test_imputer_other_types(x_type):
    """onnxruntime has float and int64 kernels only: onnx's reference is the oracle."""
    x = np.round(data()).astype(NP_OF[x_type])
    if x_type == D:
        x[3, 1] = np.nan
        attrs = {"imputed_value_floats": [0.5], "replaced_value_float": float("nan")}
    else:
        attrs = {"imputed_value_int64s": [4, 3, 2, 1], "replaced_value_int64": 0}
    check(model_of("Imputer", attrs, x_type, x_type), x, reference=True)


def test_imputer_refuses_values_of_the_wrong_kind():
    attrs = {"imputed_value_int64s": [1], "replaced_value_int64": 0}
    with pytest.raises(SessionError) as info:
        run(model_of("Imputer", attrs), data().astype(np.float32))
    assert info.value.kind == "invalid_input"


@pytest.mark.parametrize(
    "op, attrs",
    [
        ("Normalizer", {"norm": "L2"}),
        ("Normalizer", {"norm": "MAX"}),
        ("Scaler", {"offset": [1.0], "scale": [2.0]}),
        ("Binarizer", {"threshold": 1.0}),
        ("Imputer", {"imputed_value_floats": [1.0], "replaced_value_float": float("nan")}),
    ],
    ids=["normalizer-l2", "normalizer-max", "scaler", "binarizer", "imputer"],
)
def test_no_rows(op, attrs):
    check(model_of(op, attrs), np.zeros((0, 3), np.float32))


# -- scikit-learn pipelines with missing values ------------------------------------------------
def missing(seed=0):
    from sklearn.datasets import make_classification

    x, y = make_classification(
        n_samples=600, n_features=8, n_informative=5, n_classes=3, random_state=seed
    )
    x = x.astype(np.float32)
    x[np.random.default_rng(seed).uniform(size=x.shape) < 0.1] = np.nan
    return x, y


def check_pipeline(pipeline, x, options=None):
    from skl2onnx import to_onnx

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        onx = to_onnx(pipeline, x[:1], options=options, target_opset={"": 17, ML: 1})
    name = onx.graph.input[0].name
    session = graphrt.Session(onx.SerializeToString())
    oracle = ort_session(onx)
    for batch in (1, 500):
        got = session.run(None, {name: x[:batch]})
        want = oracle.run(None, {name: x[:batch]})
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            if w.dtype.kind == "f":
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
            else:
                np.testing.assert_array_equal(g, w)
    return {n.op_type for n in onx.graph.node}


def test_pipeline_imputer_normalizer_binarizer_classifier():
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import Binarizer, Normalizer

    x, y = missing()
    pipeline = make_pipeline(
        SimpleImputer(), Normalizer(), Binarizer(threshold=0.1), LogisticRegression()
    ).fit(x, y)
    ops = check_pipeline(pipeline, x, {LogisticRegression: {"zipmap": False}})
    assert {"Imputer", "Normalizer", "Binarizer", "LinearClassifier"} <= ops


@pytest.mark.parametrize("norm", ["l1", "l2"])
def test_pipeline_imputer_normalizer_scaler(norm):
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import Normalizer, StandardScaler

    x, _ = missing(1)
    pipeline = make_pipeline(
        SimpleImputer(strategy="median"), Normalizer(norm=norm), StandardScaler()
    ).fit(x)
    ops = check_pipeline(pipeline, x)
    assert {"Imputer", "Normalizer", "Scaler"} <= ops
