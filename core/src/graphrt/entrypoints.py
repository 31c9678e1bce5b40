"""The entry points of one group, read from installed distributions without importlib.metadata.

``importlib.metadata`` imports email, zipfile, csv and pathlib: 100-300 ms on a cold start,
more than onnxruntime's whole import, to read a few ``entry_points.txt`` files.  The usual
layout, ``*.dist-info`` and ``*.egg-info`` folders in the directories of ``sys.path``, is read
here in importlib.metadata's order and with its rules: path entries in order, folders in
directory-listing order, the first distribution of a (normalized) name wins, ``name = value``
lines under ``[group]``.  Anything else (a zip or egg on sys.path, a meta-path finder that finds
distributions itself) is left to importlib.metadata.

The result is cached per process, keyed by sys.path and the modification times of its
directories: installing a distribution adds a folder to one of them, so a later call sees it.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import re
import stat
import sys
import threading
from typing import Any

__all__ = ["EntryPoint", "entry_points"]

# importlib.metadata.EntryPoint.pattern
_VALUE = re.compile(r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$")


@dataclasses.dataclass(frozen=True)
class EntryPoint:
    """One ``name = value`` line of a distribution's entry points."""

    name: str
    value: str
    group: str
    #: The distribution's metadata folder (None when importlib.metadata found it).
    folder: str | None = None
    #: importlib.metadata's EntryPoint, when it found this one.
    original: Any = dataclasses.field(default=None, compare=False, repr=False)

    def load(self) -> Any:
        """The object the value names: ``module`` or ``module:attr.attr``."""
        if self.original is not None:
            return self.original.load()
        match = _VALUE.match(self.value)
        if match is None:
            raise ValueError(f"entry point value {self.value!r} is not 'module[:attr]'")
        module = importlib.import_module(match.group("module"))
        attrs = filter(None, (match.group("attr") or "").split("."))
        return functools.reduce(getattr, attrs, module)

    @property
    def dist_name(self) -> str:
        """The distribution's name as its metadata states it ("?" when unreadable)."""
        if self.original is not None:
            return getattr(getattr(self.original, "dist", None), "name", "?") or "?"
        for file in ("METADATA", "PKG-INFO"):
            try:
                with open(os.path.join(self.folder or "", file), encoding="utf-8") as f:
                    for line in f:
                        if line.lower().startswith("name:"):
                            return line.split(":", 1)[1].strip()
                        if not line.strip():
                            break  # the end of the headers
            except OSError:
                continue
        return "?"


_lock = threading.Lock()
_cache: dict[str, tuple[Any, list[EntryPoint]]] = {}


def entry_points(group: str) -> list[EntryPoint]:
    """Every entry point of ``group`` among the installed distributions, in discovery order."""
    key = _state()
    with _lock:
        cached = _cache.get(group)
        if cached is not None and key is not None and cached[0] == key:
            return list(cached[1])
    # Something changed (or this is the first look): modules a new distribution brings must be
    # importable, so the import system's directory caches are refreshed too.
    importlib.invalidate_caches()
    found = _scan(group) if key is not None else _from_importlib(group)
    with _lock:
        _cache[group] = (key, found)
    return list(found)


def _state() -> tuple | None:
    """What the scan depends on (sys.path, its directories' mtimes), or None when the layout
    needs importlib.metadata."""
    from importlib.machinery import PathFinder

    for finder in sys.meta_path:
        if finder is not PathFinder and hasattr(finder, "find_distributions"):
            return None
    stamps = []
    for entry in sys.path:
        root = entry or "."
        try:
            st = os.stat(root)
        except OSError:
            stamps.append((entry, None))  # absent: importlib.metadata skips it too
            continue
        if not stat.S_ISDIR(st.st_mode) or root.lower().endswith(".egg"):
            return None  # a zip or an egg
        stamps.append((entry, st.st_mtime_ns))
    return tuple(stamps)


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower().replace("-", "_")


def _scan(group: str) -> list[EntryPoint]:
    seen: set[str] = set()
    found: list[EntryPoint] = []
    for entry in sys.path:
        root = entry or "."
        try:
            children = os.listdir(root)
        except OSError:
            continue
        by_name: dict[str, list[str]] = {}  # importlib.metadata's Lookup: grouped, first seen
        for child in children:
            low = child.lower()
            if low.endswith((".dist-info", ".egg-info")):
                name = _normalize(low.rpartition(".")[0].partition("-")[0])
                by_name.setdefault(name, []).append(child)
        for name, folders in by_name.items():
            for child in folders:
                if name in seen:
                    continue  # an earlier distribution of this name shadows it
                seen.add(name)
                folder = os.path.join(root, child)
                if os.path.isdir(folder):  # an egg-info file has no entry points
                    found += _read(folder, group)
    return found


def _read(folder: str, group: str) -> list[EntryPoint]:
    try:
        with open(os.path.join(folder, "entry_points.txt"), encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return []
    out: list[EntryPoint] = []
    section = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            continue
        if section == group and "=" in line:
            name, value = line.split("=", 1)
            out.append(EntryPoint(name.strip(), value.strip(), group, folder))
    return out


def _from_importlib(group: str) -> list[EntryPoint]:
    from importlib import metadata

    return [
        EntryPoint(ep.name, ep.value, group, original=ep)
        for ep in metadata.entry_points(group=group)
    ]
