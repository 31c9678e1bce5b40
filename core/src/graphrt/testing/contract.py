"""The checks graphrt.testing runs: one function per promise a plugin's kernel makes.

Each check takes an :class:`Operator` (one operator of the plugin under test, with its flags)
and a :class:`Sample` (a one-node model and its inputs) and raises :class:`ContractError`, an
AssertionError whose message starts with the promise that is broken (``in_place_input``,
``supports_exact``, ``thread safety``...), so a failure says what to fix.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.attrs import NONDETERMINISTIC, node_info
from graphrt.kernel import InferContext, KernelContext, KernelFlags, OpDef, evaluate_node
from graphrt.paths import BASE_PATH, path_available
from graphrt.plugins import snapshot
from graphrt.session import Session
from graphrt.testing.cases import Case

__all__ = [
    "CHECKS",
    "ContractError",
    "Operator",
    "Sample",
    "applicable_checks",
    "backend_cases",
    "operators_of",
    "run_check",
    "samples_for",
]

THREAD_COUNTS = (1, 2, 4)
#: The domains onnx's backend node cases use.
ONNX_DOMAINS = ("", "ai.onnx.ml", "ai.onnx.preview.training")
CONCURRENT_THREADS = 8
CONCURRENT_ROUNDS = 25


class ContractError(AssertionError):
    """A kernel breaks a promise of the kernel contract (the message names the promise)."""


@dataclasses.dataclass(frozen=True)
class Operator:
    """One operator a plugin provides: a line of its table or a kernel of one of its paths."""

    plugin: str
    domain: str
    op_type: str
    since: int
    until: int | None
    flags: KernelFlags
    #: The kernel path whose kernel is tested; None: the table's own (numpy) kernel.
    path: str | None = None
    opdef: OpDef | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def label(self) -> str:
        name = f"{self.domain}.{self.op_type}" if self.domain else self.op_type
        return f"{name}@{self.path}" if self.path else name

    def covers(self, opset: int) -> bool:
        return self.since <= opset and (self.until is None or opset <= self.until)


@dataclasses.dataclass
class Sample:
    """A one-node model, one feed, and the outputs it should give (None: no reference)."""

    name: str
    model: Any
    inputs: list[Any]
    expected: list[Any] | None = None
    #: The author's reference, called with the inputs (computed when the check runs).
    reference: Callable[[], Any] | None = None
    rtol: float = 1e-5
    atol: float = 1e-6
    deterministic: bool = True
    #: For samples of onnx backend cases: compare the way onnx's runner does.
    backend: bool = False

    @property
    def node(self) -> Any:
        return self.model.graph.node[0]

    @property
    def opset(self) -> int:
        domain = self.node.domain
        for o in self.model.opset_import:
            if o.domain == domain or (domain in ("", "ai.onnx") and o.domain in ("", "ai.onnx")):
                return o.version
        raise ContractError(f"sample {self.name}: no opset import for domain {domain!r}")

    def feed(self, inputs: Sequence[Any] | None = None) -> dict[str, Any]:
        names = [i.name for i in self.model.graph.input]
        inits = {t.name for t in self.model.graph.initializer}
        names = [n for n in names if n not in inits]
        return dict(zip(names, self.inputs if inputs is None else inputs))


# -- what a plugin provides ------------------------------------------------------------------------


def operators_of(plugin: str) -> list[Operator]:
    """Every operator ``plugin`` provides: its table's lines and its kernel paths' kernels."""
    table = snapshot()
    if plugin not in table.plugins:
        raise ContractError(
            f"plugin {plugin!r} is not installed or failed to load; installed plugins: "
            f"{', '.join(table.plugins) or 'none'}"
        )
    out = [
        Operator(plugin, d.domain, d.op_type, d.since, d.until, d.kernel_flags, opdef=d)
        for d in table.all_definitions()
        if d.plugin == plugin
    ]
    for p in table.paths:
        if p.plugin != plugin:
            continue
        for domain, op_type in p.kernels:
            for d in table.definitions.get((domain, op_type), ()):
                # a path kernel's own in-place/view/data flags are planned; exact is the line's
                out.append(
                    Operator(plugin, domain, op_type, d.since, d.until, d.kernel_flags, p.name, d)
                )
    out.sort(key=lambda o: (o.domain, o.op_type, o.since, o.path or ""))
    return out


# -- samples ---------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _all_backend_cases() -> tuple[Any, ...]:
    import warnings

    from onnx.backend.test.case import node as node_cases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return tuple(node_cases.collect_testcases())


def backend_cases(op: Operator) -> list[Any]:
    """onnx's backend node cases of this operator (their one node is it, the opset covered);
    the function-expanded variants are other operators' cases."""
    domain = op.domain or ""
    if domain not in ONNX_DOMAINS:
        return []  # onnx has no cases for other domains: do not load them
    found = []
    for case in _all_backend_cases():
        nodes = case.model.graph.node
        if "_expanded" in case.name or not nodes:
            continue
        if not any(n.op_type == op.op_type and (n.domain or "") == domain for n in nodes):
            continue
        opset = next(
            (o.version for o in case.model.opset_import if (o.domain or "") == domain), None
        )
        if opset is not None and op.covers(opset) and case.data_sets:
            found.append(case)
    return found


