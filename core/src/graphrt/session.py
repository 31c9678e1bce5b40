"""Sessions: the tensor form (names in, names out) and the happy path (arrays in, arrays out).

A session resolves every operator once, runs the graph passes, and then makes one plan per input
signature (cached, oldest dropped).  ``run`` may be called from any number of threads: plans are
immutable, each run takes a run state from its plan's pool, and nothing mutable is shared.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from graphrt import dtypes
from graphrt.compiled import CompiledGraph, compile_model
from graphrt.errors import SessionError
from graphrt.gcpause import gc_paused
from graphrt.ir import ValueDecl, import_model
from graphrt.options import SessionOptions, session_options
from graphrt.paths import choose_path
from graphrt.plan import ExecutionPlan, build_plan
from graphrt.plugins import snapshot
from graphrt.runstate import RunState, StatePool
from graphrt.subgraph import BodySession
from graphrt.threads import IntraOpPool, blas_session_closed, blas_session_opened, resolve_threads
from graphrt.values import copy_value, value_type

__all__ = ["CancellationToken", "Model", "NodeArg", "Session", "SessionOptions", "load"]


class CancellationToken:
    """Cancels session creation or a run: checked while importing, compiling and folding
    constants (per node), and in a run while planning, between operators and at every
    iteration of If/Loop/Scan/SequenceMap bodies.  The cancelled call raises
    ``SessionError(kind="cancelled")``; the session stays usable."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()


@dataclasses.dataclass(frozen=True)
class NodeArg:
    """An input or output as onnxruntime reports it: name, type string, dims (int, str or None)."""

    name: str
    type: str
    shape: list[int | str | None] | None
    kind: str = "tensor"
    dtype: np.dtype | None = None

    @classmethod
    def of(cls, d: ValueDecl) -> NodeArg:
        shape = None if d.dims is None else list(d.dims)
        return cls(d.name, d.type, shape, d.kind, d.dtype)


