"""Exact-mode Conv and FusedConv (float32, 2-D) on the native convolution or the exact GEMM.

With a constant weight, ``NATIVE_MIN_GROUP_CHANNELS`` output channels per group and windows of
``NATIVE_MIN_DEPTH`` terms, the native convolution's own kernels run with exact mode's sums
(``conv_plan(..., exact=True)``: a multiply then an add per term from -0, so the first term
counts as assigned; the canonical depth order; ``+ B`` after; Z and the activation as
ops-basic's calls, then the NaN rewrite): no im2col copy, and fast mode's blocking.  Otherwise
the im2col path below.

docs/exact-mode.md fixes every output's sum: the terms ``t(c, tap) = W[m, c, tap] *
Xpad[n, g*Cg + c, o*stride + tap*dilation]``, ``c`` outer and the taps row-major inner, added as
``acc = t0; acc = acc + t1; ...``, each product rounded, then ``y = acc + B[m]``.  That is the
product of W's rows of group g, ``(M/group, Cg*taps)``, with the group's rows of the im2col
matrix, whose row ``c*taps + tap`` holds what tap reads of channel c at every output position
(an exact copy; padding +0, the value Xpad has there).  ``gemm_exact`` computes each output in
exactly that order (the first product assigned, not added to a zero; a multiply then an add per
term, no FMA), vectorised across output columns only, so the bits are those of ops-basic's
``conv_exact`` on every ISA.

* A constant bias is the product's last term: W gets a column B and each group's matrix a row
  of ones, so ``t = B[m] * 1`` (exact for every float, -0 and infinities included; a NaN is
  rewritten anyway) and ``y = acc + t`` is ops-basic's bias add, inside the kernel, saving two
  passes over Y.  A run-time bias, or a 1x1 layer whose X outweighs Y, gets numpy's add.
* A 1x1 kernel with unit strides and no pads reads X in place as its matrix (unless the bias
  asks for a copy); another 1x1 copies X's strided positions (with the pads) straight into it.
* A row with more than one column past a multiple of the ISA's vector width would finish
  column by column (as slow as a whole vector block each): the matrix gets a few more columns
  (whatever the scratch holds; their outputs are dropped) and the product reaches Y in a copy or
  the bias add.
* The canonical-NaN rewrite comes last: a result's NaN-ness does not depend on a NaN's payload,
  so one rewrite at the end gives the bits of ops-basic's rewrites after the product and after
  FusedConv's epilogue (Z and the activation: ops-basic's own calls).

Work, per image: the im2col copies in runs of groups or channels, then the products in units
(runs of groups, a group's output columns or W's rows), both on the session's intra-op threads;
the units depend on the shapes only, and an output's arithmetic never depends on its unit.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext
from graphrt_ops_basic import conv_exact as basic_exact
from graphrt_ops_basic import fused as basic_fused
from graphrt_ops_basic._geometry import Staging, Window, call_all, staging
from graphrt_ops_basic.unary import plan_exact

from . import _native

F32 = np.dtype(np.float32)
#: Columns the native exact kernel takes in vectors, per ISA (kernels_<isa>.cpp: Vec::W); a
#: row with more than one column past a multiple is padded (its last columns go one by one).
VECTOR = {"scalar": 1, "avx2": 8, "avx512": 16}
#: Columns per product unit are a multiple of this (EU * W: the kernel's widest block).
CHUNK = {"scalar": 4, "avx2": 16, "avx512": 32}
#: Rows per product unit are a multiple of this (ER: the kernel's row block).
ROWS = 4
#: Multiply-adds per product unit, and the most units of one image.
UNIT_MACS = 1 << 22
MAX_UNITS = 16
#: Bytes of im2col per copy unit, and the most copy units of one image.
COPY_BYTES = 1 << 20
MAX_COPIES = 8
#: The most bytes of one column matrix; a larger one is built and multiplied in blocks of
#: output rows (a 3x3 layer of 64 channels on a 512 x 512 map would need 600 MiB at once).
COLS_BYTES = 1 << 25
#: The most row blocks a plan holds (a 32 MiB column matrix each: 128 TiB of output rows);
#: beyond it the output cannot fit any budget and the table's kernel plans the refusal.
MAX_BLOCKS = 1 << 22


@dataclasses.dataclass(frozen=True)
class ExactPlan:
    w: Window
    st: Staging
    group: int
    weight: np.ndarray | None  # (M, depth [+ 1]) C-contiguous, when constant (+ B: see aug)
    bias: np.ndarray | None  # (M, 1), when constant and not in ``weight``
    aug: bool  # B is W's last column and each group's matrix ends in a row of ones
    buf: int | None  # scratch: X staged (padded, split by stride phase) for kernels > 1x1
    cols: int | None  # scratch: one image's column matrix; None: X (C, positions) in place
    acc: int | None  # scratch: one image's products (M, width), when width > positions
    width: int  # columns of the column matrix (one block's positions, padded past a tail)
    blocks: tuple[tuple[int, int], ...]  # runs of output rows (of the first output axis)
    copies: tuple[tuple[tuple[int, int, int, int], ...], ...]  # per block: (g0, g1, c0, c1)
    units: tuple[tuple[tuple[int, int, int, int, int, int], ...], ...]  # per block: below
    fused: bool  # FusedConv: the epilogue below follows (Z, the activation)
    epilogue: Any = None  # basic_fused.Epilogue without its NaN rewrite


@dataclasses.dataclass(frozen=True)
class NativeExactPlan:
    """The native convolution's exact plan (a constant weight, enough output channels per
    group to fill its tiles): the same loops as fast mode's kernels (Winograd aside), each term
    a multiply then an add in the canonical order, the first assigned, then ``+ B``."""

    native: Any  # _native.ConvPlan(exact=True)
    work: int | None  # scratch: the staged image (unit-stride kernels)
    bias: np.ndarray | None  # a constant B, contiguous float32
    fused: bool
    epilogue: Any = None  # FusedConv's: basic_fused.Epilogue without its NaN rewrite


#: Fewest output channels per group for the native exact plan (as fast mode's native plan),
#: and the shallowest window (channels per group x taps): shallower ones ran faster as im2col
#: and the exact GEMM (light_shufflenet's grouped 1x1 layers of depth 6-68: 77 -> 291 us
#: natively; light_resnet50's 1x1 64->64 on 56 x 56: 365 -> 450 us; depth 136-256 even,
#: 3x3 layers 1.3-1.5x faster natively).
NATIVE_MIN_GROUP_CHANNELS = 8
NATIVE_MIN_DEPTH = 128


def infer(kernel: Any, ctx: InferContext, trial: InferContext) -> None:
    """Plan ``kernel`` (ops-simd's Conv or FusedConv) natively in exact mode, where it can;
    else the table's kernel plans it.  ``trial``: the table's kernel planned on a copy of ctx
    (its checks passed, its types)."""
    plan = trial.prepared
    (dtype, out_shape), *_ = trial.output_types()
    fused = isinstance(kernel.base, basic_fused.FusedConv)
    if (
        not isinstance(plan, basic_exact.ExactConvPlan)
        or dtype != F32
        or any(ctx.dtype(i) != F32 for i in range(ctx.num_inputs) if ctx.has_input(i))
        or len(out_shape) != 4
        or (fused and _grown(plan.epilogue.residual))
    ):
        return kernel.fallback(ctx)
    ctx.set_output(0, dtype, out_shape)
    epilogue = _epilogue(kernel, ctx, out_shape) if fused else None
    native = _native_plan(kernel, ctx, plan, out_shape, epilogue)
    if native is not None:
        ctx.prepared = native
        return
    isa = kernel.isa
    w, g = plan.w, plan.group
    x = ctx.shape(0)
    n_img, c, m = x[0], x[1], out_shape[1]
    taps, positions = math.prod(w.kernel), math.prod(w.out)
    depth = (c // g) * taps
    st = staging(w, split=True)
    oh, ow = w.out[0], positions // w.out[0]
    per = max(1, COLS_BYTES // (4 * g * (depth + 1) * ow))  # output rows per block
    if oh > per * MAX_BLOCKS:  # an output no budget admits (pads of 2**31): nothing to plan
        return kernel.fallback(ctx)
    blocks = ((0, oh),) if taps == 1 or per >= oh else _runs(oh, per)
    vec = VECTOR.get(isa, 1)
    width = (blocks[0][1] - blocks[0][0]) * ow
    if len(blocks) == 1 and positions % vec > 1:  # > 1 column left to the scalar loop (14x14)
        width = -(-positions // vec) * vec
    weight = ctx.known_value(1)
    bias = ctx.known_value(2) if ctx.has_input(2) else None
    # B as a last term t = B[m] * 1 (exact) saves two passes over Y (the add, the NaN rewrite)
    # where a column matrix is copied anyway or copying X costs less than those passes
    # (not for an empty sum: ops-basic's +0 + B turns B = -0 into +0, B * 1 would not)
    aug = (
        weight is not None
        and bias is not None
        and depth > 0
        and (taps > 1 or st.copy or width != positions or 2 * c <= 3 * m)
    )
    if weight is not None:
        weight = weight.reshape(m, -1).astype(F32)
        if aug:
            weight = np.concatenate([weight, bias.reshape(m, 1).astype(F32)], axis=1)
        weight = np.ascontiguousarray(weight)
    if bias is not None:
        bias = None if aug else np.ascontiguousarray(bias.reshape(m, 1), dtype=F32)
    direct = taps == 1 and width == positions and not st.copy and not aug
    buf = ctx.add_scratch(F32, st.shape(n_img, c)) if st.copy and taps > 1 else None
    cols = None if direct else ctx.add_scratch(F32, (g * (depth + aug), width))
    acc = ctx.add_scratch(F32, (m, width)) if width > positions else None  # padded columns
    spans = [width if len(blocks) == 1 else (r1 - r0) * ow for r0, r1 in blocks]
    copies = tuple(() if direct else _copy_units(g, c // g, c * taps * n * 4) for n in spans)
    units = tuple(_product_units(g, m // g, depth + aug, n, CHUNK.get(isa, 1)) for n in spans)
    ctx.prepared = ExactPlan(
        w, st, g, weight, bias, aug, buf, cols, acc, width, blocks, copies, units, fused,
        epilogue,
    )  # fmt: skip


def _epilogue(kernel: Any, ctx: InferContext, out_shape: Sequence[int]) -> Any:
    """FusedConv's exact epilogue (Z, the activation; ops-basic's calls), NaN rewrite aside."""
    act = kernel.base.act
    residual = basic_fused.Residual(kernel.base.z_first, None) if ctx.has_input(3) else None
    sigmoid = None
    if act.kind == "Sigmoid":
        sigmoid = plan_exact(ctx, F32, math.prod(out_shape), extra=1)
    return basic_fused.Epilogue(act, False, None, None, None, None, None, residual, sigmoid)


def _native_plan(
    kernel: Any, ctx: InferContext, plan: Any, out_shape: Sequence[int], epilogue: Any
) -> NativeExactPlan | None:
    """The native convolution's exact plan, where it serves the node (else None: the
    im2col path below, which also refuses what no plan can hold)."""
    weight, w, g = ctx.known_value(1), plan.w, plan.group
    depth = ctx.shape(0)[1] // g * math.prod(w.kernel)
    if weight is None or out_shape[1] // g < NATIVE_MIN_GROUP_CHANNELS or depth < NATIVE_MIN_DEPTH:
        return None
    if max(*w.strides, *w.dilations, *w.begin, *w.out) >= 2**63:
        return None
    try:  # the plan checks every size it derives
        native = native_conv_plan(ctx, plan, kernel.isa, exact=True)
    except ValueError:
        return None
    work = ctx.add_scratch(F32, (native.work_floats,)) if native.work_floats else None
    return NativeExactPlan(native, work, constant_bias(ctx), epilogue is not None, epilogue)


def native_conv_plan(
    ctx: InferContext,
    plan: Any,
    isa: str,
    exact: bool = False,
    kernel: str = "auto",
    x_shape: Sequence[int] | None = None,
    **layout: Any,
) -> Any:
    """The native convolution's plan (``_native.ConvPlan``) of ops-basic's Conv plan on ctx's
    shapes (X's planar ``x_shape`` where X is blocked) and constant weight (``kernel``: auto's
    choice, or one the geometry may refuse, which leaves auto's; ``layout``: ``x_block`` and
    ``y_blocked``); a ValueError where it refuses the geometry or a size."""
    w = plan.w
    shape = list(ctx.shape(0) if x_shape is None else x_shape)
    return _native.conv_plan(
        np.ascontiguousarray(ctx.known_value(1), dtype=F32), plan.group, shape,
        list(w.strides), list(w.dilations), list(w.begin), list(w.out), isa, kernel, exact,
        **layout,
    )  # fmt: skip


def constant_bias(ctx: InferContext) -> np.ndarray | None:
    """B as a contiguous float32 vector where it is a constant, else None."""
    bias = ctx.known_value(2) if ctx.has_input(2) else None
    return None if bias is None else np.ascontiguousarray(bias.reshape(-1), dtype=F32)


def conv_call(
    ctx: KernelContext,
    native: Any,
    work: int | None,
    bias: np.ndarray | None,
    inputs: Sequence[Any],
    y: np.ndarray,
    activation: str,
    z: np.ndarray | None,
) -> Any:
    """A native plan's bound call on the plugin's threads (as many as the session's intra-op
    threads)."""
    bias, buf = call_arrays(ctx, work, bias, inputs)
    return _native.ConvCall(native, inputs[0], buf, y, bias, activation, ctx.threads, z)


def call_arrays(
    ctx: KernelContext, work: int | None, bias: np.ndarray | None, inputs: Sequence[Any]
) -> tuple[np.ndarray | None, np.ndarray]:
    """A bound convolution call's B (the plan's constant, else the run's input) and work
    buffer (the staged image's scratch ``work``, or an empty one)."""
    if bias is None and len(inputs) > 2 and inputs[2] is not None:
        bias = np.ascontiguousarray(inputs[2], dtype=F32)
    return bias, ctx.scratch[work] if work is not None else np.empty(0, F32)


def bind_native_plan(
    kernel: Any, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
) -> Callable[[], None]:
    """One bound native call on the plugin's threads, FusedConv's epilogue, the NaN rewrite."""
    p: NativeExactPlan = ctx.prepared
    x, y = inputs[0], outputs[0]
    if not (x.flags.c_contiguous and y.flags.c_contiguous):  # views: copied on every call
        return functools.partial(_with_contiguous, kernel, ctx, inputs, outputs)
    calls = [conv_call(ctx, p.native, p.work, p.bias, inputs, y, "none", None)]
    if p.fused:
        z = inputs[3] if len(inputs) > 3 else None
        calls += basic_fused.epilogue_calls(ctx, p.epilogue, y, z=z)
    calls.append(functools.partial(_native.canonicalize_nan, y))
    return functools.partial(call_all, calls)


def _grown(residual: basic_fused.Residual | None) -> bool:
    """A Z that broadcasts Y to a larger shape: the table's kernel (a product in scratch)."""
    return residual is not None and residual.grown is not None


def _runs(n: int, per: int) -> tuple[tuple[int, int], ...]:
    return tuple((lo, min(lo + per, n)) for lo in range(0, n, per))


def _copy_units(groups: int, cg: int, nbytes: int) -> tuple[tuple[int, int, int, int], ...]:
    """im2col units of one image: runs of whole groups, or runs of one group's channels."""
    count = max(1, min(MAX_COPIES, nbytes // COPY_BYTES))
    if count <= groups:
        per = -(-groups // count)
        return tuple((g, min(g + per, groups), 0, cg) for g in range(0, groups, per))
    step = -(-cg // -(-count // groups))
    return tuple(
        (g, g + 1, lo, min(lo + step, cg)) for g in range(groups) for lo in range(0, cg, step)
    )


def _product_units(
    groups: int, rows: int, depth: int, width: int, chunk: int
) -> tuple[tuple[int, int, int, int, int, int], ...]:
    """Units of one image's products, from the shapes alone: runs of whole groups, or each
    group's columns (in multiples of ``chunk``) or rows (in multiples of ROWS)."""
    macs = groups * rows * max(depth, 1) * width
    want = max(1, min(MAX_UNITS, macs // UNIT_MACS))
    if want <= groups:
        per = -(-groups // want)
        return tuple((g, min(g + per, groups), 0, width, 0, rows) for g in range(0, groups, per))
    parts = -(-want // groups)
    chunks = -(-width // chunk)
    if chunks >= parts:
        step = -(-chunks // parts) * chunk
        spans = [(j, min(j + step, width), 0, rows) for j in range(0, width, step)]
    else:
        per = -(-rows // parts)
        step = -(-per // ROWS) * ROWS
        spans = [(0, width, r, min(r + step, rows)) for r in range(0, rows, step)]
    return tuple((g, g + 1, *span) for g in range(groups) for span in spans)


def _shaped(a: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """A view of ``a`` with ``shape`` (an error rather than a silent copy)."""
    v = a.view()
    v.shape = tuple(shape)
    return v


def bind(
    kernel: Any, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
) -> Callable[[], None]:
    """Every call of one exact run, on views made once per run state."""
    p: ExactPlan = ctx.prepared
    x, y = inputs[0], outputs[0]
    w_in = inputs[1] if p.weight is None else None
    b_in = inputs[2] if p.bias is None and not p.aug and len(inputs) > 2 else None
    z = inputs[3] if len(inputs) > 3 else None
    arrays = [a for a in (x, w_in, b_in, z, y) if a is not None]
    if not all(a.flags.c_contiguous for a in arrays):  # views: copied on every call
        return functools.partial(_with_contiguous, kernel, ctx, inputs, outputs)
    isa = kernel.isa
    n_img, m = y.shape[:2]
    c = x.shape[1]
    g, positions = p.group, math.prod(p.w.out)
    mg, depth = m // g, (c // g) * math.prod(p.w.kernel)
    weight = p.weight if p.weight is not None else w_in.reshape(m, -1)
    bias = p.bias if p.bias is not None else (None if b_in is None else b_in.reshape(m, 1))
    calls: list[Callable[[], Any]] = []
    buf = ctx.scratch[p.buf] if p.buf is not None else None
    if buf is not None:
        calls += p.st.fill_calls(p.w, x, buf, 0)
    y3 = y.reshape(n_img, m, positions)
    acc = ctx.scratch[p.acc] if p.acc is not None else None
    cols = ctx.scratch[p.cols] if p.cols is not None else None
    if cols is not None and p.aug:  # each group's last row: ones, B's factor
        calls.append(functools.partial(cols.reshape(g, depth + 1, -1)[:, depth].fill, 1.0))
    src = x[:, None] if buf is None else buf  # (N, planes, C, *extents): what taps read
    ow = positions // p.w.out[0]
    for i in range(n_img):
        for b, (r0, r1) in enumerate(p.blocks):
            if cols is None:  # 1x1, unit stride, no pads: X is (C, positions)
                mat = x[i].reshape(c, positions)
            else:
                mat = cols
                copies = _im2col(p, b, x[i : i + 1], src[i : i + 1], cols, depth)
                calls.append(_parallel(ctx, copies))
            out = acc if acc is not None else y3[i][:, r0 * ow : r1 * ow]
            products = [
                functools.partial(_products, weight, mat, out, isa, u, mg, depth + p.aug)
                for u in p.units[b]
            ]
            calls.append(_parallel(ctx, products))
        out = y3[i] if acc is None else acc
        if bias is not None:
            calls.append(functools.partial(np.add, out[:, :positions], bias, out=y3[i]))
        elif acc is not None:
            calls.append(functools.partial(np.copyto, y3[i], acc[:, :positions]))
        if bias is not None and not p.fused:
            calls.append(functools.partial(_native.canonicalize_nan, y3[i]))
    if p.fused:
        calls += basic_fused.epilogue_calls(ctx, p.epilogue, y, z=z)
        calls.append(functools.partial(_native.canonicalize_nan, y))
    return calls[0] if len(calls) == 1 else functools.partial(call_all, calls)


def _im2col(
    p: ExactPlan,
    block: int,
    image: np.ndarray,
    staged: np.ndarray,
    cols: np.ndarray,
    depth: int,
) -> list[Callable[[], Any]]:
    """The copy units of one image's block of output rows (``image``: X[i:i+1], ``staged``:
    its (1, planes, C, *extents) staging) into ``cols``: each copies a run of groups or of one
    group's channels, every tap: one strided copy per staging plane, or for a 1x1 kernel (one
    block), the staging's own fill (X's strided positions, +0 for the pads) straight into the
    column matrix."""
    w, st, g = p.w, p.st, p.group
    c = image.shape[1]
    cg, width = c // g, cols.shape[1]
    r0, r1 = p.blocks[block]
    out = (r1 - r0, *w.out[1:])
    rows = cols.reshape(g, -1, width)[:, :depth, : math.prod(out)]
    dst = _shaped(rows, (g, cg, *w.kernel, *out))
    units = []
    if math.prod(w.kernel) == 1:
        x5 = _shaped(image, (1, g, cg, *image.shape[2:]))
        d6 = _shaped(dst, (1, 1, g, cg, *w.out))
        for g0, g1, c0, c1 in p.copies[block]:
            part = (slice(None), slice(g0, g1), slice(c0, c1))
            fills = st.fill_calls(w, x5[part], d6[(slice(None), *part)], 0)
            units.append(functools.partial(call_all, fills))
        return units
    views = [  # per plane: (g, cg, *its taps, *out), the block's output rows
        _shaped(v := st.group_view(w, staged, k)[0], (g, cg, *v.shape[1:]))[..., r0:r1, :]
        for k in range(len(st.groups))
    ]
    kslices = [group[3] for group in st.groups]
    for g0, g1, c0, c1 in p.copies[block]:
        part = (slice(g0, g1), slice(c0, c1))
        unit = [
            functools.partial(np.copyto, dst[(*part, *ks)], v[part])
            for ks, v in zip(kslices, views)
        ]
        units.append(functools.partial(call_all, unit))
    return units


def _products(
    weight: np.ndarray,
    mat: np.ndarray,
    out: np.ndarray,
    isa: str,
    unit: tuple[int, int, int, int, int, int],
    mg: int,
    depth: int,
) -> None:
    """One unit: for each of its groups, W's rows [r0, r1) of the group times its columns
    [j0, j1) of the column matrix, into the same block of ``out`` (M, width)."""
    g0, g1, j0, j1, r0, r1 = unit
    for gi in range(g0, g1):
        a = weight[gi * mg : (gi + 1) * mg]
        b = mat[gi * depth : (gi + 1) * depth, j0:j1]
        o = out[gi * mg : (gi + 1) * mg, j0:j1]
        _native.gemm_exact(a, b, o, isa, r0, r1)


def _parallel(ctx: KernelContext, units: list[Callable[[], Any]]) -> Callable[[], None]:
    if len(units) == 1:
        return units[0]
    return functools.partial(ctx.parallel_for, len(units), functools.partial(_call_one, units))


def _call_one(units: list[Callable[[], Any]], i: int) -> None:
    units[i]()


def _with_contiguous(
    kernel: Any, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
) -> None:
    """The run on contiguous copies of the inputs (and of Y, copied back), bound as the
    kernel binds its plan."""
    copied = [np.ascontiguousarray(a) if isinstance(a, np.ndarray) else a for a in inputs]
    y = outputs[0]
    out = y if y.flags.c_contiguous else np.empty(y.shape, y.dtype)
    kernel.bind_native(ctx, copied, [out, *outputs[1:]])()
    if out is not y:
        np.copyto(y, out)
