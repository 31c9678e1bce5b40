"""RunState: the mutable half of a run, and StatePool: the idle run states of one plan.

A run state owns one 64-byte-aligned slab holding every static value of its plan at the plan's
offsets, the arrays viewing it, an arena for dynamic values, and the program: one bound
zero-argument call per scheduled step.  A run copies the inputs into their staging areas, calls
the program in order and hands back the output arrays (which the session copies out).
"""

from __future__ import annotations

import functools
import math
import threading
from typing import Any

import numpy as np

from graphrt.errors import SessionError
from graphrt.gcpause import gc_paused
from graphrt.ir import check_cancelled
from graphrt.kernel import InferContext, KernelContext
from graphrt.limits import RunLimits
from graphrt.memory import ALIGN
from graphrt.observe import run_observed, run_profiled
from graphrt.plan import (
    ASSEMBLED,
    DYNAMIC,
    VIEW,
    ExecutionPlan,
    Step,
    check_holdable_types,
    infer_failure,
)
from graphrt.shapes import check_value
from graphrt.values import copy_value

__all__ = ["Arena", "RunState", "StatePool"]

#: Idle run states a pool keeps (more concurrent runs make more, and drop them when done).
MAX_IDLE_STATES = 8

#: Byte written over freed blocks in debug mode: 0xFF... is a NaN in every float type and -1 in
#: every signed integer, so a stale read shows up in tests.
POISON = 0xFF


class Arena:
    """Memory for dynamic values and their scratch, reset at the start of every run.

    A bump allocator over one buffer; what does not fit comes from numpy and the buffer grows to
    the high-water mark at the next reset, so a steady state allocates nothing.  Every request
    is charged to the run's :class:`~graphrt.limits.RunLimits` first, and only a request that
    was allocated counts towards the high-water mark: a refused or failed one (10**12
    elements) leaves the arena as it was, so the next run is not poisoned by it.
    """

    def __init__(self, debug: bool = False, limits: RunLimits | None = None) -> None:
        self._buf = np.empty(0, np.uint8)
        self._used = 0
        self._overflow = 0
        self.debug = debug
        self.limits = limits

    def reset(self) -> None:
        if self.limits is not None:
            self.limits.used = 0  # a new run: nothing dynamic is held yet
        if self._overflow:
            need = self._used + self._overflow
            grown = int(need * 1.25) + ALIGN
            if self.limits is not None:  # never keep more than the budget allows
                grown = min(grown, max(need + ALIGN, self.limits.budget))
            try:
                self._buf = _aligned_bytes(grown)
            except MemoryError:
                pass  # keep the old buffer: what does not fit comes from numpy, as before
        elif self.debug and self._used:
            self._buf[: self._used].fill(POISON)  # freed arena memory is poisoned too
        self._used = 0
        self._overflow = 0

    def allocate(self, dtype: np.dtype, shape: tuple[int, ...], node: Any = None) -> np.ndarray:
        dtype = np.dtype(dtype)
        # math.prod: exact Python ints (no int64 wrap) and ~10x cheaper than np.prod per call
        nbytes = math.prod(shape) * dtype.itemsize
        if self.limits is not None:
            self.limits.charge(nbytes, node, "a run-time value")
        if dtype.hasobject:
            return np.empty(shape, dtype)
        start = self._used
        end = start + (nbytes + ALIGN - 1) // ALIGN * ALIGN
        if end > self._buf.size:
            arr = np.empty(shape, dtype)
            self._overflow += end - start  # only once it exists (see the class docstring)
            return arr
        self._used = end
        return self._buf[start : start + nbytes].view(dtype).reshape(shape)


def _aligned_bytes(nbytes: int) -> np.ndarray:
    raw = np.empty(nbytes + ALIGN, np.uint8)
    shift = (-raw.ctypes.data) % ALIGN
    return raw[shift : shift + nbytes]