class Session:
    """A model ready to run: ``run(output_names, input_feed)`` like onnxruntime."""

    def __init__(
        self,
        model: Any,
        options: SessionOptions | None = None,
        *,
        cancellation: CancellationToken | None = None,
        **overrides: Any,
    ) -> None:
        """``model``: a path, bytes or an onnx.ModelProto.  ``options`` (a
        :class:`SessionOptions`) with ``overrides`` (its field names as keywords:
        ``mode="exact"``...) applied; ``cancellation`` is checked while the session is made."""
        self.options = opts = session_options(options, overrides)
        self._closed = False
        with gc_paused():  # tens of thousands of objects, all living as long as the session
            ir = import_model(model, cancellation)
            self._table = snapshot(opts.plugins, opts.custom_kernels, opts.strict_plugins)
            path = choose_path(list(self._table.paths), opts.kernel_path)
            self._graph: CompiledGraph = compile_model(
                ir,
                self._table,
                make_body=BodySession,
                exact=opts.mode == "exact",
                level=opts.optimization_level,
                path=path,
                weight_storage=opts.weight_storage,
                cancellation=cancellation,
                max_memory=opts.max_memory,
            )
        self.kernel_path = self._graph.kernel_path
        self.threads = resolve_threads(opts.intra_op_threads)
        self._pool = IntraOpPool(self.threads)
        #: Plans by input signature, each with the pool of its idle run states.
        self._plans: dict[tuple, StatePool] = {}
        self._plan_lock = threading.Lock()
        self.plans_built = 0
        self._inputs = [NodeArg.of(d) for d in ir.inputs]
        self._outputs = [NodeArg.of(d) for d in ir.outputs]
        self._input_decls = list(ir.inputs)
        self._input_names = frozenset(d.name for d in self._input_decls)
        self._output_index = {d.name: i for i, d in enumerate(ir.outputs)}
        self._all_outputs = list(range(len(self._outputs)))
        #: (name, dtype, static shape or None, decl when its dims need the full check) per
        #: input when every input is a tensor of known dtype: :meth:`_fast_inputs`'s one-pass
        #: check; None otherwise.
        self._fast_spec = (
            [(d.name, d.dtype, *_fast_shape(d.dims), d) for d in self._input_decls]
            if all(d.kind == "tensor" and d.dtype is not None for d in self._input_decls)
            else None
        )
        blas_session_opened()
        self._finalizer = weakref.finalize(self, _release, self._pool)

    # -- what the model looks like -------------------------------------------------------------
    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    @property
    def plugins(self) -> tuple[str, ...]:
        """The plugins whose operators this session's frozen table holds."""
        return self._table.plugins

    @property
    def operator_table(self):
        return self._table

    @property
    def graph(self) -> CompiledGraph:
        return self._graph

    # -- running -------------------------------------------------------------------------------
    def run(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        *,
        out: Mapping[str, np.ndarray] | None = None,
        cancellation: CancellationToken | None = None,
        profiler: Any = None,
    ) -> list[Any]:
        """Outputs in the order of ``output_names`` (None or ``[]``: every output, in the model's
        order; a list, never a bare string).

        ``out`` maps output names to caller-provided arrays that are checked and overwritten
        (and returned); other outputs are new arrays the caller owns.  ``cancellation`` is
        checked while planning, between steps and at every iteration of If/Loop/Scan bodies;
        ``profiler`` (a :class:`graphrt.Profiler`) records step times, those of the nodes
        inside bodies too.  :meth:`run_with_intermediates` returns every intermediate value.
        """
        if self._closed:
            raise SessionError("closed", "the session is closed")
        fast = self._fast_inputs(input_feed)
        if fast is None:
            feeds, states = self._validate_inputs(input_feed), None
        else:
            feeds, key = fast
            states = self._plans.get(key)
        indices = self._all_outputs if output_names is None else self._output_indices(output_names)
        out_arrays = self._validate_out(out, indices) if out else None
        if states is None:
            states = self._states_for(feeds, cancellation)
        if profiler is not None:
            return self._run_profiled(states, feeds, indices, out_arrays, cancellation, profiler)
        state = states.acquire(self._pool)
        try:
            state.limits.token = cancellation  # what bodies check at every iteration
            errors = _fp_errors_ignored()
            try:
                if cancellation is not None:
                    results = state.run_checked(feeds, cancellation)
                else:
                    results = state.run(feeds)
            finally:
                _fp_errors_restored(errors)
            # Outputs still live in the run state's slab: copy them out before another run
            # can take the state from the pool.
            if out_arrays is None and indices is self._all_outputs:
                return [x.copy() if type(x) is np.ndarray else copy_value(x) for x in results]
            return self._deliver(results, indices, out_arrays)
        finally:
            states.release(state)

    def _run_profiled(self, states, feeds, indices, out_arrays, token, profiler) -> list[Any]:
        """:meth:`run` with a profiler, on a run state kept for profiled runs (whose kernels
        run bodies where the profiler sees them)."""

        def run(state: RunState) -> list[Any]:
            state.limits.token = token
            results = state.run_profiled(feeds, profiler, token)
            return self._deliver(results, indices, out_arrays)

        return self._run_on(states, run, profiled=True)

    def run_with_intermediates(
        self,
        output_names: Sequence[str] | None,
        input_feed: Mapping[str, Any],
        *,
        cancellation: CancellationToken | None = None,
    ) -> tuple[list[Any], dict[str, Any]]:
        """:meth:`run`, also returning every intermediate value: ``(outputs, {name: value})``.

        An ordinary run (the cached plan with its memory reuse and in-place steps, the same
        kernels: the same bits in exact mode), each value copied right after the step making
        it.  Every value a node of the graph as the passes left it made (optimization_level=
        "none" keeps every node of the model), outputs and values folded into constants
        included; inputs, initializers and values inside If/Loop/Scan bodies not.  Returned,
        not kept on the session: concurrent calls are independent.
        """
        if self._closed:
            raise SessionError("closed", "the session is closed")
        feeds = self._validate_inputs(input_feed)
        indices = self._output_indices(output_names)

        def run(state: RunState) -> tuple[list[Any], dict[int, Any]]:
            state.limits.token = cancellation
            results, kept = state.run_observed(feeds, cancellation)
            return self._deliver(results, indices, None), kept

        outputs, kept = self._run_on(self._states_for(feeds, cancellation), run)
        return outputs, {self._graph.names[v]: x for v, x in kept.items()}

    def _run_on(self, states: StatePool, run: Any, profiled: bool = False) -> Any:
        """``run(state)`` on a run state of ``states`` (of those kept for profiled runs when
        ``profiled``), floating-point warnings off; ``run`` copies out what it returns."""
        state = states.acquire_profiled(self._pool) if profiled else states.acquire(self._pool)
        try:
            errors = _fp_errors_ignored()
            try:
                return run(state)
            finally:
                _fp_errors_restored(errors)
        finally:
            (states.release_profiled if profiled else states.release)(state)

    def _deliver(self, results: list, indices: list[int], out_arrays: dict | None) -> list[Any]:
        delivered = []
        for i in indices:
            value = results[i]
            if out_arrays is not None and i in out_arrays:
                target = out_arrays[i]
                if value.shape != target.shape:
                    name = self._outputs[i].name
                    raise SessionError(
                        "invalid_input",
                        f"out[{name!r}] has shape {list(target.shape)} but the output has shape "
                        f"{list(value.shape)}",
                    )
                if target.dtype.kind == "V" and target.dtype.fields is None:
                    # ml_dtypes' types (bfloat16, float8...): numpy 1 copies a user type
                    # through a legacy cast that allocates a small array per call; copy bits.
                    bits = np.dtype(f"u{target.dtype.itemsize}")
                    np.copyto(target.view(bits), value.view(bits))
                else:
                    np.copyto(target, value)
                delivered.append(target)
            else:
                delivered.append(copy_value(value))
        return delivered

    def plan_for(self, feeds: Sequence[Any], cancellation: Any = None) -> ExecutionPlan:
        """The plan for these inputs (arrays or (dtype, shape) pairs), made once and cached."""
        return self._states_for(feeds, cancellation).plan

    def _states_for(self, feeds: Sequence[Any], cancellation: Any = None) -> StatePool:
        """The cached plan for these inputs with its pool of run states (made on first use)."""
        types = [
            (np.dtype(x[0]), tuple(x[1])) if isinstance(x, tuple) else value_type(x) for x in feeds
        ]
        key = tuple(types)  # np.dtype hashes and compares by type, so equal types share a plan
        states = self._plans.get(key)
        if states is not None:
            return states
        with self._plan_lock:
            states = self._plans.get(key)
            if states is not None:
                return states
            plan = build_plan(
                self._graph,
                types,
                debug=self.options.debug,
                check_shapes=self.options.check_shapes,
                cancellation=cancellation,
            )
            plans = dict(self._plans)  # copy on write: readers never lock
            while len(plans) >= self.options.max_cached_plans:
                del plans[next(iter(plans))]
            plans[key] = states = StatePool(plan)
            self._plans = plans
            self.plans_built += 1
            return states

    def inspect(self, input_feed: Mapping[str, Any]) -> dict[str, Any]:
        """Run once keeping every intermediate, and return all values by name.

        Uses a separate plan without memory reuse (never cached), so it costs memory, not the
        normal path's speed.  Constants folded into the plan are included.
        """
        if self._closed:
            raise SessionError("closed", "the session is closed")
        feeds = self._validate_inputs(input_feed)
        types = [value_type(x) for x in feeds]
        plan = build_plan(self._graph, types, debug=self.options.debug, keep_all=True)
        with gc_paused():  # a context and bound calls per step
            state = RunState(plan, self._pool)  # used once: never pooled
        with np.errstate(all="ignore"):
            state.run(feeds)
        names = self._graph.names
        return {
            names[v]: copy_value(x)
            for v, x in enumerate(state.values)
            if x is not None and v < len(names)
        }

    def explain(self, feeds: Sequence[Any]) -> str:
        """The plan for these inputs as text: schedule, slab offsets, reuse."""
        from graphrt.explain import explain

        if isinstance(feeds, Mapping):
            feeds = self._validate_inputs(feeds)
        return explain(self.plan_for(feeds))

    def body_stats(self) -> list[dict[str, Any]]:
        """Counters of every If/Loop/Scan/SequenceMap body: runs, plans built, run states made.

        A Loop whose body sees steady shapes shows ``plans_built == 1`` and a handful of
        run states however many iterations ran: bodies reuse their plan and pooled states.
        """
        rows: list[dict[str, Any]] = []
        for (node, name), body in self._graph.bodies.items():
            rows += body.stats(f"{node}.{name}")
        return rows

    @property
    def cached_plans(self) -> list[ExecutionPlan]:
        return [states.plan for states in self._plans.values()]

    # -- validation ----------------------------------------------------------------------------
    def _fast_inputs(self, feed: Any) -> tuple[list[np.ndarray], tuple] | None:
        """The common case checked in one pass: a dict holding exactly the model's inputs, each
        an ndarray of the declared dtype and shape.  Returns the feeds and their plan key, or
        None for anything else, which :meth:`_validate_inputs` checks (and words the error)."""
        spec = self._fast_spec
        if spec is None or type(feed) is not dict or len(feed) != len(spec):
            return None
        feeds = []
        key = []
        for name, dtype, shape, symbolic, decl in spec:
            x = feed.get(name)
            if type(x) is not np.ndarray or x.dtype != dtype:
                return None
            if x.shape != shape:
                if shape is not None:
                    return None
                if symbolic:
                    _check_input(decl, x)  # the full check (raises on a mismatch)
            feeds.append(x)
            key.append((x.dtype, x.shape))
        return feeds, tuple(key)

    def _validate_inputs(self, feed: Mapping[str, Any]) -> list[np.ndarray]:
        if not isinstance(feed, Mapping):
            raise SessionError(
                "invalid_input",
                f"input_feed must be a dict of name -> array, not {type(feed).__name__}",
            )
        feeds = []
        found = 0
        for d in self._input_decls:
            value = feed.get(d.name, _MISSING)
            if value is _MISSING:
                if d.kind == "optional":  # an omitted optional is an empty one
                    feeds.append(None)
                    continue
                self._refuse_unknown(feed)
                raise SessionError("invalid_input", f"input {d.name!r} is missing")
            found += 1
            feeds.append(_check_input(d, value))
        if found != len(feed):
            self._refuse_unknown(feed)
        return feeds

    def _refuse_unknown(self, feed: Mapping[str, Any]) -> None:
        unknown = [k for k in feed if k not in self._input_names]
        if unknown:
            raise SessionError(
                "invalid_input",
                f"unknown input(s) {', '.join(map(repr, unknown))}; the model's inputs are "
                f"{', '.join(repr(d.name) for d in self._input_decls) or 'none'}",
            )

    def _output_indices(self, names: Sequence[str] | None) -> list[int]:
        """Indices of the named outputs; None or an empty list means every output, as
        onnxruntime reads them.  A bare string is refused rather than read as its letters."""
        if names is None:
            return self._all_outputs
        if isinstance(names, (str, bytes)) or not isinstance(names, (Sequence, np.ndarray)):
            hint = f"; for one output pass [{names!r}]" if isinstance(names, str) else ""
            raise SessionError(
                "invalid_input",
                f"output_names must be a list of output names (or None for every output), "
                f"not {type(names).__name__} {names!r}{hint}",
            )
        if len(names) == 0:
            return self._all_outputs
        indices = []
        for n in names:
            if n not in self._output_index:
                raise SessionError(
                    "invalid_input",
                    f"unknown output {n!r}; the model's outputs are "
                    f"{', '.join(repr(o.name) for o in self._outputs)}",
                )
            indices.append(self._output_index[n])
        return indices

    def _validate_out(
        self, out: Mapping[str, np.ndarray], indices: list[int]
    ) -> dict[int, np.ndarray]:
        arrays = {}
        for name, arr in out.items():
            i = self._output_index.get(name)
            if i is None or i not in indices:
                raise SessionError(
                    "invalid_input", f"out names {name!r}, which is not a requested output"
                )
            if not isinstance(arr, np.ndarray) or not arr.flags.writeable:
                raise SessionError(
                    "invalid_input", f"out[{name!r}] must be a writeable numpy array"
                )
            want = self._outputs[i].dtype
            if want is not None and arr.dtype != want:
                raise SessionError(
                    "invalid_input",
                    f"out[{name!r}] is {dtypes.name_of(arr.dtype)} but the output is "
                    f"{dtypes.name_of(want)}",
                )
            arrays[i] = arr
        return arrays

    # -- lifetime ------------------------------------------------------------------------------
    def close(self) -> None:
        """Refuse new runs; runs in flight finish with the plans they hold."""
        if not self._closed:
            self._closed = True
            self._finalizer()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


