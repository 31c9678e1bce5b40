"""What ``graphrt run``/``explain``/``profile`` feed a model: given .npy/.npz files, or
deterministic random arrays from the declared shapes (symbolic dims from ``--dim``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["CLIError", "make_inputs", "parse_dims", "random_array", "session_inputs"]

INT_RANGE = (0, 4)  # random integer inputs are drawn from [0, 4): valid as small indices


class CLIError(Exception):
    """A mistake in the command line (bad file, bad --dim): printed, exit status 2."""


def parse_dims(items: Sequence[str] | None) -> dict[str, int]:
    """``["N=4", "seq=16"]`` -> ``{"N": 4, "seq": 16}``."""
    dims: dict[str, int] = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        try:
            size = int(value)
        except ValueError:
            size = -1
        if not sep or not name or size < 0:
            raise CLIError(f"--dim expects SYMBOL=SIZE with SIZE >= 0, got {item!r}")
        dims[name] = size
    return dims


def _load_array(path: str, what: str) -> Any:
    if not os.path.exists(path):
        raise CLIError(f"{what}: no such file {path!r}")
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise CLIError(f"{what}: cannot read {path!r} as .npy/.npz: {exc}") from exc


def _given_inputs(
    names: Sequence[str], inputs: Sequence[str] | None, npz: str | None
) -> dict[str, np.ndarray]:
    given: dict[str, np.ndarray] = {}
    if npz:
        data = _load_array(npz, "--inputs")
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise CLIError(f"--inputs expects an .npz archive, {npz!r} holds a single array")
        with data:
            for key in data.files:
                if key not in names:
                    raise CLIError(
                        f"--inputs {npz!r} holds {key!r}, which is not an input of the model "
                        f"(inputs: {', '.join(names) or 'none'})"
                    )
                given[key] = data[key]
    for item in inputs or ():
        name, sep, path = item.partition("=")
        if not sep:
            if len(names) != 1:
                raise CLIError(f"--input expects NAME=FILE.npy, got {item!r}")
            name, path = names[0], item
        if name not in names:
            raise CLIError(
                f"--input names {name!r}, which is not an input of the model "
                f"(inputs: {', '.join(names) or 'none'})"
            )
        arr = _load_array(path, f"--input {name}")
        if not isinstance(arr, np.ndarray):
            raise CLIError(f"--input {name}: {path!r} is an .npz archive; use --inputs for it")
        given[name] = arr
    return given


def random_array(dtype: np.dtype, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Deterministic random data: normal floats, small non-negative integers, booleans."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(*INT_RANGE, size=shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    if dtype.kind in "OUS":
        return np.full(shape, "a", dtype=object)
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


def make_inputs(
    session: Any,
    *,
    inputs: Sequence[str] | None = None,
    npz: str | None = None,
    dims: dict[str, int] | None = None,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Inputs from files where given, else random ones from the declared types and shapes.

    Symbolic dims take their size from ``dims`` (default 1); unknown dims are 1.
    """
    return session_inputs(session, inputs, npz, dims, seed)[0]


def session_inputs(
    session: Any,
    inputs: Sequence[str] | None,
    npz: str | None,
    dims: dict[str, int] | None,
    seed: int,
) -> tuple[dict[str, np.ndarray], set[str]]:
    dims = dict(dims or {})
    decls = session.get_inputs()
    names = [d.name for d in decls]
    feed = _given_inputs(names, inputs, npz)
    given = set(feed)
    rng = np.random.default_rng(seed)
    used: set[str] = set()
    for d in decls:
        if d.name in feed:
            continue
        if d.kind != "tensor":
            raise CLIError(f"input {d.name!r} is a {d.kind}; give it with --input or --inputs")
        if d.shape is None:
            raise CLIError(
                f"input {d.name!r} declares no shape; give it with --input {d.name}=FILE.npy"
            )
        shape = []
        for dim in d.shape:
            if isinstance(dim, str):
                used.add(dim)
                shape.append(dims.get(dim, 1))
            elif isinstance(dim, int) and dim > 0:
                shape.append(dim)
            else:
                shape.append(1)
        dtype = d.dtype if d.dtype is not None else np.dtype(np.float32)
        feed[d.name] = random_array(dtype, tuple(shape), rng)
    unused = sorted(set(dims) - used)
    if unused:
        print(
            f"graphrt: warning: --dim {', '.join(unused)}: no randomly made input uses it",
            file=sys.stderr,
        )
    return feed, given
