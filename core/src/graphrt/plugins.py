"""Plugin discovery and the frozen operator table each session keeps.

Plugins come from entry points in the group ``graphrt.plugins`` (the built-in ones too) and from
:func:`register_plugin`.  ``GRAPHRT_DISABLE_PLUGIN_AUTOLOAD=1`` turns entry-point loading off,
as ``PYTEST_DISABLE_PLUGIN_AUTOLOAD`` does for pytest; ``GRAPHRT_DISABLE_PLUGINS=a,b`` blocks
the named plugins (their modules are not even imported; pluggy's ``set_blocked`` keeps a plugin
registered by hand or imported earlier out too).

A broken plugin never takes the host down: one that fails to import, implements a hook
:mod:`graphrt.hookspec` does not define (pluggy's ``check_pending``), names an argument its hook
does not have, or raises in a hook is reported with a :class:`~graphrt.errors.PluginLoadWarning`
naming it and left out; with ``GRAPHRT_STRICT_PLUGINS=1`` (or ``strict=True``) it is a
:class:`~graphrt.errors.PluginError` instead.  A plugin given to :func:`register_plugin` is
checked there and refused with a PluginError: the mistake is in the caller's own code.
"""

from __future__ import annotations

import dataclasses
import inspect
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
    "DISABLE_ENV",
    "ENTRY_POINT_GROUP",
    "OperatorTable",
    "STRICT_ENV",
    "blocked_plugins",
    "loaded_plugins",
    "plugin_failures",
    "register_plugin",
    "snapshot",
    "unregister_plugin",
]

ENTRY_POINT_GROUP = "graphrt.plugins"
AUTOLOAD_ENV = "GRAPHRT_DISABLE_PLUGIN_AUTOLOAD"
DISABLE_ENV = "GRAPHRT_DISABLE_PLUGINS"
STRICT_ENV = "GRAPHRT_STRICT_PLUGINS"

#: The hooks :mod:`graphrt.hookspec` defines.
HOOKS = ("graphrt_operators", "graphrt_graph_passes", "graphrt_kernel_paths")

_lock = threading.RLock()


@dataclasses.dataclass(frozen=True)
class _Found:
    """A plugin that passed pluggy's checks, and a plugin manager holding it alone: calling
    that manager's hooks gives this plugin's results apart from the others' (see _call_each)."""

    plugin: Any
    own: pluggy.PluginManager


_registered: dict[str, _Found] = {}  # name -> plugin, in registration order
#: (name, value) -> the checked plugin or why it is invalid: each entry point is imported and
#: checked once per process.
_entry_point_cache: dict[tuple[str, str], _Found | str] = {}
_failures: dict[str, str] = {}  # plugin name -> why it could not be used


def register_plugin(plugin: Any, name: str | None = None) -> str:
    """Register a plugin object or module by hand (tests, notebooks, applications).

    Sessions created afterwards see it; sessions already created keep their snapshot.  A plugin
    pluggy would refuse (an unknown hook, an argument its hook does not have) raises PluginError.
    """
    name = name or getattr(plugin, "__name__", None) or type(plugin).__name__
    checked = _check(plugin, name)
    if isinstance(checked, str):
        raise PluginError(f"graphrt plugin {name!r} is not a valid plugin: {checked}")
    with _lock:
        if name in _registered and _registered[name].plugin is not plugin:
            raise PluginError(f"a different plugin is already registered as {name!r}")
        _registered.setdefault(name, checked)
    return name


def unregister_plugin(name: str) -> None:
    with _lock:
        _registered.pop(name, None)
        _failures.pop(name, None)


def blocked_plugins(extra: Iterable[str] = ()) -> frozenset[str]:
    """The plugin names ``GRAPHRT_DISABLE_PLUGINS`` (comma-separated) and ``extra`` block."""
    names = {n.strip() for n in os.environ.get(DISABLE_ENV, "").split(",")}
    names.update(n.strip() for n in extra)
    names.discard("")
    return frozenset(names)


def _autoload_disabled() -> bool:
    return os.environ.get(AUTOLOAD_ENV, "").strip() not in ("", "0", "false", "False")


