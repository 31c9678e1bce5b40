"""What a new user meets first: SessionOptions, run's output names, the package's public names,
the CLI's --version/--kernel-path/model names, and errors that say what to do."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import textwrap
import typing
import warnings
from importlib import metadata

import numpy as np
import onnx
import pytest
from onnx import helper

import graphrt
from graphrt import plugins
from graphrt.backend import prepare
from graphrt.cli import DEFAULT_MODEL, build_parser, default_model_path, main
from tests._models import init, make_model, ort_session, tensor

AUTOLOAD_OFF = os.environ.get(plugins.AUTOLOAD_ENV, "") not in ("", "0")
needs_autoload = pytest.mark.skipif(AUTOLOAD_OFF, reason="needs the entry-point plugins")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _two_outputs() -> onnx.ModelProto:
    """s = a + c, p = a * c."""
    nodes = [
        helper.make_node("Add", ["a", "c"], ["s"]),
        helper.make_node("Mul", ["a", "c"], ["p"]),
    ]
    return make_model(
        nodes,
        [tensor("a", shape=[3])],
        [tensor("s", shape=[3]), tensor("p", shape=[3])],
        [init("c", np.array([1.0, 2.0, 3.0], np.float32))],
    )


A = np.array([1.0, -2.0, 4.0], np.float32)
C = np.array([1.0, 2.0, 3.0], np.float32)


# -- SessionOptions ------------------------------------------------------------------------------


def test_session_options_are_passed_and_keywords_override_them():
    opts = graphrt.SessionOptions(mode="exact", intra_op_threads=1, max_cached_plans=3)
    sess = graphrt.Session(_two_outputs(), options=opts, max_cached_plans=5)
    assert sess.options.mode == "exact" and sess.threads == 1
    assert sess.options.max_cached_plans == 5  # the keyword wins
    assert opts.max_cached_plans == 3  # and the options given are not changed
    s, p = sess.run(None, {"a": A})
    np.testing.assert_array_equal(s, A + C)
    np.testing.assert_array_equal(p, A * C)
    # positional, and through the happy path
    assert graphrt.Session(_two_outputs(), opts).options is opts
    assert graphrt.load(_two_outputs(), options=opts).session.options.mode == "exact"


def test_option_values_are_checked_where_the_options_are_made():
    cases = {
        "mode": ("turbo", "'fast', 'exact'"),
        "optimization_level": ("max", "'none', 'basic', 'all'"),
        "weight_storage": ("int4", "'original', 'float16', 'bfloat16'"),
        "max_cached_plans": (0, "positive integer"),
        "intra_op_threads": (-1, "0 (one per core)"),
        "check_shapes": ("yes", "True or False"),
        "strict_plugins": (1, "True, False or None"),
        "kernel_path": ("", "a path name or None"),
    }
    for name, (bad, words) in cases.items():
        for where in ("SessionOptions", "Session"):
            with pytest.raises(graphrt.SessionError) as info:
                if where == "SessionOptions":
                    graphrt.SessionOptions(**{name: bad})
                else:
                    graphrt.Session(_two_outputs(), **{name: bad})
            assert info.value.kind == "unsupported", (name, where)
            assert name in str(info.value) and words in str(info.value), str(info.value)


def test_string_choices_are_literal_types_the_check_reads():
    hints = typing.get_type_hints(graphrt.SessionOptions)
    assert typing.get_args(hints["mode"]) == ("fast", "exact")
    assert typing.get_args(hints["optimization_level"]) == ("none", "basic", "all")
    assert typing.get_args(hints["weight_storage"]) == ("original", "float16", "bfloat16")


def test_unknown_option_names_are_refused_with_a_suggestion():
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(_two_outputs(), intra_op_thread=2)
    assert info.value.kind == "unsupported"
    assert "'intra_op_thread' (did you mean 'intra_op_threads'?)" in str(info.value)
    with pytest.raises(graphrt.SessionError, match=r"options must be a graphrt\.SessionOptions"):
        graphrt.Session(_two_outputs(), options={"mode": "exact"})


def test_a_bare_string_as_plugins_is_refused():
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.SessionOptions(plugins="ops-basic")
    assert info.value.kind == "unsupported"
    assert "for one plugin pass ['ops-basic']" in str(info.value)
    assert graphrt.SessionOptions(plugins=["a", "b"]).plugins == ("a", "b")


def test_the_backend_takes_every_session_option_by_its_field_name():
    names = {f.name for f in dataclasses.fields(graphrt.SessionOptions)}
    values = {
        "max_memory": 1 << 20,
        "strict_plugins": False,
        "max_cached_plans": 2,
        "check_shapes": True,
    }
    assert set(values) <= names
    rep = prepare(_two_outputs(), **values, not_an_option=1)  # onnx's runner adds keywords
    for name, value in values.items():
        assert getattr(rep.session.options, name) == value, name
    rep = prepare(_two_outputs(), options=graphrt.SessionOptions(mode="exact"))
    assert rep.session.options.mode == "exact"


# -- the package's names -------------------------------------------------------------------------


def test_public_names_are_exported_and_listed():
    assert graphrt.SessionOptions is graphrt.options.SessionOptions
    from graphrt.session import NodeArg

    assert graphrt.NodeArg is NodeArg
    listed = dir(graphrt)
    for name in graphrt.__all__:
        assert name in listed, name
        assert getattr(graphrt, name) is not None
    for name in ("load", "Session", "SessionOptions", "NodeArg", "Model", "CancellationToken"):
        assert name in graphrt.__all__ and name in listed
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        graphrt.nope  # noqa: B018


def test_listing_the_names_does_not_import_the_session_modules():
    code = """
        import json, sys
        import graphrt
        names = dir(graphrt)
        print(json.dumps(["Session" in names, "graphrt.session" in sys.modules]))
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [True, False]


