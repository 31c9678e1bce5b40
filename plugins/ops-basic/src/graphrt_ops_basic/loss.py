"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (opsets 12, 13, 22: one meaning).

Both pick, for every sample ``(n, d1..dk)``, the input at class ``c = target[n, d1..dk]``:
``loss = -input[n, c, d1..dk] * weight[c]`` (weight 1 without the ``weight`` input), and 0 for
targets equal to ``ignore_index``.  ``reduction`` none keeps that tensor; sum adds it up; mean
divides the sum by the sum of the weights of the samples not ignored (their count without
weights), so a batch with every target ignored gives 0 / 0 = NaN, as in PyTorch.
SoftmaxCrossEntropyLoss applies a LogSoftmax over the class axis first (its optional second
output) and then the same selection.

The input is viewed as ``[N, C, D]`` (D the product of d1..dk) and the targets as ``[N, D]``;
each sample's flat offset ``n*C*D + c*D + d`` comes from a per-plan table ``n*C*D + d`` plus
``c*D``, so the selection is one ``np.take``.  Targets outside ``[0, C)`` that are not
``ignore_index`` are ``invalid_input``.  float16 and bfloat16 compute in float32 and round once.

Exact mode (NegativeLogLikelihoodLoss): a selection, one multiply and one negation per sample,
sums in ascending flat order (``np.add.accumulate``: acc = t0; acc = acc + t1; ...) and one
division, NaN rewritten to the canonical NaN.  SoftmaxCrossEntropyLoss needs exp and log: not
exact.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel, name_of

from ._erf import compute_dtype
from ._util import _CANONICAL_NAN, is_float, rewrite_nan, zero_of
from .unary import require_float

REDUCTIONS = ("none", "sum", "mean")


@dataclasses.dataclass(frozen=True)
class _Plan:
    n: int
    c: int
    d: int
    ct: np.dtype  # compute type
    base: np.ndarray  # intp [N, D]: n*C*D + d
    stride: np.ndarray  # 0-d intp: D
    target: int  # scratch intp [N, D]: the class, then the flat offset
    picked: int | None  # scratch [N, D] of the input type (when it is not ct)
    values: int  # scratch ct [N, D]: the loss per sample (or output 0 itself)
    weights: int | None  # scratch ct [N, D]: weight per sample
    classes: int | None  # scratch ct [C]: the weight input in ct
    mask: int | None  # scratch bool [N, D]: target == ignore_index
    bounds: tuple[int, int]  # 0-d intp scratch: min, max of the targets
    sums: tuple[int, int]  # 0-d ct scratch: numerator, denominator
    running: int | None  # exact mode: scratch ct [N*D] for the running sums
    nan: int | None  # exact mode: bool scratch of output 0's shape
    # SoftmaxCrossEntropyLoss only
    scores: int | None = None  # scratch ct [N, C, D]: the scores in ct
    log_prob: int | None = None  # scratch ct [N, C, D] when output 1 cannot hold it
    exps: int | None = None  # scratch ct [N, C, D]
    reduced: int | None = None  # scratch ct [N, 1, D]


