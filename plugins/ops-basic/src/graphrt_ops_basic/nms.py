"""NonMaxSuppression: greedy selection of boxes by descending score, per batch and class.

For each (batch, class) row, the boxes scoring strictly above ``score_threshold`` (all of them
when it is absent) are taken by descending score, ties by ascending box index, NaN scores last
(-0 and +0 tie); a box is selected unless its IoU with an already selected box is strictly
greater than ``iou_threshold``, until ``max_output_boxes_per_class`` are selected.  The output is
``[num_selected, 3]`` int64 rows ``[batch, class, box]``, row by row in selection order.

The IoU is onnxruntime's: corners ordered by min/max (``center_point_box`` 1 converts
``[xc, yc, w, h]`` with ``xc -/+ w / 2``), ``inter = max(0, dx) * max(0, dy)``,
``union = (area1 + area2) - inter``, ``iou = inter / union``; an empty intersection or box,
and any NaN coordinate, never suppresses.  graphrt-ops-simd's native kernel computes the same
operations in the same order and selects the same boxes.

The greedy loop is not run box by box.  Every row is ordered with one sort of int64 keys
(score rank then reversed index, so ties need no stable sort), then the rows advance together
through blocks of ``T`` candidates: a block's candidates are tested against the boxes already
selected (``S x T`` IoUs) and against each other (``T x T``), and the greedy choice within the
block is the fixed point of ``keep[j] = alive[j] and no kept i < j suppresses j``, reached by a
few whole-block iterations (after k of them the first k positions are final).  The first block
is sized to the limit, so a small ``max_output_boxes_per_class`` looks at few boxes; when it
settles every row (the usual case) the output comes straight from it.  (Greedy rounds -- pick
the first box left, drop what it suppresses -- cost more numpy calls than the fixed point even
for a limit of 3: about 17 against 10 us on two rows of 16.)

Exact: each IoU is the same sequence of single IEEE operations in the boxes' type (float16
boxes in float32) -- subtract, multiply, add, divide, min, max, compare -- however it is
vectorised, so the selection does not depend on the machine or the thread count.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import KernelContext, NodeInfo, OpKernel

#: Most pairwise IoUs (rows x block x block) computed at once.
PAIRS = 1 << 14
#: Smallest block of candidates.
MIN_BLOCK = 16
#: The rank of a box that is not a candidate (below every float32 score's rank, NaN's included
#: when a score threshold is given; without one, NaN scores take it and come last).
LOW = np.iinfo(np.int32).min


class NonMaxSuppression(OpKernel):
    supports_exact = True
    outputs_data_dependent = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.center = node.attr("center_point_box", 0)
        if self.center not in (0, 1):
            raise self.fail(f"center_point_box must be 0 or 1, got {self.center}")

    def arguments(self, inputs: Sequence[Any]) -> tuple[Any, ...]:
        """The checked inputs: boxes, scores, the limit (a Python int, at most the box count),
        the IoU threshold (0-d, the boxes' type) and the score threshold (0-d, the scores' type,
        or None).  graphrt-ops-simd's kernel shares these checks."""
        inputs = list(inputs) + [None] * (5 - len(inputs))
        boxes, scores = inputs[0], inputs[1]
        self._check(boxes, scores)
        limit = self._scalar(inputs[2], "max_output_boxes_per_class")
        limit = 0 if limit is None else max(int(limit), 0)
        iou = self._scalar(inputs[3], "iou_threshold")
        iou = np.zeros((), boxes.dtype) if iou is None else iou.astype(boxes.dtype)
        if not 0 <= float(iou) <= 1:
            raise self.fail(f"iou_threshold {float(iou)} is not in [0, 1]", "invalid_input")
        floor = self._scalar(inputs[4], "score_threshold")
        if floor is not None:
            floor = floor.astype(scores.dtype)
        return boxes, scores, min(limit, scores.shape[2]), iou, floor

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        boxes, scores, limit, iou, floor = self.arguments(inputs)
        batches, classes, _ = scores.shape
        if limit == 0 or batches * classes == 0:
            ctx.allocate_output(0, np.int64, (0, 3))
            return
        if boxes.dtype.itemsize < 4:  # float16 boxes: IoUs in float32, where values are exact
            boxes, iou = boxes.astype(np.float32), iou.astype(np.float32)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            rows, boxes_of = _greedy(self.center, boxes, classes, scores, floor, iou, limit)
        out = ctx.allocate_output(0, np.int64, (rows.size, 3))
        np.floor_divide(rows, classes, out=out[:, 0])
        np.remainder(rows, classes, out=out[:, 1])
        out[:, 2] = boxes_of

    def _scalar(self, value: Any, what: str) -> Any:
        if value is None:
            return None
        if value.size != 1:
            message = f"{what} must be one value, got shape {list(value.shape)}"
            raise self.fail(message, "invalid_input")
        return value.reshape(())

    def _check(self, boxes: np.ndarray, scores: np.ndarray) -> None:
        if boxes.dtype.kind != "f" or scores.dtype != boxes.dtype:
            message = f"boxes ({boxes.dtype}) and scores ({scores.dtype}) must be one float type"
            raise self.fail(message, "invalid_input")
        if (
            boxes.ndim != 3
            or boxes.shape[2] != 4
            or scores.ndim != 3
            or scores.shape[0] != boxes.shape[0]
            or scores.shape[2] != boxes.shape[1]
        ):
            message = (
                f"boxes {list(boxes.shape)} and scores {list(scores.shape)} must be "
                "(batches, boxes, 4) and (batches, classes, boxes)"
            )
            raise self.fail(message, "invalid_input")


