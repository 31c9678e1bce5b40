"""Seeded scikit-learn tree ensembles converted with skl2onnx: shared by tests/ml/test_trees.py
and bench/bench_ml.py."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx

TARGET_OPSET = {"": 17, "ai.onnx.ml": 3}


@contextlib.contextmanager
def _bools_as_ints() -> Iterator[None]:
    """skl2onnx 1.20 passes HistGradientBoosting's ``missing_go_to_left`` flags as bools in an
    INTS attribute, which onnx.helper refuses ("Expected an int, got a boolean"): turn them
    into ints while converting."""
    from skl2onnx.common import _container

    original = _container.make_node

    def make_node(*args: Any, **attrs: Any) -> Any:
        for key, value in attrs.items():
            if isinstance(value, (list, tuple)) and any(
                isinstance(v, (bool, np.bool_)) for v in value
            ):
                attrs[key] = [int(v) for v in value]
        return original(*args, **attrs)

    _container.make_node = make_node
    try:
        yield
    finally:
        _container.make_node = original


def convert(model: Any, x: np.ndarray, target_opset: dict | None = None) -> onnx.ModelProto:
    """The skl2onnx conversion of a fitted model; classifiers without ZipMap."""
    from skl2onnx import to_onnx
    from sklearn.base import is_classifier

    options = {"zipmap": False} if is_classifier(model) else None
    with _bools_as_ints():
        return to_onnx(model, x[:1], options=options, target_opset=target_opset or TARGET_OPSET)


def classification(n: int = 2000, features: int = 20, classes: int = 3, seed: int = 0):
    from sklearn.datasets import make_classification

    x, y = make_classification(
        n, features, n_informative=min(8, features), n_classes=classes, random_state=seed
    )
    return x.astype(np.float32), y


def regression(n: int = 2000, features: int = 20, seed: int = 0):
    from sklearn.datasets import make_regression

    x, y = make_regression(n, features, n_informative=min(8, features), random_state=seed)
    return x.astype(np.float32), y


def with_nans(x: np.ndarray, fraction: float = 0.1, seed: int = 1) -> np.ndarray:
    x = x.copy()
    x[np.random.default_rng(seed).random(x.shape) < fraction] = np.nan
    return x


def random_forest(trees: int = 100, classes: int = 3, **kw: Any):
    from sklearn.ensemble import RandomForestClassifier

    x, y = classification(classes=classes)
    model = RandomForestClassifier(trees, random_state=0, **kw).fit(x, y)
    return model, x


def gradient_boosting_regressor(trees: int = 100, **kw: Any):
    from sklearn.ensemble import GradientBoostingRegressor

    x, y = regression()
    return GradientBoostingRegressor(n_estimators=trees, random_state=0, **kw).fit(x, y), x


def hist_gradient_boosting(classes: int = 2, iters: int = 100, nan: bool = True):
    from sklearn.ensemble import HistGradientBoostingClassifier

    x, y = classification(classes=classes)
    if nan:
        x = with_nans(x)
    model = HistGradientBoostingClassifier(max_iter=iters, random_state=0).fit(x, y)
    return model, x
