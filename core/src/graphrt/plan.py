"""ExecutionPlan: everything fixed by one list of input element types and shapes.

Making a plan: nodes are visited in order and each kernel's ``infer``
states its outputs; a node whose inputs are all constants is evaluated now (unless the result
is larger than both its inputs and 64 KiB, known from its inferred types before it is computed);
a node with a run-time-shaped input, data-dependent outputs, or that needs run-time values is
scheduled as dynamic; static values get slab offsets from :mod:`graphrt.memory`, and a slab over
the session's ``max_memory`` is refused (``resource_exhausted``).  A plan is data: immutable and
shared by concurrent runs.  The mutable half of a run (slab, bound kernel calls) is a run state,
pooled beside the plan by whoever caches it (:class:`graphrt.runstate.StatePool`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from graphrt import dtypes
from graphrt.attrs import evaluable_early
from graphrt.compiled import CNode, CompiledGraph
from graphrt.errors import SessionError
from graphrt.gcpause import gc_paused
from graphrt.ir import check_cancelled
from graphrt.kernel import InferContext, NeedsRunTimeValues, evaluate_node
from graphrt.limits import (
    DEFAULT_MAX_MEMORY,
    RunLimits,
    check_holdable,
    exhausted,
    numpy_refuses,
)
from graphrt.memory import MemoryPlan, MemStep, plan_memory
from graphrt.shapes import plan_checks

__all__ = [
    "ASSEMBLED",
    "CONST_EVAL_LIMIT",
    "MAX_SLAB",
    "ExecutionPlan",
    "Step",
    "build_plan",
]

CONST_EVAL_LIMIT = 64 * 1024
#: The default slab limit (sessions' ``max_memory``); kernels refusing tables over it import it.
MAX_SLAB = DEFAULT_MAX_MEMORY

STATIC, VIEW, DYNAMIC = "static", "view", "dynamic"
#: A step whose output is its inputs laid end to end, each written there by its producer: it
#: has nothing left to do at run time (OpKernel.assembled_offsets).
ASSEMBLED = "assembled"
_OBJECT = np.dtype(object)


@dataclasses.dataclass(frozen=True)
class Step:
    node: CNode
    kind: str  # static, view, dynamic or assembled
    prepared: Any = None
    scratch: tuple[tuple[np.dtype, tuple[int, ...]], ...] = ()
    scratch_ids: tuple[int, ...] = ()  # ids in the memory plan (beyond value ids)
    in_place: bool = True  # False: infer declined the kernel's in_place_input


@dataclasses.dataclass(frozen=True)
class ValueType:
    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize  # Python ints: no int64 wrap


class ExecutionPlan:
    """A plan for one input signature; immutable once built, shared by every run using it."""

    def __init__(
        self,
        graph: CompiledGraph,
        key: tuple,
        steps: list[Step],
        types: dict[int, ValueType],
        constants: dict[int, np.ndarray],
        dynamic_values: set[int],
        memory: MemoryPlan,
        folded: int,
        debug: bool,
        shape_checks: Any = None,
    ) -> None:
        self.graph = graph
        self.key = key
        self.steps = steps
        self.types = types
        self.constants = constants
        self.dynamic_values = dynamic_values
        self.memory = memory
        self.folded = folded
        self.debug = debug
        #: graphrt.shapes.ShapeChecks when the session checks shape annotations, else None.
        self.shape_checks = shape_checks

    @property
    def slab_size(self) -> int:
        return self.memory.size

    @property
    def static(self) -> bool:
        return not self.dynamic_values


@gc_paused()  # every step's objects live as long as the plan
def build_plan(
    graph: CompiledGraph,
    input_types: list[tuple[np.dtype, tuple[int, ...]]],
    *,
    debug: bool = False,
    keep_all: bool = False,
    check_shapes: bool = False,
    body: bool = False,
    cancellation: Any = None,
) -> ExecutionPlan:
    """Make the plan for these input types and shapes.

    ``keep_all`` keeps every intermediate alive to the end (no reuse), for inspection.
    ``body`` marks the plan of an If/Loop/Scan body: its inputs are not the caller's, so a
    violated input annotation is the model's fault (invalid_model).  ``cancellation`` is
    checked before each node (constant evaluation runs kernels).  A slab over the graph's
    ``max_memory`` is refused with ``resource_exhausted``.
    """
    types: dict[int, ValueType] = {}
    constants: dict[int, np.ndarray] = dict(graph.constants)
    dynamic: set[int] = set()
    for vid, (dt, shape) in zip(graph.input_ids, input_types):
        types[vid] = ValueType(np.dtype(dt), tuple(shape))
        if np.dtype(dt).hasobject:  # strings live outside the slab: run-time values
            dynamic.add(vid)
    for vid, value in graph.constants.items():
        types[vid] = ValueType(value.dtype, value.shape) if isinstance(value, np.ndarray) else None
    half = graph.half_weights
    for vid in half:  # stored float16/bfloat16, typed float32 (graphrt.compiled._store_half)
        types[vid] = ValueType(np.dtype(np.float32), graph.constants[vid].shape)
    steps: list[Step] = []
    folded = 0
    exact = graph.exact

    for node in graph.nodes:
        if cancellation is not None:
            check_cancelled(cancellation)
        kernel, flags = node.kernel, node.flags
        ins = node.inputs
        if dynamic and any(v in dynamic for v in ins if v >= 0):  # none in a static plan
            steps.append(Step(node, DYNAMIC))
            dynamic.update(o for o in node.outputs if o >= 0)
            continue
        for v in ins:
            if v >= 0 and v not in types and v not in constants:
                raise SessionError(
                    "invalid_model",
                    f"{node.info.label} reads {graph.names[v]!r}, which nothing produced",
                    node=node.info.name,
                )
        all_const = all(v < 0 or v in constants for v in ins)
        if all_const and evaluable_early(node.info):
            args = [constants[v] if v >= 0 else None for v in ins]
            if half:  # the folding kernel sees the float32 weights
                args = [a.astype(np.float32) if v in half else a for v, a in zip(ins, args)]
            # decided from the inferred types before anything is computed: a result over the
            # limit is refused by the limits, and the node is scheduled instead
            limits = RunLimits(min(_fold_limit(args), graph.max_memory))
            try:
                with np.errstate(all="ignore"):
                    values = evaluate_node(
                        kernel, args, len(node.outputs), exact=exact, limits=limits, flags=flags
                    )
            except NeedsRunTimeValues:  # pragma: no cover - every input is known here
                values = None
            except SessionError as exc:
                if exc.kind != "resource_exhausted":
                    raise infer_failure(node, exc) from None
                values = None
            except Exception:  # scheduled as a step instead: its run names the failure's kind
                values = None
            if values is not None and _fold_allowed(args, values):
                for o, val in zip(node.outputs, values):
                    if o >= 0:
                        constants[o] = val
                        types[o] = (
                            ValueType(val.dtype, val.shape) if isinstance(val, np.ndarray) else None
                        )
                folded += 1
                continue
        if flags.outputs_data_dependent and not flags.infers_when_static:
            steps.append(Step(node, DYNAMIC))
            dynamic.update(o for o in node.outputs if o >= 0)
            continue
        known = [types.get(v) if v >= 0 else None for v in ins]
        ctx = InferContext(
            [t.dtype if t else None for t in known],
            [t.shape if t else None for t in known],
            [constants.get(v) if v >= 0 else None for v in ins],
            len(node.outputs),
            exact=exact,
        )
        try:
            kernel.infer(ctx)
        except NeedsRunTimeValues:
            steps.append(Step(node, DYNAMIC))
            dynamic.update(o for o in node.outputs if o >= 0)
            continue
        except Exception as exc:
            raise infer_failure(node, exc) from exc
        out_types = ctx.output_types()
        consts = ctx.constant_outputs()
        for i, o in enumerate(node.outputs):
            if o >= 0 and out_types[i] is None:
                raise SessionError(
                    "invalid_model",
                    f"{node.info.label}: the kernel ({type(kernel).__name__}) stated no type for "
                    f"output {i}",
                    node=node.info.name,
                )
        if any(c is not None for c in consts):
            for o, c in zip(node.outputs, consts):
                if o >= 0:
                    constants[o] = c
                    types[o] = ValueType(c.dtype, c.shape)
            folded += 1
            continue
        check_holdable_types(graph, node, out_types, ctx.scratch, "invalid_model")
        for o, t in zip(node.outputs, out_types):
            if o >= 0:
                types[o] = ValueType(*t)
                if t[0] == _OBJECT:  # strings cannot live in the slab
                    dynamic.add(o)
        if flags.view_of_input:
            src = ins[0]
            if src in constants:
                constants[node.outputs[0]] = constants[src].reshape(out_types[0][1])
                folded += 1
                continue
            steps.append(Step(node, VIEW))
            continue
        if dynamic and any(o in dynamic for o in node.outputs):
            # a dynamic step makes all its outputs at run time, the tensors beside a string
            # output too (LinearClassifier's probabilities beside its labels): static readers
            # of those would be bound to arrays the step never writes
            dynamic.update(o for o in node.outputs if o >= 0)
            steps.append(Step(node, DYNAMIC))
            continue
        steps.append(Step(node, STATIC, ctx.prepared, tuple(ctx.scratch), in_place=ctx.in_place))

    _check_output_types(graph, types)
    memory, steps = _plan_memory(graph, steps, types, constants, dynamic, keep_all)
    if memory.size > graph.max_memory:
        # the plan's refusal (no node of its own), naming the node of its largest value
        made = [(types[o].nbytes, s.node) for s in steps for o in s.node.outputs if o in types]
        largest = (
            f", the largest made by {max(made, key=lambda m: m[0])[1].info.label}" if made else ""
        )
        raise exhausted(
            f"the plan for these input shapes (the slab of its static values{largest})",
            memory.size,
            0,
            graph.max_memory,
        )
    key = tuple((np.dtype(d).str, tuple(s)) for d, s in input_types)
    checks = None
    if check_shapes:
        checks = plan_checks(graph, steps, input_kind="invalid_model" if body else "invalid_input")
    return ExecutionPlan(
        graph, key, steps, types, constants, dynamic, memory, folded, debug, checks
    )


def _check_output_types(graph: CompiledGraph, types: dict[int, ValueType]) -> None:
    """A graph output whose declared element type differs from what the plan makes is refused.

    Returning the other type silently would hand the caller arrays it did not ask for.
    """
    for d, vid in zip(graph.outputs, graph.output_ids):
        t = types.get(vid)
        if d.kind != "tensor" or d.dtype is None or t is None or t.dtype == d.dtype:
            continue
        raise SessionError(
            "invalid_model",
            f"graph output {d.name!r} is declared {dtypes.name_of(d.dtype)} but the model "
            f"produces {dtypes.name_of(t.dtype)}",
        )


def check_holdable_types(
    graph: CompiledGraph, node: CNode, out_types: list, scratch: list, kind: str
) -> None:
    """Refuse an output or scratch numpy cannot make (``(0, 2**63 - 1)``: no elements, so no
    budget refuses it) where it is stated, for every operator, instead of a raw ValueError when
    the run state views its slab.  ``kind``: invalid_model at planning (the shapes come from the
    model's attributes and constants), invalid_input for a dynamic step's run-time values."""
    # numpy_refuses first: the message is only formatted for a value that is refused
    for o, t in zip(node.outputs, out_types):
        if o >= 0 and t is not None and numpy_refuses(t[0], t[1]) is not None:
            check_holdable(t[0], t[1], f"value {graph.names[o]!r}", kind, node.info)
    for k, (dt, shape) in enumerate(scratch):
        if numpy_refuses(dt, shape) is not None:
            check_holdable(dt, shape, f"its scratch array {k}", kind, node.info)


def _fold_limit(args: list[Any]) -> int:
    """The most bytes a plan evaluates now: 64 KiB, or as much as its largest input."""
    biggest_in = max((a.nbytes for a in args if isinstance(a, np.ndarray)), default=0)
    return max(CONST_EVAL_LIMIT, biggest_in)


def _fold_allowed(args: list[Any], values: list[Any]) -> bool:
    """Fold unless the result is larger than both (every) input and 64 KiB."""
    biggest_in = max((a.nbytes for a in args if isinstance(a, np.ndarray)), default=0)
    for v in values:
        if v is None:
            continue
        if not isinstance(v, np.ndarray):
            return False
        if v.nbytes > CONST_EVAL_LIMIT and v.nbytes > biggest_in:
            return False
    return True


def _plan_memory(
    graph: CompiledGraph,
    steps: list[Step],
    types: dict[int, ValueType],
    constants: dict[int, np.ndarray],
    dynamic: set[int],
    keep_all: bool = False,
) -> tuple[MemoryPlan, list[Step]]:
    """Lay out static values: input staging areas, step outputs, views and scratch."""
    in_slab = lambda v: v >= 0 and v not in constants and v not in dynamic
    preplaced = {v: types[v].nbytes for v in graph.input_ids if in_slab(v)}
    keep = [v for v in graph.output_ids if in_slab(v)]
    if keep_all:
        keep = [v for v in range(len(graph.names)) if in_slab(v)]
    assembled = _assembled_steps(steps, types, in_slab, set(keep) | set(preplaced))
    parts = {v for by_input in assembled.values() for v in by_input}
    next_id = len(graph.names)
    mem_steps: list[MemStep] = []
    new_steps: list[Step] = []
    for index, st in enumerate(steps):
        node = st.node
        uses = tuple(v for v in node.inputs if in_slab(v))
        if index in assembled:
            out = node.outputs[0]
            placed = {v: (out, at) for v, at in assembled[index].items()}
            mem_steps.append(MemStep(defs={out: types[out].nbytes}, uses=uses, parts=placed))
            new_steps.append(_restep(st, ASSEMBLED, st.scratch_ids))
            continue
        if st.kind == DYNAMIC:
            mem_steps.append(MemStep(defs={}, uses=uses))
            new_steps.append(st)
            continue
        if st.kind == VIEW:
            out = node.outputs[0]
            src = node.inputs[0]
            views = {out: src} if in_slab(src) else {}
            mem_steps.append(MemStep(defs={}, uses=uses, views=views))
            new_steps.append(st)
            continue
        defs = {o: types[o].nbytes for o in node.outputs if in_slab(o)}
        in_place = None
        ip = node.flags.in_place_input if st.in_place else None
        if ip is not None and ip < len(node.inputs) and node.outputs and in_slab(node.outputs[0]):
            src, out = node.inputs[ip], node.outputs[0]
            # same type and size, and read through one input only: a kernel may then treat
            # output and input as one array without re-reading the input after writing
            if in_slab(src) and types[src] == types[out] and node.inputs.count(src) == 1:
                in_place = None if out in parts else (out, src)
        scratch_ids = []
        scratch = {}
        for dt, shape in st.scratch:
            scratch_ids.append(next_id)
            scratch[next_id] = math.prod(shape) * np.dtype(dt).itemsize  # ValueType.nbytes
            next_id += 1
        mem_steps.append(MemStep(defs=defs, uses=uses, in_place=in_place, scratch=scratch))
        if scratch_ids or st.scratch_ids:
            st = _restep(st, st.kind, tuple(scratch_ids))
        new_steps.append(st)
    return plan_memory(mem_steps, preplaced=preplaced, keep=keep), new_steps


def _restep(st: Step, kind: str, scratch_ids: tuple[int, ...]) -> Step:
    """``dataclasses.replace(st, kind=kind, scratch_ids=scratch_ids)`` without its per-call
    scan of the fields (a step per node in every plan)."""
    return Step(st.node, kind, st.prepared, st.scratch, scratch_ids, st.in_place)


def _assembled_steps(
    steps: list[Step], types: dict[int, ValueType], in_slab: Any, fixed: set[int]
) -> dict[int, dict[int, int]]:
    """Steps whose output can be assembled in place: step index -> {input: byte offset}.

    Every input must be made by an earlier static step (not a graph input, constant, view or
    graph output: ``fixed``), be read through no view, appear once, and belong to no other
    assembly; an assembled output is not itself placed in another one.
    """
    made_by: dict[int, int] = {}
    viewed: set[int] = set()
    for i, st in enumerate(steps):
        if st.kind == STATIC:
            made_by.update((o, i) for o in st.node.outputs if o >= 0)
        elif st.kind == VIEW:
            viewed.add(st.node.inputs[0])
    found: dict[int, dict[int, int]] = {}
    taken: set[int] = set()
    for i, st in enumerate(steps):
        node = st.node
        if st.kind != STATIC or len(node.outputs) != 1 or not in_slab(node.outputs[0]):
            continue
        out, ins = node.outputs[0], node.inputs
        if not ins or any(v < 0 or not in_slab(v) for v in ins):
            continue
        offsets = node.kernel.assembled_offsets([types[v].shape for v in ins], types[out].shape)
        if offsets is None:
            continue
        ok = all(
            made_by.get(v, i) < i
            and v not in viewed
            and v not in fixed
            and v not in taken  # a part already, or an assembled output
            and ins.count(v) == 1
            and types[v].dtype == types[out].dtype
            for v in ins
        )
        if ok:
            size = types[out].dtype.itemsize
            found[i] = {v: at * size for v, at in zip(ins, offsets)}
            taken.update(ins)
            taken.add(out)
    return found


def infer_failure(node: Any, exc: BaseException) -> SessionError:
    """What a kernel's ``infer`` exception becomes (at planning and for dynamic steps).

    ``infer`` sees the input types, shapes and values: a raw exception there is how many kernels
    reject shapes they cannot take (numpy's broadcasting, reshape), so it reads as the inputs'
    fault; a SessionError of the kernel's own keeps its kind.
    """
    if isinstance(exc, SessionError):
        if exc.node is None:
            exc.node = node.info.name
        return exc
    return SessionError(
        "invalid_input", f"{node.info.label}: {type(exc).__name__}: {exc}", node=node.info.name
    )
