"""pluggy used as pytest uses it: hooks called with arguments by name, results in pluggy's call
order (the documented tie rules), unknown hooks reported (``check_pending``), a block list."""

from __future__ import annotations

import os
import subprocess
import sys
import types
import warnings

import numpy as np
import pytest
from onnx import helper

import graphrt
from graphrt import OpDef, OpKernel, hookimpl, plugins
from graphrt.passes import GraphPass
from graphrt.paths import KernelPath, choose_path
from tests._models import make_model, tensor
from tests.test_plugins import _install_fake_distribution

AUTOLOAD_OFF = os.environ.get(plugins.AUTOLOAD_ENV, "") not in ("", "0")
needs_autoload = pytest.mark.skipif(AUTOLOAD_OFF, reason="entry-point autoloading is turned off")


def _model(op_type: str, domain: str):
    node = helper.make_node(op_type, ["x"], ["y"], domain=domain)
    return make_model(
        [node], [tensor("x", shape=[2, 3])], [tensor("y", shape=[2, 3])], domains=[domain]
    )


def _filled(value: float) -> type[OpKernel]:
    class Filled(OpKernel):
        def infer(self, ctx):
            ctx.set_output(0, ctx.dtype(0), ctx.shape(0))

        def run(self, ctx, inputs, outputs):
            outputs[0][...] = value

    return Filled


def _run(model) -> float:
    x = np.zeros((2, 3), np.float32)
    return float(graphrt.Session(model).run(None, {"x": x})[0][0, 0])


@pytest.fixture(autouse=True)
def _lenient(monkeypatch):
    """Broken plugins warn here unless a test asks for strictness (whatever the caller's env)."""
    monkeypatch.delenv(plugins.STRICT_ENV, raising=False)


@pytest.fixture
def registered():
    """register_plugin for one test: every name is unregistered afterwards."""
    names: list[str] = []

    def register(plugin, name: str) -> str:
        names.append(graphrt.register_plugin(plugin, name))
        return name

    yield register
    for name in names:
        graphrt.unregister_plugin(name)


