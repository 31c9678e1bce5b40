"""Tree ensembles of ai.onnx.ml: TreeEnsemble (opset 5), TreeEnsembleClassifier and
TreeEnsembleRegressor (opsets 1 and 3).

The node lists are turned once, at kernel construction, into one flat node table walked for
all rows and trees at once (see ``_tree_layout``), and a [nodes, targets] table of what each
leaf adds; a run is the walk, one gather-and-reduce over the trees, base values and the post
transform.  Scores are summed tree after tree in float32 (float64 for double thresholds), as
onnxruntime sums them, and written in the output type.

The legacy classifier follows onnxruntime where the spec is silent.  Labels are the argmax of
the raw scores (base values added).  With two class labels and a single class id among the
weights (what converters emit for binary boosting), the one score column ``s`` is the positive
class: the label is the second one when ``s`` exceeds 0.5 (all weights non-negative) or 0
(otherwise), and the scores are ``[1 - s, s]`` (resp. ``[-s, s]``) for NONE, SOFTMAX and
SOFTMAX_ZERO, ``[1 - logistic(s), logistic(s)]`` for LOGISTIC and ``probit([1 - s, s])`` for
PROBIT (as onnx's reference evaluator; onnxruntime writes an unrelated second column there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._tree_layout import (
    LEAF,
    LEGACY_MODES,
    MEMBER,
    Forest,
    LayoutError,
    TooLarge,
    aggregate,
    build_forest,
    leaf_table,
    post_transform,
)

TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")
AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")  # TreeEnsemble's enum order
_FLOAT_INPUTS = (np.float32, np.float64, np.int64, np.int32)


def _rows(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """[N, F] C-contiguous copy-if-needed of the input in the thresholds' type."""
    x2 = x.reshape(1, -1) if x.ndim == 1 else x
    return np.ascontiguousarray(x2, dtype=dtype)


class _Ensemble(OpKernel):
    """Shared run path: walk, aggregate, base values, post transform."""

    supports_exact = False

    forest: Forest
    table: np.ndarray
    how: str
    transform: str
    base: np.ndarray | None
    dtype: np.dtype

    def _check_input(self, ctx: InferContext) -> int:
        shape = ctx.shape(0)
        if len(shape) not in (1, 2):
            raise self.fail(f"X must be [N, F], got shape {list(shape)}", "invalid_input")
        width = shape[-1]
        if width < self.forest.width:
            raise self.fail(
                f"the trees read feature {self.forest.width - 1}, X has {width} features",
                "invalid_input",
            )
        return shape[0] if len(shape) == 2 else 1

    def scores(self, x: np.ndarray) -> np.ndarray:
        """[N, K] aggregated scores plus base values, before the post transform, in float32
        (float64 for double thresholds) as onnxruntime sums them."""
        x2 = _rows(x, self.dtype)
        if x2.shape[0] == 0:
            return np.zeros((0, self.table.shape[1]), self.table.dtype)
        s = aggregate(self.table, self.forest.walk(x2), self.how)
        if self.base is not None:
            s += self.base.astype(s.dtype)
        return s

    def _build(self, parts: dict[str, Any], k: int) -> None:
        try:
            self.forest = build_forest(
                parts["feature"],
                parts["threshold"],
                parts["mode"],
                parts["true"],
                parts["false"],
                parts["nan"],
                parts["roots"],
                parts.get("sets"),
            )
            self.table = leaf_table(
                parts["mode"].size,
                k,
                parts["leaves"],
                parts["targets"],
                parts["weights"],
                self.how,
                np.dtype(np.float64 if self.dtype == np.float64 else np.float32),
            )
        except LayoutError as exc:
            kind = "unsupported" if isinstance(exc, TooLarge) else "invalid_model"
            raise self.fail(str(exc), kind) from exc


def _floats(node: NodeInfo, name: str) -> np.ndarray | None:
    """A FLOATS attribute or its ``_as_tensor`` twin (double), None when neither is set."""
    tensor = node.attr(name + "_as_tensor")
    if tensor is not None:
        return np.asarray(tensor).reshape(-1)
    values = node.attr(name)
    return None if values is None else np.asarray(values, np.float32)


