"""The hook implementations graphrt finds through this package's entry point.

Three kernel paths, one per instruction set, each with Conv, MatMul, Gemm, MaxPool, Concat,
Exp, Tanh, Sigmoid, Erf, Gelu, NonMaxSuppression and the fused products (FusedConv,
FusedMatMul, FusedGemm); the session picks the best available one ("auto") or the one forced by
``kernel_path=`` / ``GRAPHRT_KERNEL_PATH``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from graphrt import hookimpl
from graphrt.kernel import NodeInfo, OpKernel
from graphrt.paths import KernelPath

from . import _native
from .conv import Conv, FusedConv
from .copies import Concat
from .elementwise import UNARY, Gelu
from .fused import FusedMatMul, FusedProduct
from .kernels import Gemm, MatMul, NumpyFactory
from .pool import MaxPool
from .suppression import NonMaxSuppression

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
                ("", "Conv"): _factory(Conv, isa),
                ("com.graphrt", "FusedConv"): _factory(FusedConv, isa),
                ("com.graphrt", "FusedMatMul"): _factory(FusedMatMul, isa),
                ("com.graphrt", "FusedGemm"): _factory(FusedProduct, isa),
                ("", "Gelu"): _factory(Gelu, isa),
                ("", "MaxPool"): _factory(MaxPool, isa),
                ("", "Concat"): _factory(Concat, isa),
                ("", "NonMaxSuppression"): _factory(NonMaxSuppression, isa),
                ("com.graphrt", "Gelu"): _factory(Gelu, isa),
                **{("", op): _factory(cls, isa) for op, cls in UNARY.items()},
            },
        )
        for isa, rank in PATHS
    ]


@hookimpl
def graphrt_kernel_paths() -> list[KernelPath]:
    return kernel_paths()
