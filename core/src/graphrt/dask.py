"""Batch inference over Dask (``pip install 'graphrt[dask]'``): :func:`predict` for dask arrays,
:func:`predict_frame` for dask dataframes.

Blocks run wherever the scheduler puts them (a ``distributed`` cluster, threads, one process).
Each process keeps one session per (model, options), made at its first block and reused by
every later block and call: compiling a model costs far more than a block.  The model reaches
the workers as one graph key holding its bytes (each worker fetches it once per computation,
instead of once per task) or, given a path, as the path (each worker reads the file; it must be
readable there; large models are best given so, the bytes going through the scheduler once
per computation).  Errors come back to the caller as the same :class:`graphrt.SessionError`,
kind and operators included.

``import graphrt`` does not import this module (nor dask): ``import graphrt.dask``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import operator
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

try:
    import dask
    import dask.array as da
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        "graphrt.dask needs dask[array] (and distributed for a cluster): "
        "pip install 'graphrt[dask]'"
    ) from exc

from graphrt.errors import SessionError
from graphrt.options import session_options
from graphrt.session import NodeArg, Session

if TYPE_CHECKING:
    import dask.dataframe as dd

__all__ = ["MAX_CACHED_SESSIONS", "cached_sessions", "clear_sessions", "predict", "predict_frame"]

#: Sessions one process keeps (least recently used dropped first).
MAX_CACHED_SESSIONS = 8

_sessions: OrderedDict[str, Session] = OrderedDict()
_lock = threading.Lock()


def cached_sessions() -> int:
    """How many sessions this process holds (on a worker: ``client.run(cached_sessions)``)."""
    with _lock:
        return len(_sessions)


def clear_sessions() -> None:
    """Drop this process's sessions (``client.run(graphrt.dask.clear_sessions)`` frees workers)."""
    with _lock:
        _sessions.clear()


@dataclasses.dataclass(frozen=True)
class _Spec:
    """What every task carries: small, the model itself travels separately."""

    key: str  # digest of the model bytes and the options: the session cache key
    digest: str  # digest of the model bytes alone (checked when a worker reads a path)
    path: str | None  # a file each worker reads, or None: the bytes are a task dependency
    options: Mapping[str, Any]
    inputs: tuple[str, ...]  # names of the inputs given per block (arrays or columns)
    outputs: tuple[str, ...]
    row_at_a_time: bool  # the model's batch axis is fixed at 1: run a block row by row
    empty: tuple[tuple[tuple[int, ...], Any] | None, ...]  # per output: (tail shape, dtype)


def _cached(key: str, make: Any) -> Session:
    with _lock:  # one creation at a time: two threads of a worker never build the same session
        sess = _sessions.get(key)
        if sess is None:
            sess = _sessions[key] = make()
            while len(_sessions) > MAX_CACHED_SESSIONS:
                _sessions.popitem(last=False)  # not closed: a running block may still use it
        else:
            _sessions.move_to_end(key)
        return sess


def _worker_session(spec: _Spec, model_bytes: bytes | None) -> Session:
    def make() -> Session:
        data = model_bytes
        if data is None:
            try:
                with open(spec.path, "rb") as f:  # type: ignore[arg-type]
                    data = f.read()
            except OSError as exc:
                raise SessionError(
                    "invalid_model",
                    f"the model file {spec.path!r} cannot be read in this process ({exc}); "
                    "give predict() the model's bytes to ship them to the workers",
                ) from None
            if hashlib.sha256(data).hexdigest() != spec.digest:
                raise SessionError(
                    "invalid_model", f"the model file {spec.path!r} changed since predict()"
                )
        return Session(data, **spec.options)

    return _cached(spec.key, make)


def _prepare(model: Any, options: Mapping[str, Any]) -> tuple[Session, str, str, str | None, Any]:
    """The caller's session (metadata, early errors), the cache key, the model digest, the path
    workers read (or None) and the model as one dask key (or None)."""
    opts = session_options(None, dict(options))  # checked here, before anything is shipped
    path = None
    if isinstance(model, (str, os.PathLike)):
        path = os.path.abspath(os.fspath(model))
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise SessionError("invalid_model", f"cannot read the model file: {exc}") from None
    elif isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
    elif hasattr(model, "SerializeToString"):
        data = model.SerializeToString()
    else:
        raise SessionError(
            "invalid_model",
            f"model must be a path, bytes or an onnx.ModelProto, not {type(model).__name__}",
        )
    digest = hashlib.sha256(data).hexdigest()
    key = hashlib.sha256(f"{digest}\n{opts!r}".encode()).hexdigest()
    sess = _cached(key, lambda: Session(data, **options))
    shipped = None
    if path is None:  # one key every task depends on: fetched once per worker, not per task
        shipped = dask.delayed(data, pure=True, name=f"graphrt-model-{digest[:24]}")
    return sess, key, digest, path, shipped


