"""The operator table of graphrt-ops-basic: one line per operator.

``since``/``until`` are the opset versions of the ai.onnx domain a kernel implements; one kernel
usually covers every version, reading ``node.opset`` where the versions differ.
"""

from __future__ import annotations

from graphrt.kernel import OpDef

from . import binary, constant, matmul, unary, views

OPERATORS: list[OpDef] = [
    # element-wise binary (binary.py)
    OpDef("Add", binary.Add),
    OpDef("Sub", binary.Sub),
    OpDef("Mul", binary.Mul),
    # element-wise unary (unary.py)
    OpDef("Relu", unary.Relu),
    # matrix products (matmul.py)
    OpDef("MatMul", matmul.MatMul),
    OpDef("Gemm", matmul.Gemm),
    # views (views.py)
    OpDef("Identity", views.Identity),
    OpDef("Reshape", views.Reshape),
    OpDef("Flatten", views.Flatten),
    OpDef("Squeeze", views.Squeeze),
    OpDef("Unsqueeze", views.Unsqueeze),
    # constants (constant.py)
    OpDef("Constant", constant.Constant),
]

# -- element-wise families (binary.py, unary.py, elementwise helpers) --------------------------
OPERATORS += [
]

# -- neural-network operators (conv.py, pool.py, norm.py) --------------------------------------
OPERATORS += [
]

# -- tensor and shape operators (shape.py, tensor.py) ------------------------------------------
OPERATORS += [
]
