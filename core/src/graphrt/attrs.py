"""Node attributes as Python values, and NodeInfo from a NodeProto."""

from __future__ import annotations

from typing import Any

from graphrt.errors import SessionError
from graphrt.kernel import NodeInfo
from graphrt.proto import AttributeProto, NodeProto, to_array

__all__ = ["attribute_value", "node_info"]


def attribute_value(attr: AttributeProto) -> Any:
    """ints -> list[int], strings -> str, tensors -> numpy arrays; graphs stay GraphProto."""
    t = attr.type
    if t == AttributeProto.FLOAT:
        return float(attr.f)
    if t == AttributeProto.INT:
        return int(attr.i)
    if t == AttributeProto.STRING:
        return attr.s.decode("utf-8", errors="replace")
    if t == AttributeProto.TENSOR:
        return _tensor(attr, attr.t)
    if t == AttributeProto.GRAPH:
        return attr.g
    if t == AttributeProto.SPARSE_TENSOR:
        return attr.sparse_tensor
    if t == AttributeProto.TYPE_PROTO:
        return attr.tp
    if t == AttributeProto.FLOATS:
        return [float(x) for x in attr.floats]
    if t == AttributeProto.INTS:
        return [int(x) for x in attr.ints]
    if t == AttributeProto.STRINGS:
        return [s.decode("utf-8", errors="replace") for s in attr.strings]
    if t == AttributeProto.TENSORS:
        return [_tensor(attr, x) for x in attr.tensors]
    if t == AttributeProto.GRAPHS:
        return list(attr.graphs)
    if t == AttributeProto.SPARSE_TENSORS:
        return list(attr.sparse_tensors)
    if t == AttributeProto.TYPE_PROTOS:
        return list(attr.type_protos)
    return None


def _tensor(attr: AttributeProto, t: Any) -> Any:
    """A tensor attribute's value; one the model cannot hold (an UNDEFINED element type, data
    that does not fill its dims) is the model's fault, as for an initializer."""
    try:
        return to_array(t)
    except Exception as exc:
        raise SessionError(
            "invalid_model", f"attribute {attr.name!r}: tensor {t.name!r} cannot be read: {exc}"
        ) from exc


def node_info(node: NodeProto, opset: int, attrs: dict[str, Any] | None = None) -> NodeInfo:
    """The NodeInfo a kernel factory receives for ``node`` at ``opset`` of its domain."""
    if attrs is None:
        try:
            attrs = {a.name: attribute_value(a) for a in node.attribute}
        except SessionError as exc:
            label = f"{node.op_type} node {node.name!r}" if node.name else f"{node.op_type} node"
            raise SessionError(exc.kind, f"{label}: {exc.args[0]}", node=node.name or None) from (
                exc.__cause__
            )
    return NodeInfo(
        name=node.name,
        op_type=node.op_type,
        domain="" if node.domain in ("", "ai.onnx") else node.domain,
        opset=opset,
        attrs=attrs,
        inputs=tuple(node.input),
        outputs=tuple(node.output),
        proto=node,
    )


#: Operators whose result must come from the run itself (a new draw every time).
NONDETERMINISTIC = frozenset(
    {
        "RandomNormal",
        "RandomUniform",
        "RandomNormalLike",
        "RandomUniformLike",
        "Multinomial",
        "Bernoulli",
    }
)


def evaluable_early(info: NodeInfo) -> bool:
    """Whether a node with constant inputs may be computed before a run (folding, plans).

    Not random operators, and not nodes with subgraphs (their bodies read outer values).
    """
    proto = info.proto
    if proto is not None and any(
        a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in proto.attribute
    ):
        return False
    return info.op_type not in NONDETERMINISTIC
