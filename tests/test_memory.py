"""The slab planner: no two values that are live at the same time share bytes.

Property-based: hypothesis builds random schedules (values made, read, viewed, written in place,
scratch, assembled into a container) and random real graphs run through build_plan; every pair
of values whose live intervals overlap must occupy disjoint byte ranges, except a view and its
source, an explicit in-place pair at the step where one ends and the other begins, and a part
and its container (parts lie inside it, apart from each other, while it lives).
"""

from __future__ import annotations

import itertools

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
    loose: dict[int, int] = {}  # values made by a step, in no container yet: their sizes
    for _ in range(n_steps):
        uses = tuple(draw(st.lists(st.sampled_from(made), max_size=3, unique=True))) if made else ()
        kind = draw(st.sampled_from(["def", "def", "def", "view", "inplace", "assemble"]))
        if kind == "assemble" and loose:
            pick = st.lists(st.sampled_from(sorted(loose)), min_size=1, max_size=3, unique=True)
            parts = draw(pick)
            placed, at = {}, 0
            for v in parts:
                placed[v] = (next_id, at)
                at += loose.pop(v)
            steps.append(MemStep(defs={next_id: at}, uses=tuple(parts), parts=placed))
        elif kind == "view" and uses:
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
            loose[next_id] = size
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
    by_container: dict[int, list[int]] = {}
    for v, c in plan.parts.items():
        by_container.setdefault(c, []).append(v)
        assert plan.offsets[c] <= plan.offsets[v]
        assert plan.offsets[v] + plan.sizes[v] <= plan.offsets[c] + plan.sizes[c]
        assert plan.live[c][0] <= plan.live[v][0] and plan.live[v][1] <= plan.live[c][1]
    for members in by_container.values():
        spans = sorted((plan.offsets[v], plan.offsets[v] + plan.sizes[v]) for v in members)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans


@settings(max_examples=300, deadline=None)
@given(schedules())
def test_live_values_never_overlap(case):
    steps, preplaced, keep = case
    plan = plan_memory(steps, preplaced=preplaced, keep=keep)
    assert_no_overlap(plan)
    for v, off in plan.offsets.items():
        if plan.root.get(v, v) == v:  # parts (and their views) lie inside their container
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


def test_parts_are_placed_in_their_container_from_the_first_one_on():
    # 1 and 2 are made by steps 0 and 1, then assembled into 3 by step 2; 4 reads 3
    steps = [
        MemStep(defs={1: 100}, uses=(0,)),
        MemStep(defs={2: 60}, uses=(0,)),
        MemStep(defs={3: 160}, uses=(1, 2), parts={1: (3, 0), 2: (3, 100)}),
        MemStep(defs={4: 160}, uses=(3,)),
    ]
    plan = plan_memory(steps, preplaced={0: 64}, keep=[4])
    assert plan.parts == {1: 3, 2: 3}
    assert plan.offsets[1] == plan.offsets[3] and plan.offsets[2] == plan.offsets[3] + 100
    assert plan.live[3] == (0, 3)  # from its first part to its last reader
    assert plan.offsets[4] != plan.offsets[3]
    assert plan.total_bytes == 64 + 192 + 192  # input, container and 4: parts need no bytes
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


# -- Concat assembled in place ------------------------------------------------------------------


def _concat_model(case: str):
    """x (N, 4, 3) -> Relu a, Neg b -> Concat on axis 1 -> Abs y, with one twist per case."""
    n = 2 if case == "batch2" else 1
    parts = {"plain": ["a", "b"], "batch2": ["a", "b"], "graph_input": ["a", "x"],
             "graph_output": ["a", "b"], "twice": ["a", "a"], "viewed": ["a", "b"],
             "three": ["a", "b", "c"]}[case]  # fmt: skip
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Neg", ["x"], ["b"]),
        helper.make_node("Sigmoid", ["x"], ["c"]),
        helper.make_node("Concat", parts, ["cat"], axis=1),
        helper.make_node("Abs", ["cat"], ["y"]),
    ]
    outs = ["y", "b"] if case == "graph_output" else ["y"]
    if case == "viewed":
        nodes.append(helper.make_node("Reshape", ["a", "flat"], ["va"]))
        nodes.append(helper.make_node("Mul", ["va", "va"], ["sq"]))
        outs.append("sq")
    graph = helper.make_graph(
        nodes,
        case,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, 4, 3])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
        [onnx.numpy_helper.from_array(np.array([-1], np.int64), "flat")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(1).standard_normal((n, 4, 3)).astype(np.float32)
    env = {"x": x, "a": np.maximum(x, 0), "b": -x, "c": 1 / (1 + np.exp(-x))}
    want = [np.abs(np.concatenate([env[p] for p in parts], axis=1))]
    if case == "graph_output":
        want.append(-x)
    if case == "viewed":
        want.append(np.maximum(x, 0).reshape(-1) ** 2)
    return model, x, want


@pytest.mark.parametrize(
    "case, assembled",
    [
        ("plain", True),
        ("three", True),
        ("batch2", False),  # each input is two runs of the output, not one
        ("graph_input", False),  # nothing writes x: the caller's array is copied in
        ("graph_output", False),  # b is handed to the caller
        ("twice", False),  # one value cannot lie in two places
        ("viewed", False),  # a reshape of a reads a's own storage
    ],
)
def test_concat_inputs_written_in_place(case, assembled):
    """A Concat whose output is its inputs end to end (a batch of one, channels) is not run:
    each producer writes its part where the output keeps it."""
    pytest.importorskip("graphrt_ops_basic", reason="real plans need the ops-basic plugin")
    import graphrt
    from graphrt.explain import explain

    model, x, want = _concat_model(case)
    sess = graphrt.Session(model, intra_op_threads=1, debug=True)  # debug: freed blocks poisoned
    plan = sess.plan_for([x])
    kinds = [s.kind for s in plan.steps if s.node.info.op_type == "Concat"]
    assert kinds == (["assembled"] if assembled else ["static"])
    assert bool(plan.memory.parts) == assembled
    assert_no_overlap(plan.memory)
    for got, expected in zip(sess.run(None, {"x": x}), want):
        np.testing.assert_allclose(got, expected, rtol=1e-6)  # Sigmoid: not numpy's exp
    assert ("part of cat" in explain(plan)) == assembled
