"""Hostile models and arguments against the native plugin (issue 13): each used to kill the
process (SIGSEGV, SIGFPE), leak threads or allocate gigabytes; each runs in a child process
that must exit normally with a graphrt SessionError (or a Python exception from a direct
native call), never a signal."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.simd._simd import ISAS

FAST = [isa for isa in ("avx512", "avx2") if isa in ISAS]
needs_fast = pytest.mark.skipif(not FAST, reason="no avx2/avx512 path: Conv/MaxPool stay numpy")

BIG = 2**62

# Builds a one-node float32 model (x of shape (1, 1, 4, 4); Conv: a constant weight of 8
# output channels), runs it on the native path and prints "OK" or "KIND <kind>".  The address
# space is capped so that a regression fails with an error instead of taking the machine.
SESSION_CHILD = """
import os, resource, sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper
import graphrt

if "asan" not in os.environ.get("LD_PRELOAD", ""):  # ASan's shadow is terabytes of address space
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))
op, attrs, isa = {op!r}, {attrs!r}, {isa!r}
inputs, inits = ["x"], []
if op == "Conv":
    inputs.append("w")
    inits.append(numpy_helper.from_array(np.ones((8, 1, 2, 2), np.float32), "w"))
node = helper.make_node(op, inputs, ["y"], **attrs)
graph = helper.make_graph(
    [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
try:
    session = graphrt.Session(model, kernel_path=isa)
    session.run(None, {{"x": np.ones((1, 1, 4, 4), np.float32)}})
    print("OK")
except graphrt.SessionError as e:
    print("KIND", e.kind, e)
"""


def run_child(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, f"child ended with {proc.returncode}: {proc.stderr[-2000:]}"
    return proc.stdout


HOSTILE_MODELS = {
    # int64 products wrapped in the MaxPool work buffer's size: segfault
    "maxpool_wrap": (
        "MaxPool",
        dict(kernel_shape=[2, 2], dilations=[1, BIG], pads=[0, BIG, 0, BIG], strides=[1, BIG]),
    ),
    "maxpool_rows_wrap": (
        "MaxPool",
        dict(kernel_shape=[2, 2], pads=[BIG, 0, BIG, 0], strides=[BIG, 1]),
    ),
    # 143 bytes asked for (oh + 1) * 2^29 floats per thread, zero-filled and kept: 16 GB
    "maxpool_gigabytes": (
        "MaxPool",
        dict(kernel_shape=[2, 2], pads=[0, 2**29, 0, 2**29], strides=[1, 2**29]),
    ),
    # the staged plane's size wrapped: segfault
    "conv_dilation_wrap": (
        "Conv",
        dict(kernel_shape=[2, 2], dilations=[BIG, 1], pads=[BIG, 0, 0, 0]),
    ),
    # huge pads and strides: the window reach overflows int64 (the position tiles divided by 0)
    "conv_pad_wrap": ("Conv", dict(kernel_shape=[2, 2], pads=[BIG, 0, BIG, 0], strides=[BIG, 1])),
    "conv_pad_dilation": (
        "Conv",
        dict(kernel_shape=[2, 2], dilations=[1, BIG], pads=[0, BIG, 0, BIG], strides=[1, BIG]),
    ),
}


@needs_fast
@pytest.mark.parametrize("name", sorted(HOSTILE_MODELS))
def test_hostile_model_is_refused(name: str) -> None:
    op, attrs = HOSTILE_MODELS[name]
    out = run_child(SESSION_CHILD.format(op=op, attrs=attrs, isa=FAST[0]))
    assert out.startswith("KIND unsupported"), out


@needs_fast
def test_large_but_sane_pads_still_run() -> None:
    # a pad of 2^29 on the rows with a matching stride: small work buffer, computed natively
    attrs = dict(kernel_shape=[2, 2], pads=[2**29, 0, 2**29, 0], strides=[2**29, 1])
    for op in ("MaxPool", "Conv"):
        assert run_child(SESSION_CHILD.format(op=op, attrs=attrs, isa=FAST[0])) == "OK\n"


NATIVE_CHILD = """
import os
import numpy as np
from graphrt_ops_simd import _native as N
isa = N.available_isas()[-1]
f = np.float32

def refused(call, *args):
    try:
        call(*args)
    except ValueError as e:
        return str(e)
    raise AssertionError("accepted")

"""


def test_native_conv_plan_checks_extents() -> None:
    out = run_child(
        NATIVE_CHILD
        + """
w = np.zeros((8, 1, 2, 2), f)
# zero output channels divided by zero in the work split
print(refused(N.conv_plan, np.zeros((0, 1, 2, 2), f), 1, [1, 1, 4, 4], [1, 1], [1, 1], [0, 0],
              [3, 3], isa))
print(refused(N.conv_plan, np.zeros((8, 0, 2, 2), f), 1, [1, 0, 4, 4], [1, 1], [1, 1], [0, 0],
              [3, 3], isa))
print(refused(N.conv_plan, w, 1, [1, 1, 4, 4], [], [], [], [3, 3], isa))
for strides, dilations, pads, o in [([1, 1], [2**62, 1], [2**62, 0], [4, 3]),
                                    ([2**62, 1], [1, 1], [2**62, 0], [3, 3]),
                                    ([1, 1], [1, 1], [2**40, 2**40], [2**40, 2**40])]:
    for kernel in ("auto", "packed", "direct"):
        if kernel == "packed" and o == [4, 3]:
            continue  # no padded copy: packed runs it (below)
        print(refused(N.conv_plan, w, 1, [1, 1, 4, 4], strides, dilations, pads, o, isa, kernel))
# rows read at 2^62 apart: the packed kernel (no staged copy) computes it, as numpy does
rng = np.random.default_rng(0)
w, x = rng.standard_normal((8, 1, 2, 2)).astype(f), rng.standard_normal((1, 1, 4, 4)).astype(f)
plan = N.conv_plan(w, 1, [1, 1, 4, 4], [1, 1], [2**62, 1], [2**62, 0], [4, 3], isa, "packed")
y = np.zeros((1, 8, 4, 3), f)
plan.run(x, np.empty(0, f), y, None, "none")
want = np.stack([sum(x[0, 0, :, t : t + 3] * w[m, 0, 1, t] for t in range(2)) for m in range(8)])
assert np.allclose(y[0], want, atol=1e-5)
print("done")
"""
    )
    lines = out.splitlines()
    assert lines[-1] == "done"
    assert "does not fit" in lines[0] and "x_shape" in lines[1] and "strides" in lines[2]
    assert all(line.startswith("unsupported: ") for line in lines[3:-1]), out


def test_native_maxpool_bounds_work_and_threads() -> None:
    out = run_child(
        NATIVE_CHILD
        + """
x, y = np.zeros((1, 1, 4, 4), f), np.zeros((1, 1, 3, 3), f)
print(refused(N.maxpool2d, x, y, [2, 2], [], [1, 1], [0, 0], isa))
print(refused(N.maxpool2d, x, y, [2, 2], [1, 2**62], [1, 2**62], [0, 2**62], isa))
print(refused(N.maxpool2d, x, y, [2, 2], [1, 2**29], [1, 1], [0, 2**29], isa))
# empty outputs and any thread count: nothing to do, no workers beyond the cap
N.maxpool2d(x, np.zeros((1, 1, 0, 3), f), [2, 2], [1, 1], [1, 1], [0, 0], isa)
big = np.ones((64, 64, 32, 32), f)
N.maxpool2d(big, np.zeros((64, 64, 31, 31), f), [2, 2], [1, 1], [1, 1], [0, 0], isa, 0, -1,
            100000)
print("threads", len(os.listdir("/proc/self/task")))
"""
    )
    lines = out.splitlines()
    assert "strides" in lines[0]
    assert lines[1].startswith("unsupported: ") and lines[2].startswith("unsupported: ")
    assert int(lines[3].split()[1]) <= 257 + 4  # the pool's 255 workers at most, plus ours


def test_native_threads_are_capped_and_empty_arrays_accepted() -> None:
    out = run_child(
        NATIVE_CHILD
        + """
a = np.ones((256, 64), f)
packed = N.pack_b(np.ones((64, 64), f), isa)
N.gemm(a, packed, np.zeros((256, 64), f), None, "col", 1.0, "none", 0.0, 0.0, 0, -1, 100000)
N.unary("exp", np.ones(1 << 18, f), np.zeros(1 << 18, f), isa, 0, -1, 100000)
# empty extents (numpy's strides of an empty array are arbitrary): no division by zero
N.concat([np.zeros((2, 0, 3), f), np.zeros((2, 0, 3), f)], np.zeros((2, 0, 3), f), 1, 4)
N.concat([], np.zeros((2, 0, 3), f), 1, 4)
N.concat([np.zeros((0, 2), f), np.zeros((0, 3), f)], np.zeros((0, 5), f), 1, 4)
N.canonicalize_nan(np.zeros((2, 0, 3), f))
print("threads", len(os.listdir("/proc/self/task")))
"""
    )
    assert int(out.split()[-1]) <= 257 + 4, out


FUZZ_CHILD = """
import os, random, resource
import numpy as np
from onnx import TensorProto, helper, numpy_helper
import graphrt

if "asan" not in os.environ.get("LD_PRELOAD", ""):
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))
rnd = random.Random(13)
EXTREME = [1, 2, 3, 2**29, 2**31, 2**40, 2**62, 2**63 - 1]
kinds = {{}}
for i in range({count}):
    op = rnd.choice(["Conv", "MaxPool"])
    k = [rnd.randint(1, 3), rnd.randint(1, 3)]
    pick = lambda least: rnd.choice(EXTREME + [least, rnd.randint(least, 9)])
    attrs = dict(kernel_shape=k, strides=[pick(1), pick(1)], dilations=[pick(1), pick(1)],
                 pads=[pick(0) for _ in range(4)])
    if op == "MaxPool" and rnd.random() < 0.3:
        attrs["ceil_mode"] = 1
    c, h, w = rnd.choice([1, 3]), rnd.randint(1, 9), rnd.randint(1, 9)
    inputs, inits = ["x"], []
    if op == "Conv":
        inputs.append("w")
        weight = np.ones((rnd.choice([8, 16]), c, *k), np.float32)
        inits.append(numpy_helper.from_array(weight, "w"))
    graph = helper.make_graph(
        [helper.make_node(op, inputs, ["y"], **attrs)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    try:
        session = graphrt.Session(model, kernel_path={isa!r})
        session.run(None, {{"x": np.ones((1, c, h, w), np.float32)}})
        kind = "ok"
    except graphrt.SessionError as e:
        kind = e.kind
    kinds[kind] = kinds.get(kind, 0) + 1
print(sorted(kinds.items()))
"""


@needs_fast
def test_seeded_geometry_fuzz() -> None:
    """Random extreme Conv/MaxPool attributes (fixed seed): a result or a SessionError each."""
    out = run_child(FUZZ_CHILD.format(count=200, isa=FAST[0]))
    assert "ok" in out and "unsupported" in out, out


def test_misaligned_arrays_are_refused() -> None:
    """float32 arrays one byte off alignment (np.frombuffer with an offset): the kernels' loads
    were undefined behaviour (UBSan aborted in pack_b, found by tests/simd/test_native_fuzz.py);
    every entry point now refuses them with ValueError."""
    out = run_child(
        NATIVE_CHILD
        + """
def off(shape):
    raw = np.zeros(int(np.prod(shape)) * 4 + 1, np.uint8)[1:]
    return raw.view(f).reshape(shape)

ok = np.zeros((7, 7), f)
calls = [
    (N.pack_b, off((7, 7)), isa),
    (N.gemm_exact, off((7, 7)), ok, np.zeros((7, 7), f), isa),
    (N.gemm, off((7, 7)), N.pack_b(ok, isa), np.zeros((7, 7), f)),
    (N.unary, "exp", off((16,)), np.zeros(16, f), isa),
    (N.canonicalize_nan, off((16,))),
    (N.concat, [off((2, 3))], np.zeros((2, 3), f), 0),
    (N.maxpool2d, off((1, 1, 4, 4)), np.zeros((1, 1, 3, 3), f), [2, 2], [1, 1], [1, 1],
     [0, 0], isa),
    (N.conv_plan, off((8, 1, 2, 2)), 1, [1, 1, 4, 4], [1, 1], [1, 1], [0, 0], [3, 3], isa),
]
for call, *args in calls:
    print(refused(call, *args))
"""
    )
    lines = out.splitlines()
    assert len(lines) == 8 and all("aligned" in line for line in lines), out