def _as_value(x: Any) -> Any:
    """A backend case's value as a feed: TensorProto and numpy scalars as arrays, sequences
    element by element (onnx's cases hold some values in these forms)."""
    from onnx import TensorProto, numpy_helper

    if isinstance(x, TensorProto):
        return numpy_helper.to_array(x)
    if isinstance(x, np.generic):
        return np.asarray(x)
    if isinstance(x, list):
        return [_as_value(v) for v in x]
    return x


def _backend_sample(case: Any, index: int = 0) -> Sample:
    inputs, outputs = case.data_sets[index]
    return Sample(
        name=case.name,
        model=case.model,
        inputs=[_as_value(x) for x in inputs],
        expected=[_as_value(x) for x in outputs],
        rtol=case.rtol,
        atol=case.atol,
        deterministic=case.model.graph.node[0].op_type not in NONDETERMINISTIC,
        backend=True,
    )


def case_sample(op: Operator, case: Case, index: int) -> Sample:
    """A sample from the author's registration: its model, and the reference's outputs."""
    from onnx import helper

    inputs = [None if x is None else np.asarray(x) for x in case.inputs]
    names = [f"x{i}" if x is not None else "" for i, x in enumerate(inputs)]
    outputs = [f"y{i}" for i in range(case.num_outputs)]
    node = helper.make_node(case.op_type, names, outputs, domain=op.domain, **dict(case.attrs))
    graph_inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
        for n, x in zip(names, inputs)
        if x is not None
    ]
    graph_outputs = [helper.make_empty_tensor_value_info(o) for o in outputs]
    graph = helper.make_graph([node], f"{case.op_type}_sample", graph_inputs, graph_outputs)
    latest = _latest_onnx_opset()
    if case.opset:
        opset = case.opset
    elif op.until is not None:
        opset = op.until
    else:
        opset = op.since if op.domain else max(op.since, latest)
    imports = [helper.make_opsetid(op.domain, opset)]
    if op.domain:
        imports.append(helper.make_opsetid("", latest))
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = min(model.ir_version, 10)
    present = [x for x in inputs if x is not None]
    reference = None
    if case.reference is not None:
        reference = functools.partial(case.reference, *present, **dict(case.attrs))
    return Sample(
        name=case.name or f"case{index}",
        model=model,
        inputs=present,
        reference=reference,
        rtol=case.rtol,
        atol=case.atol,
        deterministic=case.deterministic,
    )


def _latest_onnx_opset() -> int:
    import onnx.defs

    return onnx.defs.onnx_opset_version()


def samples_for(op: Operator, cases: Sequence[Case], limit: int) -> list[Sample]:
    """The author's samples of this operator, else the first onnx backend cases (``limit``)."""
    mine = [c for c in cases if c.op_type == op.op_type and c.domain in (None, op.domain)]
    if mine:
        return [case_sample(op, c, i) for i, c in enumerate(mine)][:limit]
    return [_backend_sample(c) for c in backend_cases(op)[:limit]]


# -- running a sample ------------------------------------------------------------------------------


def _session(op: Operator, sample: Sample, **options: Any) -> Session:
    options.setdefault("kernel_path", op.path or BASE_PATH)
    return Session(sample.model, **options)