def _strict_default() -> bool:
    return os.environ.get(STRICT_ENV, "").strip() not in ("", "0", "false", "False")


def _report(
    name: str, who: str, what: str, why: str, strict: bool, cause: BaseException | None
) -> None:
    """A plugin that cannot be used (``who`` ``what``: ``why``): an error in strict mode, else
    a warning (once per reason) and an entry in :func:`plugin_failures`."""
    if strict:
        raise PluginError(f"{who} {what}: {why}") from cause
    with _lock:
        if _failures.get(name) == why:
            return
        _failures[name] = why
    warnings.warn(f"{who} {what} and was skipped: {why}", PluginLoadWarning, stacklevel=5)


def _entry_point_plugins(strict: bool, blocked: frozenset[str]) -> dict[str, _Found]:
    """Import and check every plugin module the installed distributions name, except blocked
    ones (cached per entry point; the distributions are read again only when sys.path or one
    of its folders changed)."""
    found: dict[str, _Found] = {}
    if _autoload_disabled():
        return found
    installed = entrypoints.entry_points(ENTRY_POINT_GROUP)
    with _lock:  # a distribution uninstalled since it failed is no failure any more
        names = {ep.name for ep in installed} | set(_registered)
        for name in [n for n in _failures if n not in names]:
            del _failures[name]
    for ep in installed:
        if ep.name in blocked or ep.name in found:
            continue  # blocked: never imported; a later distribution's duplicate is shadowed
        key = (ep.name, ep.value)
        with _lock:
            cached = _entry_point_cache.get(key)
        if cached is None:
            try:
                module = ep.load()
            except Exception as exc:
                why = f"{type(exc).__name__}: {exc}"
                _report(ep.name, _who(ep), "failed to load", why, strict, exc)
                continue
            cached = _check(module, ep.name)
            with _lock:
                _entry_point_cache[key] = cached
        if isinstance(cached, str):
            _report(ep.name, _who(ep), "is not a valid plugin", cached, strict, None)
            continue
        found[ep.name] = cached  # its failure, if any, is forgotten once a session uses it
    return found


def _who(ep: entrypoints.EntryPoint) -> str:
    return f"graphrt plugin {ep.name!r} ({ep.value}, from distribution {ep.dist_name})"


def loaded_plugins(strict: bool | None = None, blocked: Iterable[str] = ()) -> dict[str, Any]:
    """Every plugin a new session may use, by name, in registration order: the entry-point
    plugins sorted by name (neither blocked ones nor broken ones), then the registered ones.

    ``blocked`` adds to ``GRAPHRT_DISABLE_PLUGINS``.  A plugin registered by hand under a
    blocked name is listed here and kept out by the session's plugin manager.
    """
    strict = _strict_default() if strict is None else strict
    return {n: f.plugin for n, f in _available(strict, blocked_plugins(blocked)).items()}


def _available(strict: bool, blocked: frozenset[str]) -> dict[str, _Found]:
    found = _entry_point_plugins(strict, blocked)
    plugins = {name: found[name] for name in sorted(found)}
    with _lock:
        for name, checked in _registered.items():
            plugins.setdefault(name, checked)
    return plugins


def plugin_failures() -> dict[str, str]:
    """Plugins that could not be used, with the reason (shown by ``graphrt ops``)."""
    with _lock:
        return dict(_failures)


def _new_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager("graphrt")
    pm.add_hookspecs(hookspec)
    return pm


def _check(plugin: Any, name: str) -> _Found | str:
    """``plugin`` on a plugin manager of its own, or why pluggy refuses it: an implementation
    naming an argument its hook does not have (``register``), a hook no specification defines
    (``check_pending``), or a hook's function without ``@hookimpl``."""
    pm = _new_manager()
    try:
        pm.register(plugin, name=name)
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        unknown = [c.name for c in pm.get_hookcallers(plugin) or () if not c.has_spec()]
        if not unknown:
            return " ".join(str(exc).split())
        return "; ".join(_unknown_hook(hook) for hook in unknown)
    except ValueError as exc:  # pluggy refuses the object itself
        return str(exc)
    impls = {c.name for c in pm.get_hookcallers(plugin) or ()}
    unmarked = [h for h in HOOKS if h not in impls and _is_function(plugin, h)]
    if unmarked:
        return "; ".join(f"{h} is not marked with @graphrt.hookimpl" for h in unmarked)
    return _Found(plugin, pm)


