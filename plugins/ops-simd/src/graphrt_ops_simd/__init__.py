"""graphrt-ops-simd: native float32 GEMM (MatMul, Gemm) and exp/tanh/sigmoid/erf kernels, as
graphrt kernel paths."""

from __future__ import annotations

from ._native import (
    PackedB,
    available_isas,
    canonicalize_nan,
    gemm,
    gemm_exact,
    pack_b,
    unary,
)

__all__ = [
    "PackedB",
    "available_isas",
    "canonicalize_nan",
    "gemm",
    "gemm_exact",
    "pack_b",
    "unary",
]
