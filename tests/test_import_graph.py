"""The core imports one way: no cycle among ``graphrt`` modules.

Every import statement of every module under core/src/graphrt counts, those inside functions
included: a function-level import dodges a cycle at import time but keeps the modules tangled
(each needs the other to work).  Relative imports are resolved, and ``from graphrt import x``
counts as an import of the submodule ``graphrt.x`` when there is one.

Not counted: imports under ``if TYPE_CHECKING:`` (only a type checker runs them; annotations
are strings under ``from __future__ import annotations``), the import of each parent package
that Python adds implicitly (``import graphrt.x`` is an edge to ``graphrt.x`` only), and names
resolved through ``importlib`` by the lazy ``_LAZY`` tables of ``graphrt`` and ``graphrt.plugin``
(re-exports for users, never used by the core itself).
"""

from __future__ import annotations

import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "core" / "src"
PACKAGE = "graphrt"


def _module_names() -> dict[str, pathlib.Path]:
    """Dotted name of every module of the package, to its file."""
    found = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    """``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:``."""
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _runtime_nodes(tree: ast.AST):
    """Every node of the tree except the bodies of ``if TYPE_CHECKING:`` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)  # the else branch does run
            continue
        stack.extend(ast.iter_child_nodes(node))


def _imports(name: str, path: pathlib.Path, modules: dict) -> set[str]:
    """The package's modules that module ``name`` imports at run time, at any depth."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # from package import x: x is a submodule or a name of the package itself
            subs = [f"{target}.{alias.name}" for alias in node.names]
            targets = [sub for sub in subs if sub in modules]
            if len(targets) < len(subs):
                targets.append(target)
        else:
            continue
        for target in targets:
            # import graphrt.a.b: the deepest module of the package that the statement names
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _module_names()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def _edges_within(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    members = set(component)
    return [f"{a} -> {b}" for a in component for b in sorted(graph[a] & members)]


def test_the_graph_is_found():
    graph = import_graph()
    assert {"graphrt", "graphrt.session", "graphrt.kernel", "graphrt.passes"} <= set(graph)
    assert "graphrt.errors" in graph["graphrt.session"]
    assert "graphrt.kernel" in graph["graphrt.plugin"]


def test_no_cycle_among_graphrt_modules():
    graph = import_graph()
    found = cycles(graph)
    report = "\n".join(
        f"cycle {i}: {', '.join(c)}\n  " + "\n  ".join(_edges_within(graph, c))
        for i, c in enumerate(found, 1)
    )
    assert not found, f"import cycles among graphrt modules:\n{report}"


# The checker itself, on small graphs and sources: it must find what it is meant to find.


def test_tarjan_finds_a_cycle_and_ignores_a_chain():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}) == [["a", "b"], ["c", "d"]]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def f():\n    from graphrt import b\n", {"graphrt.b"}),
        ("from . import b\n", {"graphrt.b"}),
        ("from .b import thing\n", {"graphrt.b"}),
        ("import graphrt.b as bee\n", {"graphrt.b"}),
        ("from graphrt import Thing\n", {"graphrt"}),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from graphrt import b\n", set()),
        ("if TYPE_CHECKING:\n    pass\nelse:\n    from graphrt import b\n", {"graphrt.b"}),
        ("from ..c import x\n", {"graphrt.c"}),
    ],
)
def test_imports_are_resolved(tmp_path, source, expected):
    modules = {"graphrt": None, "graphrt.a": None, "graphrt.b": None, "graphrt.c": None}
    if source.startswith("from .."):  # a module one package down
        modules["graphrt.sub"] = modules["graphrt.sub.a"] = None
        name = "graphrt.sub.a"
    else:
        name = "graphrt.a"
    path = tmp_path / "a.py"
    path.write_text(source)
    assert _imports(name, path, modules) == expected


#: The core's layers, lowest first (issue 16): a module may import those before it, never one
#: after it.  Modules not named here (attrs, limits, dtypes...) only have to avoid cycles.
LAYERS = (
    "errors",
    "kernel",
    "ir",
    "passes",
    "compiled",
    "memory",
    "plan",
    "runstate",
    "subgraph",
    "session",
    "cli",
    "backend",
)


def test_the_core_imports_one_way_down_its_layers():
    graph = import_graph()
    place = {f"{PACKAGE}.{name}": i for i, name in enumerate(LAYERS)}
    upward = [
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in sorted(targets)
        if module in place and target in place and place[target] > place[module]
    ]
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def test_values_and_the_plan_stay_below_the_runtime():
    """Value helpers are a leaf; the plan is data: it never imports what runs it."""
    graph = import_graph()
    assert not {t for t in graph["graphrt.values"] if t.startswith(PACKAGE)}
    runtime = {"graphrt.runstate", "graphrt.subgraph", "graphrt.session"}
    for module in ("graphrt.compiled", "graphrt.plan", "graphrt.kernel"):
        assert not graph[module] & runtime, module
