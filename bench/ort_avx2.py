"""onnxruntime held to its AVX2 kernels on an AVX-512 machine, for the avx2 path's comparisons.

    python bench/ort_avx2.py -- python bench/bench_interleaved.py --path avx2 --models light
    python bench/ort_avx2.py --check        # which kernels each onnxruntime picks, nothing run

``--path avx2`` holds graphrt to its AVX2 kernels, but onnxruntime on the same machine still
runs its AVX-512 ones, so the ratio mixes two instruction sets.  Issue 15 asks for the ratios on
an AVX2-only machine; with none to hand, this makes the next best thing: a copy of the
installed onnxruntime package (in ``~/.cache/graphrt-ort-avx2/<version>``) whose MLAS library
skips its AVX-512F branch, so it picks the AVX2/FMA3 kernels it would pick on a Zen 3 machine,
and runs the command with that copy first on ``PYTHONPATH``.  The CPU under both is still the
AVX-512 one (its caches and clocks), so the figures are a proxy, labelled as such.

The copy differs from the installed library in one instruction: MLAS's platform set-up reads
XCR0, then ``not rax; test al, 0xe0; je <AVX-512F set-up>`` (the OS saves the AVX-512 state),
and that ``je`` becomes a six-byte no-op.  The pattern must occur exactly once, or the copy is
refused (another onnxruntime build: look for the XCR0 test again).  The effect is checked, not
assumed: onnxruntime's NCHWc layout uses blocks of 16 channels with its AVX-512F kernels and 8
with the AVX2 ones, which shows in the filter its optimizer pads (40 x 24 channels: 48 x 32
with blocks of 16, unchanged with blocks of 8).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: mov rax, <xcr0>; not rax; test al, 0xe0 (the XCR0 bits of the AVX-512 state); je rel32
XCR0_TEST = bytes.fromhex("48f7d0a8e0") + b"\x0f\x84"
NOP6 = bytes.fromhex("660f1f440000")

#: Run in a child process with the onnxruntime to probe first on sys.path: its NCHWc block.
_PROBE = r"""
import os, sys, tempfile
import numpy as np, onnx, onnxruntime as ort
from onnx import TensorProto, helper
w = helper.make_tensor("w", TensorProto.FLOAT, [40, 24, 3, 3], np.ones(40 * 24 * 9, np.float32))
graph = helper.make_graph(
    [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1] * 4)], "probe",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 24, 16, 16])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
with tempfile.TemporaryDirectory() as tmp:
    options = ort.SessionOptions()
    options.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
    options.log_severity_level = 3
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    optimized = onnx.load(options.optimized_model_filepath).graph
dims = [list(t.dims) for t in optimized.initializer]
nchwc = any(node.domain == "com.microsoft.nchwc" for node in optimized.node)
block = 0 if not nchwc else 16 if [48, 32, 3, 3] in dims else 8 if [40, 24, 3, 3] in dims else 0
print(ort.__file__, block)
"""


def nchwc_block(pythonpath: str | None = None) -> tuple[str, int]:
    """The onnxruntime package a child process imports (with ``pythonpath`` first) and the
    channel block of its NCHWc kernels: 16 (AVX-512F), 8 (AVX2 or AVX), 0 (none seen)."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0], int(out[1])


def patched_copy() -> Path:
    """The directory to put first on PYTHONPATH: a copy of onnxruntime without its AVX-512F
    kernels, made once per onnxruntime version."""
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or spec.origin is None:
        raise SystemExit("onnxruntime is not installed (pip install -e '.[test]')")
    package = Path(spec.origin).parent
    root = Path.home() / ".cache" / "graphrt-ort-avx2" / importlib.metadata.version("onnxruntime")
    if (root / "onnxruntime" / ".patched").exists():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=root.parent))  # beside root: renamed into place
    shutil.copytree(package, staging / "onnxruntime", ignore=shutil.ignore_patterns("__pycache__"))
    libraries = sorted((staging / "onnxruntime" / "capi").glob("onnxruntime_pybind11_state*.so"))
    if len(libraries) != 1:
        raise SystemExit(f"expected one onnxruntime_pybind11_state library, found {libraries}")
    data = bytearray(libraries[0].read_bytes())
    hits = [m.start() for m in re.finditer(re.escape(XCR0_TEST), data)]
    if len(hits) != 1:
        raise SystemExit(
            f"{libraries[0].name}: the XCR0 test of MLAS's AVX-512F set-up occurs {len(hits)} "
            "times, not once: this onnxruntime build needs the pattern looked up again"
        )
    at = hits[0] + len(XCR0_TEST) - 2
    data[at : at + 6] = NOP6
    libraries[0].write_bytes(bytes(data))
    note = f"{libraries[0].name}: the je at {at:#x} made a six-byte no-op\n"
    (staging / "onnxruntime" / ".patched").write_text(note)
    shutil.rmtree(root, ignore_errors=True)
    staging.rename(root)
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="print both packages' NCHWc blocks")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the command to run")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    root = patched_copy()
    origin, block = nchwc_block(str(root))
    if block != 8:
        raise SystemExit(f"{origin}: NCHWc blocks of {block} channels, not AVX2's 8: not held")
    if args.check or not command:
        installed = nchwc_block()
        print(f"installed: {installed[0]} (NCHWc block {installed[1]})")
        print(f"avx2 copy: {origin} (NCHWc block {block})")
        print(f"PYTHONPATH={root}")
        return
    print(f"# onnxruntime held to AVX2 kernels: {origin} (NCHWc block {block})", flush=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    raise SystemExit(subprocess.run(command, env=env).returncode)


if __name__ == "__main__":
    main()