def _with_defaults(options: Mapping[str, Any]) -> dict[str, Any]:
    # Dask parallelises over blocks: a session on every core in every worker thread would
    # oversubscribe the machine.  intra_op_threads=0 asks for one per core again.
    return {"intra_op_threads": 1, **options}


def _outputs(sess: Session, output_names: Sequence[str] | None) -> list[NodeArg]:
    by_name = {o.name: o for o in sess.get_outputs()}
    if output_names is None:
        return list(by_name.values())
    if isinstance(output_names, str):
        raise SessionError("invalid_input", "output_names must be a list of names, not a string")
    unknown = [n for n in output_names if n not in by_name]
    if unknown:
        raise SessionError(
            "invalid_input",
            f"unknown output(s) {', '.join(map(repr, unknown))}; the model's outputs are "
            f"{', '.join(by_name)}",
        )
    return [by_name[n] for n in output_names]


def _batch_policy(decls: Sequence[NodeArg]) -> tuple[bool, int | None]:
    """(run row by row, fixed batch size) from the first axis the batched inputs declare."""
    fixed = {
        d.shape[0] for d in decls if d.shape and isinstance(d.shape[0], int) and d.shape[0] > 0
    }
    if not fixed:
        return False, None
    if len(fixed) > 1:
        raise SessionError(
            "unsupported",
            f"the batched inputs declare different fixed first axes {sorted(fixed)}",
        )
    size = fixed.pop()
    return size == 1, size


def _empty(o: NodeArg) -> tuple[tuple[int, ...], Any] | None:
    """An output's rows-less shape and dtype when both are known (for a block of no rows)."""
    if o.kind != "tensor" or o.shape is None or o.dtype is None:
        return None
    tail = o.shape[1:]
    if not all(isinstance(d, int) and d >= 0 for d in tail):
        return None
    return tuple(tail), o.dtype


def _run(spec: _Spec, sess: Session, feed: dict[str, Any], blocks: Sequence[Any], n: int):
    """The outputs of one block of ``n`` rows, each checked to have ``n`` rows."""
    names = list(spec.outputs)
    if spec.row_at_a_time and n != 1:
        rows = [
            sess.run(names, {**feed, **{k: b[i : i + 1] for k, b in zip(spec.inputs, blocks)}})
            for i in range(n)
        ]
        outs = []
        for j, name in enumerate(names):
            if rows:
                outs.append(_concat([r[j] for r in rows]))
            elif spec.empty[j] is not None:
                tail, dtype = spec.empty[j]  # type: ignore[misc]
                outs.append(np.empty((0, *tail), dtype))
            else:
                raise SessionError(
                    "unsupported", f"output {name!r} has no known shape for a block of no rows"
                )
    else:
        outs = sess.run(names, {**feed, **dict(zip(spec.inputs, blocks))})
    for name, value, empty in zip(names, outs, spec.empty):
        if isinstance(value, np.ndarray):
            rows_out = value.shape[0] if value.ndim else None
        else:
            rows_out = len(value)
        if rows_out != n:
            raise SessionError(
                "unsupported",
                f"output {name!r} has {rows_out} rows for a block of {n}: graphrt.dask needs "
                "outputs with one row per input row (leave this output out with output_names)",
            )
        if empty is not None and value.shape[1:] != empty[0]:
            raise SessionError(
                "invalid_model",
                f"output {name!r} has shape {list(value.shape)}, the model declares "
                f"[N, {', '.join(map(str, empty[0]))}]: the outputs' chunks would be wrong",
            )
    return outs


def _concat(values: list[Any]) -> Any:
    if isinstance(values[0], np.ndarray):
        return np.concatenate(values)
    return [item for v in values for item in v]  # sequences: one element per row


# -- arrays ----------------------------------------------------------------------------------


def _predict_block(spec: _Spec, model_bytes: bytes | None, side: dict, *blocks: np.ndarray):
    sess = _worker_session(spec, model_bytes)
    return tuple(_run(spec, sess, side, blocks, blocks[0].shape[0]))


