"""LinearClassifier, LinearRegressor, SVMClassifier and SVMRegressor (graphrt_ops_ml.linear,
.svm) against onnxruntime: hand-built nodes for each attribute and post_transform, and
scikit-learn models converted with skl2onnx (with KNN, KMeans and PCA, which convert to
standard operators), on batches of 1 and 500 rows.

Where onnxruntime's output is not defined (the binary LinearClassifier under PROBIT past one
row, the column onnxruntime leaves unwritten), only the defined part is compared; the module
docstrings of linear.py and svm.py say what graphrt writes there.
"""

from __future__ import annotations

import warnings
import zlib

import numpy as np
import pytest
from onnx import TensorProto, helper

import graphrt
from graphrt.errors import SessionError
from tests._models import ort_session, tensor
from tests.ml.conftest import REASON

pytest.importorskip("graphrt_ops_ml", reason=REASON)

ML = "ai.onnx.ml"
F, D, I64, I32, STR = (
    TensorProto.FLOAT,
    TensorProto.DOUBLE,
    TensorProto.INT64,
    TensorProto.INT32,
    TensorProto.STRING,
)
TRANSFORMS = ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"]
NP_OF = {F: np.float32, D: np.float64, I64: np.int64, I32: np.int32}


def model_of(op, attrs, x_type=F, outputs=(("y", I64), ("z", F))):
    node = helper.make_node(op, ["x"], [name for name, _ in outputs], domain=ML, **attrs)
    graph = helper.make_graph(
        [node], "ml", [tensor("x", x_type)], [tensor(name, t) for name, t in outputs]
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(ML, 1)]
    return helper.make_model(graph, opset_imports=opsets)


def both(model, x, oracle_x=None):
    """(graphrt's outputs, onnxruntime's) for X (onnxruntime given oracle_x when set)."""
    got = graphrt.Session(model.SerializeToString()).run(None, {"x": x})
    want = ort_session(model).run(None, {"x": x if oracle_x is None else oracle_x})
    return got, want


def assert_close(got, want, rtol=1e-5, atol=1e-6):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.dtype, g.shape, w.dtype, w.shape)
        if w.dtype.kind in "iuO":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True)


def rows(n=40, f=3, seed=0):
    return np.random.default_rng(seed).normal(size=(n, f)).astype(np.float32)


def labels(k, strings):
    if strings:
        return {"classlabels_strings": [f"class{i}" for i in range(k)]}, STR
    return {"classlabels_ints": list(range(7, 7 + k))}, I64


# -- LinearClassifier --------------------------------------------------------------------------
@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("k", [2, 3, 5])
@pytest.mark.parametrize("strings", [False, True], ids=["ints", "strings"])
@pytest.mark.parametrize("multi_class", [0, 1])
def test_linear_classifier(transform, k, strings, multi_class):
    rng = np.random.default_rng(k)
    names, label_type = labels(k, strings)
    attrs = dict(
        coefficients=rng.normal(size=k * 3).tolist(),
        intercepts=rng.normal(size=k).tolist(),
        post_transform=transform,
        multi_class=multi_class,
        **names,
    )
    model = model_of("LinearClassifier", attrs, outputs=(("y", label_type), ("z", F)))
    x = rows()
    if transform == "PROBIT":  # scores in (0, 1), where PROBIT is defined
        x = np.abs(x) / 10
    assert_close(*both(model, x))
    assert_close(*both(model, x[:1]))


@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("strings", [False, True], ids=["ints", "strings"])
def test_linear_classifier_binary_one_row(transform, strings):
    """One coefficient row and two labels: the label is the sign of the score; Z as
    onnxruntime expands it (``[1 - s, s]``, LOGISTIC ``[1 - logistic(s), logistic(s)]``)."""
    names, label_type = labels(2, strings)
    attrs = dict(coefficients=[0.5, -0.25, 1.0], intercepts=[0.1], post_transform=transform)
    model = model_of(
        "LinearClassifier", dict(attrs, **names), outputs=(("y", label_type), ("z", F))
    )
    x = rows(100)
    x[0] = 0  # a score of exactly 0.1; and one of exactly 0 below: the first class
    x[1] = [0.2, 0, -0.2]
    got, want = both(model, x)
    assert_close(got, want)
    assert got[0][1] == (names.get("classlabels_strings") or names.get("classlabels_ints"))[0]


