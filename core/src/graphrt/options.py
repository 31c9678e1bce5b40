"""Session options: one dataclass, the one place where option values are checked.

``Session(model, options=SessionOptions(...), **overrides)`` and the backend take their option
names from this dataclass's fields, so an option is declared once.  Whether a ``kernel_path``
name is installed depends on the session's plugins; it is checked against them at creation
(:func:`graphrt.paths.choose_path`), everything else here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal, get_args

from graphrt.errors import SessionError
from graphrt.limits import DEFAULT_MAX_MEMORY

__all__ = [
    "OPTION_NAMES",
    "KernelPathName",
    "Mode",
    "OptimizationLevel",
    "SessionOptions",
    "WeightStorage",
    "session_options",
]

Mode = Literal["fast", "exact"]
OptimizationLevel = Literal["none", "basic", "all"]
WeightStorage = Literal["original", "float16", "bfloat16"]
#: "auto" (the best available path), "numpy" (the operator table's kernels), or the name of a
#: path a plugin provides ("scalar", "avx2", "avx512" from graphrt-ops-simd); None reads the
#: GRAPHRT_KERNEL_PATH environment variable, then "auto".
KernelPathName = Literal["auto", "numpy"] | str


@dataclasses.dataclass(frozen=True)
class SessionOptions:
    """How a session runs; every value is checked when the options are made."""

    mode: Mode = "fast"
    #: 0 = one thread per core.
    intra_op_threads: int = 0
    optimization_level: OptimizationLevel = "all"
    weight_storage: WeightStorage = "original"
    max_cached_plans: int = 16
    #: Allow-list of plugin names (None = every installed plugin, () = none).
    plugins: tuple[str, ...] | None = None
    #: The session's own kernels: ``op_type`` or ``(domain, op_type)`` -> kernel, or OpDefs.
    custom_kernels: Any = None
    check_shapes: bool = False
    kernel_path: KernelPathName | None = None
    #: Poison freed memory (a checked mode for kernel authors).
    debug: bool = False
    #: A plugin that fails to import is an error (None: the GRAPHRT_STRICT_PLUGINS variable).
    strict_plugins: bool | None = None
    #: Bytes one run may hold (slab, dynamic values, Loop/Scan accumulation, native scratch).
    max_memory: int = DEFAULT_MAX_MEMORY

    def __post_init__(self) -> None:
        _choice("mode", self.mode, Mode)
        _choice("optimization_level", self.optimization_level, OptimizationLevel)
        _choice("weight_storage", self.weight_storage, WeightStorage)
        if not _is_int(self.max_cached_plans) or self.max_cached_plans < 1:
            _refuse(f"max_cached_plans must be a positive integer, not {self.max_cached_plans!r}")
        if not _is_int(self.intra_op_threads) or self.intra_op_threads < 0:
            _refuse(
                "intra_op_threads must be 0 (one per core) or a positive integer, not "
                f"{self.intra_op_threads!r}"
            )
        if not _is_int(self.max_memory) or self.max_memory < 1:
            _refuse(f"max_memory must be a positive integer (bytes), not {self.max_memory!r}")
        if self.plugins is not None:
            if isinstance(self.plugins, (str, bytes)) or not _iterable(self.plugins):
                _refuse(
                    f"plugins must be a list of plugin names (or None for all), not "
                    f"{self.plugins!r}; for one plugin pass [{self.plugins!r}]"
                )
            names = tuple(self.plugins)
            if not all(isinstance(p, str) for p in names):
                _refuse(f"plugins must be a list of plugin names, got {names!r}")
            object.__setattr__(self, "plugins", names)  # a list given is kept as a tuple
        if self.kernel_path is not None and (
            not isinstance(self.kernel_path, str) or not self.kernel_path
        ):
            _refuse(f"kernel_path must be a path name or None, not {self.kernel_path!r}")
        for name in ("check_shapes", "debug"):
            if not isinstance(getattr(self, name), bool):
                _refuse(f"{name} must be True or False, not {getattr(self, name)!r}")
        if self.strict_plugins is not None and not isinstance(self.strict_plugins, bool):
            _refuse(f"strict_plugins must be True, False or None, not {self.strict_plugins!r}")


#: Every option name, from the dataclass fields (the backend filters its keywords with it).
OPTION_NAMES = frozenset(f.name for f in dataclasses.fields(SessionOptions))


def session_options(options: SessionOptions | None, overrides: Mapping[str, Any]) -> SessionOptions:
    """``options`` (or the defaults) with ``overrides`` applied; unknown names are refused."""
    if options is not None and not isinstance(options, SessionOptions):
        _refuse(f"options must be a graphrt.SessionOptions, not {type(options).__name__}")
    unknown = [k for k in overrides if k not in OPTION_NAMES]
    if unknown:
        import difflib

        hints = []
        for k in unknown:
            close = difflib.get_close_matches(k, sorted(OPTION_NAMES), n=1)
            hints.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        _refuse(
            f"unknown session option(s) {', '.join(hints)}; the options are "
            f"{', '.join(sorted(OPTION_NAMES))}"
        )
    if options is None:
        return SessionOptions(**overrides)
    return dataclasses.replace(options, **overrides) if overrides else options


def _choice(name: str, value: Any, kind: Any) -> None:
    choices = get_args(kind)
    if not isinstance(value, str) or value not in choices:
        _refuse(f"{name} must be one of {', '.join(map(repr, choices))}, not {value!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _iterable(value: Any) -> bool:
    try:
        iter(value)
    except TypeError:
        return False
    return True


def _refuse(message: str) -> None:
    raise SessionError("unsupported", message)
