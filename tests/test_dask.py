"""graphrt.dask (issue 20): batch inference over a Dask cluster of two worker processes.

The oracle is graphrt itself run serially in this process on the same blocks: the cluster must
change where blocks run, never what they compute.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import pickle
import subprocess
import sys
import types

import numpy as np
import pytest
from onnx import TensorProto, helper

da = pytest.importorskip("dask.array", reason="dask[array] is not installed (graphrt[dask])")
distributed = pytest.importorskip("distributed", reason="distributed is not installed")
pd = pytest.importorskip(
    "pandas", reason="pandas is not installed (dask[dataframe])", exc_type=ImportError
)
dd = pytest.importorskip(
    "dask.dataframe",
    reason="dask[dataframe] is not installed or cannot import (pyarrow needs numpy 2)",
    exc_type=ImportError,
)

import graphrt  # noqa: E402
import graphrt.dask as gd  # noqa: E402
from graphrt.kernel import OpDef, OpKernel  # noqa: E402
from tests._models import init, light_model, make_model, tensor  # noqa: E402

RNG = np.random.default_rng(20)
W1 = RNG.standard_normal((4, 8)).astype(np.float32)
B1 = RNG.standard_normal(8).astype(np.float32)
W2 = RNG.standard_normal((8, 3)).astype(np.float32)


def _mlp():
    """x [N, 4] -> scores [N, 3] and label [N] (ArgMax)."""
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m"]),
        helper.make_node("Add", ["m", "b1"], ["a"]),
        helper.make_node("Tanh", ["a"], ["h"]),
        helper.make_node("MatMul", ["h", "w2"], ["scores"]),
        helper.make_node("ArgMax", ["scores"], ["label"], axis=1, keepdims=0),
    ]
    return make_model(
        nodes,
        [tensor("x", shape=["N", 4])],
        [tensor("scores", shape=["N", 3]), tensor("label", TensorProto.INT64, ["N"])],
        [init("w1", W1), init("b1", B1), init("w2", W2)],
    )


def _with_side_input():
    """x [N, 4] (batched), w [4, 2] and b [] given whole: y = x @ w + b."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["y"]),
    ]
    return make_model(
        nodes,
        [tensor("x", shape=["N", 4]), tensor("w", shape=[4, 2]), tensor("b", shape=[])],
        [tensor("y", shape=["N", 2])],
    )


def _custom(op: str, domain: str):
    node = helper.make_node(op, ["x"], ["y"], domain=domain)
    return make_model(
        [node], [tensor("x", shape=["N", 4])], [tensor("y", shape=["N", 4])], domains=[domain]
    )


def _serial(model, blocks, name="x", **options):
    """Serial graphrt over the same blocks, concatenated per output."""
    sess = graphrt.Session(model.SerializeToString(), intra_op_threads=1, **options)
    runs = [sess.run(None, {name: b}) for b in blocks]
    return [np.concatenate(parts) for parts in zip(*runs)]


@pytest.fixture(scope="module")
def client():
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.ERROR,
        ) as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c


def _blocks(x, chunks):
    edges = np.cumsum((0, *chunks))
    return [x[a:b] for a, b in itertools.pairwise(edges)]


def test_results_equal_serial_graphrt_exactly(client):
    x = RNG.standard_normal((23, 4)).astype(np.float32)
    chunks = (5, 5, 5, 5, 3)
    outs = gd.predict(_mlp(), {"x": da.from_array(x, chunks=(chunks, 4))})
    scores, label = client.compute(outs, sync=True)
    want = _serial(_mlp(), _blocks(x, chunks))
    assert scores.dtype == np.float32 and label.dtype == np.int64
    np.testing.assert_array_equal(scores, want[0])
    np.testing.assert_array_equal(label, want[1])
    assert outs[0].chunks == (chunks, (3,)) and outs[1].chunks == (chunks,)


def test_exact_mode_equals_one_serial_run_over_every_row(client):
    x = RNG.standard_normal((17, 4)).astype(np.float32)
    (scores,) = gd.predict(_mlp(), {"x": da.from_array(x, chunks=(6, 4))}, ["scores"], mode="exact")
    (want,) = graphrt.Session(_mlp().SerializeToString(), mode="exact").run(["scores"], {"x": x})
    np.testing.assert_array_equal(scores.compute(), want)


def test_a_batch_one_model_runs_row_by_row(client):
    """light_squeezenet's input is [1, 3, 224, 224]: each block of 3 runs as 3 single rows."""
    path = light_model("squeezenet")
    x = RNG.standard_normal((5, 3, 224, 224)).astype(np.float32)
    (y,) = gd.predict(path, {"data_0": da.from_array(x, chunks=(3, 3, 224, 224))})
    assert y.shape == (5, 1000, 1, 1) and y.chunks[0] == (3, 2)
    sess = graphrt.Session(path, intra_op_threads=1)
    want = np.concatenate([sess.run(None, {"data_0": x[i : i + 1]})[0] for i in range(5)])
    np.testing.assert_array_equal(y.compute(), want)


