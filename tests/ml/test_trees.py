"""Tree ensembles (graphrt_ops_ml.trees): scikit-learn models converted with skl2onnx against
onnxruntime, and hand-built nodes covering every node mode, aggregate and post transform
against onnx's reference evaluator (and onnxruntime where the two agree)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import graphrt
from graphrt.errors import SessionError
from tests._models import ort_session, tensor
from tests.ml import _tree_models as tm
from tests.ml.conftest import REASON

pytest.importorskip("graphrt_ops_ml", reason=REASON)
pytest.importorskip("skl2onnx", reason="skl2onnx converts the scikit-learn models")

ML = "ai.onnx.ml"
F, D, I64, STR = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64, TensorProto.STRING
MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]
TRANSFORMS = ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"]


def run_graphrt(model: onnx.ModelProto, feeds: dict) -> list:
    return graphrt.Session(model.SerializeToString()).run(None, feeds)


def assert_scores(got: np.ndarray, want: np.ndarray, rtol: float = 1e-5, atol: float = 1e-6):
    assert got.shape == want.shape and got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def ml_model(node, inputs, outputs, ml_opset=3):
    graph = helper.make_graph([node], "trees", inputs, outputs)
    imports = [helper.make_opsetid("", 17), helper.make_opsetid(ML, ml_opset)]
    return helper.make_model(graph, opset_imports=imports)


# -- scikit-learn models against onnxruntime ------------------------------------------------
def _compare_with_ort(model: onnx.ModelProto, x: np.ndarray, rtol: float = 1e-5) -> None:
    session = ort_session(model)
    name = model.graph.input[0].name
    for rows in (x[:1], x[:500]):
        want = session.run(None, {name: rows})
        got = run_graphrt(model, {name: rows})
        assert len(got) == len(want)
        for g, w in zip(got, want):
            if w.dtype.kind in "iuO":
                np.testing.assert_array_equal(g, w)  # labels exactly
            else:
                assert_scores(g, w, rtol=rtol, atol=1e-6 * max(1.0, float(np.abs(w).max())))


def test_random_forest_classifier_matches_onnxruntime():
    model, x = tm.random_forest(trees=30)
    _compare_with_ort(tm.convert(model, x), x)


def test_random_forest_binary_matches_onnxruntime():
    model, x = tm.random_forest(trees=20, classes=2, max_depth=8)
    _compare_with_ort(tm.convert(model, x), x)


def test_gradient_boosting_regressor_matches_onnxruntime():
    model, x = tm.gradient_boosting_regressor(trees=60)
    _compare_with_ort(tm.convert(model, x), x)


def _doubles(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its tree node's FLOATS attributes moved to opset 3's double
    ``*_as_tensor`` twins (skl2onnx 1.20 keeps floats even for float64 input)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    node = next(n for n in model.graph.node if n.op_type.startswith("TreeEnsemble"))
    kept = []
    for a in node.attribute:
        if a.name in ("nodes_values", "target_weights", "class_weights", "base_values"):
            values = np.array(a.floats, np.float64)
            kept.append(
                helper.make_attribute(a.name + "_as_tensor", numpy_helper.from_array(values))
            )
        else:
            kept.append(a)
    del node.attribute[:]
    node.attribute.extend(kept)
    model.graph.input[0].type.tensor_type.elem_type = D
    for imp in model.opset_import:
        if imp.domain == ML:
            imp.version = 3
    return model


def test_gradient_boosting_regressor_double_thresholds():
    model, x = tm.gradient_boosting_regressor(trees=30)
    onx = _doubles(tm.convert(model, x))
    assert any(a.name == "nodes_values_as_tensor" for a in onx.graph.node[0].attribute)
    _compare_with_ort(onx, x.astype(np.float64))


@pytest.mark.parametrize("classes", [2, 3])
def test_hist_gradient_boosting_with_missing_values(classes):
    model, x = tm.hist_gradient_boosting(classes=classes, iters=40)
    assert np.isnan(x[:500]).any()
    _compare_with_ort(tm.convert(model, x), x)


def test_gradient_boosting_classifier_binary_logistic():
    """One class id among the weights: onnxruntime's binary case (LOGISTIC)."""
    from sklearn.ensemble import GradientBoostingClassifier

    x, y = tm.classification(classes=2)
    model = GradientBoostingClassifier(n_estimators=30, random_state=0).fit(x, y)
    onx = tm.convert(model, x)
    node = next(n for n in onx.graph.node if n.op_type == "TreeEnsembleClassifier")
    class_ids = next(a for a in node.attribute if a.name == "class_ids").ints
    assert set(class_ids) == {0}
    _compare_with_ort(onx, x)


