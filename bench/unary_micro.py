"""Native element-wise exp/tanh/sigmoid/erf (graphrt-ops-simd) against numpy, one thread.

    python bench/unary_micro.py [--repeat 7] [--isa avx512 ...]

Fast mode compares the native kernel (one call, as a kernel path runs a block) with numpy's
np.exp / np.tanh and ops-basic's fast Sigmoid and Erf recipes (scratch allocated beforehand,
as a session plans it); exact mode with ops-basic's numpy exact functions (_exact_math).
Prints microseconds (best of --repeat) and x = numpy / native.
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable

import numpy as np

import graphrt_ops_simd as simd
from graphrt_ops_basic import _erf
from graphrt_ops_basic import _exact_math as em
from graphrt_ops_basic.unary import sigmoid_into

SIZES = (1_000, 10_000, 100_000, 1_000_000)
FUNCTIONS = ("exp", "tanh", "sigmoid", "erf")


def best(fn: Callable[[], object], repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times) * 1e6


def numpy_fast(name: str, x: np.ndarray, out: np.ndarray) -> Callable[[], object]:
    if name == "exp":
        return lambda: np.exp(x, out=out)
    if name == "tanh":
        return lambda: np.tanh(x, out=out)
    if name == "sigmoid":
        e, num = np.empty_like(x), np.empty_like(x)
        return lambda: sigmoid_into(x, out, e, num)
    work = [np.empty_like(x) for _ in range(_erf.WORK_ARRAYS)]
    mask, top = np.empty(x.size, bool), np.empty((), np.float32)
    return lambda: _erf.erf_into(x, out, work, mask, top)


def numpy_exact(name: str, x: np.ndarray, out: np.ndarray) -> Callable[[], object]:
    w = em.make_work([np.empty(s, d) for d, s in em.work_specs(np.float32, x.size)])
    if name == "exp":
        return lambda: em.exp_into(x, out, w)
    if name == "tanh":
        return lambda: em.tanh_into(x, out, w)
    if name == "sigmoid":
        e = np.empty_like(x)
        return lambda: em.sigmoid_into(x, out, w, e)
    work = [np.empty_like(x) for _ in range(_erf.WORK_ARRAYS)]
    mask, top = np.empty(x.size, bool), np.empty((), np.float32)
    return lambda: em.erf_exact_into(x, out, work, mask, top, w)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--isa", nargs="*", default=simd.available_isas())
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print("microseconds, best of", args.repeat, "; x = numpy / native")
    print(f"{'fn':8} {'n':>8} {'isa':7} {'numpy':>9} {'native':>9} {'x fast':>7} "
          f"{'exact np':>9} {'x exact':>8}")  # fmt: skip
    for name in FUNCTIONS:
        for n in SIZES:
            x = rng.uniform(-6, 6, n).astype(np.float32)
            out = np.empty_like(x)
            fast = best(numpy_fast(name, x, out), args.repeat)
            exact = best(numpy_exact(name, x, out), max(1, args.repeat // 2))
            for isa in args.isa:
                call = functools.partial(simd.unary, name, x, out, isa)
                nat = best(call, args.repeat)
                print(f"{name:8} {n:>8} {isa:7} {fast:9.1f} {nat:9.1f} {fast / nat:7.2f} "
                      f"{exact:9.1f} {exact / nat:8.1f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