def _run(sess: Session, sample: Sample, inputs: Sequence[Any] | None = None) -> list[Any]:
    with np.errstate(all="ignore"):
        return sess.run(None, sample.feed(inputs))


def _same_bits(a: Any, b: Any) -> bool:
    if isinstance(a, list) or isinstance(b, list):
        return (
            isinstance(a, list)
            and isinstance(b, list)
            and len(a) == len(b)
            and all(_same_bits(x, y) for x, y in zip(a, b))
        )
    if a is None or b is None:
        return a is None and b is None
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind == "O":
        return bool(np.all(a == b))
    return np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


def _close(got: Any, want: Any, rtol: float, atol: float) -> str | None:
    """None when ``got`` matches ``want``, else what differs."""
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return f"expected a sequence of {len(want)}, got {type(got).__name__}"
        for k, (g, w) in enumerate(zip(got, want)):
            why = _close(g, w, rtol, atol)
            if why:
                return f"element {k}: {why}"
        return None
    if want is None:
        return None if got is None else f"expected no value, got {type(got).__name__}"
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if got.dtype != want.dtype:
        return f"element type {got.dtype}, expected {want.dtype}"
    if want.dtype.kind in "fc" or want.dtype.kind == "V":
        g, w = got.astype(np.complex128 if want.dtype.kind == "c" else np.float64), want
        w = w.astype(g.dtype)
        if np.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
            return None
        bad = int(np.sum(~np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)))
        return f"{bad} of {want.size} elements differ beyond rtol={rtol}, atol={atol}"
    if np.array_equal(got, want):
        return None
    return f"{int(np.sum(got != want))} of {want.size} elements differ"


# -- the checks ------------------------------------------------------------------------------------


def check_backend(op: Operator, sample: Sample) -> None:
    """onnx's backend node case gives its expected outputs (onnx's runner's comparison)."""
    from onnx.backend.test.runner import Runner

    sess = _session(op, sample)
    got = _run(sess, sample)
    try:
        Runner.assert_similar_outputs(sample.expected, got, sample.rtol, sample.atol)
    except AssertionError as exc:
        raise ContractError(f"results: {op.label} on {sample.name}: {exc}") from None


def check_reference(op: Operator, sample: Sample) -> None:
    """The kernel gives what the author's reference function gives."""
    with np.errstate(all="ignore"):
        want = sample.reference() if sample.reference is not None else sample.expected
    wants = list(want) if isinstance(want, (list, tuple)) else [want]
    got = _run(_session(op, sample), sample)
    for k, want in enumerate(wants):
        if not isinstance(want, list) and want is not None:
            want = np.asarray(want)
        why = _close(got[k], want, sample.rtol, sample.atol)
        if why:
            raise ContractError(
                f"reference: {op.label} output {k} on sample {sample.name!r} does not match the "
                f"registered reference: {why}"
            )


def exact_paths(op: Operator) -> list[str]:
    """The kernel paths an exact operator must agree over: numpy and every available path
    that has a kernel for it."""
    if op.path is not None:
        return [op.path, BASE_PATH]
    table = snapshot()
    key = (op.domain, op.op_type)
    return [BASE_PATH] + [p.name for p in table.paths if key in p.kernels and path_available(p)]


def check_exact(op: Operator, sample: Sample) -> None:
    """supports_exact: the same bits whatever the intra-op threads and the kernel path."""
    first = None
    for path in exact_paths(op):
        for threads in THREAD_COUNTS:
            with _session(
                op, sample, mode="exact", intra_op_threads=threads, kernel_path=path
            ) as s:
                got = _run(s, sample)
            where = f"intra_op_threads={threads}, kernel path {path!r}"
            if first is None:
                first = (got, where)
            elif not _same_bits(got, first[0]):
                raise ContractError(
                    f"supports_exact: {op.label} declares supports_exact but on sample "
                    f"{sample.name!r} gives different bits with {where} than with {first[1]} "
                    f"(an exact kernel's result may depend on neither)"
                )


def _kernel(op: Operator, sample: Sample) -> tuple[Any, KernelFlags]:
    """The kernel object a session would build for the sample's node, and its planned flags."""
    info = node_info(sample.node, sample.opset)
    if op.path is None:
        return op.opdef.factory(info), op.flags
    table = snapshot()
    path = next(p for p in table.paths if p.name == op.path)
    kernel = path.kernels[(op.domain, op.op_type)](info, op.opdef.factory)
    flags = dataclasses.replace(KernelFlags.of(kernel), supports_exact=op.flags.supports_exact)
    return kernel, flags