_MISSING = object()


def _release(pool: IntraOpPool) -> None:
    pool.shutdown()
    blas_session_closed()


def _check_input(d: ValueDecl, value: Any) -> Any:
    if d.kind == "sequence":
        return _check_sequence(d, value)
    if d.kind == "optional":
        if value is None:
            return None
        inner = d.type_proto.optional_type.elem_type if d.type_proto is not None else None
        if inner is not None and inner.WhichOneof("value") == "sequence_type":
            return _check_sequence(d, value)
        return _check_element(d, value, d.name)
    if d.kind == "map":
        return _check_map(d, value)
    if d.kind != "tensor":
        return value
    arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    if d.dtype is not None and arr.dtype != d.dtype:
        raise SessionError(
            "invalid_input",
            f"input {d.name!r} must be {dtypes.name_of(d.dtype)}, got {dtypes.name_of(arr.dtype)}",
        )
    if d.dims is not None:
        if arr.ndim != len(d.dims):
            raise SessionError(
                "invalid_input",
                f"input {d.name!r} must have rank {len(d.dims)} (shape {_dims(d.dims)}), got "
                f"shape {list(arr.shape)}",
            )
        for axis, (want, got) in enumerate(zip(d.dims, arr.shape)):
            if isinstance(want, int) and want > 0 and want != got:
                raise SessionError(
                    "invalid_input",
                    f"input {d.name!r} axis {axis} must be {want} (shape {_dims(d.dims)}), got "
                    f"shape {list(arr.shape)}",
                )
    return arr


