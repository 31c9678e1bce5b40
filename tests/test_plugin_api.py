"""The published plugin API (``graphrt.plugin``): every plugin in the repository imports graphrt
through it only, it costs no more than ``import graphrt``, and an OpDef's kernel flags are one
declared set, checked when the plugin's table is registered and the only flags the session
reads."""

from __future__ import annotations

import ast
import json
import pathlib
import subprocess
import sys
import textwrap
import types
import warnings

import numpy as np
import pytest
from onnx import helper

import graphrt
import graphrt.plugin as api
from graphrt import plugins
from tests._models import make_model, tensor

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: Every plugin of the repository: the built-in ones and the example third-party one.
PLUGIN_DIRS = sorted(ROOT.glob("plugins/*/src")) + sorted(ROOT.glob("tests/plugins/*/src"))


def _graphrt_imports(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, module) of every import of a graphrt module in the file, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
            if node.module == "graphrt":  # from graphrt import kernel: a module all the same
                modules = [f"graphrt.{a.name}" for a in node.names]
        else:
            continue
        found += [(node.lineno, m) for m in modules if m == "graphrt" or m.startswith("graphrt.")]
    return found


def test_the_plugin_folders_are_found():
    names = {p.parent.name for p in PLUGIN_DIRS}
    assert {"ops-basic", "ops-controlflow", "ops-simd", "graphrt-ops-example"} <= names


@pytest.mark.parametrize("src", PLUGIN_DIRS, ids=lambda p: p.parent.name)
def test_a_plugin_imports_graphrt_only_through_the_published_api(src):
    files = sorted(src.rglob("*.py"))
    assert files, src
    wrong = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in files
        for line, module in _graphrt_imports(path)
        if module != "graphrt.plugin"
    ]
    assert not wrong, "import graphrt.plugin instead of:\n" + "\n".join(wrong)
    # the walk sees imports at all: each plugin does use the API
    assert any(_graphrt_imports(path) for path in files), src


def test_the_api_names_resolve_and_none_is_private():
    assert all(not name.startswith("_") for name in api.__all__)
    for name in api.__all__:
        assert getattr(api, name) is not None, name
    assert set(api.__all__) <= set(dir(api))
    assert api.OpDef is graphrt.OpDef and api.hookimpl is graphrt.hookimpl


def test_importing_the_api_costs_no_more_than_import_graphrt():
    code = """
        import json, sys
        import graphrt
        before = set(sys.modules)
        import graphrt.plugin
        print(json.dumps(sorted(set(sys.modules) - before)))
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True
    )
    added = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert added <= {"graphrt.plugin", "graphrt.lazy"}, added


# -- kernel flags: one declared set per OpDef ----------------------------------------------------

DOMAIN = "com.flags"


def _model():
    node = helper.make_node("Nonzero", ["x"], ["y"], domain=DOMAIN)
    return make_model([node], [tensor("x", shape=[5])], [tensor("y", shape=None)], domains=[DOMAIN])


class _Nonzero(api.OpKernel):
    """The nonzero elements of x: the output's length depends on the values.  It has no
    ``infer``; it is exact.  Its class sets no flag: only the OpDef's count."""

    def run(self, ctx, inputs, outputs):
        x = inputs[0]
        out = ctx.allocate_output(0, x.dtype, (int(np.count_nonzero(x)),))
        out[...] = x[x != 0]


def _make(node: api.NodeInfo) -> api.OpKernel:  # a function factory: no class to read flags of
    return _Nonzero(node)


DECLARED = {"supports_exact": True, "outputs_data_dependent": True}


def test_a_function_factory_runs_under_its_declared_flags():
    x = np.array([0, 3, 0, -2, 5], np.float32)
    line = api.OpDef("Nonzero", _make, domain=DOMAIN, flags=DECLARED)
    assert line.kernel_flags == api.KernelFlags(supports_exact=True, outputs_data_dependent=True)
    # exact: accepted (the factory has no supports_exact attribute); data dependent: the
    # planner never calls the missing infer
    session = graphrt.Session(_model(), plugins=[], custom_kernels=[line], mode="exact")
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], [3, -2, 5])


def test_a_function_factory_without_declared_flags_has_the_defaults():
    line = api.OpDef("Nonzero", _make, domain=DOMAIN)
    assert line.kernel_flags == api.KernelFlags()
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(_model(), plugins=[], custom_kernels=[line], mode="exact")
    assert info.value.kind == "exact_mode_unavailable"


