"""Sliding-window geometry shared by Conv, ConvTranspose and the pools.

:class:`WindowAttrs` holds what a node's attributes fix (parsed and checked once per node);
:func:`resolve` turns it into a :class:`Window` for concrete input extents.  :class:`Staging`
says where each kernel tap reads: straight from X when no window reaches outside it, else from
a scratch copy with the pad value around X.  Convolutions also split that copy by stride phase,
so every tap is a unit-stride view and the im2col copies move whole contiguous rows.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import KernelContext, OpKernel

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


@dataclasses.dataclass(frozen=True)
class WindowAttrs:
    kernel_shape: tuple[int, ...] | None
    strides: tuple[int, ...] | None
    dilations: tuple[int, ...] | None
    pads: tuple[int, ...] | None
    auto_pad: str
    ceil_mode: bool


def window_attrs(kernel: OpKernel) -> WindowAttrs:
    """Read and check the window attributes of ``kernel.node`` (extents are checked later)."""
    node = kernel.node

    def ints(name: str, least: int) -> tuple[int, ...] | None:
        value = node.attr(name)
        if value is None or len(value) == 0:
            return None
        if any(v < least for v in value):
            raise kernel.fail(f"{name} must be >= {least}, got {list(value)}")
        return tuple(int(v) for v in value)

    auto_pad = node.attr("auto_pad", "NOTSET") or "NOTSET"
    if auto_pad not in AUTO_PADS:
        raise kernel.fail(f"auto_pad must be one of {', '.join(AUTO_PADS)}, got {auto_pad!r}")
    ceil_mode = node.attr("ceil_mode", 0)
    if ceil_mode not in (0, 1):
        raise kernel.fail(f"ceil_mode must be 0 or 1, got {ceil_mode}")
    pads = ints("pads", 0) if auto_pad == "NOTSET" else None  # auto_pad overrides pads
    return WindowAttrs(
        ints("kernel_shape", 1), ints("strides", 1), ints("dilations", 1), pads, auto_pad,
        bool(ceil_mode),
    )  # fmt: skip


#: The most taps a window may have: plans (staging, separable pools, exact sums) hold a Python
#: step or view per tap, so a hostile kernel_shape of 2**29 must be refused, not planned.
#: Real models' windows are far smaller (a 1-D audio pool of 16000 taps is 1/16 of this).
MAX_WINDOW_TAPS = 1 << 18


@dataclasses.dataclass(frozen=True)
class Window:
    """Output position o of axis a reads padded coordinate o * stride + tap * dilation."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    begin: tuple[int, ...]  # pads before each axis
    end: tuple[int, ...]  # pads after each axis (declared or computed; ceil_mode may read past)
    spatial: tuple[int, ...]  # the input's extents
    out: tuple[int, ...]

    @property
    def extent(self) -> tuple[int, ...]:
        """How much of each padded axis the windows read."""
        return tuple(
            (o - 1) * s + (k - 1) * d + 1
            for o, s, k, d in zip(self.out, self.strides, self.kernel, self.dilations)
        )

    @property
    def reads_outside(self) -> bool:
        return any(self.begin) or any(
            e > b + n for e, b, n in zip(self.extent, self.begin, self.spatial)
        )

    def taps(self) -> list[tuple[int, ...]]:
        return list(itertools.product(*(range(k) for k in self.kernel)))