def _legacy_parts(kernel: OpKernel, node: NodeInfo, prefix: str) -> dict[str, Any]:
    """Nodes keyed by (tree id, node id) as flat arrays; ``prefix`` is class_ or target_."""
    tree = np.asarray(node.attr("nodes_treeids") or [], np.int64)
    ids = np.asarray(node.attr("nodes_nodeids") or [], np.int64)
    n = tree.size
    names = ["nodes_featureids", "nodes_modes", "nodes_truenodeids", "nodes_falsenodeids"]
    if n == 0 or ids.size != n or any(len(node.attr(a) or []) != n for a in names):
        raise kernel.fail(
            "nodes_treeids, nodes_nodeids, nodes_featureids, nodes_modes, nodes_truenodeids "
            "and nodes_falsenodeids must be set and hold one entry per node"
        )
    try:
        mode = np.array([LEGACY_MODES[m] for m in node.attr("nodes_modes")], np.uint8)
    except KeyError as exc:
        raise kernel.fail(f"unknown node mode {exc.args[0]!r}") from None
    threshold = _floats(node, "nodes_values")
    if threshold is None:
        threshold = np.zeros(n, np.float32)
    if threshold.size != n:
        raise kernel.fail(f"nodes_values holds {threshold.size} values for {n} nodes")
    nan = np.asarray(node.attr("nodes_missing_value_tracks_true") or [0] * n, np.int64)
    if nan.size != n:
        raise kernel.fail(f"nodes_missing_value_tracks_true holds {nan.size} values for {n} nodes")

    if (ids < 0).any() or (ids >= 1 << 31).any() or (tree < 0).any():
        raise kernel.fail("node and tree ids must lie in [0, 2^31)")
    keys = (tree << 32) | ids
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    if (sorted_keys[1:] == sorted_keys[:-1]).any():
        raise kernel.fail("a (tree id, node id) pair appears twice")

    def locate(trees: np.ndarray, wanted: np.ndarray, what: str) -> np.ndarray:
        k = (trees << 32) | wanted.astype(np.int64)
        pos = np.minimum(np.searchsorted(sorted_keys, k), n - 1)
        if (sorted_keys[pos] != k).any():
            raise kernel.fail(f"{what} names a node that does not exist")
        return order[pos]

    interior = mode != LEAF
    true_ids = np.asarray(node.attr("nodes_truenodeids"), np.int64)
    false_ids = np.asarray(node.attr("nodes_falsenodeids"), np.int64)
    true_next = np.zeros(n, np.intp)
    false_next = np.zeros(n, np.intp)
    true_next[interior] = locate(tree[interior], true_ids[interior], "nodes_truenodeids")
    false_next[interior] = locate(tree[interior], false_ids[interior], "nodes_falsenodeids")
    # a root is a node no other node points to: the first such node of each tree
    child = np.zeros(n, np.bool_)
    child[true_next[interior]] = True
    child[false_next[interior]] = True
    trees = np.unique(tree)
    free = np.flatnonzero(~child)
    free_trees, free_first = np.unique(tree[free], return_index=True)
    if free_trees.size != trees.size:
        raise kernel.fail("a tree has no root (its nodes form a cycle)")
    roots = free[free_first]

    w_tree = np.asarray(node.attr(prefix + "treeids") or [], np.int64)
    w_node = np.asarray(node.attr(prefix + "nodeids") or [], np.int64)
    w_ids = np.asarray(node.attr(prefix + "ids") or [], np.int64)
    weights = _floats(node, prefix + "weights")
    weights = np.zeros(0, np.float32) if weights is None else weights
    if not w_tree.size == w_node.size == w_ids.size == weights.size:
        raise kernel.fail(
            f"{prefix}treeids, {prefix}nodeids, {prefix}ids and {prefix}weights must have one "
            "entry per weight"
        )
    leaves = locate(w_tree, w_node, prefix + "nodeids") if w_tree.size else w_tree
    return {
        "feature": np.asarray(node.attr("nodes_featureids"), np.int64),
        "threshold": threshold,
        "mode": mode,
        "true": true_next,
        "false": false_next,
        "nan": nan,
        "roots": roots,
        "leaves": leaves,
        "targets": w_ids,
        "weights": weights,
    }


def _transform(kernel: OpKernel, value: Any) -> str:
    name = value or "NONE"
    if name not in TRANSFORMS:
        raise kernel.fail(f"post_transform must be one of {', '.join(TRANSFORMS)}, got {name!r}")
    return name


def _base(kernel: OpKernel, node: NodeInfo, k: int) -> np.ndarray | None:
    base = _floats(node, "base_values")
    if base is None or base.size == 0:
        return None
    if base.size != k:
        raise kernel.fail(f"base_values holds {base.size} values for {k} outputs")
    return base.astype(np.float64)