def _as_tree_ensemble(legacy: onnx.NodeProto) -> onnx.NodeProto:
    """A TreeEnsembleRegressor rewritten as an ai.onnx.ml opset 5 TreeEnsemble (skl2onnx 1.20
    emits only the legacy operators): interior nodes keep their order, each leaf weight is a
    leaf."""
    a = {x.name: helper.get_attribute_value(x) for x in legacy.attribute}
    modes = [m.decode() for m in a["nodes_modes"]]
    key = {(t, i): k for k, (t, i) in enumerate(zip(a["nodes_treeids"], a["nodes_nodeids"]))}
    interior = [k for k, m in enumerate(modes) if m != "LEAF"]
    new_id = {k: j for j, k in enumerate(interior)}
    leaf_of = {}
    for j, (t, i) in enumerate(zip(a["target_treeids"], a["target_nodeids"])):
        assert (t, i) not in leaf_of  # one weight per leaf (one target)
        leaf_of[(t, i)] = j
    side = {"true": ([], []), "false": ([], [])}
    for k in interior:
        tree = a["nodes_treeids"][k]
        for name, (ids, leafs) in side.items():
            child = key[(tree, a[f"nodes_{name}nodeids"][k])]
            if modes[child] == "LEAF":
                ids.append(leaf_of[(tree, a["nodes_nodeids"][child])])
                leafs.append(1)
            else:
                ids.append(new_id[child])
                leafs.append(0)
    roots = sorted({new_id[k] for k in interior if a["nodes_nodeids"][k] == 0})
    codes = {m: c for c, m in enumerate(MODES)}
    return helper.make_node(
        "TreeEnsemble",
        ["X"],
        ["Y"],
        domain=ML,
        n_targets=a["n_targets"],
        aggregate_function=1,
        post_transform=0,
        tree_roots=roots,
        nodes_featureids=[a["nodes_featureids"][k] for k in interior],
        nodes_splits=numpy_helper.from_array(
            np.array([a["nodes_values"][k] for k in interior], np.float32)
        ),
        nodes_modes=numpy_helper.from_array(
            np.array([codes[modes[k]] for k in interior], np.uint8)
        ),
        nodes_truenodeids=side["true"][0],
        nodes_trueleafs=side["true"][1],
        nodes_falsenodeids=side["false"][0],
        nodes_falseleafs=side["false"][1],
        leaf_targetids=a["target_ids"],
        leaf_weights=numpy_helper.from_array(np.array(a["target_weights"], np.float32)),
    )


def test_gradient_boosting_as_opset5_tree_ensemble():
    model, x = tm.gradient_boosting_regressor(trees=40)
    onx = tm.convert(model, x)
    legacy = next(n for n in onx.graph.node if n.op_type == "TreeEnsembleRegressor")
    base = helper.get_attribute_value(next(a for a in legacy.attribute if a.name == "base_values"))
    v5 = ml_model(
        _as_tree_ensemble(legacy), [tensor("X", F, [None, 20])], [tensor("Y", F)], ml_opset=5
    )
    want = ort_session(onx).run(None, {"X": x[:500]})[0]
    got = run_graphrt(v5, {"X": x[:500]})[0] + np.float32(base[0])
    assert_scores(got, want, rtol=1e-5, atol=1e-4)
    ref = ReferenceEvaluator(v5).run(None, {"X": x[:50]})[0] + np.float32(base[0])
    assert_scores(got[:50], ref, rtol=1e-5, atol=1e-4)


