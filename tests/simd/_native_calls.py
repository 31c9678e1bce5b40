"""The worker side of tests/simd/test_native_fuzz.py: build the arrays a call spec describes
and call one ``graphrt_ops_simd._native`` entry point with them.

A spec is plain data (picklable, small): arrays are ``(dtype, shape, layout)`` triples made
here, so a test can ask for a hostile layout (Fortran order, a stride step, negative or zero
strides, read-only, misaligned) without sending the array; ``"fit"`` asks for the array the
other arguments imply (conv's x, y and work; MaxPool's y) when it is small enough to make.
The ``"broadcast"`` layout is one value at every index (zero strides), of any shape numpy can
describe: a huge head count or sequence that takes no memory.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: The most elements of an array a spec may ask for (larger asks get an empty array).
MOST = 1 << 22


def make(spec: Any) -> Any:
    """An array for (dtype, shape, layout); anything else is passed through."""
    if not (isinstance(spec, tuple) and len(spec) == 3 and isinstance(spec[1], tuple)):
        return spec
    dtype, shape, layout = spec
    if layout == "broadcast" and all(d >= 0 for d in shape):
        return np.broadcast_to(np.ones((), dtype), shape)
    if any(d < 0 for d in shape) or math.prod(shape) > MOST:
        shape = tuple(0 for _ in shape)
    rng = np.random.default_rng(len(shape) + sum(shape))
    base = rng.standard_normal(shape).astype(np.float32).astype(dtype)
    if layout == "fortran":
        return np.asfortranarray(base)
    if layout == "step" and base.ndim:
        return np.repeat(base, 2, axis=-1)[..., ::2]
    if layout == "neg" and base.ndim:
        return np.flip(base, axis=0)
    if layout == "neg_last" and base.ndim:
        return np.flip(base, axis=-1)
    if layout == "readonly":
        base.flags.writeable = False
        return base
    if layout == "zero_stride" and base.ndim and base.size:
        return np.lib.stride_tricks.as_strided(base, shape, (0,) * base.ndim)
    if layout == "misaligned" and base.dtype == np.float32:
        raw = np.zeros(base.size * 4 + 1, np.uint8)[1:]
        return raw.view(np.float32).reshape(shape) if base.size else base
    if layout == "noncontig_view" and base.ndim >= 2:
        return base.swapaxes(-1, -2)
    return base


def execute(spec: dict[str, Any]) -> None:
    """Call the entry point the spec names; a Python exception is an acceptable outcome."""
    from graphrt_ops_simd import _native as N

    fn = spec["fn"]
    a = {k: make(v) for k, v in spec.items()}
    if fn == "conv":
        plan = N.conv_plan(
            a["w"],
            a["group"],
            a["x_shape"],
            a["strides"],
            a["dilations"],
            a["pads"],
            a["out"],
            a["isa"],
            a["kernel"],
        )
        _ = (plan.units, plan.nbytes, plan.work_floats, plan.staged, plan.kernel)
        x = _fit(a["x"], a["x_shape"])
        work = _fit(a["work"], (plan.work_floats,))
        out_shape = (a["x_shape"][0], a["w"].shape[0], *a["out"])
        y = _fit(a["y"], out_shape)
        plan.stage(x, work, a["threads"])
        plan.run(
            x,
            work,
            y,
            a["bias"],
            a["activation"],
            a["u0"],
            a["u1"],
            a["threads"],
            _fit(a["z"], out_shape) if a["z"] is not None else None,
        )
    elif fn == "maxpool2d":
        y = _fit(a["y"], a["y_shape"])
        N.maxpool2d(
            a["x"],
            y,
            a["kernel"],
            a["strides"],
            a["dilations"],
            a["pads"],
            a["isa"],
            a["plane_begin"],
            a["plane_end"],
            a["threads"],
        )
    elif fn == "concat":
        N.concat(
            a["xs"] if not isinstance(a["xs"], list) else [make(x) for x in a["xs"]],
            a["out"],
            a["axis"],
            a["threads"],
        )
    elif fn == "gemm":
        packed = N.pack_b(a["b"], a["isa"])
        _ = (packed.k, packed.n, packed.isa, packed.nbytes)
        if a["repack"] is not None:
            packed.repack(a["repack"])
        N.gemm(
            a["a"],
            packed,
            a["out"],
            a["bias"],
            a["bias_axis"],
            a["alpha"],
            a["activation"],
            a["clip_min"],
            a["clip_max"],
            a["row_begin"],
            a["row_end"],
            a["threads"],
        )
    elif fn == "gemm_exact":
        N.gemm_exact(a["a"], a["b"], a["out"], a["isa"], a["row_begin"], a["row_end"])
    elif fn == "unary":
        out = a["x"] if _same(a["out"]) else a["out"]
        N.unary(a["op"], a["x"], out, a["isa"], a["begin"], a["end"], a["threads"])
    elif fn == "unary_fast":
        out = a["x"] if _same(a["out"]) else a["out"]
        N.unary_fast(a["op"], a["x"], out, a["isa"], a["begin"], a["end"], a["threads"])
    elif fn == "attention":
        N.attention(a["q"], a["k"], a["v"], a["mask"], a["y"], a["scale"], a["isa"], a["threads"])
    elif fn == "layer_norm":
        y = a["x"] if _same(a["y"]) else a["y"]
        N.layer_norm(a["x"], y, a["scale"], a["bias"], a["eps"], a["isa"], a["threads"])
    elif fn == "softmax":
        y = a["x"] if _same(a["y"]) else a["y"]
        N.softmax(a["x"], y, a["isa"], a["threads"])
    elif fn == "canonicalize_nan":
        N.canonicalize_nan(a["x"])
    elif fn == "nms":
        N.nms(
            a["boxes"],
            a["scores"],
            a["max_per_class"],
            a["iou"],
            a["score_threshold"],
            a["center"],
            a["isa"],
            a["threads"],
        )
    else:
        raise AssertionError(f"unknown entry point {fn!r}")


def _same(value: Any) -> bool:
    """``"same"``: the output is the input itself (an array is never compared with a string:
    numpy would compare element-wise and the truth value raise)."""
    return isinstance(value, str) and value == "same"


def _fit(value: Any, shape: Any) -> Any:
    """``"fit"``: a C-contiguous float32 array of this shape (empty if it would be huge)."""
    if isinstance(value, str) and value == "fit":
        shape = tuple(int(d) for d in shape)
        if any(d < 0 for d in shape) or math.prod(shape) > MOST:
            shape = tuple(0 for _ in shape)
        return np.zeros(shape, np.float32)
    return value
