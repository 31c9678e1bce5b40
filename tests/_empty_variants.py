"""Empty-tensor variants of onnx's backend node cases, with onnxruntime's outputs as the oracle
(tests/test_empty_tensors.py).

For every single-node case of ``onnx.backend.test`` (the ``node`` kind tests/test_backend.py
runs, less the ``_expanded`` function bodies and the cases of operators it defers), each tensor
input of rank >= 1 in turn gets extent 0 on axis 0 (the batch), and on its last axis when it
has two or more: its data is the original input cut to nothing along that axis, every other
input is the case's own.  The variant model is the case's node unchanged, its declared input
shapes the concrete ones, its outputs of unknown shape.  A variant onnxruntime refuses or fails
on is dropped: what is left is what onnxruntime says an operator does with an empty tensor.

Building needs onnx's node cases, whose loader recomputes every expected output with onnx's
reference pools (about 30 s; free when tests/test_backend.py already loaded them in the same
process) and an onnxruntime session per variant, so the built list is cached on disk per
onnx, onnxruntime and numpy version (``$GRAPHRT_TEST_CACHE``, default a folder in the system's
temporary directory); ``GRAPHRT_REBUILD_EMPTY=1`` rebuilds it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
import tempfile
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx

#: Bump when what a variant is changes (the cache key includes it and this file's text).
SCHEMA = 1


@dataclasses.dataclass(frozen=True)
class Variant:
    case: str  # the backend case, e.g. "test_globalaveragepool"
    op: str  # "Type" or "domain.Type"
    label: str  # which input and axis were emptied, and the shapes fed
    model: bytes  # the serialized variant model
    feed: dict[str, Any]
    expected: list[Any]  # onnxruntime's outputs, in the graph's output order


def cache_path() -> str:
    import onnxruntime

    with open(__file__, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    key = f"v{SCHEMA}-onnx{onnx.__version__}-ort{onnxruntime.__version__}-np{np.__version__}"
    root = os.environ.get("GRAPHRT_TEST_CACHE") or os.path.join(
        tempfile.gettempdir(), "graphrt-test-cache"
    )
    return os.path.join(root, f"empty-variants-{key}-{digest}.pkl")


def load_variants() -> list[Variant]:
    """The cached variants, built (and cached) on first use."""
    path = cache_path()
    if os.path.exists(path) and not os.environ.get("GRAPHRT_REBUILD_EMPTY"):
        with open(path, "rb") as f:
            return pickle.load(f)
    variants = list(build_variants())
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        pickle.dump(variants, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)  # atomic: concurrent test runs never read half a file
    return variants


def _node_cases() -> list[Any]:
    import onnx.backend.test.loader as loader

    from tests.test_backend import DEFERRED_OPERATORS

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = loader.load_model_tests(kind="node")
    kept = []
    for case in cases:
        if case.model is None:  # older onnx: the case's model is read from its directory
            continue
        nodes = case.model.graph.node
        if len(nodes) != 1 or case.name.endswith("_expanded") or not case.data_sets:
            continue
        if op_name(nodes[0]) in DEFERRED_OPERATORS:
            continue
        kept.append(case)
    return kept


def op_name(node: onnx.NodeProto) -> str:
    return f"{node.domain}.{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type


def clear_shape(t: onnx.TypeProto) -> None:
    """Forget every shape in a (nested) type: the variant's outputs are of unknown shape."""
    kind = t.WhichOneof("value")
    if kind == "tensor_type":
        t.tensor_type.ClearField("shape")
    elif kind == "sequence_type":
        clear_shape(t.sequence_type.elem_type)
    elif kind == "optional_type":
        clear_shape(t.optional_type.elem_type)


def _set_shape(t: onnx.TypeProto, shape: tuple[int, ...]) -> None:
    t.tensor_type.shape.ClearField("dim")
    for d in shape:
        t.tensor_type.shape.dim.add().dim_value = d


