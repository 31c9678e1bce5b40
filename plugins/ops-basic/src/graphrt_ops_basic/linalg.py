"""Det and Einsum: linear algebra on stacks of matrices and labelled axes.

Det is LAPACK's LU through ``np.linalg.det``; Einsum is ``np.einsum`` on an equation we
parse, check and make explicit ourselves, with the contraction order (and numpy's choice of
BLAS products) fixed once per plan.  float16 and bfloat16 compute in float32 and round once.
Neither is exact: LAPACK, BLAS and summation orders vary by machine.
"""

from __future__ import annotations

import dataclasses
import math
import string
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._util import is_float
from .search import check_numeric

_LETTERS = frozenset(string.ascii_letters)
ELLIPSIS = "..."


def _wide(dtype: np.dtype) -> np.dtype:
    """The type numpy computes in: float16, bfloat16 and other narrow floats in float32."""
    dtype = np.dtype(dtype)
    if is_float(dtype) and dtype not in (np.float32, np.float64):
        return np.dtype(np.float32)
    return dtype


class Det(OpKernel):
    """Determinants of the [..., M, M] matrices: output shape [...]; M = 0 gives 1.

    A run allocates: ``np.linalg.det`` has no ``out=`` and copies each matrix for LAPACK's LU,
    which only a determinant of our own could avoid.
    """

    def infer(self, ctx: InferContext) -> None:
        dtype, shape = ctx.dtype(0), ctx.shape(0)
        if not is_float(dtype):
            raise self.fail(f"input must be a float tensor, got {dtype}")
        if len(shape) < 2 or shape[-1] != shape[-2]:
            message = f"input of shape {list(shape)} is not a stack of square matrices"
            raise self.fail(message, "invalid_input")
        ctx.set_output(0, dtype, shape[:-2])

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x, out = inputs[0], outputs[0]
        if out.size == 0:
            return
        wide = _wide(x.dtype)
        if wide != x.dtype:
            x = x.astype(wide)
        np.copyto(out, np.linalg.det(x), casting="unsafe")


@dataclasses.dataclass(frozen=True)
class _EinsumPlan:
    optimize: Any  # False (one C loop over every label), or numpy.einsum_path's path
    casts: tuple[int, ...]  # scratch: each input in the compute type (float16, bfloat16)
    result: int | None  # scratch: the result in the compute type


#: Largest iteration space (product of every label's extent) einsum's one C loop runs: below
#: it, numpy's pairwise contractions through matmul cost more in Python and temporaries than
#: they save (measured: equal near 32 x 32 x 32 matrices).
DIRECT = 1 << 15


