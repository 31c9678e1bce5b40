"""The flat node table the tree-ensemble kernels walk, and the leaf-value table they sum.

Every tree of an ensemble goes into one node table: interior nodes hold a feature, a threshold,
a comparison and two children; a leaf is a node whose children are itself, so walking past a
leaf stays there.  A batch walks all (row, tree) pairs at once, one level per step, with numpy
``take``: the state of a pair is ``2 * node``, and the next state is ``next2[2 * node + cond]``
(the children pre-multiplied by 2), so each level is a handful of whole-array operations and
the number of steps is the ensemble's depth, never the number of rows or trees.  Pairs that
reached a leaf are dropped at a few levels of deep trees, since random forests are deep and
unbalanced: most paths end long before the deepest.  Trees go deepest first, in chunks of
about 8k pairs, so that a level's arrays stay in cache and a chunk stops at its own depth.

Comparisons: when every interior node uses one mode (the common case: all BRANCH_LEQ) a level
is one numpy comparison; otherwise each pair's mode, NaN rule and the bits (<=, <, ==, NaN,
member) of its value select the branch from a small truth table.  NaN follows the node's
``missing_value_tracks_true``; BRANCH_NEQ sends NaN to the true branch, as ``NaN != t`` is true.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

LEQ, LT, GTE, GT, EQ, NEQ, MEMBER, LEAF = range(8)
LEGACY_MODES = {
    "BRANCH_LEQ": LEQ,
    "BRANCH_LT": LT,
    "BRANCH_GTE": GTE,
    "BRANCH_GT": GT,
    "BRANCH_EQ": EQ,
    "BRANCH_NEQ": NEQ,
    "LEAF": LEAF,
}
_UNIFORM = {
    LEQ: np.less_equal,
    LT: np.less,
    GTE: np.greater_equal,
    GT: np.greater,
    EQ: np.equal,
    NEQ: np.not_equal,
}
#: (row, tree) pairs walked together: a level's arrays stay in cache.
CHUNK = 8192
#: Chunks at least this deep drop the pairs that reached a leaf at these fractions of their
#: depth (random forests: most paths end long before the deepest one).
DROP_DEPTH = 12
DROP_AT = (0.4, 0.55, 0.7)
#: Chunks of at most SMALL pairs drop every other level from level SMALL_FROM on, and stop
#: when every pair reached its leaf.
SMALL = 2048
SMALL_FROM = 6


def _truth_table() -> np.ndarray:
    """cond for key ``(mode * 2 + nan_true) * 32 + bits``, bits = le | lt<<1 | eq<<2 |
    nan<<3 | member<<4."""
    table = np.zeros(8 * 2 * 32, np.bool_)
    for mode in range(8):
        for nan_true in (0, 1):
            for bits in range(32):
                le, lt, eq = bits & 1, bits & 2, bits & 4
                nan, member = bits & 8, bits & 16
                if nan:
                    cond = bool(nan_true) or mode == NEQ
                else:
                    cond = {
                        LEQ: le,
                        LT: lt,
                        GTE: not lt,
                        GT: not le,
                        EQ: eq,
                        NEQ: not eq,
                        MEMBER: member,
                        LEAF: 0,
                    }[mode]
                table[(mode * 2 + nan_true) * 32 + bits] = bool(cond)
    return table


_TABLE = _truth_table()


class LayoutError(ValueError):
    """The node lists do not describe trees (a missing child, a cycle, a bad mode)."""


class TooLarge(LayoutError):
    """The trees are valid but their dense leaf table would be too large to hold."""


@dataclasses.dataclass
class Forest:
    """The walkable node table of an ensemble (see the module docstring)."""

    feature2: np.ndarray  # [2M] feature of node i at 2i and 2i+1 (0 for leaves)
    thr2: np.ndarray  # [2M] threshold, same layout
    next2: np.ndarray  # [2M] 2 * false child at 2i, 2 * true child at 2i+1
    leaf2: np.ndarray  # [2M] bool: node is a leaf
    roots2: np.ndarray  # [T] 2 * root of each tree, deepest trees first
    depths: np.ndarray  # [T] levels from each root to its deepest leaf, same order
    order: np.ndarray  # [T] the given position of each tree of roots2
    width: int  # features the model reads: max feature id + 1
    compare: Callable[[np.ndarray, np.ndarray, bool], np.ndarray]
    #: One comparison for all nodes and a value every node sends to its true branch: NaN is
    #: then routed by reading a copy of X with NaN replaced by it (see ``_nan_layout``).
    nan2: np.ndarray | None = None  # [2M] bool: the node sends NaN to its true branch
    nan_value: float | None = None

    @property
    def trees(self) -> int:
        return int(self.roots2.size)

    def walk(self, x: np.ndarray) -> np.ndarray:
        """[T, N] node index of the leaf each row reaches in each tree (trees in their given
        order); ``x`` is [N, F] in the threshold type, C-contiguous.

        Trees go in chunks of about CHUNK (row, tree) pairs, so that a level's arrays stay in
        cache; a chunk of the deepest trees first walks as many levels as its deepest tree, and
        drops the pairs that reached a leaf at a few levels when it is deep."""
        n, f = x.shape
        t = self.trees
        flat = x.reshape(-1)
        has_nan = bool(np.isnan(flat).any()) if flat.dtype.kind == "f" else False
        feature2 = self.feature2
        if has_nan and self.nan_value is not None:
            flat, feature2, f = self._nan_layout(x)
            has_nan = False
        result = np.empty((t, n), np.intp)
        per = max(1, CHUNK // max(n, 1))
        offsets = np.tile(np.arange(0, n * f, f, dtype=np.intp), min(per, t))
        for a in range(0, t, per):
            b = min(t, a + per)
            state = np.repeat(self.roots2[a:b], n)
            off = offsets[: state.size]
            out = state
            depth = int(self.depths[a])  # the deepest of the chunk
            if state.size <= SMALL:  # numpy's call overhead dominates: drop and stop early
                drops = set(range(SMALL_FROM, depth, 2))
            elif depth >= DROP_DEPTH:
                drops = {round(depth * q) for q in DROP_AT}
            else:
                drops = set()
            pos = None
            for step in range(depth):
                if step in drops:
                    if not state.size:
                        break
                    keep = ~self.leaf2.take(state)
                    if pos is None:
                        out, pos = state, np.arange(state.size, dtype=np.intp)
                    else:
                        out[pos] = state
                    state, off, pos = state[keep], off[keep], pos[keep]
                col = feature2.take(state)
                if n > 1:  # one row: every offset is 0
                    col += off
                state += self.compare(flat.take(col), state, has_nan)
                state = self.next2.take(state)
            if pos is None:
                out = state
            else:
                out[pos] = state
            result[self.order[a:b]] = out.reshape(b - a, n)
        result >>= 1
        return result

    def _nan_layout(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """Rows [x with NaN, x with NaN -> nan_value] (width 2F), and the feature table where a
        node sending NaN to its true branch reads the second half: NaN then compares false
        (first half) or true (second half) with no per-level test."""
        n, f = x.shape
        wide = np.empty((n, 2 * f), x.dtype)
        wide[:, :f] = x
        np.copyto(wide[:, f:], x)
        np.copyto(wide[:, f:], np.asarray(self.nan_value, x.dtype), where=np.isnan(x))
        assert self.nan2 is not None
        return wide.reshape(-1), self.feature2 + self.nan2 * f, 2 * f


def build_forest(
    feature: np.ndarray,
    threshold: np.ndarray,
    mode: np.ndarray,
    true_next: np.ndarray,
    false_next: np.ndarray,
    nan_true: np.ndarray,
    roots: np.ndarray,
    sets: list[np.ndarray] | None = None,
) -> Forest:
    """The table from per-node arrays (children and roots are node indices; a LEAF node's
    children are ignored).  ``sets`` holds one member array per BRANCH_MEMBER node, in order."""
    m = int(mode.size)
    leaf = mode == LEAF
    ids = np.arange(m, dtype=np.intp)
    tn = np.where(leaf, ids, true_next).astype(np.intp)
    fn = np.where(leaf, ids, false_next).astype(np.intp)
    if m and (tn.min() < 0 or tn.max() >= m or fn.min() < 0 or fn.max() >= m):
        raise LayoutError("a child index points outside the node table")
    roots = roots.astype(np.intp)
    if roots.size and (roots.min() < 0 or roots.max() >= m):
        raise LayoutError("a tree root points outside the node table")
    feature = np.where(leaf, 0, feature).astype(np.intp)
    if (feature < 0).any():
        raise LayoutError("a feature id is negative")
    depths = _depths(leaf, tn, fn, roots)
    order = np.argsort(-depths, kind="stable")
    next2 = np.empty(2 * m, np.intp)
    next2[0::2], next2[1::2] = 2 * fn, 2 * tn
    thr = np.where(leaf, 0, threshold).astype(threshold.dtype)
    interior = mode[~leaf]
    nan_dir = (nan_true.astype(bool) | (mode == NEQ)) & ~leaf
    compare: Callable[[np.ndarray, np.ndarray, bool], np.ndarray]
    nan_value = None
    if interior.size and (interior == interior[0]).all() and interior[0] != MEMBER:
        op = _UNIFORM[int(interior[0])]
        if int(interior[0]) == NEQ:  # NaN != t: every NEQ node sends NaN to its true branch
            nan_dir = np.zeros_like(nan_dir)
        elif int(interior[0]) != EQ:
            value = -np.inf if int(interior[0]) in (LEQ, LT) else np.inf
            if op(np.asarray(value, thr.dtype), thr[~leaf]).all():
                nan_value = value
        compare = _uniform(op, np.repeat(thr, 2), np.repeat(nan_dir, 2))
    else:
        compare = _mixed(mode, nan_true, np.repeat(thr, 2), sets or [])
    return Forest(
        feature2=np.repeat(feature, 2),
        thr2=np.repeat(thr, 2),
        next2=next2,
        leaf2=np.repeat(leaf, 2),
        roots2=2 * roots[order],
        depths=depths[order],
        order=order,
        width=int(feature.max()) + 1 if m else 0,
        compare=compare,
        nan2=np.repeat(nan_dir, 2).astype(np.intp),
        nan_value=nan_value,
    )


def _depths(leaf: np.ndarray, tn: np.ndarray, fn: np.ndarray, roots: np.ndarray) -> np.ndarray:
    """Levels of each tree's deepest path, level by level over all trees at once (frontier of
    distinct (tree, node) pairs); a cycle never ends."""
    m, t = leaf.size, roots.size
    depths = np.zeros(t, np.intp)
    tree, node = np.arange(t, dtype=np.intp), roots
    for level in range(m + 1):
        inner = ~leaf[node]
        tree, node = tree[inner], node[inner]
        if node.size == 0:
            return depths
        depths[tree] = level + 1
        codes = np.unique(np.concatenate([tree * m + tn[node], tree * m + fn[node]]))
        tree, node = codes // m, codes % m
    raise LayoutError("the nodes form a cycle")


def _uniform(op: np.ufunc, thr2: np.ndarray, nan2: np.ndarray) -> Callable:
    """One comparison for every node; NaN (false for every op but !=) is then redirected."""
    redirect = bool(nan2.any())

    def compare(v: np.ndarray, state: np.ndarray, has_nan: bool) -> np.ndarray:
        c = op(v, thr2.take(state))
        if has_nan and redirect:
            c = np.where(np.isnan(v), nan2.take(state), c)
        return c

    return compare


def _mixed(mode: np.ndarray, nan_true: np.ndarray, thr2: np.ndarray, sets: list) -> Callable:
    """Per-pair mode: the bits of the value against the threshold select from _TABLE."""
    kind2 = np.repeat((mode.astype(np.intp) * 2 + (nan_true != 0)) * 32, 2)
    member = mode == MEMBER
    test = _membership(member, sets) if member.any() else None

    def compare(v: np.ndarray, state: np.ndarray, has_nan: bool) -> np.ndarray:
        t = thr2.take(state)
        key = kind2.take(state)
        key += v <= t
        key += (v < t) * 2
        key += (v == t) * 4
        if has_nan:
            key += np.isnan(v) * 8
        if test is not None:
            key += test(v, state) * 16
        return _TABLE.take(key)

    return compare


def _membership(member: np.ndarray, sets: list[np.ndarray]) -> Callable:
    """v in the set of its BRANCH_MEMBER node: values ranked among all members, then the
    (set, rank) code looked up among the sorted codes of every set."""
    if len(sets) != int(member.sum()):
        raise LayoutError(
            f"membership_values holds {len(sets)} sets for {int(member.sum())} BRANCH_MEMBER nodes"
        )
    values = np.unique(np.concatenate(sets)) if sets else np.zeros(0)
    values = values[~np.isnan(values)] if values.dtype.kind == "f" else values
    if values.size == 0:
        return lambda v, state: np.zeros(v.shape, np.bool_)
    size = values.size
    set_of = np.full(member.size, -1, np.intp)
    set_of[member] = np.arange(len(sets))
    codes = np.unique(
        np.concatenate(
            [k * size + np.searchsorted(values, s[~np.isnan(s)]) for k, s in enumerate(sets)]
        )
    )
    set2 = np.repeat(set_of, 2)

    def test(v: np.ndarray, state: np.ndarray) -> np.ndarray:
        sid = set2.take(state)
        r = np.minimum(np.searchsorted(values, v), size - 1)
        code = sid * size + r
        pos = np.minimum(np.searchsorted(codes, code), codes.size - 1)
        return (sid >= 0) & (values.take(r) == v) & (codes.take(pos) == code)

    return test


def leaf_table(
    m: int,
    k: int,
    leaves: np.ndarray,
    targets: np.ndarray,
    weights: np.ndarray,
    aggregate: str,
    dtype: np.dtype,
) -> np.ndarray:
    """[M, K] in ``dtype`` (the sums' type): what reaching node i adds to each target.
    SUM/AVERAGE add a node's weights up; MIN/MAX keep the least/greatest and hold +inf/-inf
    where there is none."""
    if targets.size and (targets.min() < 0 or targets.max() >= k):
        raise LayoutError(f"a target or class id is outside [0, {k})")
    if leaves.size and (leaves.min() < 0 or leaves.max() >= m):
        raise LayoutError("a leaf weight names a node that does not exist")
    if m * k > 1 << 26:
        raise TooLarge(f"the dense leaf table ({m} nodes x {k} targets) is too large")
    w = weights.astype(np.float64)
    if aggregate in ("SUM", "AVERAGE"):
        table = np.zeros((m, k), np.float64)
        np.add.at(table, (leaves, targets), w)
    elif aggregate == "MIN":
        table = np.full((m, k), np.inf)
        np.minimum.at(table, (leaves, targets), w)
    else:
        table = np.full((m, k), -np.inf)
        np.maximum.at(table, (leaves, targets), w)
    return table.astype(dtype)


def aggregate(table: np.ndarray, leaves: np.ndarray, how: str) -> np.ndarray:
    """[N, K] scores of the leaves [T, N] the rows reached, in the table's type.  Trees come
    first, so the sum adds whole [N, K] slices tree after tree, in the trees' order (the order
    and precision onnxruntime accumulates in: a binary label at a 0.5 tie depends on it)."""
    t, n = leaves.shape
    k = table.shape[1]
    if k == 1:
        per = table[:, 0].take(leaves)[:, :, None]
    else:
        per = table.take(leaves.reshape(-1), axis=0).reshape(t, n, k)
    if how == "SUM":
        return per.sum(axis=0)
    if how == "AVERAGE":
        return per.sum(axis=0) / table.dtype.type(max(t, 1))
    out = per.min(axis=0) if how == "MIN" else per.max(axis=0)
    out[np.isinf(out)] = 0.0  # no tree gave this target a value
    return out


def erfinv(x: np.ndarray) -> np.ndarray:
    """Inverse error function, M. Giles' single-precision polynomials ("Approximating the
    erfinv function", GPU Computing Gems, 2011), in float64."""
    x = np.asarray(x, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = -np.log((1.0 - x) * (1.0 + x))
        a = w - 2.5
        p = np.full_like(x, 2.81022636e-08)
        for c in (
            3.43273939e-07,
            -3.5233877e-06,
            -4.39150654e-06,
            0.00021858087,
            -0.00125372503,
            -0.00417768164,
            0.246640727,
            1.50140941,
        ):
            p = c + p * a
        b = np.sqrt(w) - 3.0
        q = np.full_like(x, -0.000200214257)
        for c in (
            0.000100950558,
            0.00134934322,
            -0.00367342844,
            0.00573950773,
            -0.0076224613,
            0.00943887047,
            1.00167406,
            2.83297682,
        ):
            q = c + q * b
        return np.where(w < 5.0, p, q) * x


def post_transform(scores: np.ndarray, how: str) -> np.ndarray:
    """NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO or PROBIT of [N, K] float64 scores."""
    if how == "NONE":
        return scores
    if how == "LOGISTIC":
        with np.errstate(over="ignore"):
            return 1.0 / (1.0 + np.exp(-scores))
    if how == "PROBIT":
        return np.sqrt(2.0) * erfinv(2.0 * scores - 1.0)
    top = scores.max(axis=1, keepdims=True) if scores.shape[1] else scores
    e = np.exp(scores - top)
    if how == "SOFTMAX_ZERO":
        e[scores == 0] = 0.0
    total = e.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, e / np.where(total > 0, total, 1.0), 0.0)
