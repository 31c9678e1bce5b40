"""Resize and Upsample: separable interpolation planned once, applied axis by axis.

``infer`` reads the scales or sizes (constants in practice, so once per plan), works out the
output shape and, for every resized axis, the tap indices and weights (resize_taps.py).  ``run``
is then a fixed list of numpy calls: along each axis, ``acc = w0 * take(x, idx0)``, then
``acc = acc + wk * take(x, idxk)`` for the next taps, into a scratch buffer that feeds the next
axis.  Axes are applied in the order that costs least for the shapes (a shrinking axis first,
the last axis, whose gathers go element by element, where it is smallest).  A tap whose indices
are regular (c + k * o: integer downscaling) is read as a strided view instead of gathered; a
small step gathers all its taps in one call.  When every axis is a selection (nearest mode):
integer up- and downscaling is one broadcast copy of a strided view (``_Repeat``), anything else
one ``np.take`` over a flat index folding the resized axes.  Large tensors are split over the
leading (unresized) dimensions for the intra-op threads.

Upsample (deprecated since opset 10) and Resize-10 are Resize with asymmetric coordinates; ONNX
leaves their rounding open, and they follow onnxruntime (floor enlarging, ceil shrinking).

float16/bfloat16 and integer inputs are interpolated in float32 (float64 for 32- and 64-bit
integers) and rounded once at the end: integers to nearest even and saturated, as Resize's
reference does.  Strings and booleans can only be selected (nearest).

Exact mode (docs/exact-mode.md): a selection is exact.  A weighted axis computes, for each
output element, ``acc = w0*x0; acc = acc + w1*x1; ...`` in ascending tap order, each product
and sum one rounded numpy operation in the compute type (the same in every path above); the
weights are float64 results of basic operations (resize_taps.py) rounded once to the compute
type; the axes go in an order fixed by the shapes; NaN results are rewritten to the canonical
NaN.  Complex inputs interpolate only in fast mode.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo

from ._geometry import Programmed, call_all
from ._typed_attrs import typed_attr
from ._util import _CANONICAL_NAN, is_float, rewrite_nan
from ._values import axes_in, reshaped
from .resize_taps import COORDINATE_MODES, NEAREST_MODES, AxisTaps, TapOptions, axis_taps

#: Output elements per block when a resize is split for the intra-op threads.
BLOCK_ELEMENTS = 1 << 17
#: Largest flat index (elements) a selection folds into one gather.
FLAT_LIMIT = 1 << 24
#: Up to this many gathered elements, a weighted step gathers all its taps in one call (a small
#: step costs its numpy calls more than its memory traffic).
FUSE_LIMIT = 1 << 16


@dataclasses.dataclass(frozen=True)
class _Step:
    axis: int  # in the block view (leading block dim first)
    idx: tuple[np.ndarray, ...]  # per tap: (L,) intp
    weights: tuple[np.ndarray, ...] | None  # per tap: (L, 1, ...) in the compute type
    shape: tuple[int, ...]  # output shape of the step (block view, whole tensor)
    dst: int | None  # scratch index; None: the final array
    #: Small steps: every tap's indices end to end (K * L,) and the weights (K, L, 1, ...).
    fused: tuple[np.ndarray, np.ndarray] | None = None
    #: Scratch of the terms: one tap's (shape), or every tap's (K * L along the axis) when fused.
    #: Each step has its own, so split blocks at different steps never share memory.
    tmp: int | None = None


@dataclasses.dataclass(frozen=True)
class _Repeat:
    """Every resized axis repeats each element k times (integer nearest upsampling) or reads
    every k-th element (integer downsampling): Y viewed with a (length, k) pair per repeating
    axis is a strided view of X broadcast along the k's, one copy.  When the last axis repeats
    k times and k copies of an element fit 2, 4 or 8 bytes, those copies are one wide unsigned
    integer, X's bits times 0x...0101 (one 1 per copy, no carries): one multiply writes them."""

    grouped: tuple[int, ...]  # Y's block view (as ``wide`` when widening)
    index: tuple[Any, ...]  # X's block view -> the broadcast source (None per k)
    multiplier: np.ndarray | None = None  # 0-d ``wide``
    narrow: np.dtype | None = None  # X's bits as an unsigned integer
    wide: np.dtype | None = None


