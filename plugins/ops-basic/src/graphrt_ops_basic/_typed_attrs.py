"""Attributes read with the type the operator declares.

``NodeInfo.attr`` returns whatever the AttributeProto holds, so a model that gives a string where
a float belongs would otherwise fail later as a raw ``ValueError`` or ``TypeError`` out of the
arithmetic on it.  These readers turn that into the kernel's ``invalid_model`` error naming the
node and the attribute.  An INT attribute is accepted where a FLOAT is declared (onnx.helper
writes ``1`` as an INT), never the reverse.
"""

from __future__ import annotations

from typing import Any

from graphrt.plugin import OpKernel

#: kind -> (accepted Python types, a list of them?, how to say it)
_KINDS = {
    "int": ((int,), False, "an integer"),
    "float": ((int, float), False, "a float"),
    "str": ((str,), False, "a string"),
    "ints": ((int,), True, "a list of integers"),
    "floats": ((int, float), True, "a list of floats"),
}


def typed_attr(kernel: OpKernel, name: str, default: Any, kind: str) -> Any:
    """The attribute ``name`` (``default`` when absent) checked to be of ``kind`` (a key of
    ``_KINDS``); floats come back as Python floats."""
    value = kernel.node.attr(name, default)
    if value is None:
        return None
    types, listed, what = _KINDS[kind]
    items = value if listed and isinstance(value, list) else [value]
    bad = listed != isinstance(value, list) or any(
        isinstance(v, bool) or not isinstance(v, types) for v in items
    )
    if bad:
        raise kernel.fail(f"attribute {name} must be {what}, got {value!r}")
    if kind == "float":
        return float(value)
    if kind == "floats":
        return [float(v) for v in value]
    return value
