"""Importing an ONNX model: weights copied out, external data checked, nodes in dependency order.

The result (:class:`IrModel`) no longer refers to the ``ModelProto``'s tensors, so the model
can be dropped once a session exists.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import os
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from graphrt import dtypes, proto
from graphrt.errors import SessionError
from graphrt.proto import AttributeProto, TensorProto

__all__ = ["IrModel", "IrNode", "ValueDecl", "import_model", "read_model"]

Dim = int | str | None


@dataclasses.dataclass(frozen=True)
class ValueDecl:
    """A graph input or output as declared: element type, dims (int, symbol or None), kind."""

    name: str
    dtype: np.dtype | None
    dims: tuple[Dim, ...] | None  # None: no shape declared (any rank)
    kind: str = "tensor"  # tensor, sequence, optional, map
    type_proto: Any = None

    @property
    def type(self) -> str:
        """onnxruntime's spelling: tensor(float), seq(tensor(int64)), optional(tensor(float))."""
        if self.kind != "tensor" and self.type_proto is not None:
            return type_string(self.type_proto)
        if self.kind != "tensor":
            return self.kind
        return dtypes.name_of(self.dtype)

    @property
    def element_dtype(self) -> np.dtype | None:
        """The tensor element type inside a sequence or optional (None when undeclared)."""
        t = self.type_proto
        while t is not None:
            which = t.WhichOneof("value")
            if which == "tensor_type":
                return _elem_dtype(t.tensor_type.elem_type)
            if which == "sequence_type":
                t = t.sequence_type.elem_type
            elif which == "optional_type":
                t = t.optional_type.elem_type
            else:
                return None
        return None


def type_string(t: Any) -> str:
    """A TypeProto written the way onnxruntime's NodeArg.type writes it."""
    which = t.WhichOneof("value")
    if which == "tensor_type":
        return dtypes.name_of(_elem_dtype(t.tensor_type.elem_type))
    if which == "sequence_type":
        return f"seq({type_string(t.sequence_type.elem_type)})"
    if which == "optional_type":
        return f"optional({type_string(t.optional_type.elem_type)})"
    if which == "map_type":
        key = dtypes.name_of(_elem_dtype(t.map_type.key_type))[7:-1]
        return f"map({key},{type_string(t.map_type.value_type)})"
    return "unknown"


def _elem_dtype(code: int) -> np.dtype | None:
    try:
        return dtypes.from_onnx(code)
    except KeyError:
        return None


@dataclasses.dataclass
class IrNode:
    proto: proto.NodeProto
    op_type: str
    domain: str
    name: str
    inputs: list[str]  # "" for an absent optional input
    outputs: list[str]
    #: The node's subgraphs (If/Loop/Scan bodies), found once: walking a node's attributes
    #: again for them in every later step cost as much as the steps themselves.
    subgraphs: tuple[proto.GraphProto, ...] = ()

    @classmethod
    def of(cls, node: proto.NodeProto) -> IrNode:
        domain = "" if node.domain == "ai.onnx" else node.domain
        return cls(
            node,
            node.op_type,
            domain,
            node.name,
            list(node.input),
            list(node.output),
            _subgraphs(node),
        )


def _subgraphs(node: proto.NodeProto) -> tuple[proto.GraphProto, ...]:
    """``tuple(iter_subgraphs(node))`` without a generator (once per node of every model)."""
    attrs = node.attribute
    if not attrs:
        return ()
    found: tuple[proto.GraphProto, ...] = ()
    for attr in attrs:
        t = attr.type
        if t == AttributeProto.GRAPH:
            found += (attr.g,)
        elif t == AttributeProto.GRAPHS:
            found += tuple(attr.graphs)
    return found


@dataclasses.dataclass
class IrModel:
    inputs: list[ValueDecl]
    outputs: list[ValueDecl]
    initializers: dict[str, np.ndarray]
    nodes: list[IrNode]
    opsets: dict[str, int]
    value_info: dict[str, ValueDecl]
    functions: list[proto.FunctionProto]
    base_dir: str | None
    graph_name: str = ""
    producer: str = ""


def check_cancelled(token: Any) -> None:
    """Raise SessionError("cancelled") when ``token`` (a CancellationToken) has been cancelled."""
    if token is None:
        return
    cancelled = getattr(token, "cancelled", None)
    if cancelled is None and hasattr(token, "is_cancelled"):
        cancelled = token.is_cancelled()
    if cancelled:
        raise SessionError("cancelled", "the operation was cancelled")


