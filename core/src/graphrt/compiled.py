"""CompiledGraph: operators resolved, passes run, kernels built; independent of input shapes."""

from __future__ import annotations

import ctypes
import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from graphrt import dtypes
from graphrt.attrs import node_info
from graphrt.entrypoints import entry_points
from graphrt.errors import PluginError, SessionError
from graphrt.functions import inline_functions
from graphrt.ir import (
    MAX_GRAPH_DEPTH,
    IrModel,
    ValueDecl,
    check_cancelled,
    graph_outer_reads,
    import_graph,
    iter_subgraphs,
)
from graphrt.kernel import Body, KernelFlags, NodeInfo, OpDef, OpKernel
from graphrt.limits import DEFAULT_MAX_MEMORY
from graphrt.passes import PassContext, PassGraph, PassNode, builtin_passes
from graphrt.paths import KernelPath
from graphrt.plugins import (
    ENTRY_POINT_GROUP,
    OperatorTable,
    loaded_plugins,
    plugin_failures,
    snapshot,
)

__all__ = ["BodyFactory", "CNode", "CompiledGraph", "compile_model"]


@dataclasses.dataclass(frozen=True)
class CNode:
    """A node ready to plan: its kernel and value ids (-1 for an absent optional input)."""

    index: int
    info: NodeInfo
    kernel: OpKernel
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    plugin: str
    #: The operator's flags from its OpDef (a kernel path's kernel runs under them too).
    flags: KernelFlags


@dataclasses.dataclass
class CompiledGraph:
    names: list[str]  # value id -> name
    ids: dict[str, int]
    inputs: list[ValueDecl]
    input_ids: list[int]
    outputs: list[ValueDecl]
    output_ids: list[int]
    constants: dict[int, np.ndarray]
    nodes: list[CNode]
    exact: bool
    kernel_path: str
    passes_run: list[str]
    dropped_nodes: int
    declared: dict[str, ValueDecl]  # value_info annotations by name
    initializer_names: set[str] = dataclasses.field(default_factory=set)
    #: Compiled bodies as (node name, body graph name) -> Body, for their counters.
    bodies: dict[tuple[str, str], Any] = dataclasses.field(default_factory=dict)
    #: The session's memory budget in bytes (graphrt.limits): plans, folding and runs.
    max_memory: int = DEFAULT_MAX_MEMORY
    #: Constants stored as float16/bfloat16 arrays (``weight_storage``) that the graph still
    #: types float32: only kernels that declared the input in ``half_weight_inputs`` read them.
    half_weights: frozenset[int] = frozenset()


#: What runs a compiled body: ``make_body(graph, n_inputs, outer_names) -> Body``.  The session
#: passes it (graphrt.subgraph.BodySession): the compiler builds no runtime object itself.
BodyFactory = Callable[[CompiledGraph, int, tuple[str, ...]], Body]