def predict(
    model: Any,
    inputs: Mapping[str, Any],
    output_names: Sequence[str] | None = None,
    **session_options: Any,
) -> list[da.Array]:
    """The model's outputs as dask arrays, one block per block of the batched inputs.

    ``inputs`` maps input names to dask arrays chunked along axis 0 only (one chunk along every
    other axis; all of them chunked alike) or to numpy values given whole to every block.  The
    outputs share the inputs' chunks along axis 0; their other axes come from the model's
    declared shapes.  A model whose batch axis is fixed at 1 runs each block row by row.
    ``session_options`` are :class:`graphrt.SessionOptions` fields; ``intra_op_threads``
    defaults to 1 here (Dask runs the blocks in parallel).  Compute the outputs together
    (``dask.compute(*outputs)``): each separate computation runs the model again.

    The session is made here first, in the caller's process (and kept in its cache): it gives
    the outputs' types and shapes, and a model that cannot load fails now, not on a worker.
    """
    options = _with_defaults(session_options)
    if not isinstance(inputs, Mapping):
        raise SessionError("invalid_input", "inputs must map input names to arrays")
    sess, key, digest, path, shipped = _prepare(model, options)
    decls = {d.name: d for d in sess.get_inputs()}
    _check_names(decls, inputs)
    batched = {k: v for k, v in inputs.items() if isinstance(v, da.Array)}
    if not batched:
        raise SessionError(
            "invalid_input",
            "predict needs at least one dask array input (for numpy inputs alone, use "
            "graphrt.Session.run)",
        )
    row0 = _check_chunks(batched, decls)
    row_at_a_time, fixed = _batch_policy([decls[k] for k in batched])
    if fixed is not None and fixed != 1 and any(c != fixed for c in row0):
        raise SessionError(
            "invalid_input",
            f"the model's batch axis is fixed at {fixed}: chunk the inputs in blocks of {fixed} "
            f"rows (x.rechunk({{0: {fixed}}}))",
        )
    outs = _outputs(sess, output_names)
    for o in outs:
        if o.kind != "tensor" or o.shape is None or not o.shape or o.dtype is None:
            raise SessionError(
                "unsupported",
                f"output {o.name!r} is {o.type} with shape {o.shape}: predict needs tensor "
                "outputs of known rank and type (leave it out with output_names)",
            )
    spec = _Spec(
        key=key,
        digest=digest,
        path=path,
        options=options,
        inputs=tuple(batched),
        outputs=tuple(o.name for o in outs),
        row_at_a_time=row_at_a_time,
        empty=tuple(_empty(o) for o in outs),
    )
    side = {k: v for k, v in inputs.items() if k not in batched}
    side_arg = dask.delayed(side, pure=True, traverse=False) if side else {}
    args: list[Any] = [spec, None, shipped, None, side_arg, None]
    for n, arr in enumerate(batched.values()):
        args += [arr, ("row", *(f"a{n}_{axis}" for axis in range(1, arr.ndim)))]
    token = dask.base.tokenize(key, spec.inputs, spec.outputs, *batched.values(), side_arg)
    blocks = da.blockwise(
        _predict_block,
        ("row",),
        *args,
        concatenate=True,
        name=f"graphrt-predict-{token}",
        meta=np.empty((0,), object),
    )
    results = []
    for j, o in enumerate(outs):
        tail = {
            f"o{j}_{axis}": (d if isinstance(d, int) and d >= 0 else np.nan)
            for axis, d in enumerate(o.shape[1:], 1)
        }
        results.append(
            da.blockwise(
                operator.getitem,
                ("row", *tail),
                blocks,
                ("row",),
                j,
                None,
                new_axes=tail,
                name=f"graphrt-output-{j}-{token}",
                meta=np.empty((0,) * len(o.shape), o.dtype),
            )
        )
    return results


def _check_names(decls: Mapping[str, NodeArg], given: Any) -> None:
    unknown = [k for k in given if k not in decls]
    missing = [k for k in decls if k not in given]
    if unknown or missing:
        parts = []
        if unknown:
            parts.append(f"unknown input(s) {', '.join(map(repr, unknown))}")
        if missing:
            parts.append(f"missing input(s) {', '.join(map(repr, missing))}")
        raise SessionError(
            "invalid_input", f"{'; '.join(parts)}; the model's inputs are {', '.join(decls)}"
        )