# -- hand-built legacy nodes ----------------------------------------------------------------
def _legacy_forest(mode: str, targets: int = 3, uniform: bool = False):
    """Two trees over features 0 and 1; tree 0 splits with ``mode`` and tracks NaN to its true
    branch at the root only; tree 1 uses BRANCH_LEQ and LT. Leaf weights hit every target,
    some twice (MIN/MAX keep the extreme), and one target only from tree 1."""
    nodes = dict(
        nodes_treeids=[0, 0, 0, 0, 0, 1, 1, 1, 1, 1],
        nodes_nodeids=[0, 1, 2, 3, 4, 0, 1, 2, 3, 4],
        nodes_featureids=[0, 1, 0, 0, 0, 1, 0, 0, 0, 0],
        nodes_values=[0.5, -0.25, 0, 0, 0, 0.0, 1.0, 0, 0, 0],
        nodes_modes=[mode, mode, "LEAF", "LEAF", "LEAF", "BRANCH_LEQ", "BRANCH_LT"] + ["LEAF"] * 3,
        nodes_truenodeids=[1, 2, 0, 0, 0, 1, 2, 0, 0, 0],
        nodes_falsenodeids=[4, 3, 0, 0, 0, 4, 3, 0, 0, 0],
        nodes_missing_value_tracks_true=[1, 0, 0, 0, 0, 0, 1, 0, 0, 0],
    )
    if uniform:  # every interior node compares with ``mode`` (graphrt's one-comparison path)
        nodes["nodes_modes"] = [mode, mode] + ["LEAF"] * 3 + [mode, mode] + ["LEAF"] * 3
    leaves = [(0, 2), (0, 3), (0, 4), (1, 2), (1, 3), (1, 4)]
    weights = []
    rng = np.random.default_rng(7)
    for tree, node in leaves:
        for target in range(targets):
            if tree == 0 and target == targets - 1:
                continue
            weights.append((tree, node, target, float(np.round(rng.uniform(-1, 1), 3))))
    weights.append((0, 3, 0, 0.9))  # a second weight for one (leaf, target)
    return nodes, weights


FEED = np.array(
    [
        [0.5, -0.25],
        [0.4, 0.0],
        [0.6, 1.0],
        [np.nan, -1.0],
        [0.5, np.nan],
        [-3.0, 2.5],
        [np.nan, np.nan],
        [1.0, 0.0],
    ],
    np.float32,
)


def _regressor(mode, aggregate, transform, base=None, targets=3, uniform=False):
    nodes, weights = _legacy_forest(mode, targets, uniform)
    tree, node, target, weight = zip(*weights)
    extra = {"base_values": base} if base is not None else {}
    n = helper.make_node(
        "TreeEnsembleRegressor",
        ["X"],
        ["Y"],
        domain=ML,
        n_targets=targets,
        aggregate_function=aggregate,
        post_transform=transform,
        target_treeids=list(tree),
        target_nodeids=list(node),
        target_ids=list(target),
        target_weights=list(weight),
        **nodes,
        **extra,
    )
    return ml_model(n, [tensor("X", F, [None, 2])], [tensor("Y", F)], ml_opset=1)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_regressor_modes_and_aggregates(mode, aggregate):
    model = _regressor(mode, aggregate, "NONE", base=[0.5, -1.0, 2.0])
    got = run_graphrt(model, {"X": FEED})[0]
    assert_scores(got, ort_session(model).run(None, {"X": FEED})[0])
    if aggregate in ("SUM", "AVERAGE") and mode != "BRANCH_NEQ":
        # onnx's reference evaluator (legacy operator) leaves a target no tree reached under
        # MIN/MAX at its +-inf start, and sends NaN down a BRANCH_NEQ node's false branch
        # unless it tracks true; graphrt follows onnxruntime there (NaN != t is true)
        assert_scores(got, ReferenceEvaluator(model).run(None, {"X": FEED})[0])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("infinite", [False, True])
def test_regressor_one_mode_everywhere(mode, infinite):
    """One comparison for every node, NaN routed per node; an infinite threshold that the
    NaN stand-in value would not pass keeps the per-level NaN test."""
    model = _regressor(mode, "SUM", "NONE", uniform=True)
    if infinite:
        attr = next(a for a in model.graph.node[0].attribute if a.name == "nodes_values")
        attr.floats[6] = -np.inf if mode in ("BRANCH_LEQ", "BRANCH_LT") else np.inf
    got = run_graphrt(model, {"X": FEED})[0]
    assert_scores(got, ort_session(model).run(None, {"X": FEED})[0])


