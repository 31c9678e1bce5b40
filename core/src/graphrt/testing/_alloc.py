"""Count every allocation of numpy array data, transient ones included (graphrt.testing's
steady-state check; the same technique as the repository's tests/_numpy_alloc.py).

tracemalloc's snapshots only show blocks still alive, and its peak mixes in Python objects and
numpy's iterator buffers (which are not array data).  This installs a counting allocator as
numpy's data-memory handler (numpy's documented ``PyDataMem_SetHandler`` policy, NEP 49) for the
current context, so every array-data allocation is seen, including those freed again at once.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading

_libc = ctypes.CDLL(None)
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.calloc.restype = ctypes.c_void_p
_libc.calloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
_libc.realloc.restype = ctypes.c_void_p
_libc.realloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.free.restype = None
_libc.free.argtypes = [ctypes.c_void_p]

_MALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
_CALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t)
_REALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
_FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)


class _Allocator(ctypes.Structure):
    _fields_ = [
        ("ctx", ctypes.c_void_p),
        ("malloc", _MALLOC),
        ("calloc", _CALLOC),
        ("realloc", _REALLOC),
        ("free", _FREE),
    ]


class _Handler(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * 127),
        ("version", ctypes.c_uint8),
        ("allocator", _Allocator),
    ]


class _Counter:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.bytes = 0
        self.active = False

    def note(self, size: int) -> None:
        if self.active:
            with self.lock:
                self.count += 1
                self.bytes += size


_counter = _Counter()


def _malloc(ctx, size):
    _counter.note(size)
    return _libc.malloc(max(size, 1))


def _calloc(ctx, n, size):
    _counter.note(n * size)
    return _libc.calloc(max(n, 1), max(size, 1))


def _realloc(ctx, ptr, size):
    _counter.note(size)
    return _libc.realloc(ptr, max(size, 1))


def _free(ctx, ptr, size):
    _libc.free(ptr)


# Kept alive for the life of the process: arrays made under the handler free through it.
_callbacks = (_MALLOC(_malloc), _CALLOC(_calloc), _REALLOC(_realloc), _FREE(_free))
_handler = _Handler(b"graphrt_test_counting", 1, _Allocator(None, *_callbacks))

_pyapi = ctypes.pythonapi
_pyapi.PyCapsule_New.restype = ctypes.py_object
_pyapi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
_pyapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
_pyapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _array_api_function(index: int):
    try:
        from numpy._core import _multiarray_umath as mu
    except ImportError:  # numpy 1.x
        from numpy.core import _multiarray_umath as mu
    table = ctypes.cast(
        _pyapi.PyCapsule_GetPointer(mu._ARRAY_API, None), ctypes.POINTER(ctypes.c_void_p)
    )
    return ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.py_object)(table[index])


_SET_HANDLER = 304  # PyDataMem_SetHandler in numpy's C-API table (numpy >= 1.22)
_capsule_name = ctypes.create_string_buffer(b"mem_handler")  # the capsule keeps the pointer
_capsule = _pyapi.PyCapsule_New(ctypes.addressof(_handler), ctypes.addressof(_capsule_name), None)
# Arrays made under the handler may be freed at interpreter exit, after module globals are
# cleared: keep the handler's pieces alive for good.
for _obj in (_callbacks, _handler, _capsule_name, _capsule):
    _pyapi.Py_IncRef(ctypes.py_object(_obj))


@contextlib.contextmanager
def count_numpy_allocations():
    """Yields a counter whose ``count``/``bytes`` grow with every numpy data allocation made
    in this thread's context while the block runs."""
    set_handler = _array_api_function(_SET_HANDLER)
    previous = set_handler(_capsule)
    _counter.count = _counter.bytes = 0
    _counter.active = True
    try:
        yield _counter
    finally:
        _counter.active = False
        set_handler(previous)
