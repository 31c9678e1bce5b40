"""The published plugin API: the one module a graphrt plugin imports.

Everything a plugin needs is here, and only here is it promised to stay: the modules these
names come from (``graphrt.kernel``, ``graphrt.passes``, ``graphrt.paths``...) are the core's
own and may change shape between releases.  A plugin writes::

    from graphrt.plugin import InferContext, KernelContext, OpDef, OpKernel, hookimpl

The names, by what they are for:

- **Hook markers**: :data:`hookimpl` marks a plugin's ``graphrt_operators``,
  ``graphrt_graph_passes`` and ``graphrt_kernel_paths`` (specified in ``graphrt.hookspec``).
- **Kernels and their contexts**: :class:`OpKernel` (the base class, its flags and ``infer``/
  ``run``/``bind``), :class:`NodeInfo` (the node a kernel is built for), :class:`InferContext`
  (what ``infer`` sees and states), :class:`KernelContext` (what ``run`` sees),
  :class:`NeedsRunTimeValues` (an input's value is known at run time only),
  :func:`evaluate_node` (one kernel on concrete inputs: kernel tests), :class:`Body` (what
  ``node.compile_subgraph`` returns: a compiled If/Loop/Scan body) and :class:`SteadyBody`
  (one of its run states kept for many runs).
- **Operator definitions**: :class:`OpDef` (one line of a plugin's table), :class:`KernelFlags`
  and :data:`FLAG_NAMES` (the flags an OpDef declares), :func:`kernel_modules` and
  :class:`KernelRef` (kernel classes imported when a session first needs them).
- **Graph passes and their graph API**: :class:`GraphPass`, :class:`PassGraph`,
  :class:`PassNode`, :class:`PassContext`.
- **Kernel paths**: :class:`KernelPath` (alternative kernels chosen once per session).
- **Errors**: :class:`SessionError` (what a kernel raises for a bad model or input, with its
  kind), :class:`PluginError` (a plugin that cannot be used).
- **Helpers kernels legitimately need**: element types (:func:`from_onnx`, :func:`name_of`,
  ``TensorProto``, :func:`to_array`), the planner's limits (:data:`MAX_SLAB`, :data:`ALIGN`,
  :data:`ARRAY_OVERHEAD`, :func:`value_nbytes`), and for control-flow kernels running bodies
  (:func:`check_cancelled`, :func:`copy_value`, :func:`carry_pairs`).

Importing this module costs what ``import graphrt`` costs: the names from modules a session
imports anyway (passes, protobuf types, the body runner) are imported on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from graphrt.errors import PluginError, SessionError
from graphrt.hookspec import hookimpl
from graphrt.kernel import (
    FLAG_NAMES,
    Body,
    InferContext,
    KernelContext,
    KernelFlags,
    NeedsRunTimeValues,
    NodeInfo,
    OpDef,
    OpKernel,
    SteadyBody,
    evaluate_node,
)
from graphrt.lazy import KernelRef, kernel_modules, lazy_names
from graphrt.limits import ARRAY_OVERHEAD, DEFAULT_MAX_MEMORY, value_nbytes
from graphrt.paths import KernelPath

if TYPE_CHECKING:
    from graphrt.dtypes import from_onnx, name_of
    from graphrt.ir import check_cancelled
    from graphrt.memory import ALIGN
    from graphrt.passes import GraphPass, PassContext, PassGraph, PassNode
    from graphrt.proto import TensorProto, to_array
    from graphrt.values import carry_pairs, copy_value

__all__ = [
    "ALIGN",
    "ARRAY_OVERHEAD",
    "FLAG_NAMES",
    "MAX_SLAB",
    "Body",
    "GraphPass",
    "InferContext",
    "KernelContext",
    "KernelFlags",
    "KernelPath",
    "KernelRef",
    "NeedsRunTimeValues",
    "NodeInfo",
    "OpDef",
    "OpKernel",
    "PassContext",
    "PassGraph",
    "PassNode",
    "PluginError",
    "SessionError",
    "SteadyBody",
    "TensorProto",
    "carry_pairs",
    "check_cancelled",
    "copy_value",
    "evaluate_node",
    "from_onnx",
    "hookimpl",
    "kernel_modules",
    "name_of",
    "to_array",
    "value_nbytes",
]

#: The largest slab (bytes) a plan places by default: a kernel refusing an output or a work
#: buffer larger than any plan could hold says so with this figure.
MAX_SLAB: int = DEFAULT_MAX_MEMORY

#: Names imported on first access, and the core module each comes from.
_LAZY = {
    "GraphPass": "graphrt.passes",
    "PassContext": "graphrt.passes",
    "PassGraph": "graphrt.passes",
    "PassNode": "graphrt.passes",
    "from_onnx": "graphrt.dtypes",
    "name_of": "graphrt.dtypes",
    "TensorProto": "graphrt.proto",
    "to_array": "graphrt.proto",
    "ALIGN": "graphrt.memory",
    "check_cancelled": "graphrt.ir",
    "copy_value": "graphrt.values",
    "carry_pairs": "graphrt.values",
}


__getattr__, __dir__ = lazy_names("graphrt.plugin", _LAZY, globals())