# -- run's output names --------------------------------------------------------------------------


def test_an_empty_output_list_means_every_output_as_in_onnxruntime():

    model = _two_outputs()
    expected = ort_session(model).run([], {"a": A})
    assert len(expected) == 2  # what onnxruntime does with []
    sess = graphrt.Session(model)
    for names in ([], (), None):
        got = sess.run(names, {"a": A})
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            np.testing.assert_array_equal(g, e)
    target = np.empty(3, np.float32)
    _, p = sess.run([], {"a": A}, out={"p": target})
    assert p is target
    np.testing.assert_array_equal(target, A * C)
    assert sess.run(["p"], {"a": A})[0].tolist() == (A * C).tolist()


@pytest.mark.parametrize(
    ("names", "words"),
    [
        (
            "p",
            "output_names must be a list of output names (or None for every output), not str "
            "'p'; for one output pass ['p']",
        ),
        (b"p", "not bytes"),
        (3, "not int 3"),
    ],
)
def test_output_names_that_are_not_a_list_are_refused(names, words):
    sess = graphrt.Session(_two_outputs())
    with pytest.raises(graphrt.SessionError) as info:
        sess.run(names, {"a": A})
    assert info.value.kind == "invalid_input"
    assert words in str(info.value)


# -- the command line ----------------------------------------------------------------------------


def test_version(capsys):
    assert main(["--version"]) == 0
    out = capsys.readouterr().out.strip()
    assert out == f"graphrt {metadata.version('graphrt')}"


def test_kernel_path_flag_on_every_command_that_makes_a_session(tmp_path, capsys):
    path = str(tmp_path / "m.onnx")
    onnx.save(_two_outputs(), path)
    assert main(["run", path, "--kernel-path", "numpy", "--repeat", "0", "-q"]) == 0
    assert "kernel path numpy" in capsys.readouterr().out
    for command in (["run", "--repeat", "0"], ["check"], ["explain"], ["profile", "--repeat", "1"]):
        argv = [command[0], path, *command[1:], "--kernel-path", "no-such-path", "-q"]
        rc = main(argv)
        captured = capsys.readouterr()
        assert rc in (1, 2), command  # check reports the failure and exits 1
        assert "unknown kernel path 'no-such-path'" in captured.err + captured.out, command


@needs_autoload
def test_run_takes_the_default_models_name_and_explains_its_constant_output(capsys):
    if not os.path.exists(default_model_path()):
        pytest.skip("the installed onnx ships no light models")
    assert main(["run", "--help"]) == 0
    assert f"(default: {DEFAULT_MODEL})" in " ".join(capsys.readouterr().out.split())
    assert main(["run", DEFAULT_MODEL, "--repeat", "0", "-q"]) == 0
    out = capsys.readouterr().out
    assert f"model: {DEFAULT_MODEL} (from the onnx package" in out
    # Every weight of onnx's light models is one constant: every class gets 1/1000.
    y = re.search(r"output \S+: float32 \[1, 1000\]  min (\S+)  max (\S+)", out)
    assert y is not None and float(y.group(1)) == float(y.group(2)) == pytest.approx(1e-3)
    assert "every weight is 0.02" in out and "0.001 each" in out


