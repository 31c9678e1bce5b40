"""The hook implementations graphrt finds through this package's entry point.

Three kernel paths, one per instruction set, each with Conv, MatMul, Gemm, MaxPool,
AveragePool, GlobalAveragePool, Concat, Exp, Tanh, Sigmoid, Erf, Gelu, NonMaxSuppression, RNN,
GRU, LSTM, Attention, LayerNormalization, Softmax, BatchNormalization (and
FusedBatchNormalization), the fused products (FusedConv, FusedMatMul, FusedGemm, and
FusedConvPool: a convolution and its MaxPool) and the int8
products (MatMulInteger, QLinearMatMul, with DynamicQuantizeLinear: qproduct.py) and
convolutions (ConvInteger, QLinearConv: qconv.py); the session picks the best available one
("auto") or the one forced by ``kernel_path=`` / ``GRAPHRT_KERNEL_PATH``.

It also defines the blocked layout's operators (``com.graphrt`` BlockedConv, BlockedMaxPool,
BlockedGlobalAveragePool, FromBlocked: blocked.py, numpy kernels on planar copies in the
table, native ones on avx2/avx512) and the pass that writes them on avx512 (layout.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from graphrt.plugin import (
    GraphPass,
    KernelPath,
    NodeInfo,
    OpDef,
    OpKernel,
    hookimpl,
    kernel_modules,
)

from . import _native
from .elementwise import UNARY, Gelu
from .kernels import Gemm, MatMul, NumpyFactory
from .layernorm import LayerNormalization
from .softmax import Softmax

# Imported when a session first builds one of their kernels (graphrt.lazy): each pulls in the
# numpy kernels it wraps, which a model without those operators should not pay for at start.
attention, conv, conv_pool, copies, fused, pool, recurrent, suppression = kernel_modules(
    __package__, "attention conv conv_pool copies fused pool recurrent suppression"
)
(batchnorm,) = kernel_modules(__package__, "batchnorm")  # BatchNormalization (+ Relu)
Attention = attention.Attention
Conv, FusedConv, FusedConvPool = conv.Conv, conv.FusedConv, conv_pool.FusedConvPool
Concat = copies.Concat
FusedGemm, FusedMatMul = fused.FusedGemm, fused.FusedMatMul
MaxPool, AveragePool, GlobalAveragePool = pool.MaxPool, pool.AveragePool, pool.GlobalAveragePool
(qproduct,) = kernel_modules(__package__, "qproduct")  # int8 products: MatMulInteger, ...
(qconv,) = kernel_modules(__package__, "qconv")  # int8 convolutions: ConvInteger, ...
(blocked,) = kernel_modules(__package__, "blocked")  # the blocked layout's operators
#: The blocked layout's operators: (op type, table kernel, native kernel).
BLOCKED_OPS = (
    ("BlockedConv", blocked.BlockedConv, blocked.NativeBlockedConv),
    ("BlockedMaxPool", blocked.BlockedMaxPool, blocked.NativeBlockedMaxPool),
    ("BlockedGlobalAveragePool", blocked.BlockedGlobalAveragePool,
     blocked.NativeBlockedGlobalAveragePool),
    ("FromBlocked", blocked.FromBlocked, blocked.NativeFromBlocked),
)  # fmt: skip
Recurrent = recurrent.Recurrent
NonMaxSuppression = suppression.NonMaxSuppression

#: (path name, rank); the name is also the native ISA the path's kernels call.
PATHS = (("scalar", 10), ("avx2", 20), ("avx512", 30))


def isa_available(isa: str) -> bool:
    """Whether this CPU and OS can run ``isa`` (checked natively, once per call)."""
    return isa in _native.available_isas()


def _factory(cls: type, isa: str) -> Callable[[NodeInfo, NumpyFactory], OpKernel]:
    def make(node: NodeInfo, numpy_factory: NumpyFactory) -> OpKernel:
        return cls(node, numpy_factory, isa)

    make.__name__ = f"{cls.__name__}_{isa}"
    return make


def kernel_paths() -> list[KernelPath]:
    return [
        KernelPath(
            name=isa,
            rank=rank,
            available=functools.partial(isa_available, isa),
            kernels={
                ("", "MatMul"): _factory(MatMul, isa),
                ("", "Gemm"): _factory(Gemm, isa),
                ("", "MatMulInteger"): _factory(qproduct.MatMulInteger, isa),
                ("", "QLinearMatMul"): _factory(qproduct.QLinearMatMul, isa),
                ("", "DynamicQuantizeLinear"): _factory(qproduct.DynamicQuantizeLinear, isa),
                ("", "ConvInteger"): _factory(qconv.ConvInteger, isa),
                ("", "QLinearConv"): _factory(qconv.QLinearConv, isa),
                ("", "Conv"): _factory(Conv, isa),
                ("com.graphrt", "FusedConv"): _factory(FusedConv, isa),
                ("com.graphrt", "FusedConvPool"): _factory(FusedConvPool, isa),
                ("com.graphrt", "FusedMatMul"): _factory(FusedMatMul, isa),
                ("com.graphrt", "FusedGemm"): _factory(FusedGemm, isa),
                ("", "Gelu"): _factory(Gelu, isa),
                ("", "MaxPool"): _factory(MaxPool, isa),
                ("", "AveragePool"): _factory(AveragePool, isa),
                ("", "GlobalAveragePool"): _factory(GlobalAveragePool, isa),
                ("", "Concat"): _factory(Concat, isa),
                ("", "NonMaxSuppression"): _factory(NonMaxSuppression, isa),
                **{("", op): _factory(Recurrent, isa) for op in ("RNN", "GRU", "LSTM")},
                ("com.graphrt", "Gelu"): _factory(Gelu, isa),
                ("", "Attention"): _factory(Attention, isa),
                ("com.graphrt", "Attention"): _factory(Attention, isa),
                ("", "LayerNormalization"): _factory(LayerNormalization, isa),
                ("", "Softmax"): _factory(Softmax, isa),
                ("", "BatchNormalization"): _factory(batchnorm.BatchNormalization, isa),
                ("com.graphrt", "FusedBatchNormalization"): _factory(
                    batchnorm.BatchNormalization, isa
                ),
                ("com.graphrt", "LayerNormalization"): _factory(LayerNormalization, isa),
                **{("", op): _factory(cls, isa) for op, cls in UNARY.items()},
                **{("com.graphrt", op): _factory(cls, isa) for op, _, cls in BLOCKED_OPS},
            },
        )
        for isa, rank in PATHS
    ]


@hookimpl
def graphrt_kernel_paths() -> list[KernelPath]:
    return kernel_paths()


@hookimpl
def graphrt_operators() -> list[OpDef]:
    return [OpDef(op, table, domain="com.graphrt") for op, table, _ in BLOCKED_OPS]


@hookimpl
def graphrt_graph_passes() -> list[GraphPass]:
    from .layout import BlockedLayout

    return [BlockedLayout()]