def read_model(model: Any) -> tuple[proto.ModelProto, str | None]:
    """A ModelProto (without loading external data) and the folder external data is read from.

    Bytes and ``.onnx`` files are parsed with onnx's generated protobuf classes only
    (graphrt.proto): the onnx package itself is not imported on this path.
    """
    if isinstance(model, proto.ModelProto):
        return model, None
    if isinstance(model, (bytes, bytearray, memoryview)):
        try:
            return proto.parse_model(bytes(model)), None
        except Exception as exc:
            raise SessionError("invalid_model", f"the bytes are not an ONNX model: {exc}") from exc
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.exists(path):
            raise SessionError("invalid_model", f"no model file at {path!r}")
        try:
            model_proto = proto.load_model(path)
        except Exception as exc:
            raise SessionError("invalid_model", f"{path!r} is not an ONNX model: {exc}") from exc
        return model_proto, os.path.dirname(os.path.abspath(path))
    raise SessionError(
        "invalid_model",
        f"a model is a path, bytes or onnx.ModelProto, not {type(model).__name__}",
    )


#: Deepest subgraph nesting (If/Loop/Scan bodies inside bodies) a model may have.
MAX_GRAPH_DEPTH = 64

#: Largest dense tensor a sparse initializer may expand to (the plan's 2 GiB rule).
MAX_SPARSE_BYTES = 2**31


@contextlib.contextmanager
def _model_errors(what: str) -> Iterator[None]:
    """Any failure while importing becomes ``SessionError("invalid_model")`` (never a raw one)."""
    try:
        yield
    except SessionError:
        raise
    except RecursionError as exc:
        raise SessionError("invalid_model", f"{what} is nested too deeply to import") from exc
    except MemoryError as exc:
        raise SessionError("invalid_model", f"{what} does not fit in memory") from exc
    except Exception as exc:
        raise SessionError(
            "invalid_model", f"{what} cannot be imported: {type(exc).__name__}: {exc}"
        ) from exc


def import_model(model: Any, cancellation: Any = None) -> IrModel:
    model_proto, base_dir = read_model(model)
    with _model_errors("the model"):
        return _import_model(model_proto, base_dir, cancellation)


def _import_model(model: proto.ModelProto, base_dir: str | None, cancellation: Any) -> IrModel:
    if not model.HasField("graph"):
        raise SessionError("invalid_model", "the model has no graph")
    check_versions(model)
    check_nesting(model, cancellation)
    opsets: dict[str, int] = {}
    for imp in model.opset_import:
        opsets["" if imp.domain == "ai.onnx" else imp.domain] = int(imp.version)
    if "" not in opsets and model.ir_version and model.ir_version < 3:
        opsets[""] = 1  # before IR 3 the default domain was implied
    ir = import_graph(
        model.graph, opsets, list(model.functions), base_dir, cancellation=cancellation
    )
    ir.producer = model.producer_name
    return ir


def check_versions(model: proto.ModelProto) -> None:
    """Refuse an IR version or ai.onnx opset newer than the installed onnx defines.

    Their operators' meaning is unknown here, so running them under today's definitions
    could silently compute something else.
    """
    ir_max = proto.IR_VERSION
    if model.ir_version > ir_max:
        raise SessionError(
            "invalid_model",
            f"the model has IR version {model.ir_version}; the installed onnx "
            f"{proto.onnx_version()} supports IR versions up to {ir_max}",
        )
    imports = list(model.opset_import)
    for f in model.functions:
        imports += list(f.opset_import)
    for imp in imports:
        if imp.domain in ("", "ai.onnx") and not proto.opset_supported(imp.version):
            raise SessionError(
                "invalid_model",
                f"the model imports ai.onnx opset {imp.version}; the installed onnx "
                f"{proto.onnx_version()} supports ai.onnx opsets up to {proto.newest_opset()}",
            )


def check_nesting(model: proto.ModelProto, cancellation: Any = None) -> None:
    """Refuse subgraphs nested deeper than MAX_GRAPH_DEPTH (walked without recursion)."""
    stack: list[tuple[proto.GraphProto | proto.FunctionProto, int]] = [(model.graph, 0)]
    stack += [(f, 0) for f in model.functions]
    while stack:
        check_cancelled(cancellation)
        g, depth = stack.pop()
        for n in g.node:
            for sub in iter_subgraphs(n):
                if depth + 1 > MAX_GRAPH_DEPTH:
                    raise SessionError(
                        "invalid_model",
                        f"subgraphs are nested more than {MAX_GRAPH_DEPTH} levels deep (node "
                        f"{n.name!r}, {n.op_type}); graphrt refuses deeper nesting",
                        node=n.name,
                    )
                stack.append((sub, depth + 1))


