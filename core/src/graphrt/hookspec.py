"""Every hook a graphrt plugin can implement, in the order a session uses them.

A plugin is a module (or object) with functions marked ``@graphrt.hookimpl``, named by an entry
point in the group ``graphrt.plugins``::

    [project.entry-points."graphrt.plugins"]
    ops-example = "graphrt_ops_example.plugin"

The built-in plugins register exactly this way.  Hooks are called when a session is created,
never during a run; their results are frozen into the session's snapshot, so a plugin registered
later changes only sessions created later.

Calling convention (pluggy's, as pytest uses it):

- Arguments are passed by name, and an implementation names only those it needs: pluggy passes
  it nothing else.  A hook may therefore gain an argument in a later version without breaking a
  plugin written before it.  Naming an argument the hook does not have, or implementing a hook
  this module does not define (a misspelled ``graphrt_operator``), makes the plugin invalid: it
  is reported by name and not used (see docs/plugins.md, "Broken plugins").
- Results come in pluggy's call order: the plugin registered last is called first, and an
  implementation marked ``@hookimpl(tryfirst=True)`` (``trylast=True``) moves to the front
  (back).  Plugins register in a fixed order: the entry-point plugins sorted by name, then those
  given to ``graphrt.register_plugin`` in the order they were registered; a session with an
  allow-list (``plugins=[...]``) registers in the allow-list's order.  Each implementation is
  called on its own (so graphrt knows which plugin gave what), which makes a wrapper
  implementation see its own plugin's result only.

How each hook's results combine, and what an equal rank means, is said in its docstring.
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


# -- operator table (session creation, first) ----------------------------------------------------


@hookspec
def graphrt_operators(plugin_manager: pluggy.PluginManager) -> list[OpDef]:
    """The operator definitions this plugin provides.

    Fires when a session builds its operator table (once per top-level session creation, and
    for ``graphrt ops`` / ``graphrt check``).  Results of every plugin are concatenated.  Call
    order never decides an operator: for one (domain, op type, opset) the definition with the
    highest ``OpDef.priority`` wins, and an equal priority (from two plugins, or twice from
    one) is a ``PluginError`` naming the plugins, raised when a session needs that operator.
    A session's own ``custom_kernels`` outrank every plugin.

    :param plugin_manager: the session's pluggy plugin manager, holding this snapshot's plugins
        (``plugin_manager.has_plugin("ops-basic")``); read it, do not register from a hook.

    .. versionadded:: 0.1
       The ``plugin_manager`` argument too.
    """


# -- graph passes (session creation, after operators are resolved) -------------------------------


@hookspec
def graphrt_graph_passes(plugin_manager: pluggy.PluginManager) -> list[GraphPass]:
    """Graph passes this plugin adds to the ordered pass table.

    Fires at session creation.  Results are concatenated in call order (see the module's
    docstring) and sorted by each pass's ``order``, a stable sort: passes of equal ``order``
    run in call order, so those of the plugin registered last run first, and one plugin's
    passes in the order its list gives.  The core's own passes (constant folding, BatchNorm
    folding) run before every plugin's.  The session runs those its optimization level and
    mode select.

    :param plugin_manager: as for :func:`graphrt_operators`.

    .. versionadded:: 0.1
       The ``plugin_manager`` argument too.
    """


# -- kernel paths (session creation, last) -------------------------------------------------------


@hookspec
def graphrt_kernel_paths(plugin_manager: pluggy.PluginManager) -> list[KernelPath]:
    """Faster kernel paths (native SIMD code) for operators that some plugin defines.

    Fires at session creation.  Results are concatenated in call order.  Every path reports
    whether this machine can run it; the session picks the available path with the highest
    ``rank`` once (or the one the user forced by name), and for each operator the path covers,
    its factory replaces the table's.  Of two available paths of equal rank the one earlier in
    call order wins: that of the plugin registered last, or the first of one plugin's list.

    :param plugin_manager: as for :func:`graphrt_operators`.

    .. versionadded:: 0.1
       The ``plugin_manager`` argument too.
    """
