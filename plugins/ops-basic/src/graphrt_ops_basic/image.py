"""ImageDecoder: an encoded image (BMP, JPEG, JPEG 2000, TIFF, PNG, WebP, PNM bytes) to
height x width x channels uint8, through Pillow.

Pillow is an optional extra (``pip install graphrt-ops-basic[image]``): without it, a session
whose model has an ImageDecoder fails when it is created, with ``unsupported_operator`` naming
the extra, rather than at the first run.  The image is decoded by Pillow's own decoders (the
backend cases' expected pixels come from them): RGB is the decoded image in RGB mode (other
modes converted by Pillow), BGR the same with the channels reversed, Grayscale Pillow's
``convert("L")`` of the decoded image (ITU-R 601-2 luma, integer arithmetic).  A stream Pillow
cannot decode gives an empty ``[0, 0, channels]`` image, as the operator's text says.

The output's shape is the image's, known only after decoding (``outputs_data_dependent``).
Exact: decoding is integer arithmetic, the same for one Pillow build on every machine (a
different Pillow or libjpeg version may decode JPEG differently).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import KernelContext, NodeInfo, OpKernel, SessionError

FORMATS = {"RGB": 3, "BGR": 3, "Grayscale": 1}
EXTRA = "pip install graphrt-ops-basic[image]"


def pillow() -> Any:
    """PIL.Image, or None when Pillow is not installed."""
    try:
        from PIL import Image
    except ImportError:
        return None
    return Image


class ImageDecoder(OpKernel):
    """Decodes ``encoded_stream`` (uint8 bytes) into ``[H, W, 3]`` (RGB, BGR) or ``[H, W, 1]``."""

    supports_exact = True
    outputs_data_dependent = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.format = node.attr("pixel_format", "RGB")
        if self.format not in FORMATS:
            raise self.fail(
                f"pixel_format must be one of {', '.join(FORMATS)}, got {self.format!r}"
            )
        self.image = pillow()
        if self.image is None:
            raise SessionError(
                "unsupported_operator",
                f"{node.label}: ImageDecoder needs Pillow, which is not installed; "
                f"`{EXTRA}` installs it",
                node=node.name,
                operators=[f"ImageDecoder (opset {node.opset})"],
            )

    def decode(self, data: bytes) -> np.ndarray:
        """The decoded pixels, or an empty image when Pillow cannot decode ``data``."""
        channels = FORMATS[self.format]
        try:
            with self.image.open(io.BytesIO(data)) as img:
                if self.format == "Grayscale":
                    return np.asarray(img.convert("L"))[:, :, None]
                pixels = np.asarray(img if img.mode == "RGB" else img.convert("RGB"))
        except Exception:  # "can't decode for any reason": Pillow raises many kinds
            return np.zeros((0, 0, channels), np.uint8)
        return pixels[:, :, ::-1] if self.format == "BGR" else pixels

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        data = inputs[0]
        if data.dtype != np.uint8:
            raise self.fail(f"encoded_stream must be uint8, got {data.dtype}")
        if data.ndim != 1:
            message = f"encoded_stream must be 1-D bytes, got shape {list(data.shape)}"
            raise self.fail(message, "invalid_input")
        pixels = self.decode(data.tobytes())
        out = ctx.allocate_output(0, np.uint8, pixels.shape)
        np.copyto(out, pixels)