class NegativeLogLikelihoodLoss(OpKernel):
    """-input[n, target, ...] * weight[target], reduced (none, sum or weighted mean)."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        if len(node.inputs) < 2 or not all(node.inputs[:2]):
            raise self.fail(
                f"takes the input, the target and an optional weight, got {list(node.inputs)}"
            )
        self.reduction = node.attr("reduction", "mean")
        if self.reduction not in REDUCTIONS:
            raise self.fail(f"reduction must be none, sum or mean, got {self.reduction!r}")
        ignore = node.attr("ignore_index")
        if ignore is not None and not isinstance(ignore, int):
            raise self.fail(f"ignore_index must be an int, got {ignore!r}")
        self.ignore = None if ignore is None else np.array(ignore, np.intp)

    # -- planning ----------------------------------------------------------------------------
    def infer(self, ctx: InferContext) -> None:
        self._plan(ctx)

    def _plan(self, ctx: InferContext, from_ct: bool = False, **extra: Any) -> _Plan:
        """The shared plan; ``from_ct``: the selection reads an array of the compute type."""
        dtype, shape = ctx.dtype(0), tuple(ctx.shape(0))
        require_float(self, ctx, "the input")
        tdtype = ctx.dtype(1)
        if tdtype not in (np.dtype(np.int32), np.dtype(np.int64)):
            message = f"the target must be int32 or int64, got {name_of(tdtype)}"
            raise self.fail(message, "invalid_input")
        if len(shape) < 2:
            raise self.fail(f"the input must be [N, C, d1..dk], got shape {shape}", "invalid_input")
        n, c, rest = shape[0], shape[1], shape[2:]
        if tuple(ctx.shape(1)) != (n, *rest):
            raise self.fail(
                f"the target's shape {tuple(ctx.shape(1))} must be {(n, *rest)} for an input "
                f"of shape {shape}",
                "invalid_input",
            )
        weighted = ctx.has_input(2)
        if weighted:
            if ctx.dtype(2) != dtype:  # one type T: the model's types disagree
                message = f"the weight must be {name_of(dtype)} like the input, got "
                raise self.fail(message + name_of(ctx.dtype(2)))
            if tuple(ctx.shape(2)) != (c,):
                raise self.fail(
                    f"the weight must have shape ({c},), got {tuple(ctx.shape(2))}",
                    "invalid_input",
                )
        d = math.prod(rest)
        ct = compute_dtype(dtype)
        nd = (n, d)
        out_shape = (n, *rest) if self.reduction == "none" else ()
        ctx.set_output(0, dtype, out_shape)
        exact = ctx.exact and self.supports_exact
        base = np.arange(n, dtype=np.intp)[:, None] * (c * d) + np.arange(d, dtype=np.intp)
        plan = _Plan(
            n=n,
            c=c,
            d=d,
            ct=ct,
            base=base,
            stride=np.array(d, np.intp),
            target=ctx.add_scratch(np.intp, nd),
            picked=ctx.add_scratch(dtype, nd) if dtype != ct and not from_ct else None,
            values=ctx.add_scratch(ct, nd),
            weights=ctx.add_scratch(ct, nd) if weighted or self.ignore is not None else None,
            classes=ctx.add_scratch(ct, (c,)) if weighted and dtype != ct else None,
            mask=ctx.add_scratch(np.bool_, nd) if self.ignore is not None else None,
            bounds=(ctx.add_scratch(np.intp, ()), ctx.add_scratch(np.intp, ())),
            sums=(ctx.add_scratch(ct, ()), ctx.add_scratch(ct, ())),
            running=ctx.add_scratch(ct, (n * d,)) if exact and self.reduction != "none" else None,
            nan=ctx.add_scratch(np.bool_, out_shape) if exact and dtype in _CANONICAL_NAN else None,
            **extra,
        )
        ctx.prepared = plan
        return plan

    # -- running -----------------------------------------------------------------------------
    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Plan = ctx.prepared
        weight = inputs[2] if len(inputs) > 2 else None
        self.select(ctx, p, inputs[0].reshape(-1), inputs[1], weight)
        self.reduce(ctx, p, outputs[0])

    def select(
        self, ctx: KernelContext, p: _Plan, flat: np.ndarray, target: np.ndarray, weight: Any
    ) -> None:
        """values = -flat[offset] * weight[class] per sample (0 where ignored); weights = the
        sample's weight (0 where ignored), when a weight or ignore_index is given."""
        s = ctx.scratch
        t = s[p.target]
        np.copyto(t, target.reshape(p.n, p.d), casting="unsafe")
        mask = None
        if p.mask is not None:
            mask = s[p.mask]
            np.equal(t, self.ignore, out=mask)
            np.copyto(t, zero_of(t.dtype), where=mask)
        self._check(ctx, p, t, mask)
        values = s[p.values]
        weights = s[p.weights] if p.weights is not None else None
        if weight is not None:
            if p.classes is not None:
                np.copyto(s[p.classes], weight, casting="unsafe")
                weight = s[p.classes]
            if p.c:
                np.take(weight, t, out=weights, mode="clip")
            else:
                weights.fill(0)
        elif weights is not None:
            weights.fill(1)
        if mask is not None:
            np.copyto(weights, zero_of(p.ct), where=mask)
        if not p.c:  # no class at all: every sample is ignored (checked)
            values.fill(0)
            return
        np.multiply(t, p.stride, out=t)
        np.add(t, p.base, out=t)
        if p.picked is not None:
            picked = s[p.picked]
            np.take(flat, t, out=picked, mode="clip")
            np.copyto(values, picked, casting="unsafe")
        else:
            np.take(flat, t, out=values, mode="clip")
        if weight is not None:
            np.multiply(values, weights, out=values)
        np.negative(values, out=values)
        if mask is not None:  # an ignored sample is +0 (x * 0 would be NaN for x = -inf)
            np.copyto(values, zero_of(p.ct), where=mask)

    def _check(self, ctx: KernelContext, p: _Plan, t: np.ndarray, mask: Any) -> None:
        """Every target lies in [0, C) (the ignored ones were set to 0 before); without any
        class, every sample must be ignored."""
        if not t.size:
            return
        lo, hi = (ctx.scratch[b] for b in p.bounds)
        np.amin(t, out=lo)
        np.amax(t, out=hi)
        lo, hi = int(lo), int(hi)
        if p.c:
            bad_targets = lo < 0 or hi >= p.c
        else:
            bad_targets = mask is None or not mask.all()
        if bad_targets:
            bad = lo if lo < 0 else hi
            message = f"target {bad} is out of range for {p.c} classes"
            if self.ignore is not None:
                message += f" (ignore_index is {int(self.ignore)})"
            raise self.fail(message, "invalid_input")

    def reduce(self, ctx: KernelContext, p: _Plan, out: np.ndarray) -> None:
        s = ctx.scratch
        values = s[p.values]
        if self.reduction == "none":
            np.copyto(out.reshape(p.n, p.d), values, casting="unsafe")
        else:
            total, denominator = (s[i] for i in p.sums)
            self._sum(ctx, p, values, total)
            if self.reduction == "mean":
                if p.weights is not None:
                    self._sum(ctx, p, s[p.weights], denominator)
                else:
                    denominator[()] = p.n * p.d
                with np.errstate(all="ignore"):  # every sample ignored: 0 / 0 = NaN
                    np.divide(total, denominator, out=total)
            np.copyto(out, total, casting="unsafe")
        if p.nan is not None:
            rewrite_nan(out, s[p.nan])

    def _sum(self, ctx: KernelContext, p: _Plan, t: np.ndarray, acc: np.ndarray) -> None:
        if p.running is None:
            np.add.reduce(t, axis=None, out=acc)
        elif not t.size:
            acc[()] = 0
        else:  # exact: ascending flat order, one rounding per addition
            running = ctx.scratch[p.running]
            np.add.accumulate(t.reshape(-1), out=running)
            acc[()] = running[-1]


