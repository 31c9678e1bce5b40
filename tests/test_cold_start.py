"""Cold start: what ``import graphrt`` and a first session import, onnx's protobuf classes
without the onnx package, tensor decoding, entry points without importlib.metadata, and kernel
classes imported at first use.  Times are measured by bench/bench_cold_start.py, not here."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
import weakref
from importlib import metadata

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphrt
from graphrt import compiled, entrypoints, plugins, proto
from graphrt import session as session_module
from graphrt.errors import PluginError
from graphrt.gcpause import gc_paused
from graphrt.kernel import OpDef, OpKernel
from graphrt.lazy import KernelRef, kernel_modules
from tests._models import make_model, tensor

AUTOLOAD_OFF = os.environ.get(plugins.AUTOLOAD_ENV, "") not in ("", "0")

#: Never imported by ``import graphrt`` or by a session of a float32 model.
HEAVY = ("onnx", "onnx.helper", "onnx.reference", "ml_dtypes", "scipy")


def _python(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; it prints a JSON object as its last line."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _mlp(path: str) -> None:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    onnx.save(make_model(nodes, [tensor("x", shape=[1, 4])], [tensor("y")], [w, b]), path)


def test_import_graphrt_imports_nothing_heavy():
    found = _python(
        f"""
        import json, sys
        import graphrt
        print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))
        """
    )
    assert found == []


@pytest.mark.skipif(AUTOLOAD_OFF, reason="the session needs the entry-point plugins")
def test_a_float_model_session_imports_neither_onnx_nor_ml_dtypes_nor_unused_kernels(tmp_path):
    path = str(tmp_path / "mlp.onnx")
    _mlp(path)
    unused = ["graphrt_ops_basic.resize", "graphrt_ops_basic.spectral", "graphrt_ops_basic.rnn"]
    # (the other plugins' kernel modules too, where they are installed: the same lazy tables)
    unused += ["graphrt_ops_contrib.pool", "graphrt_ops_contrib.gemm"]
    unused += ["graphrt_ops_controlflow.loop", "graphrt_ops_controlflow.sequence"]
    found = _python(
        f"""
        import json, sys
        import numpy as np
        import graphrt
        s = graphrt.Session({path!r})
        y = s.run(None, {{"x": np.ones((1, 4), np.float32)}})[0]
        print(json.dumps({{
            "heavy": [m for m in {HEAVY!r} if m in sys.modules],
            "unused": [m for m in {unused!r} if m in sys.modules],
            "shape": list(y.shape),
        }}))
        """
    )
    assert found == {"heavy": [], "unused": [], "shape": [1, 4]}


@pytest.mark.skipif(AUTOLOAD_OFF, reason="the session needs the entry-point plugins")
def test_a_bfloat16_model_imports_ml_dtypes_when_it_needs_it():
    model = make_model(
        [
            helper.make_node("Cast", ["x"], ["h"], to=TensorProto.BFLOAT16),
            helper.make_node("Cast", ["h"], ["y"], to=TensorProto.FLOAT),
        ],
        [tensor("x", shape=[3])],
        [tensor("y")],
    )
    found = _python(
        f"""
        import json, sys
        import numpy as np
        import graphrt
        before = "ml_dtypes" in sys.modules
        s = graphrt.Session({model.SerializeToString()!r})
        y = s.run(None, {{"x": np.array([1.0, 1.00390625, 3.1415927], np.float32)}})[0]
        print(json.dumps({{"before": before, "after": "ml_dtypes" in sys.modules,
                           "y": y.tolist()}}))
        """
    )
    expected = np.array([1.0, 1.00390625, 3.1415927], np.float32).astype(ml_dtypes.bfloat16)
    assert found["before"] is False and found["after"] is True
    assert found["y"] == expected.astype(np.float32).tolist()


def test_proto_classes_are_onnx_classes_in_either_import_order():
    assert proto.ModelProto is onnx.ModelProto and proto.TensorProto is onnx.TensorProto
    assert proto.IR_VERSION == onnx.IR_VERSION
    found = _python(
        """
        import json
        from graphrt import proto
        import onnx
        print(json.dumps([proto.ModelProto is onnx.ModelProto,
                          proto.NodeProto is onnx.NodeProto,
                          isinstance(onnx.ModelProto(), proto.ModelProto)]))
        """
    )
    assert found == [True, True, True]


def test_newer_opsets_than_onnx_knows_are_still_refused():
    newest = onnx.defs.onnx_opset_version()
    assert proto.opset_supported(newest)
    assert not proto.opset_supported(newest + 1)
    assert proto.onnx_version() == onnx.__version__


# -- tensors ---------------------------------------------------------------------------------


def _typed(dtype: int, values: list, dims: list[int]) -> onnx.TensorProto:
    return helper.make_tensor("t", dtype, dims, values)


CASES = {
    "float raw": numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3)),
    "float typed": _typed(TensorProto.FLOAT, [0.5, -1.25, np.inf], [3]),
    "double typed": _typed(TensorProto.DOUBLE, [1e300, -0.0], [2]),
    "float16 raw": numpy_helper.from_array(np.array([1.5, -2.0, 65504], np.float16)),
    "float16 typed": _typed(TensorProto.FLOAT16, np.array([1.5, -2], np.float16), [2]),
    "int8 typed": _typed(TensorProto.INT8, [-128, 127, 5], [3]),
    "int16 typed": _typed(TensorProto.INT16, [-32768, 7], [2]),
    "uint16 typed": _typed(TensorProto.UINT16, [65535, 1], [2]),
    "int32 raw": numpy_helper.from_array(np.array([[-7, 8]], np.int32)),
    "int64 typed": _typed(TensorProto.INT64, [-(2**62), 3], [2]),
    "uint32 typed": _typed(TensorProto.UINT32, [2**32 - 1], [1]),
    "uint64 typed": _typed(TensorProto.UINT64, [2**64 - 1, 0], [2]),
    "bool typed": _typed(TensorProto.BOOL, [True, False, True], [3]),
    "bool raw": numpy_helper.from_array(np.array([True, False])),
    "complex64 typed": _typed(TensorProto.COMPLEX64, [1 + 2j, -3j], [2]),
    "complex128 raw": numpy_helper.from_array(np.array([1 + 2j], np.complex128)),
    "string": _typed(TensorProto.STRING, [b"ab", "\u00e9".encode()], [2]),
    "scalar": _typed(TensorProto.FLOAT, [2.5], []),
    "empty": numpy_helper.from_array(np.zeros((0, 3), np.float32)),
    "long typed": _typed(TensorProto.FLOAT, np.linspace(0, 1, 1000).tolist(), [10, 100]),
    "bfloat16 (through onnx)": numpy_helper.from_array(
        np.array([1.5, -3], np.float32).astype(ml_dtypes.bfloat16)
    ),
    "int4 (through onnx)": _typed(TensorProto.INT4, [-8, 7, 1], [3]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_to_array_matches_numpy_helper(name):
    t = CASES[name]
    ours, theirs = proto.to_array(t), numpy_helper.to_array(t)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    assert ours.flags.writeable  # the session's own copy
    if ours.dtype == object:
        assert ours.tolist() == theirs.tolist()
    else:
        assert ours.tobytes() == theirs.tobytes()


def _bad(kind: str) -> onnx.TensorProto:
    t = TensorProto(name=kind, data_type=TensorProto.FLOAT, dims=[4])
    if kind == "raw too short":
        t.raw_data = b"\0" * 12
    elif kind == "too few values":
        t.data_type = TensorProto.INT64
        t.dims[:] = [3]
        t.int64_data.extend([1, 2])
    else:  # complex values come in (real, imaginary) pairs
        t.data_type = TensorProto.COMPLEX64
        t.dims[:] = [1]
        t.float_data.extend([1.0, 2.0, 3.0])
    return t


@pytest.mark.parametrize("kind", ["raw too short", "too few values", "complex halves"])
def test_to_array_refuses_data_that_does_not_fill_the_dims(kind):
    with pytest.raises(ValueError):
        proto.to_array(_bad(kind))


def test_a_model_with_a_short_initializer_is_invalid():
    bad = _bad("raw too short")
    bad.name = "w"
    model = make_model(
        [helper.make_node("Add", ["x", "w"], ["y"])], [tensor("x", shape=[4])], [tensor("y")], [bad]
    )
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(model)
    assert info.value.kind == "invalid_model" and "'w'" in str(info.value)


# -- entry points ----------------------------------------------------------------------------


@pytest.mark.parametrize("group", ["graphrt.plugins", "console_scripts", "pytest11"])
def test_entry_points_are_importlib_metadatas(group):
    ours = [(e.name, e.value) for e in entrypoints.entry_points(group)]
    theirs = [(e.name, e.value) for e in metadata.entry_points(group=group)]
    assert ours == theirs


def _dist(root, folder: str, name: str, entries: str) -> None:
    info = root / folder
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1\n")
    (info / "entry_points.txt").write_text(f"[graphrt.test]\n{entries}\n")


def test_entry_points_follow_sys_path_order_and_shadowing(tmp_path, monkeypatch):
    _dist(tmp_path / "a", "demo_pkg-1.0.dist-info", "demo-pkg", "one = mod_a:f")
    _dist(tmp_path / "b", "Demo.Pkg-2.0.dist-info", "Demo.Pkg", "two = mod_b")  # shadowed
    _dist(tmp_path / "b", "other-1.dist-info", "other", "three = mod_c:g.h [extra]")
    monkeypatch.syspath_prepend(str(tmp_path / "b"))
    monkeypatch.syspath_prepend(str(tmp_path / "a"))
    ours = entrypoints.entry_points("graphrt.test")
    theirs = metadata.entry_points(group="graphrt.test")
    assert [(e.name, e.value) for e in ours] == [(e.name, e.value) for e in theirs]
    assert [e.name for e in ours] == ["one", "three"]
    assert [e.dist_name for e in ours] == ["demo-pkg", "other"]
    # a distribution installed later is seen on the next call (its folder's mtime changed)
    _dist(tmp_path / "a", "late-1.dist-info", "late", "four = mod_d")
    os.utime(tmp_path / "a", ns=(0, os.stat(tmp_path / "a").st_mtime_ns + 10**9))
    assert "four" in [e.name for e in entrypoints.entry_points("graphrt.test")]


def test_entry_point_load_resolves_module_and_attribute(tmp_path, monkeypatch):
    (tmp_path / "ep_target_mod.py").write_text("class Outer:\n    class Inner:\n        x = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ep = entrypoints.EntryPoint("e", "ep_target_mod:Outer.Inner [extra]", "g", str(tmp_path))
    assert ep.load().x == 7
    assert entrypoints.EntryPoint("e", "ep_target_mod", "g").load().__name__ == "ep_target_mod"


# -- kernel classes imported at first use -----------------------------------------------------

LAZY_KERNEL = """
    import numpy as np
    from graphrt import OpKernel

    IMPORTED = True

    class Twice(OpKernel):
        supports_exact = True

        def infer(self, ctx):
            ctx.set_output(0, ctx.dtype(0), ctx.shape(0))

        def run(self, ctx, inputs, outputs):
            np.add(inputs[0], inputs[0], out=outputs[0])