def import_graph(
    graph: proto.GraphProto,
    opsets: dict[str, int],
    functions: list[proto.FunctionProto],
    base_dir: str | None,
    *,
    cancellation: Any = None,
    outer: tuple[str, ...] = (),
) -> IrModel:
    """A graph as an IrModel: a model's main graph, or a body whose extra inputs are ``outer``.

    A body's outer-scope values become inputs after its declared ones (untyped: whatever
    arrives is accepted).
    """
    with _model_errors(f"graph {graph.name!r}"):
        return _import_graph(graph, opsets, functions, base_dir, cancellation, outer)


def _import_graph(
    graph: proto.GraphProto,
    opsets: dict[str, int],
    functions: list[proto.FunctionProto],
    base_dir: str | None,
    cancellation: Any,
    outer: tuple[str, ...],
) -> IrModel:
    initializers: dict[str, np.ndarray] = {}
    for t in graph.initializer:
        check_cancelled(cancellation)
        _unique(t.name, initializers, "initializer")
        initializers[t.name] = tensor_to_array(t, base_dir)
    for st in graph.sparse_initializer:
        check_cancelled(cancellation)
        _unique(st.values.name, initializers, "initializer")
        initializers[st.values.name] = _sparse_to_dense(st, base_dir)
    seen_inputs: set[str] = set()
    for v in graph.input:
        _unique(v.name, seen_inputs, "graph input")
        seen_inputs.add(v.name)
    inputs = [decl(v) for v in graph.input if v.name not in initializers]
    inputs += [ValueDecl(name, None, None) for name in outer]
    outputs = [decl(v) for v in graph.output]
    value_info = {v.name: decl(v) for v in graph.value_info}
    nodes = [IrNode.of(n) for n in graph.node]
    check_cancelled(cancellation)
    known = {d.name for d in inputs} | set(initializers)
    nodes = topological_order(nodes, known, cancellation, outer=set())
    produced = known | {o for n in nodes for o in n.outputs if o}
    for out in outputs:
        if out.name not in produced:
            raise SessionError("invalid_model", f"graph output {out.name!r} is never produced")
    return IrModel(
        inputs=inputs,
        outputs=outputs,
        initializers=initializers,
        nodes=nodes,
        opsets=opsets,
        value_info=value_info,
        functions=functions,
        base_dir=base_dir,
        graph_name=graph.name,
    )


def _unique(name: str, seen: Any, what: str) -> None:
    if name in seen:
        raise SessionError("invalid_model", f"{what} {name!r} is declared twice")


def topological_order(
    nodes: list[IrNode], known: set[str], cancellation: Any, outer: set[str]
) -> list[IrNode]:
    """Nodes in an order where every input is produced first (graph order kept where valid).

    Kahn's algorithm, linear in the graph's size up to a heap's log factor.  The order is the
    one of repeated passes over the graph in file order, each taking every node whose inputs
    are ready at that point: a node's pass is the latest of its producers' passes, plus one
    for a producer stored after it.  Sorted by (pass, position), an already-sorted graph keeps
    its order.  An input nothing produces is an invalid model, named with its node.  ``outer``
    holds names a subgraph may read from enclosing graphs.
    """
    check_cancelled(cancellation)
    if _in_order(nodes, known, outer):
        return list(nodes)
    available = set(known) | set(outer)
    producers: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for o in n.outputs:
            if o:
                if o in producers or o in known:
                    raise SessionError(
                        "invalid_model",
                        f"value {o!r} is produced twice (node {n.name!r})",
                        node=n.name,
                    )
                producers[o] = i
    waiting = [0] * len(nodes)  # producers not placed yet, per node
    consumers: list[list[int]] = [[] for _ in nodes]
    needs: list[list[str]] = []
    ready: list[tuple[int, int]] = []  # (pass, position)
    for i, n in enumerate(nodes):
        if i % 1024 == 0:
            check_cancelled(cancellation)
        reads = n.inputs
        if n.subgraphs:
            reads = reads + [x for g in n.subgraphs for x in graph_outer_reads(g)]
        wanted = list(dict.fromkeys(x for x in reads if x))
        needs.append(wanted)
        for x in wanted:
            if x in available:
                continue
            p = producers.get(x)
            if p is None:  # reported below, once every node that can run has been placed
                waiting[i] += 1
                continue
            waiting[i] += 1
            consumers[p].append(i)
        if waiting[i] == 0:
            ready.append((0, i))
    passes = [0] * len(nodes)
    order: list[IrNode] = []
    heapq.heapify(ready)
    while ready:
        if len(order) % 1024 == 0:
            check_cancelled(cancellation)
        pass_, i = heapq.heappop(ready)
        order.append(nodes[i])
        for c in consumers[i]:
            passes[c] = max(passes[c], pass_ + (1 if c < i else 0))
            waiting[c] -= 1
            if waiting[c] == 0:
                heapq.heappush(ready, (passes[c], c))
    if len(order) < len(nodes):
        placed = {id(n) for n in order}
        i = next(k for k, n in enumerate(nodes) if id(n) not in placed)
        n = nodes[i]
        available.update(o for m in order for o in m.outputs if o)
        missing = [x for x in needs[i] if x not in available]
        cyclic = [x for x in missing if x in producers]
        what = "a cycle through" if cyclic else "undefined input(s)"
        raise SessionError(
            "invalid_model",
            f"node {n.name!r} ({n.op_type}) has {what} {', '.join(map(repr, missing))}",
            node=n.name,
        )
    return order


