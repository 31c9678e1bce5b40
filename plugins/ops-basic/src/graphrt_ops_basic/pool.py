"""MaxPool, AveragePool, LpPool and their global forms.

A window reduction is separable: it reduces along the first spatial axis into a scratch array,
then along the next, and so on, so a k x k window costs about 2k numpy calls instead of k * k
(and the first passes, over whole rows, run on contiguous memory).  X is read in place unless a
window reaches into padding; then it is copied once into a scratch buffer whose border holds
the pad value (-inf, or the type's minimum, for max; 0 for sums).  AveragePool divides by a
per-position count computed once per plan (at its first bind, in closed form per axis), so
count_include_pad, ceil_mode and dilations cost nothing per run.  MaxPool's Indices output needs
to know which tap won: that path compares tap by tap and records the winner's index.  float16
and bfloat16 sums accumulate in float32.

Exact mode (docs/exact-mode.md): a maximum is exact in any order; MaxPool and GlobalMaxPool
then add +0 (a zero maximum is +0 whatever the machine's max does with -0 and +0) and rewrite
NaN to the canonical NaN.  AveragePool sums each window tap by tap in row-major order
(``acc = t0; acc += t1; ...``, padding included as +0) before its one division, and
GlobalAveragePool sums the positions in ascending order; LpPool needs a power: not exact.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo

from ._geometry import Programmed, Staging, Window, call_all, resolve, staging, window_attrs
from ._util import _CANONICAL_NAN, canonical_sum, constant, is_float, rewrite_nan
from .unary import require_float

#: Types numpy hands to BLAS in a product.
BLAS_TYPES = (np.dtype(np.float32), np.dtype(np.float64))


@dataclasses.dataclass(frozen=True)
class _Plan:
    w: Window
    st: Staging
    compute: np.dtype
    buf: int | None  # scratch: X padded (and converted to the compute type)
    stages: tuple[int | None, ...]  # scratch per spatial axis but the last (None: a plain view)
    acc: int | None  # scratch: the result in the compute type when Y's type differs
    divisor: _Divisor | None = None  # AveragePool: elements averaged per output position
    indices: _Indices | None = None  # MaxPool with its Indices output
    nan: int | None = None  # exact mode: scratch (bool, Y's shape) of the canonical-NaN rewrite


@dataclasses.dataclass(frozen=True)
class _Indices:
    mask: int  # scratch (bool, Y's shape): where the current tap wins
    tap: int  # scratch (int64, Y's shape): the winning tap
    taps: tuple[np.ndarray, ...]  # 0-d int64 tap numbers
    offsets: np.ndarray  # per tap: its offset in X's flattened image
    starts: _WindowStarts  # base and image, made at the plan's first bind


def _compute_type(dtype: np.dtype, exact: bool) -> np.dtype:
    """Maximum is exact in any type; sums of float16/bfloat16 accumulate in float32."""
    if exact or np.dtype(dtype) in (np.float32, np.float64):
        return np.dtype(dtype)
    return np.dtype(np.float32)


class _Pool(Programmed):
    """What MaxPool, AveragePool and LpPool share: the window and the separable reduction."""

    #: The ufunc that combines two window elements.
    reduce: ClassVar[Any] = np.add

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.attrs = window_attrs(self)
        if self.attrs.kernel_shape is None:
            raise self.fail("kernel_shape is required")

    def pad_value(self, dtype: np.dtype) -> Any:
        return 0

    def _plan(self, ctx: InferContext, copy: bool = False, separable: bool = True) -> _Plan:
        x, dtype = ctx.shape(0), ctx.dtype(0)
        if len(x) < 3:
            raise self.fail(f"X must be (N, C, spatial...), got {list(x)}", "invalid_input")
        w = resolve(self, self.attrs, x[2:], self.attrs.kernel_shape)
        if min(w.out) < 1:
            raise self.fail(f"X {list(x)} gives an empty output", "invalid_input")
        ctx.set_output(0, dtype, (*x[:2], *w.out))
        ct = _compute_type(dtype, self.reduce is np.maximum)
        st = staging(w, split=False, copy=copy or ct != dtype)
        buf = ctx.add_scratch(ct, st.shape(*x[:2])) if st.copy else None
        shape = list(w.extent)
        stages = []
        for a in range(len(w.out) - 1):  # the last stage (last axis) writes the output
            shape[a] = w.out[a]
            keep = separable and w.kernel[a] > 1
            stages.append(ctx.add_scratch(ct, (*x[:2], *shape)) if keep else None)
        acc = ctx.add_scratch(ct, (*x[:2], *w.out)) if ct != dtype else None
        nan = _nan_scratch(ctx, dtype, (*x[:2], *w.out))
        return _Plan(w, st, ct, buf, tuple(stages), acc, nan=nan)

    def program(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        p: _Plan = ctx.prepared
        x, y = inputs[0], outputs[0]
        calls: list[Callable[[], Any]] = []
        buf = None if p.buf is None else ctx.scratch[p.buf]
        if buf is not None:
            calls += p.st.fill_calls(p.w, x, buf, self.pad_value(x.dtype))
        src = p.st.source(x, buf)
        final = y if p.acc is None else ctx.scratch[p.acc]
        calls += self.before(src)
        exact_sum = ctx.exact and self.reduce is np.add
        calls += (_tap_sum if exact_sum else _separable)(p, ctx, src, final, self.reduce)
        calls += self.after(p, final, y)
        return functools.partial(call_all, calls)

    def before(self, src: np.ndarray) -> list[Callable[[], Any]]:
        """Calls on the staged input before the reduction (LpPool's |x| ** p)."""
        return []

    def after(self, p: _Plan, final: np.ndarray, y: np.ndarray) -> list[Callable[[], Any]]:
        """Calls turning the reduction (in ``final``) into Y."""
        if final is y:
            return []
        return [functools.partial(np.copyto, y, final, "unsafe")]


def _separable(
    p: _Plan, ctx: KernelContext, src: np.ndarray, final: np.ndarray, ufunc: Any
) -> list[Callable[[], Any]]:
    """Reduce the window one spatial axis at a time into ``final``.

    The first axis goes first: its taps are whole rows, so those calls run over contiguous
    memory, and the strided taps of the last axis (stride > 1) only see rows already reduced.
    """
    w, calls = p.w, []
    rank = len(w.out)
    cur = src[(slice(None), 0, slice(None), *(slice(0, e) for e in w.extent))]
    for a in range(rank):
        views = [
            cur[
                (Ellipsis, slice(t * d, t * d + (w.out[a] - 1) * s + 1, s))
                + (slice(None),) * (rank - 1 - a)
            ]
            for t, d, s in ((t, w.dilations[a], w.strides[a]) for t in range(w.kernel[a]))
        ]
        last = a == rank - 1
        dst = final if last else (None if p.stages[a] is None else ctx.scratch[p.stages[a]])
        if dst is None:
            cur = views[0]  # one tap along this axis: only a subsampling view
            continue
        if len(views) == 1:
            calls.append(functools.partial(np.copyto, dst, views[0], "unsafe"))
        else:
            calls.append(functools.partial(ufunc, views[0], views[1], out=dst, casting="unsafe"))
            calls += [functools.partial(ufunc, dst, v, out=dst) for v in views[2:]]
        cur = dst
    return calls


def _tap_sum(
    p: _Plan, ctx: KernelContext, src: np.ndarray, final: np.ndarray, ufunc: Any
) -> list[Callable[[], Any]]:
    """Exact mode: final = tap 0 + tap 1 + ... in row-major tap order, one add at a time."""
    views = [p.st.tap_view(p.w, src, t) for t in range(len(p.st.taps))]
    calls = [functools.partial(np.copyto, final, views[0], "unsafe")]
    return calls + [functools.partial(np.add, final, v, out=final) for v in views[1:]]


def _nan_scratch(ctx: InferContext, dtype: np.dtype, shape: Sequence[int]) -> int | None:
    """Exact mode: a mask for the canonical-NaN rewrite of a float Y."""
    return ctx.add_scratch(np.bool_, shape) if ctx.exact and dtype in _CANONICAL_NAN else None


def _exact_max_finish(y: np.ndarray, mask: np.ndarray | None) -> None:
    """A zero maximum becomes +0 (-0 + +0 = +0, nothing else changes); canonical NaN."""
    if mask is not None:
        np.add(y, constant(y.dtype, 0), out=y)
        rewrite_nan(y, mask)


class MaxPool(_Pool):
    reduce = np.maximum
    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.storage_order = node.attr("storage_order", 0)
        if self.storage_order not in (0, 1):
            raise self.fail(f"storage_order must be 0 or 1, got {self.storage_order}")

    def pad_value(self, dtype: np.dtype) -> Any:
        return np.iinfo(dtype).min if dtype.kind in "iu" else -np.inf

    def infer(self, ctx: InferContext) -> None:
        with_indices = len(self.node.outputs) > 1 and self.node.outputs[1] != ""
        plan = self._plan(ctx, separable=not with_indices)
        if with_indices:
            x = ctx.shape(0)
            ctx.set_output(1, np.int64, (*x[:2], *plan.w.out))
            plan = dataclasses.replace(plan, indices=self._indices(ctx, plan.w, x))
        ctx.prepared = plan

    def _indices(self, ctx: InferContext, w: Window, x: Sequence[int]) -> _Indices:
        spatial = w.spatial
        if self.storage_order == 0:
            steps = [math.prod(spatial[a + 1 :]) for a in range(len(spatial))]
        else:
            steps = [math.prod(spatial[:a]) for a in range(len(spatial))]
        offsets = np.array(
            [sum(t * d * st for t, d, st in zip(tap, w.dilations, steps)) for tap in w.taps()],
            np.int64,
        )
        out = (*x[:2], *w.out)
        taps = tuple(np.array(t, np.int64) for t in range(len(offsets)))
        return _Indices(
            ctx.add_scratch(np.bool_, out), ctx.add_scratch(np.int64, out), taps, offsets,
            _WindowStarts(w, tuple(x[:2]), tuple(steps)),
        )  # fmt: skip

    def program(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        p: _Plan = ctx.prepared
        if p.nan is not None:
            run = self._program(ctx, inputs, outputs)
            finish = functools.partial(_exact_max_finish, outputs[0], ctx.scratch[p.nan])
            return functools.partial(call_all, [run, finish])
        return self._program(ctx, inputs, outputs)

    def _program(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        p: _Plan = ctx.prepared
        if p.indices is None or len(outputs) < 2 or outputs[1] is None:
            return super().program(ctx, inputs, outputs)
        x, y, idx = inputs[0], outputs[0], outputs[1]
        q = p.indices
        buf = None if p.buf is None else ctx.scratch[p.buf]
        calls = [] if buf is None else p.st.fill_calls(p.w, x, buf, self.pad_value(x.dtype))
        src = p.st.source(x, buf)
        mask, tap = ctx.scratch[q.mask], ctx.scratch[q.tap]
        views = [p.st.tap_view(p.w, src, t) for t in range(len(p.st.taps))]
        calls += [functools.partial(np.copyto, y, views[0]), functools.partial(tap.fill, 0)]
        for t in range(1, len(views)):  # strictly greater: the first maximum wins ties
            calls.append(functools.partial(np.greater, views[t], y, out=mask))
            calls.append(functools.partial(np.copyto, y, views[t], where=mask))
            calls.append(functools.partial(np.copyto, tap, q.taps[t], where=mask))
        base, image = q.starts.value()
        calls.append(functools.partial(np.take, q.offsets, tap, out=idx, mode="clip"))
        calls.append(functools.partial(np.add, idx, base, out=idx))
        calls.append(functools.partial(np.add, idx, image, out=idx))
        return functools.partial(call_all, calls)


class _WindowStarts:
    """MaxPool's Indices offsets: where each output position's window starts in the flattened
    image (Y's spatial shape) and where each (image, channel) starts in flattened X.  Made at
    the plan's first bind, like AveragePool's divisor: by then the budget has accepted the
    plan holding Y, so pads of 2**29 are refused before an array of Y's size exists."""

    __slots__ = ("_value", "lead", "steps", "w")

    def __init__(self, w: Window, lead: tuple[int, ...], steps: tuple[int, ...]) -> None:
        self.w, self.lead, self.steps = w, lead, steps
        self._value: tuple[np.ndarray, np.ndarray] | None = None

    def value(self) -> tuple[np.ndarray, np.ndarray]:
        if self._value is None:  # run states binding at once compute the same arrays
            w = self.w
            base = np.zeros(w.out, np.int64)
            for a, (o, s, b, st) in enumerate(zip(w.out, w.strides, w.begin, self.steps)):
                axis = (np.arange(o, dtype=np.int64) * s - b) * st
                base += axis.reshape((-1,) + (1,) * (len(w.out) - a - 1))
            n, c = self.lead
            image = np.arange(n * c, dtype=np.int64) * math.prod(w.spatial)
            self._value = (base, image.reshape(n, c, *(1,) * len(w.out)))
        return self._value


class AveragePool(_Pool):
    supports_exact = True

    def infer(self, ctx: InferContext) -> None:
        require_float(self, ctx)  # ONNX's float types only (an int32 mean truncated)
        plan = self._plan(ctx)
        include = self.node.attr("count_include_pad", 0)
        w, limit = plan.w, np.iinfo(np.int64).max
        if math.prod(ctx.shape(0)[:2]) and (max(w.extent) > limit or math.prod(w.out) > limit):
            raise self.fail(
                f"the windows read {list(w.extent)} padded positions for an output of "
                f"{list(w.out)}: too large to represent",
                "invalid_input",
            )
        divisor = _Divisor(w, include, plan.compute)
        ctx.prepared = dataclasses.replace(plan, divisor=divisor)

    def after(self, p: _Plan, final: np.ndarray, y: np.ndarray) -> list[Callable[[], Any]]:
        if y.size == 0:  # an empty batch: nothing to divide, and no divisor to compute
            return []
        divisor = p.divisor.value()
        return [functools.partial(np.divide, final, divisor, out=y, casting="unsafe")]


class _Divisor:
    """AveragePool's divisor, computed at the plan's first bind and kept.

    Not at infer: by the time a step binds, the plan holding Y (at least as many elements as
    the divisor) has been accepted by the memory budget, so an output too large for it (pads of
    2**29, say) is refused before any per-position work, and an empty one never needs it.
    """

    __slots__ = ("_value", "dtype", "include_pad", "w")

    def __init__(self, w: Window, include_pad: int, dtype: np.dtype) -> None:
        self.w, self.include_pad, self.dtype = w, include_pad, dtype
        self._value: np.ndarray | None = None

    def value(self) -> np.ndarray:
        if self._value is None:  # run states binding at once compute the same array
            self._value = _divisor(self.w, self.include_pad, self.dtype)
        return self._value


def _axis_counts(o: int, k: int, s: int, d: int, lo: int, hi: int) -> np.ndarray:
    """Per output position of one axis, how many of its k taps (at o * s + j * d, padded
    coordinates) fall in [lo, hi): j runs from ceil((lo - start) / d) to ceil((hi - start) / d)
    clipped to [0, k], so the cost is O(o) whatever k, the strides and the pads are.

    The bounds are at most the extent the windows read (< 2**63); a stride with one output, or
    a dilation with one tap, may be larger but then changes nothing, so it is taken as 1.
    """
    starts = np.arange(o, dtype=np.int64) * (s if o > 1 else 1)
    d = d if k > 1 else 1
    first = np.maximum(-((starts - lo) // d), 0)  # -((start - lo) // d) = ceil((lo - start) / d)
    stop = np.minimum(-((starts - hi) // d), k)
    return np.maximum(stop - first, 0)


def _divisor(w: Window, include_pad: int, dtype: np.dtype) -> np.ndarray:
    """How many elements each output position averages: inside X, or inside X and its declared
    padding with count_include_pad (never the room ceil_mode adds past the padding)."""
    counts = []
    for o, k, s, d, b, n, e, x in zip(
        w.out, w.kernel, w.strides, w.dilations, w.begin, w.spatial, w.end, w.extent
    ):
        lo, hi = (0, b + n + e) if include_pad else (b, b + n)
        # every tap lies in [0, extent): clamping the bounds there changes no count and keeps
        # the arithmetic inside int64
        counts.append(_axis_counts(o, k, s, d, min(lo, x), min(hi, x)))
    total = functools.reduce(np.multiply.outer, counts)
    total = np.maximum(total, 1)
    if np.all(total == total.flat[0]):
        return constant(dtype, float(total.flat[0]))
    return total.astype(dtype)


class LpPool(_Pool):
    """(sum over the window of |x| ** p) ** (1 / p); the padding adds nothing."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.p = node.attr("p", 2.0 if node.opset < 2 else 2)
        if self.p <= 0:
            raise self.fail(f"p must be positive, got {self.p}")

    def infer(self, ctx: InferContext) -> None:
        if not is_float(ctx.dtype(0)):
            raise self.fail(f"X must be a float tensor, got {ctx.dtype(0)}", "invalid_input")
        ctx.prepared = self._plan(ctx, copy=True)

    def before(self, src: np.ndarray) -> list[Callable[[], Any]]:
        return _power_calls(src, self.p)

    def after(self, p: _Plan, final: np.ndarray, y: np.ndarray) -> list[Callable[[], Any]]:
        return [_root_call(final, y, self.p)]


def _power_calls(a: np.ndarray, p: float) -> list[Callable[[], Any]]:
    """|a| ** p in place."""
    if p == 2:
        return [functools.partial(np.square, a, out=a)]
    calls = [functools.partial(np.absolute, a, out=a)]
    if p != 1:
        calls.append(functools.partial(np.power, a, constant(a.dtype, p), out=a))
    return calls


def _root_call(a: np.ndarray, out: np.ndarray, p: float) -> Callable[[], Any]:
    """a ** (1 / p) into ``out``."""
    if p == 2:
        return functools.partial(np.sqrt, a, out=out, casting="unsafe")
    if p == 1:
        return functools.partial(np.copyto, out, a, "unsafe")
    return functools.partial(np.power, a, constant(a.dtype, 1.0 / p), out=out, casting="unsafe")


class _GlobalPool(Programmed):
    """One reduction over every spatial position of each image and channel."""

    #: The result keeps X's type (maximum); sums of float16/bfloat16 accumulate in float32.
    exact: ClassVar[bool] = False
    #: Needs a scratch copy of X to transform before reducing (|x| ** p).
    transforms: ClassVar[bool] = False

    def infer(self, ctx: InferContext) -> None:
        require_float(self, ctx)  # ONNX's float types only (an int32 mean truncated)
        x, dtype = ctx.shape(0), ctx.dtype(0)
        if len(x) < 3:
            raise self.fail(f"X must be (N, C, spatial...), got {list(x)}", "invalid_input")
        if not math.prod(x[2:]):  # a maximum or mean of nothing (onnxruntime refuses it too)
            raise self.fail(f"X {list(x)} has no spatial position to pool", "invalid_input")
        ctx.set_output(0, dtype, (*x[:2], *(1,) * (len(x) - 2)))
        ct = _compute_type(dtype, self.exact)
        work = ctx.add_scratch(ct, x) if self.transforms else None
        acc = ctx.add_scratch(ct, x[:2]) if ct != dtype else None
        nan = _nan_scratch(ctx, dtype, x[:2])
        ctx.prepared = (work, acc, constant(ct, math.prod(x[2:])), nan)

    def program(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        work, acc, count, nan = ctx.prepared
        x, y = inputs[0], outputs[0]
        y = y.reshape(x.shape[:2])
        out = y if acc is None else ctx.scratch[acc]
        work = None if work is None else ctx.scratch[work]
        calls = self.calls(x, out, y, work, count, ctx.exact)
        if nan is not None:
            calls.append(functools.partial(self.exact_finish, y, ctx.scratch[nan]))
        return functools.partial(call_all, calls)

    def calls(
        self,
        x: np.ndarray,
        acc: np.ndarray,
        y: np.ndarray,
        work: Any,
        count: np.ndarray,
        exact: bool = False,
    ) -> list[Callable[[], Any]]:
        """Reduce X into ``acc`` (N, C) and finish into ``y`` (the same array or Y's type)."""
        raise NotImplementedError

    def exact_finish(self, y: np.ndarray, mask: np.ndarray) -> None:
        rewrite_nan(y, mask)


def _rows(x: np.ndarray) -> np.ndarray:
    """X as (N, C, positions): a view for the contiguous tensors of a plan (explicit extents:
    -1 is ambiguous for a batch of 0)."""
    return x.reshape(*x.shape[:2], math.prod(x.shape[2:]))


class GlobalAveragePool(_GlobalPool):
    supports_exact = True

    def calls(self, x, acc, y, work, count, exact=False) -> list[Callable[[], Any]]:
        rows = _rows(x)
        if exact:  # ascending positions, one add at a time
            total = functools.partial(canonical_sum, rows, 2, acc[..., None])
        elif rows.dtype in BLAS_TYPES and rows.dtype == acc.dtype:
            # a product with ones: BLAS's matrix-vector sum is several times add.reduce's along
            # a short last axis (light_squeezenet's 1000 x 169: 0.10 -> 0.02 ms)
            ones = np.ones(rows.shape[2], rows.dtype)
            total = functools.partial(np.matmul, rows, ones, out=acc)
        else:
            total = functools.partial(np.add.reduce, rows, axis=2, out=acc)
        return [
            total,
            functools.partial(np.divide, acc, count, out=y, casting="unsafe"),
        ]


class GlobalMaxPool(_GlobalPool):
    exact = True
    supports_exact = True

    def calls(self, x, acc, y, work, count, exact=False) -> list[Callable[[], Any]]:
        return [functools.partial(np.maximum.reduce, _rows(x), axis=2, out=y)]

    def exact_finish(self, y: np.ndarray, mask: np.ndarray) -> None:
        _exact_max_finish(y, mask)


class GlobalLpPool(_GlobalPool):
    transforms = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.p = node.attr("p", 2.0 if node.opset < 2 else 2)
        if self.p <= 0:
            raise self.fail(f"p must be positive, got {self.p}")

    def calls(self, x, acc, y, work, count, exact=False) -> list[Callable[[], Any]]:
        return [
            functools.partial(np.copyto, work, x, "unsafe"),
            *_power_calls(work, self.p),
            functools.partial(np.add.reduce, _rows(work), axis=2, out=acc),
            _root_call(acc, y, self.p),
        ]