@dataclasses.dataclass(frozen=True)
class _Plan:
    view: tuple[int, ...]  # input shape as (outer, rest...): the block view
    out_view: tuple[int, ...]
    blocks: int
    extrapolate: tuple[np.ndarray, ...] = ()  # boolean masks, broadcast over the block view
    fill: np.ndarray | None = None  # 0-d extrapolation value
    flat: tuple[np.ndarray, int] | None = None  # folded selection: (flat index, gather axis)
    repeat: _Repeat | None = None  # integer nearest upsampling: a broadcast copy
    steps: tuple[_Step, ...] = ()
    staged: int | None = None  # scratch: X in the compute type
    acc: int | None = None  # scratch: the result in the compute type (cast into Y at the end)
    finish: Any = None  # None, "cast", or the (lo, hi) saturation bounds of an integer Y
    nan: int | None = None  # exact mode: scratch mask of the canonical-NaN rewrite


def compute_type(dtype: np.dtype) -> np.dtype:
    """The type a weighted sum runs in: float16/bfloat16 and small integers in float32, 32- and
    64-bit integers in float64 (exact for every int32), float32/float64/complex in themselves."""
    if dtype in (np.float32, np.float64, np.complex64, np.complex128):
        return dtype
    if dtype.kind in "iu" and dtype.itemsize >= 4:
        return np.dtype(np.float64)
    return np.dtype(np.float32)


