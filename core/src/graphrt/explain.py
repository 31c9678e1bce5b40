"""Show an ExecutionPlan to a person: schedule, slab layout, reuse, folded constants.

:func:`plan_report` gathers everything as plain data (dicts, lists, ints, strings) so tools can
use it; :func:`explain` renders that report as text (what ``graphrt explain`` prints).

Each step says what runs it: ``native`` or ``numpy``, asked of its kernel's optional
``runs_natively(prepared) -> bool`` (a kernel path's kernel answers for the plan it chose in
this mode; a kernel without the method runs numpy calls), ``per run`` for a dynamic step of such
a kernel (it plans again in every run), ``-`` for a step with nothing to run (a view).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plan import ASSEMBLED, DYNAMIC, VIEW, ExecutionPlan, Step

__all__ = ["explain", "format_bytes", "native_summary", "plan_report"]


def format_bytes(n: int) -> str:
    """``1536`` -> ``"1.5 KiB"``; small values stay in bytes."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def _dtype_name(dtype: Any) -> str:
    """numpy's short name (float32, int64, bfloat16, object)."""
    return np.dtype(dtype).name


def _type_str(dtype: Any, shape: Sequence[int] | None) -> str:
    if dtype is None:
        return "?"
    name = str(dtype)
    return name if shape is None else f"{name}{list(shape)}"


def runs_on(step: Step) -> str:
    """``native``, ``numpy``, ``per run`` or ``-``: what runs ``step`` (see the module doc)."""
    if step.kind in (VIEW, ASSEMBLED):
        return "-"
    ask = getattr(step.node.kernel, "runs_natively", None)
    if ask is None:
        return "numpy"
    if step.kind == DYNAMIC:
        return "per run"
    return "native" if ask(step.prepared) else "numpy"


def native_summary(plan: ExecutionPlan) -> str:
    """One line: how many steps run natively on the plan's kernel path, and the operators of
    those that run numpy calls instead (with their counts)."""
    ran = [(st.node.info.op_type, runs_on(st)) for st in plan.steps]
    native = sum(1 for _, r in ran if r == "native")
    counted = sum(1 for _, r in ran if r != "-")
    numpy_ops: dict[str, int] = {}
    for op, r in ran:
        if r in ("numpy", "per run"):
            label = op if r == "numpy" else f"{op} (per run)"
            numpy_ops[label] = numpy_ops.get(label, 0) + 1
    rest = ", ".join(f"{op} x{n}" for op, n in sorted(numpy_ops.items(), key=lambda kv: -kv[1]))
    return (
        f"{native} of {counted} steps run natively (kernel path {plan.graph.kernel_path}); "
        f"numpy: {rest or 'none'}"
    )


