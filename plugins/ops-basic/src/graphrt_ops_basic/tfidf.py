"""TfIdfVectorizer: counts of pool n-grams in each row of integer or string tokens.

An n-gram of length n with skip s starts at position i and takes the tokens
``x[i], x[i + s + 1], ..., x[i + (n - 1)(s + 1)]`` of one row; every start and every skip in
``[0, max_skip_count]`` counts once, and unigrams once per position (their skip is moot).
Lengths run over ``[min_gram_length, max_gram_length]``.  The pool holds the n-grams of each
length in turn (``ngram_counts`` are their start offsets, CSR style); pool n-gram ``g`` is
counted into output column ``ngram_indexes[g]``.  A pool n-gram listed twice counts at its first
place; two pool n-grams sent to one column leave the later one's value there.

Matching is vectorised with prefix tables built once from the attributes: tokens become ids
in the pool's sorted vocabulary (``V`` for a token outside it), and a pool n-gram's prefix of
depth d a code ``index of its depth d - 1 prefix * (V + 1) + token id``; each depth is one
lookup (a ``take`` from a dense table when the codes' range is small, else a ``searchsorted``)
for every start and skip of every row at once: the token positions of all n-grams of a row are
laid out per plan.  Codes stay below ``pool size * (V + 1)``, so they never overflow int64,
whatever n is.  Python loops run over lengths and depths only; one ``bincount`` counts the
n-grams found in the pool (counting the others too would make it wait on one bin per row at
every step).  A run allocates its temporaries: bincount has no ``out=``, and how many n-grams
it counts depends on the values.

Exact: counts are integers (exact in float32 below 2^24), and IDF/TFIDF multiply each count
(or 1) by its weight once; exact mode rewrites a NaN weight's result to the canonical NaN.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import MAX_SLAB, InferContext, KernelContext, NodeInfo, OpKernel

from ._util import constant, rewrite_nan

MODES = ("TF", "IDF", "TFIDF")


_ONE = constant(np.float32, 1)
_ZERO = constant(np.int64, 0)

#: Largest dense lookup table (entries) of one prefix depth; beyond it, a sorted search.
DENSE = 1 << 18


def _find(table: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Index of each code in the sorted ``table``; len(table) where it is absent."""
    pos = np.searchsorted(table, codes)
    if table.size == 0:
        return pos
    hit = table[np.minimum(pos, table.size - 1)] == codes
    return np.where(hit, pos, table.size)


class _Lookup:
    """Index of each code among one depth's sorted prefix codes (``size`` where absent): one
    ``take`` from a dense table over the codes' range when that is small, else a search."""

    def __init__(self, table: np.ndarray, domain: int) -> None:
        self.table = table
        self.dense = None
        if domain <= DENSE:
            self.dense = np.full(domain, table.size, np.int64)
            self.dense[table] = np.arange(table.size)

    def __call__(self, codes: np.ndarray) -> np.ndarray:
        if self.dense is not None:
            return self.dense.take(codes)  # codes lie in [0, domain) by construction
        return _find(self.table, codes)


@dataclasses.dataclass(frozen=True)
class _Level:
    """The pool n-grams of one length n as prefix tables."""

    n: int
    lookups: tuple[_Lookup, ...]  # depth 1..n
    ids: np.ndarray  # pool n-gram id of each full code, then ``total`` for "none"


@dataclasses.dataclass(frozen=True)
class _Plan:
    positions: tuple[np.ndarray | None, ...]  # per level: [n, K] token positions of K n-grams
    offsets: np.ndarray  # [rows, 1]: where each row's counts start in the flat bincount
    mask: int | None  # exact mode: scratch for the NaN rewrite