def variant_model(model: onnx.ModelProto, feed: dict[str, Any]) -> onnx.ModelProto:
    """The case's model with the feed's concrete input shapes and outputs of unknown shape."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for vi in out.graph.input:
        value = feed.get(vi.name)
        if isinstance(value, np.ndarray) and vi.type.WhichOneof("value") == "tensor_type":
            _set_shape(vi.type, value.shape)
    for vi in out.graph.output:
        clear_shape(vi.type)
    out.graph.ClearField("value_info")
    return out


def emptied(x: np.ndarray, axis: int) -> np.ndarray:
    return np.take(x, np.zeros(0, np.int64), axis=axis)


def _variants_of(case: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    inputs, _ = case.data_sets[0]
    graph = case.model.graph
    names = [vi.name for vi in graph.input]
    feed = dict(zip(names, inputs))
    for i, name in enumerate(names):
        x = feed[name]
        if not isinstance(x, np.ndarray) or x.ndim == 0:
            continue
        axes = [0] + ([x.ndim - 1] if x.ndim >= 2 else [])
        for axis in axes:
            if x.shape[axis] == 0:
                continue
            changed = dict(feed)
            changed[name] = emptied(x, axis)
            shapes = ", ".join(
                str(tuple(v.shape)) if isinstance(v, np.ndarray) else type(v).__name__
                for v in changed.values()
            )
            yield f"input {i} ({name}) axis {axis}: {shapes}", changed


def _normalize(value: Any) -> Any:
    if isinstance(value, list):
        return [_normalize(v) for v in value]
    return np.asarray(value) if value is not None else None


def _ort_worker(tasks: list[tuple[int, bytes, dict[str, Any]]], conn: Any) -> None:
    """Runs in a child process: onnxruntime on each task, each result sent as it comes (an
    abort inside onnxruntime then loses only the task it was running)."""
    import onnxruntime as ort

    from tests._models import ort_session

    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.intra_op_num_threads = 1
    for index, data, feed in tasks:
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                outputs = ort_session(onnx.load_from_string(data), options).run(None, feed)
            conn.send((index, [_normalize(v) for v in outputs]))
        except Exception:  # onnxruntime refuses or fails: not a variant it defines
            conn.send((index, None))
    conn.close()


def run_onnxruntime(tasks: list[tuple[bytes, dict[str, Any]]]) -> dict[int, list[Any] | str]:
    """onnxruntime's outputs per task index, in child processes: a refusal is absent, a task
    that killed the process (onnxruntime aborts on some empty inputs, an RNN over zero steps)
    maps to "crashed", and a new child takes the tasks after it."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    results: dict[int, list[Any] | str] = {}
    start = 0
    while start < len(tasks):
        receiver, sender = ctx.Pipe(duplex=False)
        todo = [(i, *tasks[i]) for i in range(start, len(tasks))]
        worker = ctx.Process(target=_ort_worker, args=(todo, sender), daemon=True)
        worker.start()
        sender.close()
        done = start - 1
        try:
            while done + 1 < len(tasks):
                index, outputs = receiver.recv()
                if outputs is not None:
                    results[index] = outputs
                done = index
        except EOFError:  # the child died while running task done + 1
            results[done + 1] = "crashed"
            done += 1
        worker.join()
        receiver.close()
        start = done + 1
    return results


def build_variants() -> Iterator[Variant]:
    found = [
        (case.name, op_name(case.model.graph.node[0]), label, variant_model(case.model, feed), feed)
        for case in _node_cases()
        for label, feed in _variants_of(case)
    ]
    results = run_onnxruntime([(model.SerializeToString(), feed) for *_, model, feed in found])
    for index, (case, op, label, model, feed) in enumerate(found):
        outputs = results.get(index)
        if isinstance(outputs, list):
            yield Variant(case, op, label, model.SerializeToString(), feed, outputs)
        elif outputs == "crashed":
            CRASHED.append(f"{case}: {label}")


#: Variants onnxruntime aborted on during the last build (not cached: for the curious).
CRASHED: list[str] = []
