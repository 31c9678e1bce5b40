"""Exact mode: bit-identical across thread counts and plan reuse; refusals name operators."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import graphrt
from tests._models import init, make_model, mlp, small_cnn, tensor


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


def _canonical_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """docs/exact-mode.md's order, one scalar at a time: products rounded, ascending k."""
    out = np.empty((a.shape[0], b.shape[1]), a.dtype)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            acc = a.dtype.type(a[i, 0] * b[0, j])
            for k in range(1, a.shape[1]):
                acc = a.dtype.type(acc + a.dtype.type(a[i, k] * b[k, j]))
            out[i, j] = acc
    return out


@pytest.mark.parametrize("batch", [1, 7, 300])
def test_mlp_is_bit_identical_across_threads_and_plan_reuse(batch):
    model = mlp(hidden=(96, 80), n_in=70, n_out=33)
    x = np.random.default_rng(batch).standard_normal((batch, 70)).astype(np.float32)
    results = []
    for threads in (1, 2, 4):
        sess = graphrt.Session(model, mode="exact", intra_op_threads=threads)
        first = sess.run(None, {"x": x})[0]  # new plan
        sess.run(None, {"x": x[: max(1, batch // 2)]})  # another plan in between
        again = sess.run(None, {"x": x})[0]  # reused plan and pooled run state
        assert sess.plans_built == (2 if batch > 1 else 1)
        results += [_bits(first), _bits(again)]
    assert len(set(results)) == 1
    # and it is the right answer (close to float64 arithmetic)
    fast = graphrt.Session(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(
        np.frombuffer(results[0], np.float32).reshape(fast.shape), fast, rtol=1e-4, atol=1e-5
    )


def test_exact_matmul_follows_the_documented_order():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((5, 40)).astype(np.float32) * 1e3
    b = rng.standard_normal((40, 6)).astype(np.float32)
    model = make_model(
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        [tensor("a", shape=[5, 40]), tensor("b", shape=[40, 6])],
        [tensor("y", shape=[5, 6])],
    )
    got = graphrt.Session(model, mode="exact").run(None, {"a": a, "b": b})[0]
    assert _bits(got) == _bits(_canonical_matmul(a, b))


def test_nan_results_are_canonical_in_exact_mode():
    model = make_model(
        [helper.make_node("Mul", ["a", "b"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
        [tensor("a", shape=[4]), tensor("b", shape=[4])],
        [tensor("y", shape=[4])],
    )
    payload = np.array([0x7FC12345, 0xFFC00001, 0x7F800001, 0x3F800000], np.uint32).view(np.float32)
    a = payload.copy()
    b = np.array([1, 1, 1, -0.0], np.float32)
    y = graphrt.Session(model, mode="exact").run(None, {"a": a, "b": b})[0]
    assert list(y.view(np.uint32)[:3]) == [0x7FC00000] * 3
    assert y.view(np.uint32)[3] == 0  # 1 * -0 = -0, and Relu gives +0 in exact mode


def test_operator_without_exact_support_fails_at_creation_naming_it():
    # Conv is exact now (conv_exact.py): the refusal is shown with LogSoftmax (needs a log)
    model = small_cnn()
    model.graph.node[-1].op_type = "LogSoftmax"
    with pytest.raises(graphrt.SessionError) as info:
        graphrt.Session(model, mode="exact")
    err = info.value
    assert err.kind == "exact_mode_unavailable"
    assert err.operators == ["LogSoftmax (opset 17)"]
    assert "LogSoftmax (opset 17)" in str(err)


def test_exact_gemm_epilogue_is_separate_multiply_and_add():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 8)).astype(np.float32)
    b = rng.standard_normal((8, 4)).astype(np.float32)
    c = rng.standard_normal((4,)).astype(np.float32)
    model = make_model(
        [helper.make_node("Gemm", ["a", "b", "c"], ["y"], alpha=0.3, beta=1.7)],
        [tensor("a", shape=[3, 8])],
        [tensor("y", shape=[3, 4])],
        [init("b", b), init("c", c)],
    )
    got = graphrt.Session(model, mode="exact").run(None, {"a": a})[0]
    prod = _canonical_matmul(a, b)
    want = (prod * np.float32(0.3)).astype(np.float32) + (c * np.float32(1.7)).astype(np.float32)
    assert _bits(got) == _bits(want.astype(np.float32))


def test_exact_integer_and_double_paths():
    rng = np.random.default_rng(9)
    for dtype, elem in ((np.int32, 6), (np.float64, 11), (np.int64, 7)):
        a = (rng.standard_normal((4, 5)) * 10).astype(dtype)
        b = (rng.standard_normal((5, 3)) * 10).astype(dtype)
        model = make_model(
            [
                helper.make_node("MatMul", ["a", "b"], ["m"]),
                helper.make_node("Add", ["m", "a0"], ["y"]),
            ],
            [tensor("a", elem, [4, 5]), tensor("b", elem, [5, 3])],
            [tensor("y", elem, [4, 3])],
            [init("a0", np.ones(3, dtype))],
        )
        outs = {
            graphrt.Session(model, mode="exact", intra_op_threads=t)
            .run(None, {"a": a, "b": b})[0]
            .tobytes()
            for t in (1, 3)
        }
        assert len(outs) == 1
        np.testing.assert_allclose(
            np.frombuffer(outs.pop(), dtype).reshape(4, 3), a @ b + 1, rtol=1e-12
        )