class TreeEnsembleRegressor(_Ensemble):
    """X [N, F] -> Y [N, n_targets] float32."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.how = node.attr("aggregate_function") or "SUM"
        if self.how not in AGGREGATES:
            raise self.fail(f"aggregate_function must be one of {AGGREGATES}, got {self.how!r}")
        self.transform = _transform(self, node.attr("post_transform"))
        parts = _legacy_parts(self, node, "target_")
        k = node.attr("n_targets")
        if k is None:
            k = int(parts["targets"].max()) + 1 if parts["targets"].size else 1
        self.dtype = np.dtype(parts["threshold"].dtype)
        self._build(parts, int(k))
        self.base = _base(self, node, int(k))

    def infer(self, ctx: InferContext) -> None:
        if ctx.dtype(0) not in _FLOAT_INPUTS:
            raise self.fail(f"X must be float, double, int32 or int64, got {ctx.dtype(0)}")
        ctx.set_output(0, np.float32, (self._check_input(ctx), self.table.shape[1]))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        np.copyto(outputs[0], post_transform(self.scores(inputs[0]), self.transform), "unsafe")


class TreeEnsembleClassifier(_Ensemble):
    """X [N, F] -> Y [N] labels (int64 or string), Z [N, classes] float32 scores."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.how = "SUM"
        self.transform = _transform(self, node.attr("post_transform"))
        ints, strings = node.attr("classlabels_int64s"), node.attr("classlabels_strings")
        if (ints is None) == (strings is None):
            raise self.fail("exactly one of classlabels_int64s and classlabels_strings is needed")
        self.labels = (
            np.array(ints, np.int64) if strings is None else np.array(strings, dtype=object)
        )
        k = int(self.labels.size)
        if k == 0:
            raise self.fail("the class labels are empty")
        parts = _legacy_parts(self, node, "class_")
        self.dtype = np.dtype(parts["threshold"].dtype)
        used = np.unique(parts["targets"])
        self.binary = k == 2 and used.size == 1
        self.positive = bool((parts["weights"] >= 0).all())
        self.column = int(used[0]) if self.binary else 0
        self._build(parts, k)
        self.base = _base(self, node, k) if not self.binary else None
        if self.binary:
            base = _floats(node, "base_values")
            self.binary_base = 0.0
            if base is not None and base.size:
                self.binary_base = float(base[0] if base.size == 1 else base[self.column])

    def infer(self, ctx: InferContext) -> None:
        if ctx.dtype(0) not in _FLOAT_INPUTS:
            raise self.fail(f"X must be float, double, int32 or int64, got {ctx.dtype(0)}")
        n = self._check_input(ctx)
        ctx.set_output(0, self.labels.dtype, (n,))
        if ctx.num_outputs > 1:
            ctx.set_output(1, np.float32, (n, self.labels.size))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        raw = self.scores(inputs[0])
        y, z = outputs[0], outputs[1] if len(outputs) > 1 else None
        if self.binary:
            s = (raw[:, self.column] + raw.dtype.type(self.binary_base)).astype(np.float64)
            second = s > (0.5 if self.positive else 0.0)
            pair = np.empty((s.size, 2), np.float64)
            pair[:, 1] = s
            if self.transform == "LOGISTIC":
                pair[:, 1] = post_transform(s[:, None], "LOGISTIC")[:, 0]
                pair[:, 0] = 1.0 - pair[:, 1]
            elif self.transform == "PROBIT":
                pair[:, 0] = 1.0 - s
                pair = post_transform(pair, "PROBIT")
            else:
                pair[:, 0] = (1.0 - s) if self.positive else -s
            choice = second.astype(np.intp)
            scores = pair
        else:
            choice = raw.argmax(axis=1) if raw.shape[0] else np.zeros(0, np.intp)
            scores = post_transform(raw, self.transform)
        if y is not None:
            y[...] = self.labels.take(choice)
        if z is not None:
            np.copyto(z, scores, casting="unsafe")


