"""LpNormalization, GroupNormalization and MeanVarianceNormalization.

float16 and bfloat16 compute in float32 and round once at the end, like norm.py.  Group-
Normalization is InstanceNormalization over groups of channels: its statistics are the rows of
a (N * groups, channels per group * spatial) view of X, computed by norm.py's row helpers
(so exact mode sums each row in ascending order there too, docs/exact-mode.md).

Exact mode covers LpNormalization and GroupNormalization:

* LpNormalization: per element ``t = |x|`` (p = 1) or ``t = x * x`` (p = 2), in the compute
  type; along the axis ``s = t0; s = s + t1; ...`` in ascending index order; p = 2 then
  ``s = sqrt(s)``; ``s = max(s, smallest positive subnormal)`` (a positive norm is at least
  that, so only a zero norm changes, and an all-zero row divides to zeros); then ``y = x / s``.
  NaN results are canonical.
* GroupNormalization: each row (an image and a group of channels) as InstanceNormalization's
  rows, in the stash type (X converted to it first); then ``y = z * scale`` and
  ``y = y + bias`` per channel (opset 21) or per group (opset 18), in the wider of the stash
  type and X's compute type, rounded once to Y's type.  NaN results are canonical.

MeanVarianceNormalization is not exact: its reductions run over several axes at once.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo

from ._erf import compute_dtype
from ._util import (
    canonical_sum,
    constant,
    needs_nan_rewrite,
    normalize_axis,
    rewrite_nan,
    same_types,
)
from .norm import ProgramOfCalls, RowPlan, exact_finish, normalize_rows, row_plan
from .unary import require_float

# -- LpNormalization ----------------------------------------------------------------------------


#: Axes at most this long are summed with one add per index (``canonical_sum``): numpy's
#: reduction over a short axis pays its inner loop per element (on an axis of 3, about 30x
#: slower than two vectorised adds).
SHORT_AXIS = 16


@dataclasses.dataclass(frozen=True)
class _LpPlan:
    axis: int
    terms: int  # scratch (X's shape, compute type): |x| or x * x
    norm: int  # scratch (X's shape with the axis at 1, compute type)
    tiny: np.ndarray  # 0-d: the smallest positive subnormal of the compute type
    nan: int | None  # exact mode: mask (X's shape) of the canonical-NaN rewrite


class LpNormalization(ProgramOfCalls):
    """y = x / ||x||_p along ``axis`` (p = 1 or 2); a zero norm gives zeros.

    The norm is raised to at least the smallest subnormal, so that an all-zero row divides to
    zeros instead of 0 / 0 = NaN; a positive norm is at least that already and stays as it is.
    """

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        p, self.axis = node.attr("p", 2), node.attr("axis", -1)
        if p not in (1, 2):
            raise self.fail(f"p must be 1 or 2, got {p!r}")
        if not isinstance(self.axis, int):
            raise self.fail(f"axis must be an int, got {self.axis!r}")
        self.p = int(p)

    def infer(self, ctx: InferContext) -> None:
        require_float(self, ctx)
        dtype, x = ctx.dtype(0), ctx.shape(0)
        try:
            axis = normalize_axis(self.axis, len(x))
        except ValueError as exc:
            raise self.fail(str(exc), "invalid_input") from None
        ctx.set_output(0, dtype, x)
        ct = compute_dtype(dtype)
        stat = tuple(1 if i == axis else d for i, d in enumerate(x))
        terms, norm = ctx.add_scratch(ct, x), ctx.add_scratch(ct, stat)
        tiny = constant(ct, np.finfo(ct).smallest_subnormal)
        nan = ctx.prepared if needs_nan_rewrite(ctx, dtype, x) else None
        ctx.prepared = _LpPlan(axis, terms, norm, tiny, nan)

    def calls(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> list[Callable[[], Any]]:
        p: _LpPlan = ctx.prepared
        x, y = inputs[0], outputs[0]
        terms, norm = ctx.scratch[p.terms], ctx.scratch[p.norm]
        ct = terms.dtype
        if self.p == 1:
            calls = [functools.partial(np.absolute, x, out=terms, dtype=ct, casting="unsafe")]
        else:
            calls = [functools.partial(np.multiply, x, x, out=terms, dtype=ct, casting="unsafe")]
        if ctx.exact or x.shape[p.axis] <= SHORT_AXIS:
            calls.append(functools.partial(canonical_sum, terms, p.axis, norm))
        else:
            calls.append(functools.partial(np.add.reduce, terms, p.axis, keepdims=True, out=norm))
        if self.p == 2:
            calls.append(functools.partial(np.sqrt, norm, out=norm))
        calls += [
            functools.partial(np.maximum, norm, p.tiny, out=norm),  # 0 -> tiny: 0 / tiny = 0
            functools.partial(np.divide, x, norm, out=y, dtype=ct, casting="unsafe"),
        ]
        if p.nan is not None:
            calls.append(functools.partial(rewrite_nan, y, ctx.scratch[p.nan]))
        return calls


# -- GroupNormalization -------------------------------------------------------------------------

#: stash_type values (ONNX element types) and the type of the first stage.
_STASH = {1: np.dtype(np.float32), 11: np.dtype(np.float64)}


@dataclasses.dataclass(frozen=True)
class _GroupPlan:
    rows: RowPlan  # the statistics of the (N * groups, C / groups * spatial) rows
    params: tuple[int, ...]  # the shape scale and bias are viewed in: (C, 1) or (G, 1)
    view: tuple[int, ...]  # the shape Y is viewed in against them: (N, C, S) or (N, G, C/G*S)
    cast: int | None  # scratch: X in the stash type when that is narrower than X's
    second: np.dtype  # X's compute type (z * scale + bias runs in the wider of it and z's)


class GroupNormalization(ProgramOfCalls):
    """y = scale * (x - mean) / sqrt(var + epsilon) + bias, statistics per image and group.

    Opset 18 has one scale and bias per group; opset 21 one per channel, and ``stash_type``
    (1: float32, the default; 11: float64) is the type of the normalization stage.  Opset 18
    normalizes in X's compute type (float32 for float16 and bfloat16).
    """

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        if len(node.inputs) != 3 or not all(node.inputs):
            raise self.fail(f"takes X, scale and bias, got {list(node.inputs)}")
        groups = node.attr("num_groups")
        if not isinstance(groups, int) or groups < 1:
            raise self.fail(f"num_groups must be a positive integer, got {groups}")
        self.groups = groups
        self.eps = float(node.attr("epsilon", 1e-5))
        self.per_channel = node.opset >= 21
        stash = node.attr("stash_type", 1) if self.per_channel else None
        if stash is not None and stash not in _STASH:
            raise self.fail(f"stash_type must be 1 (float) or 11 (double), got {stash}")
        self.stash = None if stash is None else _STASH[stash]

    def infer(self, ctx: InferContext) -> None:
        require_float(self, ctx)
        same_types(self, ctx, 3)
        dtype, x = ctx.dtype(0), ctx.shape(0)
        if len(x) < 2:
            raise self.fail(f"X must have shape (N, C, ...), got {list(x)}", "invalid_input")
        n, c, g = x[0], x[1], self.groups
        if c % g:
            message = f"{c} channels cannot be split into {g} groups"
            raise self.fail(message, "invalid_input")
        count = c if self.per_channel else g
        for i in (1, 2):
            if tuple(ctx.shape(i)) != (count,):
                message = f"input {i} has shape {list(ctx.shape(i))}, expected [{count}]"
                raise self.fail(message, "invalid_input")
        ctx.set_output(0, dtype, x)
        second = compute_dtype(dtype)
        stash = self.stash or second
        cast = None
        if stash.itemsize < dtype.itemsize:  # float64 X, float32 stash: X converted first
            cast = ctx.add_scratch(stash, x)
        spatial = math.prod(x[2:])
        rows = row_plan(ctx, n * g, c // g * spatial, stash, self.eps)
        if self.per_channel:
            params, view = (c, 1), (n, c, spatial)
        else:
            params, view = (g, 1), (n, g, c // g * spatial)
        ctx.prepared = _GroupPlan(rows, params, view, cast, second)

    def calls(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> list[Callable[[], Any]]:
        p: _GroupPlan = ctx.prepared
        x, scale, bias = inputs
        y = outputs[0]
        calls = []
        if p.cast is not None:
            xs = ctx.scratch[p.cast]
            calls.append(functools.partial(np.copyto, xs, x, "unsafe"))
            x = xs
        norm_calls, z = normalize_rows(ctx, p.rows, x, y)
        calls += norm_calls
        scale, bias = scale.reshape(p.params), bias.reshape(p.params)
        y_v, z_v = y.reshape(p.view), z.reshape(p.view)
        if z.dtype.itemsize >= p.second.itemsize:  # in z's type, rounded once into Y
            calls.append(functools.partial(np.multiply, z_v, scale, out=z_v, casting="unsafe"))
            calls.append(functools.partial(np.add, z_v, bias, out=y_v, casting="unsafe"))
        else:  # float64 X, float32 stash: z widened (exactly) into Y first
            calls.append(functools.partial(np.copyto, y_v, z_v, "unsafe"))
            calls.append(functools.partial(np.multiply, y_v, scale, out=y_v))
            calls.append(functools.partial(np.add, y_v, bias, out=y_v))
        return calls + exact_finish(ctx, p.rows, y)


# -- MeanVarianceNormalization ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _MvnPlan:
    axes: tuple[int, ...]
    mean: int  # scratch (X's shape with the axes at 1, compute type)
    std: int
    centred: int | None  # scratch (X's shape, compute type) when Y's type is narrower
    squares: int  # scratch (X's shape, compute type)
    count: np.ndarray  # 0-d: elements per statistic
    eps: np.ndarray  # 0-d: 1e-9, added to the standard deviation


class MeanVarianceNormalization(ProgramOfCalls):
    """(x - mean) / (sqrt(mean((x - mean)^2)) + 1e-9) over ``axes`` (default [0, 2, 3]).

    The variance is the mean of the centred squares (the spec's function writes
    E[x^2] - E[x]^2, which cancels to a negative number on constant data); the 1e-9 is added
    to the standard deviation, as there.
    """

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        axes = node.attr("axes", [0, 2, 3])
        if not isinstance(axes, list) or not all(isinstance(a, int) for a in axes):
            raise self.fail(f"axes must be a list of ints, got {axes!r}")
        self.axes = tuple(axes)

    def infer(self, ctx: InferContext) -> None:
        require_float(self, ctx)
        dtype, x = ctx.dtype(0), ctx.shape(0)
        try:
            axes = tuple(sorted(normalize_axis(a, len(x), "axes") for a in self.axes))
        except ValueError as exc:
            raise self.fail(str(exc), "invalid_input") from None
        if len(set(axes)) != len(axes):
            raise self.fail(f"axes {list(self.axes)} repeat an axis", "invalid_input")
        ctx.set_output(0, dtype, x)
        ct = compute_dtype(dtype)
        stat = tuple(1 if i in axes else d for i, d in enumerate(x))
        count = math.prod(x[a] for a in axes)
        ctx.prepared = _MvnPlan(
            axes,
            ctx.add_scratch(ct, stat),
            ctx.add_scratch(ct, stat),
            ctx.add_scratch(ct, x) if ct != dtype else None,
            ctx.add_scratch(ct, x),
            constant(ct, count),
            constant(ct, 1e-9),
        )

    def calls(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> list[Callable[[], Any]]:
        p: _MvnPlan = ctx.prepared
        x, y = inputs[0], outputs[0]
        mean, std, sq = ctx.scratch[p.mean], ctx.scratch[p.std], ctx.scratch[p.squares]
        cen = y if p.centred is None else ctx.scratch[p.centred]
        ct = sq.dtype
        return [
            functools.partial(np.add.reduce, x, p.axes, dtype=ct, keepdims=True, out=mean),
            functools.partial(np.divide, mean, p.count, out=mean),
            functools.partial(np.subtract, x, mean, out=cen, dtype=ct, casting="unsafe"),
            functools.partial(np.multiply, cen, cen, out=sq),
            functools.partial(np.add.reduce, sq, p.axes, keepdims=True, out=std),
            functools.partial(np.divide, std, p.count, out=std),
            functools.partial(np.sqrt, std, out=std),
            functools.partial(np.add, std, p.eps, out=std),
            functools.partial(np.divide, cen, std, out=y, casting="unsafe"),
        ]
