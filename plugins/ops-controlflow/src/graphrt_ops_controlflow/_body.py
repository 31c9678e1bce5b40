"""What every control-flow kernel shares: compiled bodies and how outer values reach them."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import ARRAY_OVERHEAD, Body, KernelContext, NodeInfo, OpKernel, value_nbytes


class BodyKernel(OpKernel):
    """A kernel that owns compiled bodies; exact when its bodies are (the core checks them)."""

    supports_exact = True
    outputs_data_dependent = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.declared = len(node.inputs)

    def body(self, name: str) -> Body:
        graph = self.node.attr(name)
        if graph is None:
            raise self.fail(f"the {name!r} attribute (a graph) is missing")
        return self.node.compile_subgraph(graph)

    def outer(self, body: Body, inputs: Sequence[Any]) -> list[Any]:
        """The outer-scope values ``body`` reads, from those after the declared inputs."""
        return body.outer_values(self.node.outer_inputs, inputs[self.declared :])

    @staticmethod
    def emit(ctx: KernelContext, values: Sequence[Any]) -> None:
        for i, v in enumerate(values):
            ctx.set_output(i, v)


class Held:
    """What a loop keeps between iterations (carried values, scan slices so far), counted
    against the run's memory budget as it grows, so a Loop of 2**62 iterations with a scan
    output ends in ``resource_exhausted`` instead of taking the machine's memory."""

    def __init__(self, ctx: KernelContext) -> None:
        self.ctx = ctx
        self.nbytes = 0

    def set(self, nbytes: int) -> None:
        """Now holding ``nbytes``: charge the growth, give back the shrinkage."""
        if nbytes > self.nbytes:
            self.ctx.charge(nbytes - self.nbytes, "the values its iterations keep")
        elif nbytes < self.nbytes:
            self.ctx.release(self.nbytes - nbytes)
        self.nbytes = nbytes

    def add(self, nbytes: int) -> None:
        """Now holding ``nbytes`` more (or fewer, when negative)."""
        self.set(self.nbytes + nbytes)

    def hand_over(self, outputs: Sequence[Any]) -> None:
        """Before the outputs are emitted: tensors are counted again by ``set_output``, so
        only what it does not count (sequences) stays charged here."""
        self.set(sum(value_nbytes(v) for v in outputs if not isinstance(v, np.ndarray)))


def kept_nbytes(values: Sequence[Any]) -> int:
    """:func:`graphrt.limits.value_nbytes` of every value (tensors inline: once an iteration)."""
    n = 0
    for v in values:
        n += v.nbytes + ARRAY_OVERHEAD if type(v) is np.ndarray else value_nbytes(v)
    return n


def scalar(x: Any, what: str, kernel: OpKernel) -> Any:
    if not isinstance(x, np.ndarray) or x.size != 1:
        raise kernel.fail(f"{what} must be a tensor of one element", "invalid_input")
    return x.reshape(()).item()


def empty_like_declared(body: Body, index: int) -> np.ndarray:
    """An empty [0] tensor of the type a body output declares (float32 when undeclared)."""
    decl = body.graph.outputs[index]
    return np.zeros((0,), dtype=decl.dtype if decl.dtype is not None else np.float32)


#: Slices a scan output's array starts with when the trip count is not known (it then doubles).
FIRST_CAPACITY = 64


