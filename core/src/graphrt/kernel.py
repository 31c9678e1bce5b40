"""The operator contract: what a plugin writes to add an operator.

One operator (or one family) is one :class:`OpKernel` subclass plus one :class:`OpDef` line in
its plugin's table.  A kernel object is built once per node when a session is created and is
shared by every plan and every concurrent run, so it holds only what the node's attributes fixed.
Everything that depends on input shapes is computed in :meth:`OpKernel.infer` and handed back to
:meth:`OpKernel.run` through ``ctx.prepared``.

The planner calls ``infer`` once per plan (once per run for dynamic nodes); ``run`` writes into
output arrays the plan already placed in the run state's slab, so a steady-state run allocates
nothing.  Kernels that cannot know their output shapes before running set
``outputs_data_dependent`` and allocate through :meth:`KernelContext.allocate_output`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

import numpy as np

from graphrt.errors import PluginError, SessionError
from graphrt.limits import check_holdable

__all__ = [
    "FLAG_NAMES",
    "Body",
    "SteadyBody",
    "InferContext",
    "KernelContext",
    "KernelFlags",
    "NeedsRunTimeValues",
    "NodeInfo",
    "OpDef",
    "OpKernel",
    "evaluate_node",
]

Shape = tuple[int, ...]


class SteadyBody(Protocol):
    """One run state of a body kept while a kernel runs the body again and again (a Loop's
    iterations, a Scan's steps): write into :attr:`inputs`, call :meth:`run`, read
    :attr:`outputs` (valid until the next run), and :meth:`close` it at the end."""

    #: The staging arrays of the body's inputs (then outer values): assign in place.
    inputs: list[np.ndarray]
    #: The body's outputs: arrays of the run state (or constants), fixed for its life.
    outputs: list[Any]
    #: Element types and shapes of inputs and outputs (None: not a tensor).
    input_types: list[Any]
    output_types: list[Any]
    #: Per input: whether what was written into it survives a run (write it once).
    lasting: list[bool]
    #: The bound steps :meth:`run` calls in order (a hot loop may call them itself).
    program: list[Callable[[], Any]]
    #: The caller's cancellation token (None: not cancellable).
    token: Any

    def enter(self) -> None: ...
    def run(self) -> None: ...
    def failure(self, exc: BaseException, f: Any) -> BaseException: ...
    def passes_through(self, output: int, input: int) -> bool: ...
    def close(self, runs: int = 0) -> None: ...


class Body(Protocol):
    """A compiled subgraph (If branch, Loop/Scan/SequenceMap body), what
    ``NodeInfo.compile_subgraph`` returns: the kernel contract's side of it.  The session
    supplies the implementation (:class:`graphrt.subgraph.BodySession`) to the compiler, so the
    compiler and the kernels never import the runtime that runs bodies."""

    #: Declared inputs of the body (before the outer-scope values).
    num_inputs: int
    num_outputs: int
    #: Names of enclosing values the body reads, in the order ``run`` expects them.
    outer_names: tuple[str, ...]
    #: The compiled body (``graph.outputs``: its declared outputs).
    graph: Any

    @property
    def exact(self) -> bool: ...

    def run(self, values: Sequence[Any], ctx: Any = None) -> list[Any]:
        """Outputs (the caller's own) of one run on inputs then outer values."""
        ...

    def steady(self, values: Sequence[Any], ctx: Any = None) -> SteadyBody | None:
        """A kept run state for many runs, or None when the body's plan is not static."""
        ...

    def bound(self, values: Sequence[Any], ctx: Any) -> Callable[[], list[Any]] | None:
        """For a kernel's ``bind``: a call running the body on these fixed arrays, or None."""
        ...

    def plan_for_types(
        self,
        types: Sequence[tuple[np.dtype, tuple[int, ...]]],
        check_shapes: bool = False,
        cancellation: Any = None,
    ) -> Any:
        """The body's plan for inputs (then outer values) of these types and shapes."""
        ...

    def outer_values(self, node_outer: Sequence[str], given: Sequence[Any]) -> list[Any]:
        """This body's outer values, picked from those its node received."""
        ...


@dataclasses.dataclass(frozen=True)
class NodeInfo:
    """What a kernel factory may read of the node it is built for."""

    name: str
    op_type: str
    domain: str
    opset: int
    attrs: dict[str, Any]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    #: The ``onnx.NodeProto`` for factories that need graph attributes (If, Loop, Scan).
    proto: Any = None
    #: Values of enclosing graphs the node's subgraphs read, in first-use order.  They follow
    #: the declared inputs in what ``run`` receives, so planning and freeing see them.
    outer_inputs: tuple[str, ...] = ()
    #: ``compile_subgraph(graph_proto)`` -> :class:`Body`: the body compiled once, in the
    #: session's mode, kernel path and operator table.
    compile_subgraph: Callable[[Any], Body] | None = dataclasses.field(
        default=None, compare=False, repr=False
    )

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    @property
    def label(self) -> str:
        return f"{self.op_type} node {self.name!r}" if self.name else f"{self.op_type} node"


class NeedsRunTimeValues(Exception):
    """Raised by :meth:`InferContext.value` when an input's value is unknown at plan time.

    The planner catches it and schedules the node as dynamic: shaped again in every run with the
    real input values.  Kernels normally never catch it themselves.
    """


class OpKernel:
    """Base class of every kernel.

    Subclasses set the class flags and implement :meth:`infer` and :meth:`run`.  The constructor
    receives the :class:`NodeInfo`; it should parse and validate attributes once, raising
    ``SessionError("invalid_model", ...)`` for bad ones.
    """

    #: Follows docs/exact-mode.md when ``ctx.exact`` is set; False means "not exact".
    supports_exact: ClassVar[bool] = False
    #: Output 0 may share the storage of this input when that input dies at this node (unless
    #: ``infer`` declines for the shapes at hand: ``ctx.decline_in_place()``).
    in_place_input: ClassVar[int | None] = None
    #: Output 0 is input 0 reinterpreted with the inferred shape; ``run`` is never called.
    view_of_input: ClassVar[bool] = False
    #: Output shapes depend on input values: ``infer`` is not called, ``run`` allocates.
    outputs_data_dependent: ClassVar[bool] = False
    #: With ``outputs_data_dependent``: the planner calls ``infer`` all the same, which may state
    #: the outputs for input types where they are known (an If whose branches agree: the step
    #: is then static and ``run`` gets placed outputs) or raise NeedsRunTimeValues (dynamic).
    infers_when_static: ClassVar[bool] = False

    def __init__(self, node: NodeInfo) -> None:
        self.node = node

    def infer(self, ctx: InferContext) -> None:
        """State every output's element type and shape for the concrete input shapes."""
        raise NotImplementedError(f"{type(self).__name__}.infer")

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        """Compute the outputs into the arrays in ``outputs`` (absent optional ones are None)."""
        raise NotImplementedError(f"{type(self).__name__}.run")

    def bind(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        """Return a zero-argument callable that runs this step on fixed arrays.

        Called once per run state for static steps, so the run loop is a list of calls.  A kernel
        may return something cheaper than the default (``functools.partial(np.add, a, b,
        out=c)``) as long as it computes the same bits as :meth:`run`.
        """
        return functools.partial(self.run, ctx, inputs, outputs)

    def assembled_offsets(
        self, input_shapes: Sequence[tuple[int, ...]], output_shape: tuple[int, ...]
    ) -> list[int] | None:
        """Where each input's elements lie in output 0, when output 0 is nothing but the inputs
        laid end to end, unchanged and in order (a Concat with only unit dimensions before its
        axis): their element offsets.  None, the default, otherwise.

        Called by the planner with the step's static shapes.  Offsets let it place every input
        inside output 0's storage, so each producer writes its part in place, and skip the step.
        """
        return None

    # -- helpers for kernels -------------------------------------------------------------
    def fail(self, message: str, kind: str = "invalid_model") -> SessionError:
        return SessionError(kind, f"{self.node.label}: {message}", node=self.node.name)


@dataclasses.dataclass(frozen=True)
class KernelFlags:
    """The flags of one operator's kernel, as the planner and the session read them.

    Read from an :class:`OpDef` (``op_def.kernel_flags``), never from a kernel object: a
    factory that is a function has no class to read, and the planner must know the flags of
    every node before it builds or runs anything.  The meaning of each is on :class:`OpKernel`.
    """

    supports_exact: bool = False
    in_place_input: int | None = None
    view_of_input: bool = False
    outputs_data_dependent: bool = False
    infers_when_static: bool = False

    @classmethod
    def of(cls, source: Any) -> KernelFlags:
        """The flags a kernel class (a KernelRef, a kernel object) sets, defaults elsewhere."""
        return cls(**{name: getattr(source, name, getattr(cls, name)) for name in FLAG_NAMES})


#: Every flag an OpDef may declare (``OpDef(..., flags={"supports_exact": True})``).
FLAG_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(KernelFlags))


@dataclasses.dataclass(frozen=True)
class OpDef:
    """One line of a plugin's operator table.

    ``since`` and ``until`` bound the opset versions (of ``domain``) the kernel implements,
    both inclusive; ``until=None`` means every later version.  ``priority`` settles two plugins
    claiming the same operator: the higher wins, a tie is an error naming both.

    The kernel's flags are declared once per line: read from the kernel class when the factory
    is one (or a :class:`graphrt.lazy.KernelRef`, read when first needed), and given as
    ``flags={"supports_exact": True, ...}`` when the factory is a function (given for a class,
    they override its attributes).  The session reads them here only (:attr:`kernel_flags`);
    an unknown name is refused when the plugin's table is registered (:meth:`check_flags`).
    """

    op_type: str
    factory: Callable[[NodeInfo], OpKernel]
    since: int = 1
    until: int | None = None
    domain: str = ""
    priority: int = 0
    #: Filled in by the plugin manager: the plugin that provided this definition.
    plugin: str = ""
    #: Declared flags (names from :data:`FLAG_NAMES`); None or empty: the factory class's own.
    flags: Mapping[str, Any] | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.flags is not None:  # a read-only copy: the caller's dict may change later
            object.__setattr__(self, "flags", types.MappingProxyType(dict(self.flags)))

    @property
    def label(self) -> str:
        return f"{self.domain}.{self.op_type}" if self.domain else self.op_type

    def check_flags(self) -> None:
        """Refuse declared flags that are unknown or of the wrong type (PluginError naming the
        plugin and operator): called when a plugin's table is registered."""
        declared = dict(self.flags or {})
        who = f"plugin {self.plugin!r}, operator {self.label}" if self.plugin else self.label
        unknown = sorted(set(declared) - set(FLAG_NAMES))
        if unknown:
            raise PluginError(
                f"{who}: unknown kernel flag(s) {', '.join(map(repr, unknown))} in OpDef.flags; "
                f"known flags: {', '.join(FLAG_NAMES)}"
            )
        for name, value in declared.items():
            if name == "in_place_input":
                ok = value is None or (isinstance(value, int) and not isinstance(value, bool))
                ok = ok and (value is None or value >= 0)
            else:
                ok = isinstance(value, bool)
            if not ok:
                want = "an input index or None" if name == "in_place_input" else "True or False"
                raise PluginError(f"{who}: kernel flag {name!r} is {value!r}, expected {want}")

    @functools.cached_property
    def kernel_flags(self) -> KernelFlags:
        """The flags the session plans and checks this operator with (computed once; for a
        KernelRef factory this imports the kernel's module)."""
        factory = self.factory
        is_class = isinstance(factory, type) or hasattr(type(factory), "resolve")
        base = KernelFlags.of(factory) if is_class else KernelFlags()
        return dataclasses.replace(base, **self.flags) if self.flags else base

    def covers(self, opset: int) -> bool:
        return self.since <= opset and (self.until is None or opset <= self.until)

    def overlaps(self, other: OpDef) -> bool:
        lo = max(self.since, other.since)
        hi_a = self.until if self.until is not None else 1 << 30
        hi_b = other.until if other.until is not None else 1 << 30
        return lo <= min(hi_a, hi_b)

    def flag(self, name: str) -> Any:
        """One of :attr:`kernel_flags` by name."""
        return getattr(self.kernel_flags, name)

    @property
    def opset_range(self) -> str:
        return f"{self.since}+" if self.until is None else f"{self.since}-{self.until}"


class InferContext:
    """What ``infer`` sees: input types, shapes and (when known) values; where it states outputs."""

    __slots__ = (
        "_const",
        "_dtypes",
        "_out",
        "_shapes",
        "_values",
        "exact",
        "in_place",
        "prepared",
        "read",
        "scratch",
    )

    def __init__(
        self,
        dtypes: Sequence[np.dtype | None],
        shapes: Sequence[Shape | None],
        values: Sequence[Any],
        n_outputs: int,
        exact: bool = False,
    ) -> None:
        self._dtypes = list(dtypes)
        self._shapes = list(shapes)
        self._values = list(values)
        self._out: list[tuple[np.dtype, Shape] | None] = [None] * n_outputs
        self._const: list[Any] = [None] * n_outputs
        #: Per-plan data the kernel hands to ``run`` (a reshaped weight, a chosen path).
        self.prepared: Any = None
        self.exact = exact
        #: (dtype, shape) of temporary arrays ``run`` needs; placed in the slab by the planner.
        self.scratch: list[tuple[np.dtype, Shape]] = []
        #: Inputs whose values ``infer`` read: a dynamic node's result depends on these only.
        self.read: set[int] = set()
        #: False once the kernel declined its ``in_place_input`` for these shapes.
        self.in_place = True

    @property
    def num_inputs(self) -> int:
        return len(self._dtypes)

    @property
    def num_outputs(self) -> int:
        return len(self._out)

    def has_input(self, i: int) -> bool:
        return i < len(self._dtypes) and self._dtypes[i] is not None

    def dtype(self, i: int) -> np.dtype:
        return self._dtypes[i]

    def shape(self, i: int) -> Shape:
        return self._shapes[i]

    def value(self, i: int) -> np.ndarray:
        """The input's value: a constant at plan time, the real tensor for dynamic nodes.

        Raises :class:`NeedsRunTimeValues` when the value is not known yet; the planner then makes
        the node dynamic and calls ``infer`` again in every run.
        """
        v = self._values[i] if i < len(self._values) else None
        if v is None:
            raise NeedsRunTimeValues(i)
        self.read.add(i)
        return v

    def known_value(self, i: int) -> np.ndarray | None:
        """The input's value if known now, else None (never makes the node dynamic)."""
        self.read.add(i)
        return self._values[i] if i < len(self._values) else None

    def set_output(self, i: int, dtype: Any, shape: Sequence[int]) -> None:
        if i >= len(self._out):
            return
        self._out[i] = (np.dtype(dtype), tuple(int(d) for d in shape))

    def set_constant_output(self, i: int, value: Any) -> None:
        """State that output i is this constant for these shapes (Shape, Size, Constant)."""
        if i >= len(self._out):
            return
        arr = np.asarray(value)
        self._const[i] = arr
        self._out[i] = (arr.dtype, arr.shape)

    def add_scratch(self, dtype: Any, shape: Sequence[int]) -> int:
        """Ask for a temporary array live only during this step; ``ctx.scratch[k]`` in run."""
        self.scratch.append((np.dtype(dtype), tuple(int(d) for d in shape)))
        return len(self.scratch) - 1

    def decline_in_place(self) -> None:
        """Keep output 0 out of the ``in_place_input``'s storage for these inputs: the flag says
        the kernel may write over that input, and this plan cannot (a native kernel whose
        partial sums would overwrite the input before it is read; a fallback that reads it
        last)."""
        self.in_place = False

    # -- read by the planner -------------------------------------------------------------
    def output_types(self) -> list[tuple[np.dtype, Shape] | None]:
        return self._out

    def constant_outputs(self) -> list[Any]:
        return self._const


class KernelContext:
    """What ``run`` sees besides its arrays; one per step per run state, reused across runs."""

    __slots__ = (
        "allocated",
        "arena",
        "exact",
        "inferred",
        "limits",
        "node",
        "pool",
        "prepared",
        "scratch",
        "shape_bindings",
    )

    def __init__(
        self,
        prepared: Any = None,
        scratch: Sequence[np.ndarray] = (),
        exact: bool = False,
        pool: Any = None,
        arena: Any = None,
        node: NodeInfo | None = None,
        limits: Any = None,
    ) -> None:
        self.prepared = prepared
        self.scratch = list(scratch)
        self.exact = exact
        #: :class:`graphrt.threads.IntraOpPool`; ``pool.map_chunks(n, fn)`` splits work.
        self.pool = pool
        self.arena = arena
        self.allocated: list[Any] = []
        self.node = node
        #: The run's binding map of symbolic dims when ``check_shapes`` is on (else None):
        #: bodies run through :meth:`BodySession.run` with this context share it.
        self.shape_bindings: dict[str, Any] | None = None
        #: A dynamic step's last ``infer`` result, reused while its inputs' types and the values
        #: it read are the same (graphrt.runstate).
        self.inferred: Any = None
        #: The run's :class:`graphrt.limits.RunLimits` (memory budget, cancellation token), or
        #: None outside a run (kernel tests): then nothing is counted.
        self.limits = limits

    def allocate_output(self, i: int, dtype: Any, shape: Sequence[int]) -> np.ndarray:
        """For data-dependent kernels: an output array of the given type and shape, counted
        against the run's memory budget before it is allocated."""
        dtype = np.dtype(dtype)
        shape = tuple(shape)
        check_holdable(dtype, shape, f"output {i}", "invalid_input", self.node)
        if self.arena is not None:
            arr = self.arena.allocate(dtype, shape, self.node)
        else:
            if self.limits is not None:
                self.limits.charge(math.prod(shape) * dtype.itemsize, self.node, "an output")
            arr = np.empty(shape, dtype=dtype)
        while len(self.allocated) <= i:
            self.allocated.append(None)
        self.allocated[i] = arr
        return arr

    def set_output(self, i: int, value: Any) -> None:
        """For data-dependent kernels whose output is not a tensor (sequences, optionals), or
        a tensor they made themselves (counted against the budget here, after the fact; a
        kernel building a sequence counts the arrays it copies with :meth:`charge`)."""
        if self.limits is not None and isinstance(value, np.ndarray):
            self.limits.charge(value.nbytes, self.node, "an output")
        while len(self.allocated) <= i:
            self.allocated.append(None)
        self.allocated[i] = value

    def charge(self, nbytes: int, what: str = "values it keeps") -> None:
        """Count memory the kernel is about to allocate itself (a loop's growing outputs)
        against the run's budget; ``SessionError("resource_exhausted")`` when over it."""
        if self.limits is not None:
            self.limits.charge(nbytes, self.node, what)

    def release(self, nbytes: int) -> None:
        """Give back bytes charged earlier in this run that the kernel no longer keeps."""
        if self.limits is not None:
            self.limits.release(nbytes)

    def reserve(self, nbytes: int, what: str = "native work space") -> None:
        """Count work space allocated outside the plan while the step runs (a native
        kernel's per-thread buffers), for the whole run state; may be called every run."""
        if self.limits is not None:
            self.limits.reserve(nbytes, self.node, what)

    @property
    def threads(self) -> int:
        """How many intra-op threads a kernel may split its work over (a native library's own
        threads sized to match): the session's ``intra_op_threads``, 1 outside a run.  As with
        :meth:`parallel_for`, results must not depend on it."""
        return getattr(self.pool, "threads", 1)

    def parallel_for(self, n: int, fn: Callable[[int], None]) -> None:
        """Call ``fn(i)`` for i in range(n), split over the intra-op threads.

        The split is over independent outputs, and ``n`` must depend on shapes only, never on the
        thread count, so results do not depend on how many threads ran them.
        """
        if self.pool is None or n <= 1:
            for i in range(n):
                fn(i)
        else:
            self.pool.parallel_for(n, fn)


def evaluate_node(
    kernel: OpKernel,
    inputs: Sequence[Any],
    num_outputs: int,
    exact: bool = False,
    pool: Any = None,
    limits: Any = None,
    flags: KernelFlags | None = None,
) -> list[Any]:
    """Run one kernel on concrete inputs, allocating its outputs.

    Used for constant evaluation at plan time, for dynamic nodes and by tests of single kernels.
    The result is the same as inside a plan: the same ``infer`` and ``run`` are called.
    ``limits`` (a :class:`graphrt.limits.RunLimits`) bounds what may be allocated: the outputs
    and scratch ``infer`` states are charged before they exist, so a result too large for it
    is refused (``resource_exhausted``) without being computed.  ``flags`` are the operator's
    (its OpDef's ``kernel_flags``); a kernel test may leave them out: the kernel's class's.
    """
    if flags is None:
        flags = KernelFlags.of(kernel)
    if flags.outputs_data_dependent:
        kctx = KernelContext(exact=exact, pool=pool, node=kernel.node, limits=limits)
        kernel.run(kctx, list(inputs), [None] * num_outputs)
        out = list(kctx.allocated) + [None] * (num_outputs - len(kctx.allocated))
        return out[:num_outputs]
    dtypes = [None if x is None else _dtype_of(x) for x in inputs]
    shapes = [None if x is None else _shape_of(x) for x in inputs]
    ictx = InferContext(dtypes, shapes, list(inputs), num_outputs, exact=exact)
    kernel.infer(ictx)
    consts = ictx.constant_outputs()
    types = ictx.output_types()
    if flags.view_of_input:
        _, shape = types[0]
        return [np.asarray(inputs[0]).reshape(shape)] + [None] * (num_outputs - 1)
    if any(c is not None for c in consts):
        return [None if c is None else c for c in consts]
    if limits is not None:  # set_output and add_scratch hold np.dtype objects
        nbytes = sum(math.prod(t[1]) * t[0].itemsize for t in types if t is not None)
        nbytes += sum(math.prod(s) * d.itemsize for d, s in ictx.scratch)
        limits.charge(nbytes, kernel.node, "its outputs")
    outs = [None if t is None else np.empty(t[1], dtype=t[0]) for t in types]
    scratch = [np.empty(s, dtype=d) for d, s in ictx.scratch]
    kctx = KernelContext(ictx.prepared, scratch, exact, pool, node=kernel.node, limits=limits)
    kernel.run(kctx, list(inputs), outs)
    return outs


def _dtype_of(x: Any) -> np.dtype | None:
    return x.dtype if isinstance(x, np.ndarray) else np.dtype(object)


def _shape_of(x: Any) -> Shape:
    return x.shape if isinstance(x, np.ndarray) else ()