def _check_chunks(batched: Mapping[str, da.Array], decls: Mapping[str, NodeArg]) -> tuple:
    """The common chunks along axis 0; anything else is refused with the rechunk to do."""
    first_name, row0 = None, None
    for name, arr in batched.items():
        decl = decls[name]
        if arr.ndim == 0:
            raise SessionError("invalid_input", f"input {name!r} is a 0-d dask array: no rows")
        split = [axis for axis in range(1, arr.ndim) if len(arr.chunks[axis]) > 1]
        if split:
            fix = ", ".join(f"{axis}: -1" for axis in split)
            raise SessionError(
                "invalid_input",
                f"input {name!r} is chunked along axis {', '.join(map(str, split))} (chunks "
                f"{arr.chunks}); graphrt.dask splits along axis 0 only: rechunk it with "
                f"{name}.rechunk({{{fix}}})",
            )
        if decl.dtype is not None and decl.kind == "tensor" and arr.dtype != decl.dtype:
            raise SessionError(
                "invalid_input",
                f"input {name!r} must be {decl.dtype}, got {arr.dtype} (x.astype(np.{decl.dtype}))",
            )
        if row0 is None:
            first_name, row0 = name, arr.chunks[0]
        elif not _same_chunks(row0, arr.chunks[0]):
            raise SessionError(
                "invalid_input",
                f"inputs {first_name!r} and {name!r} are chunked differently along axis 0 "
                f"({row0} and {arr.chunks[0]}): rechunk one like the other "
                f"({name}.rechunk({{0: {first_name}.chunks[0]}}))",
            )
    return tuple(row0 or ())


def _same_chunks(a: Sequence[float], b: Sequence[float]) -> bool:
    return len(a) == len(b) and all(x == y or (x != x and y != y) for x, y in zip(a, b))


# -- dataframes ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Column:
    """How one input is read from a partition: its column(s), rank and dtype."""

    columns: str | tuple[str, ...]
    rank: int
    dtype: Any


def _predict_partition(
    part: Any, spec: _Spec, model_bytes: bytes | None, layout: tuple, columns: tuple
) -> Any:
    import pandas as pd

    sess = _worker_session(spec, model_bytes)
    blocks = []
    for c in layout:
        if isinstance(c.columns, str):
            value = part[c.columns].to_numpy(dtype=c.dtype)
            value = value.reshape(-1, 1) if c.rank == 2 else value
        else:
            value = part[list(c.columns)].to_numpy(dtype=c.dtype)
        blocks.append(value)
    outs = _run(spec, sess, {}, blocks, len(part))
    data = {}
    for value, names in zip(outs, columns):
        if not isinstance(value, np.ndarray):  # a sequence (of maps): one object per row
            column = np.empty(len(value), object)
            column[:] = value
            data[names[0]] = column
        elif value.ndim == 1:
            data[names[0]] = value
        else:
            for k, name in enumerate(names):
                data[name] = value[:, k]
    return pd.DataFrame(data, index=part.index, columns=[n for ns in columns for n in ns])


def predict_frame(
    model: Any,
    frame: dd.DataFrame,
    columns: Any = None,
    output_names: Sequence[str] | None = None,
    **session_options: Any,
) -> dd.DataFrame:
    """A dask DataFrame of the model's outputs, partitioned and indexed like ``frame``.

    ``columns`` maps input names to a column (an input of shape [N] or [N, 1]) or a list of
    columns (an input of shape [N, k]); None takes each input from the column of its name, or
    every column for a one-input model; a list of columns feeds a one-input model.  Columns are
    converted to the input's element type when numpy casts between the kinds (float64 to
    float32, int to float); strings go to string inputs as objects.  An output of shape [N] or
    [N, 1] becomes the column of its name, [N, k] the columns ``name_0`` ... ``name_{k-1}``, and
    a sequence (ZipMap's list of dicts) an object column.  Options as :func:`predict`.
    """
    import pandas as pd

    options = _with_defaults(session_options)
    sess, key, digest, path, shipped = _prepare(model, options)
    decls = {d.name: d for d in sess.get_inputs()}
    mapping = _column_mapping(decls, list(frame.columns), columns)
    dtypes = frame.dtypes
    layout = tuple(_column(decls[name], cols, dtypes) for name, cols in mapping.items())
    row_at_a_time, fixed = _batch_policy([decls[k] for k in mapping])
    if fixed is not None and fixed != 1:
        raise SessionError(
            "unsupported",
            f"the model's batch axis is fixed at {fixed}: partitions cannot be split so; use "
            "predict() on frame.to_dask_array(lengths=True) chunked in blocks of that size",
        )
    outs = _outputs(sess, output_names)
    names, meta = [], {}
    for o in outs:
        cols, dtype = _output_columns(o)
        names.append(cols)
        for c in cols:
            meta[c] = pd.Series([], dtype=dtype)
    spec = _Spec(
        key=key,
        digest=digest,
        path=path,
        options=options,
        inputs=tuple(mapping),
        outputs=tuple(o.name for o in outs),
        row_at_a_time=row_at_a_time,
        empty=tuple(_empty(o) for o in outs),
    )
    meta_frame = pd.DataFrame(meta, index=frame._meta.index[:0])
    return frame.map_partitions(
        _predict_partition,
        spec,
        shipped,
        layout,
        tuple(names),
        meta=meta_frame,
    )


