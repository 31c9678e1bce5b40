"""Kernel classes named in an operator table but imported when a session first needs them.

A plugin's table lists every operator it has; importing every kernel module to build it costs
a session start a few hundred milliseconds for operators the model never uses.  A
:class:`KernelRef` stands for a kernel class: it is a valid ``OpDef`` factory (calling it builds
the kernel, its attributes are the class's flags), and it imports the class's module on the
first call or flag read, once per process.  :func:`kernel_modules` gives a table stand-ins for
its kernel modules, so its lines keep the form ``OpDef("Add", binary.Add)``::

    binary, unary = kernel_modules(__package__, "binary unary")
    OPERATORS = [OpDef("Add", binary.Add), OpDef("Relu", unary.Relu)]

Constants a line needs (a domain string) must not come from a stand-in: every attribute of one
is a KernelRef.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from graphrt.errors import PluginError

__all__ = ["KernelModule", "KernelRef", "kernel_modules", "lazy_names"]


class KernelRef:
    """A kernel class by module and name, imported on first use (thread-safe: imports are)."""

    __slots__ = ("_target", "module", "name")

    def __init__(self, module: str, name: str) -> None:
        self.module = module
        self.name = name
        self._target: Any = None

    def resolve(self) -> Any:
        """The class itself, importing its module the first time."""
        target = self._target
        if target is None:
            try:
                target = getattr(importlib.import_module(self.module), self.name)
            except Exception as exc:
                raise PluginError(
                    f"kernel {self.module}.{self.name} cannot be imported: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            self._target = target
        return target

    @property
    def loaded(self) -> bool:
        return self._target is not None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)

    def __getattr__(self, attr: str) -> Any:
        # Only reached for names KernelRef does not have: the class's flags and methods.
        if attr in ("__name__", "__qualname__"):
            return self.name
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)  # copy, pickle and friends probe dunders: not the class's
        return getattr(self.resolve(), attr)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, KernelRef):
            return (self.module, self.name) == (other.module, other.name)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.module, self.name))

    def __repr__(self) -> str:
        return f"KernelRef({self.module}.{self.name})"


class KernelModule:
    """Stands for a kernel module in a table: ``module.Name`` is ``KernelRef(module, Name)``."""

    __slots__ = ("_refs", "module")

    def __init__(self, module: str) -> None:
        self.module = module
        self._refs: dict[str, KernelRef] = {}

    def __getattr__(self, name: str) -> KernelRef:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        ref = self._refs.get(name)
        if ref is None:
            ref = self._refs.setdefault(name, KernelRef(self.module, name))
        return ref

    def __repr__(self) -> str:
        return f"KernelModule({self.module})"


def kernel_modules(package: str | None, names: str) -> tuple[KernelModule, ...]:
    """Stand-ins for ``package.name`` for each space-separated name (a table's
    ``from . import a, b``)."""
    prefix = f"{package}." if package else ""
    return tuple(KernelModule(prefix + name) for name in names.split())


def lazy_names(
    module: str, table: dict[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module's ``__getattr__`` and ``__dir__`` for names imported on first access: ``table``
    maps each to the module it comes from; a name found is stored in ``namespace`` (the
    module's globals) so later lookups skip the function."""

    def getattr_(name: str) -> Any:
        source = table.get(name)
        if source is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(source), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(table))

    return getattr_, dir_
