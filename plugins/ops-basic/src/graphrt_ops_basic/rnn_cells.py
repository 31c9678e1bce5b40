"""The pieces of one recurrent step (rnn.py): activation functions and the per-step calls of the
RNN, GRU and LSTM cells, built once per run state as a flat list of numpy calls on fixed views.

Layout: every per-step array is gate-major, ``[dirs, rows, batch]`` (``[rows, batch]`` with one
direction): a gate is a block of contiguous rows, and the recurrent product is ``R @ H`` with
``R`` as stored (``[gates*hidden, hidden]``), which BLAS runs faster than ``H @ R^T`` for small
batches.  Sigmoid gates have their weights, biases, peepholes and clip bounds pre-scaled by 0.5
(exact: a power of two), so ``sigmoid(x) = 0.5 * tanh(x / 2) + 0.5`` shares one ``tanh`` call
with the neighbouring Tanh gates.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._util import constant, zeros_like_shape

Call = Callable[[], Any]
#: Calls pass ``out`` by position (half the cost of a keyword through a partial), except to
#: maximum and minimum, where numpy 2.4 deprecates it.
P = functools.partial

#: Functions that read activation_alpha / activation_beta, with ONNX's defaults (those of the
#: operators of the same name).  Values are consumed in order, by the functions that take them.
ALPHA = {
    "Affine": 1.0,
    "LeakyRelu": 0.01,
    "ThresholdedRelu": 1.0,
    "ScaledTanh": 1.0,
    "HardSigmoid": 0.2,
    "Elu": 1.0,
}
BETA = {"Affine": 0.0, "ScaledTanh": 1.0, "HardSigmoid": 0.5}
NAMES = {
    n.lower(): n
    for n in ["Sigmoid", "Tanh", "Relu", "Softsign", "Softplus", *ALPHA]  # spec spelling
}


@dataclasses.dataclass(frozen=True)
class Activation:
    """One activation function of the spec's list, with its alpha and beta."""

    name: str
    alpha: float | None = None
    beta: float | None = None

    @property
    def scale(self) -> float:
        """The factor folded into the pre-activation's weights (0.5 for Sigmoid, else 1)."""
        return 0.5 if self.name == "Sigmoid" else 1.0

    @property
    def tanh_core(self) -> bool:
        return self.name in ("Tanh", "Sigmoid")

    def calls(
        self,
        x: np.ndarray,
        out: np.ndarray,
        tmp: np.ndarray,
        mask: np.ndarray | None,
        scaled: bool = True,
    ) -> list[Call]:
        """out = f(x) as numpy calls (``out`` may be ``x``); ``scaled``: a Sigmoid's input was
        halved by its weights.  ``tmp``/``mask`` are temporaries of x's shape."""
        dt = out.dtype
        c = functools.partial(constant, dt)
        n, a, b = self.name, self.alpha, self.beta
        if n == "Tanh":
            return [P(np.tanh, x, out)]
        if n == "Sigmoid":
            first = [P(np.tanh, x, out)]
            if not scaled:
                first = [P(np.multiply, x, c(0.5), out), P(np.tanh, out, out)]
            return [*first, *sigmoid_post(out)]
        if n == "Relu":
            return [P(np.maximum, x, zeros_like_shape(dt, x.shape), out=out)]
        if n == "Affine":
            return [P(np.multiply, x, c(a), out), P(np.add, out, c(b), out)]
        if n == "LeakyRelu":  # max(x, a*x) for a <= 1, min(x, a*x) above: x if x >= 0 else a*x
            pick = np.maximum if a <= 1 else np.minimum
            return [P(np.multiply, x, c(a), tmp), P(pick, x, tmp, out=out)]
        if n == "ThresholdedRelu":
            calls = [P(np.less, x, c(a), mask)]
            if out is not x:
                calls.append(P(np.copyto, out, x))
            return [*calls, P(np.copyto, out, c(0.0), where=mask)]
        if n == "ScaledTanh":
            return [
                P(np.multiply, x, c(b), out),
                P(np.tanh, out, out),
                P(np.multiply, out, c(a), out),
            ]
        if n == "HardSigmoid":
            return [
                P(np.multiply, x, c(a), out),
                P(np.add, out, c(b), out),
                P(np.maximum, out, c(0.0), out=out),
                P(np.minimum, out, c(1.0), out=out),
            ]
        if n == "Elu":  # max(x, 0) + a*expm1(min(x, 0))
            zeros = zeros_like_shape(dt, x.shape)
            return [
                P(np.minimum, x, zeros, out=tmp),
                P(np.expm1, tmp, tmp),
                P(np.multiply, tmp, c(a), tmp),
                P(np.maximum, x, zeros, out=out),
                P(np.add, out, tmp, out),
            ]
        if n == "Softsign":
            return [P(np.abs, x, tmp), P(np.add, tmp, c(1.0), tmp), P(np.divide, x, tmp, out)]
        if n == "Softplus":
            return [P(np.logaddexp, x, c(0.0), out)]
        raise AssertionError(n)


