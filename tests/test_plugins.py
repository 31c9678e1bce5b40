"""Plugins: entry-point discovery, frozen per-session tables, allow-lists, priorities, failures."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types
import warnings

import numpy as np
import pytest
from onnx import helper

import graphrt
from graphrt import OpDef, OpKernel, hookimpl, plugins
from tests._models import make_model, tensor

AUTOLOAD_OFF = os.environ.get(plugins.AUTOLOAD_ENV, "") not in ("", "0")
needs_autoload = pytest.mark.skipif(AUTOLOAD_OFF, reason="entry-point autoloading is turned off")


def _model(op_type: str, domain: str = "", **attrs):
    node = helper.make_node(op_type, ["x"], ["y"], domain=domain, **attrs)
    return make_model(
        [node],
        [tensor("x", shape=[2, 3])],
        [tensor("y", shape=[2, 3])],
        domains=[domain] if domain else [],
    )


def _install_fake_distribution(root, dist: str, ep_name: str, module: str, source: str) -> None:
    """Write a module and a .dist-info with an entry point: what pip install leaves behind."""
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[graphrt.plugins]\n{ep_name} = {module}\n")


LATE_PLUGIN = """
    import numpy as np
    from graphrt import OpDef, OpKernel, hookimpl

    class Cube(OpKernel):
        def infer(self, ctx):
            ctx.set_output(0, ctx.dtype(0), ctx.shape(0))

        def run(self, ctx, inputs, outputs):
            np.multiply(inputs[0], inputs[0], out=outputs[0])
            np.multiply(outputs[0], inputs[0], out=outputs[0])

    @hookimpl
    def graphrt_operators():
        return [OpDef("Cube", Cube, domain="com.late")]
"""


@needs_autoload
def test_installed_third_party_plugin_is_found_and_used():
    sess = graphrt.Session(_model("Scale", "com.example", factor=3.0))
    assert "ops-example" in sess.plugins
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], x * 3)


@needs_autoload
def test_plugin_installed_later_is_seen_only_by_later_sessions(tmp_path, monkeypatch):
    before = graphrt.Session(_model("Relu"))
    _install_fake_distribution(
        tmp_path, "graphrt-ops-late", "ops-late", "late_plugin_mod", LATE_PLUGIN
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    after = graphrt.Session(_model("Cube", "com.late"))
    assert "ops-late" in after.plugins
    assert "ops-late" not in before.plugins
    assert before.operator_table.lookup("com.late", "Cube", 1) is None
    x = np.full((2, 3), 2.0, np.float32)
    np.testing.assert_array_equal(after.run(None, {"x": x})[0], x**3)
    # the earlier session keeps working with its own snapshot
    np.testing.assert_array_equal(before.run(None, {"x": -x})[0], np.zeros_like(x))


def test_registered_plugin_is_frozen_out_of_earlier_sessions():
    class Negate(OpKernel):
        def infer(self, ctx):
            ctx.set_output(0, ctx.dtype(0), ctx.shape(0))

        def run(self, ctx, inputs, outputs):
            np.negative(inputs[0], out=outputs[0])

    first = types.SimpleNamespace(
        graphrt_operators=hookimpl(lambda: [OpDef("Negate1", Negate, domain="com.reg")])
    )
    plugin = types.SimpleNamespace(
        graphrt_operators=hookimpl(lambda: [OpDef("Negate2", Negate, domain="com.reg")])
    )
    first_name = graphrt.register_plugin(first, "ops-first")  # works with autoloading off too
    try:
        earlier = graphrt.Session(_model("Negate1", "com.reg"))
    finally:
        graphrt.unregister_plugin(first_name)
    name = graphrt.register_plugin(plugin, "ops-registered")
    try:
        later = graphrt.Session(_model("Negate2", "com.reg"))
        x = np.ones((2, 3), np.float32)
        np.testing.assert_array_equal(later.run(None, {"x": x})[0], -x)
        assert "ops-registered" in later.plugins
        assert "ops-registered" not in earlier.plugins
    finally:
        graphrt.unregister_plugin(name)
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(_model("Negate2", "com.reg"))
    assert info.value.operators == ["com.reg.Negate2 (opset 1)"]


@needs_autoload
def test_allow_list_limits_the_plugins_of_one_session():
    model = _model("Scale", "com.example", factor=2.0)
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(model, plugins=["ops-basic"])
    assert info.value.kind == "unsupported_operator"
    assert info.value.operators == ["com.example.Scale (opset 1)"]
    assert graphrt.Session(model, plugins=["ops-example"]).plugins == ("ops-example",)
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(_model("Relu"), plugins=[])
    assert info.value.operators == ["Relu (opset 17)"]


def test_unknown_plugin_in_allow_list_is_an_error():
    with pytest.raises(graphrt.PluginError, match=r"'no-such-plugin' are not installed"):
        graphrt.Session(_model("Relu"), plugins=["no-such-plugin"])


def test_autoload_can_be_turned_off_by_environment():
    code = (
        "import graphrt.plugins as p, types, graphrt\n"
        "print(sorted(p.snapshot().plugins))\n"
        "import graphrt_ops_basic.plugin as b\n"
        "graphrt.register_plugin(b, 'ops-basic')\n"
        "print(sorted(p.snapshot().plugins))\n"
    )
    env = dict(os.environ, **{plugins.AUTOLOAD_ENV: "1"})
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split("\n")[:2] == ["[]", "['ops-basic']"]


BROKEN_PLUGIN = """
    raise ImportError("this plugin needs libfrobnicate")
