"""Without operator plugins every model fails at creation, listing all of its operators."""

from __future__ import annotations

import collections

import onnx
import pytest

import graphrt
from tests._models import light_model


def _operator_labels(path: str) -> list[str]:
    model = onnx.load(path)
    opset = model.opset_import[0].version
    seen = collections.OrderedDict((n.op_type, None) for n in model.graph.node)
    return [f"{op} (opset {opset})" for op in seen]


def test_no_plugins_lists_every_operator_of_resnet50():
    path = light_model("resnet50")
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(path, plugins=[])
    err = info.value
    assert err.kind == "unsupported_operator"
    assert err.operators == _operator_labels(path)
    for label in err.operators:
        assert label in str(err)


@pytest.mark.parametrize("name", ["squeezenet", "inception_v1", "shufflenet"])
def test_no_plugins_fails_every_light_model(name):
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.load(light_model(name), plugins=[])
    assert info.value.kind == "unsupported_operator"
    assert set(info.value.operators) == set(_operator_labels(light_model(name)))


def test_installed_environment_matches_the_tox_env():
    """In tox's core-only env nothing provides operators even without plugins=[]."""
    import importlib.util

    if importlib.util.find_spec("graphrt_ops_basic") is not None:
        pytest.skip("graphrt-ops-basic is installed here; this check runs in tox -e core-only")
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(light_model("resnet50"))
    assert info.value.kind == "unsupported_operator"
    assert info.value.operators == _operator_labels(light_model("resnet50"))