def sigmoid_post(y: np.ndarray) -> list[Call]:
    """y = 0.5 * y + 0.5: sigmoid from the tanh of the halved input."""
    half = constant(y.dtype, 0.5)
    return [P(np.multiply, y, half, y), P(np.add, y, half, y)]


def parse_activations(
    names: Sequence[str] | None,
    alphas: Sequence[float] | None,
    betas: Sequence[float] | None,
    defaults: Sequence[str],
    dirs: int,
) -> tuple[tuple[Activation, ...], ...]:
    """The activation functions of each direction; raises ValueError with the reason.

    ``names`` lists ``len(defaults)`` functions per direction; a single direction's list is
    also accepted for both directions.  alpha and beta values go, in order, to the functions
    that take them; the others keep the defaults of the ONNX operators of the same name.
    """
    per = len(defaults)
    names = list(defaults) * dirs if not names else list(names)
    if len(names) == per and dirs == 2:
        names = names * 2
    elif len(names) != per * dirs:
        raise ValueError(f"activations lists {len(names)} functions, expected {per * dirs}")
    alphas, betas = list(alphas or []), list(betas or [])
    acts = []
    for raw in names[: per * dirs]:
        name = NAMES.get(str(raw).lower())
        if name is None:
            raise ValueError(f"unknown activation function {raw!r}")
        alpha = alphas.pop(0) if name in ALPHA and alphas else ALPHA.get(name)
        beta = betas.pop(0) if name in BETA and betas else BETA.get(name)
        acts.append(Activation(name, alpha, beta))
    return tuple(tuple(acts[d * per : (d + 1) * per]) for d in range(dirs))


def activate(
    segments: Sequence[tuple[int, int, Activation]],
    x: np.ndarray,
    tmp: np.ndarray,
    mask: np.ndarray | None,
) -> list[Call]:
    """Apply each segment's function in place to rows [lo, hi) (axis -2) of ``x``.

    Adjacent Tanh and (pre-scaled) Sigmoid rows share one tanh call; Sigmoid rows then get the
    affine step; other functions run segment by segment (adjacent equal ones merged).
    """
    runs: list[list[Any]] = []
    for lo, hi, act in segments:
        key = "tanh" if act.tanh_core else act
        if runs and runs[-1][2] == key and runs[-1][1] == lo:
            runs[-1][1] = hi
            runs[-1][3].append((lo, hi, act))
        else:
            runs.append([lo, hi, key, [(lo, hi, act)]])
    calls: list[Call] = []
    for lo, hi, key, parts in runs:
        rows = (..., slice(lo, hi), slice(None))
        if key != "tanh":
            m = None if mask is None else mask[rows]
            calls += key.calls(x[rows], x[rows], tmp[rows], m)
            continue
        calls.append(P(np.tanh, x[rows], x[rows]))
        sig: list[list[int]] = []
        for a, b, act in parts:
            if act.name == "Sigmoid":
                if sig and sig[-1][1] == a:
                    sig[-1][1] = b
                else:
                    sig.append([a, b])
        for a, b in sig:
            calls += sigmoid_post(x[..., a:b, :])
    return calls


