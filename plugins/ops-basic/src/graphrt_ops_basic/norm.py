"""BatchNormalization, InstanceNormalization, LayerNormalization and LRN.

BatchNormalization in inference is y = x * a + b with per-channel a = scale / sqrt(var + eps)
and b = bias - mean * a: the prepare step folds them (in float64, rounded once) when the
parameters are constants, so a run is one multiply and one add.  The statistics of Instance-
and LayerNormalization are row reductions over a (rows, elements) view: a pairwise sum for the
mean and a dot product of the centred rows with themselves for the variance, so no temporary
larger than a row of statistics is needed beyond the output itself.  float16 and bfloat16
compute in float32.

Exact mode covers BatchNormalization in inference: a and b are always folded in float64 as
above (at plan time for constants, else every run in float64 scratch: the same operations),
rounded once to the compute type, then y = x * a and y = y + b, two rounded operations; NaN
results are canonical.  Training statistics (mean/var reductions) are not exact.

Instance- and LayerNormalization in exact mode sum each row in ascending element order
(``acc = t0; acc += t1; ...``, vectorised across rows) for the mean and for the variance (the
squares of the centred row, each rounded), instead of the pairwise sum and the dot product;
every other step is already one rounded operation per element (docs/exact-mode.md).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, name_of

from ._geometry import Programmed, call_all
from ._util import _CANONICAL_NAN, canonical_sum, constant, is_float, normalize_axis, rewrite_nan


def _compute_type(dtype: np.dtype) -> np.dtype:
    return np.dtype(dtype) if np.dtype(dtype) in (np.float32, np.float64) else np.dtype("f4")


class ProgramOfCalls(Programmed):
    """Kernels whose program is one list of calls (:meth:`calls`).

    Y may take X's storage: every element of X is read before (or as) Y's is written.
    """

    in_place_input = 0

    def program(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        return functools.partial(call_all, self.calls(ctx, inputs, outputs))

    def calls(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> list[Callable[[], Any]]:
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class _BatchPlan:
    shape: tuple[int, ...]  # how the per-channel parameters broadcast over X
    a: np.ndarray | int  # folded multiplier (constant parameters) or its scratch index
    b: np.ndarray | int
    compute: np.dtype
    wide: tuple[int, int] | None = None  # exact mode, run-time parameters: float64 a and b
    nan: int | None = None  # exact mode: scratch mask (X's shape) of the canonical-NaN rewrite


class BatchNormalization(ProgramOfCalls):
    """Inference, or training statistics when the node asks for them.

    Training is ``training_mode=1`` from opset 14; before, a node with more outputs than Y is a
    training node (before opset 7 only with ``is_test=0``).  Its outputs are the running mean
    and variance (momentum-weighted with the batch's), then before opset 14 the batch mean and
    1 / sqrt(batch variance + eps) as saved statistics, as onnxruntime computes them.  The
    training path allocates its per-channel statistics: it is not a steady-state path.
    Inference is exact (module docstring); training fails in exact mode.
    """

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.eps = float(node.attr("epsilon", 1e-5))
        self.momentum = float(node.attr("momentum", 0.9))
        extra = any(name for name in node.outputs[1:])
        if node.opset >= 14:
            self.training = bool(node.attr("training_mode", 0))
        elif node.opset >= 7:
            self.training = extra
        else:
            self.training = extra and not node.attr("is_test", 0)
        self.spatial = node.attr("spatial", 1) if node.opset < 9 else 1

    def infer(self, ctx: InferContext) -> None:
        x, dtype = ctx.shape(0), ctx.dtype(0)
        if len(x) < 2 or not is_float(dtype):
            raise self.fail(f"X must be a float tensor (N, C, ...), got {list(x)}", "invalid_input")
        if self.spatial:
            shape = (x[1],) + (1,) * (len(x) - 2)
        else:
            shape = tuple(x[1:])
        for i in range(1, 5):
            if math.prod(ctx.shape(i)) != math.prod(shape):
                raise self.fail(
                    f"input {i} has shape {list(ctx.shape(i))}, expected {math.prod(shape)} values",
                    "invalid_input",
                )
        ctx.set_output(0, dtype, x)
        ct = _compute_type(dtype)
        if self.training and ctx.exact:
            raise self.fail(
                "training statistics are not available in exact mode", "exact_mode_unavailable"
            )
        if self.training:
            for i in range(1, ctx.num_outputs):
                ctx.set_output(i, ctx.dtype(3 if i in (1, 3) else 4), ctx.shape(3))
            ctx.prepared = _BatchPlan(shape, 0, 0, ct)
            return
        values = [ctx.known_value(i) for i in range(1, 5)]
        if all(v is not None for v in values):
            a, b = _fold(*values, self.eps)
            ctx.prepared = _BatchPlan(
                shape, a.astype(ct).reshape(shape), b.astype(ct).reshape(shape), ct
            )
        else:
            ctx.prepared = _BatchPlan(
                shape, ctx.add_scratch(ct, shape), ctx.add_scratch(ct, shape), ct
            )
        if ctx.exact:
            wide = None
            if isinstance(ctx.prepared.a, int):
                wide = (ctx.add_scratch(np.float64, shape), ctx.add_scratch(np.float64, shape))
            nan = ctx.add_scratch(np.bool_, x) if dtype in _CANONICAL_NAN else None
            ctx.prepared = dataclasses.replace(ctx.prepared, wide=wide, nan=nan)

    def calls(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> list[Callable[[], Any]]:
        p: _BatchPlan = ctx.prepared
        x, y = inputs[0], outputs[0]
        if self.training:
            return [functools.partial(self._train, p, inputs, outputs)]
        calls = []
        a, b = p.a, p.b
        if isinstance(a, int):
            a, b = ctx.scratch[a], ctx.scratch[b]
            scale, bias, mean, var = (v.reshape(p.shape) for v in inputs[1:5])
            eps = constant(p.compute, self.eps)
        if p.wide is not None:  # exact mode: _fold's float64 operations, rounded once
            a64, b64 = (ctx.scratch[i] for i in p.wide)
            calls += [
                functools.partial(np.add, var, constant(np.float64, self.eps), out=a64),
                functools.partial(np.sqrt, a64, out=a64),
                functools.partial(np.divide, scale, a64, out=a64),
                functools.partial(np.multiply, mean, a64, out=b64),
                functools.partial(np.subtract, bias, b64, out=b64),
                functools.partial(np.copyto, a, a64, "unsafe"),
                functools.partial(np.copyto, b, b64, "unsafe"),
            ]
        elif isinstance(p.a, int):
            calls += [
                functools.partial(np.add, var, eps, out=a, casting="unsafe"),
                functools.partial(np.sqrt, a, out=a),
                functools.partial(np.divide, scale, a, out=a, casting="unsafe"),
                functools.partial(np.multiply, mean, a, out=b, casting="unsafe"),
                functools.partial(np.subtract, bias, b, out=b, casting="unsafe"),
            ]
        calls.append(functools.partial(np.multiply, x, a, out=y, casting="unsafe"))
        calls.append(functools.partial(np.add, y, b, out=y, casting="unsafe"))
        if p.nan is not None:
            calls.append(functools.partial(rewrite_nan, y, ctx.scratch[p.nan]))
        return calls

    def _train(self, p: _BatchPlan, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x = inputs[0]
        axes = (0,) + tuple(range(2, x.ndim)) if self.spatial else (0,)
        mean = x.mean(axis=axes, dtype=np.float64)
        var = x.var(axis=axes, dtype=np.float64)
        scale, bias = inputs[1], inputs[2]
        a, b = _fold(scale, bias, mean, var, self.eps)
        np.multiply(x, a.astype(p.compute).reshape(p.shape), out=outputs[0], casting="unsafe")
        np.add(outputs[0], b.astype(p.compute).reshape(p.shape), out=outputs[0], casting="unsafe")
        keep = 1 - self.momentum
        stats = [
            np.asarray(inputs[3], np.float64).reshape(-1) * self.momentum + mean.reshape(-1) * keep,
            np.asarray(inputs[4], np.float64).reshape(-1) * self.momentum + var.reshape(-1) * keep,
            mean.reshape(-1),
            1 / np.sqrt(var.reshape(-1) + self.eps),
        ]
        for out, value in zip(outputs[1:], stats):
            if out is not None:
                np.copyto(out, value.reshape(out.shape), casting="unsafe")


def _fold(scale, bias, mean, var, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """a = scale / sqrt(var + eps) and b = bias - mean * a, in float64."""
    a = np.asarray(scale, np.float64) / np.sqrt(np.asarray(var, np.float64) + eps)
    return a, np.asarray(bias, np.float64) - np.asarray(mean, np.float64) * a


@dataclasses.dataclass(frozen=True)
class RowPlan:
    """Statistics over rows of a (rows, elements) view of X."""

    rows: int
    size: int
    mean: int  # scratch (rows,): the mean
    inv: int  # scratch (rows,): 1 / sqrt(variance + eps)
    centred: int | None  # scratch (rows, size) in the compute type when Y's type differs
    count: np.ndarray  # 0-d: elements per row
    eps: np.ndarray  # 0-d
    square: int | None = None  # exact mode: scratch (rows,) for one column's squares
    nan: int | None = None  # exact mode: scratch mask (X's shape) of the canonical-NaN rewrite
    nan_rows: int | None = None  # exact mode: the same for the (rows,) statistics outputs


_VECDOT = getattr(np, "vecdot", None)  # numpy >= 2.0


def _row_dots(cen: np.ndarray, out: np.ndarray) -> Callable[[], Any]:
    """A call writing each row's dot product with itself into out: numpy 2's vecdot, or on
    numpy 1 (no vecdot) matmul of the rows as stacked (1, n) @ (n, 1) products, which takes
    the same per-row dot loop (bit for bit the same sums) and allocates nothing either."""
    if _VECDOT is not None:
        return functools.partial(_VECDOT, cen, cen, out=out)
    return functools.partial(np.matmul, cen[:, None, :], cen[:, :, None], out=out[:, None, None])


def row_plan(ctx: InferContext, rows: int, size: int, ct: np.dtype, eps: float) -> RowPlan:
    centred = ctx.add_scratch(ct, (rows, size)) if ct != ctx.dtype(0) else None
    square = nan = nan_rows = None
    if ctx.exact:
        square = ctx.add_scratch(ct, (rows,))
        nan_rows = ctx.add_scratch(np.bool_, (rows,))
        if ctx.dtype(0) in _CANONICAL_NAN:
            nan = ctx.add_scratch(np.bool_, ctx.shape(0))
    return RowPlan(
        rows, size, ctx.add_scratch(ct, (rows,)), ctx.add_scratch(ct, (rows,)), centred,
        constant(ct, size), constant(ct, eps), square, nan, nan_rows,
    )  # fmt: skip


def _squares_in_order(cen: np.ndarray, acc: np.ndarray, square: np.ndarray) -> None:
    """acc = sum over k of cen[:, k] * cen[:, k], each square rounded, k ascending."""
    if cen.shape[1] == 0:
        acc.fill(0)
        return
    np.multiply(cen[:, 0], cen[:, 0], out=acc)
    for k in range(1, cen.shape[1]):
        np.multiply(cen[:, k], cen[:, k], out=square)
        np.add(acc, square, out=acc)


def exact_finish(ctx: KernelContext, p: RowPlan, y: np.ndarray) -> list[Callable[[], Any]]:
    """Exact mode: the canonical-NaN rewrite of Y."""
    if p.nan is None:
        return []
    return [functools.partial(rewrite_nan, y, ctx.scratch[p.nan])]


def normalize_rows(
    ctx: KernelContext, p: RowPlan, x: np.ndarray, y: np.ndarray
) -> tuple[list[Callable[[], Any]], np.ndarray]:
    """Calls leaving (x - mean) / sqrt(var + eps) per row in the returned (rows, size) array."""
    x2 = x.reshape(p.rows, p.size)
    mean, inv = ctx.scratch[p.mean], ctx.scratch[p.inv]
    cen = y.reshape(p.rows, p.size) if p.centred is None else ctx.scratch[p.centred]
    if p.square is None:
        total = functools.partial(np.add.reduce, x2, axis=1, out=mean)
        squares = _row_dots(cen, inv)
    else:  # exact mode: ascending order, one rounded add at a time
        total = functools.partial(canonical_sum, x2, 1, mean[:, None])
        squares = functools.partial(_squares_in_order, cen, inv, ctx.scratch[p.square])
    calls = [
        total,
        functools.partial(np.divide, mean, p.count, out=mean),
        functools.partial(np.subtract, x2, mean[:, None], out=cen, casting="unsafe"),
        squares,
        functools.partial(np.divide, inv, p.count, out=inv),
        functools.partial(np.add, inv, p.eps, out=inv),
        functools.partial(np.sqrt, inv, out=inv),
        functools.partial(np.divide, constant(inv.dtype, 1), inv, out=inv),
        functools.partial(np.multiply, cen, inv[:, None], out=cen),
    ]
    return calls, cen


class InstanceNormalization(ProgramOfCalls):
    """y = scale[c] * (x - mean) / sqrt(var + eps) + B[c], statistics per image and channel."""

    supports_exact = True

    def infer(self, ctx: InferContext) -> None:
        x, dtype = ctx.shape(0), ctx.dtype(0)
        if len(x) < 3 or not is_float(dtype):
            raise self.fail(
                f"X must be a float tensor (N, C, spatial...), got {name_of(dtype)} {list(x)}",
                "invalid_input",
            )
        for i in (1, 2):
            if ctx.shape(i) != (x[1],):
                raise self.fail(f"input {i} must have shape [{x[1]}]", "invalid_input")
        ctx.set_output(0, dtype, x)
        eps = self.node.attr("epsilon", 1e-5)
        ctx.prepared = row_plan(ctx, x[0] * x[1], math.prod(x[2:]), _compute_type(dtype), eps)

    def calls(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> list[Callable[[], Any]]:
        p: RowPlan = ctx.prepared
        x, scale, bias = inputs
        y = outputs[0]
        calls, cen = normalize_rows(ctx, p, x, y)
        n, c = x.shape[:2]
        rows = math.prod(x.shape[2:])  # explicit: -1 is ambiguous for a batch of 0
        cen3, y3 = cen.reshape(n, c, rows), y.reshape(n, c, rows)
        calls.append(functools.partial(np.multiply, cen3, scale[:, None], out=cen3))
        calls.append(functools.partial(np.add, cen3, bias[:, None], out=y3, casting="unsafe"))
        return calls + exact_finish(ctx, p, y)


class LayerNormalization(ProgramOfCalls):
    """Normalises over the axes from ``axis`` on; Mean and InvStdDev are optional outputs in
    the stash type (float32 unless ``stash_type`` says otherwise)."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.stash = np.dtype(np.float32) if node.attr("stash_type", 1) == 1 else None

    def infer(self, ctx: InferContext) -> None:
        x, dtype = ctx.shape(0), ctx.dtype(0)
        if not is_float(dtype):
            raise self.fail(f"X must be a float tensor, got {dtype}", "invalid_input")
        try:
            axis = normalize_axis(self.node.attr("axis", -1), len(x))
        except ValueError as exc:
            raise self.fail(str(exc)) from None
        norm = tuple(x[axis:])
        for i in (1, 2):
            if ctx.has_input(i) and len(ctx.shape(i)) > len(norm):
                raise self.fail(f"input {i} does not broadcast to {list(norm)}", "invalid_input")
        ctx.set_output(0, dtype, x)
        stash = self.stash or dtype
        stat = tuple(x[:axis]) + (1,) * len(norm)
        ctx.set_output(1, stash, stat)
        ctx.set_output(2, stash, stat)
        ct = np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)
        eps = self.node.attr("epsilon", 1e-5)
        ctx.prepared = (row_plan(ctx, math.prod(x[:axis]), math.prod(norm), ct, eps), norm)

    def calls(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> list[Callable[[], Any]]:
        p, norm = ctx.prepared
        x, scale, y = inputs[0], inputs[1], outputs[0]
        bias = inputs[2] if len(inputs) > 2 else None
        calls, cen = normalize_rows(ctx, p, x, y)
        cen_n, y_n = cen.reshape(p.rows, *norm), y.reshape(p.rows, *norm)
        if bias is None:
            calls.append(functools.partial(np.multiply, cen_n, scale, out=y_n, casting="unsafe"))
        else:
            calls.append(functools.partial(np.multiply, cen_n, scale, out=cen_n, casting="unsafe"))
            calls.append(functools.partial(np.add, cen_n, bias, out=y_n, casting="unsafe"))
        for out, k in zip(outputs[1:], (p.mean, p.inv)):
            if out is not None:
                stat = out.reshape(p.rows)
                calls.append(functools.partial(np.copyto, stat, ctx.scratch[k], "unsafe"))
                if p.nan_rows is not None and out.dtype in _CANONICAL_NAN:
                    mask = ctx.scratch[p.nan_rows]
                    calls.append(functools.partial(rewrite_nan, stat, mask))
        return calls + exact_finish(ctx, p, y)


class LRN(ProgramOfCalls):
    """y = x / (bias + alpha / size * sum of x^2 over nearby channels) ** beta.

    The window over channels c spans c - floor((size - 1) / 2) to c + ceil((size - 1) / 2),
    clipped to the tensor: one shifted add per neighbour that exists, so the cost is bounded by
    the channel count, not by size.
    """

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.size = node.attr("size")
        if not self.size or self.size < 1:
            raise self.fail(f"size must be a positive integer, got {self.size}")

    def infer(self, ctx: InferContext) -> None:
        x, dtype = ctx.shape(0), ctx.dtype(0)
        if len(x) < 3 or not is_float(dtype):
            raise self.fail(
                f"X must be a float tensor (N, C, spatial...), got {name_of(dtype)} {list(x)}",
                "invalid_input",
            )
        ctx.set_output(0, dtype, x)
        ct = _compute_type(dtype)
        node = self.node
        consts = (
            constant(ct, node.attr("alpha", 1e-4) / self.size),
            constant(ct, node.attr("bias", 1.0)),
            constant(ct, node.attr("beta", 0.75)),
        )
        ctx.prepared = (ctx.add_scratch(ct, x), ctx.add_scratch(ct, x), consts)

    def calls(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> list[Callable[[], Any]]:
        sq_i, acc_i, (alpha, bias, beta) = ctx.prepared
        x, y = inputs[0], outputs[0]
        sq, acc = ctx.scratch[sq_i], ctx.scratch[acc_i]
        c = x.shape[1]
        before = (self.size - 1) // 2
        after = self.size - 1 - before
        calls = [
            functools.partial(np.copyto, sq, x, "unsafe"),
            functools.partial(np.square, sq, out=sq),
            functools.partial(np.copyto, acc, sq),
        ]
        # An offset of C or more channels shifts nothing into the tensor: clamping the window
        # to [-(C-1), C-1] bounds the calls by C however large size is (2**63-1 in a hostile
        # model), and the adds left run in the same order as before.
        for off in range(max(-before, 1 - c), min(after, c - 1) + 1):
            if off == 0:
                continue
            dst = acc[:, : c - off] if off > 0 else acc[:, -off:]
            src = sq[:, off:] if off > 0 else sq[:, : c + off]
            calls.append(functools.partial(np.add, dst, src, out=dst))
        calls += [
            functools.partial(np.multiply, acc, alpha, out=acc),
            functools.partial(np.add, acc, bias, out=acc),
            functools.partial(np.power, acc, beta, out=acc),
            functools.partial(np.divide, x, acc, out=y, casting="unsafe"),
        ]
        return calls