def plan_report(plan: ExecutionPlan) -> dict[str, Any]:
    """Everything :func:`explain` shows, as plain data."""
    graph = plan.graph
    mem = plan.memory
    names = graph.names

    def value(v: int) -> dict[str, Any]:
        t = plan.types.get(v)
        entry: dict[str, Any] = {
            "name": names[v],
            "dtype": None if t is None else _dtype_name(t.dtype),
            "shape": None if t is None else list(t.shape),
        }
        if v in mem.offsets:
            entry["offset"] = mem.offsets[v]
        if v in plan.dynamic_values:
            entry["dynamic"] = True
        return entry

    in_place = {out: src for out, src in mem.in_place}
    scratch_owner: dict[int, tuple[int, int]] = {}  # scratch id -> (step index, k)
    steps: list[dict[str, Any]] = []
    dynamic_nodes: list[dict[str, Any]] = []
    dynamic_so_far: set[int] = set()
    for i, st in enumerate(plan.steps):
        node = st.node
        outs = [value(o) for o in node.outputs if o >= 0]
        entry: dict[str, Any] = {
            "index": i,
            "name": node.info.name or f"#{node.index}",
            "op_type": node.info.op_type,
            "domain": node.info.domain,
            "plugin": node.plugin,
            "kind": st.kind,
            "runs": runs_on(st),
            "inputs": [names[v] if v >= 0 else "" for v in node.inputs],
            "outputs": outs,
            "in_place_of": None,
            "view_of": None,
            "scratch": [],
        }
        if node.outputs and node.outputs[0] in in_place:
            entry["in_place_of"] = names[in_place[node.outputs[0]]]
        if st.kind == VIEW and node.inputs:
            entry["view_of"] = names[node.inputs[0]]
        for k, (sid, (dt, shape)) in enumerate(zip(st.scratch_ids, st.scratch)):
            scratch_owner[sid] = (i, k)
            entry["scratch"].append(
                {
                    "dtype": _dtype_name(dt),
                    "shape": list(shape),
                    "offset": mem.offsets.get(sid),
                    "size": mem.sizes.get(sid, 0),
                }
            )
        steps.append(entry)
        if st.kind == DYNAMIC:
            late = [names[v] for v in node.inputs if v >= 0 and v in dynamic_so_far]
            if late:
                reason = f"reads run-time shaped {', '.join(late)}"
            elif node.flags.outputs_data_dependent:
                reason = "output shapes depend on input values"
            elif any(
                plan.types.get(o) is not None and plan.types[o].dtype == np.dtype(object)
                for o in node.outputs
                if o >= 0
            ):
                reason = "outputs are not slab tensors (strings)"
            else:
                reason = "needs input values to state its output shapes"
            dynamic_nodes.append(
                {"index": i, "name": entry["name"], "op_type": entry["op_type"], "reason": reason}
            )
            dynamic_so_far.update(o for o in node.outputs if o >= 0)

    input_ids = set(graph.input_ids)
    output_ids = set(graph.output_ids)
    slab_values: list[dict[str, Any]] = []
    for v, off in mem.offsets.items():
        root = mem.root.get(v, v)
        if v in scratch_owner:
            i, k = scratch_owner[v]
            label, role = f"<scratch {k} of step {i}>", "scratch"
        else:
            label = names[v]
            if v in mem.parts:
                role = "part"
            elif root != v:
                role = "view"
            elif v in input_ids:
                role = "input"
            elif v in output_ids:
                role = "output"
            else:
                role = "intermediate"
        slab_values.append(
            {
                "name": label,
                "role": role,
                "offset": off,
                "size": mem.sizes.get(v if v in mem.parts else root, 0),
                "live": list(mem.live.get(v, (0, 0))),
                "view_of": names[root] if role == "view" and root < len(names) else None,
                "part_of": names[root] if role == "part" else None,
            }
        )
    slab_values.sort(key=lambda e: (e["offset"], e["live"][0]))

    folded = [
        {**value(v), "nbytes": int(c.nbytes) if isinstance(c, np.ndarray) else 0}
        for v, c in plan.constants.items()
        if v not in graph.constants
    ]
    saving = 100.0 * (1 - mem.size / mem.total_bytes) if mem.total_bytes else 0.0
    return {
        "inputs": [value(v) for v in graph.input_ids],
        "outputs": [value(v) for v in graph.output_ids],
        "mode": "exact" if graph.exact else "fast",
        "kernel_path": graph.kernel_path,
        "native_summary": native_summary(plan),
        "passes_run": list(graph.passes_run),
        "dropped_nodes": graph.dropped_nodes,
        "folded_nodes": plan.folded,
        "steps": steps,
        "slab": {
            "size": mem.size,
            "total_bytes": mem.total_bytes,
            "saving_percent": saving,
            "values": slab_values,
            "in_place": [(names[o], names[i]) for o, i in mem.in_place],
        },
        "constants_folded": folded,
        "dynamic_nodes": dynamic_nodes,
        "dynamic_values": sorted(names[v] for v in plan.dynamic_values if v < len(names)),
    }