class _Order:
    """Per row, the candidate boxes by descending score (ties by ascending index, NaN scores
    last), then the other boxes."""

    def __init__(self, scores: np.ndarray, floor: Any) -> None:
        n = scores.shape[1]
        candidate = None if floor is None else scores > floor
        if scores.dtype.itemsize > 4:  # no room for the index beside the score in 64 bits
            self.count = None if candidate is None else np.count_nonzero(candidate, axis=1)
            nan = np.isnan(scores)
            late = nan.astype(np.int8) if candidate is None else np.where(candidate, nan, 2)
            index = np.broadcast_to(np.arange(n), scores.shape)
            self.index = np.lexsort((index, np.where(nan, np.inf, -scores), late), axis=-1)
            self.keys = None
            return
        # float32 (and smaller) scores as int32 ranks ordered as the values (-0 joins +0),
        # shifted above the reversed index: one ascending sort of distinct int64 keys, read
        # backwards, gives the order without a stable sort
        if candidate is not None and floor >= 0 and scores.dtype == np.float32:
            # the candidates are positive: their bits are already ranks
            bits = np.where(candidate, scores.view(np.int32), LOW)
        else:
            bits = np.add(scores, np.float32(0), dtype=np.float32).view(np.int32)
            sign = np.right_shift(bits, 31)
            np.bitwise_and(sign, 0x7FFFFFFF, out=sign)
            np.bitwise_xor(bits, sign, out=bits)
            # NaN is never a candidate; without a threshold it is one, ranked last
            np.copyto(bits, LOW, where=np.isnan(scores) if candidate is None else ~candidate)
        shift, reverse = _reverse_index(n)
        self.mask = (1 << shift) - 1
        #: keys of the boxes that are not candidates are at most this (None: all are)
        self.lowest = None if candidate is None else (LOW << shift) + self.mask
        keys = np.left_shift(bits, shift, dtype=np.int64)
        np.bitwise_or(keys, reverse, out=keys)
        keys.sort(axis=1)
        self.keys = keys[:, ::-1]

    def block(self, rows: np.ndarray | None, start: int, stop: int) -> tuple[Any, Any]:
        """Box indices of positions [start, stop) of the given rows (None: all), and which
        of them are candidates (None: all)."""
        if self.keys is None:
            index = self.index if rows is None else self.index[rows]
            alive = None
            if self.count is not None:
                count = self.count if rows is None else self.count[rows]
                alive = np.arange(start, stop) < count[:, None]
            return index[:, start:stop], alive
        keys = self.keys[:, start:stop] if rows is None else self.keys[rows, start:stop]
        alive = None if self.lowest is None else keys > self.lowest
        return self.mask - (keys & self.mask), alive


@functools.lru_cache(maxsize=16)
def _reverse_index(n: int) -> tuple[int, np.ndarray]:
    """The bits an index takes and ``mask - arange(n)`` (read-only): larger for earlier boxes."""
    shift = max(int(n - 1).bit_length(), 1)
    reverse = (1 << shift) - 1 - np.arange(n, dtype=np.int64)
    reverse.flags.writeable = False
    return shift, reverse


