"""A plan's slab timeline as a picture: ``graphrt profile --memory-plot FILE.png``.

    from graphrt.memplot import plot_memory
    plot_memory(sess.plan_for([x]), "memory.png")

x is the schedule step, y the byte offset in the slab; every value placed in the slab is one
rectangle from the step that makes it (-1: an input, staged before step 0) to its last use,
labelled with its name, so reuse shows as rectangles stacked at one offset over time.  Views
share their source's rectangle and are not drawn again; parts (a Concat's inputs written into
its output) are drawn over their container.  Values the plan cannot place (shaped at run time,
held in the arena; strings, sequences) have no offset: they are drawn below, one bar per value
over the steps it lives.  The layout comes from :func:`graphrt.explain.plan_report`, as
``graphrt explain`` prints it.

matplotlib is an optional extra (``pip install graphrt[plot]``); the figure is drawn on its own
Agg canvas, without pyplot, so the caller's matplotlib state is left alone.
"""

from __future__ import annotations

import os
from typing import Any

from graphrt.explain import format_bytes, plan_report
from graphrt.plan import ExecutionPlan

__all__ = ["INSTALL_HINT", "dynamic_lifetimes", "plot_memory"]

INSTALL_HINT = "pip install graphrt[plot]"

#: Fill colours by role (explain's roles), scratch greyer, parts hatched.
_COLOURS = {
    "input": "#4c72b0",
    "output": "#dd8452",
    "intermediate": "#55a868",
    "part": "#8172b3",
    "scratch": "#999999",
}


def _matplotlib() -> Any:
    try:
        from matplotlib.figure import Figure
        from matplotlib.patches import Rectangle
        from matplotlib.ticker import MaxNLocator
    except ImportError as exc:
        raise ImportError(
            f"the memory plot needs matplotlib, an optional extra of graphrt: {INSTALL_HINT}"
        ) from exc
    return Figure, Rectangle, MaxNLocator


def dynamic_lifetimes(plan: ExecutionPlan) -> list[tuple[str, int, int]]:
    """(name, first step, last step) of every value held outside the slab (-1: a graph input;
    a graph output lives to the last step), in the order they are made."""
    graph = plan.graph
    last_step = max(len(plan.steps) - 1, 0)
    made = {v: -1 for v in graph.input_ids}
    used: dict[int, int] = {}
    for i, st in enumerate(plan.steps):
        for v in st.node.outputs:
            made.setdefault(v, i)
        for v in st.node.inputs:
            used[v] = i
    for v in graph.output_ids:
        used[v] = last_step
    rows = []
    for v in plan.dynamic_values:
        if 0 <= v < len(graph.names) and v in made:
            rows.append((graph.names[v], made[v], max(used.get(v, made[v]), made[v])))
    return sorted(rows, key=lambda r: (r[1], r[0]))


def plot_memory(plan: ExecutionPlan, path: str | os.PathLike, title: str | None = None) -> None:
    """Draw ``plan``'s slab timeline into ``path`` (its format from the suffix: .png, .svg,
    .pdf).  Raises ImportError naming the extra to install when matplotlib is missing."""
    Figure, Rectangle, MaxNLocator = _matplotlib()
    report = plan_report(plan)
    slab = report["slab"]
    shown = [v for v in slab["values"] if v["role"] != "view" and v["size"] > 0]
    shown.sort(key=lambda v: v["role"] == "part")  # parts over their containers
    dynamic = dynamic_lifetimes(plan)
    n_steps = max(len(plan.steps), 1)

    width = min(6 + 0.3 * n_steps, 40)
    rows = len(dynamic)
    height = 6 + (min(0.25 * rows, 8) + 1 if rows else 0)
    fig = Figure(figsize=(width, height), layout="constrained")
    if rows:
        top, bottom = fig.subplots(2, 1, height_ratios=[6, min(0.25 * rows, 8) + 1])
    else:
        top, bottom = fig.subplots(1, 1), None

    font = max(4.0, min(8.0, 300.0 / max(len(shown), 1)))
    for v in shown:
        first, last = v["live"]
        colour = _COLOURS.get(v["role"], "#c44e52")
        rect = Rectangle(  # step i is the column centred on x = i
            (first - 0.5, v["offset"]),
            last - first + 1,
            v["size"],
            facecolor=colour,
            edgecolor="black",
            linewidth=0.5,
            alpha=0.75,
            hatch="//" if v["role"] == "part" else None,
        )
        top.add_patch(rect)
        top.text(
            (first + last) / 2,
            v["offset"] + v["size"] / 2,
            v["name"],
            ha="center",
            va="center",
            fontsize=font,
            clip_on=True,
        )
    size = slab["size"]
    top.set_xlim(-1.5, n_steps - 0.5)
    top.xaxis.set_major_locator(MaxNLocator(integer=True))
    top.set_ylim(0, max(size, 1))
    top.axhline(size, color="black", linewidth=0.8, linestyle="--")
    top.set_xlabel("schedule step (-1: inputs staged before the first step)")
    top.set_ylabel("slab offset (bytes)")
    saving = slab["saving_percent"]
    top.set_title(
        title
        or (
            f"slab {format_bytes(size)} for {format_bytes(slab['total_bytes'])} of values "
            f"without reuse (saving {saving:.1f}%), {len(report['steps'])} steps"
        ),
        fontsize=10,
    )
    handles = [Rectangle((0, 0), 1, 1, facecolor=c, alpha=0.75) for c in _COLOURS.values()]
    top.legend(handles, list(_COLOURS), loc="upper left", fontsize=7, framealpha=0.8)

    if bottom is not None:
        for k, (name, first, last) in enumerate(dynamic):
            bottom.barh(k, last - first + 1, left=first - 0.5, height=0.7, color="#c44e52")
            bottom.text(first - 0.4, k, name, va="center", fontsize=7, clip_on=True)
        bottom.set_xlim(-1.5, n_steps - 0.5)
        bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
        bottom.set_ylim(rows - 0.5, -0.5)
        bottom.set_yticks([])
        bottom.set_xlabel("schedule step")
        bottom.set_title(
            f"{rows} value(s) outside the slab (shaped at run time, in the arena; or objects)",
            fontsize=9,
        )
    fig.savefig(os.fspath(path), dpi=100)