def _is_function(plugin: Any, name: str) -> bool:
    value = inspect.getattr_static(plugin, name, None)  # runs no property
    return inspect.isroutine(value) or isinstance(value, (staticmethod, classmethod))


def _unknown_hook(hook: str) -> str:
    import difflib  # only for a broken plugin: not a cold-start cost

    close = difflib.get_close_matches(hook, HOOKS, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"it implements {hook}, which is not a graphrt hook{hint}"


@dataclasses.dataclass(frozen=True)
class OperatorTable:
    """An immutable snapshot of operators, passes and kernel paths for one session."""

    definitions: Mapping[tuple[str, str], tuple[OpDef, ...]]
    passes: tuple[Any, ...]
    paths: tuple[KernelPath, ...]
    plugins: tuple[str, ...]
    #: Plugin names blocked for this table (``GRAPHRT_DISABLE_PLUGINS``, ``blocked=``).
    blocked: tuple[str, ...] = ()
    #: Plugins that could not be used when the table was built (:func:`plugin_failures` says
    #: why): an error naming a missing operator can name them.
    failed: tuple[str, ...] = ()
    #: Answers of ``lookup`` (the table never changes): a model asks once per node.
    _found: dict[tuple[str, str, int], OpDef | None] = dataclasses.field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def lookup(self, domain: str, op_type: str, opset: int) -> OpDef | None:
        """The winning definition for this operator at this opset, or None.

        The highest priority wins whatever the plugins' order; an equal priority is a
        PluginError naming both plugins (or the one plugin that gives two such lines).
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
            if other.plugin == best.plugin:
                raise PluginError(
                    f"plugin {best.plugin!r} provides {where} twice with priority "
                    f"{best.priority}; its opset ranges overlap"
                )
            raise PluginError(
                f"plugins {best.plugin!r} and {other.plugin!r} both provide {where} with "
                f"priority {best.priority}; give one a higher priority or limit the session's "
                f"plugins (plugins=[...])"
            )
        self._found[key] = best
        return best

    def all_definitions(self) -> list[OpDef]:
        return [d for defs in self.definitions.values() for d in defs]


#: What one item of each hook's result must be (passes are duck-typed: a ``run`` method).
_ITEM_CHECKS: dict[str, Callable[[Any], bool]] = {
    "graphrt_operators": lambda item: isinstance(item, OpDef),
    "graphrt_graph_passes": lambda item: callable(getattr(item, "run", None)),
    "graphrt_kernel_paths": lambda item: isinstance(item, KernelPath),
}


def _call_each(
    pm: pluggy.PluginManager, found: Mapping[str, _Found], hook: str, strict: bool
) -> list[tuple[str, list[Any]]]:
    """Call ``hook`` the pluggy way (``manager.hook.<name>(**kwargs)``: an implementation gets
    the arguments it names), plugin by plugin in ``pm``'s call order, keeping each result's
    plugin name.

    One ``pm.hook.<name>(...)`` call would merge the results; graphrt needs to know which
    plugin gave what (priority ties, ``graphrt ops``) and which one raised, so each plugin's
    hook is called through the manager that holds that plugin alone.  A plugin that raises or
    returns something else than a list of the hook's items is reported and unregistered.
    """
    out = []
    # get_hookimpls() is the list pluggy's call walks from its end: tryfirst implementations,
    # then the plugins registered last, then trylast ones.
    for impl in reversed(getattr(pm.hook, hook).get_hookimpls()):
        if impl.wrapper or impl.hookwrapper:
            continue  # a wrapper wraps its own plugin's call (the plugin's own manager)
        name = impl.plugin_name
        try:
            results = getattr(found[name].own.hook, hook)(plugin_manager=pm)
            items = [item for result in results for item in _as_list(result)]
            bad = [item for item in items if not _ITEM_CHECKS[hook](item)]
            if bad:
                raise TypeError(f"{hook} returned {bad[0]!r} among its items")
            if hook == "graphrt_operators":
                for item in items:
                    item.check_flags()  # an unknown flag name: the plugin's table is refused
        except Exception as exc:
            why = f"{type(exc).__name__}: {exc}"
            _report(name, f"graphrt plugin {name!r}", f"failed in {hook}", why, strict, exc)
            pm.unregister(name=name)
            continue
        out.append((name, items))
    return out


def _as_list(result: Any) -> list[Any]:
    if not isinstance(result, (list, tuple)):
        raise TypeError(f"expected a list, got {type(result).__name__}")
    return list(result)


def snapshot(
    plugins: Sequence[str] | None = None,
    custom_kernels: Mapping[Any, Callable[[NodeInfo], OpKernel]] | Iterable[OpDef] | None = None,
    strict: bool | None = None,
    blocked: Iterable[str] = (),
) -> OperatorTable:
    """Build the frozen table for a new session.

    ``plugins`` is the session's allow-list of plugin names (None = all, [] = none); it
    chooses among the plugins found, in its own order.  ``blocked`` adds names to
    ``GRAPHRT_DISABLE_PLUGINS``: those are neither imported (entry points) nor used.
    ``custom_kernels`` are the session's own kernels: a mapping ``op_type`` or ``(domain,
    op_type)`` -> kernel class, or OpDef lines; they outrank every plugin.
    """
    strict = _strict_default() if strict is None else strict
    blocked = blocked_plugins(blocked)
    available = _available(strict, blocked)
    if plugins is not None:
        refused = [p for p in plugins if p in blocked]
        if refused:
            raise PluginError(
                f"plugin(s) {', '.join(map(repr, refused))} are named in plugins=[...] but "
                f"blocked ({DISABLE_ENV} or the session's block list)"
            )
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

    pm = _new_manager()
    for name in sorted(blocked):
        pm.set_blocked(name)  # a plugin registered by hand (or imported earlier) stays out too
    for name, obj in chosen.items():
        try:
            pm.register(obj.plugin, name=name)  # None for a blocked name
        except (ValueError, pluggy.PluginValidationError) as exc:
            raise PluginError(f"graphrt plugin {name!r} is not a valid plugin: {exc}") from exc
    try:
        pm.check_pending()  # every plugin was checked when found: this only guards that
    except pluggy.PluginValidationError as exc:
        name = pm.get_name(exc.plugin) or repr(exc.plugin)
        raise PluginError(f"graphrt plugin {name!r} is not a valid plugin: {exc}") from exc

    calls = {hook: _call_each(pm, chosen, hook, strict) for hook in HOOKS}
    used = tuple(name for name in chosen if pm.has_plugin(name))  # a failed hook unregistered
    rows = {hook: [(n, items) for n, items in calls[hook] if pm.has_plugin(n)] for hook in HOOKS}
    with _lock:
        for name in used:
            _failures.pop(name, None)
        failed = tuple(name for name in _failures if name not in blocked and name not in used)

    defs: dict[tuple[str, str], list[OpDef]] = {}
    for name, items in rows["graphrt_operators"]:
        for d in items:
            d = dataclasses.replace(d, plugin=name)
            defs.setdefault((d.domain, d.op_type), []).append(d)
    passes = [p for _, items in rows["graphrt_graph_passes"] for p in items]
    paths = [
        dataclasses.replace(p, plugin=name)
        for name, items in rows["graphrt_kernel_paths"]
        for p in items
    ]

    for d in _custom_definitions(custom_kernels):
        d.check_flags()
        defs.setdefault((d.domain, d.op_type), []).append(d)

    passes.sort(key=lambda p: getattr(p, "order", 0))  # stable: equal orders keep call order
    return OperatorTable(
        definitions={k: tuple(v) for k, v in defs.items()},
        passes=tuple(passes),
        paths=tuple(paths),
        plugins=used,
        blocked=tuple(sorted(blocked)),
        failed=failed,
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
