"""QLinearConcat: inputs (Y_scale, Y_zero_point, then X, X_scale, X_zero_point per tensor).

An input quantized with the output's own scale and zero point is copied; any other goes
through a 256-entry table (dequantized, divided by Y_scale, rounded half to even, offset),
onnxruntime's method.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._common import check_8bit
from .lookup import build_table


def _same(a: Any, b: Any) -> bool:
    return np.array_equal(np.asarray(a).reshape(-1), np.asarray(b).reshape(-1))


class QLinearConcat(OpKernel):
    supports_exact = True  # copies, or a table of one subtract, multiply and divide each

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        if "axis" not in node.attrs:
            raise self.fail("attribute axis is required")
        self.axis = int(node.attrs["axis"])

    def infer(self, ctx: InferContext) -> None:
        n = ctx.num_inputs - 2
        if n < 3 or n % 3:
            raise self.fail(
                f"expected Y_scale, Y_zero_point and (X, scale, zero) triples, got {n + 2} inputs"
            )
        xs = range(2, ctx.num_inputs, 3)
        t = check_8bit(self, ctx, 1, *xs, *(i + 2 for i in xs))
        shapes = [ctx.shape(i) for i in xs]
        rank = len(shapes[0])
        if not -rank <= self.axis < rank:
            raise self.fail(f"axis {self.axis} is out of range for rank {rank}", "invalid_input")
        axis = self.axis % rank
        for s in shapes:
            if len(s) != rank or any(
                a != b for k, (a, b) in enumerate(zip(s, shapes[0])) if k != axis
            ):
                raise self.fail(
                    f"shapes {[list(s) for s in shapes]} differ off axis {axis}", "invalid_input"
                )
        out = list(shapes[0])
        out[axis] = sum(s[axis] for s in shapes)
        ctx.set_output(0, t, out)
        known = [ctx.known_value(i) for i in range(ctx.num_inputs)]
        tables: list[Any] = []
        for i in xs:
            ys, yz, xsc, xz = known[0], known[1], known[i + 1], known[i + 2]
            if any(v is None for v in (ys, yz, xsc, xz)):
                tables.append(None)  # per run
            elif _same(ys, xsc) and _same(yz, xz):
                tables.append(False)  # a copy
            else:
                tables.append(build_table(t, xsc, xz, ys, yz, lambda v: v))
        ctx.prepared = (axis, t, tables)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        axis, t, tables = ctx.prepared
        y = outputs[0]
        start = 0
        for k, i in enumerate(range(2, len(inputs), 3)):
            x = inputs[i]
            part = y[(slice(None),) * axis + (slice(start, start + x.shape[axis]),)]
            start += x.shape[axis]
            table = tables[k]
            if table is None:
                ys, yz, xsc, xz = inputs[0], inputs[1], inputs[i + 1], inputs[i + 2]
                same = _same(ys, xsc) and _same(yz, xz)
                table = False if same else build_table(t, xsc, xz, ys, yz, lambda v: v)
            if table is False:
                np.copyto(part, x)
            else:
                part[...] = np.take(table, x.view(np.uint8))
