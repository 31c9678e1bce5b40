"""ONNX's protobuf messages without importing the ``onnx`` package: the cold-start path.

``import onnx`` runs the package's ``__init__``, which imports onnx.helper (and through it
ml_dtypes), the checker, the C++ schema registry and more: most of a second, on a cold machine
several, before a session could start.  Reading a model needs only the generated protobuf
module, ``onnx/onnx_ml_pb2.py``, which imports nothing of onnx; this module executes that file
of the installed onnx by path.  The message classes are the very ones ``onnx`` exposes: the
generated code registers its file in protobuf's default pool and the class of a message
descriptor is made once per process, so ``onnx.ModelProto is graphrt.proto.ModelProto`` in
either import order (tests/test_cold_start.py checks it).

When onnx is already imported, or its file layout is not the expected one, this is plain
``onnx.onnx_ml_pb2``.  :func:`to_array` decodes the element types numpy holds natively itself
and hands the others (bfloat16, float8, 4-bit...) to ``onnx.numpy_helper``, which needs
ml_dtypes anyway.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import math
import os
import sys
from types import ModuleType
from typing import Any

import numpy as np

__all__ = [
    "IR_VERSION",
    "AttributeProto",
    "FunctionProto",
    "GraphProto",
    "ModelProto",
    "NodeProto",
    "SparseTensorProto",
    "TensorProto",
    "TypeProto",
    "ValueInfoProto",
    "load_model",
    "opset_supported",
    "onnx_version",
    "parse_model",
    "to_array",
]


def _generated_module() -> ModuleType:
    loaded = sys.modules.get("onnx.onnx_ml_pb2")
    if loaded is not None:
        return loaded
    if "onnx" not in sys.modules:
        try:
            spec = importlib.util.find_spec("onnx")
            folders = list(spec.submodule_search_locations or []) if spec else []
            for folder in folders:
                path = os.path.join(folder, "onnx_ml_pb2.py")
                if os.path.isfile(path):
                    own = importlib.util.spec_from_file_location("graphrt._onnx_ml_pb2", path)
                    module = importlib.util.module_from_spec(own)
                    own.loader.exec_module(module)
                    return module
        except Exception:  # any surprise in the layout: the ordinary import below
            pass
    return importlib.import_module("onnx.onnx_ml_pb2")


_pb2 = _generated_module()

ModelProto = _pb2.ModelProto
GraphProto = _pb2.GraphProto
NodeProto = _pb2.NodeProto
TensorProto = _pb2.TensorProto
SparseTensorProto = _pb2.SparseTensorProto
AttributeProto = _pb2.AttributeProto
ValueInfoProto = _pb2.ValueInfoProto
FunctionProto = _pb2.FunctionProto
TypeProto = _pb2.TypeProto
#: The newest IR version the installed onnx defines.
IR_VERSION: int = int(_pb2.IR_VERSION)

#: File extensions onnx reads as binary protobuf; any other goes through ``onnx.load``, which
#: knows the text formats (.textproto, .json, .onnxtxt...) by extension.
_BINARY_EXTENSIONS = (".onnx", ".pb")


def parse_model(data: bytes) -> Any:
    """A ModelProto from its binary form; every byte must belong to the message."""
    model = ModelProto()
    consumed = model.ParseFromString(data)
    if consumed is not None and consumed != len(data):
        raise ValueError(f"protobuf decoding consumed {consumed} of {len(data)} bytes")
    return model


def load_model(path: str) -> Any:
    """The ModelProto in ``path``, external data left where it is."""
    if os.path.splitext(path)[1].lower() in _BINARY_EXTENSIONS:
        with open(path, "rb") as f:
            return parse_model(f.read())
    import onnx

    return onnx.load(path, load_external_data=False)


# -- versions ------------------------------------------------------------------------------------

#: The newest ai.onnx opset of onnx releases (major, minor), a lower bound for later releases:
#: a model at or below it is known to be defined without asking onnx's C++ schema registry.
_RELEASE_OPSETS = {(1, 15): 20, (1, 16): 21, (1, 17): 22, (1, 18): 23, (1, 23): 28}


def onnx_version() -> str:
    """The installed onnx's version, read from its metadata (not by importing it)."""
    onnx = sys.modules.get("onnx")
    if onnx is not None and hasattr(onnx, "__version__"):
        return str(onnx.__version__)
    beside = _version_beside_package()
    if beside:
        return beside
    from importlib import metadata  # a heavier import: the layout was not the usual one

    try:
        return metadata.version("onnx")
    except metadata.PackageNotFoundError:
        import onnx

        return str(onnx.__version__)


def _version_beside_package() -> str | None:
    """The version in the name of the one ``onnx-VERSION.dist-info`` folder next to the onnx
    package that was loaded (where pip puts it), or None."""
    where = getattr(_pb2, "__file__", None)
    if not where:
        return None
    parent = os.path.dirname(os.path.dirname(os.path.abspath(where)))
    try:
        names = [c for c in os.listdir(parent) if c.lower().startswith("onnx-")]
    except OSError:
        return None
    versions = [c[5 : -len(".dist-info")] for c in names if c.lower().endswith(".dist-info")]
    return versions[0] if len(versions) == 1 else None