def _check_sequence(d: ValueDecl, value: Any) -> list[np.ndarray]:
    if not isinstance(value, (list, tuple)):
        raise SessionError(
            "invalid_input",
            f"input {d.name!r} is {d.type}: pass a list of arrays, not {type(value).__name__}",
        )
    return [_check_element(d, v, f"{d.name}[{i}]") for i, v in enumerate(value)]


def _check_map(d: ValueDecl, value: Any) -> dict[Any, Any]:
    """A dict checked against map(key, tensor(value)): a new dict whose keys are str or int and
    whose values are numpy scalars of the declared element type (str for strings), so kernels
    know the value type even of a map of Python floats."""
    if not isinstance(value, Mapping):
        raise SessionError(
            "invalid_input",
            f"input {d.name!r} is {d.type}: pass a dict, not {type(value).__name__}",
        )
    mt = d.type_proto.map_type
    key_dtype = dtypes.from_onnx(mt.key_type)
    vt = mt.value_type
    val_dtype = None
    if vt.WhichOneof("value") == "tensor_type" and vt.tensor_type.elem_type:
        val_dtype = dtypes.from_onnx(vt.tensor_type.elem_type)
    string_keys = key_dtype.kind == "O"
    checked: dict[Any, Any] = {}
    for k, v in value.items():
        is_int = isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_))
        if not (isinstance(k, str) if string_keys else is_int):
            raise SessionError(
                "invalid_input",
                f"input {d.name!r} is {d.type}: key {k!r} is {type(k).__name__}, not "
                f"{dtypes.name_of(key_dtype)[7:-1]}",
            )
        checked[k if string_keys else int(k)] = _map_value(d, k, v, val_dtype)
    return checked


