"""Consistent shapes for the operators whose inputs must agree with each other.

A schema says that Conv takes X, W and B, not that W's channels are X's over the groups; drawn
independently, nearly every Conv would be refused before a kernel runs.  A hint draws the
geometry first and gives each input its shape (or its values, for the inputs that count or
index) and the attributes that agree with them.  The fuzz uses a hint most of the time and
the plain schema-driven draw otherwise, so both the kernels and the checks in front of them
see traffic; the hostile values (extreme attributes, empty dims) still come in through both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from hypothesis import strategies as st

from .attributes import HUGE_GEOMETRY
from .values import rare


@dataclasses.dataclass
class Hint:
    shapes: dict[str, tuple[int, ...] | list[tuple[int, ...]]] = dataclasses.field(
        default_factory=dict
    )
    values: dict[str, list] = dataclasses.field(default_factory=dict)  # ints or floats
    attrs: dict[str, object] = dataclasses.field(default_factory=dict)  # None: leave it out


HINTS: dict[str, Callable] = {}


def hint(*names: str):
    def register(fn):
        for n in names:
            HINTS[n] = fn
        return fn

    return register


def small(draw, lo: int = 1, hi: int = 4) -> int:
    return draw(st.integers(lo, hi))


def extent(draw) -> int:
    """A spatial extent: small mostly, now and then empty or long."""
    return draw(st.sampled_from([1, 2, 3, 4, 5, 7, 8, 9, 16, 0, 33]))


def geometry_attr(draw, values: list[int]) -> list[int]:
    """The values as they are, mostly; now and then one of them huge."""
    if values and rare(draw, 10):
        values = list(values)
        values[draw(st.integers(0, len(values) - 1))] = draw(st.sampled_from(HUGE_GEOMETRY))
    return values


def window_attrs(draw, spatial: int, kernel: list[int]) -> dict[str, object]:
    strides = [draw(st.sampled_from([1, 1, 2, 3])) for _ in range(spatial)]
    dilations = [draw(st.sampled_from([1, 1, 1, 2])) for _ in range(spatial)]
    pads = [draw(st.sampled_from([0, 0, 1, 2])) for _ in range(2 * spatial)]
    return {
        "kernel_shape": kernel if draw(st.integers(0, 3)) else None,
        "strides": geometry_attr(draw, strides) if draw(st.booleans()) else None,
        "dilations": geometry_attr(draw, dilations) if draw(st.booleans()) else None,
        "pads": geometry_attr(draw, pads) if draw(st.booleans()) else None,
        "auto_pad": draw(st.sampled_from(["NOTSET"] * 5 + ["SAME_UPPER", "SAME_LOWER", "VALID"])),
    }


@hint("Conv", "FusedConv", "ConvTranspose", "DeformConv")
def conv(draw, op: str) -> Hint:
    spatial = draw(st.sampled_from([2, 2, 2, 1, 3]))
    n = draw(st.sampled_from([1, 1, 2, 0, 3]))
    c = draw(st.sampled_from([1, 3, 4, 8, 16, 2]))
    group = draw(st.sampled_from([1, 1, 1, c, 2 if c % 2 == 0 else 1]))
    m = group * draw(st.sampled_from([1, 2, 4, 8, 3, 16, 0]))
    kernel = [draw(st.sampled_from([3, 1, 2, 5])) for _ in range(spatial)]
    x = (n, c, *[extent(draw) for _ in range(spatial)])
    if op == "ConvTranspose":
        w = (c, max(m // group, 1), *kernel)
        bias = (max(m // group, 1) * group,)
    else:
        w = (m, c // group, *kernel)
        bias = (m,)
    h = Hint(shapes={"X": x, "W": w, "B": bias}, attrs=window_attrs(draw, spatial, kernel))
    h.attrs["group"] = group if group > 1 or draw(st.booleans()) else None
    if op == "DeformConv":
        out = [max(d - k + 1, 1) for d, k in zip(x[2:], kernel)]
        h.shapes["offset"] = (n, 2 * _prod(kernel), *out)
        h.shapes["mask"] = (n, _prod(kernel), *out)
        h.attrs["auto_pad"] = None
    return h


def _prod(values: list[int]) -> int:
    p = 1
    for v in values:
        p *= v
    return p


@hint("MaxPool", "AveragePool", "LpPool")
def pool(draw, op: str) -> Hint:
    spatial = draw(st.sampled_from([2, 2, 1, 3]))
    x = (
        draw(st.sampled_from([1, 2, 0])),
        draw(st.sampled_from([1, 3, 8, 0])),
        *[extent(draw) for _ in range(spatial)],
    )
    kernel = [draw(st.sampled_from([2, 3, 1])) for _ in range(spatial)]
    attrs = window_attrs(draw, spatial, kernel)
    attrs["kernel_shape"] = kernel  # required
    attrs["ceil_mode"] = draw(st.sampled_from([None, 0, 1]))
    return Hint(shapes={"X": x}, attrs=attrs)


@hint("MatMul", "Gemm", "FusedGemm", "FusedMatMul")
def product(draw, op: str) -> Hint:
    m, k, n = (draw(st.sampled_from([1, 2, 3, 7, 16, 64, 0, 130])) for _ in range(3))
    if op == "MatMul":
        batch = tuple(draw(st.lists(st.sampled_from([1, 2, 3]), max_size=2)))
        a = (k,) if rare(draw, 5) else (*batch, m, k)
        b = (k, n) if draw(st.booleans()) else (*batch, k, n)
        return Hint(shapes={"A": a, "B": b})
    ta, tb = draw(st.booleans()), draw(st.booleans())
    c = draw(st.sampled_from([(n,), (m, n), (1, n), (m, 1), (), (1,)]))
    return Hint(
        shapes={"A": (k, m) if ta else (m, k), "B": (n, k) if tb else (k, n), "C": c},
        attrs={"transA": int(ta), "transB": int(tb)},
    )


@hint("Concat")
def concat(draw, op: str) -> Hint:
    rank = draw(st.integers(1, 4))
    shape = [draw(st.sampled_from([1, 2, 3, 5, 0])) for _ in range(rank)]
    axis = draw(st.integers(-rank, rank - 1))
    shapes = []
    for _ in range(draw(st.integers(1, 4))):
        s = list(shape)
        s[axis] = draw(st.sampled_from([1, 2, 3, 0, 7]))
        shapes.append(tuple(s))
    return Hint(shapes={"inputs": shapes}, attrs={"axis": axis})


@hint("NonMaxSuppression")
def nms(draw, op: str) -> Hint:
    b, c, n = (draw(st.sampled_from(v)) for v in ([1, 2, 0], [1, 3, 0], [0, 1, 5, 40, 300]))
    return Hint(
        shapes={"boxes": (b, n, 4), "scores": (b, c, n)},
        values={
            "max_output_boxes_per_class": [draw(st.sampled_from([3, 0, 100, 2**62, -1]))],
            "iou_threshold": [draw(st.sampled_from([0.5, 0.0, 1.0, float("nan")]))],
            "score_threshold": [draw(st.sampled_from([0.0, -1.0, float("inf")]))],
        },
    )


@hint("BatchNormalization", "InstanceNormalization", "GroupNormalization")
def channel_norm(draw, op: str) -> Hint:
    c = draw(st.sampled_from([1, 2, 4, 6, 0]))
    x = (draw(st.sampled_from([1, 2, 0])), c, *[extent(draw) for _ in range(small(draw, 0, 2))])
    vec = (c,)
    h = Hint(shapes={n: vec for n in ("scale", "B", "bias", "input_mean", "input_var")})
    h.shapes["X"] = h.shapes["input"] = x
    if op == "GroupNormalization":
        groups = draw(st.sampled_from([1, 2, c or 1, 3]))
        h.attrs["num_groups"] = groups
        if draw(st.booleans()):
            h.shapes["scale"] = h.shapes["bias"] = (groups,)
    return h


@hint("LayerNormalization", "RMSNormalization")
def layer_norm(draw, op: str) -> Hint:
    x = tuple(draw(st.sampled_from([1, 2, 3, 8, 0])) for _ in range(small(draw, 1, 4)))
    axis = draw(st.integers(-len(x), len(x) - 1))
    tail = x[axis:]
    return Hint(shapes={"X": x, "Scale": tail, "scale": tail, "B": tail}, attrs={"axis": axis})


@hint("LSTM", "GRU", "RNN")
def recurrent(draw, op: str) -> Hint:
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    seq, batch, size, hidden = (
        draw(st.sampled_from(v)) for v in ([1, 3, 0, 7], [1, 2, 0], [1, 3, 8], [1, 2, 5, 16])
    )
    direction = draw(st.sampled_from(["forward", "reverse", "bidirectional"]))
    d = 2 if direction == "bidirectional" else 1
    return Hint(
        shapes={
            "X": (seq, batch, size),
            "W": (d, gates * hidden, size),
            "R": (d, gates * hidden, hidden),
            "B": (d, 2 * gates * hidden),
            "initial_h": (d, batch, hidden),
            "initial_c": (d, batch, hidden),
            "P": (d, 3 * hidden),
        },
        values={"sequence_lens": [draw(st.sampled_from([seq, 0, 1, seq + 1]))] * batch},
        attrs={"hidden_size": hidden, "direction": direction, "layout": None},
    )


@hint("Attention")
def attention(draw, op: str) -> Hint:
    b, hq, s, d = (draw(st.sampled_from(v)) for v in ([1, 2], [1, 2, 4], [1, 3, 0, 17], [1, 8, 4]))
    hkv = draw(st.sampled_from([hq, 1, hq // 2 or 1]))
    past = draw(st.sampled_from([0, 0, 2]))
    kv = draw(st.sampled_from([s, 1, 5, 0]))
    shapes = {
        "Q": (b, hq, s, d),
        "K": (b, hkv, kv, d),
        "V": (b, hkv, kv, d),
        "attn_mask": (s, kv + past),
        "past_key": (b, hkv, past, d),
        "past_value": (b, hkv, past, d),
    }
    attrs: dict[str, object] = {"is_causal": draw(st.sampled_from([None, 0, 1]))}
    if draw(st.booleans()):  # the 3-D form
        shapes.update(Q=(b, s, hq * d), K=(b, kv, hkv * d), V=(b, kv, hkv * d))
        attrs.update(q_num_heads=hq, kv_num_heads=hkv)
    return Hint(shapes=shapes, values={"nonpad_kv_seqlen": [kv] * b}, attrs=attrs)


@hint("Resize", "Upsample")
def resize(draw, op: str) -> Hint:
    x = (1, draw(st.sampled_from([1, 3])), extent(draw), extent(draw))
    factor = draw(st.sampled_from([2.0, 0.5, 1.0, 3.0, 0.0, 1e9, float("nan")]))
    h = Hint(
        shapes={"X": x},
        values={"scales": [1.0, 1.0, factor, factor], "sizes": [1, x[1], 2 * x[2], x[3] + 1]},
    )
    if draw(st.booleans()):
        h.values["roi"] = []
    return h


@hint("RoiAlign")
def roi_align(draw, op: str) -> Hint:
    n, r = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 3, 0]))
    rois = [draw(st.sampled_from([0.0, 1.5, 3.0, -2.0, 100.0, float("nan")])) for _ in range(4 * r)]
    return Hint(
        shapes={"X": (n, 2, extent(draw), extent(draw))},
        values={"rois": rois, "batch_indices": [draw(st.sampled_from([0, n - 1, n, -1]))] * r},
        attrs={"output_height": small(draw), "output_width": small(draw)},
    )


@hint("GridSample")
def grid_sample(draw, op: str) -> Hint:
    n = draw(st.sampled_from([1, 2]))
    return Hint(
        shapes={"X": (n, 2, extent(draw), extent(draw)), "grid": (n, extent(draw), extent(draw), 2)}
    )


@hint("Slice")
def slice_(draw, op: str) -> Hint:
    x = tuple(draw(st.sampled_from([1, 2, 5, 0])) for _ in range(small(draw, 1, 3)))
    k = draw(st.integers(1, len(x)))
    ends = st.sampled_from([1, 2, -1, 2**62, -(2**63), 2**63 - 1, 0])
    return Hint(
        shapes={"data": x},
        values={
            "starts": [draw(st.sampled_from([0, 1, -1, -(2**63), 2**62])) for _ in range(k)],
            "ends": [draw(ends) for _ in range(k)],
            "axes": list(range(k)),
            "steps": [draw(st.sampled_from([1, 2, -1, -(2**63), 2**62])) for _ in range(k)],
        },
    )


@hint("Reshape", "Expand", "Tile")
def reshape(draw, op: str) -> Hint:
    x = tuple(draw(st.sampled_from([1, 2, 3, 4, 0])) for _ in range(small(draw, 1, 3)))
    if op == "Tile":
        reps = [draw(st.sampled_from([1, 2, 3, 0, 2**40])) for _ in x]
        return Hint(shapes={"input": x}, values={"repeats": reps})
    if op == "Expand":
        shape = [draw(st.sampled_from([d, 1, 3, 2**31])) for d in x]
        return Hint(shapes={"input": x}, values={"shape": shape})
    size = 1
    for d in x:
        size *= d
    shape = draw(st.sampled_from([[-1], [size], [1, -1], [-1, 1, 1], [0, -1], [2**62, 2**2]]))
    return Hint(shapes={"data": x}, values={"shape": shape})


@hint("TopK")
def topk(draw, op: str) -> Hint:
    x = tuple(draw(st.sampled_from([1, 3, 6, 0])) for _ in range(small(draw, 1, 3)))
    return Hint(
        shapes={"X": x},
        values={"K": [draw(st.sampled_from([1, 2, 0, x[-1], 2**62]))]},
        attrs={"axis": -1},
    )


@hint("Einsum")
def einsum(draw, op: str) -> Hint:
    equation, shapes = draw(
        st.sampled_from(
            [
                ("ij,jk->ik", [(2, 3), (3, 4)]),
                ("bij,bjk->bik", [(2, 2, 3), (2, 3, 0)]),
                ("ii->i", [(3, 3)]),
                ("...ij->...ji", [(2, 1, 3)]),
                ("i,i->", [(5,), (5,)]),
                ("ij->", [(0, 4)]),
                ("abc,cd->abd", [(1, 2, 3), (3, 3)]),
            ]
        )
    )
    return Hint(shapes={"Inputs": shapes}, attrs={"equation": equation})
