"""What the tests of graphrt-ops-simd share: the module (or a skip) and reference products."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

simd = pytest.importorskip(
    "graphrt_ops_simd",
    reason="graphrt-ops-simd is not installed (pip install -e ./plugins/ops-simd)",
)

from graphrt_ops_basic.matmul import exact_matmul  # noqa: E402

ISAS = simd.available_isas()
ALL_PATHS = ("scalar", "avx2", "avx512")


def bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint32)


def exact_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ops-basic's canonical product with NaN rewritten to 0x7FC00000."""
    out = np.empty((a.shape[0], b.shape[1]), np.float32)
    exact_matmul(a, b, out, np.empty_like(out))
    out[np.isnan(out)] = np.float32(np.nan)
    return out


def path_or_skip(name: str) -> str:
    if name not in ISAS:
        pytest.skip(f"kernel path {name!r} is not available on this CPU/OS")
    return name


def on_every_isa(strategy, examples: int = 60):
    """A hypothesis property over ``strategy`` (argument ``g``) run on every ISA, each
    skipped where this CPU lacks it; the test receives ``isa`` and ``g``."""
    from hypothesis import HealthCheck, given, settings

    def wrap(test):
        def run(isa, g):
            path_or_skip(isa)
            test(isa, g)

        run.__name__, run.__doc__ = test.__name__, test.__doc__
        run = given(g=strategy)(run)
        run = settings(
            max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow]
        )(run)
        return pytest.mark.parametrize("isa", ALL_PATHS)(run)

    return wrap


def recording(real: Any, made: list) -> Any:
    """A stand-in for a native class (``_native.ConvPoolCall``, ``AvgPoolCall``, ...) that
    appends each constructor's arguments to ``made`` and returns the real object."""

    def make(*args: Any, **kw: Any) -> Any:
        made.append(args)
        return real(*args, **kw)

    return make


def counting_gemm_call(real: Any, record: Any) -> Any:
    """A stand-in for ``_native.GemmCall`` whose calls report their constructor's arguments
    to ``record`` before running the real product (for tests that count native products).  A
    subclass, so that a ``_native.GemmBatch`` still takes its objects (and runs them without
    reporting: see counting_gemm_batch)."""

    class Counted(real):
        def __init__(self, *args: Any, **kw: Any) -> None:
            super().__init__(*args, **kw)
            self.args = args

        def __call__(self) -> None:
            record(self.args)
            super().__call__()

    return Counted


def counting_gemm_batch(real: Any, record: Any) -> Any:
    """A stand-in for ``_native.GemmBatch`` whose calls report each of its GemmCalls'
    constructor arguments (counting_gemm_call's objects) to ``record`` before running it."""

    def make(packs: Any, bs: Any, calls: Any, threads: int = 1) -> Any:
        batch = real(packs, bs, calls, threads)

        def counted() -> None:
            for call in calls:
                record(call.args)
            batch()

        return counted

    return make