def _in_order(nodes: list[IrNode], known: set[str], outer: set[str]) -> bool:
    """Whether the nodes already are in dependency order, each value produced once and never
    over a known one: the order topological_order keeps then, found in one pass (most models
    are stored sorted).  Anything else (a wrong order, an undefined input, a value produced
    twice) is left to the full algorithm, which reorders or names the fault."""
    available = set(known) | set(outer)
    produced: set[str] = set()
    for n in nodes:
        for x in n.inputs:
            if x and x not in available:
                return False
        for g in n.subgraphs:
            for x in graph_outer_reads(g):
                if x and x not in available:
                    return False
        for o in n.outputs:
            if o:
                if o in produced or o in known:
                    return False
                produced.add(o)
                available.add(o)
    return True


def _subgraph_reads(node: proto.NodeProto) -> list[str]:
    """Names a node's subgraphs read from enclosing scopes (If/Loop/Scan bodies)."""
    reads: list[str] = []
    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH:
            reads.extend(graph_outer_reads(attr.g))
        elif attr.type == AttributeProto.GRAPHS:
            for g in attr.graphs:
                reads.extend(graph_outer_reads(g))
    return reads


def graph_outer_reads(graph: proto.GraphProto) -> list[str]:
    """Names a graph reads that it does not define itself, in first-use order."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.values.name for t in graph.sparse_initializer}
    seen: dict[str, None] = {}
    for n in graph.node:
        for x in list(n.input) + _subgraph_reads(n):
            if x and x not in defined and x not in seen:
                seen[x] = None
        defined.update(o for o in n.output if o)
    for o in graph.output:
        if o.name not in defined and o.name not in seen:
            seen[o.name] = None
    return list(seen)


def decl(v: proto.ValueInfoProto) -> ValueDecl:
    t = v.type
    which = t.WhichOneof("value")
    if which == "tensor_type":
        tt = t.tensor_type
        try:
            dtype = dtypes.from_onnx(tt.elem_type) if tt.elem_type else None
        except KeyError:
            dtype = None
        dims = None
        if tt.HasField("shape"):
            dims = tuple(
                d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                for d in tt.shape.dim
            )
        return ValueDecl(v.name, dtype, dims, "tensor", t)
    if which == "sequence_type":
        return ValueDecl(v.name, None, None, "sequence", t)
    if which == "optional_type":
        return ValueDecl(v.name, None, None, "optional", t)
    if which == "map_type":
        return ValueDecl(v.name, None, None, "map", t)
    return ValueDecl(v.name, None, None, "tensor" if which is None else str(which), t)


def tensor_to_array(t: TensorProto, base_dir: str | None) -> np.ndarray:
    """A TensorProto as a numpy array we own, reading external data from ``base_dir`` only."""
    if t.data_location == TensorProto.EXTERNAL:
        t = _with_external_data(t, base_dir)
    try:
        return proto.to_array(t)
    except Exception as exc:
        raise SessionError("invalid_model", f"tensor {t.name!r} cannot be read: {exc}") from exc


def _with_external_data(t: TensorProto, base_dir: str | None) -> TensorProto:
    info = {e.key: e.value for e in t.external_data}
    location = info.get("location", "")
    if base_dir is None:
        raise SessionError(
            "invalid_model",
            f"tensor {t.name!r} keeps its data in {location!r}; load the model from a path so "
            "external data can be found beside it",
        )
    if not location or os.path.isabs(location) or location.startswith(("/", "\\")):
        raise SessionError(
            "invalid_model", f"tensor {t.name!r}: external data location {location!r} is absolute"
        )
    parts = location.replace("\\", "/").split("/")
    if ".." in parts:
        raise SessionError(
            "invalid_model",
            f"tensor {t.name!r}: external data location {location!r} leaves the model's folder",
        )
    root = os.path.realpath(base_dir)
    path = os.path.realpath(os.path.join(root, location))
    if os.path.commonpath([root, path]) != root:
        raise SessionError(
            "invalid_model",
            f"tensor {t.name!r}: external data location {location!r} resolves outside the model's "
            "folder (a symbolic link?)",
        )
    if not os.path.isfile(path):
        raise SessionError(
            "invalid_model", f"tensor {t.name!r}: external data file {location!r} is missing"
        )
    size = os.path.getsize(path)
    offset = _external_int(t, info, "offset", 0)
    if offset > size:
        raise SessionError(
            "invalid_model",
            f"tensor {t.name!r}: external data offset {offset} lies beyond the end of "
            f"{location!r} ({size} bytes)",
        )
    length = _external_int(t, info, "length", size - offset)
    if length > size - offset:
        raise SessionError(
            "invalid_model",
            f"tensor {t.name!r}: external data offset {offset} + length {length} lies beyond the "
            f"end of {location!r} ({size} bytes)",
        )
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(length)
    except OSError as exc:
        raise SessionError(
            "invalid_model", f"tensor {t.name!r}: external data {location!r} cannot be read: {exc}"
        ) from exc
    copy = TensorProto()
    copy.CopyFrom(t)
    del copy.external_data[:]
    copy.data_location = TensorProto.DEFAULT
    copy.raw_data = data
    return copy


def _external_int(t: TensorProto, info: dict[str, str], key: str, default: int) -> int:
    text = info.get(key)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise SessionError(
            "invalid_model", f"tensor {t.name!r}: external data {key} {text!r} is not a size"
        )
    return value


def _sparse_to_dense(st: proto.SparseTensorProto, base_dir: str | None) -> np.ndarray:
    """The dense tensor, after checking dims, index shape and every index against the bounds."""
    name = st.values.name
    dims = tuple(int(d) for d in st.dims)
    values = tensor_to_array(st.values, base_dir).reshape(-1)
    indices = tensor_to_array(st.indices, base_dir)

    def refuse(why: str) -> SessionError:
        return SessionError("invalid_model", f"sparse initializer {name!r}: {why}")

    if any(d < 0 for d in dims):
        raise refuse(f"dims {list(dims)} are negative")
    count = 1
    for d in dims:
        count *= d
    if count * values.dtype.itemsize > MAX_SPARSE_BYTES:
        raise refuse(f"dims {list(dims)} make a dense tensor over {MAX_SPARSE_BYTES} bytes")
    if indices.dtype.kind not in "iu":
        raise refuse(f"indices are {indices.dtype}, not integers")
    indices = indices.astype(np.int64)
    nnz = values.shape[0]
    if indices.ndim == 1 and indices.shape[0] == nnz:
        flat = indices
    elif indices.ndim == 2 and indices.shape == (nnz, len(dims)):
        if nnz and ((indices < 0).any() or (indices >= np.array(dims, np.int64)).any()):
            raise refuse("an index lies outside the dims")
        flat = np.ravel_multi_index(tuple(indices.T), dims) if nnz else indices.reshape(-1)
    else:
        raise refuse(
            f"indices have shape {list(indices.shape)}; expected [{nnz}] or [{nnz}, {len(dims)}]"
        )
    if nnz and (flat.min() < 0 or flat.max() >= count):
        raise refuse(f"an index lies outside the {count} elements of dims {list(dims)}")
    out = np.zeros(count, dtype=values.dtype)
    out[flat] = values
    return out.reshape(dims)


def iter_subgraphs(node: proto.NodeProto) -> Iterable[proto.GraphProto]:
    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == AttributeProto.GRAPHS:
            yield from attr.graphs
