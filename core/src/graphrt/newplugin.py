"""``graphrt new-plugin NAME``: a ready plugin distribution to start from.

The files are templates shipped with the core (``graphrt/templates/plugin``, ``*.tmpl``, so
that neither ruff nor pytest takes them for the core's own code); ``{{key}}`` placeholders and
the ``__package__`` path segment are filled in.  The result installs (``pip install -e DIR``) and
passes its own tests and graphrt.testing's contract checks as generated.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

__all__ = ["PluginNames", "create_plugin", "plugin_names"]

TEMPLATE_DIR = Path(__file__).parent / "templates" / "plugin"

#: Plugins of the graphrt repository itself: a new plugin may not take their names.
RESERVED = frozenset({"basic", "controlflow", "simd", "ml", "example"})

_VALID = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


class NewPluginError(ValueError):
    """A name or directory ``new-plugin`` refuses (the message says why)."""


@dataclasses.dataclass(frozen=True)
class PluginNames:
    """The names one plugin goes by."""

    name: str  # "my-ops": what the user typed, normalised
    dist: str  # "graphrt-ops-my-ops": the distribution (pip install ...)
    package: str  # "graphrt_ops_my_ops": the import package
    plugin: str  # "ops-my-ops": the entry point, Session(plugins=[...]), --graphrt-plugin
    domain: str  # "com.example.my_ops": the example operator's domain


def plugin_names(raw: str) -> PluginNames:
    """Normalise ``raw`` (case, ``_``/``.``/spaces as ``-``, a ``graphrt-ops-`` or ``ops-``
    prefix dropped) and refuse what cannot name a distribution and a Python package."""
    name = re.sub(r"[-_.\s]+", "-", raw.strip().lower()).strip("-")
    for prefix in ("graphrt-ops-", "ops-"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    if not _VALID.match(name):
        raise NewPluginError(
            f"invalid plugin name {raw!r}: use letters, digits and dashes, starting with a letter "
            f"(e.g. 'audio' gives graphrt-ops-audio, import graphrt_ops_audio)"
        )
    if name in RESERVED:
        raise NewPluginError(
            f"invalid plugin name {raw!r}: graphrt-ops-{name} is one of graphrt's own plugins"
        )
    under = name.replace("-", "_")
    return PluginNames(
        name=name,
        dist=f"graphrt-ops-{name}",
        package=f"graphrt_ops_{under}",
        plugin=f"ops-{name}",
        domain=f"com.example.{under}",
    )


def core_requirement(version: str) -> str:
    """The ``graphrt`` pin of a new plugin: the core's current plugin-API range (the minor
    version before 1.0, the major one after)."""
    parts = [int(p) for p in re.findall(r"\d+", version)[:2]] + [0, 0]
    major, minor = parts[0], parts[1]
    if major == 0:
        return f"graphrt>={major}.{minor},<{major}.{minor + 1}"
    return f"graphrt>={major}.{minor},<{major + 1}"


def create_plugin(raw_name: str, directory: str | os.PathLike[str] | None = None) -> Path:
    """Write the plugin's files into ``directory`` (default ``./graphrt-ops-NAME``), which must
    not exist or be empty; returns the directory."""
    from graphrt import __version__

    names = plugin_names(raw_name)
    target = Path(directory if directory is not None else names.dist)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        what = "is not a directory" if not target.is_dir() else "is not empty"
        raise NewPluginError(f"{target} {what}: choose a new directory with --dir")
    values = {
        "name": names.name,
        "dist": names.dist,
        "package": names.package,
        "plugin": names.plugin,
        "domain": names.domain,
        "graphrt_req": core_requirement(__version__),
    }
    templates = sorted(p for p in TEMPLATE_DIR.rglob("*.tmpl") if p.is_file())
    if not templates:
        raise NewPluginError(f"the plugin templates are missing from {TEMPLATE_DIR}")
    for src in templates:
        rel = src.relative_to(TEMPLATE_DIR).with_suffix("")  # drop .tmpl
        rel = Path(*(names.package if part == "__package__" else part for part in rel.parts))
        text = src.read_text(encoding="utf-8")
        for key, value in values.items():
            text = text.replace("{{" + key + "}}", value)
        dest = target / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text, encoding="utf-8")
    return target