class Stacked:
    """One scan output: its slices written in place into one array (``capacity`` slices along
    ``axis``) made at the first slice and counted in the loop's :class:`Held`, instead of kept
    as a list and stacked at the end.

    ``capacity`` bounds the slices (None: no bound); the array doubles when full, or is made
    at its final size when the caller knows there will be ``capacity`` slices (``exact``).
    ``reverse`` fills it from the end (Scan's reversed outputs).  Slices whose type or shape
    changes, or that are not tensors, fall back to a list stacked at the end.
    """

    def __init__(
        self,
        held: Held,
        capacity: int | None,
        axis: int = 0,
        reverse: bool = False,
        exact: bool = False,
    ) -> None:
        self.held = held
        self.bound = capacity
        self.exact = exact  # what add() assumes (the steady paths say it themselves)
        self.axis = axis
        self.reverse = reverse
        self.buf: np.ndarray | None = None  # the output
        self.view: np.ndarray | None = None  # buf with the scan axis first: view[k] is slice k
        self.cap = 0
        #: Slices written so far.
        self.n = 0
        self.nbytes = 0  # what the array costs (counted in held)
        self.slices: list[Any] | None = None  # the fallback

    def reserve(self, dtype: np.dtype, shape: tuple[int, ...], exact: bool = False) -> bool:
        """Make the array for slices of this type and shape, if not made yet (``exact``: at
        its final size); False when the slices so far are of another kind (the caller then
        adds them one by one)."""
        if self.slices is not None:
            return False
        if self.buf is not None:
            return self.buf.dtype == dtype and self.view.shape[1:] == shape
        if exact and self.bound is not None and (math.prod(shape) or self.bound < 2**31):
            cap = self.bound
        else:  # (slices of no elements: M may be 2**62, which numpy cannot hold even empty)
            cap = min(self.bound if self.bound is not None else FIRST_CAPACITY, FIRST_CAPACITY)
        self._allocate(np.dtype(dtype), tuple(shape), cap)
        return True

    def _allocate(self, dtype: np.dtype, shape: tuple[int, ...], cap: int) -> None:
        axis = self.axis + len(shape) + 1 if self.axis < 0 else self.axis
        full = (*shape[:axis], cap, *shape[axis:])
        nbytes = math.prod(full) * dtype.itemsize + ARRAY_OVERHEAD
        self.held.add(nbytes)  # counted before it exists
        buf = np.empty(full, dtype)
        view = np.moveaxis(buf, axis, 0)
        if self.buf is not None:  # growing: the slices so far move over
            if self.reverse:
                view[cap - self.n :] = self.view[self.cap - self.n :]
            else:
                view[: self.n] = self.view[: self.n]
            self.held.add(-self.nbytes)
        self.buf, self.view, self.cap, self.nbytes = buf, view, cap, nbytes

    def grow(self) -> None:
        """Room for more slices: double the array (within the bound)."""
        cap = max(self.cap * 2, 1)
        if self.bound is not None:
            cap = min(cap, self.bound)
        self._allocate(self.buf.dtype, self.view.shape[1:], cap)

    def add(self, value: Any) -> None:
        """One more slice, written in place when it fits the array."""
        if self.slices is None:
            if type(value) is np.ndarray and (
                self.buf is not None or self.reserve(value.dtype, value.shape, self.exact)
            ):
                if value.dtype == self.buf.dtype and value.shape == self.view.shape[1:]:
                    if self.n == self.cap:
                        self.grow()
                    self.view[self.cap - 1 - self.n if self.reverse else self.n] = value
                    self.n += 1
                    return
            self._to_list()
        self.slices.append(value)
        self.held.add(kept_nbytes([value]))

    def _to_list(self) -> None:
        view, n, cap = self.view, self.n, self.cap
        self.slices = [view[cap - 1 - k if self.reverse else k] for k in range(n)]

    def result(self, empty: Callable[[], np.ndarray]) -> np.ndarray:
        """The stacked output (``empty()`` when there is no slice)."""
        if self.slices is not None:
            if not self.slices:
                return empty()
            values = self.slices[::-1] if self.reverse else self.slices
            axis = self.axis + values[0].ndim + 1 if self.axis < 0 else self.axis
            self.held.add(kept_nbytes(values))  # the stacked copy, while the slices exist
            return np.stack(values, axis=axis)
        if self.n == 0:
            return empty()
        if self.n == self.cap:
            return self.buf
        lo, hi = (self.cap - self.n, self.cap) if self.reverse else (0, self.n)
        part = np.moveaxis(self.view[lo:hi], 0, self._axis())
        self.held.add(part.nbytes + ARRAY_OVERHEAD)  # the copy, while the array exists
        return part.copy()

    def _axis(self) -> int:
        return self.axis + self.buf.ndim if self.axis < 0 else self.axis
