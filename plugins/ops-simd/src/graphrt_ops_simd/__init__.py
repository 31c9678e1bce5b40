"""graphrt-ops-simd: native float32 GEMM (MatMul, Gemm), 2-D convolution (Conv, FusedConv,
depthwise too), MaxPool, exp/tanh/sigmoid/erf and NonMaxSuppression kernels, as graphrt
kernel paths."""

from __future__ import annotations

from ._native import (
    ConvCall,
    ConvPlan,
    DepthwiseCall,
    GemmCall,
    MaxPoolCall,
    PackedB,
    available_isas,
    canonicalize_nan,
    concat,
    conv_plan,
    conv_tuning,
    gemm,
    gemm_exact,
    maxpool2d,
    nms,
    pack_b,
    unary,
)

__all__ = [
    "GemmCall",
    "ConvCall",
    "ConvPlan",
    "DepthwiseCall",
    "MaxPoolCall",
    "PackedB",
    "available_isas",
    "canonicalize_nan",
    "concat",
    "conv_plan",
    "conv_tuning",
    "gemm",
    "gemm_exact",
    "maxpool2d",
    "nms",
    "pack_b",
    "unary",
]