def clip_calls(g: np.ndarray, lo: np.ndarray | None, hi: np.ndarray | None) -> list[Call]:
    """g = min(max(g, lo), hi) with per-row bounds (the clip attribute, pre-scaled)."""
    if lo is None:
        return []
    return [P(np.maximum, g, lo, out=g), P(np.minimum, g, hi, out=g)]


@dataclasses.dataclass
class Step:
    """The arrays of one step, already squeezed to ``[rows, batch]`` for one direction."""

    hprev: np.ndarray  # H(t-1): the initial state, or the previous step's slot
    hnew: np.ndarray  # where H(t) goes (a slot of the output buffer)
    xw: np.ndarray  # X(t) @ W^T + biases, [gates*hidden, batch] per direction


@dataclasses.dataclass
class Cell:
    """What every step of a node shares: weights and work arrays (gate-major, squeezed)."""

    r: np.ndarray  # [dirs, G, H] recurrence weights, internal gate order, pre-scaled
    g: np.ndarray  # [dirs, G, B] gate pre-activations
    t: np.ndarray  # [dirs, G, B] temporaries
    m: np.ndarray | None  # [dirs, G, B] bool temporaries (ThresholdedRelu)
    th: np.ndarray  # [dirs, H, B] temporaries
    lo: np.ndarray | None  # clip bounds per row, [dirs, G, 1]
    hi: np.ndarray | None
    acts: list[tuple[Any, tuple[Activation, ...]]]  # (index into dirs, functions)
    hidden: int
    c: np.ndarray | None = None  # LSTM: the cell state, updated in place
    p: np.ndarray | None = None  # LSTM peepholes [dirs, 3H, 1]: i, f, o, pre-scaled
    rbh: np.ndarray | None = None  # GRU linear_before_reset: Rbh [dirs, H, 1], pre-scaled
    input_forget: bool = False
    linear_before_reset: bool = False

    def each_dir(self, fn: Callable[[Any, tuple[Activation, ...]], list[Call]]) -> list[Call]:
        calls: list[Call] = []
        for sel, acts in self.acts:
            calls += fn(sel, acts)
        return calls


def rnn_step(cell: Cell, st: Step) -> list[Call]:
    """H = f(X W^T + H R^T + Wb + Rb), computed in H's slot."""
    h = st.hnew
    calls = [P(np.matmul, cell.r, st.hprev, h), P(np.add, h, st.xw, h)]
    calls += clip_calls(h, cell.lo, cell.hi)
    n = cell.hidden
    calls += cell.each_dir(
        lambda d, acts: activate([(0, n, acts[0])], h[d], cell.t[d][..., :n, :], _m(cell, d, n))
    )
    return calls


def gru_step(cell: Cell, st: Step) -> list[Call]:
    """z, r = f(..); h = g(..) with or without linear_before_reset; H = h + z (.) (H - h)."""
    n, g, hp = cell.hidden, cell.g, st.hprev
    zr, hh = g[..., : 2 * n, :], g[..., 2 * n :, :]
    z, r = g[..., :n, :], g[..., n : 2 * n, :]
    calls: list[Call] = []
    if cell.linear_before_reset:
        calls += [
            P(np.matmul, cell.r, hp, g),
            P(np.add, zr, st.xw[..., : 2 * n, :], zr),
        ]
    else:
        calls += [
            P(np.matmul, cell.r[..., : 2 * n, :], hp, zr),
            P(np.add, zr, st.xw[..., : 2 * n, :], zr),
        ]
    calls += clip_calls(zr, _rows(cell.lo, 0, 2 * n), _rows(cell.hi, 0, 2 * n))
    calls += cell.each_dir(
        lambda d, a: activate([(0, n, a[0]), (n, 2 * n, a[0])], g[d], cell.t[d], _m(cell, d, None))
    )
    if cell.linear_before_reset:  # h = g(Xh + Wbh + r (.) (H Rh^T + Rbh))
        if cell.rbh is not None:
            calls.append(P(np.add, hh, cell.rbh, hh))
        calls += [P(np.multiply, hh, r, hh), P(np.add, hh, st.xw[..., 2 * n :, :], hh)]
    else:  # h = g(Xh + (r (.) H) Rh^T + Wbh + Rbh)
        calls += [
            P(np.multiply, r, hp, cell.th),
            P(np.matmul, cell.r[..., 2 * n :, :], cell.th, hh),
            P(np.add, hh, st.xw[..., 2 * n :, :], hh),
        ]
    calls += clip_calls(hh, _rows(cell.lo, 2 * n, 3 * n), _rows(cell.hi, 2 * n, 3 * n))
    calls += cell.each_dir(
        lambda d, a: activate([(2 * n, 3 * n, a[1])], g[d], cell.t[d], _m(cell, d, None))
    )
    calls += [
        P(np.subtract, hp, hh, cell.th),
        P(np.multiply, cell.th, z, cell.th),
        P(np.add, hh, cell.th, st.hnew),
    ]
    return calls


