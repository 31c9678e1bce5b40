"""NonMaxSuppression on the native kernel, falling back to the table's numpy kernel.

(Not ``nms.py``: importing a submodule of that name would hide ``graphrt_ops_simd.nms``, the
native entry point.)

ops-basic's kernel orders every (batch, class) row with one sort and settles the greedy
selection in blocks of numpy calls, tens of calls even for a handful of boxes; the native
kernel (src/native/nms.cpp) runs the greedy loop itself, ordering only as many candidates as
the limit needs and testing each against the selected boxes sixteen at a time on the path's
vectors.  It computes the same IoUs (the same float32 operations in the same order) and selects
the same boxes on every path, in both modes, for float32 boxes; other types, and a table whose
NonMaxSuppression is not ops-basic's, run the numpy kernel.  The inputs are checked by
ops-basic's own code (the same errors, word for word).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import KernelContext, NodeInfo, OpKernel
from graphrt_ops_basic import nms as basic_nms

from . import _native
from .kernels import NumpyFactory

F32 = np.dtype(np.float32)


class NonMaxSuppression(OpKernel):
    supports_exact = True  # the selection is ops-basic's, exact on every path
    outputs_data_dependent = True

    def __init__(self, node: NodeInfo, numpy_factory: NumpyFactory, isa: str) -> None:
        super().__init__(node)
        self.base = numpy_factory(node)
        self.isa = isa
        self.native = isinstance(self.base, basic_nms.NonMaxSuppression)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        if not self.native:
            return self.base.run(ctx, inputs, outputs)
        boxes, scores, limit, iou, floor = self.base.arguments(inputs)
        if boxes.dtype != F32:
            return self.base.run(ctx, inputs, outputs)
        if not boxes.flags.aligned:  # the native code reads whole floats
            boxes = np.require(boxes, requirements="A")
        if not scores.flags.aligned:
            scores = np.require(scores, requirements="A")
        threads = ctx.threads
        floor = None if floor is None else float(floor)
        selected = _native.nms(
            boxes, scores, limit, float(iou), floor, self.base.center, self.isa, threads
        )
        out = ctx.allocate_output(0, np.int64, selected.shape)
        np.copyto(out, selected)
