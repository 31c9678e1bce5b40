"""The top-level run path kept short (issue 14): what its shortcuts must not change.

``Session.run`` checks the common feed (a dict of ndarrays of the declared dtype) in one pass,
sets numpy's error state without an errstate object, and runs the program without a step
counter; a run state hands values the plan puts at one offset the same array object; Gemm
binds its numpy calls once.  Each test here fails if one of those shortcuts changes a result,
an error or the caller's state.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
from onnx import TensorProto, helper

import graphrt
from graphrt import OpKernel
from graphrt.runstate import RunState
from tests._models import add_chain, init, make_model, tensor


def _static_model() -> bytes:
    """Relu of x [2, 3] (every dim fixed) plus s [N, 3] (a symbolic batch): y = Relu(x) + s."""
    return make_model(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "s"], ["y"])],
        [tensor("x", shape=[2, 3]), tensor("s", shape=["N", 3])],
        [tensor("y")],
    ).SerializeToString()


X = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
S = np.arange(6, dtype=np.float32).reshape(2, 3)


@pytest.mark.parametrize(
    ("feed", "message"),
    [
        (
            {"x": X.astype(np.float64), "s": S},
            "input 'x' must be tensor(float), got tensor(double)",
        ),
        ({"x": X[:1], "s": S}, "input 'x' axis 0 must be 2 (shape [2, 3]), got shape [1, 3]"),
        ({"x": X.reshape(3, 2), "s": S}, "input 'x' axis 0 must be 2 (shape [2, 3]), got shape"),
        ({"x": X.ravel(), "s": S}, "input 'x' must have rank 2 (shape [2, 3]), got shape [6]"),
        ({"x": X, "s": S[:, :2]}, "input 's' axis 1 must be 3 (shape [N, 3]), got shape [2, 2]"),
        ({"x": X}, "input 's' is missing"),
        ({"x": X, "s": S, "q": S}, "unknown input(s) 'q'; the model's inputs are 'x', 's'"),
        ({"x": X, "s": S.astype(np.int64)}, "input 's' must be tensor(float), got tensor(int64)"),
    ],
)
def test_the_one_pass_check_refuses_what_the_full_check_refuses(feed, message):
    sess = graphrt.Session(_static_model())
    with pytest.raises(graphrt.SessionError) as info:
        sess.run(None, feed)
    assert info.value.kind == "invalid_input"
    assert str(info.value).startswith(f"[invalid_input] {message}")
    assert sess.plans_built == 0


def test_feeds_outside_the_common_case_still_run():
    sess = graphrt.Session(_static_model())
    want = np.maximum(X, 0) + S
    feeds = [
        {"x": X, "s": S},
        types.MappingProxyType({"x": X, "s": S}),  # a Mapping, not a dict
        {"x": X, "s": S[::1]},  # a view
        {"x": np.asfortranarray(X), "s": S[:, ::-1][:, ::-1]},  # not C-contiguous
        {"x": X.view(type("Sub", (np.ndarray,), {})), "s": S},  # an ndarray subclass
    ]
    for feed in feeds:
        np.testing.assert_array_equal(sess.run(None, feed)[0], want)
    np.testing.assert_array_equal(sess.run(None, {"x": X, "s": S[:1]})[0], np.maximum(X, 0) + S[0])
    assert sess.plans_built == 2  # one per shape of s: the symbolic batch still keys the plan


def test_a_run_leaves_the_callers_floating_point_error_state_alone():
    model = make_model(
        [helper.make_node("Div", ["x", "z"], ["y"])],
        [tensor("x", shape=[2]), tensor("z", shape=[2])],
        [tensor("y", shape=[2])],
    )
    sess = graphrt.Session(model)
    feed = {"x": np.array([1, -1], np.float32), "z": np.zeros(2, np.float32)}
    with np.errstate(divide="raise", invalid="raise"):
        before = np.geterr()
        np.testing.assert_array_equal(sess.run(None, feed)[0], [np.inf, -np.inf])
        assert np.geterr() == before
        with pytest.raises(graphrt.SessionError):
            sess.run(None, {"x": feed["x"]})
        assert np.geterr() == before
        with pytest.raises(FloatingPointError):  # still the caller's state after the runs
            np.divide(np.ones(1), np.zeros(1))


class _SharedCall(OpKernel):
    """Binds the same callable for every step; its second call of a run raises, so the program
    must name the second step, not the first step holding that callable."""

    calls: list[int] = []

    def infer(self, ctx):
        ctx.set_output(0, ctx.dtype(0), ctx.shape(0))

    def bind(self, ctx, inputs, outputs):
        return _second_call_raises


def _second_call_raises() -> None:
    _SharedCall.calls.append(1)
    if len(_SharedCall.calls) % 2 == 0:
        raise ZeroDivisionError("the second step")


def test_a_kernel_binding_one_callable_for_two_steps_gets_the_failing_step_named():
    model = make_model(
        [
            helper.make_node("Count", ["x"], ["a"], domain="com.t", name="first"),
            helper.make_node("Count", ["a"], ["y"], domain="com.t", name="second"),
        ],
        [tensor("x", shape=[2])],
        [tensor("y", shape=[2])],
        domains=["com.t"],
    )
    sess = graphrt.Session(model, custom_kernels={("com.t", "Count"): _SharedCall}, plugins=[])
    for _ in range(2):
        _SharedCall.calls = []
        with pytest.raises(graphrt.SessionError) as info:
            sess.run(None, {"x": np.ones(2, np.float32)})
        assert info.value.kind == "kernel_error"
        assert info.value.node == "second" and "the second step" in str(info.value)


def test_cancellation_is_checked_before_each_step_and_names_the_step_not_run():
    token = graphrt.CancellationToken()

    class Cancels(OpKernel):
        def infer(self, ctx):
            ctx.set_output(0, ctx.dtype(0), ctx.shape(0))

        def run(self, ctx, inputs, outputs):
            np.copyto(outputs[0], inputs[0])
            token.cancel()

    model = make_model(
        [
            helper.make_node("Cancel", ["x"], ["a"], domain="com.t", name="first"),
            helper.make_node("Relu", ["a"], ["y"], name="second"),
        ],
        [tensor("x", shape=[2])],
        [tensor("y", shape=[2])],
        domains=["com.t"],
    )
    sess = graphrt.Session(model, custom_kernels={("com.t", "Cancel"): Cancels})
    x = np.array([-1, 1], np.float32)
    with pytest.raises(graphrt.SessionError) as info:
        sess.run(None, {"x": x}, cancellation=token)
    assert info.value.kind == "cancelled" and info.value.node == "second"
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], [0, 1])  # still usable


def test_values_at_one_offset_share_one_array_object():
    """An Add chain reuses one block in place: its values are one array, so each ufunc call
    sees its output as its input (no overlap check between two views of the same memory)."""
    sess = graphrt.Session(add_chain(5, 8))
    x = np.ones((1, 8), np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], x + 5 * 0.5)  # exact
    plan = sess.cached_plans[0]
    state = RunState(plan, None)
    by_place: dict[tuple, list[int]] = {}
    for vid, off in plan.memory.offsets.items():
        if vid in plan.constants:
            continue
        t = plan.types[vid]
        by_place.setdefault((off, t.dtype, t.shape), []).append(vid)
    shared = [vids for vids in by_place.values() if len(vids) > 1]
    assert shared, "the plan reuses no block in place: nothing to check"
    for vids in shared:
        assert all(state.values[v] is state.values[vids[0]] for v in vids)


def _gemm(trans_a: int, trans_b: int, alpha: float, beta: float, c: str) -> bytes:
    a_shape, b_shape = ([5, 3] if trans_a else [3, 5]), ([4, 5] if trans_b else [5, 4])
    inputs = [tensor("a", shape=a_shape)]
    inits = [init("b", np.linspace(-1, 1, 20, dtype=np.float32).reshape(b_shape))]
    names = ["a", "b"]
    if c == "constant":
        inits.append(init("c", np.linspace(2, 3, 4, dtype=np.float32)))
        names.append("c")
    elif c == "input":
        inputs.append(tensor("c", shape=[3, 4]))
        names.append("c")
    node = helper.make_node(
        "Gemm", names, ["y"], transA=trans_a, transB=trans_b, alpha=alpha, beta=beta
    )
    return make_model([node], inputs, [tensor("y")], inits).SerializeToString()


@pytest.mark.parametrize("c", ["none", "constant", "input"])
@pytest.mark.parametrize(("alpha", "beta"), [(1.0, 1.0), (0.5, 1.0), (1.0, 0.25)])
@pytest.mark.parametrize("trans", [(0, 0), (1, 1)])
def test_gemm_bound_once_computes_what_its_run_computes(trans, alpha, beta, c):
    """numpy Gemm: the calls bound per run state against ``Gemm.run`` (its reference), bit for
    bit, and both against the formula."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal([5, 3] if trans[0] else [3, 5]).astype(np.float32)
    feed = {"a": a}
    if c == "input":
        feed["c"] = rng.standard_normal((3, 4)).astype(np.float32)
    sess = graphrt.Session(_gemm(*trans, alpha, beta, c), kernel_path="numpy")
    got = sess.run(None, feed)[0]
    plan = sess.cached_plans[0]
    (step,) = [s for s in plan.steps if s.node.info.op_type == "Gemm"]
    state = RunState(plan, None)
    index = state.step_index.index(plan.steps.index(step))
    kctx = state.contexts[plan.steps.index(step)]
    ins = [state.values[v] if v >= 0 else None for v in step.node.inputs]
    outs = [state.values[v] for v in step.node.outputs]
    kernel = step.node.kernel
    if alpha == 1 and not (c == "input" and beta != 1):  # the bound calls, not run
        assert getattr(state.program[index], "func", None) is not type(kernel).run
    state.run([feed[d.name] for d in sess.get_inputs()])
    bound = outs[0].copy()
    outs[0].fill(np.nan)
    type(kernel).run(kernel, kctx, ins, outs)
    assert bound.tobytes() == outs[0].tobytes() == got.tobytes()
    b = np.linspace(-1, 1, 20, dtype=np.float32).reshape([4, 5] if trans[1] else [5, 4])
    want = alpha * ((a.T if trans[0] else a) @ (b.T if trans[1] else b))
    if c == "constant":
        want = want + beta * np.linspace(2, 3, 4, dtype=np.float32)
    elif c == "input":
        want = want + beta * feed["c"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_fused_gemm_relu_on_the_native_path_keeps_the_unfused_bits():
    """FusedGemm (Gemm + Relu) takes the native GEMM with Relu in its epilogue on a native path:
    the same bits as the unfused Gemm and Relu, NaN kept."""
    pytest.importorskip("graphrt_ops_simd")
    w = np.linspace(-1, 1, 8 * 16, dtype=np.float32).reshape(8, 16)
    model = make_model(
        [
            helper.make_node("Gemm", ["x", "w", "c"], ["g"], transB=1),
            helper.make_node("Relu", ["g"], ["y"]),
        ],
        [tensor("x", shape=[2, 16])],
        [tensor("y", shape=[2, 8])],
        [init("w", w), init("c", np.linspace(-0.5, 0.5, 8, dtype=np.float32))],
    ).SerializeToString()
    x = np.random.default_rng(1).standard_normal((2, 16)).astype(np.float32)
    x[1, 3] = np.nan
    tried = 0
    for path in ("avx2", "avx512"):
        try:
            fused = graphrt.Session(model, kernel_path=path)
        except graphrt.SessionError:
            continue  # not on this CPU
        tried += 1
        plain = graphrt.Session(model, kernel_path=path, optimization_level="none")
        got, want = fused.run(None, {"x": x})[0], plain.run(None, {"x": x})[0]
        ops = [s.node.info.op_type for s in fused.cached_plans[0].steps]
        assert ops == ["FusedGemm"]
        assert type(fused.cached_plans[0].steps[0].prepared).__module__.startswith(
            "graphrt_ops_simd"
        )
        assert got.tobytes() == want.tobytes()
        assert np.isnan(got[1]).all() and not np.isnan(got[0]).any()
    if not tried:
        pytest.skip("no avx2 or avx512 kernel path on this CPU")


def test_int_inputs_and_several_outputs_in_the_requested_order():
    model = make_model(
        [
            helper.make_node("Neg", ["i"], ["n"]),
            helper.make_node("Abs", ["i"], ["a"]),
        ],
        [tensor("i", TensorProto.INT64, shape=[3])],
        [tensor("n", TensorProto.INT64, shape=[3]), tensor("a", TensorProto.INT64, shape=[3])],
    )
    sess = graphrt.Session(model)
    i = np.array([1, -2, 3], np.int64)
    n, a = sess.run(None, {"i": i})
    a2, n2 = sess.run(["a", "n"], {"i": i})
    np.testing.assert_array_equal(n, -i)
    np.testing.assert_array_equal(a, np.abs(i))
    assert a2.tobytes() == a.tobytes() and n2.tobytes() == n.tobytes()
    assert not np.shares_memory(n, n2)