class SoftmaxCrossEntropyLoss(NegativeLogLikelihoodLoss):
    """NegativeLogLikelihoodLoss of LogSoftmax(scores) over the class axis; output 1 is the
    LogSoftmax itself."""

    supports_exact = False

    def infer(self, ctx: InferContext) -> None:
        dtype, shape = ctx.dtype(0), tuple(ctx.shape(0))
        ct = compute_dtype(dtype) if is_float(dtype) else dtype
        n = shape[0] if shape else 0
        c = shape[1] if len(shape) > 1 else 0
        d = math.prod(shape[2:])
        full, reduced = (n, c, d), (n, 1, d)
        in_output = ctx.num_outputs > 1 and bool(self.node.outputs[1]) and ct == dtype
        self._plan(
            ctx,
            from_ct=True,
            scores=ctx.add_scratch(ct, full) if ct != dtype else None,
            log_prob=None if in_output else ctx.add_scratch(ct, full),
            exps=ctx.add_scratch(ct, full),
            reduced=ctx.add_scratch(ct, reduced),
        )
        ctx.set_output(1, dtype, shape)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Plan = ctx.prepared
        s = ctx.scratch
        full = (p.n, p.c, p.d)
        x = inputs[0].reshape(full)
        if p.scores is not None:
            np.copyto(s[p.scores], x, casting="unsafe")
            x = s[p.scores]
        keep = outputs[1] if len(outputs) > 1 else None
        lp = keep.reshape(full) if p.log_prob is None else s[p.log_prob]
        if p.c:
            red, exps = s[p.reduced], s[p.exps]
            np.maximum.reduce(x, axis=1, keepdims=True, out=red)
            np.subtract(x, red, out=lp)
            np.exp(lp, out=exps)
            np.add.reduce(exps, axis=1, keepdims=True, out=red)
            np.log(red, out=red)
            np.subtract(lp, red, out=lp)
        if keep is not None and p.log_prob is not None:
            np.copyto(keep, lp.reshape(keep.shape), casting="unsafe")
        self.select(ctx, p, lp.reshape(-1), inputs[1], inputs[2] if len(inputs) > 2 else None)
        self.reduce(ctx, p, outputs[0])