def compile_model(
    ir: IrModel,
    table: OperatorTable,
    *,
    make_body: BodyFactory,
    exact: bool,
    level: str,
    path: KernelPath | None,
    weight_storage: str = "original",
    cancellation: Any = None,
    depth: int = 0,
    max_memory: int = DEFAULT_MAX_MEMORY,
) -> CompiledGraph:
    """``depth`` counts the bodies this graph is nested in: a second guard beside the import's
    nesting check, for bodies that only appear while compiling (inlined function bodies).
    ``max_memory`` is the session's budget, for its bodies and its constant folding too.
    ``make_body`` turns each compiled If/Loop/Scan/SequenceMap body into what its kernel runs.
    The options come checked (:class:`graphrt.options.SessionOptions`)."""

    bodies: dict[tuple[str, int], tuple[str, str, Any]] = {}

    def compile_body(graph_proto: Any, node_name: str = "") -> Body:
        if depth >= MAX_GRAPH_DEPTH:
            raise SessionError(
                "invalid_model",
                f"subgraphs are nested more than {MAX_GRAPH_DEPTH} levels deep (node "
                f"{node_name!r}); graphrt refuses deeper nesting",
                node=node_name,
            )
        reads = graph_outer_reads(graph_proto)
        # Enclosing initializers the body reads are constants of the body too (rounded as the
        # session stores weights): its plans fold what they feed and prepare kernels for them
        # (a MatMul's packed weight), instead of taking them as inputs at every iteration.
        baked = {n: constants[n] for n in reads if n in constants}
        outer = tuple(n for n in reads if n not in baked)
        body_ir = import_graph(
            graph_proto,
            ir.opsets,
            ir.functions,
            ir.base_dir,
            cancellation=cancellation,
            outer=tuple(reads),
        )
        if baked:
            body_ir = dataclasses.replace(
                body_ir,
                inputs=[d for d in body_ir.inputs if d.name not in baked],
                initializers={**baked, **body_ir.initializers},
            )
        body = compile_model(
            body_ir,
            table,
            make_body=make_body,
            exact=exact,
            level="none",
            path=path,
            cancellation=cancellation,
            depth=depth + 1,
            max_memory=max_memory,
        )
        session = make_body(body, len(body_ir.inputs) - len(outer), outer)
        bodies[(node_name, id(graph_proto))] = (node_name, graph_proto.name, session)
        return session

    ir = inline_functions(ir, cancellation)  # model-local functions before plugin operators
    constants = _weights(ir.initializers, weight_storage)  # before the bodies: they read them
    nodes = _resolve(ir, table, cancellation, compile_body)
    if exact:
        _check_exact(nodes, table, ir.opsets)

    def lookup(domain: str, op_type: str) -> OpDef | None:
        return table.lookup(domain, op_type, ir.opsets.get(domain, 1))

    def make_kernel(node: PassNode) -> OpKernel:
        return _build_kernel(node, path)

    graph = PassGraph(nodes, constants, [d.name for d in ir.inputs], [d.name for d in ir.outputs])
    dropped = graph.remove_dead()

    def flags_of(node: PassNode, kernel: OpKernel) -> KernelFlags:
        return _kernel_flags(node, kernel, path)

    ctx = PassContext(
        exact, level, make_kernel, lookup, cancellation, max_memory, flags_of,
        kernel_path=path.name if path else "numpy",
    )  # fmt: skip
    passes_run = []
    # one ascending order over the built-ins and the plugins' passes (stable: at equal orders
    # the built-ins first), so a plugin pass can run before constant folding (order 10)
    for p in sorted(builtin_passes() + list(table.passes), key=lambda p: getattr(p, "order", 0)):
        if p.selected(level, exact):
            check_cancelled(cancellation)
            if p.run(graph, ctx):
                passes_run.append(p.name)
                dropped += graph.remove_dead()

    names: list[str] = []
    ids: dict[str, int] = {}

    def vid(name: str) -> int:
        if not name:
            return -1
        if name not in ids:
            ids[name] = len(names)
            names.append(name)
        return ids[name]

    input_ids = [vid(d.name) for d in ir.inputs]
    const_ids = {vid(n): v for n, v in graph.constants.items()}
    cnodes = []
    for i, n in enumerate(graph.nodes):
        check_cancelled(cancellation)
        kernel = make_kernel(n)
        cnodes.append(
            CNode(
                index=i,
                info=n.info,
                kernel=kernel,
                inputs=tuple(vid(x) for x in n.inputs),
                outputs=tuple(vid(x) for x in n.outputs),
                plugin=n.op_def.plugin,
                flags=flags_of(n, kernel),
            )
        )
    output_ids = [vid(d.name) for d in ir.outputs]
    half = _store_half(const_ids, cnodes, {*input_ids, *output_ids}, weight_storage)
    for v in half:  # no table keeps the float32 arrays the half ones replace
        for table in (graph.constants, ir.initializers):
            if names[v] in table:
                table[names[v]] = const_ids[v]
    if half:
        _trim_heap()
    return CompiledGraph(
        names=names,
        ids=ids,
        inputs=ir.inputs,
        input_ids=input_ids,
        outputs=ir.outputs,
        output_ids=output_ids,
        constants=const_ids,
        nodes=cnodes,
        exact=exact,
        kernel_path=path.name if path else "numpy",
        passes_run=passes_run,
        dropped_nodes=dropped,
        declared=dict(ir.value_info),
        initializer_names=set(ir.initializers),
        bodies=_body_table(bodies.values()),
        max_memory=max_memory,
        half_weights=half,
    )