@pytest.mark.parametrize("transform", ["SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"])
def test_regressor_post_transforms(transform):
    """onnxruntime as the oracle: onnx's reference evaluator implements none of them for the
    legacy regressor."""
    model = _regressor("BRANCH_LEQ", "SUM", transform)
    got = run_graphrt(model, {"X": FEED})[0]
    assert_scores(got, ort_session(model).run(None, {"X": FEED})[0])


def test_regressor_probit():
    """One target, AVERAGE of two trees plus a base value: scores inside (0, 1)."""
    model = _regressor("BRANCH_LEQ", "AVERAGE", "PROBIT", base=[0.2], targets=1)
    plain = _regressor("BRANCH_LEQ", "AVERAGE", "NONE", base=[0.2], targets=1)
    feed = np.array([[0.4, 0.0], [1.0, 0.0], [0.6, 0.2], [-1.0, 9.0]], np.float32)
    scores = run_graphrt(plain, {"X": feed})[0][:, 0].astype(np.float64)
    assert ((scores > 0) & (scores < 1)).all()
    from statistics import NormalDist

    want = np.array([[NormalDist().inv_cdf(s)] for s in scores], np.float32)
    got = run_graphrt(model, {"X": feed})[0]
    assert_scores(got, want, rtol=1e-5, atol=1e-6)
    # onnxruntime approximates erfinv more coarsely
    assert_scores(got, ort_session(model).run(None, {"X": feed})[0], rtol=1e-2, atol=1e-3)


def _classifier(weights, labels, transform="NONE", base=None, mode="BRANCH_LEQ"):
    nodes, _ = _legacy_forest(mode)
    tree, node, cls, weight = zip(*weights)
    key = "classlabels_strings" if isinstance(labels[0], str) else "classlabels_int64s"
    extra = {"base_values": base} if base is not None else {}
    n = helper.make_node(
        "TreeEnsembleClassifier",
        ["X"],
        ["Y", "Z"],
        domain=ML,
        post_transform=transform,
        class_treeids=list(tree),
        class_nodeids=list(node),
        class_ids=list(cls),
        class_weights=list(weight),
        **{key: labels},
        **nodes,
        **extra,
    )
    label_type = STR if key == "classlabels_strings" else I64
    return ml_model(n, [tensor("X", F, [None, 2])], [tensor("Y", label_type), tensor("Z", F)])


