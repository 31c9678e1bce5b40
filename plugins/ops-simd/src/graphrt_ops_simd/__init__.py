"""graphrt-ops-simd: native float32 GEMM kernels for MatMul and Gemm, as graphrt kernel paths."""

from __future__ import annotations

from ._native import PackedB, available_isas, canonicalize_nan, gemm, gemm_exact, pack_b

__all__ = ["PackedB", "available_isas", "canonicalize_nan", "gemm", "gemm_exact", "pack_b"]