def test_numpy_inputs_go_whole_to_every_block(client):
    x = RNG.standard_normal((9, 4)).astype(np.float32)
    w = RNG.standard_normal((4, 2)).astype(np.float32)
    b = np.array(0.5, np.float32)
    (y,) = gd.predict(_with_side_input(), {"x": da.from_array(x, chunks=(4, 4)), "w": w, "b": b})
    sess = graphrt.Session(_with_side_input().SerializeToString(), intra_op_threads=1)
    want = np.concatenate(
        [sess.run(None, {"x": p, "w": w, "b": b})[0] for p in _blocks(x, (4, 4, 1))]
    )
    np.testing.assert_array_equal(y.compute(), want)


def test_one_session_per_worker_reused_across_calls_and_blocks(client, tmp_path):
    client.run(gd.clear_sessions)
    x = RNG.standard_normal((40, 4)).astype(np.float32)
    path = tmp_path / "mlp.onnx"
    path.write_bytes(_mlp().SerializeToString())
    for model in (_mlp(), _mlp().SerializeToString(), _mlp(), str(path), path):
        client.compute(gd.predict(model, {"x": da.from_array(x, chunks=(4, 4))}), sync=True)
    counts = client.run(gd.cached_sessions)
    assert len(counts) == 2 and all(n <= 1 for n in counts.values()), counts
    assert sum(counts.values()) >= 1
    # Other options make another session: one more per worker at most.
    client.compute(
        gd.predict(_mlp(), {"x": da.from_array(x, chunks=(4, 4))}, mode="exact"), sync=True
    )
    counts = client.run(gd.cached_sessions)
    assert all(n <= 2 for n in counts.values()) and sum(counts.values()) >= 2, counts


def test_the_model_is_one_key_of_the_graph_not_part_of_every_task():
    big = np.arange(4 * 20000, dtype=np.float32).reshape(4, 20000) / 7
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    model = make_model(
        nodes, [tensor("x", shape=["N", 4])], [tensor("y", shape=["N", 20000])], [init("w", big)]
    )
    data = model.SerializeToString()
    x = da.zeros((12, 4), dtype=np.float32, chunks=(3, 4))
    (y,) = gd.predict(data, {"x": x})
    graph = dict(y.__dask_graph__())
    holding = [k for k, task in graph.items() if data[-4096:] in pickle.dumps(task)]
    assert len(holding) == 1 and "graphrt-model" in str(holding[0])


def test_a_missing_operator_on_the_workers_comes_back_as_session_error(client):
    """The caller's process has the operator (a plugin registered here), the workers do not."""

    class Negate(OpKernel):
        def infer(self, ctx):
            ctx.set_output(0, ctx.dtype(0), ctx.shape(0))

        def run(self, ctx, inputs, outputs):
            np.negative(inputs[0], out=outputs[0])

    plugin = types.SimpleNamespace(
        graphrt_operators=graphrt.hookimpl(lambda: [OpDef("Negate", Negate, domain="com.daskonly")])
    )
    name = graphrt.register_plugin(plugin, "ops-dask-client-only")
    try:
        (y,) = gd.predict(
            _custom("Negate", "com.daskonly"),
            {"x": da.ones((6, 4), dtype=np.float32, chunks=(3, 4))},
        )
    finally:
        graphrt.unregister_plugin(name)
    with pytest.raises(graphrt.SessionError) as caught:
        y.compute()
    err = caught.value
    assert type(err) is graphrt.SessionError
    assert err.kind == "unsupported_operator"
    assert err.operators == ["com.daskonly.Negate (opset 1)"]
    assert "Negate" in str(err)


def test_a_missing_operator_everywhere_fails_before_anything_runs():
    with pytest.raises(graphrt.SessionError) as caught:
        gd.predict(
            _custom("Nowhere", "com.missing"),
            {"x": da.ones((6, 4), dtype=np.float32, chunks=(3, 4))},
        )
    assert caught.value.kind == "unsupported_operator"
    assert caught.value.operators == ["com.missing.Nowhere (opset 1)"]


def test_chunks_along_other_axes_are_refused_with_the_rechunk():
    x = da.ones((8, 4), dtype=np.float32, chunks=(4, 2))
    with pytest.raises(graphrt.SessionError, match=r"axis 1.*rechunk\(\{1: -1\}\)") as caught:
        gd.predict(_mlp(), {"x": x})
    assert caught.value.kind == "invalid_input"
    (y,) = gd.predict(_mlp(), {"x": x.rechunk({1: -1})}, ["scores"])
    assert y.chunks == ((4, 4), (3,))


