"""Sliding-window geometry shared by Conv and the pools: pads, output sizes, strided views."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from graphrt.kernel import NodeInfo, OpKernel


@dataclasses.dataclass(frozen=True)
class Window:
    """Where each output position reads: for every spatial axis, begin pad, end pad, stride..."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads_begin: tuple[int, ...]
    pads_end: tuple[int, ...]  # may exceed the declared pads with ceil_mode
    out: tuple[int, ...]
    declared_end: tuple[int, ...] = ()  # the end pads the node declared (without ceil room)

    @property
    def padded(self) -> bool:
        return any(self.pads_begin) or any(self.pads_end)


def window(
    kernel: OpKernel,
    node: NodeInfo,
    spatial: Sequence[int],
    kernel_shape: Sequence[int],
    ceil_mode: bool = False,
) -> Window:
    """Resolve auto_pad, pads, strides, dilations and ceil_mode for these input extents."""
    rank = len(spatial)
    strides = tuple(node.attr("strides") or [1] * rank)
    dilations = tuple(node.attr("dilations") or [1] * rank)
    if len(strides) != rank or len(dilations) != rank or len(kernel_shape) != rank:
        raise kernel.fail(
            f"kernel {list(kernel_shape)}, strides {list(strides)} and dilations "
            f"{list(dilations)} must each have {rank} entries"
        )
    if min(strides) < 1 or min(dilations) < 1 or min(kernel_shape) < 1:
        raise kernel.fail("kernel sizes, strides and dilations must be positive")
    auto = node.attr("auto_pad", "NOTSET")
    eff = [(k - 1) * d + 1 for k, d in zip(kernel_shape, dilations)]
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = [math.ceil(n / s) for n, s in zip(spatial, strides)]
        total = [max((o - 1) * s + e - n, 0) for o, s, e, n in zip(out, strides, eff, spatial)]
        small = [t // 2 for t in total]
        big = [t - t // 2 for t in total]
        begin, end = (small, big) if auto == "SAME_UPPER" else (big, small)
        return Window(
            tuple(kernel_shape),
            strides,
            dilations,
            tuple(begin),
            tuple(end),
            tuple(out),
            tuple(end),
        )
    if auto == "VALID":
        begin = end = [0] * rank
    elif auto == "NOTSET":
        pads = list(node.attr("pads") or [0] * (2 * rank))
        if len(pads) != 2 * rank:
            raise kernel.fail(f"pads must have {2 * rank} entries, got {pads}")
        begin, end = pads[:rank], pads[rank:]
    else:
        raise kernel.fail(f"unknown auto_pad {auto!r}")
    out = []
    declared = tuple(end)
    end = list(end)
    for i, (n, s, e) in enumerate(zip(spatial, strides, eff)):
        span = n + begin[i] + end[i] - e
        if span < 0:
            raise kernel.fail(
                f"the window ({e}) is larger than the padded input ({n + begin[i] + end[i]}) on "
                f"spatial axis {i}",
                "invalid_input",
            )
        o = (math.ceil(span / s) if ceil_mode else span // s) + 1
        if ceil_mode and (o - 1) * s >= n + begin[i]:
            o -= 1  # the last window must start inside the input or its begin padding
        out.append(o)
        end[i] = max(end[i], (o - 1) * s + e - n - begin[i])  # room for the last window
    return Window(
        tuple(kernel_shape), strides, dilations, tuple(begin), tuple(end), tuple(out), declared
    )


def padded_shape(shape: Sequence[int], w: Window) -> tuple[int, ...]:
    lead = tuple(shape[: -len(w.kernel)])
    spatial = shape[-len(w.kernel) :]
    return lead + tuple(n + b + e for n, b, e in zip(spatial, w.pads_begin, w.pads_end))


def interior(w: Window, spatial: Sequence[int]) -> tuple[slice, ...]:
    """The slice of a padded buffer that holds the input itself."""
    return (Ellipsis,) + tuple(slice(b, b + n) for b, n in zip(w.pads_begin, spatial))


def tap_view(padded: np.ndarray, w: Window, tap: Sequence[int]) -> np.ndarray:
    """The input elements kernel tap ``tap`` sees at every output position (a strided view)."""
    index = [Ellipsis]
    for t, s, d, o in zip(tap, w.strides, w.dilations, w.out):
        start = t * d
        index.append(slice(start, start + (o - 1) * s + 1, s))
    return padded[tuple(index)]


def patches(padded: np.ndarray, w: Window) -> np.ndarray:
    """A view (lead..., *kernel, *out) of every window of ``padded`` without copying."""
    k = len(w.kernel)
    lead_shape = padded.shape[:-k]
    lead_strides = padded.strides[:-k]
    sp_strides = padded.strides[-k:]
    shape = lead_shape + w.kernel + w.out
    strides = (
        lead_strides
        + tuple(st * d for st, d in zip(sp_strides, w.dilations))
        + tuple(st * s for st, s in zip(sp_strides, w.strides))
    )
    return np.lib.stride_tricks.as_strided(padded, shape, strides, writeable=False)


def taps(w: Window):
    return np.ndindex(*w.kernel)
