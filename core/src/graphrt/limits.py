"""One memory budget and one cancellation token per run.

A session's ``max_memory`` bounds everything a run holds at once: its run state's slab, the
native work buffers its kernels reserve, the dynamic values it allocates (arena, data-dependent
outputs) and what Loop/Scan keep while they iterate.  A body runs inside its caller's run, so
its accounting starts from what the caller already holds.  A request over the budget is
refused before anything is allocated, with ``SessionError(kind="resource_exhausted")``, and
leaves the session usable.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from graphrt.errors import SessionError

__all__ = [
    "DEFAULT_MAX_MEMORY",
    "RunLimits",
    "check_holdable",
    "exhausted",
    "numpy_refuses",
    "value_nbytes",
]

#: The default budget: the core contract's 2 GiB plan rule.
DEFAULT_MAX_MEMORY = 2**31

#: What a kept array costs besides its data (the ndarray object), counted by :func:`value_nbytes`
#: so that a loop keeping millions of tiny values still meets the budget.
ARRAY_OVERHEAD = 128


def value_nbytes(value: Any) -> int:
    """Bytes a value holds: a tensor's data and header, a sequence's elements (an optional's
    value); anything else (None, strings' objects) counts its header only."""
    if value is None:
        return 0
    nbytes = getattr(value, "nbytes", None)
    if nbytes is not None:
        return int(nbytes) + ARRAY_OVERHEAD
    if isinstance(value, (list, tuple)):
        return sum(value_nbytes(v) for v in value) + ARRAY_OVERHEAD
    return ARRAY_OVERHEAD


#: numpy's most axes (NPY_MAXDIMS): 64 from numpy 2 on, 32 before.
MAX_NDIM = 64 if int(np.__version__.split(".")[0]) >= 2 else 32
_MAX_INTP = int(np.iinfo(np.intp).max)
_INTP_LIMIT = "2**63 - 1" if _MAX_INTP == 2**63 - 1 else str(_MAX_INTP)


def numpy_refuses(dtype: np.dtype, shape: tuple[int, ...]) -> str | None:
    """Why numpy cannot make an array of this type and shape although the budget lets it, or None.

    numpy refuses more than :data:`MAX_NDIM` axes, a negative extent, and extents whose product
    (zeros left out) times the item size passes intp, even when a 0 extent leaves nothing to
    hold: ``np.empty((0, 2**63 - 1))`` raises ValueError.  A shape with elements that numpy
    cannot hold is over every budget and left to it (``resource_exhausted``).
    """
    if len(shape) > MAX_NDIM:
        return f"numpy's arrays have at most {MAX_NDIM} axes"
    if 0 not in shape:
        return "numpy refuses a negative extent" if min(shape, default=0) < 0 else None
    n = max(np.dtype(dtype).itemsize, 1)
    for d in shape:
        if d < 0:
            return "numpy refuses a negative extent"
        if d:
            n *= d
    if n > _MAX_INTP:
        return (
            "numpy cannot hold that shape even with no elements: its nonzero extents times the "
            f"item size pass {_INTP_LIMIT} bytes"
        )
    return None


def check_holdable(
    dtype: np.dtype, shape: tuple[int, ...], what: str, kind: str, node: Any = None
) -> None:
    """Refuse (``kind``) a value whose type and shape numpy cannot make (:func:`numpy_refuses`),
    naming it, before anything views or allocates it: numpy's own error would be a raw
    ValueError."""
    why = numpy_refuses(dtype, shape)
    if why is None:
        return
    from graphrt.dtypes import name_of

    label = f"{node.label}: " if node is not None else ""
    raise SessionError(
        kind,
        f"{label}{what} would be {name_of(np.dtype(dtype))}{list(shape)}; {why}",
        node=None if node is None else (node.name or None),
    )


def _size(nbytes: int) -> str:
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.1f} {unit}"
    return f"{nbytes} bytes"


def exhausted(what: str, nbytes: int, held: int, budget: int, node: Any = None) -> SessionError:
    """The refusal: who asked, for how much, what was already held, and what to do."""
    label = f"{node.label}: " if node is not None else ""
    holding = f" while the run already holds {_size(held)}" if held else ""
    return SessionError(
        "resource_exhausted",
        f"{label}{what} needs {_size(nbytes)} ({nbytes} bytes){holding}; the session's memory "
        f"budget is {_size(budget)} (max_memory={budget}). Raise it with "
        "Session(..., max_memory=...) or use smaller inputs",
        node=None if node is None else (node.name or None),
    )


class RunLimits:
    """A run's accounting: budget, bytes held, and the cancellation token.

    One per run state, referenced by its arena and every KernelContext; ``used`` goes back to
    zero at each run (:meth:`graphrt.runstate.Arena.reset`).  ``outer`` is what enclosing runs
    hold while this one is a body's; ``own`` the run state's slab; ``native`` the largest native
    work buffer a kernel reserved (steps run one at a time, so the largest counts).
    """

    __slots__ = ("budget", "native", "outer", "own", "profiler", "token", "used")

    def __init__(self, budget: int = DEFAULT_MAX_MEMORY, own: int = 0) -> None:
        self.budget = budget
        self.outer = 0
        self.own = own
        self.native = 0
        self.used = 0
        self.token: Any = None
        #: Only on a profiled run state (graphrt.observe): non-None from its making on (so its
        #: kernels bind no steady shortcut that bodies would run untimed), and in a run the
        #: :class:`graphrt.profile.BodyFrame` of the step running, for the bodies it runs.
        self.profiler: Any = None

    def held(self) -> int:
        return self.outer + self.own + self.native + self.used

    def charge(self, nbytes: int, node: Any = None, what: str = "a value") -> None:
        """Count ``nbytes`` about to be allocated; refuse them when over the budget."""
        held = self.outer + self.own + self.native + self.used
        if held + nbytes > self.budget:
            raise exhausted(what, nbytes, held, self.budget, node)
        if nbytes > 0:  # a negative size is numpy's to refuse, not a credit
            self.used += nbytes

    def admit(self, nbytes: int, node: Any = None, what: str = "a value") -> None:
        """Refuse ``nbytes`` that would not fit beside what is held, without counting them: a
        body's slab, checked before its run state allocates it (:meth:`enter` counts it)."""
        held = self.outer + self.own + self.native + self.used
        if held + nbytes > self.budget:
            raise exhausted(what, nbytes, held, self.budget, node)

    def release(self, nbytes: int) -> None:
        """Give back bytes charged earlier in this run (a loop's values it no longer keeps)."""
        self.used = max(self.used - nbytes, 0)

    def reserve(self, nbytes: int, node: Any = None, what: str = "native work space") -> None:
        """Count work space a kernel allocates outside the plan while its step runs."""
        if nbytes <= self.native:
            return
        held = self.outer + self.own + self.used
        if held + nbytes > self.budget:
            raise exhausted(what, nbytes, held, self.budget, node)
        self.native = nbytes

    def enter(self, caller: RunLimits | None, budget: int, ctx: Any = None) -> None:
        """Start a body's run inside ``caller``'s (None: a run of its own); ``ctx`` is the
        calling kernel's context, whose node is named if the body's plan does not fit beside
        what the caller holds.  Called once per iteration of a loop: kept short."""
        if caller is None:
            self.budget, self.outer, self.token = budget, 0, None
        else:
            self.budget, self.token = caller.budget, caller.token
            self.outer = caller.outer + caller.own + caller.native + caller.used
        if self.outer + self.own + self.native > self.budget:
            node = getattr(ctx, "node", None)
            raise exhausted(
                "the body's plan", self.own + self.native, self.outer, self.budget, node
            )