def test_linear_classifier_binary_probit_one_row():
    """onnxruntime defines only column 0 (probit(s)) of one row; graphrt's column 1 is s."""
    attrs = dict(
        coefficients=[0.5, -0.25],
        intercepts=[0.1],
        post_transform="PROBIT",
        classlabels_ints=[3, 9],
    )
    model = model_of("LinearClassifier", attrs)
    for x in ([[0.5, 0.2]], [[0.1, -0.3]], [[-0.1, 0.1]]):
        x = np.array(x, np.float32)
        got, want = both(model, x)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1][:, 0], want[1][:, 0], rtol=1e-6, equal_nan=True)
        np.testing.assert_allclose(got[1][:, 1], x @ [0.5, -0.25] + 0.1, rtol=1e-6)


@pytest.mark.parametrize("x_type", [D, I64, I32], ids=["double", "int64", "int32"])
def test_linear_classifier_input_types(x_type):
    attrs = dict(
        coefficients=[0.5, -0.25, 1, 2, 0, -1],
        intercepts=[0.1, 0.2, 0.3],
        classlabels_ints=[1, 2, 3],
        post_transform="SOFTMAX",
    )
    model = model_of("LinearClassifier", attrs, x_type)
    x = (rows(30, 2) * 4).astype(NP_OF[x_type])
    assert_close(*both(model, x))


def test_linear_classifier_one_dimensional_input():
    attrs = dict(coefficients=[0.5, -0.25, 1, 2], intercepts=[0.1, 0.2], classlabels_ints=[1, 2])
    got, want = both(model_of("LinearClassifier", attrs), np.array([0.3, -0.7], np.float32))
    assert_close(got, want)


def test_linear_classifier_softmax_zero_keeps_zero_scores_at_zero():
    """A zero score (all-zero coefficients, no intercept) gets no probability; a row of zero
    scores divides 0 by 0, in onnxruntime too (NaN)."""
    attrs = dict(
        coefficients=[1.0, 0, 0, 0, 0, 1],
        intercepts=[0.0, 0.0, 0.0],
        classlabels_ints=[1, 2, 3],
        post_transform="SOFTMAX_ZERO",
    )
    x = np.array([[1.0, 2.0], [0.0, 0.0], [-1.0, 3.0]], np.float32)
    got, want = both(model_of("LinearClassifier", attrs), x)
    assert_close(got, want)
    assert np.all(got[1][[0, 2], 1] == 0) and np.isnan(got[1][1]).all()


def test_linear_classifier_without_intercepts():
    """onnxruntime requires intercepts, the spec does not (and onnx's reference adds NaN):
    onnxruntime with zero intercepts is the oracle."""
    attrs = dict(coefficients=[0.5, -0.25, 1, 2, 0, -1], classlabels_ints=[1, 2, 3])
    x = rows(30, 2)
    got = graphrt.Session(model_of("LinearClassifier", attrs).SerializeToString()).run(
        None, {"x": x}
    )
    zeros = model_of("LinearClassifier", dict(attrs, intercepts=[0.0, 0.0, 0.0]))
    assert_close(got, ort_session(zeros).run(None, {"x": x}))


# -- LinearRegressor ---------------------------------------------------------------------------
@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("targets", [1, 2, 4])
@pytest.mark.parametrize("intercepts", [True, False])
def test_linear_regressor(transform, targets, intercepts):
    rng = np.random.default_rng(targets)
    attrs = dict(
        coefficients=(rng.uniform(size=3 * targets) / 4).tolist(),
        targets=targets,
        post_transform=transform,
    )
    if intercepts:
        attrs["intercepts"] = (rng.uniform(size=targets) / 4).tolist()
    model = model_of("LinearRegressor", attrs, outputs=(("y", F),))
    x = np.abs(rows(60))  # scores in (0, 1) mostly: PROBIT defined
    if transform == "PROBIT":  # its rounding is amplified near 0.5: exact scores
        x = np.round(x * 8) / 8
        attrs["coefficients"] = [0.125] * (3 * targets)
        model = model_of("LinearRegressor", attrs, outputs=(("y", F),))
    assert_close(*both(model, x))
    assert_close(*both(model, x[:1]))


