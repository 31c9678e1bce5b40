"""graphrt: run ONNX models with numpy in and numpy out.

    import graphrt
    model = graphrt.load("model.onnx")
    y = model(x)

Operators come from plugins found through the ``graphrt.plugins`` entry point group.
"""

from __future__ import annotations

from graphrt.errors import PluginError, PluginLoadWarning, SessionError
from graphrt.hookspec import hookimpl
from graphrt.kernel import OpDef, OpKernel
from graphrt.plugins import register_plugin, unregister_plugin
from graphrt.profile import Profiler

__version__ = "0.1.0"

__all__ = [
    "CancellationToken",
    "Model",
    "OpDef",
    "OpKernel",
    "PluginError",
    "PluginLoadWarning",
    "Profiler",
    "Session",
    "SessionError",
    "hookimpl",
    "load",
    "register_plugin",
    "unregister_plugin",
]


def __getattr__(name: str):
    # Sessions pull in the planner; keep ``import graphrt`` light for plugins importing hookimpl.
    if name in ("Session", "Model", "load", "CancellationToken", "SessionOptions"):
        from graphrt import session

        return getattr(session, name)
    raise AttributeError(name)
