"""Plugin discovery and the frozen operator table each session keeps.

Plugins come from entry points in the group ``graphrt.plugins`` (the built-in ones too) and from
:func:`register_plugin`.  ``GRAPHRT_DISABLE_PLUGIN_AUTOLOAD=1`` turns entry-point loading off,
as ``PYTEST_DISABLE_PLUGIN_AUTOLOAD`` does for pytest.  A plugin that fails to import is reported
with a :class:`~graphrt.errors.PluginLoadWarning` naming it and is skipped; with
``GRAPHRT_STRICT_PLUGINS=1`` (or ``strict=True``) it is an error instead.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pluggy

from graphrt import entrypoints, hookspec
from graphrt.errors import PluginError, PluginLoadWarning
from graphrt.kernel import NodeInfo, OpDef, OpKernel
from graphrt.paths import KernelPath

__all__ = [
    "AUTOLOAD_ENV",
    "ENTRY_POINT_GROUP",
    "OperatorTable",
    "STRICT_ENV",
    "loaded_plugins",
    "register_plugin",
    "snapshot",
    "unregister_plugin",
]

ENTRY_POINT_GROUP = "graphrt.plugins"
AUTOLOAD_ENV = "GRAPHRT_DISABLE_PLUGIN_AUTOLOAD"
STRICT_ENV = "GRAPHRT_STRICT_PLUGINS"

_lock = threading.RLock()
_registered: dict[str, Any] = {}  # name -> plugin object, in registration order
_entry_point_cache: dict[tuple[str, str], Any] = {}  # (name, value) -> imported module
_failures: dict[str, str] = {}  # plugin name -> why it could not load


def register_plugin(plugin: Any, name: str | None = None) -> str:
    """Register a plugin object or module by hand (tests, notebooks, applications).

    Sessions created afterwards see it; sessions already created keep their snapshot.
    """
    name = name or getattr(plugin, "__name__", None) or type(plugin).__name__
    with _lock:
        if name in _registered and _registered[name] is not plugin:
            raise PluginError(f"a different plugin is already registered as {name!r}")
        _registered[name] = plugin
    return name


def unregister_plugin(name: str) -> None:
    with _lock:
        _registered.pop(name, None)


def _autoload_disabled() -> bool:
    return os.environ.get(AUTOLOAD_ENV, "").strip() not in ("", "0", "false", "False")


def _strict_default() -> bool:
    return os.environ.get(STRICT_ENV, "").strip() not in ("", "0", "false", "False")


def _entry_point_plugins(strict: bool) -> dict[str, Any]:
    """Import every plugin module the installed distributions name (cached per entry point;
    the distributions are read again only when sys.path or one of its folders changed)."""
    found: dict[str, Any] = {}
    if _autoload_disabled():
        return found
    for ep in entrypoints.entry_points(ENTRY_POINT_GROUP):
        key = (ep.name, ep.value)
        with _lock:
            module = _entry_point_cache.get(key)
        if module is None:
            try:
                module = ep.load()
            except Exception as exc:
                dist = ep.dist_name
                why = f"{type(exc).__name__}: {exc}"
                message = (
                    f"graphrt plugin {ep.name!r} ({ep.value}, from distribution {dist}) failed "
                    f"to load and was skipped: {why}"
                )
                if strict:
                    raise PluginError(message) from exc
                with _lock:
                    if _failures.get(ep.name) != why:
                        _failures[ep.name] = why
                        warnings.warn(message, PluginLoadWarning, stacklevel=4)
                continue
            with _lock:
                _entry_point_cache[key] = module
                _failures.pop(ep.name, None)
        found.setdefault(ep.name, module)
    return found


def loaded_plugins(strict: bool | None = None) -> dict[str, Any]:
    """Every plugin a new session would use, by name: entry points first, then registered."""
    strict = _strict_default() if strict is None else strict
    plugins = _entry_point_plugins(strict)
    with _lock:
        for name, obj in _registered.items():
            plugins.setdefault(name, obj)
    return plugins


def plugin_failures() -> dict[str, str]:
    """Plugins that failed to load, with the reason (shown by ``graphrt ops``)."""
    with _lock:
        return dict(_failures)


@dataclasses.dataclass(frozen=True)
class OperatorTable:
    """An immutable snapshot of operators, passes and kernel paths for one session."""

    definitions: Mapping[tuple[str, str], tuple[OpDef, ...]]
    passes: tuple[Any, ...]
    paths: tuple[KernelPath, ...]
    plugins: tuple[str, ...]
    #: Answers of ``lookup`` (the table never changes): a model asks once per node.
    _found: dict[tuple[str, str, int], OpDef | None] = dataclasses.field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def lookup(self, domain: str, op_type: str, opset: int) -> OpDef | None:
        """The winning definition for this operator at this opset, or None.

        Raises PluginError when the best two candidates tie on priority.
        """
        key = (domain, op_type, opset)
        try:
            return self._found[key]
        except KeyError:
            pass
        candidates = [d for d in self.definitions.get((domain, op_type), ()) if d.covers(opset)]
        if not candidates:
            self._found[key] = None
            return None
        candidates.sort(key=lambda d: -d.priority)
        best = candidates[0]
        if len(candidates) > 1 and candidates[1].priority == best.priority:
            other = candidates[1]
            where = f"{domain or 'ai.onnx'}::{op_type} (opset {opset})"
            raise PluginError(
                f"plugins {best.plugin!r} and {other.plugin!r} both provide {where} with "
                f"priority {best.priority}; give one a higher priority or limit the session's "
                f"plugins (plugins=[...])"
            )
        self._found[key] = best
        return best

    def all_definitions(self) -> list[OpDef]:
        return [d for defs in self.definitions.values() for d in defs]


def _call_each(hook: Any) -> list[tuple[str, list[Any]]]:
    """Call every implementation of a hook on its own, keeping the plugin's name.

    pluggy's normal call merges results; graphrt needs to know which plugin gave what (priority
    ties, ``graphrt ops``), and a plugin whose hook raises is reported by name.
    """
    out = []
    for impl in reversed(hook.get_hookimpls()):  # registration order
        try:
            result = impl.function()
        except Exception as exc:
            raise PluginError(
                f"graphrt plugin {impl.plugin_name!r} failed in {hook.name}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        out.append((impl.plugin_name, list(result or [])))
    return out


def snapshot(
    plugins: Sequence[str] | None = None,
    custom_kernels: Mapping[Any, Callable[[NodeInfo], OpKernel]] | Iterable[OpDef] | None = None,
    strict: bool | None = None,
) -> OperatorTable:
    """Build the frozen table for a new session.

    ``plugins`` is the session's allow-list of plugin names (None = all, [] = none).
    ``custom_kernels`` are the session's own kernels: a mapping ``op_type`` or ``(domain,
    op_type)`` -> kernel class, or OpDef lines; they outrank every plugin.
    """
    available = loaded_plugins(strict)
    if plugins is not None:
        unknown = [p for p in plugins if p not in available]
        if unknown:
            names = ", ".join(sorted(available)) or "none"
            raise PluginError(
                f"plugin(s) {', '.join(map(repr, unknown))} are not installed or failed to load; "
                f"available plugins: {names}"
            )
        chosen = {name: available[name] for name in plugins}
    else:
        chosen = available

    pm = pluggy.PluginManager("graphrt")
    pm.add_hookspecs(hookspec)
    for name, obj in chosen.items():
        try:
            pm.register(obj, name=name)
        except (ValueError, pluggy.PluginValidationError) as exc:
            raise PluginError(f"graphrt plugin {name!r} is not a valid plugin: {exc}") from exc

    defs: dict[tuple[str, str], list[OpDef]] = {}
    for name, result in _call_each(pm.hook.graphrt_operators):
        for d in result:
            d = dataclasses.replace(d, plugin=name)
            defs.setdefault((d.domain, d.op_type), []).append(d)
    passes = [p for _, result in _call_each(pm.hook.graphrt_graph_passes) for p in result]
    paths = [
        dataclasses.replace(p, plugin=name)
        for name, result in _call_each(pm.hook.graphrt_kernel_paths)
        for p in result
    ]

    for d in _custom_definitions(custom_kernels):
        defs.setdefault((d.domain, d.op_type), []).append(d)

    passes.sort(key=lambda p: getattr(p, "order", 0))
    return OperatorTable(
        definitions={k: tuple(v) for k, v in defs.items()},
        passes=tuple(passes),
        paths=tuple(paths),
        plugins=tuple(chosen),
    )


_CUSTOM_PRIORITY = 1 << 20


def _custom_definitions(custom: Any) -> list[OpDef]:
    if not custom:
        return []
    out: list[OpDef] = []
    items = custom.items() if isinstance(custom, Mapping) else [(None, d) for d in custom]
    for key, value in items:
        if isinstance(value, OpDef):
            out.append(
                dataclasses.replace(value, priority=_CUSTOM_PRIORITY, plugin="custom_kernels")
            )
            continue
        domain, op_type = ("", key) if isinstance(key, str) else key
        out.append(
            OpDef(op_type, value, domain=domain, priority=_CUSTOM_PRIORITY, plugin="custom_kernels")
        )
    return out