class RunState:
    def __init__(self, plan: ExecutionPlan, pool: Any, profiled: bool = False) -> None:
        """``profiled``: a state for profiled runs only (:meth:`run_profiled`), whose kernels
        bind no shortcut running a body outside the profiler's sight."""
        self.plan = plan
        graph = plan.graph
        mem = plan.memory
        self.slab = _aligned_bytes(max(mem.size, ALIGN))
        if plan.debug:
            self.slab.fill(POISON)
        #: The run's memory budget and cancellation token, shared by the arena and every
        #: KernelContext; the session sets the token, a body's caller the rest.
        self.limits = RunLimits(graph.max_memory, mem.size)
        if profiled:  # before the kernels bind (see graphrt.subgraph.BodySession.bound)
            self.limits.profiler = True
        self.arena = Arena(plan.debug, self.limits)
        self.pool = pool
        n = max(len(graph.names), 1)
        values: list[Any] = [None] * n
        for vid, c in plan.constants.items():
            values[vid] = c
        # Values the plan puts at one offset with one type share one array object: a ufunc
        # whose output is its input (in-place reuse) then sees the same array, not two views
        # it must prove equivalent (~150 ns a call on small tensors).
        arrays: dict[tuple, np.ndarray] = {}
        for vid, off in mem.offsets.items():
            if vid >= len(graph.names) or vid in plan.constants:
                continue
            t = plan.types[vid]
            if mem.root.get(vid, vid) != vid and vid not in mem.parts:
                continue  # views are made from their source below
            key = (off, t.dtype, t.shape)
            arr = arrays.get(key)
            if arr is None:
                arr = arrays[key] = self._slab_array(off, t.dtype, t.shape)
            values[vid] = arr
        self.values = values
        self.inputs = [values[v] for v in graph.input_ids]
        program: list[Any] = []
        self.contexts: list[KernelContext | None] = []
        checks = plan.shape_checks
        self.bindings: dict[str, tuple[int, str, int]] = {}
        for i, st in enumerate(plan.steps):
            node = st.node
            if checks is not None and i in checks.after_step:
                after = functools.partial(self._check, checks.after_step[i])
            else:
                after = None
            if st.kind == ASSEMBLED:  # the inputs were written in place: nothing to run
                self.contexts.append(None)
                if after is not None:
                    program.append((i, after))
                continue
            if st.kind == VIEW:
                src = values[node.inputs[0]]
                values[node.outputs[0]] = src.reshape(plan.types[node.outputs[0]].shape)
                self.contexts.append(None)
                if after is not None:
                    program.append((i, after))
                continue
            if st.kind == DYNAMIC:
                kctx = KernelContext(
                    exact=graph.exact,
                    pool=pool,
                    arena=self.arena,
                    node=node.info,
                    limits=self.limits,
                )
                self.contexts.append(kctx)
                program.append((i, functools.partial(self._run_dynamic, st, kctx)))
                if after is not None:
                    program.append((i, after))
                continue
            scratch = [
                self._slab_array(mem.offsets[sid], dt, shape)
                for sid, (dt, shape) in zip(st.scratch_ids, st.scratch)
            ]
            kctx = KernelContext(
                prepared=st.prepared,
                scratch=scratch,
                exact=graph.exact,
                pool=pool,
                arena=self.arena,
                node=node.info,
                limits=self.limits,
            )
            self.contexts.append(kctx)
            ins = [values[v] if v >= 0 else None for v in node.inputs]
            outs = [values[v] if v >= 0 else None for v in node.outputs]
            program.append((i, _bind(node, kctx, ins, outs)))
            if after is not None:
                program.append((i, after))
            if plan.debug and mem.freed_after[i]:
                program.append((i, functools.partial(self._poison, mem.freed_after[i])))
        self.step_index = [i for i, _ in program]
        self.program = _distinct([f for _, f in program])
        self.outputs = graph.output_ids

    def _check(self, checks: Any) -> None:
        values = self.values
        for c in checks:
            v = values[c.vid]
            if isinstance(v, np.ndarray):
                check_value(self.bindings, c, v.shape)

    def _slab_array(self, offset: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        # math.prod: exact Python ints (no int64 wrap) and ~10x cheaper than np.prod per call
        nbytes = math.prod(shape) * dtype.itemsize
        return self.slab[offset : offset + nbytes].view(dtype).reshape(shape)

    def _poison(self, blocks: list[tuple[int, int]]) -> None:
        for off, size in blocks:
            self.slab[off : off + size].fill(POISON)

    def _run_dynamic(self, st: Step, kctx: KernelContext) -> None:
        """Shape the node again from the actual tensors and run it into arena memory."""
        node = st.node
        kernel = node.kernel
        values = self.values
        ins = [values[v] if v >= 0 else None for v in node.inputs]
        flags = node.flags
        if flags.view_of_input and not isinstance(ins[0], np.ndarray):
            outs = [ins[0]]  # Identity of a sequence or an optional: the value itself
        elif flags.outputs_data_dependent:
            kctx.allocated = []
            kernel.run(kctx, ins, [None] * len(node.outputs))
            outs = kctx.allocated + [None] * (len(node.outputs) - len(kctx.allocated))
        else:
            dtypes = [_dtype(x) for x in ins]
            shapes = [_shape(x) for x in ins]
            known = _reusable(kctx.inferred, dtypes, shapes, ins)
            if known is None:
                ctx = InferContext(dtypes, shapes, ins, len(node.outputs), exact=kctx.exact)
                try:
                    kernel.infer(ctx)
                except Exception as exc:
                    raise infer_failure(node, exc) from exc
                known = _Inferred.of(ctx, dtypes, shapes, ins)
                graph = self.plan.graph
                check_holdable_types(graph, node, known.types, known.scratch, "invalid_input")
                kctx.inferred = known if known.read is not None else None
            types, consts = known.types, known.consts
            if flags.view_of_input:
                outs = [ins[0].reshape(types[0][1])]
            elif any(c is not None for c in consts):
                outs = consts
            else:
                arena = self.arena
                info = node.info
                outs = [None if t is None else arena.allocate(t[0], t[1], info) for t in types]
                kctx.prepared = known.prepared
                kctx.scratch = [arena.allocate(d, s, info) for d, s in known.scratch]
                kernel.run(kctx, ins, outs)
        for v, x in zip(node.outputs, outs):
            if v >= 0:
                values[v] = x

    def run(
        self, feeds: list[np.ndarray], bindings: dict | None = None, token: Any = None
    ) -> list[Any]:
        """Run the program on inputs already validated; returns the (internal) output values.

        ``bindings`` is the enclosing run's binding map when this is a body checking shapes;
        ``token`` a cancellation token checked before every step.
        """
        self.arena.reset()
        checks = self.plan.shape_checks
        if checks is not None:
            self._check_start(checks, feeds, {} if bindings is None else bindings)
        for vid, dst, src in zip(self.plan.graph.input_ids, self.inputs, feeds):
            if dst is None:  # kept outside the slab (strings, sequences): the run's own copy
                self.values[vid] = copy_value(src)
            else:
                _copyto(dst, src)
        program = self.program
        try:  # no step counter: the failing call is ``f`` (distinct objects, see _distinct)
            if token is None:
                for f in program:
                    f()
            else:
                for f in program:
                    check_cancelled(token)
                    f()
        except Exception as exc:
            i = next(k for k, g in enumerate(program) if g is f)
            raise kernel_failure(self.plan.steps[self.step_index[i]].node, exc) from exc
        values = self.values
        return [values[v] for v in self.outputs]

    def _check_start(self, checks: Any, feeds: list[np.ndarray], bindings: dict) -> None:
        """The run's binding map; graph inputs before anything runs, then values without a step."""
        self.bindings = bindings
        for kctx in self.contexts:
            if kctx is not None:
                kctx.shape_bindings = bindings
        by_vid = dict(zip(self.plan.graph.input_ids, feeds))
        for c in checks.inputs:
            x = by_vid.get(c.vid)
            if isinstance(x, np.ndarray):
                check_value(bindings, c, x.shape)
        self._check(checks.before)

    def run_profiled(
        self,
        feeds: list[np.ndarray],
        profiler: Any,
        token: Any = None,
        bindings: dict | None = None,
        parent: Any = None,
        iteration: int = 0,
    ) -> list[Any]:
        """Like :meth:`run`, one event per step into ``profiler`` (and checking ``token``); on
        a state made with ``profiled=True`` (graphrt.observe.run_profiled)."""
        return run_profiled(self, feeds, profiler, token, bindings, parent, iteration)

    def run_observed(self, feeds: list[np.ndarray], token: Any = None) -> tuple[list[Any], dict]:
        """Like :meth:`run`, also returning a copy of every value a step made, by value id
        (graphrt.observe.run_observed)."""
        return run_observed(self, feeds, token)

    def run_checked(self, feeds: list[np.ndarray], token: Any) -> list[Any]:
        """Like :meth:`run`, checking a cancellation token between steps."""
        return self.run(feeds, token=token)


_copyto = np.copyto


def _distinct(program: list[Any]) -> list[Any]:
    """The program with every call a distinct object (a kernel may bind one callable for two
    steps), so that :meth:`RunState.run` finds a failing step by identity."""
    seen: set[int] = set()
    for k, f in enumerate(program):
        if id(f) in seen:
            program[k] = f = functools.partial(f)
        seen.add(id(f))
    return program


def _bind(node: Any, kctx: KernelContext, ins: list, outs: list) -> Any:
    """The step's bound call; a kernel that fails while binding fails like one that fails while
    running: a SessionError naming the node, never a raw exception."""
    try:
        return node.kernel.bind(kctx, ins, outs)
    except Exception as exc:
        raise kernel_failure(node, exc) from exc


def kernel_failure(node: Any, exc: BaseException) -> SessionError:
    """What a step's exception becomes: a SessionError naming the node, whose fault it is.

    A kernel refuses bad inputs with its own SessionError (kept, with the node filled in); a
    MemoryError is the machine's limit; anything else a kernel raised is a bug in its plugin,
    reported as such rather than as the user's input being wrong.
    """
    info = node.info
    if isinstance(exc, SessionError):
        if exc.node is None:
            exc.node = info.name
        return exc
    if isinstance(exc, MemoryError):
        return SessionError(
            "resource_exhausted",
            f"{info.label} ran out of memory ({exc or 'MemoryError'}); use smaller inputs or a "
            "machine with more memory",
            node=info.name,
        )
    plugin = getattr(node, "plugin", "") or "an unnamed plugin"
    return SessionError(
        "kernel_error",
        f"{info.label} ({info.op_type} from plugin {plugin!r}) raised {type(exc).__name__}: "
        f"{exc}. This is a bug in the kernel, not a problem with the model or its inputs: "
        "please report it to the plugin's authors",
        node=info.name,
        operators=[f"{info.op_type} (opset {info.opset})"],
    )


#: Bytes of input values a dynamic step's reused ``infer`` result may depend on (larger values
#: are not compared every run: the step is shaped again instead).
_MEMO_BYTES = 1024


class _Inferred:
    """A dynamic step's ``infer`` result and what it was computed from.

    ``infer`` sees input types, shapes and the values it reads through ``ctx.value`` /
    ``known_value``; nothing else.  So while the types, shapes and the read values are the same,
    its result is too: the step skips ``infer``.  The read inputs must be the very same array
    objects (a run state's slab views and input staging arrays are), because ``prepared`` may
    hold them.
    """

    __slots__ = ("consts", "dtypes", "prepared", "read", "scratch", "shapes", "types")

    def __init__(self, **fields: Any) -> None:
        for k, v in fields.items():
            setattr(self, k, v)

    @staticmethod
    def of(ctx: InferContext, dtypes: list, shapes: list, ins: list) -> _Inferred:
        """The result; ``read`` is None when it may not be reused (large or non-tensor values
        read, or constant outputs, which a later run must not share)."""
        consts = ctx.constant_outputs()
        read: list | None = [] if all(c is None for c in consts) else None
        for i in sorted(ctx.read):
            x = ins[i] if i < len(ins) else None
            if read is None:
                break
            if not isinstance(x, np.ndarray) or x.nbytes > _MEMO_BYTES or x.dtype.hasobject:
                read = None
                break
            read.append((i, x, x.tobytes()))
        return _Inferred(
            consts=consts,
            dtypes=dtypes,
            prepared=ctx.prepared,
            read=read,
            scratch=list(ctx.scratch),
            shapes=shapes,
            types=ctx.output_types(),
        )


def _reusable(known: _Inferred | None, dtypes: list, shapes: list, ins: list) -> _Inferred | None:
    if known is None or known.dtypes != dtypes or known.shapes != shapes:
        return None  # (a known result is always reusable: see _Inferred.of)
    for i, x, data in known.read:
        if ins[i] is not x or x.tobytes() != data:
            return None
    return known


def _dtype(x: Any) -> np.dtype | None:
    if x is None:
        return None
    return x.dtype if isinstance(x, np.ndarray) else np.dtype(object)


def _shape(x: Any) -> tuple[int, ...] | None:
    if x is None:
        return None
    return x.shape if isinstance(x, np.ndarray) else ()


class StatePool:
    """The idle run states of one plan, kept beside it by whoever caches the plan (a session,
    a body): the plan stays immutable data, shared by every run, while each run takes a state
    from here and gives it back, so steady runs allocate no slab and bind no kernel again."""

    def __init__(self, plan: ExecutionPlan) -> None:
        self.plan = plan
        self._idle: list[RunState] = []
        self._profiled: list[RunState] = []
        self._lock = threading.Lock()
        #: How many run states this pool ever created (reuse makes this small).
        self.states_created = 0

    def acquire(self, pool: Any) -> RunState:
        """An idle state of the plan, or a new one; ``pool``: the session's intra-op pool."""
        try:
            state = self._idle.pop()
        except IndexError:
            with self._lock:
                self.states_created += 1
            with gc_paused():  # a context and bound calls per step
                return RunState(self.plan, pool)
        state.plan = self.plan
        return state

    def acquire_profiled(self, pool: Any) -> RunState:
        """An idle state of the plan for profiled runs (kept apart from the others: see
        ``RunState(profiled=True)``), or a new one."""
        try:
            state = self._profiled.pop()
        except IndexError:
            with gc_paused():
                return RunState(self.plan, pool, profiled=True)
        state.plan = self.plan
        return state

    def release_profiled(self, state: RunState) -> None:
        if len(self._profiled) < MAX_IDLE_STATES:
            state.plan = None  # (as release does)
            self._profiled.append(state)

    def release(self, state: RunState) -> None:
        if len(self._idle) < MAX_IDLE_STATES:
            # An idle state does not point back at its plan: a plan dropped with its session
            # is freed (slabs, packed weights) at once, not left as a cycle for the GC's next
            # full collection, which then paid for every dead session at once.
            state.plan = None
            self._idle.append(state)

    def drop_idle(self) -> None:
        """Let the idle run states (and their slabs) go: a body whose shapes change every
        iteration would otherwise keep one slab per recent shape, outside any budget."""
        self._idle = []
        self._profiled = []