@pytest.mark.parametrize("transform", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("labels", [[10, 20, 30], ["a", "b", "c"]])
def test_classifier_multiclass(transform, labels):
    _, weights = _legacy_forest("BRANCH_GT")
    weights = [w for w in weights if w[3] != 0.9]  # one weight per (leaf, class)
    model = _classifier(weights, labels, transform, base=[0.1, 0.0, -0.2], mode="BRANCH_GT")
    got = run_graphrt(model, {"X": FEED})
    want = ort_session(model).run(None, {"X": FEED})
    assert got[0].tolist() == want[0].tolist()
    assert_scores(got[1], want[1])
    ref = ReferenceEvaluator(model).run(None, {"X": FEED})
    assert_scores(got[1], ref[1])


@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("signs", ["positive", "mixed"])
@pytest.mark.parametrize("base", [None, [0.25]])
def test_classifier_binary_case(transform, signs, base):
    """Two labels, one class id among the weights: onnxruntime's binary case."""
    values = [0.1, 0.45, 0.3, 0.7, 0.05, 0.2]
    if signs == "mixed":
        values = [v - 0.4 for v in values]
    weights = [
        (t, n, 0, v) for (t, n), v in zip([(0, 2), (0, 3), (0, 4), (1, 2), (1, 3), (1, 4)], values)
    ]
    model = _classifier(weights, [0, 1], transform, base=base)
    got = run_graphrt(model, {"X": FEED})
    want = ort_session(model).run(None, {"X": FEED})
    np.testing.assert_array_equal(got[0], want[0])
    assert_scores(got[1], want[1])


def test_classifier_labels_only():
    _, weights = _legacy_forest("BRANCH_LEQ")
    model = _classifier(weights, [4, 5, 6])
    want = ort_session(model).run(None, {"X": FEED})[0]
    del model.graph.output[1]
    model.graph.node[0].output.pop()
    (got,) = run_graphrt(model, {"X": FEED})
    np.testing.assert_array_equal(got, want)


def test_classifier_int64_input():
    _, weights = _legacy_forest("BRANCH_LEQ")
    model = _classifier(weights, [1, 2, 3])
    ints = np.array([[0, 0], [1, -1], [2, 3]], np.int64)
    model.graph.input[0].type.tensor_type.elem_type = I64
    got = run_graphrt(model, {"X": ints})
    want = ort_session(model).run(None, {"X": ints})
    np.testing.assert_array_equal(got[0], want[0])
    assert_scores(got[1], want[1])


# -- hand-built TreeEnsemble (ai.onnx.ml opset 5) -------------------------------------------
def _tree_ensemble(aggregate, transform, dtype=np.float32, n_targets=2):
    """Tree 0 chains every mode 0..6, node k reading feature k (its true branch to leaf k, its
    false branch to node k + 1, the last one's to leaf 8); tree 1 is a single leaf (both
    branches of node 7 to leaf 7: onnx's reference evaluator reads such a tree's leaf at the
    root's index)."""
    splits = np.array([0.5, 0.5, 1.0, -1.0, 2.0, 3.0, 0.0, 9.0], dtype)
    modes = np.array([0, 1, 2, 3, 4, 5, 6, 0], np.uint8)
    n = modes.size
    weights = np.round(np.linspace(-1.5, 2.0, 9), 3).astype(dtype)
    node = helper.make_node(
        "TreeEnsemble",
        ["X"],
        ["Y"],
        domain=ML,
        n_targets=n_targets,
        aggregate_function=aggregate,
        post_transform=transform,
        tree_roots=[0, n - 1],
        nodes_featureids=list(range(7)) + [0],
        nodes_splits=numpy_helper.from_array(splits),
        nodes_modes=numpy_helper.from_array(modes),
        nodes_truenodeids=list(range(7)) + [7],
        nodes_trueleafs=[1] * n,
        nodes_falsenodeids=list(range(1, 7)) + [8, 7],
        nodes_falseleafs=[0] * 6 + [1, 1],
        nodes_missing_value_tracks_true=[0, 1, 0, 1, 0, 0, 1, 0],
        # one set, for the BRANCH_MEMBER node (onnx's reference stops a set at a 0)
        membership_values=numpy_helper.from_array(np.array([1, 4, 7, np.nan], dtype)),
        leaf_targetids=[k % n_targets for k in range(9)],
        leaf_weights=numpy_helper.from_array(weights),
    )
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return ml_model(node, [tensor("X", elem, [None, 7])], [tensor("Y", elem)], ml_opset=5)


def _v5_feed(dtype=np.float32):
    """Random rows, and rows that reach node k (values sending nodes 0..k-1 to their false
    branches) with each value at feature k."""
    rng = np.random.default_rng(3)
    values = [-2.0, -1.0, 0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 7.0, np.nan]
    false_values = [4.0, 4.0, 0.0, -2.0, 4.0, 3.0, 0.0]
    rows = [rng.choice(values, size=(200, 7))]
    for k in range(7):
        for v in values:
            rows.append(np.array([false_values[:k] + [v] + list(rng.choice(values, 6 - k))]))
    return np.concatenate(rows).astype(dtype)


def _transform(scores: np.ndarray, transform: int) -> np.ndarray:
    """The post transforms of the spec, written out for [N, K] float64 scores."""
    if transform == 0:
        return scores
    if transform == 2:
        return 1 / (1 + np.exp(-scores))
    e = np.exp(scores - scores.max(axis=1, keepdims=True))
    if transform == 3:
        e = np.where(scores == 0, 0.0, e)
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
@pytest.mark.parametrize("transform", [0, 1, 2, 3])
def test_tree_ensemble_modes_aggregates_transforms(aggregate, transform):
    """onnx's reference evaluator as the oracle of the scores (it ignores post_transform, which
    the test applies itself)."""
    x = _v5_feed()
    raw = ReferenceEvaluator(_tree_ensemble(aggregate, 0)).run(None, {"X": x})[0]
    # MIN/MAX: a target no tree reached is 0 in graphrt (as in onnxruntime's legacy
    # operators); onnx's reference leaves the float32 extreme it starts from
    raw = np.where(np.abs(raw) == np.finfo(np.float32).max, 0, raw)
    want = _transform(raw.astype(np.float64), transform).astype(np.float32)
    got = run_graphrt(_tree_ensemble(aggregate, transform), {"X": x})[0]
    assert_scores(got, want)


def test_tree_ensemble_every_branch_is_taken():
    """The feed reaches every leaf: each mode's two branches, NaN included, are exercised."""
    from graphrt.attrs import node_info
    from graphrt_ops_ml.trees import TreeEnsemble

    kernel = TreeEnsemble(node_info(_tree_ensemble(1, 0).graph.node[0], 5))
    leaves = kernel.forest.walk(_v5_feed())
    assert np.unique(leaves[0]).tolist() == [8 + k for k in range(7)] + [16]
    assert np.unique(leaves[1]).tolist() == [15]


def test_tree_ensemble_double_and_probit():
    x = _v5_feed(np.float64)
    model = _tree_ensemble(0, 0, np.float64, n_targets=1)
    got = run_graphrt(model, {"X": x})[0]
    assert got.dtype == np.float64
    assert_scores(got, ReferenceEvaluator(model).run(None, {"X": x})[0])
    scores = got[:, 0]
    inside = (scores > 0.05) & (scores < 0.95)
    assert inside.sum() > 10
    from statistics import NormalDist

    want = np.array([NormalDist().inv_cdf(s) for s in scores[inside]])
    got_p = run_graphrt(_tree_ensemble(0, 4, np.float64, n_targets=1), {"X": x})[0][:, 0]
    np.testing.assert_allclose(got_p[inside], want, rtol=1e-5, atol=1e-6)


def test_tree_ensemble_float16():
    x = _v5_feed(np.float16)
    model = _tree_ensemble(1, 0, np.float16)
    got = run_graphrt(model, {"X": x})[0]
    assert got.dtype == np.float16
    want = ReferenceEvaluator(model).run(None, {"X": x})[0]
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), atol=2e-3)


