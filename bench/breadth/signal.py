"""Signal family: DFT, STFT, the windows, MelWeightMatrix, TfIdfVectorizer, ImageDecoder.

Each operator's largest backend case with its inputs scaled up about 100x in elements, at an
opset onnxruntime loads.  The windows' size and MelWeightMatrix's scalars are graph inputs, so
both runtimes compute the table in every run (a constant size would be folded away).

The DFT cases show "agree NO": onnxruntime transforms a length of 100 (not a power of 2) by
the direct sum in float32, off by up to 7e-4 on bins of magnitude 40 (graphrt's pocketfft: 2e-6,
both against the float64 transform), beyond the table's atol of 1e-4.
"""

from __future__ import annotations

import io

import numpy as np
from onnx import TensorProto, helper

from . import BenchCase

_TYPES = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.uint8): TensorProto.UINT8,
}


def _case(name, op, feed, opset, inits=(), out_type=TensorProto.FLOAT, inputs=None, **attrs):
    names = list(feed) + [t.name for t in inits] if inputs is None else inputs
    node = helper.make_node(op, names, ["y"], **attrs)
    decls = [
        helper.make_tensor_value_info(k, _TYPES[v.dtype], list(v.shape)) for k, v in feed.items()
    ]
    out = [helper.make_tensor_value_info("y", out_type, None)]
    graph = helper.make_graph([node], op, decls, out, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    return BenchCase(name, model, feed)


def _scalar(name: str, value: int) -> TensorProto:
    return helper.make_tensor(name, TensorProto.INT64, [], [value])


def _jpeg(rng: np.random.Generator, size: int) -> np.ndarray | None:
    try:
        from PIL import Image
    except ImportError:
        return None
    tiles = rng.integers(0, 256, (size // 5 + 1, size // 5 + 1, 3), dtype=np.uint8)
    image = np.repeat(np.repeat(tiles, 5, 0), 5, 1)[:size, :size]
    with io.BytesIO() as f:
        Image.fromarray(image).save(f, format="jpeg")
        return np.frombuffer(f.getvalue(), np.uint8).copy()


def cases() -> list[BenchCase]:
    rng = np.random.default_rng(0)
    f32 = np.float32
    out: list[BenchCase] = []
    # DFT: test_dft* is 1x10x10x{1,2} along axis 1
    xc = rng.standard_normal((1, 100, 100, 2)).astype(f32)
    xr = rng.standard_normal((1, 100, 100, 1)).astype(f32)
    out.append(_case("DFT: complex 1x100x100, axis 1", "DFT", {"x": xc}, 17, axis=1))
    out.append(_case("DFT: complex 1x100x100, axis 2", "DFT", {"x": xc}, 17, axis=2))
    out.append(_case("DFT: inverse 1x100x100, axis 1", "DFT", {"x": xc}, 17, axis=1, inverse=1))
    out.append(_case("DFT: rfft 1x100x100, axis 1", "DFT", {"x": xr}, 17, axis=1, onesided=1))
    # STFT: test_stft* is a 1x128 signal, frames of 16 every 8 samples
    signal = rng.standard_normal((1, 12800, 1)).astype(f32)
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(16) / 16)).astype(f32)
    out.append(
        _case(
            "STFT: 1x12800 signal, Hann window 16, step 8",
            "STFT",
            {"signal": signal},
            17,
            [_scalar("step", 8), helper.make_tensor("window", TensorProto.FLOAT, [16], window)],
        )
    )
    out.append(
        _case(
            "STFT: 1x12800 signal, frame_length 16, step 8",
            "STFT",
            {"signal": signal},
            17,
            [_scalar("step", 8), _scalar("length", 16)],
            inputs=["signal", "step", "", "length"],
        )
    )
    # windows: test_*window* are of size 10
    size = {"size": np.array(1000, np.int64)}
    for op in ("HannWindow", "HammingWindow", "BlackmanWindow"):
        out.append(_case(f"{op}: size 1000 (run-time input)", op, size, 17))
    # MelWeightMatrix: test_melweightmatrix is 8 mel bins of a 16-point DFT (9 x 8)
    mel = {
        "bins": np.array(80, np.int64),
        "length": np.array(160, np.int64),
        "rate": np.array(16000, np.int64),
        "low": np.array(20.0, f32),
        "high": np.array(8000.0, f32),
    }
    out.append(_case("MelWeightMatrix: 81 x 80 (run-time inputs)", "MelWeightMatrix", mel, 17))
    # TfIdfVectorizer: test_tfidfvectorizer_* are 2x6 (or 12) int32 tokens, skips up to 5
    tokens = rng.integers(0, 10, (20, 60)).astype(np.int32)
    for mode in ("TF", "TFIDF"):
        out.append(
            _case(
                f"TfIdfVectorizer: {mode}, 20x60 tokens, 1- and 2-grams, skip 5",
                "TfIdfVectorizer",
                {"x": tokens},
                9,
                mode=mode,
                min_gram_length=1,
                max_gram_length=2,
                max_skip_count=5,
                ngram_counts=[0, 4],
                ngram_indexes=list(range(7)),
                pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7],
                weights=[0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5] if mode != "TF" else None,
            )
        )
    # ImageDecoder: test_image_decoder_* are 32x32 images (onnxruntime may not have it)
    data = _jpeg(rng, 320)
    if data is not None:
        out.append(
            _case(
                "ImageDecoder: 320x320 JPEG, RGB",
                "ImageDecoder",
                {"data": data},
                20,
                out_type=TensorProto.UINT8,
                pixel_format="RGB",
            )
        )
    return out