def test_batched_inputs_chunked_differently_are_refused():
    model = make_model(
        [helper.make_node("Add", ["x", "z"], ["y"])],
        [tensor("x", shape=["N", 4]), tensor("z", shape=["N", 4])],
        [tensor("y", shape=["N", 4])],
    )
    x = da.ones((8, 4), dtype=np.float32, chunks=(4, 4))
    z = da.ones((8, 4), dtype=np.float32, chunks=(2, 4))
    with pytest.raises(graphrt.SessionError, match="chunked differently along axis 0"):
        gd.predict(model, {"x": x, "z": z})


@pytest.mark.parametrize(
    ("inputs", "match"),
    [
        ({"x": np.ones((3, 4), np.float32)}, "at least one dask array"),
        ({"x": da.ones((3, 4), dtype=np.float64, chunks=(2, 4))}, "must be float32"),
        (
            {"y": da.ones((3, 4), dtype=np.float32, chunks=(2, 4))},
            "unknown input.*'y'.*missing input.*'x'",
        ),
    ],
)
def test_bad_inputs_are_refused_on_the_caller(inputs, match):
    with pytest.raises(graphrt.SessionError, match=match):
        gd.predict(_mlp(), inputs)


def _frame(n=30, parts=4):
    rng = np.random.default_rng(7)
    df = pd.DataFrame(
        {
            "a": rng.standard_normal(n),
            "b": rng.standard_normal(n),
            "c": rng.standard_normal(n),
            "d": rng.standard_normal(n).astype(np.float32),
            "name": [f"row{i}" for i in range(n)],
        },
        index=pd.RangeIndex(100, 100 + n),
    )
    return df, dd.from_pandas(df, npartitions=parts)


def test_predict_frame_maps_a_list_of_columns_to_one_input(client):
    df, frame = _frame()
    for columns in ({"x": ["a", "b", "c", "d"]}, ["a", "b", "c", "d"]):
        out = gd.predict_frame(_mlp(), frame, columns)
        assert list(out.columns) == ["scores_0", "scores_1", "scores_2", "label"]
        got = out.compute()
        lengths = frame.map_partitions(len).compute()
        x = df[["a", "b", "c", "d"]].to_numpy(np.float32)
        scores, label = _serial(_mlp(), _blocks(x, tuple(lengths)))
        np.testing.assert_array_equal(got[["scores_0", "scores_1", "scores_2"]].to_numpy(), scores)
        np.testing.assert_array_equal(got["label"].to_numpy(), label)
        assert got["label"].dtype == np.int64
        pd.testing.assert_index_equal(got.index, df.index)


def test_predict_frame_takes_inputs_from_the_columns_of_their_names(client):
    model = make_model(
        [helper.make_node("Mul", ["a", "b"], ["m"]), helper.make_node("Add", ["m", "d"], ["y"])],
        [tensor("a", shape=["N", 1]), tensor("b", shape=["N", 1]), tensor("d", shape=["N", 1])],
        [tensor("y", shape=["N", 1])],
    )
    df, frame = _frame()
    got = gd.predict_frame(model, frame).compute()
    feed = {c: df[[c]].to_numpy(np.float32) for c in "abd"}
    (want,) = graphrt.Session(model.SerializeToString(), intra_op_threads=1).run(None, feed)
    np.testing.assert_array_equal(got["y"].to_numpy(), want[:, 0])
    np.testing.assert_allclose(want, feed["a"] * feed["b"] + feed["d"], rtol=1e-6)


def test_predict_frame_refuses_what_it_cannot_map():
    _, frame = _frame()
    with pytest.raises(graphrt.SessionError, match="give it 4 columns"):
        gd.predict_frame(_mlp(), frame, {"x": ["a", "b"]})
    with pytest.raises(graphrt.SessionError, match="no column"):
        gd.predict_frame(_mlp(), frame, {"x": ["a", "b", "c", "zz"]})
    with pytest.raises(graphrt.SessionError, match="column 'name' is"):
        gd.predict_frame(_mlp(), frame, {"x": ["a", "b", "c", "name"]})


def test_import_graphrt_does_not_import_dask():
    code = (
        "import json, sys; import graphrt; a = sorted(m for m in sys.modules if m.split('.')[0] "
        "in ('dask', 'distributed', 'pandas')); import graphrt.dask; "
        "b = 'distributed' in sys.modules or 'pandas' in sys.modules; print(json.dumps([a, b]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ
    )
    assert json.loads(done.stdout) == [[], False]


def test_an_output_without_one_row_per_input_row_is_refused(client):
    """A sum over the batch gives one value per block, not per row: the chunks would lie."""
    model = make_model(
        [helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0, axes=[0])],
        [tensor("x", shape=["N", 4])],
        [tensor("y", shape=[4])],
        opset=12,
    )
    (y,) = gd.predict(model, {"x": da.ones((6, 4), dtype=np.float32, chunks=(3, 4))})
    with pytest.raises(graphrt.SessionError, match="has 4 rows for a block of 3") as caught:
        y.compute()
    assert caught.value.kind == "unsupported"
