"""What the training-family tests share (test_training.py, test_training_contract.py): one-node
models (the node is named n1), sessions, the losses' spec formulas, optimizer runs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import graphrt
from graphrt.errors import SessionError
from tests._models import make_model, tensor

TRAINING = "ai.onnx.preview.training"
F32, F64, I64 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64
#: Opset 22 (the newest forms: bfloat16 generators, NegativeLogLikelihoodLoss-22) where the
#: installed onnx knows it; older onnx (the numpy1 env) tests its newest opset instead.
OPSET = min(22, onnx.defs.onnx_opset_version())


def one_node(op, inputs, outputs, opset=OPSET, domain="", **attrs):
    """A one-node model whose graph inputs are the (name, array) pairs of ``inputs``."""
    node = helper.make_node(op, [n for n, _ in inputs], outputs, "n1", domain=domain, **attrs)
    decls = [tensor(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)) for n, v in inputs]
    outs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs if o]
    domains = (domain,) if domain else ()
    return make_model([node], decls, outs, opset=opset, domains=domains)


def run(model, inputs, **options):
    return graphrt.Session(model, **options).run(None, dict(inputs))


def kind_of(fn) -> SessionError:
    with pytest.raises(SessionError) as err:
        fn()
    return err.value


def spec_nll(x, target, weight=None, reduction="mean", ignore_index=None):
    """loss[n, d] = -x[n, target[n, d], d] * weight[target] (0 where ignored), then reduced;
    mean divides by the sum of the weights of the samples not ignored."""
    n, c = x.shape[:2]
    x3 = x.reshape(n, c, -1).astype(np.float64)
    t = target.reshape(n, -1).astype(np.int64)
    ignored = np.zeros(t.shape, bool) if ignore_index is None else t == ignore_index
    safe = np.where(ignored, 0, t)
    picked = np.take_along_axis(x3, safe[:, None, :], axis=1)[:, 0, :]
    w = np.ones(c) if weight is None else weight.astype(np.float64)
    ws = np.where(ignored, 0.0, w[safe])
    loss = np.where(ignored, 0.0, -picked * ws)
    if reduction == "none":
        return loss.reshape(target.shape).astype(x.dtype)
    if reduction == "sum":
        return np.array(loss.sum(), x.dtype)
    with np.errstate(all="ignore"):
        return np.array(loss.sum() / ws.sum(), x.dtype)


def spec_log_softmax(x):
    x = x.astype(np.float64)
    shifted = x - x.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def loss_case(shape, dtype=np.float32, ignore=None, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(dtype)
    target = rng.integers(0, shape[1], (shape[0], *shape[2:])).astype(np.int64)
    if ignore is not None:
        target.reshape(-1)[::3] = ignore
    weight = rng.random(shape[1]).astype(dtype) + 0.5
    return x, target, weight


def f32(v):
    """An attribute's value as the model holds it (a float32)."""
    return float(np.float32(v))


def optimizer_run(op, groups, r, t, dtype=np.float64, **attrs):
    """Run ``op`` on len(groups[0]) tensors: groups = [Xs, Gs, states...]."""
    inputs = [("R", np.array(r, dtype)), ("T", np.array(t, np.int64))]
    for j, group in enumerate(groups):
        for k, a in enumerate(group):
            inputs.append((f"in{j}_{k}", np.asarray(a, dtype)))
    n_out = len(groups[0]) * (len(groups) - 1)
    outs = [f"o{k}" for k in range(n_out)]
    model = one_node(op, inputs, outs, opset=17, domain=TRAINING, **attrs)
    return run(model, inputs), model, dict(inputs)


def generator(op, inputs=(), opset=OPSET, **attrs):
    node = helper.make_node(op, [n for n, _ in inputs], ["y"], "n1", **attrs)
    decls = [tensor(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)) for n, v in inputs]
    out = helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)
    return make_model([node], decls, [out], opset=opset)