def test_a_reader_that_stops_early_ends_the_command_quietly():
    """`graphrt ops | head -1` printed a BrokenPipeError traceback once head had its line."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write: every write fails
    code = "import sys; from graphrt.cli import main; sys.exit(main(['-q', 'ops']))"
    try:
        done = subprocess.run(
            [sys.executable, "-c", code],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert done.returncode == 141


def test_an_unknown_model_name_lists_the_shipped_ones(capsys):
    assert main(["run", "light_nothing", "-q"]) == 2
    err = capsys.readouterr().err
    assert "no such model file: 'light_nothing'" in err
    if os.path.exists(default_model_path()):
        assert "models shipped with onnx: " in err and DEFAULT_MODEL in err


@needs_autoload
def test_session_creation_time_does_not_include_importing_onnx(tmp_path):
    path = str(tmp_path / "m.onnx")
    onnx.save(_two_outputs(), path)
    code = f"""
        import json, sys
        from graphrt import cli
        cli.main(["run", {path!r}, "--repeat", "0", "-q"])
        print(json.dumps("onnx" in sys.modules))
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True
    )
    assert "session:" in done.stdout and "(imports excluded)" in done.stdout
    assert json.loads(done.stdout.strip().splitlines()[-1]) is False  # a .onnx file needs none


def test_the_readme_lists_every_command():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    listed = set(re.findall(r"^graphrt ([\w-]+)", readme, re.M))
    parser = build_parser()
    commands = {
        name
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name in action.choices
    }
    assert {"run", "check", "ops", "explain", "profile"} <= commands
    assert commands <= listed, commands - listed


def test_the_readme_opens_with_two_commands_that_ci_runs_and_ops_simd_is_optional():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    block = re.search(r"```sh\n(.*?)```", readme, re.S)
    assert block is not None
    commands = block.group(1).strip().splitlines()
    assert len(commands) == 2
    install, tests = commands
    # The native plugin has a pip call of its own whose failure is reported, not fatal.
    assert "-e ./plugins/ops-simd ||" in install and install.count("./plugins/ops-simd") == 1
    assert "C++17" in readme and "CMake" in readme and "optional" in readme
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        ci = f.read().splitlines()
    assert install in ci and tests in ci


# -- plugins in the unsupported_operator message -------------------------------------------------


def _relu() -> onnx.ModelProto:
    return make_model(
        [helper.make_node("Relu", ["x"], ["y"])], [tensor("x", shape=[2])], [tensor("y")]
    )


@needs_autoload
def test_plugins_left_out_by_the_allow_list_are_named_not_called_missing():
    installed = graphrt.Session(_relu()).plugins
    provider = graphrt.Session(_relu()).operator_table.lookup("", "Relu", 17).plugin
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(_relu(), plugins=[])
    message = str(info.value)
    assert info.value.kind == "unsupported_operator"
    assert info.value.operators == ["Relu (opset 17)"]
    assert "no installed plugin" not in message
    assert "no plugin in use provides Relu (opset 17) (plugins in use: none)" in message
    assert "left out by the session's plugins= list: " in message
    assert f"{provider} (provides Relu (opset 17))" in message
    for name in installed:
        assert name in message
    others = [p for p in installed if p != provider]
    if others:
        with pytest.raises(graphrt.SessionError) as info:
            graphrt.Session(_relu(), plugins=others)
        assert f"{provider} (provides Relu (opset 17))" in str(info.value)


def test_without_any_plugin_installed_the_message_says_so(monkeypatch):
    monkeypatch.setenv(plugins.AUTOLOAD_ENV, "1")
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(_relu())
    assert "no installed plugin provides Relu (opset 17) (plugins in use: none)" in str(info.value)
    assert "left out" not in str(info.value)


@needs_autoload
def test_a_plugin_that_failed_to_load_is_named_in_the_missing_operator_error(tmp_path, monkeypatch):
    (tmp_path / "frob_plugin_mod.py").write_text('raise ImportError("needs libfrob")\n')
    info_dir = tmp_path / "graphrt_ops_frob-0.1.dist-info"
    info_dir.mkdir()
    (info_dir / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: graphrt-ops-frob\nVersion: 0.1\n"
    )
    (info_dir / "entry_points.txt").write_text("[graphrt.plugins]\nops-frob = frob_plugin_mod\n")
    model = make_model(
        [helper.make_node("Frob", ["x"], ["y"], domain="com.frob")],
        [tensor("x", shape=[2])],
        [tensor("y")],
        domains=["com.frob"],
    )
    with monkeypatch.context() as m:
        m.syspath_prepend(str(tmp_path))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", graphrt.PluginLoadWarning)
            with pytest.raises(graphrt.SessionError) as info:
                graphrt.Session(model)
        assert info.value.kind == "unsupported_operator"
        assert "plugins that failed to load: 'ops-frob' (ImportError: needs libfrob)" in str(
            info.value
        )
    # Once the distribution is gone, its old failure is not news any more.
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(model)
    assert "ops-frob" not in str(info.value)
