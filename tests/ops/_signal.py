"""What the signal family's tests share (test_signal.py, test_signal_family.py): the kernels,
a node evaluated as a plan would, one-node models, the ONNX complex layout, the windows'
coefficients, TfIdfVectorizer's attributes, and test signals."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from graphrt.attrs import node_info
from graphrt.errors import SessionError
from graphrt.kernel import evaluate_node
from graphrt_ops_basic import windows
from graphrt_ops_basic.table import OPERATORS
from tests._models import init, make_model, tensor

OPS = {
    "DFT",
    "STFT",
    "HannWindow",
    "HammingWindow",
    "BlackmanWindow",
    "MelWeightMatrix",
    "TfIdfVectorizer",
    "ImageDecoder",
}
HAS_OPSET_20 = onnx.defs.onnx_opset_version() >= 20


def factory(op: str, opset: int):
    found = [d for d in OPERATORS if d.op_type == op and d.domain == "" and d.covers(opset)]
    assert len(found) == 1, (op, opset)
    return found[0].factory


def evaluate(op: str, *inputs, opset: int = 17, exact: bool = False, **attrs):
    """One node evaluated the way a plan does (infer, then run); "" for absent inputs."""
    names = ["" if x is None else f"i{k}" for k, x in enumerate(inputs)]
    while names and names[-1] == "":
        names.pop()
    node = helper.make_node(op, names, ["o"], **attrs)
    kernel = factory(op, opset)(node_info(node, opset))
    args = [None if x is None else np.asarray(x) for x in inputs[: len(names)]]
    return evaluate_node(kernel, args, 1, exact=exact)[0]


def kind_of(fn) -> str:
    with pytest.raises(SessionError) as err:
        fn()
    return err.value.kind


def to_complex(x: np.ndarray) -> np.ndarray:
    return x[..., 0] + 1j * x[..., 1] if x.shape[-1] == 2 else x[..., 0].astype(np.complex128)


def dft_inputs(rng, shape, parts, dtype=np.float32):
    return rng.standard_normal(tuple(shape) + (parts,)).astype(dtype)


def mel_inputs(num, length, rate, lower, upper, ftype=np.float32):
    return (
        np.array(num),
        np.array(length),
        np.array(rate),
        np.array(lower, ftype),
        np.array(upper, ftype),
    )


COEFFS = {
    "HannWindow": (0.5, 0.5, 0.0),
    "HammingWindow": (25 / 46, 21 / 46, 0.0),
    "BlackmanWindow": (0.42, 0.5, 0.08),
}


#: Unigrams 1 and 2 and the bigram (1, 2), counted into columns 0, 1, 2.
TFIDF = dict(
    mode="TF",
    min_gram_length=1,
    max_gram_length=2,
    max_skip_count=0,
    ngram_counts=[0, 2],
    ngram_indexes=[0, 1, 2],
    pool_int64s=[1, 2, 1, 2],
)


def one_node(op, feeds, inits=(), opset=17, order=None, **attrs):
    """A model of one node named "n"; ``order`` lists its inputs ("" for an absent one)."""
    names = order or list(feeds) + [name for name, _ in inits]
    node = helper.make_node(op, names, ["y"], name="n", **attrs)
    decls = [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for k, v in feeds.items()
    ]
    y = tensor("y", TensorProto.UNDEFINED)
    return make_model([node], decls, [y], [init(k, v) for k, v in inits], opset=opset)


F32 = np.float32
RNG = np.random.default_rng(11)
WAVES = RNG.standard_normal((2, 16, 8, 2)).astype(F32)
SOUND = RNG.standard_normal((2, 96, 1)).astype(F32)
HANN = windows.window((0.5, 0.5, 0.0), 16, True).astype(F32)