def _has_subgraphs(node: Any) -> bool:
    return any(a.HasField("g") or len(a.graphs) for a in node.attribute)


def check_in_place(op: Operator, sample: Sample) -> None:
    """in_place_input: writing output 0 over the input gives what separate buffers give."""
    if _has_subgraphs(sample.node):
        return  # a kernel with bodies is built by a session only
    kernel, flags = _kernel(op, sample)
    k = flags.in_place_input
    if k is None or k >= len(sample.inputs) or not isinstance(sample.inputs[k], np.ndarray):
        return
    inputs = [x.copy() if isinstance(x, np.ndarray) else x for x in sample.inputs]
    with np.errstate(all="ignore"):
        separate = evaluate_node(kernel, inputs, len(sample.node.output), flags=flags)
        ictx = InferContext(
            [x.dtype if isinstance(x, np.ndarray) else None for x in inputs],
            [x.shape if isinstance(x, np.ndarray) else None for x in inputs],
            list(inputs),
            len(sample.node.output),
        )
        kernel.infer(ictx)
        types = ictx.output_types()
        if (
            not ictx.in_place  # declined for these inputs: the planner keeps them apart
            or types[0] != (inputs[k].dtype, inputs[k].shape)
            or any(c is not None for c in ictx.constant_outputs())
        ):
            return  # the planner aliases same type and size only
        for how in ("run", "bind"):
            shared = inputs[k].copy()
            ins = list(inputs)
            ins[k] = shared
            outs = [shared] + [None if t is None else np.empty(t[1], t[0]) for t in types[1:]]
            scratch = [np.empty(s, dtype=d) for d, s in ictx.scratch]
            kctx = KernelContext(ictx.prepared, scratch, node=kernel.node)
            if how == "run":
                kernel.run(kctx, ins, outs)
            else:
                kernel.bind(kctx, ins, outs)()
            if not _same_bits(outs[0], separate[0]):
                raise ContractError(
                    f"in_place_input: {op.label} declares in_place_input={k}, but with output 0 "
                    f"written over input {k} (what the planner does when input {k} dies at the "
                    f"node) its {how}() gives other values than with separate buffers on sample "
                    f"{sample.name!r}: the kernel reads input {k} after writing output 0"
                )


def check_view(op: Operator, sample: Sample) -> None:
    """view_of_input: output 0 is input 0's data with the inferred shape, in every session."""
    got = _run(_session(op, sample), sample)
    x = np.asarray(sample.inputs[0])
    y = np.asarray(got[0])
    if y.dtype != x.dtype or y.size != x.size or not _same_bits(y, x.reshape(y.shape)):
        raise ContractError(
            f"view_of_input: {op.label} declares view_of_input but output 0 ({y.dtype} "
            f"{list(y.shape)}) is not input 0 ({x.dtype} {list(x.shape)}) reshaped on sample "
            f"{sample.name!r}"
        )


def check_data_dependent(op: Operator, sample: Sample) -> None:
    """outputs_data_dependent: run allocates every output, the same ones each time."""
    n = len(sample.node.output)
    if _has_subgraphs(sample.node):  # its bodies are compiled by a session only
        sess = _session(op, sample)
        first, again = _run(sess, sample), _run(sess, sample)
    else:
        kernel, flags = _kernel(op, sample)
        with np.errstate(all="ignore"):
            first = evaluate_node(kernel, sample.inputs, n, flags=flags)
            again = evaluate_node(kernel, sample.inputs, n, flags=flags)
    for k, name in enumerate(sample.node.output):
        if name and first[k] is None:
            raise ContractError(
                f"outputs_data_dependent: {op.label} run() did not allocate output {k} "
                f"(ctx.allocate_output or ctx.set_output) on sample {sample.name!r}"
            )
    if sample.deterministic and not _same_bits(first, again):
        raise ContractError(
            f"outputs_data_dependent: {op.label} gives other outputs when run again on the same "
            f"inputs (sample {sample.name!r}): state kept between runs"
        )
    got = _run(_session(op, sample), sample)
    if sample.deterministic and not _same_bits(got, first[: len(got)]):
        raise ContractError(
            f"outputs_data_dependent: {op.label} gives other outputs in a session than run "
            f"alone (sample {sample.name!r})"
        )