def _corners(center: int, boxes: np.ndarray, start: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """(5, rows, K) x_min, y_min, x_max, y_max, area of boxes ``idx`` (rows, K) of the
    flattened (batches * boxes, 4) ``boxes``, each row's boxes from ``start`` (rows,)."""
    order = _CENTER if center else _CORNER
    raw = np.take(boxes, ((start[:, None] + idx) * 4)[None] + order)  # (4, rows, K)
    out = np.empty((5, *idx.shape), raw.dtype)
    if center:  # [x_center, y_center, width, height]
        half = raw[2:4] / raw.dtype.type(2)
        np.subtract(raw[0:2], half, out=out[0:2])
        np.add(raw[0:2], half, out=out[2:4])
    else:  # [y1, x1, y2, x2], any two diagonal corners: read as x1, y1, x2, y2
        np.minimum(raw[0:2], raw[2:4], out=out[0:2])
        np.maximum(raw[0:2], raw[2:4], out=out[2:4])
    extent = np.subtract(out[2:4], out[0:2], out=raw[0:2])
    np.multiply(extent[0], extent[1], out=out[4])
    return out


_CENTER = np.arange(4)[:, None, None]
_CORNER = np.array([1, 0, 3, 2])[:, None, None]


def _suppressed(a: np.ndarray, b: np.ndarray, iou: np.ndarray) -> np.ndarray:
    """(rows, S, T): whether box s of ``a`` (5, rows, S) and box t of ``b`` (5, rows, T),
    corners as ``_corners`` gives them, overlap by an IoU strictly above ``iou``."""
    at, bt = a[:, :, :, None], b[:, :, None, :]
    lo = np.maximum(at[0:2], bt[0:2])
    hi = np.minimum(at[2:4], bt[2:4])
    np.subtract(hi, lo, out=hi)
    lo.fill(0)  # zeros: np.maximum against a 0-d zero takes numpy's slower scalar path
    np.maximum(hi, lo, out=hi)
    inter = np.multiply(hi[0], hi[1], out=lo[0])
    union = np.add(at[4], bt[4], out=lo[1])
    np.subtract(union, inter, out=union)
    np.divide(inter, union, out=inter)  # 0 / 0 (empty boxes) is NaN: never suppresses
    return inter > iou


@functools.lru_cache(maxsize=64)
def _later(size: int) -> np.ndarray:
    """(size, size): whether i < j, read-only."""
    later = np.triu(np.ones((size, size), bool), 1)
    later.flags.writeable = False
    return later


def _settle(alive: np.ndarray | None, pairs: np.ndarray) -> np.ndarray:
    """The greedy choice within a block: ``keep[j] = alive[j] and no kept i < j has
    pairs[i, j]`` (pairs (rows, T, T), true only for i < j), by whole-block iterations from
    ``keep = alive`` to the fixed point (after k of them the first k positions are final)."""
    if alive is None:
        alive = np.ones(pairs.shape[::2], bool)
    keep = alive
    if not pairs.any():
        return keep
    while True:
        hit = (pairs & keep[:, :, None]).any(axis=1)
        nxt = np.greater(alive, hit)  # alive and not hit
        if not np.not_equal(nxt, keep).any():
            return keep
        keep = nxt


def _greedy(center, boxes, classes, scores, floor, iou, limit):
    """The selected boxes: (row, box) pairs, row by row in selection order."""
    batches, _, n = scores.shape
    rows = batches * classes
    order = _Order(scores.reshape(rows, n), floor)
    flat = boxes.reshape(-1)
    first = (np.arange(rows) // classes) * n  # each row's first box in (batches * boxes)
    chosen = taken = None
    active = None
    start = 0
    while True:
        lead = rows if active is None else active.size
        need = limit if taken is None else int((limit - taken[active]).max())
        most = max(MIN_BLOCK, int((PAIRS // lead) ** 0.5))
        size = min(n - start, max(MIN_BLOCK, need + need // 4), most)
        stop = start + size
        idx, candidate = order.block(active, start, stop)  # (A, T)
        alive = candidate
        row_first = first if active is None else first[active]
        cand = _corners(center, flat, row_first, idx)  # (5, A, T)
        if taken is not None:  # against the boxes already selected
            done = int(taken[active].max())
            picked = _corners(center, flat, row_first, chosen[active, :done])
            old = _suppressed(picked, cand, iou)
            old &= (np.arange(done) < taken[active, None])[:, :, None]
            fresh = ~old.any(axis=1)
            alive = fresh if alive is None else alive & fresh
        pairs = _suppressed(cand, cand, iou)
        pairs &= _later(size)
        keep = _settle(alive, pairs)
        slot = np.cumsum(keep, axis=1)
        got = slot[:, -1]
        # a row is done with its limit reached or its candidates exhausted
        done_rows = got >= (limit if taken is None else limit - taken[active])
        if stop < n and candidate is not None:
            done_rows |= ~candidate[:, -1]
        if taken is None and (stop >= n or done_rows.all()):  # the usual case: one block
            keep &= slot <= limit
            r, t = np.nonzero(keep)
            return (r if active is None else active[r]), idx[r, t]
        if taken is None:
            chosen = np.zeros((rows, limit), np.int64)
            taken = np.zeros(rows, np.int64)
            active = np.arange(rows)
        room = limit - taken[active]
        keep &= slot <= room[:, None]
        r, t = np.nonzero(keep)
        chosen[active[r], slot[r, t] - 1 + taken[active[r]]] = idx[r, t]
        taken[active] += np.minimum(got, room)
        start = stop
        if start >= n:
            break
        active = active[~done_rows]
        if not active.size:
            break
    mask = np.arange(limit) < taken[:, None]
    return np.repeat(np.arange(rows), taken), chosen[mask]