class Einsum(OpKernel):
    """out[output-term] = sum over the other labels of the product of the inputs.

    Labels are ASCII letters (case matters); ``...`` stands for the same broadcast dimensions
    in every term that has it; spaces are ignored.  Without ``->`` the output is ``...`` (if
    any term has it) then the labels seen exactly once, in ASCII order.  A malformed equation
    or one whose term count differs from the inputs' is an invalid model; a term whose rank or
    label extents do not match its input is an invalid input.
    """

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        equation = node.attr("equation")
        if not isinstance(equation, str):
            raise self.fail("attribute equation is required")
        self.equation = equation
        text = equation.replace(" ", "")
        if text.count("->") > 1:
            raise self._bad("'->' appears more than once")
        lhs, arrow, rhs = text.partition("->")
        self.terms = [self._term(t) for t in lhs.split(",")]
        n_inputs = len([i for i in node.inputs if i])
        if len(self.terms) != n_inputs:
            raise self._bad(f"it has {len(self.terms)} input terms for {n_inputs} inputs")
        seen = [t for term in self.terms for t in term if t != ELLIPSIS]
        any_ellipsis = any(ELLIPSIS in term for term in self.terms)
        if arrow:
            self.output = self._term(rhs)
            letters = [t for t in self.output if t != ELLIPSIS]
            if len(set(letters)) != len(letters):
                raise self._bad("the output repeats a label")
            if missing := sorted(set(letters) - set(seen)):
                raise self._bad(f"output labels {''.join(missing)} appear in no input")
            if ELLIPSIS in self.output and not any_ellipsis:
                raise self._bad("the output has '...' but no input does")
        else:
            once = sorted(t for t in set(seen) if seen.count(t) == 1)
            self.output = ([ELLIPSIS] if any_ellipsis else []) + once
        inputs = ",".join("".join(term) for term in self.terms)
        self.numpy_equation = f"{inputs}->{''.join(self.output)}"

    def _bad(self, why: str) -> Exception:
        return self.fail(f"equation {self.equation!r} is invalid: {why}")

    def _term(self, text: str) -> list[str]:
        tokens, i = [], 0
        while i < len(text):
            if text[i] in _LETTERS:
                tokens.append(text[i])
                i += 1
            elif text.startswith(ELLIPSIS, i):
                tokens.append(ELLIPSIS)
                i += 3
            else:
                raise self._bad(f"unexpected character {text[i]!r}")
        if tokens.count(ELLIPSIS) > 1:
            raise self._bad(f"term {text!r} has more than one '...'")
        return tokens

    def infer(self, ctx: InferContext) -> None:
        dtypes = {ctx.dtype(i) for i in range(ctx.num_inputs)}
        if len(dtypes) != 1:
            raise self.fail(f"inputs must have one element type, got {sorted(map(str, dtypes))}")
        check_numeric(self, ctx.dtype(0))
        extents: dict[str, int] = {}
        ellipses = []
        for i, term in enumerate(self.terms):
            shape = ctx.shape(i)
            letters = len(term) - (ELLIPSIS in term)
            if len(shape) < letters or (ELLIPSIS not in term and len(shape) != letters):
                raise self.fail(
                    f"input {i} of shape {list(shape)} does not match term {''.join(term)!r}",
                    "invalid_input",
                )
            at = term.index(ELLIPSIS) if ELLIPSIS in term else len(term)
            n_ell = len(shape) - letters
            ellipses.append(shape[at : at + n_ell])
            dims = list(shape[:at]) + list(shape[at + n_ell :])
            for label, extent in zip([t for t in term if t != ELLIPSIS], dims):
                if extents.setdefault(label, extent) != extent:
                    raise self.fail(
                        f"label {label!r} has extents {extents[label]} and {extent}",
                        "invalid_input",
                    )
        try:
            broadcast = np.broadcast_shapes(*ellipses)
        except ValueError:
            message = f"the '...' dimensions {[list(e) for e in ellipses]} do not broadcast"
            raise self.fail(message, "invalid_input") from None
        out_shape: list[int] = []
        for t in self.output:
            out_shape.extend(broadcast if t == ELLIPSIS else [extents[t]])
        dtype = ctx.dtype(0)
        ctx.set_output(0, dtype, out_shape)
        wide = _wide(dtype)
        optimize: Any = False
        space = math.prod(extents.values()) * math.prod(broadcast)
        if len(self.terms) > 1 and space > DIRECT:
            stand_ins = [
                np.broadcast_to(np.zeros((), wide), ctx.shape(i)) for i in range(len(self.terms))
            ]
            optimize = np.einsum_path(self.numpy_equation, *stand_ins, optimize="greedy")[0]
        casts: tuple[int, ...] = ()
        result = None
        if wide != dtype:
            casts = tuple(ctx.add_scratch(wide, ctx.shape(i)) for i in range(ctx.num_inputs))
            result = ctx.add_scratch(wide, out_shape)
        ctx.prepared = _EinsumPlan(optimize, casts, result)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        """One C loop writes straight into the output (and allocates nothing); numpy's
        pairwise contractions (``optimize``, large inputs) make temporaries of their own."""
        p: _EinsumPlan = ctx.prepared
        operands, out = inputs, outputs[0]
        if p.result is not None:
            operands = [ctx.scratch[k] for k in p.casts]
            for x, wide in zip(inputs, operands):
                np.copyto(wide, x, casting="unsafe")
            out = ctx.scratch[p.result]
        np.einsum(self.numpy_equation, *operands, out=out, optimize=p.optimize)
        if out is not outputs[0]:
            np.copyto(outputs[0], out, casting="unsafe")
