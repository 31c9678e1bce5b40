"""Slab layout from liveness (seed 000, section 5), as a pure function of the schedule.

Every static intermediate of a plan lives in one 64-byte-aligned slab at an offset chosen here:

1. ``last_use[v]`` is the last step that reads v (or the step that makes it); graph outputs live
   to the end; a view extends its source's life to its own.
2. Steps are walked in order; a new value takes the smallest free block that fits (best fit), else
   the slab grows.  Outputs and scratch are placed before the step's dying inputs are freed, so a
   kernel never writes over what it is still reading, except through an explicit in-place alias.
3. In place: when the kernel allows it, the input dies at this step, is the only value using its
   block, and the block is large enough, the output takes over the input's block.
4. A view shares its source's block.  Freed blocks are coalesced.
5. Parts: a value declared part of a container (a Concat's input inside its output) is placed
   at its offset inside the container's block, which is allocated when the first part is made
   and lives until the container's (or any part's) last use.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence

__all__ = ["ALIGN", "MemStep", "MemoryPlan", "plan_memory"]

ALIGN = 64


def aligned(nbytes: int) -> int:
    return (nbytes + ALIGN - 1) // ALIGN * ALIGN


@dataclasses.dataclass(frozen=True)
class MemStep:
    """What one scheduled step does to memory.

    ``defs`` maps each value the step creates to its size in bytes; ``uses`` are values it reads;
    ``in_place`` is (output, input) when the kernel may write output over input; ``views`` maps
    an output to the value it is a view of (no storage of its own); ``scratch`` maps temporaries
    (live only during the step) to sizes; ``parts`` maps values made by earlier steps to
    (a value this step defines, byte offset): each is stored inside that container from the
    step that makes it on (no storage of its own).
    """

    defs: dict[int, int]
    uses: tuple[int, ...] = ()
    in_place: tuple[int, int] | None = None
    views: dict[int, int] = dataclasses.field(default_factory=dict)
    scratch: dict[int, int] = dataclasses.field(default_factory=dict)
    parts: dict[int, tuple[int, int]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class MemoryPlan:
    offsets: dict[int, int]  # value -> byte offset in the slab
    sizes: dict[int, int]  # value -> bytes it needs (not rounded)
    size: int  # slab bytes
    root: dict[int, int]  # value -> the value owning its storage (itself, a view's source...)
    live: dict[int, tuple[int, int]]  # value -> (first step, last step) it must stay intact
    in_place: list[tuple[int, int]]  # (output, input) pairs that share a block
    freed_after: list[list[tuple[int, int]]]  # per step: (offset, size) blocks freed after it
    total_bytes: int  # the sum of every value's size: what a slab without reuse would need
    parts: dict[int, int] = dataclasses.field(default_factory=dict)  # part -> its container


class _FreeList:
    """Free blocks sorted by offset, coalesced on insert."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.sizes: list[int] = []

    def take_best_fit(self, size: int) -> int | None:
        best = None
        for i, s in enumerate(self.sizes):
            if s >= size and (best is None or s < self.sizes[best]):
                best = i
        if best is None:
            return None
        off = self.starts[best]
        if self.sizes[best] == size:
            del self.starts[best]
            del self.sizes[best]
        else:
            self.starts[best] += size
            self.sizes[best] -= size
        return off

    def take_top(self, top: int) -> int | None:
        """The free block that ends at the slab's top (so the slab can grow from it)."""
        if self.starts and self.starts[-1] + self.sizes[-1] == top:
            off = self.starts.pop()
            self.sizes.pop()
            return off
        return None

    def give(self, off: int, size: int) -> None:
        if size == 0:
            return
        i = bisect.bisect_left(self.starts, off)
        self.starts.insert(i, off)
        self.sizes.insert(i, size)
        if i + 1 < len(self.starts) and self.starts[i] + self.sizes[i] == self.starts[i + 1]:
            self.sizes[i] += self.sizes.pop(i + 1)
            self.starts.pop(i + 1)
        if i > 0 and self.starts[i - 1] + self.sizes[i - 1] == self.starts[i]:
            self.sizes[i - 1] += self.sizes.pop(i)
            self.starts.pop(i)


