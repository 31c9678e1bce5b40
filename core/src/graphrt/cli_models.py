"""Which file a ``graphrt`` command's MODEL names: a path, or a model shipped inside the installed
onnx package by name (``light_resnet50``, the default of ``run`` and ``profile``)."""

from __future__ import annotations

import os

from graphrt.cli_inputs import CLIError

__all__ = [
    "DEFAULT_MODEL",
    "LIGHT_NOTE",
    "default_model_path",
    "is_light",
    "light_model_names",
    "light_models_dir",
    "model_arg",
]

DEFAULT_MODEL = "light_resnet50"

#: Why a light model's outputs are constant: printed after them so that they do not look broken.
LIGHT_NOTE = (
    "note: onnx's light_* models keep a network's structure but not its weights (every weight "
    "is 0.02), so every class gets the same score whatever the input: a softmax over 1000 "
    "classes gives 0.001 each. Expected; a model with real weights gives real predictions."
)


def light_models_dir() -> str:
    """The folder of the light models shipped inside the installed onnx package (found, not
    imported: importing onnx takes most of a second)."""
    import importlib.util

    spec = importlib.util.find_spec("onnx")
    folders = list(spec.submodule_search_locations or []) if spec else []
    base = os.path.abspath(folders[0]) if folders else ""
    return os.path.join(base, "backend", "test", "data", "light")


def default_model_path() -> str:
    """light_resnet50.onnx as shipped inside the installed onnx package."""
    return os.path.join(light_models_dir(), f"{DEFAULT_MODEL}.onnx")


def light_model_names() -> list[str]:
    """The names ``graphrt run NAME`` accepts for onnx's shipped models (light_resnet50...)."""
    try:
        files = os.listdir(light_models_dir())
    except OSError:
        return []
    return sorted(f[: -len(".onnx")] for f in files if f.endswith(".onnx"))


def model_arg(path: str | None) -> tuple[str, str]:
    """(path, how to describe it) for MODEL: a file, or the name of a model shipped with onnx
    (``light_resnet50``, the default)."""
    if path is not None and os.path.exists(path):
        return path, path
    name = DEFAULT_MODEL if path is None else path
    shipped = os.path.join(light_models_dir(), f"{name}.onnx")
    if os.sep not in name and "/" not in name and os.path.isfile(shipped):
        how = "default model, " if path is None else ""
        return shipped, f"{name} ({how}from the onnx package: {shipped})"
    if path is None:
        raise CLIError(
            f"the default model {DEFAULT_MODEL} is not in the installed onnx package "
            f"(looked for {shipped}); give a MODEL path"
        )
    names = light_model_names()
    shipped_names = f"; models shipped with onnx: {', '.join(names)}" if names else ""
    raise CLIError(f"no such model file: {path!r}{shipped_names}")


def is_light(path: str) -> bool:
    """Whether ``path`` is one of onnx's light models (their weights are all 0.02)."""
    return os.path.dirname(os.path.abspath(path)) == light_models_dir()
