"""QDQ products run as integer kernels: onnxruntime's CPU fusion of quantized QDQ models.

DequantizeLinear(x) -> Conv(W [, B])       -> QuantizeLinear  =>  QLinearConv
DequantizeLinear(a) -> MatMul(B)           -> QuantizeLinear  =>  QLinearMatMul
DequantizeLinear(a) -> Gemm(B [, C])       -> QuantizeLinear  =>  com.microsoft QGemm

onnxruntime runs these patterns as integer products requantized once (``x_scale * w_scale /
y_scale``); evaluating the float graph instead rounds the dequantized operands, the float sums
and the quotient by y_scale separately, and lands one unit away wherever a value sits near a
rounding tie.  The fused node computes what onnxruntime computes.

What must hold (otherwise the nodes stay as they are, with their float semantics):

* the activation's DequantizeLinear and the QuantizeLinear have constant scalar scales and
  constant int8/uint8 zero points (the zero point's type is the only type a pass can see), no
  ``block_size``, no ``output_dtype``, no ``saturate=0``; the product's output is read by the
  QuantizeLinear only and is no graph output;
* the weight is a DequantizeLinear of constant int8/uint8 codes with constant scale and zero
  point, per tensor or per output channel (Conv: axis 0; MatMul: the last axis of a 2-D B;
  Gemm: N's axis) — the pass runs before constant folding (order 5), so the quantized weights
  are still there to read;
* a bias (Conv's B, Gemm's C with beta 1) is a DequantizeLinear of int32 codes of scale
  ``x_scale * w_scale`` (Gemm: times alpha) and zero point 0, or a float constant those codes
  reproduce within one float32 rounding of each product.

Not bit-preserving (the fused node rounds once where the graph rounded several times), so
exact mode skips it; it runs at level ``all`` before constant folding and ops-basic's product
fusions (which would turn the Conv into a FusedConv).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from graphrt.plugin import GraphPass, PassContext, PassGraph, PassNode

F32 = np.float32
INT8 = (np.dtype(np.int8), np.dtype(np.uint8))
MS = "com.microsoft"


@dataclasses.dataclass
class _Quant:
    """Codes (a value name or a constant), scale and zero point of a quantized operand."""

    codes: str | np.ndarray
    scale: np.ndarray
    zero: np.ndarray
    per_axis: bool = False


def _is(node: PassNode | None, op: str) -> bool:
    return node is not None and node.op_type == op and node.info.domain == ""


def _const(graph: PassGraph, name: str) -> np.ndarray | None:
    value = graph.constants.get(name) if name else None
    return value if isinstance(value, np.ndarray) else None


def _sole_reader(graph: PassGraph, name: str) -> PassNode | None:
    if not name or graph.is_graph_output(name):
        return None
    readers = graph.consumers(name)
    return readers[0] if len(readers) == 1 else None


def _plain(node: PassNode) -> bool:
    """No block_size, no output_dtype, saturating: the forms the fused kernels follow."""
    a = node.info.attrs
    return not a.get("block_size", 0) and not a.get("output_dtype", 0) and a.get("saturate", 1)


def _tensor_params(graph: PassGraph, node: PassNode) -> tuple[np.ndarray, np.ndarray] | None:
    """Constant scalar scale and int8/uint8 zero point of a Q or DQ node."""
    if len(node.inputs) < 3 or not _plain(node):
        return None
    s, z = _const(graph, node.inputs[1]), _const(graph, node.inputs[2])
    if s is None or z is None or s.size != 1 or z.size != 1 or s.dtype != np.float32:
        return None
    if z.dtype not in INT8:
        return None
    return s.reshape(()), z.reshape(())


def _activation(graph: PassGraph, name: str) -> _Quant | None:
    """The per-tensor quantized run-time value a DequantizeLinear makes ``name`` from."""
    dq = graph.producer(name)
    if not _is(dq, "DequantizeLinear") or _const(graph, dq.inputs[0]) is not None:
        return None
    params = _tensor_params(graph, dq)
    return None if params is None else _Quant(dq.inputs[0], *params)


def _dq_weight(graph: PassGraph, name: str, rank: int, axis: int) -> _Quant | None:
    """A weight still written by a DequantizeLinear (per tensor or along ``axis``)."""
    dq = graph.producer(name)
    if not _is(dq, "DequantizeLinear") or len(dq.inputs) < 3 or not _plain(dq):
        return None
    s, z = _const(graph, dq.inputs[1]), _const(graph, dq.inputs[2])
    if s is None or z is None or z.dtype not in INT8 or s.dtype != np.float32:
        return None
    if s.size == 1 and z.size == 1:
        return _Quant(dq.inputs[0], s.reshape(()), z.reshape(()))
    q = _const(graph, dq.inputs[0])  # per axis: constant codes only (their rank is known)
    if q is None or q.ndim != rank or s.ndim != 1 or z.shape != s.shape:
        return None
    if s.shape[0] != q.shape[axis] or int(dq.info.attrs.get("axis", 1)) % rank != axis % rank:
        return None
    return _Quant(dq.inputs[0], s, z, per_axis=True)


def _bias(graph: PassGraph, name: str, scale: np.ndarray, n: int) -> np.ndarray | None:
    """The int32 codes of a bias [n] of scale ``scale`` (one value or [n]): a DequantizeLinear
    of int32 codes with zero point 0 and exactly that scale (what onnxruntime's quantizer
    writes), or a float constant that such codes give back within one rounding of a product."""
    dq = graph.producer(name)
    if _is(dq, "DequantizeLinear"):
        codes, s = _const(graph, dq.inputs[0]), _const(graph, dq.inputs[1])
        z = _const(graph, dq.inputs[2]) if len(dq.inputs) > 2 and dq.inputs[2] else None
        if codes is None or s is None or codes.dtype != np.int32 or codes.shape != (n,):
            return None
        if z is not None and np.any(z != 0):
            return None
        if s.dtype != np.float32 or s.size not in (1, n):
            return None
        if np.array_equal(np.broadcast_to(s, (n,)), np.broadcast_to(scale, (n,))):
            return codes
        # another scale (a Gemm's alpha left out of it): the float bias it dequantizes to
        b = (codes.astype(F32) * s.reshape(-1)).astype(F32)
    else:
        b = _const(graph, name)
    if b is None or b.dtype != np.float32 or b.shape != (n,):
        return None
    q = np.rint(b.astype(np.float64) / scale.astype(np.float64))
    if np.abs(q).max(initial=0) >= 2**31 - 1:
        return None
    back = (q * scale.astype(np.float64)).astype(F32)
    ulp = np.spacing(np.abs(b)).astype(np.float64)
    if not np.all(np.abs(back.astype(np.float64) - b) <= 2 * ulp):
        return None
    return q.astype(np.int32)


class FuseQDQ(GraphPass):
    name = "fuse_qdq_products"
    min_level = "all"
    preserves_bits = False
    order = 5  # before constant folding (10), which dequantizes the weights into floats

    def run(self, graph: PassGraph, ctx: PassContext) -> bool:
        changed = False
        for node in list(graph.nodes):
            if node.info.domain != "" or node.op_type not in ("Conv", "MatMul", "Gemm"):
                continue
            if node not in graph.nodes:
                continue
            found = self._fuse(graph, ctx, node)
            if found is not None:
                old, new = found
                graph.replace(old, new)
                changed = True
        return changed

    def _fuse(self, graph: PassGraph, ctx: PassContext, node: PassNode) -> Any:
        if len(node.outputs) != 1:
            return None
        q = _sole_reader(graph, node.outputs[0])
        if not _is(q, "QuantizeLinear") or q.inputs[0] != node.outputs[0]:
            return None
        out = _tensor_params(graph, q)
        x = _activation(graph, node.inputs[0]) if node.inputs else None
        if out is None or x is None:
            return None
        if node.op_type == "Conv":
            return self._conv(graph, ctx, node, q, x, out)
        if node.op_type == "MatMul":
            return self._matmul(graph, ctx, node, q, x, out)
        return self._gemm(graph, ctx, node, q, x, out)

    def _make(
        self,
        graph: PassGraph,
        ctx: PassContext,
        anchor: PassNode,
        q: PassNode,
        domain: str,
        op_type: str,
        x: _Quant,
        w: _Quant,
        out: tuple[np.ndarray, np.ndarray],
        attrs: dict[str, Any],
        bias: np.ndarray | None,
        bias_last: bool = True,
    ) -> Any:
        op_def = ctx.lookup(domain, op_type)
        if op_def is None:
            return None
        hint = anchor.info.name or anchor.outputs[0]

        def name(v: str | np.ndarray, what: str) -> str:
            return v if isinstance(v, str) else graph.add_constant(f"{hint}_{what}", v)

        inputs = [
            x.codes, name(x.scale, "x_scale"), name(x.zero, "x_zero_point"),
            name(w.codes, "w"), name(w.scale, "w_scale"), name(w.zero, "w_zero_point"),
        ]  # fmt: skip
        tail = [name(out[0], "y_scale"), name(out[1], "y_zero_point")]
        b = [] if bias is None else [name(bias, "bias")]
        inputs += (tail + b) if bias_last else (b if b else [""]) + tail
        info = dataclasses.replace(
            anchor.info,
            op_type=op_type,
            domain=domain,
            opset=anchor.info.opset if domain == "" else 1,
            attrs=attrs,
            inputs=tuple(inputs),
            outputs=tuple(q.outputs),
            proto=None,
        )
        return [anchor, q], PassNode(info, op_def, list(inputs), list(q.outputs))

    def _conv(self, graph, ctx, node, q, x, out) -> Any:
        w_const = _const(graph, node.inputs[1])
        dq = graph.producer(node.inputs[1])
        rank = w_const.ndim if w_const is not None else None
        if rank is None and dq is not None and _const(graph, dq.inputs[0]) is not None:
            rank = _const(graph, dq.inputs[0]).ndim
        if rank is None or rank < 3:
            return None
        w = _dq_weight(graph, node.inputs[1], rank, 0)
        if w is None:
            return None
        bias = None
        if len(node.inputs) > 2 and node.inputs[2]:
            codes = w.codes if isinstance(w.codes, np.ndarray) else _const(graph, w.codes)
            if codes is None:
                return None
            bias = _bias(graph, node.inputs[2], (x.scale * w.scale).astype(F32), codes.shape[0])
            if bias is None:
                return None
        return self._make(graph, ctx, node, q, "", "QLinearConv", x, w, out, node.info.attrs, bias)

    def _matmul(self, graph, ctx, node, q, x, out) -> Any:
        w = _dq_weight(graph, node.inputs[1], 2, 1)  # also a run-time B dequantized per tensor
        if w is None:
            return None
        return self._make(graph, ctx, node, q, "", "QLinearMatMul", x, w, out, {}, None)

    def _gemm(self, graph, ctx, node, q, x, out) -> Any:
        a = node.info.attrs
        alpha = float(a.get("alpha", 1.0))
        trans_b = int(a.get("transB", 0))
        w = _dq_weight(graph, node.inputs[1], 2, 0 if trans_b else 1)
        if w is None:
            return None
        bias = None
        if len(node.inputs) > 2 and node.inputs[2]:
            if float(a.get("beta", 1.0)) != 1.0:
                return None
            codes = w.codes if isinstance(w.codes, np.ndarray) else _const(graph, w.codes)
            if codes is None:
                return None
            n = codes.shape[0 if trans_b else 1]
            scale = (F32(alpha) * x.scale * w.scale).astype(F32)
            bias = _bias(graph, node.inputs[2], scale, n)
            if bias is None:
                return None
        attrs = {"alpha": alpha, "transA": int(a.get("transA", 0)), "transB": trans_b}
        return self._make(graph, ctx, node, q, MS, "QGemm", x, w, out, attrs, bias, False)