def lstm_step(cell: Cell, st: Step) -> list[Call]:
    """Internal gate order c, i, f, o; C = f (.) C + i (.) c; H = o (.) h(C)."""
    n, g, t, hp = cell.hidden, cell.g, cell.t, st.hprev
    c = cell.c
    gi, gf, gc, go = (g[..., k * n : (k + 1) * n, :] for k in (1, 2, 0, 3))
    calls: list[Call] = [P(np.matmul, cell.r, hp, g), P(np.add, g, st.xw, g)]
    peep = cell.p is not None
    if peep:  # i and f read C(t-1): rows n..3n, one product over both
        g4 = g.reshape(*g.shape[:-2], 4, n, g.shape[-1])[..., 1:3, :, :]
        t4 = t.reshape(*t.shape[:-2], 4, n, t.shape[-1])[..., 1:3, :, :]
        p_if = cell.p[..., : 2 * n, :].reshape(*cell.p.shape[:-2], 2, n, 1)
        calls += [P(np.multiply, c[..., None, :, :], p_if, t4), P(np.add, g4, t4, g4)]
    first = 3 * n if peep else 4 * n  # o waits for C(t) when it has a peephole
    calls += clip_calls(g[..., :first, :], _rows(cell.lo, 0, first), _rows(cell.hi, 0, first))

    def gates(d: Any, a: tuple[Activation, ...]) -> list[Call]:
        segs = [(0, n, a[1]), (n, 2 * n, a[0]), (2 * n, 3 * n, a[0])]
        if not peep:
            segs.append((3 * n, 4 * n, a[0]))
        return activate(segs, g[d], t[d], _m(cell, d, None))

    calls += cell.each_dir(gates)
    if cell.input_forget:  # f = 1 - i
        calls.append(P(np.subtract, constant(g.dtype, 1.0), gi, gf))
    calls += [
        P(np.multiply, c, gf, c),
        P(np.multiply, gi, gc, gi),
        P(np.add, c, gi, c),
    ]
    if peep:  # o reads C(t)
        to = t[..., 3 * n :, :]
        calls += [P(np.multiply, c, cell.p[..., 2 * n :, :], to), P(np.add, go, to, go)]
        calls += clip_calls(go, _rows(cell.lo, 3 * n, 4 * n), _rows(cell.hi, 3 * n, 4 * n))
        calls += cell.each_dir(
            lambda d, a: activate([(3 * n, 4 * n, a[0])], g[d], t[d], _m(cell, d, None))
        )
    calls += cell.each_dir(
        lambda d, a: a[2].calls(c[d], cell.th[d], t[d][..., :n, :], _m(cell, d, n), scaled=False)
    )
    calls.append(P(np.multiply, go, cell.th, st.hnew))
    return calls


def _rows(a: np.ndarray | None, lo: int, hi: int) -> np.ndarray | None:
    return None if a is None else a[..., lo:hi, :]


def _m(cell: Cell, d: Any, rows: int | None) -> np.ndarray | None:
    if cell.m is None:
        return None
    m = cell.m[d]
    return m if rows is None else m[..., :rows, :]


STEPS = {"RNN": rnn_step, "GRU": gru_step, "LSTM": lstm_step}