def _map_value(d: ValueDecl, key: Any, v: Any, dtype: np.dtype | None) -> Any:
    if dtype is None:
        return v
    if dtype.kind == "O":
        ok = isinstance(v, str)
    else:
        ok = np.ndim(v) == 0 and not isinstance(v, (str, bytes))
        ok = ok and np.can_cast(np.min_scalar_type(v), dtype, "same_kind")
    if not ok:
        raise SessionError(
            "invalid_input",
            f"input {d.name!r} is {d.type}: the value of key {key!r} is {v!r}, not "
            f"{dtypes.name_of(dtype)[7:-1]}",
        )
    return v if dtype.kind == "O" else dtype.type(v)


def _check_element(d: ValueDecl, value: Any, where: str) -> np.ndarray:
    arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    want = d.element_dtype
    if want is not None and arr.dtype != want:
        raise SessionError(
            "invalid_input",
            f"input {where!r} must be {dtypes.name_of(want)} (declared {d.type}), got "
            f"{dtypes.name_of(arr.dtype)}",
        )
    return arr


def _fast_shape(dims: Sequence[Any] | None) -> tuple[tuple[int, ...] | None, bool]:
    """(the declared shape when every dim is a fixed size, whether the dims need
    :func:`_check_input`): (shape, False), (None, True) with symbols, (None, False) without
    a declared shape.  A declared 0 is not enforced by :func:`_check_input`: it is a symbol."""
    if dims is None:
        return None, False
    if all(isinstance(x, int) and x > 0 for x in dims):
        return tuple(dims), False
    return None, True


