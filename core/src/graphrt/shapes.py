"""Shape annotations checked at run time (``check_shapes=True``), as seed 002 defines them.

One binding map per run: graph inputs are checked before anything runs, every other annotated
value (graph outputs, ``value_info``) right after the step that produces it.  A ``dim_value``
must equal the extent; a ``dim_param`` binds on first sight and is verified after; an anonymous
dimension or a missing shape asserts nothing; a rank mismatch fails.  Names are not scoped.

What to check is planned once per plan (:func:`plan_checks`); a run only compares integers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from graphrt.errors import SessionError

__all__ = ["Check", "ShapeChecks", "check_value", "format_dims", "plan_checks"]

Dim = int | str | None


@dataclasses.dataclass(frozen=True)
class Check:
    vid: int
    name: str
    dims: tuple[Dim, ...]
    kind: str  # the SessionError kind: invalid_input for graph inputs, else invalid_model


@dataclasses.dataclass(frozen=True)
class ShapeChecks:
    inputs: tuple[Check, ...]  # in graph-input order
    before: tuple[Check, ...]  # values that exist before the first step (constants)
    after_step: dict[int, tuple[Check, ...]]  # plan step index -> values it produced


def format_dims(dims: Sequence[Dim]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def check_value(
    bindings: dict[str, tuple[int, str, int]], check: Check, shape: Sequence[int]
) -> None:
    """Check one value's actual shape against its annotation, binding symbols on first sight."""
    dims = check.dims
    if len(shape) != len(dims):
        raise SessionError(
            check.kind,
            f"check_shapes: {check.name!r} has rank {len(shape)} (shape {list(shape)}) but its "
            f"annotation {format_dims(dims)} has rank {len(dims)}",
        )
    for axis, (want, got) in enumerate(zip(dims, shape)):
        if want is None:
            continue
        if isinstance(want, int):
            if got != want:
                raise SessionError(
                    check.kind,
                    f"check_shapes: {check.name!r} axis {axis} is {got} but its annotation "
                    f"{format_dims(dims)} requires {want}",
                )
            continue
        bound = bindings.get(want)
        if bound is None:
            bindings[want] = (int(got), check.name, axis)
        elif bound[0] != got:
            raise SessionError(
                check.kind,
                f"check_shapes: {check.name!r} axis {axis} is {got} but its annotation "
                f"{format_dims(dims)} needs {want} = {bound[0]}, bound by {bound[1]!r} axis "
                f"{bound[2]}",
            )


def plan_checks(
    graph: Any,
    steps: Sequence[Any],
    declared_extra: dict[str, Any] | None = None,
    input_kind: str = "invalid_input",
) -> ShapeChecks | None:
    """Which values to check and where, for one plan; None when nothing needs checking.

    A graph with bodies always gets checks: the run's binding map must reach the bodies even
    when the enclosing graph annotates nothing itself.
    """
    decls: dict[str, Any] = dict(graph.declared)
    decls.update(declared_extra or {})
    for d in graph.outputs:
        decls[d.name] = d
    inputs = tuple(
        Check(vid, d.name, tuple(d.dims), input_kind)
        for vid, d in zip(graph.input_ids, graph.inputs)
        if d.dims is not None and d.kind == "tensor"
    )
    input_names = {d.name for d in graph.inputs}

    def check_for(vid: int) -> Check | None:
        if vid < 0:
            return None
        name = graph.names[vid]
        d = decls.get(name)
        if d is None or d.dims is None or d.kind != "tensor" or name in input_names:
            return None
        return Check(vid, name, tuple(d.dims), "invalid_model")

    produced_by_step = {o for st in steps for o in st.node.outputs if o >= 0}
    # values that exist without a step (constants, folded nodes), in node order
    before = []
    for node in graph.nodes:
        for o in node.outputs:
            c = check_for(o)
            if c is not None and o not in produced_by_step:
                before.append(c)
    initializers = getattr(graph, "initializer_names", set())
    for vid in graph.constants:  # node outputs the constant-folding pass computed
        c = check_for(vid)
        if c is not None and c not in before and c.name not in initializers:
            before.append(c)
    after: dict[int, tuple[Check, ...]] = {}
    for i, st in enumerate(steps):
        found = tuple(c for c in (check_for(o) for o in st.node.outputs) if c is not None)
        if found:
            after[i] = found
    if not inputs and not before and not after and not getattr(graph, "bodies", None):
        return None
    return ShapeChecks(inputs, tuple(before), after)