def int_bounds(dtype: np.dtype, compute: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """The saturation bounds of an integer type as compute-type values inside its range."""
    info = np.iinfo(dtype)
    lo, hi = compute.type(info.min), compute.type(info.max)
    while int(hi) > info.max:  # 2**63 - 1 rounds up to 2**63 in float64
        hi = np.nextafter(hi, compute.type(0))
    return np.array(lo, compute), np.array(hi, compute)


def _scalar(value: float, dtype: np.dtype) -> np.ndarray:
    """A 0-d value of ``dtype`` (integers rounded to nearest even and saturated)."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        value = min(max(float(np.rint(value)), info.min), info.max)
        return np.array(int(value), dtype)
    if dtype == np.dtype(object):
        return np.array(str(value), object)
    return np.array(value).astype(dtype)


class Resize(Programmed):
    """Resize (opsets 10 to 19); Upsample subclasses it."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        opset = node.opset
        legacy = self.legacy
        modes = ("nearest", "linear") if legacy else ("nearest", "linear", "cubic")
        mode = typed_attr(self, "mode", "nearest", "str")
        if mode not in modes:
            raise self.fail(f"mode must be one of {', '.join(modes)}, got {mode!r}")
        coordinate = typed_attr(self, "coordinate_transformation_mode", "half_pixel", "str")
        coordinate = "simple" if legacy else coordinate
        allowed = set(COORDINATE_MODES)
        allowed.add("tf_half_pixel_for_nn" if opset < 18 else "half_pixel_symmetric")
        if not legacy and coordinate not in allowed:
            raise self.fail(
                f"coordinate_transformation_mode must be one of {', '.join(sorted(allowed))}, "
                f"got {coordinate!r}"
            )
        nearest = typed_attr(self, "nearest_mode", "round_prefer_floor", "str")
        if not legacy and nearest not in NEAREST_MODES:
            raise self.fail(f"nearest_mode must be one of {', '.join(NEAREST_MODES)}")
        antialias = opset >= 18 and bool(typed_attr(self, "antialias", 0, "int"))
        if antialias and mode == "nearest":  # the spec: linear and cubic only
            raise self.fail("antialias needs mode linear or cubic, not nearest")
        self.opts = TapOptions(
            mode=mode,
            coordinate=coordinate,
            nearest=nearest,
            cubic_a=typed_attr(self, "cubic_coeff_a", -0.75, "float"),
            exclude_outside=bool(typed_attr(self, "exclude_outside", 0, "int")) and not legacy,
            antialias=antialias,
        )
        self.extrapolation = typed_attr(self, "extrapolation_value", 0.0, "float")
        self.axes = typed_attr(self, "axes", None, "ints") if opset >= 18 else None
        policy = "stretch"
        if opset >= 18:
            policy = typed_attr(self, "keep_aspect_ratio_policy", "stretch", "str")
        if policy not in ("stretch", "not_larger", "not_smaller"):
            raise self.fail(
                "keep_aspect_ratio_policy must be stretch, not_larger or not_smaller, "
                f"got {policy!r}"
            )
        self.policy = policy

    @property
    def legacy(self) -> bool:
        """Resize-10: asymmetric coordinates, nearest or linear, no other attribute."""
        return self.node.opset < 11

    # -- what the node asks for ---------------------------------------------------------------
    def _present(self, ctx: InferContext, i: int) -> bool:
        """Input i is given and not an empty placeholder (its shape says so at plan time)."""
        return i < ctx.num_inputs and ctx.has_input(i) and math.prod(ctx.shape(i)) > 0

    def _float_values(self, ctx: InferContext, i: int, what: str) -> list[float]:
        if not is_float(ctx.dtype(i)):
            raise self.fail(f"{what} must be a float tensor, got {ctx.dtype(i)}", "invalid_input")
        return [float(v) for v in np.asarray(ctx.value(i), np.float64).reshape(-1)]

    def request(self, ctx: InferContext, rank: int):
        """(axes, scales or None, sizes or None, roi or None) as the node states them."""
        scales_i, sizes_i = (1, None) if self.legacy else (2, 3)
        axes = list(range(rank))
        if self.axes is not None:
            axes = axes_in(self, list(self.axes), rank, "invalid_model")  # an attribute
        scales = sizes = roi = None
        if self._present(ctx, scales_i):
            scales = self._float_values(ctx, scales_i, "scales")
        if sizes_i is not None and self._present(ctx, sizes_i):
            if ctx.dtype(sizes_i) != np.int64:
                message = f"sizes must be int64, got {ctx.dtype(sizes_i)}"
                raise self.fail(message, "invalid_input")
            sizes = [int(v) for v in np.asarray(ctx.value(sizes_i)).reshape(-1)]
        if scales is not None and sizes is not None:
            raise self.fail("only one of scales and sizes may be given", "invalid_input")
        if scales is None and sizes is None:
            raise self.fail("one of scales and sizes must be given", "invalid_input")
        if self.opts.coordinate == "tf_crop_and_resize":
            if not self._present(ctx, 1):
                raise self.fail("tf_crop_and_resize needs roi", "invalid_input")
            roi = self._float_values(ctx, 1, "roi")
            if not all(math.isfinite(v) for v in roi):
                raise self.fail(f"roi must be finite, got {roi}", "invalid_input")
        return axes, scales, sizes, roi

    def geometry(self, ctx: InferContext, shape: tuple[int, ...]):
        """Per axis: (output length, scale, roi pair); the output shape follows."""
        rank = len(shape)
        axes, scales, sizes, roi = self.request(ctx, rank)
        given = scales if scales is not None else sizes
        what = "scales" if scales is not None else "sizes"
        if len(given) != len(axes):
            raise self.fail(
                f"{what} has {len(given)} values for {len(axes)} axes of X {list(shape)}",
                "invalid_input",
            )
        if roi is not None and len(roi) != 2 * len(axes):
            message = f"roi must have {2 * len(axes)} values, got {len(roi)}"
            raise self.fail(message, "invalid_input")
        out = list(shape)
        scale = [1.0] * rank
        if scales is not None:
            for a, s in zip(axes, scales):
                if not (s > 0 and math.isfinite(s)):
                    raise self.fail(f"scales must be positive, got {scales}", "invalid_input")
                scale[a], out[a] = s, math.floor(shape[a] * s)
        else:
            for a, n in zip(axes, sizes):
                # a scale of 0 (onnxruntime refuses it too) or an empty axis made longer
                if n < 0 or (n == 0) != (shape[a] == 0):
                    message = f"sizes {sizes} cannot resize axis {a} of X {list(shape)} to {n}"
                    raise self.fail(message, "invalid_input")
                scale[a], out[a] = (n / shape[a] if shape[a] else 1.0), n
            if self.policy != "stretch" and all(shape[a] for a in axes):
                pick = min if self.policy == "not_larger" else max
                common = pick(scale[a] for a in axes)
                for a in axes:
                    scale[a], out[a] = common, int(common * shape[a] + 0.5)
        pairs: list[tuple[float, float] | None] = [None] * rank
        if roi is not None:
            for i, a in enumerate(axes):
                pairs[a] = (roi[i], roi[len(axes) + i])
        elif self.opts.coordinate == "tf_crop_and_resize":
            pairs = [(0.0, 1.0)] * rank
        if math.prod(out) and math.prod(out) > np.iinfo(np.intp).max // max(
            ctx.dtype(0).itemsize, 1
        ):
            raise self.fail(f"the output {out} is too large", "invalid_input")
        return axes, out, scale, pairs

    # -- the plan -------------------------------------------------------------------------------
    def infer(self, ctx: InferContext) -> None:
        shape, dtype = ctx.shape(0), ctx.dtype(0)
        axes, out, scale, pairs = self.geometry(ctx, shape)
        ctx.set_output(0, dtype, out)
        if math.prod(out) == 0:
            ctx.prepared = None
            return
        taps: dict[int, AxisTaps] = {}
        for a in axes:
            try:
                t = axis_taps(self.opts, out[a], shape[a], scale[a], pairs[a])
            except MemoryError:  # an axis of billions of positions
                raise self.fail(f"the output {out} is too large", "invalid_input") from None
            if not (out[a] == shape[a] and t.identity):
                taps[a] = t
        weighted = any(t.weights is not None for t in taps.values())
        if weighted and (dtype.kind in "OSUb"):
            raise self.fail(f"{self.opts.mode} mode cannot interpolate {dtype} values")
        if weighted and ctx.exact and dtype.kind == "c":
            raise self.fail(
                f"{self.opts.mode} interpolation of complex values is not available in exact mode",
                "exact_mode_unavailable",
            )
        ctx.prepared = self._plan(ctx, shape, tuple(out), taps, weighted)

    def _plan(self, ctx, shape, out, taps: dict[int, AxisTaps], weighted: bool) -> _Plan:
        dtype = ctx.dtype(0)
        compute = compute_type(dtype) if weighted else dtype
        first = min(taps, default=0)
        lead = math.prod(shape[:first])
        blocks = max(1, min(lead, math.prod(out) // BLOCK_ELEMENTS))
        masks = tuple(
            t.outside.reshape((-1,) + (1,) * (len(shape) - a - 1))
            for a, t in taps.items()
            if t.outside is not None
        )
        common = {
            "view": (lead, *shape[first:]),
            "out_view": (lead, *out[first:]),
            "blocks": blocks,
            "extrapolate": masks,
            "fill": _scalar(self.extrapolation, compute) if masks else None,
        }
        if not weighted and taps and not masks:
            repeat = _repeat_selection(shape, out, taps, first, ctx.dtype(0))
            if repeat is not None:
                return _Plan(**common, repeat=repeat)
        if not weighted and taps:
            flat = _flat_selection(shape, out, taps, first)
            if flat is not None:
                return _Plan(**common, flat=flat)
        steps = self._steps(ctx, shape, taps, first, compute)
        finish = None
        if compute != dtype:
            finish = int_bounds(dtype, compute) if dtype.kind in "iu" else "cast"
        exact_nan = ctx.exact and weighted and compute in _CANONICAL_NAN
        return _Plan(
            **common,
            steps=steps,
            staged=ctx.add_scratch(compute, common["view"]) if compute != dtype else None,
            acc=ctx.add_scratch(compute, common["out_view"]) if compute != dtype else None,
            finish=finish,
            nan=ctx.add_scratch(np.bool_, common["out_view"]) if exact_nan else None,
        )

    def _steps(self, ctx, shape, taps: dict[int, AxisTaps], first: int, compute: np.dtype):
        order = _cheapest_order(shape, taps)
        cur = (math.prod(shape[:first]), *shape[first:])
        steps = []
        for n, a in enumerate(order):
            t = taps[a]
            va = a - first + 1
            cur = cur[:va] + (t.idx.shape[1],) + cur[va + 1 :]
            last = n == len(order) - 1
            dst = None if last else ctx.add_scratch(compute, cur)
            weights = fused = tmp = None
            if t.weights is not None:
                bshape = (-1,) + (1,) * (len(cur) - va - 1)
                weights = tuple(_weight(w, compute, bshape) for w in t.weights)
                k = t.weights.shape[0]
                terms = cur
                if k * math.prod(cur) <= FUSE_LIMIT:
                    w = t.weights.astype(compute).reshape((k, *bshape))
                    fused = (np.ascontiguousarray(t.idx.reshape(-1)), w)
                    terms = (*cur[:va], k * cur[va], *cur[va + 1 :])
                tmp = ctx.add_scratch(compute, terms)
            idx = tuple(_strided(i, shape[a]) for i in t.idx)
            steps.append(_Step(va, idx, weights, cur, dst, fused, tmp))
        return tuple(steps)

    # -- the run ------------------------------------------------------------------------------
    def program(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        p: _Plan | None = ctx.prepared
        if p is None:
            return _nothing
        x = inputs[0].reshape(p.view)
        y = reshaped(outputs[0], p.out_view)
        if p.flat is None and p.repeat is None and not p.steps:  # every axis unchanged
            return functools.partial(np.copyto, y, x)
        blocks = [self._block(ctx, p, x, y, b) for b in range(p.blocks)]
        if len(blocks) == 1:
            return functools.partial(call_all, blocks[0])
        return functools.partial(_parallel, ctx, blocks)

    def _block(self, ctx: KernelContext, p: _Plan, x, y, b: int) -> list[Callable[[], Any]]:
        lo, hi = b * p.view[0] // p.blocks, (b + 1) * p.view[0] // p.blocks
        part = slice(lo, hi)
        calls: list[Callable[[], Any]] = []
        final = (y if p.acc is None else ctx.scratch[p.acc])[part]
        if p.repeat is not None:
            calls.append(_repeat_call(p.repeat, x[part], final))
        elif p.flat is not None:
            index, axis = p.flat
            src = x[part].reshape(hi - lo, -1, *p.view[axis + 1 :])
            dst = reshaped(final, (hi - lo, index.size, *p.view[axis + 1 :]))
            calls.append(functools.partial(np.take, src, index, 1, dst, "clip"))
        else:
            src = x[part]
            if p.staged is not None:
                staged = ctx.scratch[p.staged][part]
                calls.append(functools.partial(np.copyto, staged, src, "unsafe"))
                src = staged
            for step in p.steps:
                dst = final if step.dst is None else ctx.scratch[step.dst][part]
                tmp = None if step.tmp is None else ctx.scratch[step.tmp][part]
                calls += _step_calls(step, src, dst, tmp)
                src = dst
        for mask in p.extrapolate:
            calls.append(functools.partial(np.copyto, final, p.fill, "unsafe", mask))
        if p.nan is not None:
            calls.append(functools.partial(rewrite_nan, final, ctx.scratch[p.nan][part]))
        if p.acc is not None:
            yb = y[part]
            if isinstance(p.finish, tuple):
                calls.append(functools.partial(np.rint, final, out=final))
                calls.append(functools.partial(np.clip, final, *p.finish, out=final))
            calls.append(functools.partial(np.copyto, yb, final, "unsafe"))
        return calls


def _strided(idx: np.ndarray, n_in: int) -> np.ndarray | slice:
    """A tap's indices; a slice when they are c + k * o (read as a view, no gather)."""
    pick = _regular_pick(idx, n_in)
    return pick if isinstance(pick, slice) else np.ascontiguousarray(idx)


def _weight(w: np.ndarray, compute: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """A tap's weights in the compute type; 0-d when every position has the same weight."""
    w = w.astype(compute)
    return w[:1].reshape(()) if np.all(w == w[0]) else w.reshape(shape)


def _step_calls(step: _Step, src, dst, tmp) -> list[Callable[[], Any]]:
    """acc = w0 * take(src, idx0); acc = acc + wk * take(src, idxk) for the next taps."""

    def read(idx, out) -> tuple[np.ndarray, list[Callable[[], Any]]]:
        """The tap's elements: a strided view of src, or gathered into ``out``."""
        if isinstance(idx, slice):
            return src[(slice(None),) * step.axis + (idx,)], []
        take = functools.partial(np.take, src, idx, step.axis, out, "clip")
        return out, [take]

    if step.weights is None:
        view, calls = read(step.idx[0], dst)
        return calls or [functools.partial(np.copyto, dst, view)]
    if step.fused is not None:  # one gather and one multiply for every tap, then the sums
        index, w = step.fused
        axis, k = step.axis, w.shape[0]
        terms = reshaped(tmp, (*tmp.shape[:axis], k, -1, *tmp.shape[axis + 1 :]))
        tap = [terms[(slice(None),) * axis + (j,)] for j in range(k)]
        calls = [
            functools.partial(np.take, src, index, axis, tmp, "clip"),
            functools.partial(np.multiply, terms, w, out=terms),
            functools.partial(np.add, tap[0], tap[1], out=dst),
        ]
        return calls + [functools.partial(np.add, dst, t, out=dst) for t in tap[2:]]
    view, calls = read(step.idx[0], dst)
    calls.append(functools.partial(np.multiply, view, step.weights[0], out=dst))
    for idx, w in zip(step.idx[1:], step.weights[1:]):
        view, more = read(idx, tmp)
        calls += more
        calls += [
            functools.partial(np.multiply, view, w, out=tmp),
            functools.partial(np.add, dst, tmp, out=dst),
        ]
    return calls


def _nothing() -> None:
    return None


def _parallel(ctx: KernelContext, blocks: list[list[Callable[[], Any]]]) -> None:
    ctx.parallel_for(len(blocks), lambda i: call_all(blocks[i]))


def _cheapest_order(shape: tuple[int, ...], taps: dict[int, AxisTaps]) -> tuple[int, ...]:
    """The order of the axes that moves the fewest elements, ties in ascending axis order.

    A step costs its output size times its passes (a gather, a multiply and an add per tap);
    gathers along the last axis go element by element, about three times a row copy.
    """
    last = len(shape) - 1
    if len(taps) > 5:
        return tuple(sorted(taps))
    best, best_cost = None, None
    for order in itertools.permutations(sorted(taps)):
        cur = list(shape)
        cost = 0
        for a in order:
            t = taps[a]
            cur[a] = t.idx.shape[1]
            k = t.idx.shape[0]
            gather = 3 if a == last else 1
            passes = k * gather + (0 if t.weights is None else 2 * k - 1)
            cost += math.prod(cur) * passes
        if best_cost is None or cost < best_cost:
            best, best_cost = order, cost
    return best


def _regular_pick(idx: np.ndarray, n_in: int) -> Any:
    """("repeat", k) when idx is o // k over k * n_in positions, a slice when it is
    c + k * o (a strided read), else None."""
    n_out = idx.size
    if n_out % n_in == 0 and np.array_equal(idx, np.arange(n_out) // (n_out // n_in)):
        return ("repeat", n_out // n_in)
    step = int(idx[1] - idx[0]) if n_out > 1 else 1
    if step >= 1 and np.array_equal(idx, idx[0] + step * np.arange(n_out)):
        return slice(int(idx[0]), int(idx[-1]) + 1, step)
    return None


def _repeat_selection(shape, out, taps: dict[int, AxisTaps], first: int, dtype: np.dtype):
    """A :class:`_Repeat` when every resized axis repeats (o // k) or strides (c + k * o)."""
    picks = {}
    for a, t in taps.items():
        picks[a] = _regular_pick(t.idx[0], shape[a])
        if picks[a] is None:
            return None
    grouped: list[int] = [math.prod(shape[:first])]
    index: list[Any] = [slice(None)]
    for d in range(first, len(shape)):
        pick = picks.get(d)
        if isinstance(pick, tuple):
            grouped += [shape[d], pick[1]]
            index += [slice(None), None]
        else:
            grouped.append(out[d])
            index.append(slice(None) if pick is None else pick)
    last = picks.get(len(shape) - 1)
    k, size = (last[1] if isinstance(last, tuple) else 1), dtype.itemsize
    if k > 1 and dtype.kind in "biufcV" and k * size in (2, 4, 8):
        wide, narrow = np.dtype(f"u{k * size}"), np.dtype(f"u{size}")
        multiplier = np.array(sum(1 << (8 * size * j) for j in range(k)), wide)
        return _Repeat(tuple(grouped[:-1]), tuple(index[:-1]), multiplier, narrow, wide)
    return _Repeat(tuple(grouped), tuple(index))


def _repeat_call(r: _Repeat, x: np.ndarray, y: np.ndarray) -> Callable[[], Any]:
    rows = x.shape[0]
    if r.multiplier is None:
        dst = reshaped(y, (rows, *r.grouped[1:]))
        return functools.partial(np.copyto, dst, x[r.index])
    dst = reshaped(y, (rows, -1)).view(r.wide)
    dst = reshaped(dst, (rows, *r.grouped[1:]))
    return functools.partial(np.multiply, x.view(r.narrow)[r.index], r.multiplier, out=dst)


def _flat_selection(shape, out, taps: dict[int, AxisTaps], first: int):
    """Every axis a selection: one flat index over the axes first .. last resized axis, the
    axes after it gathered as whole rows.  None when the index would be too large."""
    last = max(taps)
    dims = range(first, last + 1)
    if math.prod(out[first : last + 1]) > FLAT_LIMIT:
        return None
    flat = np.zeros((), np.intp)
    for d in dims:
        pick = taps[d].idx[0] if d in taps else np.arange(shape[d], dtype=np.intp)
        flat = flat[..., None] * shape[d] + pick
    return np.ascontiguousarray(flat.reshape(-1)), last - first + 1


class Upsample(Resize):
    """Upsample-7 (scales attribute) and -9 (scales input): Resize-10 with scales >= 1."""

    @property
    def legacy(self) -> bool:
        return True

    def request(self, ctx: InferContext, rank: int):
        kind = "invalid_input"
        if self.node.opset < 9:  # an attribute: a bad one is a bad model
            kind = "invalid_model"
            scales = typed_attr(self, "scales", None, "floats")
            if scales is None:
                raise self.fail("the scales attribute is required")
            if len(scales) != rank:
                raise self.fail(f"scales has {len(scales)} values for rank {rank}", kind)
        else:
            scales = self._float_values(ctx, 1, "scales")
        if any(not (s >= 1 and math.isfinite(s)) for s in scales):
            raise self.fail(f"Upsample scales must be finite and >= 1, got {scales}", kind)
        return list(range(rank)), scales, None, None
