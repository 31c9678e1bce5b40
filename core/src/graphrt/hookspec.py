"""Every hook a graphrt plugin can implement, in the order a session uses them.

A plugin is a module (or object) with functions marked ``@graphrt.hookimpl``, named by an entry
point in the group ``graphrt.plugins``::

    [project.entry-points."graphrt.plugins"]
    ops-example = "graphrt_ops_example.plugin"

The built-in plugins register exactly this way.  Hooks are called when a session is created,
never during a run; their results are frozen into the session's snapshot, so a plugin registered
later changes only sessions created later.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from graphrt.kernel import OpDef
    from graphrt.passes import GraphPass
    from graphrt.paths import KernelPath

hookspec = pluggy.HookspecMarker("graphrt")
hookimpl = pluggy.HookimplMarker("graphrt")


# -- operator table ------------------------------------------------------------------------------


@hookspec
def graphrt_operators() -> list[OpDef]:
    """The operator definitions this plugin provides.

    Fires when a session builds its operator table (once per top-level session creation).
    Results of every plugin are concatenated; for one (domain, op type, opset) the definition
    with the highest ``priority`` wins and an equal priority from two plugins is an error naming
    both.  A session's own ``custom_kernels`` outrank every plugin.
    """


# -- graph passes --------------------------------------------------------------------------------


@hookspec
def graphrt_graph_passes() -> list[GraphPass]:
    """Graph passes this plugin adds to the ordered pass table.

    Fires at session creation, after operators are resolved.  Results are concatenated and
    sorted by each pass's ``order`` (ties keep plugin registration order); the session runs those
    its optimization level and mode select.
    """


# -- kernel paths --------------------------------------------------------------------------------


@hookspec
def graphrt_kernel_paths() -> list[KernelPath]:
    """Faster kernel paths (native SIMD code) for operators that some plugin defines.

    Fires at session creation.  Every path reports whether this machine can run it; the session
    picks the best available one once (or the one the user forced), and for each operator the
    path covers, its factory replaces the table's.  Results are concatenated.
    """