@pytest.mark.parametrize("x_type", [D, I64, I32], ids=["double", "int64", "int32"])
def test_linear_regressor_input_types(x_type):
    """onnxruntime has only a float kernel: its result on X as float32 is the oracle."""
    attrs = dict(coefficients=[0.5, -0.25, 1, 2], intercepts=[0.1, -3.0], targets=2)
    model = model_of("LinearRegressor", attrs, x_type, outputs=(("y", F),))
    x = (rows(30, 2) * 4).astype(NP_OF[x_type])
    float_model = model_of("LinearRegressor", attrs, F, outputs=(("y", F),))
    got = graphrt.Session(model.SerializeToString()).run(None, {"x": x})
    want = ort_session(float_model).run(None, {"x": x.astype(np.float32)})
    assert_close(got, want)


# -- SVMClassifier ----------------------------------------------------------------------------
def svc_attrs(kernel, k, prob, transform, seed, features=3, strings=False):
    rng = np.random.default_rng(seed)
    per_class = rng.integers(1, 5, size=k).tolist()
    count, pairs = sum(per_class), k * (k - 1) // 2
    names, _ = labels(k, strings)
    attrs = dict(
        kernel_type=kernel,
        kernel_params=[0.3, 0.5, 2.0 if kernel != "POLY" else 3.0],
        support_vectors=rng.normal(size=count * features).tolist(),
        vectors_per_class=per_class,
        coefficients=rng.normal(size=(k - 1) * count).tolist(),
        rho=rng.normal(size=pairs).tolist(),
        post_transform=transform,
        **names,
    )
    if prob:
        attrs["prob_a"] = (-rng.uniform(0.5, 3, size=pairs)).tolist()
        attrs["prob_b"] = rng.normal(size=pairs).tolist()
    return attrs


# graphrt follows onnxruntime's float32 order of operations (svm.py's docstring)
SVM_TOLERANCE = {"rtol": 1e-5, "atol": 1e-7}


def svc_tolerance(kernel, transform):
    """The one exception: onnxruntime's SIGMOID kernel is MLAS's tanh, a rational approximation
    a unit or two off the rounded tanh graphrt takes (its constants are not copied), and
    PROBIT's Winitzki inverse cancels near 0.5, which turns that into ~5e-6."""
    if kernel == "SIGMOID" and transform == "PROBIT":
        return {"rtol": 1e-5, "atol": 1e-5}
    return SVM_TOLERANCE


@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "RBF", "SIGMOID"])
@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("prob", [False, True], ids=["decisions", "probabilities"])
@pytest.mark.parametrize("transform", TRANSFORMS)
def test_svm_classifier(kernel, k, prob, transform):
    seed = zlib.crc32(f"{kernel} {k} {prob} {transform}".encode()) % 1000
    attrs = svc_attrs(kernel, k, prob, transform, seed)
    model = model_of("SVMClassifier", attrs)
    x = rows(80, seed=seed)
    got, want = both(model, x)
    if k == 2 and not prob and transform == "PROBIT":  # onnxruntime leaves column 1 unwritten
        got[1], want[1] = got[1][:, :1], want[1][:, :1]
    assert_close(got, want, **svc_tolerance(kernel, transform))
    got, want = both(model, x[:1])
    if k == 2 and not prob and transform == "PROBIT":
        got[1], want[1] = got[1][:, :1], want[1][:, :1]
    assert_close(got, want, **svc_tolerance(kernel, transform))


@pytest.mark.parametrize("prob", [False, True], ids=["decisions", "probabilities"])
def test_svm_classifier_string_labels(prob):
    attrs = svc_attrs("RBF", 3, prob, "NONE", 5, strings=True)
    model = model_of("SVMClassifier", attrs, outputs=(("y", STR), ("z", F)))
    assert_close(*both(model, rows(50)), **SVM_TOLERANCE)