def _resolve(
    ir: IrModel, table: OperatorTable, cancellation: Any, compile_body: Any = None
) -> list[PassNode]:
    """Every node's winning OpDef; all missing operators (bodies included) reported together."""
    missing: dict[str, tuple[str, str, int]] = {}  # label -> (domain, op_type, opset)
    resolved: list[PassNode] = []
    for n in ir.nodes:
        check_cancelled(cancellation)
        opset = ir.opsets.get(n.domain)
        if opset is None:
            raise SessionError(
                "invalid_model",
                f"node {n.name!r} uses domain {n.domain!r}, which the model does not import",
                node=n.name,
            )
        try:
            op_def = table.lookup(n.domain, n.op_type, opset)
        except PluginError as exc:
            raise SessionError("unsupported_operator", str(exc), node=n.name) from exc
        if op_def is None:
            missing.setdefault(_label(n.domain, n.op_type, opset), (n.domain, n.op_type, opset))
            continue
        info = node_info(n.proto, opset)
        inputs = list(n.inputs)
        if n.subgraphs:  # found once, by the import
            outer = tuple(dict.fromkeys(x for g in n.subgraphs for x in graph_outer_reads(g)))
            info = dataclasses.replace(
                info,
                outer_inputs=outer,
                compile_subgraph=functools.partial(compile_body, node_name=n.name),
            )
            inputs += outer
        resolved.append(PassNode(info, op_def, inputs, list(n.outputs)))
    # bodies' operators, reported too
    for proto in _body_nodes([n.proto for n in ir.nodes if n.subgraphs]):
        domain = "" if proto.domain == "ai.onnx" else proto.domain
        opset = ir.opsets.get(domain)
        if opset is not None and table.lookup(domain, proto.op_type, opset) is None:
            missing.setdefault(_label(domain, proto.op_type, opset), (domain, proto.op_type, opset))
    if missing:
        raise SessionError(
            "unsupported_operator", _missing_message(table, missing), operators=list(missing)
        )
    return resolved


def _missing_message(table: OperatorTable, missing: dict[str, tuple[str, str, int]]) -> str:
    """What the user can do about missing operators: plugins the session's allow-list left
    out (and which of the operators they provide), and plugins that failed to load."""
    in_use = ", ".join(table.plugins) or "none"
    blocked = tuple(getattr(table, "blocked", ()))  # never imported: what they provide is unknown
    try:  # the error is the point here: a second failure only shortens the message
        kept_out = set(table.plugins) | set(blocked)
        excluded = [n for n in loaded_plugins(strict=False) if n not in kept_out]
        others = snapshot(excluded, strict=False) if excluded else None
    except Exception:
        excluded, others = [], None
    who = "no plugin in use" if excluded else "no installed plugin"
    text = f"{who} provides {', '.join(missing)} (plugins in use: {in_use})"
    if excluded:
        provides: dict[str, list[str]] = {name: [] for name in excluded}
        for label, key in missing.items():
            try:
                d = others.lookup(*key) if others is not None else None
            except Exception:  # a tie among the left-out plugins: name neither
                d = None
            if d is not None:
                provides[d.plugin].append(label)
        named = [f"{n} (provides {', '.join(ops)})" if ops else n for n, ops in provides.items()]
        text += f"; installed but left out by the session's plugins= list: {', '.join(named)}"
    if blocked:
        text += f"; blocked plugins (never imported): {', '.join(blocked)}"
    # Failures of entry points still installed (one removed since is no longer news).
    installed = {ep.name for ep in entry_points(ENTRY_POINT_GROUP)}
    failures = {k: v for k, v in plugin_failures().items() if k in installed}
    if failures:
        text += "; plugins that failed to load: " + ", ".join(
            f"{name!r} ({why})" for name, why in sorted(failures.items())
        )
    return text


def _body_table(found: Any) -> dict[tuple[str, str], Any]:
    """(node, body graph name) -> body; a name two bodies of one node share gets ``#2``..."""
    table: dict[tuple[str, str], Any] = {}
    for node, name, body in found:
        key, k = (node, name), 1
        while key in table:
            k += 1
            key = (node, f"{name}#{k}")
        table[key] = body
    return table


def _label(domain: str, op_type: str, opset: int) -> str:
    return f"{domain}.{op_type} (opset {opset})" if domain else f"{op_type} (opset {opset})"


def _body_nodes(protos: list[Any]) -> list[Any]:
    """Every node inside the subgraphs of these nodes, at any depth (not the nodes themselves)."""
    found = []
    for p in protos:
        for g in iter_subgraphs(p):
            found.extend(g.node)
            found.extend(_body_nodes(list(g.node)))
    return found


