"""The slab planner: no two values that are live at the same time share bytes.

Property-based: hypothesis builds random schedules (values made, read, viewed, written in place,
scratch) and random real graphs run through build_plan; every pair of values whose live
intervals overlap must occupy disjoint byte ranges, except a view and its source and an explicit
in-place pair at the step where one ends and the other begins.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from graphrt.memory import ALIGN, MemStep, plan_memory


@st.composite
def schedules(draw):
    n_steps = draw(st.integers(1, 25))
    made: list[int] = []
    steps = []
    next_id = 0
    preplaced = {}
    for _ in range(draw(st.integers(0, 3))):
        preplaced[next_id] = draw(st.integers(0, 5000))
        made.append(next_id)
        next_id += 1
    for _ in range(n_steps):
        uses = tuple(draw(st.lists(st.sampled_from(made), max_size=3, unique=True))) if made else ()
        kind = draw(st.sampled_from(["def", "def", "def", "view", "inplace"]))
        if kind == "view" and uses:
            steps.append(MemStep(defs={}, uses=uses, views={next_id: uses[0]}))
        else:
            size = draw(st.integers(0, 6000))
            in_place = (next_id, uses[0]) if kind == "inplace" and uses else None
            scratch = {}
            if draw(st.booleans()):
                scratch = {10_000 + next_id: draw(st.integers(1, 3000))}
            extra = {}
            if draw(st.integers(0, 4)) == 0:  # a second output
                extra = {20_000 + next_id: draw(st.integers(0, 3000))}
            steps.append(
                MemStep(
                    defs={next_id: size, **extra}, uses=uses, in_place=in_place, scratch=scratch
                )
            )
            made.extend(extra)
        made.append(next_id)
        next_id += 1
    keep = draw(st.lists(st.sampled_from(made), max_size=3, unique=True)) if made else []
    return steps, preplaced, keep


def assert_no_overlap(plan) -> None:
    in_place = {frozenset(p) for p in plan.in_place}
    owners = [v for v in plan.live if plan.root.get(v, v) == v]
    for i, a in enumerate(owners):
        for b in owners[i + 1 :]:
            a0, a1 = plan.live[a]
            b0, b1 = plan.live[b]
            if a1 < b0 or b1 < a0:
                continue  # never live together
            if frozenset((a, b)) in in_place and (a1 == b0 or b1 == a0):
                continue  # the explicit alias: one ends where the other begins
            ra = (plan.offsets[a], plan.offsets[a] + plan.sizes[a])
            rb = (plan.offsets[b], plan.offsets[b] + plan.sizes[b])
            if plan.sizes[a] == 0 or plan.sizes[b] == 0:
                continue
            assert ra[1] <= rb[0] or rb[1] <= ra[0], (
                f"values {a} {plan.live[a]} at {ra} and {b} {plan.live[b]} at {rb} overlap"
            )


@settings(max_examples=300, deadline=None)
@given(schedules())
def test_live_values_never_overlap(case):
    steps, preplaced, keep = case
    plan = plan_memory(steps, preplaced=preplaced, keep=keep)
    assert_no_overlap(plan)
    for v, off in plan.offsets.items():
        assert off % ALIGN == 0
        assert off + plan.sizes.get(v, 0) <= plan.size
    assert plan.size <= plan.total_bytes


def test_reuse_makes_the_slab_smaller_than_the_sum():
    # a chain a -> b -> c -> d of equal sizes needs two blocks, not four
    steps = [MemStep(defs={1: 1000}, uses=(0,))] + [
        MemStep(defs={i + 1: 1000}, uses=(i,)) for i in range(1, 4)
    ]
    plan = plan_memory(steps, preplaced={0: 1000}, keep=[4])
    assert plan.size == 2 * 1024
    assert plan.total_bytes == 5 * 1024


def test_in_place_takes_over_the_dying_input_block():
    steps = [MemStep(defs={1: 256}, uses=(0,), in_place=(1, 0))]
    plan = plan_memory(steps, preplaced={0: 256}, keep=[1])
    assert plan.offsets[1] == plan.offsets[0]
    assert plan.in_place == [(1, 0)]


def test_in_place_refused_when_the_input_lives_on():
    steps = [
        MemStep(defs={1: 256}, uses=(0,), in_place=(1, 0)),
        MemStep(defs={2: 256}, uses=(0, 1)),
    ]
    plan = plan_memory(steps, preplaced={0: 256}, keep=[2])
    assert plan.offsets[1] != plan.offsets[0]
    assert plan.in_place == []


def test_in_place_refused_when_a_view_shares_the_block():
    steps = [
        MemStep(defs={}, uses=(0,), views={1: 0}),
        MemStep(defs={2: 256}, uses=(0,), in_place=(2, 0)),
        MemStep(defs={3: 256}, uses=(1, 2)),
    ]
    plan = plan_memory(steps, preplaced={0: 256}, keep=[3])
    assert plan.in_place == []
    assert_no_overlap(plan)


# -- the same property on real plans of random graphs -------------------------------------------

_UNARY = ["Relu", "Identity", "Neg", "Abs"]


@st.composite
def random_models(draw):
    nodes = []
    values = ["x"]
    shapes = {"x": (4, 8)}
    for i in range(draw(st.integers(1, 14))):
        op = draw(st.sampled_from(["Add", "Mul", "Relu", "Identity", "Reshape", "Concat"]))
        out = f"v{i}"
        a = draw(st.sampled_from(values))
        if op in ("Add", "Mul"):
            b = draw(st.sampled_from([v for v in values if shapes[v] == shapes[a]]))
            nodes.append(helper.make_node(op, [a, b], [out]))
            shapes[out] = shapes[a]
        elif op == "Reshape":
            nodes.append(helper.make_node(op, [a, "flat"], [out]))
            shapes[out] = (int(np.prod(shapes[a])),)
        elif op == "Concat":
            b = draw(st.sampled_from([v for v in values if len(shapes[v]) == len(shapes[a])]))
            nodes.append(helper.make_node(op, [a, b], [out], axis=0))
            shapes[out] = (shapes[a][0] + shapes[b][0], *shapes[a][1:])
        else:
            nodes.append(helper.make_node(op, [a], [out]))
            shapes[out] = shapes[a]
        values.append(out)
    outs = draw(st.lists(st.sampled_from(values[1:]), min_size=1, max_size=3, unique=True))
    graph = helper.make_graph(
        nodes,
        "random",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
        [onnx.numpy_helper.from_array(np.array([-1], np.int64), "flat")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), outs


@settings(max_examples=60, deadline=None)
@given(random_models())
def test_real_plans_never_overlap_and_match_numpy(case):
    pytest.importorskip("graphrt_ops_basic", reason="real plans need the ops-basic plugin")
    import graphrt

    model, outs = case
    sess = graphrt.Session(model, intra_op_threads=1, debug=True)
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    plan = sess.plan_for([x])
    assert_no_overlap(plan.memory)
    got = sess.run(None, {"x": x})
    # the same graph evaluated with numpy, value by value (debug mode poisons freed blocks, so
    # a stale read would show up as NaN here)
    env = {"x": x, "flat": np.array([-1])}
    for n in model.graph.node:
        a = [env[i] for i in n.input]
        if n.op_type == "Add":
            env[n.output[0]] = a[0] + a[1]
        elif n.op_type == "Mul":
            env[n.output[0]] = a[0] * a[1]
        elif n.op_type == "Relu":
            env[n.output[0]] = np.maximum(a[0], 0)
        elif n.op_type == "Reshape":
            env[n.output[0]] = a[0].reshape(-1)
        elif n.op_type == "Concat":
            env[n.output[0]] = np.concatenate(a, axis=0)
        else:
            env[n.output[0]] = a[0]
    for name, value in zip(outs, got):
        np.testing.assert_array_equal(value, env[name])