@pytest.mark.parametrize("x_type", [D, I64, I32], ids=["double", "int64", "int32"])
def test_svm_classifier_input_types(x_type):
    model = model_of("SVMClassifier", svc_attrs("RBF", 3, True, "NONE", 3), x_type)
    x = (rows(30) * 3).astype(NP_OF[x_type])
    assert_close(*both(model, x), **SVM_TOLERANCE)


@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("transform", TRANSFORMS)
def test_svm_classifier_linear_without_support_vectors(k, transform):
    """liblinear's layout: one coefficient row per class, rho[0] added to every score; two
    classes: the second when the best score is > 0."""
    rng = np.random.default_rng(k)
    attrs = dict(
        kernel_type="LINEAR",
        kernel_params=[0.0, 0.0, 0.0],
        coefficients=rng.normal(size=k * 3).tolist(),
        rho=rng.normal(size=k).tolist(),
        classlabels_ints=list(range(k)),
        post_transform=transform,
    )
    x = rows(100)
    if transform == "PROBIT":
        x = np.round(x * 8) / 8
        attrs["coefficients"] = (np.round(rng.normal(size=k * 3) * 8) / 64).tolist()
        attrs["rho"] = [0.5]
    assert_close(*both(model_of("SVMClassifier", attrs), x), **SVM_TOLERANCE)


# -- SVMRegressor ------------------------------------------------------------------------------
@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "RBF", "SIGMOID"])
@pytest.mark.parametrize("one_class", [0, 1])
@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "PROBIT"])
def test_svm_regressor(kernel, one_class, transform):
    """post_transform changes nothing (onnxruntime ignores it)."""
    rng = np.random.default_rng(len(kernel) + one_class)
    attrs = dict(
        kernel_type=kernel,
        kernel_params=[0.3, 0.5, 2.0],
        support_vectors=rng.normal(size=5 * 3).tolist(),
        n_supports=5,
        coefficients=rng.normal(size=5).tolist(),
        rho=[0.2],
        one_class=one_class,
        post_transform=transform,
    )
    model = model_of("SVMRegressor", attrs, outputs=(("y", F),))
    x = rows(70)
    assert_close(*both(model, x), **SVM_TOLERANCE)
    assert_close(*both(model, x[:1]), **SVM_TOLERANCE)


def test_svm_regressor_linear_without_support_vectors():
    attrs = dict(
        kernel_type="LINEAR",
        kernel_params=[0.0, 0.0, 0.0],
        coefficients=[0.5, -1.0, 2.0],
        rho=[0.3],
        n_supports=0,
    )
    model = model_of("SVMRegressor", attrs, outputs=(("y", F),))
    assert_close(*both(model, rows(20)), **SVM_TOLERANCE)


@pytest.mark.parametrize("x_type", [D, I64], ids=["double", "int64"])
def test_svm_regressor_input_types(x_type):
    attrs = dict(
        kernel_type="RBF",
        kernel_params=[0.1, 0.0, 0.0],
        support_vectors=[1.0, 0.0, 0.0, 1.0, 1.0, 1.0],
        n_supports=3,
        coefficients=[0.5, -1.0, 2.0],
        rho=[0.3],
    )
    x = (rows(20, 2) * 3).astype(NP_OF[x_type])
    model = model_of("SVMRegressor", attrs, x_type, outputs=(("y", F),))
    float_model = model_of("SVMRegressor", attrs, F, outputs=(("y", F),))
    got = graphrt.Session(model.SerializeToString()).run(None, {"x": x})
    want = ort_session(float_model).run(None, {"x": x.astype(np.float32)})
    assert_close(got, want, **SVM_TOLERANCE)


