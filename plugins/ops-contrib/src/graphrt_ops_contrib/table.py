"""The operator table of graphrt-ops-contrib: onnxruntime's com.microsoft quantization
operators, one line per operator.

The kernel modules are stand-ins (graphrt.lazy), imported the first time a session uses one of
their operators: importing them all took 33 ms of every fresh process's first session
(`bench/bench_cold_start.py`), models without these operators included.
"""

from __future__ import annotations

from graphrt.plugin import OpDef, kernel_modules

binary, concat, gemm, lookup, pool, softmax = kernel_modules(
    __package__, "binary concat gemm lookup pool softmax"
)

MS = "com.microsoft"

OPERATORS: list[OpDef] = [
    # element-wise (binary.py, lookup.py)
    OpDef("QLinearAdd", binary.QLinearAdd, domain=MS),
    OpDef("QLinearMul", binary.QLinearMul, domain=MS),
    OpDef("QLinearSigmoid", lookup.QLinearSigmoid, domain=MS),
    OpDef("QLinearLeakyRelu", lookup.QLinearLeakyRelu, domain=MS),
    # shape and pooling (concat.py, pool.py, softmax.py)
    OpDef("QLinearConcat", concat.QLinearConcat, domain=MS),
    OpDef("QLinearGlobalAveragePool", pool.QLinearGlobalAveragePool, domain=MS),
    OpDef("QLinearAveragePool", pool.QLinearAveragePool, domain=MS),
    OpDef("QLinearSoftmax", softmax.QLinearSoftmax, domain=MS),
    # integer products (gemm.py)
    OpDef("QGemm", gemm.QGemm, domain=MS),
    OpDef("MatMulIntegerToFloat", gemm.MatMulIntegerToFloat, domain=MS),
    OpDef("DynamicQuantizeMatMul", gemm.DynamicQuantizeMatMul, domain=MS),
]
