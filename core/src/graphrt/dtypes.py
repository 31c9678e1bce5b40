"""ONNX element types and their numpy dtypes.

bfloat16, the float8 family and the 4- and 2-bit types are ml_dtypes' types.  ml_dtypes is
imported the first time one of them is asked for (by ONNX code, or as a dtype, which means the
caller imported ml_dtypes already): importing it registers dozens of numpy casts and ufunc loops,
a cost a model of float32 and int64 should not pay at start-up.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

from graphrt.proto import TensorProto

__all__ = ["NAMES", "from_onnx", "load_ml_dtypes", "name_of", "to_onnx"]

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
#: ONNX types held by ml_dtypes, by the ONNX name of the code and ml_dtypes' name of the type.
_ML_TYPES = {
    "BFLOAT16": "bfloat16",
    "FLOAT8E4M3FN": "float8_e4m3fn",
    "FLOAT8E4M3FNUZ": "float8_e4m3fnuz",
    "FLOAT8E5M2": "float8_e5m2",
    "FLOAT8E5M2FNUZ": "float8_e5m2fnuz",
    "INT4": "int4",
    "UINT4": "uint4",
    "FLOAT4E2M1": "float4_e2m1fn",
    "FLOAT8E8M0": "float8_e8m0fnu",
    "INT2": "int2",
    "UINT2": "uint2",
}
_ML_CODES = {
    getattr(TensorProto, name): ml for name, ml in _ML_TYPES.items() if hasattr(TensorProto, name)
}

_REVERSE = {v: k for k, v in _TABLE.items()}
NAMES = {code: TensorProto.DataType.Name(code).lower() for code in _TABLE}

_ml_lock = threading.Lock()
_ml_state: list[bool] = []  # [True] once ml_dtypes' types are in the tables, [False] if absent


def load_ml_dtypes() -> bool:
    """Add ml_dtypes' types to the tables (once per process); False when it is not installed."""
    if _ml_state:
        return _ml_state[0]
    with _ml_lock:
        if not _ml_state:
            try:
                import ml_dtypes
            except ImportError:  # pragma: no cover - ml_dtypes is a dependency
                _ml_state.append(False)
                return False
            for code, ml_name in _ML_CODES.items():
                if hasattr(ml_dtypes, ml_name):
                    dtype = np.dtype(getattr(ml_dtypes, ml_name))
                    NAMES[code] = TensorProto.DataType.Name(code).lower()
                    _REVERSE[dtype] = code
                    _TABLE[code] = dtype  # last: readers without the lock look here first
            _ml_state.append(True)
    return _ml_state[0]


def from_onnx(elem_type: int) -> np.dtype:
    """numpy dtype of an ONNX element type; KeyError for types graphrt cannot hold."""
    try:
        return _TABLE[elem_type]
    except KeyError:
        if elem_type not in _ML_CODES or not load_ml_dtypes():
            raise
    return _TABLE[elem_type]


def _code(dtype: np.dtype) -> int | None:
    code = _REVERSE.get(dtype)
    # A dtype graphrt does not know yet may be ml_dtypes' (then the caller imported it).
    if code is None and "ml_dtypes" in sys.modules and load_ml_dtypes():
        code = _REVERSE.get(dtype)
    return code


def to_onnx(dtype: np.dtype) -> int:
    code = _code(np.dtype(dtype))
    if code is None:
        raise KeyError(np.dtype(dtype))
    return code


def name_of(dtype: np.dtype | None) -> str:
    """The ONNX spelling users see in errors: tensor(float), tensor(int64)."""
    if dtype is None:
        return "unknown"
    code = _code(np.dtype(dtype))
    return f"tensor({NAMES[code]})" if code is not None else str(dtype)