@functools.cache
def _known_opset() -> int:
    try:
        release = tuple(int(p) for p in onnx_version().split(".")[:2])
    except ValueError:
        return 0
    return max((v for r, v in _RELEASE_OPSETS.items() if r <= release), default=0)


def newest_opset() -> int:
    """The newest ai.onnx opset the installed onnx defines (imports onnx.defs)."""
    import onnx.defs

    return int(onnx.defs.onnx_opset_version())


def opset_supported(version: int) -> bool:
    """Whether the installed onnx defines ai.onnx opset ``version``; onnx's schema registry is
    consulted only for opsets newer than its release is known to define."""
    if version <= _known_opset():
        return True
    return version <= newest_opset()


# -- tensors -------------------------------------------------------------------------------------

_T = TensorProto
#: Element types numpy holds natively: (dtype, the TensorProto field of typed data).
_NATIVE: dict[int, tuple[np.dtype, str]] = {
    _T.FLOAT: (np.dtype(np.float32), "float_data"),
    _T.DOUBLE: (np.dtype(np.float64), "double_data"),
    _T.FLOAT16: (np.dtype(np.float16), "int32_data"),
    _T.INT8: (np.dtype(np.int8), "int32_data"),
    _T.INT16: (np.dtype(np.int16), "int32_data"),
    _T.INT32: (np.dtype(np.int32), "int32_data"),
    _T.INT64: (np.dtype(np.int64), "int64_data"),
    _T.UINT8: (np.dtype(np.uint8), "int32_data"),
    _T.UINT16: (np.dtype(np.uint16), "int32_data"),
    _T.UINT32: (np.dtype(np.uint32), "uint64_data"),
    _T.UINT64: (np.dtype(np.uint64), "uint64_data"),
    _T.BOOL: (np.dtype(np.bool_), "int32_data"),
    _T.COMPLEX64: (np.dtype(np.complex64), "float_data"),
    _T.COMPLEX128: (np.dtype(np.complex128), "double_data"),
}
#: The element type of each typed-data field.
_STORAGE = {
    "float_data": np.float32,
    "double_data": np.float64,
    "int32_data": np.int32,
    "int64_data": np.int64,
    "uint64_data": np.uint64,
}
#: Types whose int32_data entries hold the bits of a narrower element (not its value).
_BITS_IN_INT32 = {_T.FLOAT16: np.uint16, _T.UINT16: np.uint16, _T.BOOL: np.uint8}


def to_array(t: Any) -> np.ndarray:
    """A TensorProto's value as a new, writable numpy array (its data copied once).

    Raw data and typed fields are decoded as the ONNX IR defines them (little-endian raw data;
    float16 and bool bits in int32_data; complex values as pairs).  A tensor whose data does not
    fill its dims, or whose element type is UNDEFINED or one ONNX does not define, is refused
    with ValueError (callers name the tensor in an ``invalid_model`` SessionError).  External
    data must have been read into ``raw_data`` first.
    """
    code = t.data_type
    if t.HasField("segment"):
        raise ValueError("tensor segments are not supported")
    dims = tuple(t.dims)
    count = math.prod(dims)
    if code == _T.STRING:
        values = list(t.string_data)
        _check_count(count, len(values), dims)
        out = np.empty(count, dtype=object)
        out[:] = [s.decode("utf-8") for s in values]
        return out.reshape(dims)
    native = _NATIVE.get(code)
    if native is None:
        if code == _T.UNDEFINED or code not in _T.DataType.values():
            name = "UNDEFINED" if code == _T.UNDEFINED else "not an ONNX element type"
            raise ValueError(f"its element type {code} ({name}) is not supported")
        from onnx import numpy_helper  # bfloat16, float8, 4- and 2-bit types: ml_dtypes

        return np.array(numpy_helper.to_array(t), copy=True)
    dtype, field = native
    if t.HasField("raw_data"):
        raw = t.raw_data
        if len(raw) != count * dtype.itemsize:
            raise ValueError(
                f"raw_data holds {len(raw)} bytes; dims {list(dims)} of {dtype} need "
                f"{count * dtype.itemsize}"
            )
        arr = np.frombuffer(raw, dtype=dtype.newbyteorder("<"))
        return arr.astype(dtype, copy=True).reshape(dims)
    data = getattr(t, field)
    # numpy's sequence protocol costs ~20 µs per call, a lot for the one-element tensors of
    # Constant and ConstantOfShape attributes; iterating is slower for long fields.
    n = len(data)
    storage = _STORAGE[field]
    arr = np.fromiter(data, storage, n) if n <= 256 else np.array(data, dtype=storage)
    bits = _BITS_IN_INT32.get(code)
    if bits is not None:
        arr = arr.view(np.uint32).astype(bits).view(dtype)
    elif dtype.kind == "c":
        if arr.size % 2:
            raise ValueError(f"{field} holds {arr.size} numbers, not (real, imaginary) pairs")
        arr = arr.view(dtype)
    elif arr.dtype != dtype:  # narrower integers kept in int32_data, uint32 in uint64_data
        arr = arr.astype(dtype)
    _check_count(count, arr.size, dims)
    return arr.reshape(dims)


def _check_count(count: int, found: int, dims: tuple[int, ...]) -> None:
    if found != count:
        raise ValueError(f"the tensor holds {found} values; dims {list(dims)} need {count}")