# -- bad models -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "change",
    [
        # node 2 leads back to node 0: no node of tree 0 is free to be its root
        {
            "nodes_modes": ["BRANCH_LEQ"] * 3
            + ["LEAF"] * 2
            + ["BRANCH_LEQ", "BRANCH_LT"]
            + ["LEAF"] * 3,
            "nodes_truenodeids": [1, 2, 0, 0, 0, 1, 2, 0, 0, 0],
            "nodes_falsenodeids": [4, 3, 3, 0, 0, 4, 3, 0, 0, 0],
        },
        # tree 0 has its root, but nodes 1 and 2 loop below it
        {
            "nodes_modes": ["BRANCH_LEQ"] * 3
            + ["LEAF"] * 2
            + ["BRANCH_LEQ", "BRANCH_LT"]
            + ["LEAF"] * 3,
            "nodes_truenodeids": [1, 2, 1, 0, 0, 1, 2, 0, 0, 0],
            "nodes_falsenodeids": [4, 3, 3, 0, 0, 4, 3, 0, 0, 0],
        },
        # a child that does not exist
        {"nodes_truenodeids": [1, 9, 0, 0, 0, 1, 2, 0, 0, 0]},
    ],
    ids=["no_root", "cycle", "missing_child"],
)
def test_bad_trees_are_invalid_models(change):
    nodes, weights = _legacy_forest("BRANCH_LEQ")
    tree, node, target, weight = zip(*weights)
    n = helper.make_node(
        "TreeEnsembleRegressor",
        ["X"],
        ["Y"],
        domain=ML,
        n_targets=3,
        target_treeids=list(tree),
        target_nodeids=list(node),
        target_ids=list(target),
        target_weights=list(weight),
        **{**nodes, **change},
    )
    model = ml_model(n, [tensor("X", F, [None, 2])], [tensor("Y", F)], ml_opset=1)
    with pytest.raises(SessionError) as info:
        run_graphrt(model, {"X": FEED})
    assert info.value.kind == "invalid_model"
