"""The plugin author kit (issue 19): ``graphrt new-plugin`` and the graphrt.testing pytest plugin.

- a plugin made by ``new-plugin`` installs (into a temporary --target, never into .venv) and
  passes its generated tests;
- graphrt.testing catches seeded bugs: a wrong in_place_input, supports_exact on a kernel whose
  result depends on the thread count, a kernel keeping per-run data on ``self`` (a race), each
  failing with a message naming the broken promise, while a correct kernel passes;
- the repository's own plugins pass graphrt.testing on a bounded subset of their operators
  (the whole of it: ``tox -e kit``).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from graphrt.newplugin import NewPluginError, core_requirement, create_plugin, plugin_names

ROOT = Path(__file__).resolve().parents[1]


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTEST_ADDOPTS", None)
    env["COLUMNS"] = "1000"  # -rA lines keep their whole message
    env.update(extra)
    return env


def _pytest(args: list[str], cwd: Path, timeout: float = 300, **env: str) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return proc.returncode, proc.stdout + proc.stderr


# -- new-plugin ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "dist", "package", "plugin"),
    [
        ("audio", "graphrt-ops-audio", "graphrt_ops_audio", "ops-audio"),
        (
            "My_Audio.Ops",
            "graphrt-ops-my-audio-ops",
            "graphrt_ops_my_audio_ops",
            "ops-my-audio-ops",
        ),
        ("graphrt-ops-dsp", "graphrt-ops-dsp", "graphrt_ops_dsp", "ops-dsp"),
        ("ops-x2", "graphrt-ops-x2", "graphrt_ops_x2", "ops-x2"),
    ],
)
def test_names_are_normalised(raw, dist, package, plugin):
    names = plugin_names(raw)
    assert (names.dist, names.package, names.plugin) == (dist, package, plugin)


@pytest.mark.parametrize("raw", ["", "1abc", "a/b", "über", "-", "basic", "ops-simd"])
def test_invalid_names_are_refused(raw):
    with pytest.raises(NewPluginError, match="invalid plugin name"):
        plugin_names(raw)


def test_a_non_empty_directory_is_refused(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(NewPluginError, match="not empty"):
        create_plugin("audio", tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_the_cli_refuses_with_a_clear_message(tmp_path, capsys):
    from graphrt.cli import main

    assert main(["new-plugin", "9lives", "--dir", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert "graphrt: error: invalid plugin name '9lives'" in err
    assert not (tmp_path / "p").exists()


def test_the_pin_is_the_current_plugin_api_range():
    assert core_requirement("0.1.0") == "graphrt>=0.1,<0.2"
    assert core_requirement("1.4.2") == "graphrt>=1.4,<2"
    import graphrt

    made = create_plugin("pinned", Path(os.environ.get("TMPDIR", "/tmp")) / f"pin-{os.getpid()}")
    try:
        text = (made / "pyproject.toml").read_text()
        assert f'"{core_requirement(graphrt.__version__)}"' in text
        assert 'ops-pinned = "graphrt_ops_pinned.plugin"' in text
    finally:
        import shutil

        shutil.rmtree(made)


def test_a_new_plugin_installs_and_passes_its_generated_tests(tmp_path):
    from graphrt.cli import main

    project = tmp_path / "graphrt-ops-kitdemo"
    assert main(["new-plugin", "kitdemo", "--dir", str(project), "-q"]) == 0
    for rel in ("pyproject.toml", "README.md", "tox.ini", "tests/conftest.py"):
        assert (project / rel).is_file(), rel
    assert (project / "src" / "graphrt_ops_kitdemo" / "plugin.py").is_file()
    site = tmp_path / "site"  # a private install: .venv never sees the plugin
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site)]
        + [str(project)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode and "hatchling" in done.stderr and "No matching distribution" in done.stderr:
        pytest.skip("pip cannot fetch hatchling (the plugin's build backend): no package index")
    assert done.returncode == 0, done.stderr
    code, out = _pytest(["-q", "-rA"], project, PYTHONPATH=str(site))
    assert code == 0, out
    # its own tests and graphrt.testing's: reference, exact, in-place, threads, steady state
    for check in ("reference", "exact", "in_place", "thread_safety", "steady_state"):
        assert re.search(rf"PASSED .*test_contract\[ops-kitdemo:.*Axpy.*:{check}\]", out), check
    assert "PASSED tests/test_axpy.py::test_axpy_keeps_the_kernel_contract" in out
    import graphrt.plugins

    assert "ops-kitdemo" not in graphrt.plugins.snapshot().plugins


# -- seeded bugs -----------------------------------------------------------------------------------

BUGGY_PLUGIN = '''
"""Kernels that break the promises their flags make (and one that keeps them)."""
import threading
import time

import numpy as np

from graphrt.plugin import OpDef, OpKernel, hookimpl

DOMAIN = "test.kit"


class _Same(OpKernel):
    def infer(self, ctx):
        ctx.set_output(0, ctx.dtype(0), ctx.shape(0))
        ctx.prepared = np.asarray(2, dtype=ctx.dtype(0))


class Double(_Same):
    """Correct: in place, exact, thread-safe, allocation-free."""

    supports_exact = True
    in_place_input = 0

    def run(self, ctx, inputs, outputs):
        np.multiply(inputs[0], ctx.prepared, out=outputs[0])


class InPlaceBug(_Same):
    """3x, but reads X again after writing the output: wrong with output over X."""

    in_place_input = 0

    def run(self, ctx, inputs, outputs):
        np.multiply(inputs[0], ctx.prepared, out=outputs[0])
        np.add(outputs[0], inputs[0], out=outputs[0])


class ExactBug(OpKernel):
    """A float32 sum in as many chunks as there are intra-op threads, claimed exact."""

    supports_exact = True

    def infer(self, ctx):
        ctx.set_output(0, ctx.dtype(0), (1,))

    def run(self, ctx, inputs, outputs):
        threads = ctx.threads
        total = np.float32(0)
        for part in np.array_split(inputs[0].reshape(-1), threads):
            total = np.float32(total + np.cumsum(part, dtype=np.float32)[-1])  # in order
        outputs[0][0] = total


class RaceBug(_Same):
    """Doubles, but keeps the run's input on the shared kernel object."""

    def run(self, ctx, inputs, outputs):
        self.current = inputs[0]
        time.sleep(0.0002)
        np.multiply(self.current, ctx.prepared, out=outputs[0])