class TreeEnsemble(_Ensemble):
    """ai.onnx.ml opset 5: X [N, F] -> Y [N, n_targets], in X's type."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        agg = node.attr("aggregate_function", 1)
        transform = node.attr("post_transform", 0)
        if agg not in range(4):
            raise self.fail(f"aggregate_function must be 0..3, got {agg}")
        if transform not in range(5):
            raise self.fail(f"post_transform must be 0..4, got {transform}")
        self.how, self.transform = AGGREGATES[agg], TRANSFORMS[transform]
        self.base = None
        parts = self._parts(node)
        k = node.attr("n_targets")
        if k is None:
            k = int(parts["targets"].max()) + 1 if parts["targets"].size else 1
        self._build(parts, int(k))

    def _parts(self, node: NodeInfo) -> dict[str, Any]:
        required = (
            "nodes_featureids nodes_splits nodes_modes nodes_truenodeids nodes_falsenodeids "
            "nodes_trueleafs nodes_falseleafs leaf_targetids leaf_weights tree_roots"
        ).split()
        missing = [a for a in required if node.attr(a) is None]
        if missing:
            raise self.fail(f"missing attributes: {', '.join(missing)}")
        splits = np.asarray(node.attr("nodes_splits")).reshape(-1)
        mode = np.asarray(node.attr("nodes_modes")).reshape(-1).astype(np.uint8)
        n = splits.size
        arrays = {a: np.asarray(node.attr(a), np.int64).reshape(-1) for a in required[2:7]}
        arrays["nodes_modes"] = mode
        arrays["nodes_featureids"] = np.asarray(node.attr("nodes_featureids"), np.int64)
        if any(v.size != n for v in arrays.values()) or (mode > MEMBER).any():
            raise self.fail("the nodes_* attributes must hold one entry per node, modes 0..6")
        weights = np.asarray(node.attr("leaf_weights")).reshape(-1)
        targets = np.asarray(node.attr("leaf_targetids"), np.int64)
        if weights.size != targets.size:
            raise self.fail("leaf_weights and leaf_targetids must have one entry per leaf")
        if weights.dtype != splits.dtype:
            raise self.fail(f"leaf_weights ({weights.dtype}) and nodes_splits ({splits.dtype})")
        self.dtype = splits.dtype
        nl = weights.size
        # interior nodes first, then one self-looping node per leaf
        ids = {}
        for side in ("true", "false"):
            to_leaf = arrays[f"nodes_{side}leafs"] != 0
            child = arrays[f"nodes_{side}nodeids"]
            limit = np.where(to_leaf, nl, n)
            if ((child < 0) | (child >= limit)).any():
                raise self.fail(f"nodes_{side}nodeids points outside the nodes or leaves")
            ids[side] = np.where(to_leaf, n + child, child)
        nan = node.attr("nodes_missing_value_tracks_true")
        nan = np.zeros(n, np.int64) if nan is None else np.asarray(nan, np.int64)
        if nan.size != n:
            raise self.fail("nodes_missing_value_tracks_true must have one entry per node")
        sets = None
        if (mode == MEMBER).any():
            values = node.attr("membership_values")
            if values is None:
                raise self.fail("BRANCH_MEMBER nodes need membership_values")
            values = np.asarray(values, np.float64).reshape(-1)
            cut = np.flatnonzero(np.isnan(values))
            sets = [s for s in np.split(values, cut)]
            sets = [s[~np.isnan(s)] for s in sets]
            if values.size and np.isnan(values[-1]):
                sets = sets[:-1]  # a trailing NaN closes the last set
            sets = [s.astype(self.dtype) for s in sets]
        roots = np.asarray(node.attr("tree_roots"), np.int64)
        pad = np.zeros(nl, np.int64)
        return {
            "feature": np.concatenate([arrays["nodes_featureids"], pad]),
            "threshold": np.concatenate([splits, np.zeros(nl, splits.dtype)]),
            "mode": np.concatenate([mode, np.full(nl, LEAF, np.uint8)]),
            "true": np.concatenate([ids["true"], pad]),
            "false": np.concatenate([ids["false"], pad]),
            "nan": np.concatenate([nan, pad]),
            "roots": roots,
            "sets": sets,
            "leaves": n + np.arange(nl),
            "targets": targets,
            "weights": weights,
        }

    def infer(self, ctx: InferContext) -> None:
        if ctx.dtype(0) != self.dtype:
            raise self.fail(f"X is {ctx.dtype(0)}, the splits are {self.dtype}")
        ctx.set_output(0, self.dtype, (self._check_input(ctx), self.table.shape[1]))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        np.copyto(outputs[0], post_transform(self.scores(inputs[0]), self.transform), "unsafe")
