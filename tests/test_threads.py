"""intra_op_threads: honoured by graphrt's own pool, numpy's BLAS kept to one thread."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from onnx import helper

import graphrt
from graphrt import OpDef, OpKernel
from tests._models import init, make_model, mlp, small_cnn, tensor

threadpoolctl = pytest.importorskip("threadpoolctl")


def _blas_threads() -> list[int]:
    return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]


class _RecordThreads(OpKernel):
    """Splits its work into 16 blocks and records which threads ran them, and the thread count
    its context gave it (what a native library's own threads would be sized to)."""

    seen: set = set()
    told: set = set()
    lock = threading.Lock()

    def infer(self, ctx):
        ctx.set_output(0, ctx.dtype(0), ctx.shape(0))

    def run(self, ctx, inputs, outputs):
        def block(i):
            with self.lock:
                type(self).seen.add(threading.get_ident())
            outputs[0][i::16] = inputs[0][i::16] * 2

        type(self).told.add(ctx.threads)
        ctx.parallel_for(16, block)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_intra_op_threads_are_used_exactly(threads):
    _RecordThreads.seen, _RecordThreads.told = set(), set()
    model = make_model(
        [helper.make_node("Rec", ["x"], ["y"], domain="com.t")],
        [tensor("x", shape=[64])],
        [tensor("y", shape=[64])],
        domains=["com.t"],
    )
    sess = graphrt.Session(
        model, intra_op_threads=threads, custom_kernels={("com.t", "Rec"): _RecordThreads}
    )
    assert sess.threads == threads
    x = np.arange(64, dtype=np.float32)
    for _ in range(20):  # enough blocks for every worker to claim some
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], x * 2)
    assert 1 <= len(_RecordThreads.seen) <= threads
    assert _RecordThreads.told == {threads}
    if threads == 1:
        assert _RecordThreads.seen == {threading.get_ident()}


def test_a_context_outside_a_run_has_one_thread():
    from graphrt.kernel import KernelContext

    assert KernelContext().threads == 1


def test_zero_means_one_thread_per_core():
    import os

    sess = graphrt.Session(mlp(), intra_op_threads=0)
    assert sess.threads == len(os.sched_getaffinity(0))


def test_blas_is_limited_while_sessions_are_open():
    if not _blas_threads():
        pytest.skip("numpy has no BLAS threadpool threadpoolctl can see")
    original = _blas_threads()
    a = graphrt.Session(mlp(), intra_op_threads=4)
    b = graphrt.Session(mlp(), intra_op_threads=2)
    assert all(n == 1 for n in _blas_threads())
    a.close()
    assert all(n == 1 for n in _blas_threads())  # b is still open
    b.close()
    assert _blas_threads() == original


@pytest.mark.parametrize(
    "make,shape", [(mlp, (300, 24)), (small_cnn, (3, 3, 16, 16))], ids=["mlp", "cnn"]
)
def test_fast_mode_results_do_not_depend_on_thread_count(make, shape):
    model = make() if make is not mlp else mlp(hidden=(256, 300))
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    bits = {
        graphrt.Session(model, intra_op_threads=t).run(None, {"x": x})[0].tobytes()
        for t in (1, 2, 4)
    }
    assert len(bits) == 1


def test_custom_kernel_registration_through_opdef():
    sess = graphrt.Session(
        make_model(
            [helper.make_node("Rec", ["x"], ["y"], domain="com.t")],
            [tensor("x", shape=[16])],
            [tensor("y", shape=[16])],
            domains=["com.t"],
        ),
        custom_kernels=[OpDef("Rec", _RecordThreads, domain="com.t")],
    )
    x = np.ones(16, np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], x * 2)


class _MatmulSpy:
    """numpy for graphrt_ops_basic.matmul, recording the width of each product it computes."""

    def __init__(self) -> None:
        self.widths: list[int] = []
        self.lock = threading.Lock()

    def __getattr__(self, name):
        return getattr(np, name)

    def matmul(self, a, b, out=None):
        with self.lock:
            self.widths.append(b.shape[-1])
        return np.matmul(a, b, out=out)


@pytest.mark.parametrize("op", ["Gemm", "MatMul"])
@pytest.mark.parametrize("n, widths", [(1300, [276, 512, 512]), (1000, [488, 512])])
def test_a_few_rows_split_their_columns_over_the_threads(op, n, widths, monkeypatch):
    """A batch-1 classifier layer (one matrix-vector product reading the whole weight; 1000
    classes: light_resnet50's head) runs as blocks of columns: the same bits on 1, 2 and 4
    threads, the float64 values, and the last block shorter.  ops-basic alone: its numpy
    product is the one that splits."""
    from graphrt_ops_basic import matmul

    spy = _MatmulSpy()
    monkeypatch.setattr(matmul, "np", spy)
    rng = np.random.default_rng(3)
    k = 2048
    assert matmul.COL_BLOCK == 512
    w = rng.standard_normal((n, k) if op == "Gemm" else (k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    if op == "Gemm":  # Gemm + Relu: a FusedGemm in fast mode
        nodes = [
            helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1),
            helper.make_node("Relu", ["g"], ["y"]),
        ]
    else:
        nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    inits = [init("w", w), init("b", bias)]
    model = make_model(nodes, [tensor("x", shape=[2, k])], [tensor("y", shape=[2, n])], inits)
    x = rng.standard_normal((2, k)).astype(np.float32)
    x64 = x.astype(np.float64)
    if op == "Gemm":
        want = np.maximum(x64 @ w.T.astype(np.float64) + bias, 0)
    else:
        want = x64 @ w.astype(np.float64)
    results = []
    for threads in (1, 2, 4):
        spy.widths.clear()
        sess = graphrt.Session(model, intra_op_threads=threads, plugins=["ops-basic"])
        got = sess.run(None, {"x": x})[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
        results.append(got)
        assert sorted(spy.widths[-len(widths) :]) == widths, spy.widths
    for got in results[1:]:
        np.testing.assert_array_equal(got.view(np.uint32), results[0].view(np.uint32))
