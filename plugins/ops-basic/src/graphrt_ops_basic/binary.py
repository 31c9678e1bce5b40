"""Broadcasting element-wise binary operators: the pattern every such family copies.

Each operator is a subclass naming its ufunc; one kernel covers every opset version (before
opset 7, ``broadcast=1`` with ``axis`` aligns B to A from ``axis`` instead of numpy's rule).
``bind`` returns the bare ufunc call, so a static step costs one numpy call per run; operators
whose recipe depends on the element types (integer Div, mixed-type Pow) override ``prepare``,
``compute`` and ``plain``.  A recipe of several calls reads every input before its last call
writes ``out``, because ``out`` may be input 0's storage.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._util import exact_inputs, is_float, needs_nan_rewrite, rewrite_nan, same_types


class Binary(OpKernel):
    """out = ufunc(A, B) with numpy broadcasting; the output keeps A's element type."""

    ufunc: ClassVar[Callable[..., Any]]
    in_place_input = 0
    #: Comparisons return bool; arithmetic returns A's type.
    result_dtype: ClassVar[Any] = None
    #: A and B share one type T (all but Pow).
    same_type: ClassVar[bool] = True
    #: Arithmetic: ONNX has no bool T (numpy's bool subtract and divide fail mid-run).
    numeric: ClassVar[bool] = False

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        exact_inputs(self, ("A", "B"))

    def infer(self, ctx: InferContext) -> None:
        if self.same_type:
            same_types(self, ctx, 2)
        if self.numeric and ctx.dtype(0).kind == "b":
            raise self.fail("A and B must be numeric tensors, got tensor(bool)", "invalid_input")
        a, b = ctx.shape(0), ctx.shape(1)
        b = self._legacy_b_shape(a, b)
        try:
            shape = np.broadcast_shapes(a, b)
        except ValueError:
            message = f"shapes {list(a)} and {list(b)} cannot be broadcast"
            raise self.fail(message, "invalid_input") from None
        dtype = np.dtype(self.result_dtype or ctx.dtype(0))
        ctx.set_output(0, dtype, shape)
        self.prepare(ctx, dtype, shape)

    def prepare(self, ctx: InferContext, dtype: np.dtype, shape: tuple[int, ...]) -> None:
        """Per-plan data; by default the exact-mode NaN mask (``ctx.prepared`` is its index)."""
        needs_nan_rewrite(ctx, dtype, shape)

    def _legacy_b_shape(self, a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
        """Opset < 7 broadcast attribute: B's dims line up with A's starting at ``axis``."""
        if self.node.opset >= 7 or not self.node.attr("broadcast", 0) or len(b) == 0:
            return tuple(b)
        axis = self.node.attr("axis", len(a) - len(b))
        axis = axis + len(a) if axis < 0 else axis
        return tuple(b) + (1,) * (len(a) - axis - len(b))

    def _b(self, b: np.ndarray, a_shape: Sequence[int]) -> np.ndarray:
        shape = self._legacy_b_shape(a_shape, b.shape)
        return b if shape == b.shape else b.reshape(shape)

    def compute(self, ctx: KernelContext, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        self.ufunc(a, b, out=out)

    def plain(self, ctx: KernelContext, a: np.ndarray, b: np.ndarray) -> bool:
        """Whether the bare ufunc call computes the same bits as ``run``."""
        return not (ctx.exact and isinstance(ctx.prepared, int))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        a, b = inputs
        self.compute(ctx, a, self._b(b, a.shape), outputs[0])
        if ctx.exact and isinstance(ctx.prepared, int):
            rewrite_nan(outputs[0], ctx.scratch[ctx.prepared])

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        a, b = inputs
        if not self.plain(ctx, a, b):
            return functools.partial(self.run, ctx, inputs, outputs)
        out = outputs[0]
        # operands of the output's rank: numpy's call is ~3x cheaper on a tiny step when it
        # need not broadcast over a missing axis (same elements, so the same bits)
        return functools.partial(
            self.ufunc, _of_rank(a, out.ndim), _of_rank(self._b(b, a.shape), out.ndim), out
        )


def _of_rank(x: np.ndarray, ndim: int) -> np.ndarray:
    """``x`` viewed with leading unit axes up to ``ndim`` (never a copy)."""
    return x if x.ndim >= ndim else x.reshape((1,) * (ndim - x.ndim) + x.shape)


class Add(Binary):
    ufunc = np.add
    supports_exact = True  # one correctly rounded operation per element
    numeric = True


class Sub(Binary):
    ufunc = np.subtract
    supports_exact = True
    numeric = True


class Mul(Binary):
    ufunc = np.multiply
    supports_exact = True
    numeric = True


class Div(Binary):
    """IEEE division for floats; integer division truncates toward zero (ONNX and C, not numpy).

    Signed integers use ``q = (a - fmod(a, b)) // b``: ``a - fmod(a, b)`` is an exact multiple of
    ``b``, so the floor division is exact and equals the truncated quotient.  Division by zero
    gives 0 (undefined in ONNX; numpy's choice, without its warning).
    """

    ufunc = np.divide
    supports_exact = True  # floats: one correctly rounded division; integers: exact
    numeric = True

    def prepare(self, ctx: InferContext, dtype: np.dtype, shape: tuple[int, ...]) -> None:
        if dtype.kind == "i":
            ctx.prepared = _Scratch(ctx.add_scratch(dtype, shape))
        else:
            super().prepare(ctx, dtype, shape)

    def compute(self, ctx: KernelContext, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        kind = out.dtype.kind
        if kind not in "iu":
            np.divide(a, b, out=out)
            return
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            if kind == "u":
                np.floor_divide(a, b, out=out)
                return
            tmp = ctx.scratch[ctx.prepared.index]
            np.fmod(a, b, out=tmp)  # reads every input before out is written (in place)
            np.subtract(a, tmp, out=tmp)
            np.floor_divide(tmp, b, out=out)

    def plain(self, ctx: KernelContext, a: np.ndarray, b: np.ndarray) -> bool:
        return a.dtype.kind not in "iu" and super().plain(ctx, a, b)


class Mod(Binary):
    """``fmod=0``: the result takes the divisor's sign (numpy remainder); ``fmod=1``: C fmod.

    Both follow the special cases of the opset-28 text for floats (numpy's definitions match).
    """

    numeric = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        fmod = node.attr("fmod", 0)
        if fmod not in (0, 1):
            raise self.fail(f"fmod must be 0 or 1, got {fmod}")
        self.ufunc = np.fmod if fmod else np.remainder


class BitShift(Binary):
    """numpy's shifts already give the opset-28 rule for shifts < 0 or >= the bit width.

    (An out-of-range amount yields 0, or -1 for a right shift of a negative signed value.)
    """

    supports_exact = True  # integer bit operations

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        direction = node.attr("direction", "")
        if direction not in ("LEFT", "RIGHT"):
            raise self.fail(f"direction must be 'LEFT' or 'RIGHT', got {direction!r}")
        self.ufunc = np.left_shift if direction == "LEFT" else np.right_shift


@dataclasses.dataclass(frozen=True)
class _PowPlan:
    dtype: np.dtype | None  # the loop's type when it differs from the operands' (None: plain)
    int_negative: bool  # integer base and signed integer exponent: may need the slow path


class Pow(Binary):
    """X ** Y with the output in X's type; Y may have another type from opset 12.

    A float base is raised in float32 (float64 when either side is float64) and rounded once to
    X's type.  An integer base with a float exponent goes through float64 and truncates; an
    integer base with a negative integer exponent gives trunc(1 / x**|y|): x**|y| for x = +-1,
    else 0 (numpy refuses the case).  Not exact: numpy's pow differs between machines.
    """

    ufunc = np.power
    same_type = False

    def prepare(self, ctx: InferContext, dtype: np.dtype, shape: tuple[int, ...]) -> None:
        base, exp = ctx.dtype(0), ctx.dtype(1)
        if is_float(base):
            same = base == exp and base.kind == "f" and base.itemsize >= 4
            loop = None if same else _float_loop(base, exp)
        elif is_float(exp):
            loop = np.dtype(np.float64)
        else:
            loop = None if base == exp else base
        ctx.prepared = _PowPlan(loop, base.kind in "iu" and exp.kind == "i")

    def compute(self, ctx: KernelContext, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        plan: _PowPlan = ctx.prepared
        with np.errstate(all="ignore"):
            if plan.int_negative and b.size and b.min() < 0:
                _int_pow_negative(a, b, out)
            elif plan.dtype is None:
                np.power(a, b, out=out)
            else:
                np.power(a, b, out=out, dtype=plan.dtype, casting="unsafe")

    def plain(self, ctx: KernelContext, a: np.ndarray, b: np.ndarray) -> bool:
        plan: _PowPlan = ctx.prepared
        return plan.dtype is None and not plan.int_negative


def _float_loop(base: np.dtype, exp: np.dtype) -> np.dtype:
    wide = base == np.float64 or exp == np.float64
    return np.dtype(np.float64 if wide else np.float32)


def _int_pow_negative(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """Integer power with some negative exponents (rare: allocates its temporaries)."""
    zero = (b < 0) & (a != 1)
    if a.dtype.kind == "i":
        zero &= a != -1
    np.power(a, np.abs(b).astype(a.dtype), out=out)
    np.copyto(out, 0, where=zero)


@dataclasses.dataclass(frozen=True)
class _Scratch:
    index: int  # ctx.scratch index of a temporary with the output's shape and type


class Compare(Binary):
    """Comparisons and logical operators: bool output, exact (no rounding anywhere)."""

    result_dtype = np.bool_
    supports_exact = True


class Equal(Compare):
    ufunc = np.equal


class Less(Compare):
    ufunc = np.less


class Greater(Compare):
    ufunc = np.greater


class LessOrEqual(Compare):
    ufunc = np.less_equal


class GreaterOrEqual(Compare):
    ufunc = np.greater_equal


class And(Compare):
    ufunc = np.logical_and


class Or(Compare):
    ufunc = np.logical_or


class Xor(Compare):
    ufunc = np.logical_xor
