"""If: run the chosen branch once.

When both branches plan statically for the input types and make outputs of the same types and
shapes (planned once per shape), the If is a static step: its outputs are placed in the slab,
and its bound step keeps one run state per branch and runs the chosen one's program directly.
Otherwise it is a dynamic step whose branch allocates its outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from graphrt.plugin import InferContext, KernelContext, NeedsRunTimeValues, NodeInfo, SessionError

from ._body import BodyKernel, scalar

#: ``ctx.prepared`` of a static If.
STATIC = "static branches"


class If(BodyKernel):
    infers_when_static = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.then_branch = self.body("then_branch")
        self.else_branch = self.body("else_branch")

    def infer(self, ctx: InferContext) -> None:
        n = ctx.num_inputs
        types = [(ctx.dtype(i), ctx.shape(i)) for i in range(n)]
        cond = types[0][1] if n else None
        if cond is None or any(d is None or d.hasobject for d, _ in types) or _size(cond) != 1:
            raise NeedsRunTimeValues(0)  # the run says what is wrong, or copes
        stated = None
        for branch in (self.then_branch, self.else_branch):
            try:
                plan = branch.plan_for_types(self.outer(branch, types))
            except SessionError as exc:
                if exc.kind == "cancelled":
                    raise
                raise NeedsRunTimeValues(0) from None  # only the branch taken must plan
            if not plan.static or plan.shape_checks is not None:
                raise NeedsRunTimeValues(0)
            outs = [plan.types.get(v) for v in plan.graph.output_ids]
            if None in outs or len(outs) != ctx.num_outputs or stated not in (None, outs):
                raise NeedsRunTimeValues(0)
            stated = outs
        for i, t in enumerate(stated or []):
            ctx.set_output(i, t.dtype, t.shape)
        ctx.prepared = STATIC

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        branch = self.then_branch if scalar(inputs[0], "cond", self) else self.else_branch
        results = branch.run(self.outer(branch, inputs), ctx)
        if ctx.prepared is not STATIC:
            self.emit(ctx, results)
            return
        for out, value in zip(outputs, results):
            if out is not None:
                out[...] = value

    def bind(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        run = super().bind(ctx, inputs, outputs)
        if ctx.prepared is not STATIC:
            return run
        then_call = self.then_branch.bound(self.outer(self.then_branch, inputs), ctx)
        else_call = self.else_branch.bound(self.outer(self.else_branch, inputs), ctx)
        if then_call is None or else_call is None:
            return run
        cond = inputs[0].reshape(())
        placed = [(i, out) for i, out in enumerate(outputs) if out is not None]

        def step() -> None:
            if ctx.shape_bindings is not None:  # the branches check shapes: their own plans
                run()
                return
            results = then_call() if cond.item() else else_call()
            for i, out in placed:
                out[...] = results[i]

        return step


def _size(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