"""


@needs_autoload
def test_broken_plugin_is_reported_and_skipped(tmp_path, monkeypatch):
    _install_fake_distribution(
        tmp_path, "graphrt-ops-broken", "ops-broken", "broken_plugin_mod", BROKEN_PLUGIN
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sess = graphrt.Session(_model("Relu"))
    messages = [str(w.message) for w in caught if issubclass(w.category, graphrt.PluginLoadWarning)]
    assert any(
        "'ops-broken'" in m and "libfrobnicate" in m and "graphrt-ops-broken" in m for m in messages
    )
    assert "ops-broken" not in sess.plugins
    assert "ops-broken" in plugins.plugin_failures()
    with pytest.raises(graphrt.PluginError, match=r"ops-broken.*libfrobnicate"):
        graphrt.Session(_model("Relu"), strict_plugins=True)


def _relu_plugin(name_tag: str, priority: int):
    class Tagged(OpKernel):
        tag = name_tag

        def infer(self, ctx):
            ctx.set_output(0, ctx.dtype(0), ctx.shape(0))

        def run(self, ctx, inputs, outputs):
            outputs[0][...] = {"a": 1.0, "b": 2.0}[self.tag]

    return types.SimpleNamespace(
        graphrt_operators=hookimpl(
            lambda: [OpDef("Tagged", Tagged, domain="com.tie", priority=priority)]
        )
    )


def test_priority_decides_and_a_tie_names_both_plugins():
    model = _model("Tagged", "com.tie")
    x = np.zeros((2, 3), np.float32)
    graphrt.register_plugin(_relu_plugin("a", 0), "tie-a")
    graphrt.register_plugin(_relu_plugin("b", 0), "tie-b")
    try:
        with pytest.raises(graphrt.SessionError) as info:
            graphrt.Session(model)
        assert "'tie-a'" in str(info.value) and "'tie-b'" in str(info.value)
        graphrt.unregister_plugin("tie-b")
        graphrt.register_plugin(_relu_plugin("b", 5), "tie-b-high")
        assert graphrt.Session(model).run(None, {"x": x})[0][0, 0] == 2.0
        assert graphrt.Session(model, plugins=["tie-a"]).run(None, {"x": x})[0][0, 0] == 1.0
    finally:
        for n in ("tie-a", "tie-b", "tie-b-high"):
            graphrt.unregister_plugin(n)


def test_custom_kernels_apply_to_one_session_only():
    class DoubleRelu(OpKernel):
        def infer(self, ctx):
            ctx.set_output(0, ctx.dtype(0), ctx.shape(0))

        def run(self, ctx, inputs, outputs):
            np.maximum(inputs[0], 0, out=outputs[0])
            outputs[0] *= 2

    model = _model("Relu")
    x = np.array([[-1, 2, 3], [4, -5, 6]], np.float32)
    custom = graphrt.Session(model, custom_kernels={"Relu": DoubleRelu}, plugins=[])
    np.testing.assert_array_equal(custom.run(None, {"x": x})[0], np.maximum(x, 0) * 2)
    if not AUTOLOAD_OFF:
        plain = graphrt.Session(model)
        np.testing.assert_array_equal(plain.run(None, {"x": x})[0], np.maximum(x, 0))


def test_hook_specifications_are_documented():
    from graphrt import hookspec

    for name in ("graphrt_operators", "graphrt_graph_passes", "graphrt_kernel_paths"):
        fn = getattr(hookspec, name)
        assert fn.__doc__ and "Fires" in fn.__doc__