def _table(rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    out = []
    for r in rows:
        cells = [cell.ljust(w) for cell, w in zip(r, widths)]
        out.append((indent + "  ".join(cells)).rstrip())
    return out


def _value_str(v: dict[str, Any]) -> str:
    text = f"{v['name']}: {_type_str(v['dtype'], v['shape'])}" if v["dtype"] else v["name"]
    if v.get("dynamic"):
        text += " (run-time)"
    if "offset" in v:
        text += f" @{v['offset']}"
    return text


def explain(plan: ExecutionPlan) -> str:
    """A readable account of one plan (see :func:`plan_report` for the same as data)."""
    r = plan_report(plan)
    lines: list[str] = []
    sig = ", ".join(f"{v['name']}: {_type_str(v['dtype'], v['shape'])}" for v in r["inputs"])
    lines.append(f"plan for {sig or 'no inputs'}")
    passes = ", ".join(r["passes_run"]) or "none"
    lines.append(
        f"mode {r['mode']}, kernel path {r['kernel_path']}, passes run: {passes}, "
        f"dead nodes dropped: {r['dropped_nodes']}, nodes folded at plan time: {r['folded_nodes']}"
    )
    lines.append(r["native_summary"])

    lines.append("")
    lines.append(f"schedule ({len(r['steps'])} steps)")
    if r["steps"]:
        rows = [["step", "node", "op", "kind", "runs", "outputs", "notes"]]
        for s in r["steps"]:
            notes = []
            if s["in_place_of"]:
                notes.append(f"in place of {s['in_place_of']}")
            if s["view_of"]:
                notes.append(f"view of {s['view_of']}")
            for k, sc in enumerate(s["scratch"]):
                notes.append(f"scratch {k}: {_type_str(sc['dtype'], sc['shape'])} @{sc['offset']}")
            op = s["op_type"] if not s["domain"] else f"{s['domain']}.{s['op_type']}"
            outs = ", ".join(_value_str(v) for v in s["outputs"]) or "-"
            row = [str(s["index"]), s["name"], op, s["kind"], s["runs"], outs, "; ".join(notes)]
            rows.append(row)
        lines += _table(rows)
    else:
        lines.append("  (nothing to run: every output is an input or a constant)")

    slab = r["slab"]
    lines.append("")
    lines.append("slab layout (offsets in bytes; live = first..last step, -1 = before step 0)")
    if slab["values"]:
        rows = [["offset", "size", "value", "role", "live"]]
        for v in slab["values"]:
            role = v["role"]
            if v["view_of"] or v["part_of"]:
                role = f"{role} of {v['view_of'] or v['part_of']}"
            live = f"{v['live'][0]}..{v['live'][1]}"
            rows.append([str(v["offset"]), str(v["size"]), v["name"], role, live])
        lines += _table(rows)
    else:
        lines.append("  (empty)")
    lines.append(
        f"slab: {slab['size']} bytes ({format_bytes(slab['size'])}) for {slab['total_bytes']} "
        f"bytes ({format_bytes(slab['total_bytes'])}) of intermediates without reuse, "
        f"saving {slab['saving_percent']:.1f}%"
    )
    if slab["in_place"]:
        pairs = ", ".join(f"{o} over {i}" for o, i in slab["in_place"])
        lines.append(f"in place: {pairs}")

    lines.append("")
    folded = r["constants_folded"]
    lines.append(f"constants folded at plan time ({len(folded)})")
    for c in folded:
        size = format_bytes(c["nbytes"])
        lines.append(f"  {c['name']}: {_type_str(c['dtype'], c['shape'])} ({size})")
    if not folded:
        lines.append("  none")

    lines.append("")
    dyn = r["dynamic_nodes"]
    lines.append(f"dynamic nodes ({len(dyn)}): shaped again in every run, outputs in the arena")
    for d in dyn:
        lines.append(f"  step {d['index']} {d['name']} ({d['op_type']}): {d['reason']}")
    if not dyn:
        lines.append("  none: the whole plan is static")
    return "\n".join(lines) + "\n"
