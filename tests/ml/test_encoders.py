"""The ai.onnx.ml encoders and maps (graphrt_ops_ml.encoders, .maps) against onnxruntime and
onnx's reference evaluator: hand-built nodes for each attribute variant, and scikit-learn
models converted with skl2onnx (ZipMap, ColumnTransformer with OneHotEncoder, DictVectorizer).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import graphrt
import graphrt.plugin
from tests._models import ort_session, tensor
from tests.ml.conftest import REASON

pytest.importorskip("graphrt_ops_ml", reason=REASON)

ML = "ai.onnx.ml"
F, I64, STR, D = TensorProto.FLOAT, TensorProto.INT64, TensorProto.STRING, TensorProto.DOUBLE


def ml_model(node, inputs, outputs, ml_opset=1, opset=17):
    graph = helper.make_graph([node], "ml", inputs, outputs)
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(ML, ml_opset)],
    )


def strings(*values):
    return np.array(values, dtype=object)


def run_graphrt(model, feeds, **options):
    return graphrt.Session(model.SerializeToString(), **options).run(None, feeds)


def oracle(model, feeds, reference=False):
    if reference:
        return ReferenceEvaluator(model).run(None, feeds)
    return ort_session(model).run(None, feeds)


def assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, list):
            assert isinstance(g, list) and len(g) == len(w)
            for gd, wd in zip(g, w):
                assert isinstance(gd, dict) and list(gd) == list(wd)
                np.testing.assert_allclose(list(gd.values()), list(wd.values()), rtol=1e-6)
            continue
        w = np.asarray(w)
        assert g.shape == w.shape, (g.shape, w.shape)
        if w.dtype == object:
            assert g.dtype == object and g.tolist() == w.tolist()
        else:
            assert g.dtype == w.dtype, (g.dtype, w.dtype)
            np.testing.assert_array_equal(g, w)


def check(model, feeds, reference=False):
    want = oracle(model, feeds, reference)
    got = run_graphrt(model, feeds)
    assert_same(got, want)
    return got


# -- LabelEncoder ---------------------------------------------------------------------------
def test_label_encoder_opset1_both_directions():
    classes = ["a", "b", "c", "b"]
    to_int = helper.make_node(
        "LabelEncoder", ["x"], ["y"], domain=ML, classes_strings=classes, default_int64=-7
    )
    m = ml_model(to_int, [tensor("x", STR, [None])], [tensor("y", I64)])
    got = check(m, {"x": strings("c", "zz", "a", "b")})
    assert got[0].tolist() == [2, -7, 0, 3]  # a repeated class: its last index
    to_str = helper.make_node(
        "LabelEncoder", ["x"], ["y"], domain=ML, classes_strings=classes, default_string="?"
    )
    m = ml_model(to_str, [tensor("x", I64, [None])], [tensor("y", STR)])
    got = check(m, {"x": np.array([2, 9, 0, -1, 3], np.int64)})
    assert got[0].tolist() == ["c", "?", "a", "?", "b"]


@pytest.mark.parametrize(
    "keys, values, default, x",
    [
        (
            {"keys_strings": ["a", "b", "c"]},
            {"values_int64s": [5, 6, 7]},
            {"default_int64": 42},
            strings("b", "q", "c", "a"),
        ),
        (
            {"keys_strings": ["a", "b"]},
            {"values_floats": [0.5, -1.25]},
            {},
            strings("b", "q", "a"),
        ),
        (
            {"keys_int64s": [3, 1, 2]},
            {"values_strings": ["x", "y", "z"]},
            {"default_string": "none"},
            np.array([[1, 2], [5, 3]], np.int64),
        ),
        (
            {"keys_int64s": [3, 1, 2]},
            {"values_floats": [0.5, 1.5, 2.5]},
            {"default_float": 9.0},
            np.array([1, 7, 3], np.int64),
        ),
        (
            {"keys_floats": [0.5, -1.0, 2.0]},
            {"values_int64s": [1, 2, 3]},
            {},
            np.array([-1.0, 0.5, 2.0, 3.0], np.float32),
        ),
        (
            {"keys_floats": [0.5, 2.0]},
            {"values_strings": ["p", "q"]},
            {},
            np.array([[2.0], [7.0]], np.float32),
        ),
        (
            {"keys_floats": [0.5, 2.0]},
            {"values_floats": [10.0, 20.0]},
            {},
            np.zeros((0, 3), np.float32),
        ),
    ],
)
def test_label_encoder_opset2_every_key_and_value_type(keys, values, default, x):
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain=ML, **keys, **values, **default)
    elem = {np.dtype(object): STR, np.dtype(np.int64): I64, np.dtype(np.float32): F}[x.dtype]
    out = {"values_int64s": I64, "values_floats": F, "values_strings": STR}[next(iter(values))]
    m = ml_model(node, [tensor("x", elem, None)], [tensor("y", out)], ml_opset=2)
    check(m, {"x": x})


def _t(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


@pytest.mark.parametrize(
    "keys, values, default, x",
    [
        # double keys and values, no default: -0.0
        (
            _t("k", np.array([1.5, 2.5], np.float64)),
            _t("v", np.array([10.0, 20.0], np.float64)),
            None,
            np.array([2.5, 3.0, 1.5], np.float64),
        ),
        # int64 -> double with a default tensor
        (
            _t("k", np.array([1, 2], np.int64)),
            _t("v", np.array([0.25, 0.75], np.float64)),
            _t("d", np.array([-3.5], np.float64)),
            np.array([[2, 1, 0]], np.int64),
        ),
        # string -> int64 through tensors, default tensor
        (
            _t("k", np.array(["a", "b"], dtype=object)),
            _t("v", np.array([7, 8], np.int64)),
            _t("d", np.array([99], np.int64)),
            strings("b", "c", "a"),
        ),
        # int64 -> string, default "_Unused"
        (
            _t("k", np.array([4, 5], np.int64)),
            _t("v", np.array(["four", "five"], dtype=object)),
            None,
            np.array([5, 6, 4], np.int64),
        ),
        # NaN key matches a NaN input of any sign
        (
            _t("k", np.array([np.nan, 1.0], np.float32)),
            _t("v", np.array([5, 6], np.int64)),
            None,
            np.array([np.nan, 1.0, 2.0, -np.nan], np.float32),
        ),
    ],
)
def test_label_encoder_opset4_tensor_attributes(keys, values, default, x):
    attrs = {"keys_tensor": keys, "values_tensor": values}
    if default is not None:
        attrs["default_tensor"] = default
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain=ML, **attrs)
    elem = helper.np_dtype_to_tensor_dtype(x.dtype) if x.dtype != object else STR
    out = values.data_type
    m = ml_model(node, [tensor("x", elem, None)], [tensor("y", out)], ml_opset=4, opset=21)
    if default is not None:  # onnx's reference evaluator fails without a default_tensor
        check(m, {"x": x}, reference=True)
    check(m, {"x": x})


def test_label_encoder_opset4_follows_the_spec_where_the_oracles_differ():
    """Spec text (LabelEncoder-4): "If a key is repeated, the last key takes precedence" (onnx's
    reference evaluator agrees; onnxruntime 1.32 keeps the first), a NaN key matches any NaN
    (the reference evaluator misses it) and the default with no default_* is {-1} for
    integral values (onnxruntime has no int32-valued kernel)."""
    attrs = {
        "keys_tensor": _t("k", np.array([np.nan, 1.0, 1.0, 2.0], np.float32)),
        "values_tensor": _t("v", np.array([5, 6, 7, 8], np.int32)),
    }
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain=ML, **attrs)
    m = ml_model(node, [tensor("x", F, None)], [tensor("y", TensorProto.INT32)], 4, 21)
    got = run_graphrt(m, {"x": np.array([np.nan, 1.0, 2.0, 3.0, -np.nan], np.float32)})[0]
    assert got.dtype == np.int32 and got.tolist() == [5, 7, 8, -1, 5]
    dup = helper.make_node(
        "LabelEncoder", ["x"], ["y"], domain=ML, keys_int64s=[1, 1, 2], values_int64s=[6, 7, 8]
    )
    m = ml_model(dup, [tensor("x", I64, None)], [tensor("y", I64)], ml_opset=2)
    feeds = {"x": np.array([1, 2, 3], np.int64)}
    got = check(m, feeds, reference=True)
    assert got[0].tolist() == [7, 8, -1]


def test_label_encoder_opset4_float_keys_and_defaults_by_value_type():
    node = helper.make_node(
        "LabelEncoder",
        ["x"],
        ["y"],
        domain=ML,
        keys_floats=[0.0, float("nan"), 3.0],
        values_strings=["zero", "nan", "three"],
        default_string="other",
    )
    m = ml_model(node, [tensor("x", F, [None])], [tensor("y", STR)], ml_opset=4, opset=21)
    got = check(m, {"x": np.array([-0.0, np.nan, 3.0, 4.0], np.float32)})
    assert got[0].tolist() == ["zero", "nan", "three", "other"]


def test_label_encoder_refuses_a_model_without_keys_or_with_mismatched_input():
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain=ML, values_int64s=[1])
    m = ml_model(node, [tensor("x", STR, [None])], [tensor("y", I64)], ml_opset=2)
    with pytest.raises(graphrt.SessionError, match="keys_"):
        run_graphrt(m, {"x": strings("a")})
    node = helper.make_node(
        "LabelEncoder", ["x"], ["y"], domain=ML, keys_strings=["a"], values_int64s=[1]
    )
    m = ml_model(node, [tensor("x", I64, [None])], [tensor("y", I64)], ml_opset=2)
    with pytest.raises(graphrt.SessionError, match="maps string keys"):
        run_graphrt(m, {"x": np.array([1], np.int64)})


# -- CategoryMapper, OneHotEncoder ----------------------------------------------------------
@pytest.mark.parametrize("direction", ["to_int", "to_str"])
def test_category_mapper(direction):
    attrs = {"cats_strings": ["cat", "dog", "cow"], "cats_int64s": [10, 20, 30]}
    if direction == "to_int":
        attrs["default_int64"] = -5
        x, ins, outs = strings("dog", "bird", "cat", "cow"), STR, I64
    else:
        x, ins, outs = np.array([[30, 10], [11, 20]], np.int64), I64, STR
    node = helper.make_node("CategoryMapper", ["x"], ["y"], domain=ML, **attrs)
    check(ml_model(node, [tensor("x", ins, None)], [tensor("y", outs)]), {"x": x})


@pytest.mark.parametrize(
    "cats, x",
    [
        ({"cats_strings": ["a", "b", "c"]}, strings("c", "a", "zz", "b")),
        ({"cats_strings": ["a", "b"]}, np.array([["a", "b"], ["b", "x"]], dtype=object)),
        ({"cats_int64s": [4, 2, 9]}, np.array([[2], [9], [5]], np.int64)),
        ({"cats_int64s": [4, 2, 9]}, np.array([2.0, 9.7, 4.0], np.float32)),
        ({"cats_int64s": [1, 3]}, np.array([3.0, 1.0], np.float64)),
        ({"cats_int64s": [1, 3]}, np.array([[3, 0]], np.int32)),
    ],
)
def test_one_hot_encoder(cats, x):
    node = helper.make_node("OneHotEncoder", ["x"], ["y"], domain=ML, **cats)
    elem = STR if x.dtype == object else helper.np_dtype_to_tensor_dtype(x.dtype)
    m = ml_model(node, [tensor("x", elem, None)], [tensor("y", F)])
    check(m, {"x": x}, reference=x.dtype == np.int32)  # onnxruntime has no int32 kernel


def test_one_hot_encoder_zeros_0_refuses_an_unknown_category():
    node = helper.make_node("OneHotEncoder", ["x"], ["y"], domain=ML, cats_int64s=[1, 2], zeros=0)
    m = ml_model(node, [tensor("x", I64, [None])], [tensor("y", F)])
    got = check(m, {"x": np.array([2, 1], np.int64)})
    np.testing.assert_array_equal(got[0], [[0, 1], [1, 0]])
    with pytest.raises(graphrt.SessionError, match="not one of the categories"):
        run_graphrt(m, {"x": np.array([2, 7], np.int64)})


# -- ArrayFeatureExtractor, FeatureVectorizer -----------------------------------------------
@pytest.mark.parametrize(
    "x, idx",
    [
        (np.arange(12, dtype=np.float32).reshape(3, 4), [0, 3, 3]),
        (np.arange(24, dtype=np.float64).reshape(2, 3, 4), [2]),
        (np.arange(5, dtype=np.int64), [4, 0]),
        (np.arange(6, dtype=np.int32).reshape(2, 3), [[1], [2]]),
        (np.array([["a", "b", "c"]], dtype=object), [2, 0]),
    ],
)
def test_array_feature_extractor(x, idx):
    node = helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain=ML)
    elem = STR if x.dtype == object else helper.np_dtype_to_tensor_dtype(x.dtype)
    m = ml_model(node, [tensor("x", elem, None), tensor("i", I64, None)], [tensor("y", elem)])
    check(m, {"x": x, "i": np.array(idx, np.int64)})


def test_array_feature_extractor_refuses_an_index_out_of_range():
    node = helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain=ML)
    m = ml_model(node, [tensor("x", F, None), tensor("i", I64, None)], [tensor("y", F)])
    with pytest.raises(graphrt.SessionError, match="out of range"):
        run_graphrt(m, {"x": np.zeros((2, 3), np.float32), "i": np.array([3], np.int64)})


@pytest.mark.parametrize(
    "arrays, dims",
    [
        ([np.ones((3, 2), np.float32), np.arange(9, dtype=np.float32).reshape(3, 3)], [2, 3]),
        ([np.arange(6, dtype=np.int64).reshape(2, 3), np.ones((2, 1), np.int64)], [2, 3]),
        ([np.arange(4, dtype=np.float64).reshape(1, 4)], [4]),
        ([np.arange(3, dtype=np.int32)], [3]),
    ],
)
def test_feature_vectorizer(arrays, dims):
    names = [f"x{i}" for i in range(len(arrays))]
    node = helper.make_node("FeatureVectorizer", names, ["y"], domain=ML, inputdimensions=dims)
    elem = helper.np_dtype_to_tensor_dtype(arrays[0].dtype)
    m = ml_model(node, [tensor(n, elem, None) for n in names], [tensor("y", F)])
    check(m, dict(zip(names, arrays)))


# -- maps: DictVectorizer, ZipMap -----------------------------------------------------------
def _map_input(name, key, value):
    return helper.make_value_info(
        name, helper.make_map_type_proto(key, helper.make_tensor_type_proto(value, None))
    )


@pytest.mark.parametrize(
    "key, value, vocab, feed",
    [
        (STR, F, {"string_vocabulary": ["a", "c", "b", "z"]}, {"a": 4.0, "c": 8.5}),
        (STR, F, {"string_vocabulary": ["a", "b"]}, {"b": 1.0, "unknown": 2.0}),
        (STR, I64, {"string_vocabulary": ["a", "b"]}, {"b": 3}),
        (STR, D, {"string_vocabulary": ["x", "y"]}, {"y": 0.1, "x": 0.7}),
        (I64, F, {"int64_vocabulary": [7, 3, 5]}, {5: 1.5, 7: -2.0}),
        (I64, STR, {"int64_vocabulary": [1, 2, 3]}, {2: "two", 3: "three"}),
    ],
)
def test_dict_vectorizer(key, value, vocab, feed):
    node = helper.make_node("DictVectorizer", ["x"], ["y"], domain=ML, **vocab)
    m = ml_model(node, [_map_input("x", key, value)], [tensor("y", value)])
    # onnxruntime's Python binding feeds only maps of float values; onnx's reference
    # evaluator returns the 1-D tensor of the spec's text, onnxruntime (and graphrt) [1, V]
    if value == F:
        got = check(m, {"x": feed})
    else:
        got = run_graphrt(m, {"x": feed})
        (want,) = oracle(m, {"x": feed}, reference=True)
        if value == STR:  # absent keys: onnxruntime's empty string, the reference writes "0"
            words = next(iter(vocab.values()))
            want = np.array([feed.get(k, "") for k in words], dtype=object)
        assert_same([got[0].reshape(-1)], [want])
    assert graphrt.Session(m.SerializeToString()).get_inputs()[0].type == (
        ort_session(m).get_inputs()[0].type
    )
    assert got[0].shape == (1, len(next(iter(vocab.values()))))


def test_map_inputs_are_checked():
    node = helper.make_node("DictVectorizer", ["x"], ["y"], domain=ML, string_vocabulary=["a"])
    sess = graphrt.Session(
        ml_model(node, [_map_input("x", STR, F)], [tensor("y", F)]).SerializeToString()
    )
    assert sess.get_inputs()[0].type == "map(string,tensor(float))"
    with pytest.raises(graphrt.SessionError, match=r"'x' is map\(string,tensor\(float\)\).*dict"):
        sess.run(None, {"x": np.array([1.0], np.float32)})
    with pytest.raises(graphrt.SessionError, match="key 3 is int, not string"):
        sess.run(None, {"x": {3: 1.0}})
    with pytest.raises(graphrt.SessionError, match="value of key 'a' is 'no', not float"):
        sess.run(None, {"x": {"a": "no"}})
    np.testing.assert_array_equal(sess.run(None, {"x": {}})[0], [[0.0]])


@pytest.mark.parametrize(
    "labels, elem",
    [
        ({"classlabels_strings": ["no", "yes", "maybe"]}, TensorProto.STRING),
        ({"classlabels_int64s": [10, 20, 30]}, TensorProto.INT64),
    ],
)
@pytest.mark.parametrize("shape", [(4, 3), (3,)])
def test_zip_map(labels, elem, shape):
    node = helper.make_node("ZipMap", ["x"], ["z"], domain=ML, **labels)
    out = helper.make_value_info(
        "z",
        helper.make_sequence_type_proto(
            helper.make_map_type_proto(elem, helper.make_tensor_type_proto(F, None))
        ),
    )
    m = ml_model(node, [tensor("x", F, None)], [out])
    x = np.random.default_rng(0).random(shape, dtype=np.float32)
    got = check(m, {"x": x})
    sess = graphrt.Session(m.SerializeToString())
    assert sess.get_outputs()[0].type == ort_session(m).get_outputs()[0].type
    key = "string" if elem == TensorProto.STRING else "int64"
    assert sess.get_outputs()[0].type == f"seq(map({key},tensor(float)))"
    assert [type(k) for k in got[0][0]] == [str if key == "string" else int] * 3
    first = sess.run(None, {"x": x})[0]
    first[0].clear()  # the caller owns what a run returns: the next run is not affected
    assert sess.run(None, {"x": x})[0] == got[0]


# -- scikit-learn models through skl2onnx ---------------------------------------------------
skl2onnx = pytest.importorskip("skl2onnx", reason="skl2onnx converts the scikit-learn models")
sklearn = pytest.importorskip("sklearn", reason="scikit-learn trains the converted models")


#: Absolute tolerance of probabilities near 0: onnxruntime computes a binary classifier's
#: first probability as 1 - p in float32, which is off by up to a few ulps of 1.0.
PROB_ATOL = 2.5e-7


def compare_model(onx, feeds):
    want = ort_session(onx).run(None, feeds)
    got = graphrt.Session(onx.SerializeToString()).run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, list):
            assert isinstance(g, list) and len(g) == len(w)
            for gd, wd in zip(g, w):
                assert list(gd) == list(wd)
                np.testing.assert_allclose(
                    list(gd.values()), list(wd.values()), rtol=1e-5, atol=PROB_ATOL
                )
        elif w.dtype.kind in "iOUb":
            assert g.dtype == w.dtype and g.tolist() == w.tolist()
        else:
            assert g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=PROB_ATOL)
    return got


@pytest.mark.parametrize("batch", [1, 500])
@pytest.mark.parametrize("string_labels", [False, True])
def test_logistic_regression_with_zipmap(batch, string_labels):
    from skl2onnx import to_onnx
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(1)
    x = rng.standard_normal((600, 5)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64) + (x[:, 2] > 1)
    if string_labels:
        y = np.array(["low", "mid", "high"], dtype=object)[y]
    model = LogisticRegression(max_iter=500).fit(x, y)
    onx = to_onnx(model, x[:1], target_opset={"": 17, ML: 1})
    assert any(n.op_type == "ZipMap" for n in onx.graph.node)
    got = compare_model(onx, {onx.graph.input[0].name: x[:batch]})
    labels, probabilities = got
    assert isinstance(probabilities, list) and isinstance(probabilities[0], dict)
    assert labels.tolist() == model.predict(x[:batch]).tolist()


@pytest.mark.parametrize("batch", [1, 500])
def test_column_transformer_with_one_hot_encoder(batch):
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    rng = np.random.default_rng(2)
    n = 600
    num = (rng.standard_normal((n, 3)) * [1, 5, 0.1] + [0, 3, -1]).astype(np.float32)
    colour = rng.choice(np.array(["red", "green", "blue", "grey"], dtype=object), size=(n, 1))
    score = num[:, 0] + (colour[:, 0] == "red") - (colour[:, 0] == "blue") * 0.5
    y = (score > 0.2).astype(np.int64)
    pd = pytest.importorskip(
        "pandas", reason="pandas is not installed (the ColumnTransformer's frame)"
    )

    frame = pd.DataFrame({"a": num[:, 0], "b": num[:, 1], "c": num[:, 2], "colour": colour[:, 0]})
    pre = ColumnTransformer(
        [
            ("num", StandardScaler(), ["a", "b", "c"]),
            ("cat", OneHotEncoder(handle_unknown="ignore"), ["colour"]),
        ]
    )
    pipe = Pipeline([("pre", pre), ("clf", LogisticRegression(max_iter=500))]).fit(frame, y)
    # the frame's columns as the ONNX model's separate inputs: one tensor per column name
    onx = convert_sklearn(
        pipe,
        initial_types=[
            ("a", FloatTensorType([None, 1])),
            ("b", FloatTensorType([None, 1])),
            ("c", FloatTensorType([None, 1])),
            ("colour", StringTensorType([None, 1])),
        ],
        target_opset={"": 17, ML: 1},
    )
    ops = {n.op_type for n in onx.graph.node}
    assert {"OneHotEncoder", "ZipMap"} <= ops, ops
    colour[-1, 0] = "purple"  # unknown category: all zeros
    feeds = {k: num[:batch, i : i + 1] for i, k in enumerate("abc")}
    feeds["colour"] = colour[n - batch :] if batch == 1 else colour[:batch]
    labels, _ = compare_model(onx, feeds)
    batch_frame = pd.DataFrame(
        {k: feeds[k][:, 0] for k in "abc"} | {"colour": feeds["colour"][:, 0]}
    )
    assert labels.tolist() == pipe.predict(batch_frame).tolist()


@pytest.mark.parametrize("batch", [1, 500])
def test_column_transformer_numeric_matrix_and_string_column(batch):
    """Numeric features as one float tensor [N, 3] and the category as a string tensor [N, 1]."""
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    rng = np.random.default_rng(3)
    n = 600
    num = (rng.standard_normal((n, 3)) * [2, 1, 3]).astype(np.float32)
    cat = rng.choice(np.array(["a", "b", "c"], dtype=object), size=(n, 1))
    y = ((num[:, 1] > 0) + (cat[:, 0] == "c")).astype(np.int64)  # three classes
    both = np.concatenate([num.astype(object), cat], axis=1)
    pre = ColumnTransformer([("num", StandardScaler(), [0, 1, 2]), ("cat", OneHotEncoder(), [3])])
    pipe = Pipeline([("pre", pre), ("clf", LogisticRegression(max_iter=500))]).fit(both, y)
    onx = convert_sklearn(
        pipe,
        initial_types=[("num", FloatTensorType([None, 3])), ("cat", StringTensorType([None, 1]))],
        target_opset={"": 17, ML: 1},
    )
    feeds = {"num": num[:batch], "cat": cat[:batch]}
    labels, probabilities = compare_model(onx, feeds)
    assert labels.tolist() == pipe.predict(both[:batch]).tolist()
    np.testing.assert_allclose(
        [[d[k] for k in sorted(d)] for d in probabilities],
        pipe.predict_proba(both[:batch]),
        rtol=1e-4,
        atol=1e-6,
    )


@pytest.mark.parametrize("batch", [1, 500])
def test_dict_vectorizer_model(batch):
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import DictionaryType, FloatTensorType, StringTensorType
    from sklearn.feature_extraction import DictVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline

    rng = np.random.default_rng(4)
    keys = ["alpha", "beta", "gamma", "delta"]
    rows = [
        {k: float(v) for k, v in zip(keys, rng.standard_normal(4)) if rng.random() < 0.8}
        for _ in range(700)
    ]
    rows = [r for r in rows if r][:600]  # onnxruntime refuses an empty map
    y = np.array([int(r.get("alpha", 0.0) + r.get("beta", 0.0) > 0) for r in rows])
    pipe = Pipeline(
        [("dv", DictVectorizer(sparse=False)), ("clf", LogisticRegression(max_iter=500))]
    ).fit(rows, y)
    onx = convert_sklearn(
        pipe,
        initial_types=[("x", DictionaryType(StringTensorType([1]), FloatTensorType([1])))],
        target_opset={"": 17, ML: 1},
    )
    sess = graphrt.Session(onx.SerializeToString())
    ort = ort_session(onx)
    assert sess.get_inputs()[0].type == ort.get_inputs()[0].type == "map(string,tensor(float))"
    labels = []
    for row in rows[:batch]:  # a map input holds one sample
        got, want = sess.run(None, {"x": row}), ort.run(None, {"x": row})
        assert got[0].tolist() == want[0].tolist()
        assert list(got[1][0]) == list(want[1][0])
        np.testing.assert_allclose(
            list(got[1][0].values()), list(want[1][0].values()), rtol=1e-5, atol=PROB_ATOL
        )
        labels += got[0].tolist()
    assert labels == pipe.predict(rows[:batch]).tolist()


def test_encoders_and_maps_run_in_exact_mode():
    """Look-ups and casts only: every kernel here follows the exact mode."""
    nodes = [
        helper.make_node(
            "LabelEncoder", ["s"], ["i"], domain=ML, keys_strings=["a", "b"], values_int64s=[1, 0]
        ),
        helper.make_node("OneHotEncoder", ["i"], ["h"], domain=ML, cats_int64s=[0, 1]),
        helper.make_node("ZipMap", ["f"], ["z"], domain=ML, classlabels_int64s=[0, 1]),
        helper.make_node("DictVectorizer", ["m"], ["d"], domain=ML, string_vocabulary=["a"]),
    ]
    seq = helper.make_sequence_type_proto(
        helper.make_map_type_proto(I64, helper.make_tensor_type_proto(F, None))
    )
    graph = helper.make_graph(
        nodes,
        "exact",
        [tensor("s", STR, [None]), tensor("f", F, [None, 2]), _map_input("m", STR, F)],
        [tensor("h", F), helper.make_value_info("z", seq), tensor("d", F)],
    )
    m = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 2)]
    )
    feeds = {
        "s": strings("b", "a", "c"),
        "f": np.array([[0.25, 0.75]], np.float32),
        "m": {"a": 2.0},
    }
    got = run_graphrt(m, feeds, mode="exact")
    assert_same(got, ort_session(m).run(None, feeds))
    np.testing.assert_array_equal(got[0], [[1, 0], [0, 1], [0, 0]])
    assert got[1] == [{0: 0.25, 1: 0.75}]


class _LabelAndScore(graphrt.plugin.OpKernel):
    """A string output beside a float one, as LinearClassifier's labels and probabilities."""

    def infer(self, ctx):
        ctx.set_output(0, np.dtype(object), ctx.shape(0))
        ctx.set_output(1, np.float32, ctx.shape(0))

    def run(self, ctx, inputs, outputs):
        outputs[0][...] = np.where(inputs[0] > 0, "pos", "neg")
        np.multiply(inputs[0], 2, out=outputs[1])


def test_a_tensor_made_beside_a_string_reaches_its_static_readers():
    """The plan runs a step with a string output at run time; its other (float) outputs are
    made then too, and a static step reading one must read that array (core plan.py)."""
    nodes = [
        helper.make_node("LabelAndScore", ["x"], ["label", "score"], domain="com.t"),
        helper.make_node("Neg", ["score"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [tensor("x", F, [3])], [tensor("label", STR), tensor("y", F)]
    )
    m = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.t", 1)]
    )
    sess = graphrt.Session(
        m.SerializeToString(), custom_kernels={("com.t", "LabelAndScore"): _LabelAndScore}
    )
    for _ in range(2):
        label, y = sess.run(None, {"x": np.array([1.0, -2.0, 0.5], np.float32)})
        assert label.tolist() == ["pos", "neg", "pos"]
        np.testing.assert_array_equal(y, [-2.0, 4.0, -1.0])