def test_the_flags_are_read_from_the_opdef_not_from_the_kernel_object():
    class Flagged(_Nonzero):  # the object says exact; the line (a function factory) does not
        supports_exact = True
        outputs_data_dependent = True

    line = api.OpDef("Nonzero", lambda node: Flagged(node), domain=DOMAIN)
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(_model(), plugins=[], custom_kernels=[line], mode="exact")
    assert info.value.kind == "exact_mode_unavailable"


def test_a_class_factory_gives_its_flags_and_declared_ones_override_them():
    class Flagged(_Nonzero):
        supports_exact = True
        outputs_data_dependent = True

    assert api.OpDef("N", Flagged).kernel_flags == api.KernelFlags(**DECLARED)
    narrowed = api.OpDef("N", Flagged, flags={"supports_exact": False})
    assert narrowed.kernel_flags == api.KernelFlags(outputs_data_dependent=True)


def _plugin(line: api.OpDef) -> types.SimpleNamespace:
    return types.SimpleNamespace(graphrt_operators=api.hookimpl(lambda: [line]))


@pytest.fixture
def flag_plugin(monkeypatch):
    monkeypatch.delenv(plugins.STRICT_ENV, raising=False)
    names = []

    def register(line: api.OpDef, name: str) -> str:
        names.append(graphrt.register_plugin(_plugin(line), name))
        return name

    yield register
    for name in names:
        graphrt.unregister_plugin(name)


def test_an_unknown_flag_is_refused_at_registration_naming_plugin_operator_and_flag(flag_plugin):
    line = api.OpDef("Nonzero", _make, domain=DOMAIN, flags={"supports_exakt": True})
    name = flag_plugin(line, "ops-badflag")
    with pytest.raises(graphrt.PluginError) as info:
        plugins.snapshot([name], strict=True)
    message = str(info.value)
    assert "'ops-badflag'" in message and "com.flags.Nonzero" in message
    assert "'supports_exakt'" in message and "supports_exact" in message  # the known names
    with warnings.catch_warnings(record=True) as caught:  # lenient: reported, left out
        warnings.simplefilter("always")
        table = plugins.snapshot([name], strict=False)
    assert name not in table.plugins and table.lookup(DOMAIN, "Nonzero", 1) is None
    assert any("supports_exakt" in str(w.message) for w in caught)


@pytest.mark.parametrize(
    "flags", [{"in_place_input": "0"}, {"in_place_input": True}, {"view_of_input": 1}]
)
def test_a_flag_of_the_wrong_type_is_refused(flags):
    line = api.OpDef("Nonzero", _make, domain=DOMAIN, flags=flags)
    with pytest.raises(graphrt.PluginError, match=next(iter(flags))):
        graphrt.Session(_model(), plugins=[], custom_kernels=[line])


def test_the_declared_flags_cannot_change_after_the_line_is_made():
    flags = dict(DECLARED)
    line = api.OpDef("Nonzero", _make, domain=DOMAIN, flags=flags)
    flags["supports_exact"] = False
    assert line.kernel_flags.supports_exact is True
    with pytest.raises(TypeError):
        line.flags["supports_exact"] = False


class _Copy(api.OpKernel):
    supports_exact = True

    def infer(self, ctx):
        ctx.set_output(0, ctx.dtype(0), ctx.shape(0))

    def run(self, ctx, inputs, outputs):
        outputs[0][...] = inputs[0]


def test_a_kernel_path_kernel_is_planned_with_its_own_class_flags(flag_plugin):
    """The path's kernel (a data-dependent one without ``infer``) replaces a table line whose
    class infers: planned with the OpDef's flags, its missing infer would be called."""

    class PathNonzero(_Nonzero):  # not exact itself: exact support is the table line's
        outputs_data_dependent = True

    path = api.KernelPath(
        "flagpath", 1, lambda: True, {(DOMAIN, "Nonzero"): lambda node, base: PathNonzero(node)}
    )
    plugin = types.SimpleNamespace(
        graphrt_operators=api.hookimpl(lambda: [api.OpDef("Nonzero", _Copy, domain=DOMAIN)]),
        graphrt_kernel_paths=api.hookimpl(lambda: [path]),
    )
    graphrt.register_plugin(plugin, "ops-flagpath")
    try:
        x = np.array([0, 3, 0, -2, 5], np.float32)
        for mode in ("fast", "exact"):
            session = graphrt.Session(
                _model(), plugins=["ops-flagpath"], kernel_path="flagpath", mode=mode
            )
            np.testing.assert_array_equal(session.run(None, {"x": x})[0], [3, -2, 5])
        table = graphrt.Session(_model(), plugins=["ops-flagpath"], kernel_path="numpy")
        np.testing.assert_array_equal(table.run(None, {"x": x})[0], x)  # the table's own line
    finally:
        graphrt.unregister_plugin("ops-flagpath")