def _check_exact(nodes: list[PassNode], table: OperatorTable, opsets: dict[str, int]) -> None:
    """Every operator without exact support, in bodies too (a Loop is exact when its body is)."""
    lacking: list[str] = []
    defs = [(n.op_def, n.op_type, n.info.domain, n.info.opset) for n in nodes]
    for proto in _body_nodes([n.info.proto for n in nodes if n.info.proto is not None]):
        domain = "" if proto.domain == "ai.onnx" else proto.domain
        opset = opsets.get(domain, 1)
        d = table.lookup(domain, proto.op_type, opset)
        if d is not None:
            defs.append((d, proto.op_type, domain, opset))
    for op_def, op_type, domain, opset in defs:
        if not op_def.flag("supports_exact"):
            label = _label(domain, op_type, opset)
            if label not in lacking:
                lacking.append(label)
    if lacking:
        raise SessionError(
            "exact_mode_unavailable",
            f"exact mode is not available for {', '.join(lacking)}; use mode='fast' or a plugin "
            "with exact kernels for them",
            operators=lacking,
        )


def _kernel_flags(node: PassNode, kernel: OpKernel, path: KernelPath | None) -> KernelFlags:
    """The flags a node is planned with: its OpDef's.  A kernel path's kernel (an object of
    the path's own class, made by a function) is planned with its class's in-place, view and
    data-dependence flags, which may be narrower than the table's (the native
    LayerNormalization does not run in place); its exact support is the OpDef's, as the exact
    check (``_check_exact``) reads it."""
    flags = node.op_def.kernel_flags
    if path is None or (node.info.domain, node.op_type) not in path.kernels:
        return flags
    return dataclasses.replace(KernelFlags.of(kernel), supports_exact=flags.supports_exact)


def _build_kernel(node: PassNode, path: KernelPath | None) -> OpKernel:
    factory = node.op_def.factory
    if path is not None:
        native = path.kernels.get((node.info.domain, node.op_type))
        if native is not None:
            base = factory
            factory = lambda info, _n=native, _b=base: _n(info, _b)
    try:
        return factory(node.info)
    except SessionError:
        raise
    except Exception as exc:
        raise SessionError(
            "invalid_model", f"{node.info.label}: {type(exc).__name__}: {exc}", node=node.info.name
        ) from exc


def _weights(initializers: dict[str, np.ndarray], storage: str) -> dict[str, np.ndarray]:
    """Weights as the session keeps them; float16/bfloat16 storage rounds float32 weights.

    The arrays are the session's own import (graphrt.proto.to_array copies): a writable one
    is rounded in place, so no second float32 copy of the weights is ever allocated (freed
    copies would stay in the process as heap the allocator does not return)."""
    if storage == "original":
        return dict(initializers)
    low = np.dtype(np.float16) if storage == "float16" else dtypes.from_onnx(16)
    out = {}
    for name, w in initializers.items():
        if w.dtype == np.float32 and w.size > 1:
            if w.flags.writeable:
                np.copyto(w, w.astype(low))
                out[name] = w
            else:
                out[name] = w.astype(low).astype(np.float32)
        else:
            out[name] = w
    return out


#: Weights below this size stay float32 under half storage: too small to matter.
HALF_MIN_BYTES = 1024


def _store_half(
    constants: dict[int, np.ndarray],
    nodes: list[CNode],
    keep: set[int],
    storage: str,
) -> frozenset[int]:
    """Store as float16/bfloat16 (in ``constants``, in place) the float32 weights that every
    reader takes in half precision: each reading kernel lists the input in its
    ``half_weight_inputs`` and widens it itself (docs/fp16.md).  Only values the half type holds
    exactly change storage (the rounded initializers; not a constant a pass computed from them,
    such as a Conv weight with a BatchNormalization folded in), so results are those of the
    model whose weights were rounded and stored as float32.  Graph
    inputs and outputs, and weights any other kernel (or a body) reads, stay float32."""
    if storage == "original":
        return frozenset()
    low = np.dtype(np.float16) if storage == "float16" else dtypes.from_onnx(16)
    takes: dict[int, bool] = {}
    for n in nodes:
        accepts = getattr(n.kernel, "half_weight_inputs", ())
        for j, v in enumerate(n.inputs):
            if v in constants:
                takes[v] = takes.get(v, True) and j in accepts
    half = set()
    for v, ok in takes.items():
        w = constants[v]
        if not ok or v in keep or not isinstance(w, np.ndarray) or w.dtype != np.float32:
            continue
        if w.nbytes < HALF_MIN_BYTES:
            continue
        stored = w.astype(low)
        if np.array_equal(stored.astype(np.float32), w, equal_nan=True):
            constants[v] = stored
            half.add(v)
    return frozenset(half)


def _trim_heap() -> None:
    """Give the pages of the freed float32 weights back to the OS (glibc's ``malloc_trim``).

    The weights were allocated early, below everything the compiler allocated after them, so
    the allocator would otherwise keep them as free heap: the process would not shrink."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to ask
        return
    trim(0)
