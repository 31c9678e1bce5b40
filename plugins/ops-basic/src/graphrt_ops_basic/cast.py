"""Cast and CastLike: element-type conversion as the ONNX Cast text defines it.

Numeric casts are numpy's (C conversions; ml_dtypes for bfloat16, the float8 family, int4 and
smaller types).  What numpy does not do the ONNX way is handled here:

* float8 targets with ``saturate`` (opset 19+, the default): values beyond the largest finite
  value, infinities included, become +-that value (clamp, then round to nearest even);
  ``saturate=0`` is ml_dtypes' own conversion (NaN, or inf for E5M2);
* FLOAT8E8M0 (opset 24+): a power of two chosen by ``round_mode`` (up, down, nearest);
* strings: numbers are written as numpy writes them ("0.5", "inf", "True"), and parsed with
  "INF", "+INF", "-INF", "NaN" in any case; integer targets parse integers exactly, other text
  through float and truncation (undefined in ONNX).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel, TensorProto, from_onnx

from ._util import constant, is_float, same_storage

#: ONNX types graphrt.dtypes does not list yet, with their ml_dtypes names.
_EXTRA_TYPES = {
    "FLOAT4E2M1": "float4_e2m1fn",
    "FLOAT8E8M0": "float8_e8m0fnu",
    "INT2": "int2",
    "UINT2": "uint2",
    "FLOAT6E2M3": "float6_e2m3fn",
    "FLOAT6E3M2": "float6_e3m2fn",
}
_FLOAT8_SATURATING = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
_E8M0 = "float8_e8m0fnu"
OBJECT = np.dtype(object)


def onnx_to_numpy(code: int) -> np.dtype | None:
    """The numpy dtype of an ONNX element type, or None when there is none."""
    try:
        return from_onnx(code)
    except KeyError:
        pass
    for name, ml_name in _EXTRA_TYPES.items():
        if getattr(TensorProto, name, None) == code:
            import ml_dtypes  # only for these types: importing it costs every session start

            return np.dtype(getattr(ml_dtypes, ml_name)) if hasattr(ml_dtypes, ml_name) else None
    return None


@dataclasses.dataclass(frozen=True)
class _Plan:
    how: str  # "copy", "saturate", "e8m0", "to_string", "from_string"
    limit: int | None = None  # saturate: scratch index of the clamped source


class Cast(OpKernel):
    """Cast to the ``to`` attribute's type; CastLike takes the type of its second input."""

    in_place_input = 0

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.saturate = bool(node.attr("saturate", 1)) if node.opset >= 19 else True
        self.round_mode = node.attr("round_mode", "up")
        if self.round_mode not in ("up", "down", "nearest"):
            raise self.fail(f"round_mode must be up, down or nearest, got {self.round_mode!r}")
        self.to = self._target_attr(node)

    def _target_attr(self, node: NodeInfo) -> np.dtype | None:
        code = node.attr("to")
        if code is None:
            raise self.fail("the 'to' attribute is missing")
        if isinstance(code, str):  # opset 1 names the type ("FLOAT")
            if code.upper() not in TensorProto.DataType.keys():
                raise self.fail(f"unknown type name {code!r} in 'to'")
            code = TensorProto.DataType.Value(code.upper())
        dtype = onnx_to_numpy(int(code))
        if dtype is None:
            known = code in TensorProto.DataType.values()
            name = TensorProto.DataType.Name(code) if known else code
            raise self.fail(f"cannot cast to {name}: no numpy type holds it", "unsupported")
        return dtype

    def target(self, ctx: InferContext) -> np.dtype:
        return self.to

    def infer(self, ctx: InferContext) -> None:
        src, dst = ctx.dtype(0), self.target(ctx)
        ctx.set_output(0, dst, ctx.shape(0))
        if dst == OBJECT and src != OBJECT:
            ctx.prepared = _Plan("to_string")
        elif src == OBJECT and dst != OBJECT:
            ctx.prepared = _Plan("from_string")
        elif dst.name in _FLOAT8_SATURATING and self.saturate and src != dst:
            ctx.prepared = _Plan("saturate", ctx.add_scratch(_clamp_type(src), ctx.shape(0)))
        elif dst.name == _E8M0 and src != dst:
            ctx.prepared = _Plan("e8m0")
        else:
            ctx.prepared = _Plan("copy")

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        plan: _Plan = ctx.prepared
        x, out = inputs[0], outputs[0]
        with np.errstate(all="ignore"):  # NaN and out-of-range to integers: undefined in ONNX
            if plan.how == "copy":
                np.copyto(out, x, casting="unsafe")
            elif plan.how == "saturate":
                _saturate(x, out, ctx.scratch[plan.limit])
            elif plan.how == "e8m0":
                _to_e8m0(x, out, self.round_mode, self.saturate)
            elif plan.how == "to_string":
                out[...] = x.astype(str).astype(object)
            else:
                self._from_strings(x, out)

    def bind(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        plan: _Plan = ctx.prepared
        x, out = inputs[0], outputs[0]
        quiet = not (is_float(x.dtype) and out.dtype.kind in "iub")
        if plan.how == "copy" and same_storage(out, x):
            return _nothing  # in place to the same type: the output already is the input
        if plan.how == "copy" and quiet:
            return functools.partial(np.copyto, out, x, casting="unsafe")
        return functools.partial(self.run, ctx, inputs, outputs)

    def _from_strings(self, x: np.ndarray, out: np.ndarray) -> None:
        texts = [s.decode() if isinstance(s, bytes) else str(s) for s in x.reshape(-1)]
        dst = out.dtype
        if dst.kind in "iu" or dst.name in ("int4", "uint4", "int2", "uint2"):
            bits = 8 * dst.itemsize if dst.kind in "iu" else int(dst.name[-1])
            signed = dst.kind == "i" or dst.name.startswith("int")
            ints = [_wrap(_parse_int(s), bits, signed) for s in texts]
            values = np.array(ints, dtype=dst if dst.kind in "iu" else np.int64)
        else:
            values = np.array([float(s) for s in texts], np.float64)
        values = values.reshape(x.shape)
        if dst.name in _FLOAT8_SATURATING and self.saturate:
            _saturate(values, out, np.empty_like(values))
        elif dst.name == _E8M0:
            _to_e8m0(values, out, self.round_mode, self.saturate)
        else:
            np.copyto(out, values, casting="unsafe")


class CastLike(Cast):
    """Cast to the element type of input 1 (whose values are not read)."""

    def _target_attr(self, node: NodeInfo) -> np.dtype | None:
        return None

    def target(self, ctx: InferContext) -> np.dtype:
        return ctx.dtype(1)


def _nothing() -> None:
    pass


def _clamp_type(src: np.dtype) -> np.dtype:
    """float64 clamps in float64 (one rounding, directly to float8); the rest in float32,
    which holds every float16, bfloat16 and float8 value exactly."""
    return np.dtype(np.float64 if src == np.float64 else np.float32)


def _saturate(x: np.ndarray, out: np.ndarray, tmp: np.ndarray) -> None:
    """Clamp to the target's finite range (NaN stays NaN), then convert (round to nearest)."""
    import ml_dtypes  # out is a float8 type: ml_dtypes is loaded already

    top = float(ml_dtypes.finfo(out.dtype).max)
    np.clip(x, constant(tmp.dtype, -top), constant(tmp.dtype, top), out=tmp)
    np.copyto(out, tmp, casting="unsafe")


def _to_e8m0(x: np.ndarray, out: np.ndarray, round_mode: str, saturate: bool) -> None:
    """FLOAT8E8M0 holds 2**(e - 127) for e in 0..254 and NaN as 255 (no sign, no zero).

    With x = m * 2**k, 0.5 <= m < 1 (frexp): ``down`` keeps 2**(k-1), ``up`` takes 2**k unless
    x is a power of two, ``nearest`` rounds up from 1.5 * 2**(k-1) (ties up).  Saturation maps
    zero and what is below the range to 2**-127 and what is above (inf too) to 2**127;
    otherwise those become NaN.  Negative values are unspecified in ONNX: their magnitude is used.
    """
    v = np.abs(np.asarray(x, dtype=np.float64))
    m, k = np.frexp(v)
    e = k.astype(np.int64) - 1
    if round_mode == "up":
        e += m != 0.5
    elif round_mode == "nearest":
        e += m >= 0.75
    biased = e + 127
    finite = np.isfinite(v)
    if saturate:
        biased = np.clip(biased, 0, 254)
        biased[v == 0] = 0
        biased[np.isinf(v)] = 254
    else:
        biased[(biased < 0) | (biased > 254) | (v == 0) | ~finite] = 255
    biased[np.isnan(v)] = 255
    out.view(np.uint8)[...] = biased.astype(np.uint8)


def _parse_int(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        value = float(text)
        return int(value) if np.isfinite(value) else 0


def _wrap(value: int, bits: int, signed: bool) -> int:
    """Keep the low ``bits`` bits (ONNX: out-of-range integers discard the higher bits)."""
    value &= (1 << bits) - 1
    if signed and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value