class TfIdfVectorizer(OpKernel):
    """[C] -> [max(ngram_indexes) + 1], [N, C] -> [N, max(ngram_indexes) + 1] float32."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.mode = node.attr("mode")
        if self.mode not in MODES:
            raise self.fail(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        self.min_n = node.attr("min_gram_length")
        self.max_n = node.attr("max_gram_length")
        self.max_skip = node.attr("max_skip_count")
        for name in ("min_gram_length", "max_gram_length", "max_skip_count", "ngram_counts"):
            if node.attr(name) is None:
                raise self.fail(f"attribute {name} is required")
        if node.attr("ngram_indexes") is None:
            raise self.fail("attribute ngram_indexes is required")
        if not 1 <= self.min_n <= self.max_n or self.max_skip < 0:
            raise self.fail(
                f"need 1 <= min_gram_length ({self.min_n}) <= max_gram_length ({self.max_n}) "
                f"and max_skip_count ({self.max_skip}) >= 0"
            )
        ints, strings = node.attr("pool_int64s"), node.attr("pool_strings")
        if (ints is None) == (strings is None):
            raise self.fail("exactly one of pool_int64s and pool_strings must be set")
        self.strings = strings is not None
        pool = np.array(strings, dtype=str) if self.strings else np.array(ints, dtype=np.int64)
        indexes = np.array(node.attr("ngram_indexes"), dtype=np.int64)
        self.levels, total = self._levels(pool, node.attr("ngram_counts"))
        if indexes.size != total or (indexes.size and indexes.min() < 0):
            raise self.fail(
                f"ngram_indexes must hold {total} non-negative values (one per pool n-gram), "
                f"got {indexes.size}"
            )
        weights = node.attr("weights")
        if weights is not None and len(weights) != total:
            raise self.fail(f"weights must hold {total} values, got {len(weights)}")
        self.width = int(indexes.max()) + 1 if indexes.size else 0
        if self.width * 4 > MAX_SLAB:  # a row of the output alone would exceed a plan's limit
            raise self.fail(
                f"ngram_indexes reach column {self.width - 1}: the output rows would be "
                f"{self.width * 4 / 2**30:.1f} GiB",
                "unsupported",
            )
        # each output column reads one count: the last pool n-gram sent there, else the
        # always-zero count column ``total + 1``
        source = np.full(self.width, total + 1, np.intp)
        columns, last = np.unique(indexes[::-1], return_index=True)
        source[columns] = total - 1 - last
        self.total = total
        identity = np.array_equal(source, np.arange(self.width)) and self.width == total
        self.gather = None if identity else source
        w = np.ones(total + 2, np.float32)
        if weights is not None:
            w[:total] = weights
        self.weights = w[source]

    def _levels(self, pool: np.ndarray, starts: list[int]) -> tuple[list[_Level], int]:
        self.vocab = np.unique(pool)
        size = self.vocab.size
        self.dense_vocab = None
        if not self.strings and size and int(self.vocab[-1]) - int(self.vocab[0]) < DENSE:
            span = int(self.vocab[-1]) - int(self.vocab[0]) + 1
            self.dense_vocab = np.full(span + 2, size, np.int64)
            self.dense_vocab[self.vocab - self.vocab[0] + 1] = np.arange(size)
            # x - shift is a token's entry; last is the entry of every token above the pool's
            self.dense_bounds = (
                constant(np.int64, int(self.vocab[0]) - 1),
                constant(np.int64, span + 1),
            )
        ends = list(starts[1:]) + [pool.size]
        if any(not 0 <= a <= b <= pool.size for a, b in zip(starts, ends)):
            raise self.fail(f"ngram_counts {starts} must rise within the pool of {pool.size}")
        found, first_id = [], 0
        for n, (a, b) in enumerate(zip(starts, ends), start=1):
            if (b - a) % n:
                raise self.fail(f"the pool's {n}-grams ({b - a} items) are not whole {n}-grams")
            grams = np.searchsorted(self.vocab, pool[a:b]).reshape(-1, n)
            count = grams.shape[0]
            if self.min_n <= n <= self.max_n and count:
                lookups, index, domain = [], np.zeros(count, np.int64), size + 1
                for d in range(n):
                    codes = index * (size + 1) + grams[:, d]
                    table, first = np.unique(codes, return_index=True)
                    lookups.append(_Lookup(table, domain))
                    index = np.searchsorted(table, codes)
                    domain = (table.size + 1) * (size + 1)
                found.append((n, tuple(lookups), first_id + first))
            first_id += count
        levels = [
            _Level(n, lookups, np.append(ids, first_id).astype(np.int64))
            for n, lookups, ids in found
        ]
        return levels, first_id

    def infer(self, ctx: InferContext) -> None:
        dtype, shape = ctx.dtype(0), ctx.shape(0)
        if self.strings and dtype != np.dtype(object):
            raise self.fail(f"pool_strings needs a string input, got {dtype}")
        if not self.strings and dtype not in (np.int32, np.int64):
            raise self.fail(f"pool_int64s needs an int32 or int64 input, got {dtype}")
        if len(shape) not in (1, 2):
            raise self.fail(
                f"the input must be 1-D or 2-D, got shape {list(shape)}", "invalid_input"
            )
        ctx.set_output(0, np.float32, shape[:-1] + (self.width,))
        positions = tuple(self._positions(level.n, shape[-1]) for level in self.levels)
        mask = ctx.add_scratch(np.bool_, shape[:-1] + (self.width,)) if ctx.exact else None
        rows = shape[0] if len(shape) == 2 else 1
        offsets = (np.arange(rows, dtype=np.int64) * (self.total + 2))[:, None]
        ctx.prepared = _Plan(positions, offsets, mask)

    def _positions(self, n: int, width: int) -> np.ndarray | None:
        """[n, K]: the token positions of every n-gram of a row, every start and skip."""
        gaps = [1] if n == 1 else range(1, self.max_skip + 2)
        counts = [(g, width - (n - 1) * g) for g in gaps if width - (n - 1) * g > 0]
        if not counts:
            return None
        first = np.concatenate([np.arange(k, dtype=np.intp) for _, k in counts])
        step = np.concatenate([np.full(k, g, np.intp) for g, k in counts])
        return first + np.arange(n, dtype=np.intp)[:, None] * step

    def token_ids(self, x: np.ndarray) -> np.ndarray:
        """Each token's index in the pool's vocabulary, its size for tokens outside it."""
        if self.strings:
            return _find(self.vocab, x.astype(str))
        if self.dense_vocab is None:
            return _find(self.vocab, x.astype(np.int64))
        # small integer range: one table entry per value, the first and last for "outside"
        shift, last = self.dense_bounds
        index = np.subtract(x, shift, dtype=np.int64)
        np.maximum(index, _ZERO, out=index)  # (np.clip's wrapper costs more than both)
        np.minimum(index, last, out=index)
        return self.dense_vocab.take(index)

    def counts(self, x: np.ndarray, p: _Plan) -> np.ndarray:
        """[rows, pool n-grams + 2] int64 counts of a 2-D token array; column ``total``
        counts the n-grams outside the pool, column ``total + 1`` stays 0."""
        size = self.vocab.size
        tokens = self.token_ids(x)
        found = []
        for level, pos in zip(self.levels, p.positions):
            if pos is None:
                continue
            index = level.lookups[0](tokens)  # depth 1 of every token, then each n-gram's
            if level.n > 1:
                index = np.take(index, pos[0], axis=1)
            for d in range(1, level.n):
                index *= size + 1
                index += np.take(tokens, pos[d], axis=1)
                index = level.lookups[d](index)
            found.append(level.ids.take(index))  # total where no pool n-gram matched
        per_row = self.total + 2
        if not found:
            return np.zeros((x.shape[0], per_row), np.int64)
        flat = np.concatenate(found, axis=1) if len(found) > 1 else found[0]
        # Only the pool n-grams are counted: most n-grams are not, and counting them all into
        # one bin per row would make bincount wait on that bin at every step.
        hit = flat != self.total
        flat += p.offsets
        counts = np.bincount(flat[hit], minlength=x.shape[0] * per_row)
        return counts.reshape(x.shape[0], per_row)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        p: _Plan = ctx.prepared
        x, y = inputs[0], outputs[0]
        x2 = x.reshape(1, -1) if x.ndim == 1 else x
        y2 = y.reshape(1, -1) if y.ndim == 1 else y
        if y2.size == 0:
            return
        counts = self.counts(x2, p)
        if self.gather is None:  # ngram_indexes is 0, 1, 2, ...
            np.copyto(y2, counts[:, : self.width], casting="unsafe")
        else:
            np.copyto(y2, counts.take(self.gather, axis=1), casting="unsafe")
        if self.mode == "IDF":
            np.minimum(y2, _ONE, out=y2)
        if self.mode != "TF":
            np.multiply(y2, self.weights, out=y2)
        if p.mask is not None:
            rewrite_nan(y, ctx.scratch[p.mask])