def resolve(
    kernel: OpKernel, attrs: WindowAttrs, spatial: Sequence[int], kernel_shape: Sequence[int]
) -> Window:
    """Pads and output extents for these input extents (ONNX's rules for auto_pad/ceil_mode)."""
    rank = len(spatial)
    k = tuple(kernel_shape)
    strides = attrs.strides or (1,) * rank
    dilations = attrs.dilations or (1,) * rank
    pads = attrs.pads or (0,) * (2 * rank)
    if len(k) != rank or len(strides) != rank or len(dilations) != rank or len(pads) != 2 * rank:
        raise kernel.fail(
            f"kernel_shape {list(k)}, strides {list(strides)}, dilations {list(dilations)} and "
            f"pads {list(pads)} do not fit {rank} spatial axes"
        )
    taps = math.prod(k)
    if taps > MAX_WINDOW_TAPS:
        raise kernel.fail(
            f"kernel_shape {list(k)} makes windows of {taps} taps; graphrt's window kernels "
            f"take at most {MAX_WINDOW_TAPS} (their plans hold a step per tap)"
        )
    eff = [(kk - 1) * d + 1 for kk, d in zip(k, dilations)]
    if attrs.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = [-(-n // s) for n, s in zip(spatial, strides)]
        # never negative (TensorFlow's rule): the spec's formula would crop X when a stride
        # exceeds the window, where onnxruntime and onnx's reference disagree or fail
        total = [max(0, (o - 1) * s + e - n) for o, s, e, n in zip(out, strides, eff, spatial)]
        if attrs.auto_pad == "SAME_UPPER":
            begin = [t // 2 for t in total]
        else:
            begin = [t - t // 2 for t in total]
        end = [t - b for t, b in zip(total, begin)]
    else:
        if attrs.auto_pad == "VALID":
            pads = (0,) * (2 * rank)
        begin, end = list(pads[:rank]), list(pads[rank:])
        out = []
        for n, s, e, b, a in zip(spatial, strides, eff, begin, end):
            span = n + b + a - e
            if span < 0:
                raise kernel.fail(
                    f"the window ({e}) is longer than the padded input ({n + b + a})",
                    "invalid_input",
                )
            o = (-(-span // s) if attrs.ceil_mode else span // s) + 1
            if attrs.ceil_mode and (o - 1) * s >= n + b:
                o -= 1  # the last window must start inside X or its begin padding
            out.append(o)
    return Window(k, strides, dilations, tuple(begin), tuple(end), tuple(spatial), tuple(out))


@dataclasses.dataclass(frozen=True)
class Staging:
    """Where each tap reads, as views of a buffer shaped (N, phases, C, *extents).

    Without a copy the buffer is X itself (one phase).  A split copy holds the padded input's
    stride phases (only those some tap reads), so tap views step by 1; otherwise taps step by
    the strides through one padded copy.
    """

    copy: bool
    step: tuple[int, ...]  # view step per axis
    phases: tuple[tuple[int, ...], ...]  # the phase each buffer plane holds, per axis
    extents: tuple[int, ...]  # buffer extents per axis
    taps: tuple[tuple[int, tuple[int, ...]], ...]  # per tap: (plane, start per axis)
    #: The taps of each plane as a grid: (plane, start, step between taps, kernel slices), per
    #: axis; one strided view reads them all (im2col in one copy per plane).
    groups: tuple[tuple[int, tuple[int, ...], tuple[int, ...], tuple[slice, ...]], ...] = ()

    def shape(self, n: int, c: int) -> tuple[int, ...]:
        return (n, len(self.phases), c, *self.extents)

    def source(self, x: np.ndarray, buf: np.ndarray | None) -> np.ndarray:
        return buf if self.copy else x[:, None]

    def tap_view(self, w: Window, src: np.ndarray, t: int) -> np.ndarray:
        """What tap ``t`` reads at every output position: (N, C, *out)."""
        plane, start = self.taps[t]
        index = tuple(slice(a, a + (o - 1) * s + 1, s) for a, o, s in zip(start, w.out, self.step))
        return src[(slice(None), plane, slice(None), *index)]

    def group_view(self, w: Window, src: np.ndarray, g: int) -> np.ndarray:
        """What the taps of group ``g`` read: (N, C, *taps per axis, *out), a strided view."""
        plane, start, steps, kslices = self.groups[g]
        base = src[(slice(None), plane, slice(None), *(slice(q, None) for q in start))]
        counts = tuple(len(range(k)[sl]) for k, sl in zip(w.kernel, kslices))
        es = base.strides[2:]
        return np.lib.stride_tricks.as_strided(
            base,
            (*base.shape[:2], *counts, *w.out),
            (
                *base.strides[:2],
                *(q * e for q, e in zip(steps, es)),
                *(s * e for s, e in zip(self.step, es)),
            ),
            writeable=False,
        )

    def fill_calls(
        self, w: Window, x: np.ndarray, buf: np.ndarray, value: Any
    ) -> list[Callable[[], Any]]:
        """Copy X into every plane of ``buf`` and set the rest of it to ``value``."""
        calls: list[Callable[[], Any]] = []
        split = self.step != w.strides
        strides = w.strides if split else (1,) * len(w.out)
        for plane, phase in enumerate(self.phases):
            dst = buf[:, plane]
            inner, source = [], []
            for a, (s, ph, b, n, e) in enumerate(
                zip(strides, phase, w.begin, w.spatial, self.extents)
            ):
                lo = min(e, max(0, -(-(b - ph) // s)))
                hi = max(lo, min(e, -(-(b + n - ph) // s)))
                first = lo * s + ph - b
                inner.append(slice(lo, hi))
                source.append(slice(first, first + (hi - lo - 1) * s + 1, s))
                for edge in (slice(0, lo), slice(hi, e)):
                    if edge.stop > edge.start:
                        view = dst[(Ellipsis, edge) + (slice(None),) * (len(self.extents) - a - 1)]
                        calls.append(functools.partial(view.fill, value))
            if all(sl.stop > sl.start for sl in inner):
                calls.append(
                    functools.partial(
                        np.copyto, dst[(Ellipsis, *inner)], x[(Ellipsis, *source)], "unsafe"
                    )
                )
        return calls


def staging(w: Window, split: bool, copy: bool = False) -> Staging:
    """The staging of X for ``w``; ``split`` asks for phase planes when a stride exceeds 1."""
    split = split and any(s > 1 for s in w.strides)
    copy = copy or split or w.reads_outside
    if not split:
        starts = [tuple(t * d for t, d in zip(tap, w.dilations)) for tap in w.taps()]
        zero = (0,) * len(w.out)
        grid = (0, zero, w.dilations, tuple(slice(0, k) for k in w.kernel))
        extents = w.extent if copy else w.spatial
        return Staging(copy, w.strides, (zero,), extents, tuple((0, s) for s in starts), (grid,))
    where = [
        tuple(divmod(t * d, s) for t, d, s in zip(tap, w.dilations, w.strides)) for tap in w.taps()
    ]
    phases = sorted({tuple(r for _, r in qr) for qr in where})
    plane = {ph: i for i, ph in enumerate(phases)}
    taps = tuple((plane[tuple(r for _, r in qr)], tuple(q for q, _ in qr)) for qr in where)
    extents = tuple(-(-e // s) for e, s in zip(w.extent, w.strides))
    groups = []
    for i, phase in enumerate(phases):
        axes = []  # per axis: first tap, taps between grid points, q of the first, q step
        for k, d, s, ph in zip(w.kernel, w.dilations, w.strides, phase):
            first = next(t for t in range(k) if t * d % s == ph)
            every = s // math.gcd(d, s)
            axes.append((slice(first, k, every), first * d // s, every * d // s))
        groups.append(
            (i, tuple(a[1] for a in axes), tuple(a[2] for a in axes), tuple(a[0] for a in axes))
        )
    return Staging(True, (1,) * len(w.out), tuple(phases), extents, taps, tuple(groups))


def flat_offsets(st: Staging, w: Window) -> tuple[list[int], int, tuple[int, ...]]:
    """For unit-step staging: each tap's offset into a flattened plane, the run length L that
    covers every output position, and the "wide" output shape (out[0], *extents[1:]).

    Output position o sits at flat index sum(o[a] * row[a]) of a wide row whose length is
    prod(wide); the positions past out[a] on the inner axes are garbage and are dropped.
    """
    rows = [math.prod(st.extents[a + 1 :]) for a in range(len(st.extents))]
    offsets = [sum(q * r for q, r in zip(start, rows)) for _, start in st.taps]
    length = sum((o - 1) * r for o, r in zip(w.out, rows)) + 1
    return offsets, length, (w.out[0], *st.extents[1:])


class Programmed(OpKernel):
    """A kernel whose run is a list of numpy calls on views of its arrays.

    ``bind`` makes the views once for the plan's fixed arrays; ``run`` (evaluate_node, dynamic
    steps) makes them every time.  A view of a non-contiguous array could be a copy, so such
    inputs are made contiguous first and bind then falls back to ``run``.
    """

    def program(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        raise NotImplementedError

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        inputs = [np.ascontiguousarray(a) if isinstance(a, np.ndarray) else a for a in inputs]
        self.program(ctx, inputs, outputs)()

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        arrays = [a for a in (*inputs, *outputs) if isinstance(a, np.ndarray)]
        if all(a.flags.c_contiguous for a in arrays):
            return self.program(ctx, inputs, outputs)
        return functools.partial(self.run, ctx, inputs, outputs)


def call_all(calls: Sequence[Callable[[], Any]]) -> None:
    for call in calls:
        call()


def call_one(calls: Sequence[Callable[[], Any]], i: int) -> None:
    calls[i]()
