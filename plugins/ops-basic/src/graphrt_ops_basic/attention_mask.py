"""The additive attention bias of Attention: attn_mask, causal frontier, sliding window, padding.

Every source of masking becomes one additive bias (0 where a key is allowed, -inf where it is
not, the mask's own values for a float mask) of the smallest shape that broadcasts to the
scores:

* ``attn_mask``: a bool mask is 0 where True and -inf where False; any other type is added as
  its values.  A mask shorter than ``total_len`` in its last dimension is padded with -inf
  (False) there, as the opset-24 text says (the opset-23 reference pads the same way).
* ``is_causal`` and the opset-25 window: query ``i`` sits at absolute position ``p = i +
  offset``, where ``offset`` is the past length (internal cache), ``nonpad_kv_seqlen[b] -
  q_len`` (external cache, per batch) or 0; key ``j`` is allowed iff ``j <= p`` (causal),
  ``p - left <= j`` and ``j <= p + right`` (window bounds that are not -1).
* ``nonpad_kv_seqlen``: keys ``j >= nonpad[b]`` are padding, -inf.

The bias is keys-first, (total_len, batch | 1, heads | 1, q_len), as Attention lays out its
scores (attention.py): every reduction over the keys then runs across contiguous rows.  A
query whose bias is -inf for every key is fully masked: its probabilities (and so its output
row) are zero, decided on the bias rather than on the (possibly NaN) scores.

When only the causal/window structure with a fixed offset contributes, the bias is a constant
built once per plan; otherwise it is rebuilt in every run into scratch of its own (small)
shape, with the fully-masked queries found by one max-reduction over it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext

from ._util import constant

I64 = np.dtype(np.int64)


@dataclasses.dataclass(frozen=True)
class BiasPlan:
    """How a run builds the bias (or the constant bias itself)."""

    shape: tuple[int, int, int, int]  # (total_len, batch | 1, heads | 1, q_len)
    #: The constant bias (no mask, no nonpad_kv_seqlen) and its fully masked queries (or None).
    fixed: np.ndarray | None
    fixed_masked: np.ndarray | None
    # -- rebuilt per run ----------------------------------------------------------------
    bias: int | None  # scratch index (compute type, ``shape``)
    rows: int | None  # scratch: the fully masked queries (bool, (1, .., q_len))
    rows_max: int | None  # scratch: each query's largest bias
    any_row: int | None  # scratch: 0-d bool, whether any query is fully masked
    mask_rank4: tuple[int, ...] | None  # attn_mask viewed with 4 dims
    mask_len: int  # its last dimension (<= total_len), or total_len when it broadcasts
    mask_bool: bool
    structure: np.ndarray | None  # additive causal/window bias, fixed offset (total, 1, 1, q)
    per_batch: bool  # nonpad_kv_seqlen given: per-batch offsets and padding
    causal: bool
    left: int
    right: int
    offsets: tuple[int, int] | None  # scratch: two (1, batch, 1, 1) int64 arrays
    flags: tuple[int, int] | None  # scratch: two bool arrays of ``shape`` (per-batch rules)
    ij: np.ndarray | None  # (total, 1, 1, q_len) int64: i - j, for the per-batch rules
    ramp: np.ndarray | None  # (total, 1, 1, 1) int64: j


def plan_bias(
    ctx: InferContext,
    ct: np.dtype,
    batch: int,
    q_len: int,
    total: int,
    past: int,
    mask_shape: tuple[int, ...] | None,
    mask_dtype: np.dtype | None,
    nonpad: bool,
    causal: bool,
    left: int,
    right: int,
    broadcast_keys: bool = False,
) -> BiasPlan | None:
    """The bias of one plan; None when nothing masks (no mask, not causal, no window/nonpad).

    ``broadcast_keys``: a mask with one key applies to every key (numpy broadcasting, as the
    unfused Add of com.graphrt.Attention's graph did) instead of being padded with -inf."""
    windowed = left >= 0 or right >= 0
    if mask_shape is None and not nonpad and not causal and not windowed:
        return None
    structure = None
    if (causal or windowed) and not nonpad:
        structure = _structure(ct, q_len, total, past, causal, left, right).reshape(
            total, 1, 1, q_len
        )
    if mask_shape is None and not nonpad:
        fixed = structure.reshape(total, 1, 1, q_len)
        fixed.flags.writeable = False
        masked = None
        if total:
            masked = np.isneginf(fixed.max(axis=0, keepdims=True))
            masked = masked if masked.any() else None
        return BiasPlan(
            fixed.shape, fixed, masked, None, None, None, None, None, 0, False, None, False, causal,
            left, right, None, None, None, None,
        )  # fmt: skip
    mask4 = None
    shape = [total, 1, 1, q_len]
    if mask_shape is not None:
        mask4 = (1,) * (4 - len(mask_shape)) + tuple(mask_shape)
        shape[1:3] = mask4[:2]
    if nonpad:
        shape[1] = batch
    shape_t = tuple(shape)
    rows_shape = (1,) + shape_t[1:]
    offsets = flags = ij = ramp = None
    if nonpad:
        offsets = (ctx.add_scratch(I64, (1, batch, 1, 1)), ctx.add_scratch(I64, (1, batch, 1, 1)))
        flags = (ctx.add_scratch(np.bool_, shape_t), ctx.add_scratch(np.bool_, shape_t))
        ramp = np.arange(total, dtype=I64).reshape(total, 1, 1, 1)
        ij = np.arange(q_len, dtype=I64) - ramp
    return BiasPlan(
        shape_t,
        None,
        None,
        ctx.add_scratch(ct, shape_t),
        ctx.add_scratch(np.bool_, rows_shape),
        ctx.add_scratch(ct, rows_shape),
        ctx.add_scratch(np.bool_, ()),
        mask4,
        (total if broadcast_keys and mask4[-1] == 1 else mask4[-1]) if mask4 else 0,
        mask_dtype is not None and mask_dtype == np.bool_,
        structure,
        nonpad,
        causal,
        left,
        right,
        offsets,
        flags,
        ij,
        ramp,
    )


def _structure(
    ct: np.dtype, q_len: int, total: int, offset: int, causal: bool, left: int, right: int
) -> np.ndarray:
    """The additive (total, q_len) causal/window bias for one fixed offset."""
    diff = (np.arange(q_len, dtype=I64) + offset) - np.arange(total, dtype=I64)[:, None]
    banned = np.zeros(diff.shape, dtype=bool)
    if causal:
        banned |= diff < 0
    if left >= 0:
        banned |= diff > left
    if right >= 0:
        banned |= -diff > right
    out = np.zeros(diff.shape, dtype=ct)
    out[banned] = -np.inf
    return out


def build_bias(
    p: BiasPlan, scratch: Sequence[np.ndarray], mask: Any, nonpad: Any, q_len: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """(bias, fully masked queries or None) for this run's mask and nonpad_kv_seqlen."""
    if p.fixed is not None:
        return p.fixed, p.fixed_masked
    bias = scratch[p.bias]
    neg_inf = constant(bias.dtype, -np.inf)
    if mask is not None:
        m4 = mask.reshape(p.mask_rank4).transpose(3, 0, 1, 2)  # keys first
        head = bias[: p.mask_len]
        if p.mask_bool:
            np.copyto(head, neg_inf)
            np.copyto(head, constant(bias.dtype, 0), where=m4)
        else:
            np.copyto(head, m4, casting="unsafe")
        if p.mask_len < bias.shape[0]:
            bias[p.mask_len :] = neg_inf
    else:
        bias.fill(0)
    if p.structure is not None:
        np.add(bias, p.structure, out=bias)
    if p.per_batch:
        _per_batch_rules(p, scratch, bias, nonpad, q_len, neg_inf)
    if bias.shape[0] == 0:
        return bias, None
    rows_max, rows = scratch[p.rows_max], scratch[p.rows]
    np.maximum.reduce(bias, axis=0, keepdims=True, out=rows_max)
    np.equal(rows_max, neg_inf, out=rows)
    flag = scratch[p.any_row]
    np.logical_or.reduce(rows, axis=None, out=flag)  # (rows.any() would allocate its result)
    return bias, rows if flag else None


def _per_batch_rules(
    p: BiasPlan,
    scratch: Sequence[np.ndarray],
    bias: np.ndarray,
    nonpad: np.ndarray,
    q_len: int,
    neg_inf: np.ndarray,
) -> None:
    """Padding (keys j >= nonpad[b]) and the causal/window rules at offset nonpad[b] - q_len:
    with diff = i + off - j = ij + off, causal bans diff < 0, the window diff > left and
    -diff > right."""
    banned, tmp = (scratch[i] for i in p.flags)
    off, thr = (scratch[i] for i in p.offsets)
    lens = nonpad.reshape(off.shape)
    np.greater_equal(p.ramp, lens, out=banned)  # padding
    np.subtract(lens, constant(I64, q_len), out=off)
    rules = []
    if p.causal:
        rules.append((np.less, 0))
    if p.left >= 0:
        rules.append((np.greater, p.left))
    if p.right >= 0:
        rules.append((np.less, -p.right))
    for compare, bound in rules:  # ij <compare> bound - off
        np.subtract(constant(I64, bound), off, out=thr)
        compare(p.ij, thr, out=tmp)
        np.logical_or(banned, tmp, out=banned)
    np.copyto(bias, neg_inf, where=banned)


def mask_fits(mask_shape: tuple[int, ...], target: tuple[int, int, int, int]) -> str | None:
    """Why attn_mask cannot be used for scores of shape ``target`` (batch, heads, q, total),
    or None."""
    if len(mask_shape) > 4:
        return f"attn_mask has rank {len(mask_shape)}, at most 4 is allowed"
    if len(mask_shape) == 0:
        return "attn_mask must have at least one dimension"
    if mask_shape[-1] > target[-1]:
        return (
            f"attn_mask's last dimension {mask_shape[-1]} is longer than the total sequence "
            f"length {target[-1]}"
        )
    lead = (1,) * (4 - len(mask_shape)) + tuple(mask_shape[:-1])
    for have, want in zip(lead, target[:3]):
        if have not in (1, want):
            return f"attn_mask of shape {list(mask_shape)} does not broadcast to {list(target)}"
    return None
