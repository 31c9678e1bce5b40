"""Score a folder of .npy images on a Dask LocalCluster with graphrt.dask.

    python examples/dask_score_folder.py [FOLDER] [--model MODEL] [--workers 2] [--block 8]

FOLDER holds .npy files, each one image [3, 224, 224] or a batch [n, 3, 224, 224] of float32;
without FOLDER the example first writes 24 random images to a temporary folder.  MODEL is a model
file or the name of a model shipped inside the onnx package (``light_squeezenet``, the default,
as ``graphrt run`` finds them).  Prints every image's top class and its score.

Needs ``pip install 'graphrt[dask]'``.  Files are read on the workers, so they (and MODEL) must
be readable there: on a LocalCluster they are.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile

import dask
import dask.array as da
import distributed
import numpy as np

import graphrt.dask
from graphrt.cli_inputs import CLIError
from graphrt.cli_models import LIGHT_NOTE, is_light, model_arg


def load_images(path: str) -> np.ndarray:
    """One file as a batch: [3, H, W] becomes [1, 3, H, W]."""
    x = np.load(path)
    return x[None] if x.ndim == 3 else x


def folder_array(folder: str, block: int) -> tuple[da.Array, list[tuple[str, int]]]:
    """Every .npy file of the folder as one dask array of rows (read lazily, on the workers),
    chunked in blocks of ``block`` rows, and each file's name with its number of rows."""
    parts, files = [], []
    for name in sorted(f for f in os.listdir(folder) if f.endswith(".npy")):
        path = os.path.join(folder, name)
        header = np.load(path, mmap_mode="r")  # shape and dtype only: nothing is read
        shape = header.shape if header.ndim == 4 else (1, *header.shape)
        parts.append(da.from_delayed(dask.delayed(load_images)(path), shape, header.dtype))
        files.append((name, shape[0]))
    if not parts:
        raise SystemExit(f"no .npy files in {folder}")
    x = da.concatenate(parts).rechunk({0: block, 1: -1, 2: -1, 3: -1})
    return x, files


def write_random_images(folder: str, count: int = 24) -> None:
    rng = np.random.default_rng(0)
    for i in range(count):
        np.save(os.path.join(folder, f"image_{i:03d}.npy"), rng.random((3, 224, 224), np.float32))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", help="a folder of .npy files (default: random ones)")
    parser.add_argument("--model", default="light_squeezenet")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--block", type=int, default=8, help="rows per task")
    args = parser.parse_args()
    try:
        model, described = model_arg(args.model)
    except CLIError as exc:
        raise SystemExit(str(exc)) from None

    with tempfile.TemporaryDirectory() as scratch:
        folder = args.folder
        if folder is None:
            folder = scratch
            write_random_images(folder)
        x, files = folder_array(folder, args.block)
        print(f"{x.shape[0]} images from {folder}, model {described}", file=sys.stderr)
        with (
            distributed.LocalCluster(
                n_workers=args.workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.ERROR,
            ) as cluster,
            distributed.Client(cluster) as client,
        ):
            name = graphrt.Session(model).get_inputs()[0].name
            (probs,) = graphrt.dask.predict(model, {name: x})
            probs = probs.reshape(probs.shape[0], -1)  # [N, 1000, 1, 1] -> [N, 1000]
            top, score = dask.compute(probs.argmax(axis=1), probs.max(axis=1))
            sessions = client.run(graphrt.dask.cached_sessions)
        row = 0
        for file, rows in files:
            for k in range(rows):
                label = file if rows == 1 else f"{file}[{k}]"
                print(f"{label}\tclass {top[row]}\tscore {score[row]:.6f}")
                row += 1
        print(f"sessions per worker: {sorted(sessions.values())}", file=sys.stderr)
        if is_light(model):
            print(LIGHT_NOTE, file=sys.stderr)


if __name__ == "__main__":
    main()