@hookimpl
def graphrt_operators():
    return [
        OpDef(name, cls, domain=DOMAIN)
        for name, cls in [("Double", Double), ("InPlaceBug", InPlaceBug),
                          ("ExactBug", ExactBug), ("RaceBug", RaceBug)]
    ]
'''

BUGGY_CONFTEST = """
import numpy as np

import graphrt
from graphrt.testing import Case

import buggy_plugin

graphrt.register_plugin(buggy_plugin, name="ops-buggy")

rng = np.random.default_rng(0)
X = rng.standard_normal((64, 33)).astype(np.float32)
WIDE = (X * 10.0 ** rng.uniform(-3, 5, X.shape)).astype(np.float32)  # rounding shows


def pytest_graphrt_cases(plugin):
    if plugin != "ops-buggy":
        return []
    return [
        Case("Double", [X], reference=lambda x: 2 * x, name="x"),
        Case("InPlaceBug", [X], reference=lambda x: 3 * x, name="x"),
        Case("ExactBug", [WIDE], reference=lambda x: np.float32([x.sum(dtype=np.float64)]),
             rtol=1e-3, atol=1e-3, name="x"),
        Case("RaceBug", [X], reference=lambda x: 2 * x, name="x"),
    ]
"""


@pytest.fixture(scope="module")
def buggy_run(tmp_path_factory):
    """One graphrt.testing run over the seeded-bug plugin: (exit code, the -rA report)."""
    where = tmp_path_factory.mktemp("buggy")
    (where / "buggy_plugin.py").write_text(textwrap.dedent(BUGGY_PLUGIN))
    (where / "conftest.py").write_text(textwrap.dedent(BUGGY_CONFTEST))
    (where / "pytest.ini").write_text("[pytest]\n")
    args = ["-p", "graphrt.testing", "--graphrt-plugin", "ops-buggy", "--graphrt-only", "-rA"]
    return _pytest(args, where, PYTHONPATH=str(where), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")


def _outcome(report: str, op: str, check: str) -> str:
    """The PASSED/FAILED line of one generated test in a -rA report."""
    pattern = rf"^(PASSED|FAILED) \S*test_contract\[ops-buggy:test\.kit\.{op}:\d+:x:{check}\].*$"
    found = re.findall(pattern, report, flags=re.M)
    assert found, f"no {op}/{check} test in the report:\n{report[-3000:]}"
    return re.search(pattern, report, flags=re.M).group(0)


@pytest.mark.parametrize(
    ("op", "check", "promise"),
    [
        ("InPlaceBug", "in_place", "in_place_input"),
        ("ExactBug", "exact", "supports_exact"),
        ("RaceBug", "thread_safety", "thread safety"),
    ],
)
def test_graphrt_testing_catches_a_broken_promise(buggy_run, op, check, promise):
    code, report = buggy_run
    assert code == 1, report[-3000:]
    line = _outcome(report, op, check)
    assert line.startswith("FAILED"), line
    assert promise in line, line


@pytest.mark.parametrize(
    ("op", "check"),
    [
        ("Double", "reference"),
        ("Double", "exact"),
        ("Double", "in_place"),
        ("Double", "thread_safety"),
        ("Double", "steady_state"),
        ("ExactBug", "reference"),  # right, but not exact
        ("RaceBug", "reference"),
    ],
)
def test_a_kept_promise_passes(buggy_run, op, check):
    assert _outcome(buggy_run[1], op, check).startswith("PASSED")


def _triple(decline_float32: bool = False) -> type:
    """A kernel of 3x that reads its input again after writing output 0: wrong written over
    its input, yet declaring ``in_place_input`` (declining it for float32 where asked)."""
    import numpy as np

    from graphrt.plugin import OpKernel

    class Triple(OpKernel):
        in_place_input = 0

        def infer(self, ctx):
            ctx.set_output(0, ctx.dtype(0), ctx.shape(0))
            if decline_float32 and ctx.dtype(0) == np.float32:
                ctx.decline_in_place()

        def run(self, ctx, inputs, outputs):
            np.copyto(outputs[0], inputs[0])
            np.add(outputs[0], inputs[0], out=outputs[0])
            np.add(outputs[0], inputs[0], out=outputs[0])

    return Triple


@contextlib.contextmanager
def _fixture_plugin(kernel: type):
    """``kernel`` as test.fixture.Triple of a plugin registered by hand, for the block."""
    import graphrt
    from graphrt.plugin import OpDef, hookimpl

    class Plugin:
        @hookimpl
        def graphrt_operators(self):
            return [OpDef("Triple", kernel, domain="test.fixture")]

    graphrt.register_plugin(Plugin(), name="ops-fixture-test")
    try:
        yield
    finally:
        graphrt.unregister_plugin("ops-fixture-test")


def _triple_case(dtype) -> Any:
    import numpy as np

    from graphrt.testing import Case

    return Case("Triple", [np.arange(6, dtype=dtype)], reference=lambda a: 3 * a)


def test_the_fixture_names_the_broken_promise():
    """graphrt_contract's checks, called in-process on a kernel registered by hand."""
    import numpy as np

    from graphrt.testing import Contract
    from graphrt.testing.contract import ContractError

    with _fixture_plugin(_triple()):
        case = _triple_case(np.float32)
        contract = Contract()
        with pytest.raises(ContractError, match=r"^in_place_input: .*reads input 0 after writing"):
            contract.check("ops-fixture-test", "Triple", cases=[case], checks=["in_place"])
        done = contract.check("ops-fixture-test", "Triple", cases=[case], checks=["thread_safety"])
        assert done == ["test.fixture.Triple/case0/thread_safety"]


def test_a_declined_in_place_is_planned_apart():
    """``ctx.decline_in_place()`` in infer: the planner gives output 0 storage of its own for
    those inputs (a kernel that reads its input after writing stays right) and the contract's
    in_place check skips them, while other inputs are still planned over (and caught)."""
    import numpy as np
    from onnx import TensorProto, helper

    import graphrt
    from graphrt.testing import Contract
    from graphrt.testing.contract import ContractError
    from tests._models import make_model, tensor

    with _fixture_plugin(_triple(decline_float32=True)):
        for elem, dtype, want in [
            (TensorProto.FLOAT, np.float32, 3),
            (TensorProto.DOUBLE, np.float64, 4),
        ]:
            model = make_model(
                [helper.make_node("Abs", ["x"], ["a"]),  # a: in the slab, dying at Triple
                 helper.make_node("Triple", ["a"], ["y"], domain="test.fixture")],
                [tensor("x", elem, [6])], [tensor("y", elem, [6])],
                domains=["test.fixture"],
            )  # fmt: skip
            session = graphrt.Session(model.SerializeToString())
            x = np.arange(6, dtype=dtype)
            # planned over a (float64): the kernel reads its doubled input, 2x + 2x = 4x
            np.testing.assert_array_equal(session.run(None, {"x": x})[0], want * x)
        contract = Contract()
        float32 = _triple_case(np.float32)
        done = contract.check("ops-fixture-test", "Triple", cases=[float32], checks=["in_place"])
        assert done == ["test.fixture.Triple/case0/in_place"]
        float64 = _triple_case(np.float64)
        with pytest.raises(ContractError, match=r"^in_place_input: .*reads input 0 after writing"):
            contract.check("ops-fixture-test", "Triple", cases=[float64], checks=["in_place"])


# -- the repository's plugins ----------------------------------------------------------------------

#: A bounded subset per plugin for the default suite (the whole: ``tox -e kit``).
SUBSET = {
    "ops-basic": "Add,Relu,Reshape,Transpose,Gather,NonZero,Softmax,ReduceSum,Concat",
    "ops-controlflow": "If,Loop,SequenceConstruct",
    "ops-ml": "ai.onnx.ml.Binarizer,ai.onnx.ml.TreeEnsemble,StringNormalizer",
    "ops-simd": "MatMul,Gemm,Relu",
}


@pytest.mark.parametrize("plugin", sorted(SUBSET))
def test_the_repository_plugins_keep_the_contract(plugin):
    from tests._versions import old_oracles

    if old_oracles():  # the kit's backend cases are this onnx's node cases
        pytest.skip(old_oracles())
    import graphrt.plugins

    if plugin not in graphrt.plugins.snapshot().plugins:
        pytest.skip(f"{plugin} is not installed in this environment")
    args = [
        "-q",
        "-p",
        "tests._kit_hooks",
        "--graphrt-plugin",
        plugin,
        "--graphrt-only",
        "--graphrt-ops",
        SUBSET[plugin],
        "--graphrt-backend-cases",
        "2",
        "--graphrt-samples",
        "1",
    ]
    code, out = _pytest(args, ROOT)
    assert code == 0, out[-5000:]
    assert re.search(r"\d+ passed", out), out[-2000:]