@pytest.mark.parametrize(
    "op, attrs",
    [
        (
            "LinearClassifier",
            dict(coefficients=[0.5, -0.25], intercepts=[0.1], classlabels_ints=[1, 2]),
        ),
        ("LinearRegressor", dict(coefficients=[0.5, -0.25, 1, 1], targets=2)),
        ("SVMClassifier", svc_attrs("RBF", 3, True, "NONE", 1, features=2)),
        ("SVMClassifier", svc_attrs("POLY", 2, False, "NONE", 1, features=2)),
        (
            "SVMRegressor",
            dict(
                kernel_type="RBF",
                kernel_params=[0.3, 0.0, 0.0],
                support_vectors=[1.0, 0, 0, 1],
                n_supports=2,
                coefficients=[0.5, -0.3],
                rho=[0.1],
            ),
        ),
    ],
    ids=["linear-classifier", "linear-regressor", "svc-probabilities", "svc", "svr"],
)
def test_no_rows(op, attrs):
    outputs = (("y", F),) if op.endswith("Regressor") else (("y", I64), ("z", F))
    assert_close(*both(model_of(op, attrs, outputs=outputs), np.zeros((0, 2), np.float32)))


# -- refused models and inputs -----------------------------------------------------------------
@pytest.mark.parametrize(
    "op, attrs, outputs",
    [
        (
            "LinearClassifier",
            dict(
                coefficients=[1.0, 2.0],
                intercepts=[0.0],
                classlabels_ints=[1, 2],
                post_transform="X",
            ),
            (("y", I64), ("z", F)),
        ),
        (
            "LinearClassifier",
            dict(coefficients=[1.0, 2.0], intercepts=[0.0]),
            (("y", I64), ("z", F)),
        ),
        ("LinearRegressor", dict(coefficients=[1.0, 2.0, 3.0], targets=2), (("y", F),)),
        (
            "SVMClassifier",
            dict(
                kernel_type="CUBIC",
                coefficients=[1.0, 2.0],
                rho=[0.0],
                classlabels_ints=[1, 2],
            ),
            (("y", I64), ("z", F)),
        ),
        (
            "SVMClassifier",
            dict(
                support_vectors=[1.0, 2.0],
                vectors_per_class=[1, 1],
                coefficients=[1.0, 2.0],
                rho=[0.0, 1.0],
                classlabels_ints=[1, 2],
            ),
            (("y", I64), ("z", F)),
        ),
    ],
    ids=["post_transform", "no labels", "coefficients", "kernel", "rho"],
)
def test_bad_attributes_are_refused(op, attrs, outputs):
    model = model_of(op, attrs, outputs=outputs)
    with pytest.raises(SessionError) as info:
        graphrt.Session(model.SerializeToString()).run(None, {"x": rows(2, 1)})
    assert info.value.kind == "invalid_model"


def test_wrong_feature_count_is_an_invalid_input():
    attrs = dict(
        coefficients=[1.0, 2.0, 3.0], intercepts=[0.0, 1.0, 2.0], classlabels_ints=[1, 2, 3]
    )
    session = graphrt.Session(model_of("LinearClassifier", attrs).SerializeToString())
    with pytest.raises(SessionError) as info:
        session.run(None, {"x": rows(2, 2)})
    assert info.value.kind == "invalid_input"


# -- scikit-learn models -----------------------------------------------------------------------
def classification(classes, seed=0):
    from sklearn.datasets import make_classification

    x, y = make_classification(
        n_samples=600, n_features=8, n_informative=5, n_classes=classes, random_state=seed
    )
    return x.astype(np.float32), y


def converted(model, x, options=None):
    from skl2onnx import to_onnx

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_onnx(model, x[:1], options=options, target_opset={"": 17, ML: 1})


def check_sklearn(onx, x, rtol=1e-5, atol=1e-6):
    """graphrt against onnxruntime on 1 and 500 rows: labels exactly, values to rtol (atol
    scaled to the outputs' magnitude)."""
    name = onx.graph.input[0].name
    session = graphrt.Session(onx.SerializeToString())
    oracle = ort_session(onx)
    for batch in (1, 500):
        got = session.run(None, {name: x[:batch]})
        want = oracle.run(None, {name: x[:batch]})
        scale = max(float(np.abs(w).max()) for w in want if w.dtype.kind == "f")
        assert_close(got, want, rtol=rtol, atol=atol * max(scale, 1.0))
    return session


