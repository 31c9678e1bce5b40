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
from graphrt.lazy import lazy_names
from graphrt.plugins import register_plugin, unregister_plugin
from graphrt.profile import Profiler

__version__ = "0.1.0"

__all__ = [
    "CancellationToken",
    "Model",
    "NodeArg",
    "OpDef",
    "OpKernel",
    "PluginError",
    "PluginLoadWarning",
    "Profiler",
    "Session",
    "SessionError",
    "SessionOptions",
    "hookimpl",
    "load",
    "register_plugin",
    "unregister_plugin",
]


#: Names resolved at first use (sessions pull in the planner; ``import graphrt`` stays light for
#: plugins importing hookimpl), and the module each comes from.
_LAZY = {
    "CancellationToken": "graphrt.session",
    "Model": "graphrt.session",
    "NodeArg": "graphrt.session",
    "Session": "graphrt.session",
    "load": "graphrt.session",
    "SessionOptions": "graphrt.options",
}


#: ``dir(graphrt)`` lists the lazy names too (tab completion).
__getattr__, __dir__ = lazy_names("graphrt", _LAZY, globals())