def _caught(fn) -> tuple[object, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    return result, [str(w.message) for w in caught if w.category is graphrt.PluginLoadWarning]


# -- misspelled hooks ------------------------------------------------------------------------


def test_a_misspelled_hook_is_refused_by_register_plugin_naming_plugin_and_hook():
    Filled = _filled(1.0)
    plugin = types.SimpleNamespace(
        graphrt_operator=hookimpl(lambda: [OpDef("Typo", Filled, domain="com.typo")])
    )
    with pytest.raises(graphrt.PluginError) as info:
        graphrt.register_plugin(plugin, "ops-typo")
    message = str(info.value)
    assert "'ops-typo'" in message and "graphrt_operator," in message
    assert "did you mean graphrt_operators?" in message
    assert "ops-typo" not in plugins.loaded_plugins()


def test_a_hook_function_without_the_marker_is_refused():
    plugin = types.SimpleNamespace(graphrt_operators=lambda: [])
    with pytest.raises(graphrt.PluginError, match=r"'ops-unmarked'.*not marked with @graphrt"):
        graphrt.register_plugin(plugin, "ops-unmarked")


def test_an_argument_the_hook_does_not_have_is_refused():
    plugin = types.SimpleNamespace(graphrt_operators=hookimpl(lambda session_options: []))
    with pytest.raises(graphrt.PluginError, match=r"'ops-badarg'.*session_options"):
        graphrt.register_plugin(plugin, "ops-badarg")


MISSPELLED_PLUGIN = """
    import numpy as np
    from graphrt import OpDef, OpKernel, hookimpl

    class Seven(OpKernel):
        def infer(self, ctx):
            ctx.set_output(0, ctx.dtype(0), ctx.shape(0))

        def run(self, ctx, inputs, outputs):
            outputs[0][...] = 7

    @hookimpl
    def graphrt_operators():
        return [OpDef("Seven", Seven, domain="com.misspelled")]

    @hookimpl
    def graphrt_graph_pass():
        return []
"""


@needs_autoload
def test_an_installed_plugin_with_a_misspelled_hook_is_reported_and_left_out(tmp_path, monkeypatch):
    _install_fake_distribution(
        tmp_path, "graphrt-ops-misspelled", "ops-misspelled", "misspelled_mod", MISSPELLED_PLUGIN
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    model = _model("Seven", "com.misspelled")
    with pytest.raises(graphrt.SessionError) as info:
        _caught(lambda: graphrt.Session(model))
    assert info.value.kind == "unsupported_operator"  # its good hook is left out too
    table, _ = _caught(lambda: plugins.snapshot())
    assert "ops-misspelled" not in table.plugins and "ops-misspelled" in table.failed
    why = plugins.plugin_failures()["ops-misspelled"]
    assert "graphrt_graph_pass," in why and "did you mean graphrt_graph_passes?" in why
    with pytest.raises(graphrt.PluginError, match=r"'ops-misspelled'.*graphrt_graph_pass\b"):
        graphrt.Session(model, strict_plugins=True)


@needs_autoload
def test_the_warning_names_the_plugin_its_distribution_and_the_hook(tmp_path, monkeypatch):
    _install_fake_distribution(
        tmp_path, "graphrt-ops-misspelled2", "ops-misspelled2", "misspelled2_mod",
        MISSPELLED_PLUGIN.replace("com.misspelled", "com.misspelled2"),
    )  # fmt: skip
    monkeypatch.syspath_prepend(str(tmp_path))
    _, messages = _caught(lambda: plugins.snapshot())
    assert any(
        "'ops-misspelled2'" in m and "graphrt-ops-misspelled2" in m and "graphrt_graph_pass" in m
        for m in messages
    ), messages


# -- hooks called with arguments by name -----------------------------------------------------


def test_a_hook_argument_does_not_break_an_implementation_that_takes_none(registered):
    """Every hook has ``plugin_manager``; an implementation written without it still works,
    one that names it gets it: what lets a hook gain an argument in a later version."""
    seen = []

    def new_style(plugin_manager):
        seen.append(plugin_manager.has_plugin("ops-old-style"))
        return [OpDef("NewStyle", _filled(2.0), domain="com.args")]

    registered(
        types.SimpleNamespace(
            graphrt_operators=hookimpl(lambda: [OpDef("OldStyle", _filled(1.0), domain="com.args")])
        ),
        "ops-old-style",
    )
    registered(types.SimpleNamespace(graphrt_operators=hookimpl(new_style)), "ops-new-style")
    assert _run(_model("OldStyle", "com.args")) == 1.0
    assert _run(_model("NewStyle", "com.args")) == 2.0
    assert seen and all(seen)


def test_every_hook_specification_names_its_arguments_and_version():
    from graphrt import hookspec

    for name in plugins.HOOKS:
        fn = getattr(hookspec, name)
        assert fn.graphrt_spec is not None  # marked: pluggy reads it as a specification
        assert "plugin_manager" in fn.__code__.co_varnames[: fn.__code__.co_argcount]
        assert "Fires" in fn.__doc__ and ".. versionadded::" in fn.__doc__


# -- call order and ties ---------------------------------------------------------------------


class _Pass(GraphPass):
    def __init__(self, name: str, order: int) -> None:
        self.name = name
        self.order = order

    def run(self, graph, ctx) -> bool:
        return False


def _passes(*items, **opts):
    return types.SimpleNamespace(graphrt_graph_passes=hookimpl(**opts)(lambda: list(items)))


def _names(table) -> list[str]:
    return [p.name for p in table.passes if isinstance(p, _Pass)]


def test_equal_order_passes_run_in_pluggy_call_order(registered):
    registered(_passes(_Pass("a1", 50), _Pass("a2", 50), _Pass("a-late", 60)), "passes-a")
    registered(_passes(_Pass("b1", 50)), "passes-b")
    # registered last, called first; one plugin's list keeps its order; ``order`` sorts first
    table = plugins.snapshot(["passes-a", "passes-b"])
    assert _names(table) == ["b1", "a1", "a2", "a-late"]
    table = plugins.snapshot(["passes-b", "passes-a"])  # an allow-list registers in its order
    assert _names(table) == ["a1", "a2", "b1", "a-late"]


def test_tryfirst_moves_a_plugin_to_the_front(registered):
    registered(_passes(_Pass("first", 50), tryfirst=True), "passes-first")
    registered(_passes(_Pass("plain", 50)), "passes-plain")
    registered(_passes(_Pass("last", 50), trylast=True), "passes-last")
    names = ["passes-last", "passes-plain", "passes-first"]
    assert _names(plugins.snapshot(names)) == ["first", "plain", "last"]
    assert _names(plugins.snapshot(names[::-1])) == ["first", "plain", "last"]


def test_the_documented_order_is_pluggys_own(registered):
    """Calling plugin by plugin gives the order one merged ``pm.hook`` call gives."""
    opts = [{}, {"tryfirst": True}, {}, {"trylast": True}, {}]
    names = [registered(_passes(_Pass(f"p{i}", 0), **o), f"order-{i}") for i, o in enumerate(opts)]
    ours = _names(plugins.snapshot(names))
    pm = plugins._new_manager()
    for name in names:
        pm.register(plugins.loaded_plugins()[name], name=name)
    merged = pm.hook.graphrt_graph_passes(plugin_manager=pm)
    assert ours == [p.name for result in merged for p in result]
    assert ours == ["p1", "p4", "p2", "p0", "p3"]


def test_equal_rank_kernel_paths_go_to_the_plugin_called_first(registered):
    def path(name: str):
        return KernelPath(name, rank=5, available=lambda: True, kernels={})

    registered(types.SimpleNamespace(graphrt_kernel_paths=hookimpl(lambda: [path("x")])), "px")
    registered(types.SimpleNamespace(graphrt_kernel_paths=hookimpl(lambda: [path("y")])), "py")
    assert choose_path(list(plugins.snapshot(["px", "py"]).paths), "auto").name == "y"
    assert choose_path(list(plugins.snapshot(["py", "px"]).paths), "auto").name == "x"


def _ops(value: float, priority: int, domain: str = "com.tieorder"):
    definition = OpDef("Tagged", _filled(value), domain=domain, priority=priority)
    return types.SimpleNamespace(graphrt_operators=hookimpl(lambda: [definition]))


@pytest.mark.parametrize("high_first", [True, False])
def test_operator_priority_ignores_the_call_order(registered, high_first):
    model = _model("Tagged", "com.tieorder")
    plugin_list = [("ops-high", _ops(2.0, 3)), ("ops-low", _ops(1.0, 0))]
    for name, plugin in plugin_list if high_first else plugin_list[::-1]:
        registered(plugin, name)
    assert _run(model) == 2.0


@pytest.mark.parametrize("order", [("tie-x", "tie-y"), ("tie-y", "tie-x")])
def test_an_operator_tie_is_an_error_naming_both_whatever_the_order(registered, order):
    for name in order:
        registered(_ops(1.0, 4, "com.tie2"), name)
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(_model("Tagged", "com.tie2"))
    assert "'tie-x'" in str(info.value) and "'tie-y'" in str(info.value)


def test_one_plugin_giving_an_operator_twice_is_named_once(registered):
    twice = [OpDef("Twice", _filled(1.0), domain="com.twice", since=1)] * 2
    registered(types.SimpleNamespace(graphrt_operators=hookimpl(lambda: twice)), "ops-twice")
    with pytest.raises(graphrt.SessionError, match=r"plugin 'ops-twice' provides .*Twice.* twice"):
        graphrt.Session(_model("Twice", "com.twice"))


# -- a hook that raises ----------------------------------------------------------------------


def test_a_plugin_failing_in_a_hook_is_reported_and_left_out(registered):
    def boom():
        raise RuntimeError("no license")

    good = OpDef("Fine", _filled(3.0), domain="com.half")
    registered(
        types.SimpleNamespace(
            graphrt_operators=hookimpl(lambda: [good]), graphrt_kernel_paths=hookimpl(boom)
        ),
        "ops-half-broken",
    )
    registered(types.SimpleNamespace(graphrt_graph_passes=hookimpl(lambda: 42)), "ops-not-a-list")
    table, messages = _caught(lambda: plugins.snapshot())
    assert "ops-half-broken" not in table.plugins and "ops-not-a-list" not in table.plugins
    assert table.lookup("com.half", "Fine", 1) is None  # its good hook's results go too
    assert any("'ops-half-broken'" in m and "no license" in m for m in messages), messages
    assert any("'ops-not-a-list'" in m and "expected a list" in m for m in messages), messages
    assert _caught(lambda: plugins.snapshot())[1] == []  # each reason is warned about once
    with pytest.raises(graphrt.PluginError, match=r"'ops-half-broken' failed in graphrt_kernel"):
        plugins.snapshot(["ops-half-broken"], strict=True)


# -- the block list --------------------------------------------------------------------------

MARKER_PLUGIN = """
    import os
    open(os.environ["GRAPHRT_TEST_IMPORTED"], "a").write("imported\\n")
    from graphrt import hookimpl

    @hookimpl
    def graphrt_operators():
        return []
"""


@needs_autoload
def test_a_blocked_plugin_is_not_imported(tmp_path, monkeypatch):
    marker = tmp_path / "imported.txt"
    monkeypatch.setenv("GRAPHRT_TEST_IMPORTED", str(marker))
    _install_fake_distribution(
        tmp_path, "graphrt-ops-blockme", "ops-blockme", "blockme_mod", MARKER_PLUGIN
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(plugins.DISABLE_ENV, "ops-nothing, ops-blockme")
    table = plugins.snapshot()
    assert "ops-blockme" not in table.plugins and "ops-blockme" in table.blocked
    assert "blockme_mod" not in sys.modules and not marker.exists()
    with pytest.raises(graphrt.PluginError, match=r"'ops-blockme' are named .* but blocked"):
        plugins.snapshot(["ops-blockme"])
    monkeypatch.delenv(plugins.DISABLE_ENV)
    assert "ops-blockme" in plugins.snapshot(blocked=["ops-other"]).plugins
    assert marker.read_text() == "imported\n"  # the same entry point, imported once unblocked
    # imported by then: blocking still keeps it out of a table (pluggy's set_blocked)
    assert "ops-blockme" not in plugins.snapshot(blocked=["ops-blockme"]).plugins


def test_a_plugin_registered_by_hand_under_a_blocked_name_is_left_out(registered, monkeypatch):
    registered(_ops(9.0, 0, "com.blockhand"), "ops-blocked-by-hand")
    assert "ops-blocked-by-hand" in plugins.snapshot().plugins
    monkeypatch.setenv(plugins.DISABLE_ENV, "ops-blocked-by-hand")
    table = plugins.snapshot()
    assert "ops-blocked-by-hand" not in table.plugins
    assert table.lookup("com.blockhand", "Tagged", 1) is None


@needs_autoload
def test_blocking_a_built_in_plugin_keeps_its_modules_out_of_the_process():
    code = (
        "import sys, graphrt.plugins as p\n"
        "t = p.snapshot()\n"
        "print(sorted(t.plugins), 'graphrt_ops_controlflow' in sys.modules)\n"
    )
    env = dict(os.environ, **{plugins.DISABLE_ENV: "ops-controlflow"})
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    names, imported = out.stdout.rsplit(" ", 1)
    assert "ops-controlflow" not in names and "ops-basic" in names
    assert imported.strip() == "False"
