"""Recurrent layers: RNN, GRU and LSTM (ai.onnx, every opset: 1, 3, 7, 14 with ``layout``, 22).

A recurrence is a long chain of small numpy calls, so the work is arranged to make each call
count.  ``infer`` checks the shapes, rearranges constant weights once (gate-major, the LSTM
gates reordered c, i, f, o, Sigmoid gates pre-scaled by 0.5: rnn_cells.py) and plans every
temporary.  ``bind`` builds, once per run state, the whole run as a flat list of numpy calls on
fixed views: one matmul ``W @ X^T`` for every time step and direction, the biases added once,
then for each step ``R @ H(t-1) + XW(t)`` and the gate arithmetic, all with ``out=`` into the
planned scratch, and last the copies into Y, Y_h, Y_c in the requested layout.  A run just
calls the list: no allocation and no per-step Python beyond the calls themselves.

``sequence_lens`` (a batch entry's sequence ends early): its Y rows past the end are zero,
Y_h/Y_c hold its last valid step, and zeros for a length of 0 (what onnxruntime does); the
reverse direction runs each entry from its own last valid step back.  Every step still computes
the whole batch (masking each step would cost more calls than the rows it saves): a few
per-entry copies after the right steps capture a forward entry's final state and restart a
reverse entry from its initial state, and Y's padding is zeroed once at the end.
Weights fed at run time are rearranged into scratch at the start of every run.  float16 and
bfloat16 compute in float32 and round once into the outputs.  Not exact (tanh, exp, BLAS).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._util import constant, is_float
from .rnn_cells import STEPS, Activation, Call, Cell, Step, parse_activations

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
DEFAULTS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"), "LSTM": ("Sigmoid", "Tanh", "Tanh")}
#: Internal gate k is ONNX gate PERM[op][k]: LSTM's i, o, f, c become c, i, f, o (the Sigmoid
#: gates contiguous, i and f next to each other for the peepholes, o last).
PERM = {"RNN": (0,), "GRU": (0, 1, 2), "LSTM": (3, 0, 2, 1)}
#: LSTM peepholes P[i, o, f] become i, f, o.
PEEP = (0, 2, 1)
INPUTS = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")


@dataclasses.dataclass(frozen=True)
class _Weights:
    w: np.ndarray  # [dirs*G, I]: W of every direction, internal gate order, pre-scaled
    r: np.ndarray  # [dirs, G, H]
    bias: np.ndarray | None  # [dirs, G, 1]: Wb + Rb (GRU linear_before_reset: Wbh alone)
    rbh: np.ndarray | None  # [dirs, H, 1]: GRU linear_before_reset's Rbh
    p: np.ndarray | None  # [dirs, 3H, 1]: LSTM peepholes i, f, o


@dataclasses.dataclass(frozen=True)
class _Plan:
    seq: int
    batch: int
    inp: int
    dirs: int
    ct: np.dtype  # the compute type
    weights: _Weights | None  # constant weights, rearranged once
    lens: np.ndarray | None  # constant sequence_lens, when some is short
    masks: tuple[np.ndarray | None, np.ndarray] | None  # their Y padding and zero lengths
    masked: bool  # sequence_lens may be short (given at run time, or constant and short)
    slots: int  # H(t) buffers: every step when Y is wanted, else a ring
    lo: np.ndarray | None  # clip bounds per gate row, pre-scaled [dirs, G, 1]
    hi: np.ndarray | None
    scratch: dict[str, int]


def _weights(storage: dict[str, Any], batch: int) -> _Weights:
    """The weights over their storage: R [dirs, G, H] is a view of a [dirs, H, G] array for a
    batch of 1 (BLAS's matrix-vector product runs faster on that layout)."""
    r = storage["r"]
    return _Weights(**{**storage, "r": r.transpose(0, 2, 1) if batch == 1 else r})


@functools.lru_cache(maxsize=64)
def _steps(seq: int) -> tuple[np.ndarray, np.ndarray]:
    """[seq, 1] step numbers, and the time steps the reverse direction reads at each."""
    forward = np.arange(seq, dtype=np.int64)[:, None]
    backward = forward[::-1].copy()
    forward.flags.writeable = backward.flags.writeable = False
    return forward, backward


class _Recurrent(OpKernel):
    """What RNN, GRU and LSTM share; ``op`` picks the cell (rnn_cells.STEPS)."""

    op: ClassVar[str] = ""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        a = node.attrs
        direction = a.get("direction", "forward")
        if direction not in ("forward", "reverse", "bidirectional"):
            raise self.fail(f"direction must be forward, reverse or bidirectional: {direction!r}")
        self.dirs = 2 if direction == "bidirectional" else 1
        self.reverse = {"forward": (False,), "reverse": (True,)}.get(direction, (False, True))
        self.layout = int(a.get("layout", 0))
        if self.layout not in (0, 1):
            raise self.fail(f"layout must be 0 or 1, got {self.layout}")
        if self.layout and node.opset < 14:
            raise self.fail(f"layout is an attribute of opset 14 and later (model: {node.opset})")
        self.hidden_size = a.get("hidden_size")
        if self.hidden_size is not None and self.hidden_size <= 0:
            raise self.fail(f"hidden_size must be positive, got {self.hidden_size}")
        self.clip = a.get("clip")
        if self.clip is not None and not self.clip > 0:
            raise self.fail(f"clip must be positive, got {self.clip}")
        self.input_forget = bool(a.get("input_forget", 0))
        self.linear_before_reset = bool(a.get("linear_before_reset", 0))
        try:
            self.acts = parse_activations(
                a.get("activations"),
                a.get("activation_alpha"),
                a.get("activation_beta"),
                DEFAULTS[self.op],
                self.dirs,
            )
        except ValueError as exc:
            raise self.fail(str(exc)) from exc
        outs = node.outputs
        self.want = tuple(i < len(outs) and bool(outs[i]) for i in range(3))

    # -- planning ------------------------------------------------------------------------
    def gate_acts(self, d: int) -> tuple[Activation, ...]:
        """The function of each internal gate of direction d (its scale is folded in W)."""
        f = self.acts[d]
        if self.op == "RNN":
            return (f[0],)
        if self.op == "GRU":
            return (f[0], f[0], f[1])
        return (f[1], f[0], f[0], f[0])

    def infer(self, ctx: InferContext) -> None:
        has = [ctx.has_input(i) for i in range(8)]
        dtype = ctx.dtype(0)
        if not is_float(dtype) or dtype.itemsize not in (2, 4, 8):
            raise self.fail(f"X must be a float tensor, got {dtype}")
        for i in (1, 2, 3, 5, 6, 7):
            if has[i] and ctx.dtype(i) != dtype:
                raise self.fail(f"{INPUTS[i]} is {ctx.dtype(i)}, X is {dtype}")
        if has[4] and ctx.dtype(4).kind not in "iu":
            raise self.fail(f"sequence_lens must be integers, got {ctx.dtype(4)}")
        ct = np.dtype(np.float64 if dtype == np.float64 else np.float32)
        seq, batch, inp, hidden = self._shapes(ctx, has)
        dirs, g = self.dirs, GATES[self.op]
        rows = g * hidden
        if self.layout == 0:
            y_shape, h_shape = (seq, dirs, batch, hidden), (dirs, batch, hidden)
        else:
            y_shape, h_shape = (batch, seq, dirs, hidden), (batch, dirs, hidden)
        for i, shape in enumerate((y_shape, h_shape, h_shape)):
            if self.want[i] and (i < 2 or self.op == "LSTM"):
                ctx.set_output(i, dtype, shape)

        lens = ctx.known_value(4) if has[4] else None
        masks = None
        masked = has[4]
        if lens is not None:
            self._check_lens(lens, seq)
            masked = bool(np.any(lens < seq))
            if masked:
                lens = np.array(lens, np.int64)
                masks = (
                    np.empty((seq, dirs, 1, batch), bool) if self.want[0] else None,
                    np.empty((1, 1, batch), bool),
                )
                self._fill_masks(lens, *masks)
            else:
                lens = None

        sc: dict[str, int] = {}

        def add(name: str, shape: tuple[int, ...], dt: Any = ct) -> None:
            sc[name] = ctx.add_scratch(dt, shape)

        add("P", (dirs * rows, seq * batch))
        add("XW", (seq, dirs, rows, batch))
        add("G", (dirs, rows, batch))
        add("T", (dirs, rows, batch))
        if any(f.name == "ThresholdedRelu" for acts in self.acts for f in acts):
            add("M", (dirs, rows, batch), bool)
        add("TH", (dirs, hidden, batch))
        add("H0", (dirs, hidden, batch))
        slots = seq if self.want[0] else 2
        add("Y", (max(slots, 1), dirs, hidden, batch))
        if self.op == "LSTM":
            add("C", (dirs, hidden, batch))
            if masked:  # the final cell states of short sequences
                add("CN", (dirs, hidden, batch))
        if dtype != ct or self.layout:  # X in the compute type, time first
            add("X", (seq, batch, inp))
        if masked and masks is None:
            if self.want[0]:
                add("drop", (seq, dirs, 1, batch), bool)
            add("zero", (1, 1, batch), bool)
            add("bounds", (2,), ctx.dtype(4))

        values = [ctx.known_value(i) if has[i] else None for i in (1, 2, 3, 7)]
        weights = None
        shapes = self._weight_shapes(inp, hidden, has, batch)
        if all(v is not None for v, h in zip(values, (True, True, has[3], has[7])) if h):
            weights = _weights(
                {k: None if s is None else np.empty(s, ct) for k, s in shapes}, batch
            )
            self._fill_weights(weights, *values)
        else:
            for k, s in shapes:
                if s is not None:
                    add("w_" + k, s)
        lo = hi = None
        if self.clip is not None:
            scale = np.array(
                [[f.scale] * hidden for d in range(dirs) for f in self.gate_acts(d)], ct
            ).reshape(dirs, rows, 1)
            hi = scale * ct.type(self.clip)
            lo = -hi
        ctx.prepared = _Plan(
            seq, batch, inp, dirs, ct, weights, lens, masks, masked, slots, lo, hi, sc
        )

    def _shapes(self, ctx: InferContext, has: list[bool]) -> tuple[int, int, int, int]:
        """seq, batch, input and hidden sizes; every input's shape checked against them."""
        x, r = ctx.shape(0), ctx.shape(2)
        for i in (0, 1, 2):
            if len(ctx.shape(i)) != 3:
                raise self.fail(
                    f"{INPUTS[i]} must have rank 3, got shape {list(ctx.shape(i))}", "invalid_input"
                )
        seq, batch, inp = (x[1], x[0], x[2]) if self.layout else x
        hidden = self.hidden_size if self.hidden_size is not None else r[2]
        g, dirs = GATES[self.op], self.dirs
        state = (batch, dirs, hidden) if self.layout else (dirs, batch, hidden)
        state_text = "batch_size, num_directions" if self.layout else "num_directions, batch_size"
        expect = {
            1: ((dirs, g * hidden, inp), f"num_directions, {g}*hidden_size, input_size"),
            2: ((dirs, g * hidden, hidden), f"num_directions, {g}*hidden_size, hidden_size"),
            3: ((dirs, 2 * g * hidden), f"num_directions, {2 * g}*hidden_size"),
            4: ((batch,), "batch_size"),
            5: (state, f"{state_text}, hidden_size"),
            6: (state, f"{state_text}, hidden_size"),
            7: ((dirs, 3 * hidden), "num_directions, 3*hidden_size"),
        }
        for i, (want, text) in expect.items():
            if not has[i] or (i in (6, 7) and self.op != "LSTM"):
                continue
            if tuple(ctx.shape(i)) != want:
                raise self.fail(
                    f"{INPUTS[i]} has shape {list(ctx.shape(i))}, expected {list(want)} = [{text}]"
                    f" (hidden_size {hidden})",
                    "invalid_input",
                )
        return seq, batch, inp, hidden

    def _weight_shapes(
        self, inp: int, hidden: int, has: list[bool], batch: int
    ) -> list[tuple[str, Any]]:
        """Storage shapes; R is stored transposed for a batch of 1 (``_weights``)."""
        dirs, rows = self.dirs, GATES[self.op] * hidden
        gru_lbr = self.op == "GRU" and self.linear_before_reset
        return [
            ("w", (dirs * rows, inp)),
            ("r", (dirs, hidden, rows) if batch == 1 else (dirs, rows, hidden)),
            ("bias", (dirs, rows, 1) if has[3] else None),
            ("rbh", (dirs, hidden, 1) if has[3] and gru_lbr else None),
            ("p", (dirs, 3 * hidden, 1) if has[7] and self.op == "LSTM" else None),
        ]

    def _fill_weights(self, out: _Weights, w: Any, r: Any, b: Any, p: Any) -> None:
        """Rearrange ONNX's W, R, B, P into ``out``: internal gate order, pre-scaled."""
        ct = out.w.dtype
        w, r = np.asarray(w, ct), np.asarray(r, ct)
        hid = r.shape[2]
        rows = GATES[self.op] * hid
        lbr = self.op == "GRU" and self.linear_before_reset
        for d in range(self.dirs):
            for k, (src, f) in enumerate(zip(PERM[self.op], self.gate_acts(d))):
                s = constant(ct, f.scale)
                dst, from_ = slice(k * hid, (k + 1) * hid), slice(src * hid, (src + 1) * hid)
                np.multiply(w[d, from_], s, out=out.w[d * rows + dst.start : d * rows + dst.stop])
                np.multiply(r[d, from_], s, out=out.r[d, dst])
                if out.bias is not None:
                    bd = np.asarray(b[d], ct)
                    wb, rb = bd[from_], bd[rows + from_.start : rows + from_.stop]
                    if lbr and k == 2:
                        np.multiply(wb, s, out=out.bias[d, dst, 0])
                        np.multiply(rb, s, out=out.rbh[d, :, 0])
                    else:
                        np.add(wb, rb, out=out.bias[d, dst, 0])
                        np.multiply(out.bias[d, dst, 0], s, out=out.bias[d, dst, 0])
            if out.p is not None:
                s = constant(ct, self.acts[d][0].scale)
                pd = np.asarray(p[d], ct)
                for k, src in enumerate(PEEP):
                    np.multiply(
                        pd[src * hid : (src + 1) * hid], s, out=out.p[d, k * hid : (k + 1) * hid, 0]
                    )

    def _check_lens(self, lens: np.ndarray, seq: int, bounds: np.ndarray | None = None) -> None:
        """Lengths must lie in [0, seq] (``bounds``: a 2-element scratch, so no allocation)."""
        if not lens.size:
            return
        if bounds is None:
            bounds = np.empty(2, lens.dtype)
        np.minimum.reduce(lens, axis=0, out=bounds[0, ...])
        np.maximum.reduce(lens, axis=0, out=bounds[1, ...])
        if bounds[0, ...].item() < 0 or bounds[1, ...].item() > seq:
            raise self.fail(
                f"sequence_lens values must lie in [0, {seq}], got {lens.tolist()}", "invalid_input"
            )

    def _fill_masks(self, lens: np.ndarray, drop: np.ndarray | None, zero: np.ndarray) -> None:
        """drop[s, d, 0, b]: step s of direction d is past entry b's sequence (Y is zero);
        zero[0, 0, b]: entry b has no step at all (Y_h and Y_c are zero)."""
        if drop is not None:
            forward, backward = _steps(drop.shape[0])
            for d, rev in enumerate(self.reverse):  # reverse step s reads time seq-1-s
                np.greater_equal(backward if rev else forward, lens[None, :], out=drop[:, d, 0])
        np.equal(lens, constant(lens.dtype, 0), out=zero[0, 0])

    def _events(
        self,
        lens: np.ndarray,
        hs: list[np.ndarray],
        c: np.ndarray | None,
        final: tuple[np.ndarray, np.ndarray | None],
        initial: tuple[np.ndarray, np.ndarray | None],
    ) -> dict[int, list[Call]]:
        """The copies after each step that make short sequences right (arrays [dirs, H, B]):
        a forward entry's H and C after its last step go to ``final``; a reverse entry restarts
        from ``initial`` just before its last step, and the reverse direction's state after the
        last step is final.  ``hs[k]`` is step k's H, ``c`` the cell state (LSTM)."""
        seq = len(hs)
        events: dict[int, list[Call]] = {}
        copy = functools.partial(functools.partial, np.copyto, casting="unsafe")
        for d, rev in enumerate(self.reverse):
            for b, length in enumerate(lens.tolist()):
                if length == 0:
                    continue
                if not rev:  # after the step of time length-1
                    pairs = zip(final, (hs[length - 1], c))
                    at = events.setdefault(length - 1, [])
                elif length < seq:  # before the step of time length-1: its H(t-1) and C
                    pairs = zip((hs[seq - length - 1], c), initial)
                    at = events.setdefault(seq - length - 1, [])
                else:
                    continue
                at += [copy(dst[d, :, b], src[d, :, b]) for dst, src in pairs if dst is not None]
            if rev and seq:
                pairs = zip(final, (hs[seq - 1], c))
                events.setdefault(seq - 1, []).extend(
                    copy(dst[d], src[d]) for dst, src in pairs if dst is not None
                )
        return events

    # -- running -------------------------------------------------------------------------
    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        self._program(ctx, inputs, outputs)()

    def bind(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        arrays = [a for a in (*inputs, *outputs) if isinstance(a, np.ndarray)]
        if not all(a.flags.c_contiguous for a in arrays):  # views would go stale: rebuild
            return functools.partial(self.run, ctx, inputs, outputs)
        return self._program(ctx, inputs, outputs)

    def _program(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        """The whole run as calls on fixed views of these arrays."""
        p: _Plan = ctx.prepared
        s = {k: ctx.scratch[i] for k, i in p.scratch.items()}
        ins = list(inputs) + [None] * (8 - len(inputs))
        outs = list(outputs) + [None] * (3 - len(outputs))
        seq, batch, dirs = p.seq, p.batch, p.dirs
        x = ins[0]
        first: list[Call] = []
        weights = p.weights
        if weights is None:
            storage = {k: s.get("w_" + k) for k in ("w", "r", "bias", "rbh", "p")}
            weights = _weights(storage, batch)
            first.append(
                functools.partial(self._fill_weights, weights, *(ins[i] for i in (1, 2, 3, 7)))
            )
        if "X" in s:
            src = x.transpose(1, 0, 2) if self.layout else x
            first.append(functools.partial(np.copyto, s["X"], src, casting="unsafe"))
            x = s["X"]
        hid = weights.r.shape[2]
        proj = s["P"]
        first.append(functools.partial(np.matmul, weights.w, x.reshape(seq * batch, p.inp).T, proj))
        first += self._biases(p, weights, proj, s.get("XW"))
        first += self._initial_states(p, s, ins, hid)
        drop = zero = None
        if p.masked and p.masks is None:
            drop, zero = s.get("drop"), s["zero"]
            check = functools.partial(self._check_lens, ins[4], seq, s["bounds"])
            first += [check, functools.partial(self._fill_masks, ins[4], drop, zero)]
        elif p.masked:
            drop, zero = p.masks
        sq = (lambda a: None if a is None else a[0]) if dirs == 1 else (lambda a: a)
        if dirs == 1 or self.acts[0] == self.acts[1]:
            acts = [(..., self.acts[0])]
        else:
            acts = [(0, self.acts[0]), (1, self.acts[1])]
        cell = Cell(
            r=sq(weights.r),
            g=sq(s["G"]),
            t=sq(s["T"]),
            m=sq(s.get("M")),
            th=sq(s["TH"]),
            lo=sq(p.lo),
            hi=sq(p.hi),
            acts=acts,
            hidden=hid,
            c=sq(s.get("C")),
            p=sq(weights.p),
            rbh=sq(weights.rbh),
            input_forget=self.input_forget,
            linear_before_reset=self.linear_before_reset,
        )
        ybuf = s["Y"]
        hs = [ybuf[k % p.slots] for k in range(seq)]
        step_fn = STEPS[self.op]
        steps: list[list[Call]] = []
        for k in range(seq):
            hprev = s["H0"] if k == 0 else hs[k - 1]
            steps.append(step_fn(cell, Step(hprev=sq(hprev), hnew=sq(hs[k]), xw=sq(s["XW"][k]))))
        final = self._finals(p, s, outs, ybuf, drop, zero)
        if not p.masked:
            program = [*first, *(c for calls in steps for c in calls), *final]

            def go() -> None:
                for call in program:
                    call()

            return go

        # Short sequences: forward entries' final states go to H0 (read by step 0 only) and
        # CN; reverse entries restart from the initial states, read from the inputs.
        shape = s["H0"].shape
        initial = [ins[i] for i in (5, 6)]
        initial = [np.zeros(shape, p.ct) if a is None else self._state_view(a) for a in initial]
        events = functools.partial(
            self._events, hs=hs, c=s.get("C"), final=(s["H0"], s.get("CN")), initial=initial
        )
        fixed = None if p.lens is None else events(p.lens)

        def go_masked() -> None:
            for call in first:
                call()
            at = fixed if fixed is not None else events(ins[4])
            for k, calls in enumerate(steps):
                for call in calls:
                    call()
                more = at.get(k)
                if more is not None:
                    for call in more:
                        call()
            for call in final:
                call()

        return go_masked

    def _biases(self, p: _Plan, w: _Weights, proj: np.ndarray, xw: np.ndarray | None) -> list[Call]:
        """XW[step, dir] = the projection of the time step that step reads, plus the biases, so
        every step's block is contiguous.  The projection is [dirs*G, seq*batch] (X in layout 0
        order); each run of ``batch`` values moves as one void item (numpy's copy loop runs
        per item: a float32 copy of this transposition would loop over ``batch`` at a time)."""
        if p.seq == 0 or p.batch == 0:
            return []
        item = np.dtype((np.void, p.batch * proj.itemsize))
        rows = w.r.shape[1]
        calls = []
        for d, rev in enumerate(self.reverse):
            src = proj[d * rows : (d + 1) * rows].view(item).T  # [seq, G] of batch runs
            dst = xw.reshape(p.seq, p.dirs, rows * p.batch)[:, d].view(item)
            calls.append(functools.partial(np.copyto, dst, src[::-1] if rev else src))
        if w.bias is not None:
            calls.append(functools.partial(np.add, xw, w.bias, xw))
        return calls

    def _state_view(self, a: np.ndarray) -> np.ndarray:
        """An initial_h / Y_h shaped array as [dirs, hidden, batch]."""
        return a.transpose(1, 2, 0) if self.layout else a.transpose(0, 2, 1)

    def _initial_states(
        self, p: _Plan, s: dict[str, np.ndarray], ins: list[Any], hid: int
    ) -> list[Call]:
        calls = []
        pairs = [("H0", ins[5])]
        if self.op == "LSTM":
            pairs.append(("C", ins[6]))
        for name, given in pairs:
            if given is None:
                calls.append(functools.partial(s[name].fill, 0))
            else:
                view = self._state_view(given)
                calls.append(functools.partial(np.copyto, s[name], view, casting="unsafe"))
        return calls

    def _finals(
        self,
        p: _Plan,
        s: dict[str, np.ndarray],
        outs: list[Any],
        ybuf: np.ndarray,
        drop: np.ndarray | None,
        zero: np.ndarray | None,
    ) -> list[Call]:
        """Copies into Y, Y_h, Y_c in the requested layout and type; short sequences: Y's
        padding zeroed, zero final states for a length of 0."""
        copy = functools.partial(functools.partial, np.copyto, casting="unsafe")
        nothing = np.zeros((), p.ct)
        calls: list[Call] = []
        y, yh, yc = outs[:3]
        if y is not None and self.want[0]:
            if drop is not None:
                calls.append(copy(ybuf, nothing, where=drop))
            for d, rev in enumerate(self.reverse):
                src = ybuf[:, d][::-1] if rev else ybuf[:, d]
                dst = y[:, :, d].transpose(1, 2, 0) if self.layout else y[:, d].transpose(0, 2, 1)
                calls.append(copy(dst, src))
        if p.masked:
            states = [(yh, s["H0"]), (yc, s.get("CN"))]
        else:
            states = [(yh, ybuf[(p.seq - 1) % p.slots] if p.seq else s["H0"]), (yc, s.get("C"))]
        for out, state in states:
            if out is None or state is None:
                continue
            if p.seq == 0:
                calls.append(functools.partial(out.fill, 0))
                continue
            if zero is not None:
                calls.append(copy(state, nothing, where=zero))
            calls.append(copy(self._state_view(out), state))
        return calls


class RNN(_Recurrent):
    """Ht = f(Xt Wi^T + Ht-1 Ri^T + Wbi + Rbi)."""

    op = "RNN"


class GRU(_Recurrent):
    """Update and reset gates, linear_before_reset (opset 3+)."""

    op = "GRU"


class LSTM(_Recurrent):
    """Input, output, forget and cell gates, peepholes, input_forget."""

    op = "LSTM"
