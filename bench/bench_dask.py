"""Scale-out throughput: graphrt.dask.predict on a LocalCluster against one process (issue 20).

    python bench/bench_dask.py [--model light_squeezenet] [--images 1024] [--block 64]
                               [--passes 4] [--workers 2] [--rounds 5]

One process: a session with one intra-op thread scores every image, block after block (the
model's batch axis is fixed at 1, so row by row, as graphrt.dask runs a block).  Cluster:
``--workers`` worker processes of one thread each score the same images, held on the workers
(generated there, the blocks dealt to the workers in turn, so that the input's transfer is not
timed; the outputs come back to the client and are timed).  Each round scores the images
``--passes`` times on both sides: a longer job, as a batch job is, over which Dask's fixed costs
(some 20 ms to start a computation, 25-100 ms to gather its outputs) spread.  Blocks of 64
images are 38 MB, below Dask's advice for chunks (100 MB and up); 16-image blocks cost some 2 ms
of scheduling between tasks on two busy cores.  Each side is warmed up first (sessions made,
plans built), then both are timed in turn, ``--rounds`` times (interleaved, so that both see
the same neighbours); medians.  The ratio is cluster throughput over one-process throughput:
the target is 1.7x for 2 workers on 2 cores.  The load average and the time per image inside
the workers' tasks are printed too: on a shared machine the ratio says more about the
neighbours than about Dask.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time

import numpy as np
import onnx

# Diagnostics a batch job does without; the memory limit and work stealing stay as they are.
BATCH_CONFIG = {
    "distributed.worker.profile.enabled": False,  # samples every thread's stack each 10 ms
    "distributed.admin.tick.interval": "1s",  # event-loop blocking monitor, 20 ms by default
    "distributed.admin.system-monitor.interval": "5s",  # psutil CPU/memory/network polls
    "distributed.worker.memory.monitor-interval": "1s",  # the nanny's memory-limit check
}

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def _serial_runner(path: str, name: str, images: int, block: int, passes: int):
    """One round of the one-process side: every image, block after block, row by row,
    ``passes`` times."""
    import graphrt

    sess = graphrt.Session(path, intra_op_threads=1)
    # as many distinct images as the workers score (not one block again and again: that block
    # would stay in the caches, which the workers' blocks do not)
    x = np.random.default_rng(0).standard_normal((images, 3, 224, 224), dtype=np.float32)

    def once(passes: int = passes) -> None:
        for _ in range(passes):
            for b in range(images // block):
                for i in range(b * block, (b + 1) * block):
                    sess.run(None, {name: x[i : i + 1]})

    return once


def _model_seconds(tasks: list[dict]) -> float:
    """Seconds the workers spent computing graphrt's predict tasks (from the task stream)."""
    return sum(
        s["stop"] - s["start"]
        for task in tasks
        if "graphrt-predict" in str(task.get("key"))
        for s in task.get("startstops", ())
        if s.get("action") == "compute"
    )


def _make_block(seed: int, rows: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, 3, 224, 224), dtype=np.float32)


def _blocks_on_workers(client, images: int, block: int):
    """The input, generated on the workers and kept there (its transfer is not timed), its blocks
    dealt to the workers in turn.  ``persist`` alone put 9 of 16 blocks on one worker: the other
    then idled for the last block, which a long job's many blocks would average away."""
    import dask
    import dask.array as da
    import distributed

    workers = sorted(client.scheduler_info()["workers"])
    futures = [
        client.submit(_make_block, b, block, workers=[workers[b % len(workers)]], pure=False)
        for b in range(images // block)
    ]
    parts = [da.from_delayed(dask.delayed(f), (block, 3, 224, 224), np.float32) for f in futures]
    x = da.concatenate(parts).persist()
    distributed.wait(x)
    return x


def _input_name(path: str) -> str:
    import graphrt

    return graphrt.Session(path).get_inputs()[0].name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="light_squeezenet")
    parser.add_argument("--images", type=int, default=1024)
    parser.add_argument("--block", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--passes", type=int, default=4, help="times each round scores the images (a longer job)"
    )
    parser.add_argument(
        "--dask-defaults",
        action="store_true",
        help="run the cluster with Dask's own settings instead of BATCH_CONFIG",
    )
    args = parser.parse_args()
    path = os.path.join(LIGHT_DIR, f"{args.model}.onnx")

    import dask
    import dask.array as da
    import distributed

    import graphrt.dask as gd

    if not args.dask_defaults:
        dask.config.set(BATCH_CONFIG)  # before the cluster starts: the workers inherit it

    images = args.images - args.images % args.block
    load = os.getloadavg()
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
        name = _input_name(path)
        serial = _serial_runner(path, name, images, args.block, args.passes)
        x = _blocks_on_workers(client, images, args.block)
        serial(1)  # warm-up: plans
        client.compute(gd.predict(path, {name: x}), sync=True)  # warm-up: sessions, plans
        x = da.concatenate([x] * args.passes)  # the same blocks again: one longer job
        ones, manys, busy = [], [], []
        for _ in range(args.rounds):  # interleaved: both sides see the same neighbours
            t = time.perf_counter()
            serial()
            ones.append(time.perf_counter() - t)
            with distributed.get_task_stream(client) as stream:
                t = time.perf_counter()
                client.compute(gd.predict(path, {name: x}), sync=True)
                manys.append(time.perf_counter() - t)
            busy.append(_model_seconds(stream.data))
        sessions = client.run(gd.cached_sessions)
    load_after = os.getloadavg()
    one, many, inside = (statistics.median(v) for v in (ones, manys, busy))
    w = args.workers
    print(
        f"model {args.model}, {images} images in blocks of {args.block}, scored {args.passes} "
        f"times a round, {args.rounds} rounds"
    )
    images *= args.passes  # scored per round
    print("dask settings: " + ("Dask's defaults" if args.dask_defaults else f"{BATCH_CONFIG}"))
    print(f"cores {os.cpu_count()}, load average before {load[0]:.2f}, after {load_after[0]:.2f}")
    print(f"sessions per worker after {args.rounds + 1} calls: {sorted(sessions.values())}")
    print(f"one process, 1 thread:        {images / one:8.1f} images/s ({one:.3f} s)")
    print(f"{w} workers, 1 thread each: {images / many:8.1f} images/s ({many:.3f} s)")
    print(
        f"per image: {1000 * one / images:.2f} ms in one process, {1000 * inside / images:.2f} ms "
        f"inside the workers' predict tasks ({100 * inside / (many * w):.0f}% of their wall time)"
    )
    ratios = ", ".join(f"{a / b:.2f}" for a, b in zip(ones, manys))
    print(
        f"ratio: {one / many:.2f}x (per round {ratios}; target >= 1.7x for 2 workers, 2 free cores)"
    )


if __name__ == "__main__":
    main()