try:  # numpy >= 2: the error state is a context variable, set here without an errstate object
    from numpy._core._ufunc_config import _extobj_contextvar, _make_extobj

    _make_extobj(all="ignore")  # the call each run makes, tried once
except Exception:  # numpy 1, or private names that moved: errstate itself
    _extobj_contextvar = None

if _extobj_contextvar is not None:

    def _fp_errors_ignored() -> Any:
        """Floating-point warnings off for a run (np.errstate(all="ignore") at a fifth of the
        cost: ~0.15 us against ~0.7 us a run); the token restores the caller's state."""
        return _extobj_contextvar.set(_make_extobj(all="ignore"))

    _fp_errors_restored = _extobj_contextvar.reset
else:

    def _fp_errors_ignored() -> Any:
        state = np.errstate(all="ignore")
        state.__enter__()
        return state

    def _fp_errors_restored(state: Any) -> None:
        state.__exit__(None, None, None)


def _dims(dims: Sequence[Any]) -> str:
    return "[" + ", ".join("?" if x is None else str(x) for x in dims) + "]"


class Model:
    """The happy path: arrays in, arrays out, no names.

    ``model(x)`` for a one-input model returns its output (a tuple when there are several);
    several inputs are given positionally in the model's order.
    """

    def __init__(self, model: Any, **options: Any) -> None:
        self.session = Session(model, **options)
        self._names = [i.name for i in self.session.get_inputs()]

    def __call__(self, *arrays: Any) -> Any:
        if len(arrays) != len(self._names):
            raise SessionError(
                "invalid_input",
                f"the model takes {len(self._names)} input(s) ({', '.join(self._names)}), "
                f"got {len(arrays)}",
            )
        outputs = self.session.run(None, dict(zip(self._names, arrays)))
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def load(model: Any, **options: Any) -> Model:
    """Load a model (path, bytes or onnx.ModelProto) for the happy path; options as Session."""
    return Model(model, **options)