def _column_mapping(decls: Mapping[str, NodeArg], have: list, columns: Any) -> dict[str, Any]:
    only = next(iter(decls)) if len(decls) == 1 else None
    if columns is None:
        if all(name in have for name in decls):
            mapping: dict[str, Any] = {name: name for name in decls}
        elif only is not None:
            mapping = {only: list(have)}
        else:
            raise SessionError(
                "invalid_input",
                f"the model takes {', '.join(decls)}, not all of them columns of the frame: "
                "give columns={input name: column or [columns]}",
            )
    elif isinstance(columns, Mapping):
        mapping = {k: (v if isinstance(v, str) else list(v)) for k, v in columns.items()}
    elif only is not None:
        mapping = {only: columns if isinstance(columns, str) else list(columns)}
    else:
        raise SessionError(
            "invalid_input", "columns must map input names to columns for a model of several inputs"
        )
    _check_names(decls, mapping)
    absent = [
        c for v in mapping.values() for c in ([v] if isinstance(v, str) else v) if c not in have
    ]
    if absent:
        raise SessionError(
            "invalid_input", f"no column(s) {', '.join(map(repr, absent))} in the frame"
        )
    return mapping


def _column(decl: NodeArg, cols: Any, dtypes: Any) -> _Column:
    rank = len(decl.shape) if decl.shape is not None else (1 if isinstance(cols, str) else 2)
    width = 1 if isinstance(cols, str) else len(cols)
    if decl.kind != "tensor" or rank not in (1, 2) or (rank == 1 and width != 1):
        raise SessionError(
            "invalid_input",
            f"input {decl.name!r} is {decl.type} of shape {decl.shape}: columns feed tensors of "
            "shape [N] (one column) or [N, k] (k columns)",
        )
    if (
        rank == 2
        and isinstance(decl.shape[1], int)
        and decl.shape[1] > 0
        and decl.shape[1] != width
    ):
        raise SessionError(
            "invalid_input",
            f"input {decl.name!r} has shape {decl.shape}: give it {decl.shape[1]} columns, not "
            f"{width} ({cols!r})",
        )
    want = np.dtype(object) if decl.dtype is None else decl.dtype
    for c in [cols] if isinstance(cols, str) else cols:
        have = dtypes[c]
        if want.kind == "O":
            continue
        if not isinstance(have, np.dtype) or not np.can_cast(have, want, "same_kind"):
            raise SessionError(
                "invalid_input",
                f"column {c!r} is {have}, input {decl.name!r} takes {want}: convert the column",
            )
    return _Column(cols if isinstance(cols, str) else tuple(cols), rank, want)


def _output_columns(o: NodeArg) -> tuple[list[str], Any]:
    if o.kind != "tensor":
        return [o.name], object
    rank = None if o.shape is None else len(o.shape)
    width = o.shape[1] if rank == 2 else 1
    if rank not in (1, 2) or not isinstance(width, int) or width < 1 or o.dtype is None:
        raise SessionError(
            "unsupported",
            f"output {o.name!r} is {o.type} of shape {o.shape}: predict_frame makes columns of "
            "outputs of shape [N] or [N, k] with k fixed (use predict() for others, or leave "
            "it out with output_names)",
        )
    names = [o.name] if width == 1 else [f"{o.name}_{k}" for k in range(width)]
    return names, o.dtype