@pytest.mark.parametrize("classes", [2, 3])
def test_sklearn_logistic_regression(classes):
    from sklearn.linear_model import LogisticRegression

    x, y = classification(classes)
    onx = converted(LogisticRegression().fit(x, y), x, {"zipmap": False})
    assert "LinearClassifier" in {n.op_type for n in onx.graph.node}
    check_sklearn(onx, x)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("probability", [True, False], ids=["probabilities", "decisions"])
@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("kernel", ["rbf", "linear"])
def test_sklearn_svc(kernel, classes, probability, seed):
    """Against onnxruntime: labels exactly, probabilities (and decisions) to rtol 1e-5, atol
    1e-7.  Against scikit-learn's own predict_proba (libsvm, in double) both runtimes are off
    by what their float32 kernel values cost: up to 7e-7 with rbf, 9e-6 with linear (dot
    products of ~10 rounded to float32) over seeds 0-5, hence 1e-6 and 2e-5 there."""
    from sklearn.svm import SVC

    x, y = classification(classes, seed)
    with warnings.catch_warnings():  # scikit-learn 1.9 deprecates probability=True
        warnings.simplefilter("ignore", FutureWarning)
        model = SVC(kernel=kernel, probability=probability, random_state=0).fit(x, y)
    onx = converted(model, x, {"zipmap": False})
    assert "SVMClassifier" in {n.op_type for n in onx.graph.node}
    session = check_sklearn(onx, x, atol=1e-7)
    labels, scores = session.run(None, {onx.graph.input[0].name: x[:500]})
    np.testing.assert_array_equal(labels, model.predict(x[:500]))
    if probability:
        sklearn_atol = 1e-6 if kernel == "rbf" else 2e-5
        np.testing.assert_allclose(scores, model.predict_proba(x[:500]), atol=sklearn_atol)


def test_sklearn_linear_svr():
    """skl2onnx converts LinearSVR to a LinearRegressor (linear.py), not an SVMRegressor: its
    tolerance is linear.py's, not the SVM tests' atol 1e-7."""
    from sklearn.datasets import make_regression
    from sklearn.svm import LinearSVR

    x, y = make_regression(n_samples=600, n_features=8, random_state=0)
    x = x.astype(np.float32)
    onx = converted(LinearSVR(random_state=0, max_iter=5000).fit(x, y), x)
    check_sklearn(onx, x)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("kernel", ["rbf", "linear"])
def test_sklearn_svr(kernel, seed):
    from sklearn.datasets import make_regression
    from sklearn.svm import SVR

    x, y = make_regression(n_samples=600, n_features=8, random_state=seed)
    x = x.astype(np.float32)
    onx = converted(SVR(kernel=kernel, C=10.0).fit(x, y / 100), x)
    assert "SVMRegressor" in {n.op_type for n in onx.graph.node}
    check_sklearn(onx, x, atol=1e-7)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sklearn_one_class_svm(seed):
    from sklearn.svm import OneClassSVM

    x, _ = classification(2, seed)
    onx = converted(OneClassSVM(nu=0.2).fit(x), x)
    assert "SVMRegressor" in {n.op_type for n in onx.graph.node}
    check_sklearn(onx, x, atol=1e-7)


def test_sklearn_k_neighbors():
    from sklearn.neighbors import KNeighborsClassifier

    x, y = classification(3)
    onx = converted(KNeighborsClassifier().fit(x, y), x, {"zipmap": False})
    check_sklearn(onx, x)


def test_sklearn_kmeans():
    from sklearn.cluster import KMeans

    x, _ = classification(3)
    onx = converted(KMeans(n_clusters=4, n_init=3, random_state=0).fit(x), x)
    check_sklearn(onx, x)


def test_sklearn_pca():
    from sklearn.decomposition import PCA

    x, _ = classification(3)
    onx = converted(PCA(n_components=3, random_state=0).fit(x), x)
    check_sklearn(onx, x)
