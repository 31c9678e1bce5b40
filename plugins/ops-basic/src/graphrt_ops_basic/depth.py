"""SpaceToDepth and DepthToSpace: blocks of pixels moved to channels and back.

Both are a reshape to six axes, a transpose and a reshape back, so the kernel is one
``np.copyto`` from a transposed six-axis view of the input into a six-axis view of the output,
views built once per run state (a ``BoundStep``).  ``DCR`` orders the moved channels block row,
block column, then depth; ``CRD`` depth first.  Pure data movement: exact.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo

from ._steps import BoundStep
from ._values import reshaped

#: (operator, mode) -> (the input's six axes, the transpose that gives the output's six axes);
#: b is the block size, c h w the channels, height and width of the smaller side.
_SPLIT = {
    # DepthToSpace: x (n, c, h, w) -> y (n, c / b^2, h * b, w * b)
    ("DepthToSpace", "DCR"): ("n b b c h w", (0, 3, 4, 1, 5, 2)),
    ("DepthToSpace", "CRD"): ("n c b b h w", (0, 1, 4, 2, 5, 3)),
    # SpaceToDepth: x (n, c, h, w) -> y (n, c * b^2, h / b, w / b)
    ("SpaceToDepth", "DCR"): ("n c h b w b", (0, 3, 5, 1, 2, 4)),
    ("SpaceToDepth", "CRD"): ("n c h b w b", (0, 1, 3, 5, 2, 4)),
}


class _Block(BoundStep):
    """Shared checks and the copy; subclasses give the output shape."""

    supports_exact = True
    #: The opset from which the ``mode`` attribute exists.
    mode_since: ClassVar[int]
    #: DepthToSpace (channels to pixels) or SpaceToDepth.
    to_space: ClassVar[bool]

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.block = node.attr("blocksize")
        if not isinstance(self.block, int) or self.block < 1:
            raise self.fail(f"blocksize must be a positive integer, got {self.block!r}")
        mode = node.attr("mode", "DCR") if node.opset >= self.mode_since else "DCR"
        if mode not in ("DCR", "CRD"):
            raise self.fail(f"mode must be DCR or CRD, got {mode!r}")
        self.split, self.perm = _SPLIT[(node.op_type, mode)]

    def output_shape(self, n: int, c: int, h: int, w: int) -> tuple[int, int, int, int]:
        raise NotImplementedError

    def infer(self, ctx: InferContext) -> None:
        shape = ctx.shape(0)
        if len(shape) != 4:
            raise self.fail(f"input must be [N, C, H, W], got {list(shape)}", "invalid_input")
        out = self.output_shape(*shape)
        ctx.set_output(0, ctx.dtype(0), out)
        b = self.block
        space, depth = (out, shape) if self.to_space else (shape, out)
        # c: the channels of the spatial side; h, w: the pixels of the channel side
        sizes = {"n": shape[0], "b": b, "c": space[1], "h": depth[2], "w": depth[3]}
        split = tuple(sizes[a] for a in self.split.split())
        ctx.prepared = (split, tuple(split[p] for p in self.perm))

    def step(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]):
        split, moved = ctx.prepared
        view = inputs[0].reshape(split).transpose(self.perm)
        return functools.partial(np.copyto, reshaped(outputs[0], moved), view)


class DepthToSpace(_Block):
    """(N, C, H, W) -> (N, C / b^2, H * b, W * b); ``mode`` from opset 11."""

    mode_since = 11
    to_space = True

    def output_shape(self, n: int, c: int, h: int, w: int) -> tuple[int, int, int, int]:
        b = self.block
        if c % (b * b):
            message = f"channels {c} are not a multiple of blocksize^2 = {b * b}"
            raise self.fail(message, "invalid_input")
        return n, c // (b * b), h * b, w * b


class SpaceToDepth(_Block):
    """(N, C, H, W) -> (N, C * b^2, H / b, W / b); ``mode`` from opset 28."""

    mode_since = 28
    to_space = False

    def output_shape(self, n: int, c: int, h: int, w: int) -> tuple[int, int, int, int]:
        b = self.block
        if h % b or w % b:
            message = f"height {h} and width {w} must be multiples of blocksize {b}"
            raise self.fail(message, "invalid_input")
        return n, c * b * b, h // b, w // b