def plan_memory(
    steps: Sequence[MemStep],
    preplaced: dict[int, int] | None = None,
    keep: Sequence[int] = (),
) -> MemoryPlan:
    """Offsets for every value the steps define.

    ``preplaced`` are values that exist before step 0 (input staging areas), with sizes; ``keep``
    are values that must survive the last step (graph outputs).
    """
    preplaced = dict(preplaced or {})
    n = len(steps)
    root: dict[int, int] = {}
    sizes: dict[int, int] = {}
    first: dict[int, int] = {}
    for v, sz in preplaced.items():
        root[v], sizes[v], first[v] = v, sz, -1
    for i, st in enumerate(steps):
        for v, sz in st.defs.items():
            root[v], sizes[v], first[v] = v, sz, i
        for v, src in st.views.items():
            root[v] = root.get(src, src)
            first[v] = i
        for v, sz in st.scratch.items():
            root[v], sizes[v], first[v] = v, sz, i
    part_of = {v: where for st in steps for v, where in st.parts.items()}
    for v, (container, _) in part_of.items():  # the container exists from its first part on
        root[v] = container
        first[container] = min(first[container], first[v])
    for v, r in root.items():  # a view of a part: its storage belongs to the container too
        while root[r] != r:
            r = root[r]
        root[v] = r

    # last use per storage owner: a view's reads count for its source
    last: dict[int, int] = {}
    for v, f in first.items():
        last[root[v]] = max(last.get(root[v], f), f)
    for i, st in enumerate(steps):
        for v in st.uses:
            if v in root:
                r = root[v]
                last[r] = max(last.get(r, i), i)
    for v in keep:
        if v in root:
            last[root[v]] = n

    sharers: dict[int, int] = {}
    for r in root.values():
        sharers[r] = sharers.get(r, 0) + 1

    free = _FreeList()
    top = 0
    offsets: dict[int, int] = {}
    block_of: dict[int, tuple[int, int]] = {}  # owner -> (offset, rounded size)
    in_place_pairs: list[tuple[int, int]] = []
    freed_after: list[list[tuple[int, int]]] = [[] for _ in range(n)]

    def allocate(v: int) -> None:
        nonlocal top
        need = aligned(sizes[v])
        off = free.take_best_fit(need)
        if off is None:
            grown = free.take_top(top)
            off = grown if grown is not None else top
            top = max(top, off + need)
        offsets[v] = off
        block_of[v] = (off, need)

    for v in preplaced:
        allocate(v)

    for i, st in enumerate(steps):
        dying = sorted({root[v] for v in st.uses if v in root and last.get(root[v]) == i})
        taken: set[int] = set()
        for v in st.defs:
            if v in part_of:
                container, at = part_of[v]
                if container not in block_of:
                    allocate(container)
                offsets[v] = offsets[container] + at
                continue
            if v in block_of:  # a container, allocated with its first part
                continue
            if st.in_place and st.in_place[0] == v:
                src = root.get(st.in_place[1])
                if (
                    src is not None
                    and src in dying
                    and src not in taken
                    and src in block_of
                    and aligned(sizes[v]) <= block_of[src][1]
                    and sharers.get(src) == 1  # no view sees the in-place write
                ):
                    offsets[v] = block_of[src][0]
                    block_of[v] = block_of.pop(src)
                    taken.add(src)
                    in_place_pairs.append((v, st.in_place[1]))
                    continue
            allocate(v)
        for v in st.scratch:
            allocate(v)
        for v, src in st.views.items():
            offsets[v] = offsets.get(src, -1)
        # free scratch, dying inputs and values nobody reads (defined and dead at this step)
        released = [v for v in st.scratch]
        released += [r for r in dying if r not in taken]
        released += [v for v in st.defs if last.get(v) == i and v in block_of and v not in dying]
        for r in released:
            if r in block_of:
                off, sz = block_of.pop(r)
                free.give(off, sz)
                freed_after[i].append((off, sz))

    live = {v: (first[v], last.get(root[v], first[v])) for v in first}
    return MemoryPlan(
        offsets=offsets,
        sizes=sizes,
        size=top,
        root=root,
        live=live,
        in_place=in_place_pairs,
        freed_after=freed_after,
        total_bytes=sum(aligned(s) for v, s in sizes.items() if v not in part_of),
        parts={v: container for v, (container, _) in part_of.items()},
    )