"""


def test_kernel_ref_imports_its_module_at_first_use(tmp_path, monkeypatch):
    (tmp_path / "lazy_kernel_mod.py").write_text(textwrap.dedent(LAZY_KERNEL))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lazy_kernel_mod", raising=False)
    (mod,) = kernel_modules(None, "lazy_kernel_mod")
    ref = mod.Twice
    assert isinstance(ref, KernelRef) and ref is mod.Twice and ref == KernelRef(ref.module, "Twice")
    assert ref.__name__ == "Twice" and not ref.loaded
    line = OpDef("Twice", ref, domain="com.lazy")
    assert "lazy_kernel_mod" not in sys.modules
    assert line.flag("supports_exact") is True  # a flag read imports the class
    assert (
        "lazy_kernel_mod" in sys.modules and ref.resolve() is sys.modules["lazy_kernel_mod"].Twice
    )
    model = make_model(
        [helper.make_node("Twice", ["x"], ["y"], domain="com.lazy")],
        [tensor("x", shape=[3])],
        [tensor("y")],
        domains=["com.lazy"],
    )
    s = graphrt.Session(model, custom_kernels=[line], mode="exact")
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(s.run(None, {"x": x})[0], 2 * x)


def test_a_kernel_ref_that_cannot_import_names_its_module():
    ref = KernelRef("graphrt_no_such_kernel_module", "Nothing")
    model = make_model(
        [helper.make_node("Nothing", ["x"], ["y"], domain="com.lazy")],
        [tensor("x", shape=[3])],
        [tensor("y")],
        domains=["com.lazy"],
    )
    with pytest.raises(PluginError, match=r"graphrt_no_such_kernel_module\.Nothing"):
        graphrt.Session(model, custom_kernels=[OpDef("Nothing", ref, domain="com.lazy")])


def test_ops_basic_table_is_lazy_and_complete():
    from graphrt_ops_basic import flex_attention, optimizers, table

    assert table.TRAINING == optimizers.DOMAIN and table.PREVIEW == flex_attention.DOMAIN
    for d in table.OPERATORS:  # every line names a class that exists and is a kernel
        cls = d.factory.resolve() if isinstance(d.factory, KernelRef) else d.factory
        assert isinstance(cls, type) and issubclass(cls, OpKernel), d


def test_a_dropped_session_is_freed_without_the_cyclic_collector(tmp_path):
    # An idle run state does not point back at its plan: the session, its plans and their
    # slabs go when the last reference does, not at the collector's next full collection.
    path = str(tmp_path / "mlp.onnx")
    _mlp(path)
    was = gc.isenabled()
    gc.disable()
    try:
        s = graphrt.Session(path)
        x = np.ones((1, 4), np.float32)
        s.run(None, {"x": x})
        s.run(None, {"x": x})  # a state taken back from the pool
        plan, session = weakref.ref(s.cached_plans[0]), weakref.ref(s)
        del s
        assert session() is None and plan() is None
    finally:
        if was:
            gc.enable()


def test_building_pauses_the_collector_and_restores_its_state(tmp_path, monkeypatch):
    path = str(tmp_path / "mlp.onnx")
    _mlp(path)
    seen = []
    real = compiled.compile_model

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(session_module, "compile_model", spy)
    was = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            graphrt.Session(path).run(None, {"x": np.ones((1, 4), np.float32)})
            assert gc.isenabled() == enabled
        assert seen == [False, False]
        gc.enable()
        with gc_paused():  # nested: the outer one decides
            with gc_paused():
                assert not gc.isenabled()
            assert not gc.isenabled()
        assert gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()
