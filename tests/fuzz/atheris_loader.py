"""atheris (coverage-guided, libFuzzer) on graphrt's loader: ``tox -e atheris``.

    python -m tests.fuzz.atheris_loader --make-corpus DIR     # seed models
    python -m tests.fuzz.atheris_loader DIR -max_total_time=600 -rss_limit_mb=6144

Each input is model bytes: ``graphrt.load(bytes)`` must return a model or raise
``graphrt.SessionError``; a model that loads is then run once on inputs made from its
declarations (tests/fuzz/worker.py's ``derived_feeds``) with a cancellation deadline, and
must again end in outputs or a SessionError.  Any other exception is a finding: atheris
prints it and writes the input as ``crash-*`` (a hang as ``timeout-*``, an allocation past
``-rss_limit_mb``/``-malloc_limit_mb`` as ``oom-*``) for ``python -m tests.fuzz.atheris_loader
FILE`` to replay.  Coverage is collected in graphrt's core (the loader, the planner, the
passes); the seed corpus is a few models made with onnx.helper plus the onnx package's own
backend test models.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np


def seed_models() -> dict[str, bytes]:
    """A few hand-made models and the onnx backend test suite's small ones, by name."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    out: dict[str, bytes] = {}
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = numpy_helper.from_array(np.ones((3, 2, 2, 2), np.float32), "w")
    shapes = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")
    graphs = {
        "relu": [helper.make_node("Relu", ["x"], ["y"])],
        "conv": [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
        "pool": [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2])],
        "reshape": [helper.make_node("Reshape", ["x", "shape"], ["y"])],
        "chain": [
            helper.make_node("Conv", ["x", "w"], ["c"]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("Flatten", ["r"], ["y"]),
        ],
    }
    for name, nodes in graphs.items():
        graph = helper.make_graph(nodes, name, [x], [y], [w, shapes])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        out[f"helper_{name}"] = model.SerializeToString()
    from onnx.backend.test.case.node import collect_testcases

    cases = sorted(collect_testcases(None), key=lambda c: c.name)
    for case in cases[:: max(1, len(cases) // 500)]:  # about 500 of them, every operator family
        data = case.model.SerializeToString()
        if len(data) < 4096:
            out[f"node_{case.name}"] = data
    folder = Path(onnx.__file__).parent / "backend" / "test" / "data"
    for path in sorted(folder.glob("*/*/model.onnx")):
        if path.stat().st_size < 64 * 1024:
            out[f"{path.parent.parent.name}_{path.parent.name}"] = path.read_bytes()
    return out


def make_corpus(directory: str) -> int:
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    models = seed_models()
    for name, data in models.items():
        (target / name).write_bytes(data)
    print(f"atheris corpus: {len(models)} models in {target}")
    return 0


def one_input(data: bytes) -> None:
    import graphrt

    from .worker import derived_feeds

    token = graphrt.CancellationToken()
    timer = threading.Timer(5.0, token.cancel)
    timer.daemon = True
    timer.start()
    try:
        model = graphrt.load(data, intra_op_threads=1, cancellation=token)
        feeds = derived_feeds(model.session, len(data))
        if feeds is not None:
            model.session.run(None, feeds, cancellation=token)
    except graphrt.SessionError:
        pass
    finally:
        timer.cancel()


def main(argv: list[str]) -> int:
    if len(argv) > 2 and argv[1] == "--make-corpus":
        return make_corpus(argv[2])
    try:
        import atheris
    except ImportError:
        print("atheris is not installed (pip install atheris; tox -e atheris does)")
        return 2
    with atheris.instrument_imports(include=["graphrt"]):
        import graphrt
        import graphrt.session  # noqa: F401 - the loader and planner, instrumented

    def test_one_input(data: bytes) -> None:
        with np.errstate(all="ignore"):
            one_input(data)

    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
