"""ONNX element types and their numpy dtypes."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

__all__ = ["NAMES", "from_onnx", "name_of", "to_onnx"]

try:  # bfloat16 and the float8 family come from ml_dtypes when it is installed
    import ml_dtypes as _ml
except ImportError:  # pragma: no cover - ml_dtypes is a dependency, this keeps core importable
    _ml = None

_TABLE: dict[int, np.dtype] = {
    TensorProto.FLOAT: np.dtype(np.float32),
    TensorProto.DOUBLE: np.dtype(np.float64),
    TensorProto.FLOAT16: np.dtype(np.float16),
    TensorProto.INT8: np.dtype(np.int8),
    TensorProto.INT16: np.dtype(np.int16),
    TensorProto.INT32: np.dtype(np.int32),
    TensorProto.INT64: np.dtype(np.int64),
    TensorProto.UINT8: np.dtype(np.uint8),
    TensorProto.UINT16: np.dtype(np.uint16),
    TensorProto.UINT32: np.dtype(np.uint32),
    TensorProto.UINT64: np.dtype(np.uint64),
    TensorProto.BOOL: np.dtype(np.bool_),
    TensorProto.STRING: np.dtype(object),
    TensorProto.COMPLEX64: np.dtype(np.complex64),
    TensorProto.COMPLEX128: np.dtype(np.complex128),
}
if _ml is not None:
    for _code, _name in [
        (TensorProto.BFLOAT16, "bfloat16"),
        (TensorProto.FLOAT8E4M3FN, "float8_e4m3fn"),
        (TensorProto.FLOAT8E4M3FNUZ, "float8_e4m3fnuz"),
        (TensorProto.FLOAT8E5M2, "float8_e5m2"),
        (TensorProto.FLOAT8E5M2FNUZ, "float8_e5m2fnuz"),
        (TensorProto.INT4, "int4"),
        (TensorProto.UINT4, "uint4"),
        (getattr(TensorProto, "FLOAT4E2M1", None), "float4_e2m1fn"),
        (getattr(TensorProto, "FLOAT8E8M0", None), "float8_e8m0fnu"),
        (getattr(TensorProto, "INT2", None), "int2"),
        (getattr(TensorProto, "UINT2", None), "uint2"),
    ]:
        if _code is not None and hasattr(_ml, _name):
            _TABLE[_code] = np.dtype(getattr(_ml, _name))

_REVERSE = {v: k for k, v in _TABLE.items()}
NAMES = {code: TensorProto.DataType.Name(code).lower() for code in _TABLE}


def from_onnx(elem_type: int) -> np.dtype:
    """numpy dtype of an ONNX element type; KeyError for types graphrt cannot hold."""
    return _TABLE[elem_type]


def to_onnx(dtype: np.dtype) -> int:
    return _REVERSE[np.dtype(dtype)]


def name_of(dtype: np.dtype | None) -> str:
    """The ONNX spelling users see in errors: tensor(float), tensor(int64)."""
    if dtype is None:
        return "unknown"
    code = _REVERSE.get(np.dtype(dtype))
    return f"tensor({NAMES[code]})" if code is not None else str(dtype)
