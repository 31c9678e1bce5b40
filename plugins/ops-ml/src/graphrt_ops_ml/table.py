"""The operator table of graphrt-ops-ml: one line per operator, grouped by family module."""

from __future__ import annotations

from graphrt.plugin import OpDef, kernel_modules

encoders, maps = kernel_modules(__package__, "encoders maps")
linear, preprocess, svm = kernel_modules(__package__, "linear preprocess svm")
(trees,) = kernel_modules(__package__, "trees")
strings, text = kernel_modules(__package__, "strings text")

ML = "ai.onnx.ml"

OPERATORS: list[OpDef] = [
    # encoders and maps (encoders.py, maps.py)
    OpDef("LabelEncoder", encoders.LabelEncoder, domain=ML),
    OpDef("CategoryMapper", encoders.CategoryMapper, domain=ML),
    OpDef("OneHotEncoder", encoders.OneHotEncoder, domain=ML),
    OpDef("ArrayFeatureExtractor", encoders.ArrayFeatureExtractor, domain=ML),
    OpDef("FeatureVectorizer", encoders.FeatureVectorizer, domain=ML),
    OpDef("DictVectorizer", maps.DictVectorizer, domain=ML),
    OpDef("ZipMap", maps.ZipMap, domain=ML),
    # linear models, SVMs, scalers (linear.py, svm.py, preprocess.py)
    OpDef("LinearClassifier", linear.LinearClassifier, domain=ML),
    OpDef("LinearRegressor", linear.LinearRegressor, domain=ML),
    OpDef("SVMClassifier", svm.SVMClassifier, domain=ML),
    OpDef("SVMRegressor", svm.SVMRegressor, domain=ML),
    OpDef("Normalizer", preprocess.Normalizer, domain=ML),
    OpDef("Scaler", preprocess.Scaler, domain=ML),
    OpDef("Binarizer", preprocess.Binarizer, domain=ML),
    OpDef("Imputer", preprocess.Imputer, domain=ML),
    # tree ensembles (trees.py)
    OpDef("TreeEnsembleClassifier", trees.TreeEnsembleClassifier, domain=ML),
    OpDef("TreeEnsembleRegressor", trees.TreeEnsembleRegressor, domain=ML),
    OpDef("TreeEnsemble", trees.TreeEnsemble, since=5, domain=ML),
    # string operators (strings.py) and com.microsoft Tokenizer (text.py)
    OpDef("StringNormalizer", strings.StringNormalizer, since=10),
    OpDef("StringSplit", strings.StringSplit, since=20),
    OpDef("StringConcat", strings.StringConcat, since=20),
    OpDef("RegexFullMatch", strings.RegexFullMatch, since=20),
    OpDef("Tokenizer", text.Tokenizer, domain="com.microsoft"),
]