def _variants(sample: Sample, count: int) -> list[list[Any]]:
    """Distinct feeds of the sample's types and shapes: float inputs shifted by k."""
    out = []
    for k in range(count):
        feed = []
        for x in sample.inputs:
            if isinstance(x, np.ndarray) and x.dtype.kind == "f" and x.size:
                feed.append((x + x.dtype.type(k * 0.5)).astype(x.dtype))
            else:
                feed.append(x)
        out.append(feed)
    return out


def check_thread_safety(op: Operator, sample: Sample) -> None:
    """thread safety: 8 threads running one session give what serial runs give."""
    sess = _session(op, sample, intra_op_threads=1)
    feeds, serial = [], []
    for feed in _variants(sample, CONCURRENT_THREADS):
        try:
            serial.append(_run(sess, sample, feed))
        except Exception:
            continue
        feeds.append(feed)
    failures: list[str] = []
    start = threading.Barrier(len(feeds))

    def worker(t: int) -> None:
        try:
            start.wait()
            for _ in range(CONCURRENT_ROUNDS):
                got = _run(sess, sample, feeds[t])
                if not _same_bits(got, serial[t]):
                    failures.append(f"thread {t} got another result than serial runs")
                    return
        except Exception as exc:
            failures.append(f"thread {t} raised {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(len(feeds))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if failures:
        raise ContractError(
            f"thread safety: {op.label}: {len(threads)} threads running one session on sample "
            f"{sample.name!r}: {failures[0]} (a kernel object is shared by every concurrent "
            f"run: keep per-run data in ctx.prepared/ctx.scratch, not on self)"
        )


def check_steady_state(op: Operator, sample: Sample) -> None:
    """A static plan's steady-state run allocates no numpy array data."""
    from graphrt.testing._alloc import count_numpy_allocations

    sess = _session(op, sample, intra_op_threads=1)
    feed = sample.feed()
    first = _run(sess, sample)
    if not sess.cached_plans or not sess.cached_plans[0].static:
        return
    names = [o.name for o in sess.get_outputs()]
    out = {n: np.empty_like(v) for n, v in zip(names, first) if type(v) is np.ndarray}
    with np.errstate(all="ignore"):
        for _ in range(3):
            sess.run(None, feed, out=out)
        with count_numpy_allocations() as counter:
            for _ in range(3):
                sess.run(None, feed, out=out)
    if counter.count:
        raise ContractError(
            f"steady state: {op.label} allocated numpy array data {counter.count} time(s) "
            f"({counter.bytes} bytes) in 3 steady-state runs of a static plan (sample "
            f"{sample.name!r}): use ctx.add_scratch in infer and out= in run"
        )


#: Check name -> (function, does it apply to this operator and sample).
CHECKS: dict[str, tuple[Callable[[Operator, Sample], None], Callable[[Operator, Sample], bool]]] = {
    "reference": (check_reference, lambda op, s: s.reference is not None),
    "exact": (check_exact, lambda op, s: op.flags.supports_exact and s.deterministic),
    # a path kernel's own class says whether it works in place: built and read by the check
    "in_place": (
        check_in_place,
        lambda op, s: op.flags.in_place_input is not None or op.path is not None,
    ),
    "view": (check_view, lambda op, s: op.flags.view_of_input),
    "data_dependent": (check_data_dependent, lambda op, s: op.flags.outputs_data_dependent),
    "thread_safety": (check_thread_safety, lambda op, s: s.deterministic),
    "steady_state": (
        check_steady_state,
        lambda op, s: not op.flags.outputs_data_dependent and s.deterministic,
    ),
}


def applicable_checks(op: Operator, sample: Sample, only: Sequence[str] | None = None) -> list[str]:
    return [
        name
        for name, (_, applies) in CHECKS.items()
        if (not only or name in only) and applies(op, sample)
    ]


def run_check(name: str, op: Operator, sample: Sample) -> None:
    CHECKS[name][0](op, sample)


def matches(pattern: str, text: str) -> bool:
    return re.search(pattern, text) is not None
