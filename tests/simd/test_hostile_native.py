"""Hostile arguments to the fast-mode native entry points (issue 13): RnnPlan (LSTM, GRU,
RNN), attention, unary_fast and layer_norm called directly with extreme sizes, broadcast
(zero-stride) views of huge extents, empty arrays, misaligned, strided, read-only and wrongly
typed arrays and extreme thread counts; and the plugin's thread pool (only the workers a call
can use are woken; a forked child gets a working pool).  Each case runs in a child process
(tests/simd/test_hostile.py's) that must end normally, never by a signal."""

from __future__ import annotations

import textwrap

import pytest

from tests.simd.test_hostile import NATIVE_CHILD, run_child

# One child per case (NATIVE_CHILD's helpers plus these): the body makes its calls and checks
# what they return; the child prints "ok", or the ValueError or TypeError that ended the body.

CASE_CHILD = (
    NATIVE_CHILD
    + """
import math
rng = np.random.default_rng(13)

def off(shape, dtype=f):
    dtype = np.dtype(dtype)
    raw = np.zeros(int(np.prod(shape)) * dtype.itemsize + 1, np.uint8)[1:]
    return raw.view(dtype).reshape(shape)

def huge(shape):  # one value at every index: any size, no memory
    return np.broadcast_to(np.ones((), f), shape)

def rand(*shape):
    return rng.standard_normal(shape).astype(f)

def bits(x):
    return np.ascontiguousarray(x).view(np.uint32)

def raises(kind, words, call, *args):
    try:
        call(*args)
    except kind as e:
        assert words in str(e), (words, str(e))
        return
    raise AssertionError(f"accepted: expected {{kind.__name__}} with {{words!r}}")

G = {{"RNN": 1, "GRU": 3, "LSTM": 4}}

def plan(op="LSTM", inp=3, hidden=4, rev=(False,), **kw):
    return N.RnnPlan(op, isa, inp, hidden, list(rev), **kw)

def packed(p, op="LSTM", inp=3, hidden=4, dirs=1, b=None):
    w = rand(dirs, G[op] * hidden, inp)
    r = rand(dirs, G[op] * hidden, hidden)
    out = np.empty(p.packed_floats, f)
    p.pack(w, r, b, None, out)
    return out, w, r

def work(p, seq, batch):
    return np.empty(p.work_floats(seq, batch), f)

try:
{body}
    print("ok")
except (ValueError, TypeError) as e:
    print(type(e).__name__ + ":", " ".join(str(e).split()))  # one line
"""
)

# name -> (body, what the child prints: "ok" or the start of the error line)
NATIVE_CASES = {
    # -- RnnPlan: sizes and attributes
    "rnn_huge_hidden": ('N.RnnPlan("GRU", isa, 1, 2**31, [False, True])',
                        "ValueError: unsupported"),
    "rnn_huge_input": ('N.RnnPlan("RNN", isa, 2**40, 1, [False])', "ValueError: unsupported"),
    "rnn_negative_sizes": (
        'raises(ValueError, "hidden_size", N.RnnPlan, "RNN", isa, 3, -(2**63), [False])\n'
        'N.RnnPlan("RNN", isa, -(2**63), 4, [False])',
        "ValueError: input_size must not be negative",
    ),
    "rnn_huge_work": ("plan().work_floats(2**62, 2**62)", "ValueError: unsupported"),
    "rnn_negative_work": ("plan().work_floats(-(2**63), 1)", "ValueError: seq and batch"),
    "rnn_huge_layout": ("plan(layout=2**62)", "TypeError"),
    "rnn_thousand_directions": ("plan(rev=[True] * 1000)", "ValueError: reverse must list"),
    "rnn_huge_threads": (
        "p = plan(); pk = packed(p)[0]\n"
        "p.run(pk, np.ones((3, 2, 3), f), None, None, None, None, None, None, work(p, 3, 2),"
        " 2**40)",
        "TypeError",
    ),
    # -- RnnPlan.run: arrays
    "rnn_lens_misaligned_int32": (
        "p = plan(); pk = packed(p)[0]\n"
        "p.run(pk, np.ones((3, 2, 3), f), off((2,), np.int32), None, None, None, None, None,"
        " work(p, 3, 2))",
        "ValueError: sequence_lens must be an aligned int32 array",
    ),
    "rnn_lens_misaligned_int64": (
        "p = plan(); pk = packed(p)[0]\n"
        "p.run(pk, np.ones((3, 2, 3), f), off((2,), np.int64), None, None, None, None, None,"
        " work(p, 3, 2))",
        "ValueError: sequence_lens must be an aligned int64 array",
    ),
    "rnn_lens_strided": (  # negative and zero strides read as the contiguous copy
        "p = plan(); pk = packed(p)[0]; x = rand(3, 5, 3)\n"
        "for lens in (np.array([0, 1, 2, 3, 3, 2, 1, 0, 1, 2], np.int32)[::-2],\n"
        "             np.lib.stride_tricks.as_strided(np.array([2], np.int64), (5,), (0,))):\n"
        "    got, want = np.empty((3, 1, 5, 4), f), np.empty((3, 1, 5, 4), f)\n"
        "    p.run(pk, x, lens, None, None, got, None, None, work(p, 3, 5))\n"
        "    p.run(pk, x, lens.copy(), None, None, want, None, None, work(p, 3, 5))\n"
        "    assert (bits(got) == bits(want)).all()",
        "ok",
    ),
    "rnn_lens_dtype": (
        "p = plan(); pk = packed(p)[0]\n"
        "p.run(pk, np.ones((3, 2, 3), f), np.array([2**63, 1], np.uint64), None, None, None,"
        " None, None, work(p, 3, 2))",
        "TypeError: sequence_lens must be an int32 or int64 array",
    ),
    "rnn_misaligned_arrays": (
        "p = plan(); pk = packed(p)[0]; x = np.ones((3, 2, 3), f); wk = work(p, 3, 2)\n"
        "mis = off((p.packed_floats,)); mis[:] = pk\n"
        "for args in [(mis, x, None, None, None, None, None, None, wk),\n"
        "             (pk, off((3, 2, 3)), None, None, None, None, None, None, wk),\n"
        "             (pk, x, None, off((1, 2, 4)), None, None, None, None, wk),\n"
        "             (pk, x, None, None, None, off((3, 1, 2, 4)), None, None, wk),\n"
        "             (pk, x, None, None, None, None, None, None, off(wk.shape))]:\n"
        '    raises(ValueError, "must be an aligned float32 array", p.run, *args)',
        "ok",
    ),
    "rnn_wrong_dtypes": (
        "p = plan(); pk = packed(p)[0]; x = np.ones((3, 2, 3), f); wk = work(p, 3, 2)\n"
        'raises(TypeError, "x must be a float32", p.run, pk, x.astype(np.float64), None, None,'
        " None, None, None, None, wk)\n"
        'raises(TypeError, "work must be a float32", p.run, pk, x, None, None, None, None, None,'
        " None, wk.astype(np.float16))\n"
        'p.run(pk, x, np.array([1.0, 2.0], f), None, None, None, None, None, wk)',
        "TypeError: sequence_lens must be an int32 or int64",
    ),
    "rnn_non_contiguous": (
        "p = plan(); pk = packed(p)[0]; wk = work(p, 3, 2)\n"
        'raises(ValueError, "x must be C-contiguous", p.run, pk, rand(3, 3, 2).transpose(0, 2, 1),'
        " None, None, None, None, None, None, wk)\n"
        "p.run(pk, rand(3, 2, 3), None, None, None, np.empty((3, 1, 2, 8), f)[..., ::2], None,"
        " None, wk)",
        "ValueError: y must be C-contiguous",
    ),
    "rnn_read_only_output": (
        "p = plan(); pk = packed(p)[0]; y = np.empty((3, 1, 2, 4), f); y.flags.writeable = False\n"
        "p.run(pk, rand(3, 2, 3), None, None, None, y, None, None, work(p, 3, 2))",
        "TypeError",
    ),
    "rnn_huge_broadcast_x": (
        "p = plan(); pk = packed(p)[0]\n"
        "p.run(pk, huge((2**30, 2**20, 3)), None, None, None, None, None, None, np.empty(16, f))",
        "ValueError: x must be C-contiguous",
    ),
    "rnn_huge_empty_x": (  # no element, any extents: the work size is checked
        "p = plan(inp=0); pk = np.empty(p.packed_floats, f)\n"
        "p.pack(np.ones((1, 16, 0), f), rand(1, 16, 4), None, None, pk)\n"
        "p.run(pk, np.empty((2**40, 2**20, 0), f), None, None, None, None, None, None,"
        " np.empty(16, f))",
        "ValueError: unsupported",
    ),
    "rnn_empty_sequence": (  # no step: the final states are zero
        'p = plan(rev=(False, True)); pk = packed(p, dirs=2)[0]\n'
        "yh, yc = np.full((2, 2, 4), 7, f), np.full((2, 2, 4), 7, f)\n"
        "p.run(pk, np.ones((0, 2, 3), f), None, None, None, np.empty((0, 2, 2, 4), f), yh, yc,"
        " work(p, 0, 2), 256)\n"
        "assert (yh == 0).all() and (yc == 0).all()",
        "ok",
    ),
    "rnn_empty_batch": (
        "p = plan(layout=1); pk = packed(p)[0]\n"
        "p.run(pk, np.ones((0, 3, 3), f), np.zeros(0, np.int64), None, None,"
        " np.empty((0, 3, 1, 4), f), np.empty((0, 1, 4), f), None, work(p, 3, 0), 2**31 - 1)",
        "ok",
    ),
    "rnn_no_input_features": (  # H = tanh(H R^T + Wb + Rb), against numpy
        'p = plan("RNN", inp=0, hidden=5); pk = np.empty(p.packed_floats, f)\n'
        "r, b = rand(1, 5, 5), rand(1, 10)\n"
        "p.pack(np.ones((1, 5, 0), f), r, b, None, pk)\n"
        "y = np.empty((3, 1, 2, 5), f)\n"
        "p.run(pk, off((3, 2, 0)), None, None, None, y, None, None, work(p, 3, 2), 3)\n"
        "h = np.zeros((2, 5))\n"
        "for t in range(3):\n"
        "    h = np.tanh(h @ r[0].T.astype(float) + b[0, :5] + b[0, 5:])\n"
        "    assert np.allclose(y[t, 0], h, atol=1e-5), t",
        "ok",
    ),
    "rnn_extreme_threads": (
        'p = plan(rev=(False, True), hidden=64); pk = packed(p, hidden=64, dirs=2)[0]\n'
        "x = rand(30, 16, 3); want = np.empty((30, 2, 16, 64), f)\n"
        "p.run(pk, x, None, None, None, want, None, None, work(p, 30, 16), 1)\n"
        "for t in (-(2**31), 0, 2**31 - 1, 257):\n"
        "    y = np.empty_like(want)\n"
        "    p.run(pk, x, None, None, None, y, None, None, work(p, 30, 16), t)\n"
        "    assert (bits(y) == bits(want)).all(), t",
        "ok",
    ),
    # -- attention
    "attention_huge_head_count": (  # 2^20 query heads of one broadcast row on one key head
        "q = huge((1, 2**20, 1, 4)); k, v = rand(1, 1, 3, 4), rand(1, 1, 3, 4)\n"
        "y = np.empty((1, 2**20, 1, 4), f)\n"
        "N.attention(q, k, v, None, y, 0.5, isa, 2**31 - 1)\n"
        "s = 0.5 * k[0, 0].astype(float) @ np.ones(4); e = np.exp(s - s.max())\n"
        "assert np.allclose(y, e @ v[0, 0] / e.sum(), atol=1e-5)",
        "ok",
    ),
    "attention_huge_key_length": (
        "k = huge((1, 1, 2**40, 4))\n"
        "N.attention(rand(1, 1, 2, 4), k, k, None, np.empty((1, 1, 2, 4), f), 1.0, isa, 4)",
        "ValueError: unsupported",
    ),
    "attention_huge_head_size": (
        "q = huge((1, 1, 2, 2**40))\n"
        "N.attention(q, q, rand(1, 1, 2, 3), None, np.empty((1, 1, 2, 3), f), 1.0, isa, 4)",
        "ValueError: unsupported",
    ),
    "attention_huge_key_heads_no_query": (  # no query head: nothing to compute
        "k = huge((1, 2**40, 1, 1))\n"
        "N.attention(np.empty((1, 0, 1, 1), f), k, k, None, np.empty((1, 0, 1, 1), f), 1.0,"
        " isa, 4)",
        "ok",
    ),
    "attention_heads_not_a_multiple": (
        'raises(ValueError, "heads are not a multiple", N.attention, rand(1, 3, 4, 8),'
        " rand(1, 2, 3, 8), rand(1, 2, 3, 8), None, np.empty((1, 3, 4, 8), f), 1.0, isa, 2)\n"
        "N.attention(np.empty((1, 0, 4, 8), f), np.empty((1, 0, 3, 8), f),"
        " np.empty((1, 0, 3, 8), f), None, np.empty((1, 0, 4, 8), f), 1.0, isa, 2)",
        "ValueError: q's 0 heads are not a multiple of k's 0",
    ),
    "attention_empty": (  # no key: zeros (as a row masked everywhere); empty extents
        "def a(*shape):  # misaligned when empty: no element is read\n"
        "    return off(shape) if 0 in shape else rand(*shape)\n"
        "y = np.full((1, 2, 4, 8), np.nan, f)\n"
        "N.attention(rand(1, 2, 4, 8), np.empty((1, 2, 0, 8), f), np.empty((1, 2, 0, 8), f),"
        " np.empty((1, 1, 4, 0), f), y, 1.0, isa, 2)\n"
        "assert (y == 0).all()\n"
        "for b, h, n, m, d, dv in [(0, 2, 5, 5, 4, 4), (1, 2, 0, 5, 4, 4), (1, 2, 5, 5, 0, 4),"
        " (1, 2, 5, 5, 4, 0)]:\n"
        "    N.attention(a(b, h, n, d), a(b, h, m, d), a(b, h, m, dv), None, a(b, h, n, dv),"
        " 1.0, isa, 2)",
        "ok",
    ),
    "attention_mask_shapes": (
        "q, k = rand(2, 3, 5, 4), rand(2, 3, 7, 4); want, y = np.empty_like(q), np.empty_like(q)\n"
        "N.attention(q, k, k, None, want, 1.0, isa, 2)\n"
        "N.attention(q, k, k, huge((2, 3, 5, 7)) * 0, y, 1.0, isa, 2)\n"
        "assert np.allclose(y, want, atol=1e-6)\n"
        'raises(ValueError, "does not broadcast", N.attention, q, k, k, huge((2**20, 2**20, 1, 1)),'
        " y, 1.0, isa, 2)\n"
        "N.attention(q, k, k, np.zeros((2, 3, 5, 6), f), y, 1.0, isa, 2)",
        "ValueError: mask (2, 3, 5, 6) does not broadcast",
    ),
    "attention_misaligned": (
        "q = rand(1, 1, 2, 4); y = np.empty((1, 1, 2, 4), f)\n"
        "for args in [(off(q.shape), q, q, None, y), (q, off(q.shape), q, None, y),\n"
        "             (q, q, off(q.shape), None, y), (q, q, q, off((1, 1, 2, 2)), y),\n"
        "             (q, q, q, None, off(y.shape))]:\n"
        '    raises(ValueError, "must be an aligned float32 array", N.attention, *args, 1.0,'
        " isa, 2)",
        "ok",
    ),
    "attention_wrong_dtypes": (
        "q = rand(1, 1, 2, 4); y = np.empty((1, 1, 2, 4), f)\n"
        "for args in [(q.astype(np.float16), q, q, None, y), (q, q.astype(np.int32), q, None, y),\n"
        "             (q, q, q, np.zeros((1, 1, 2, 2), bool), y),\n"
        "             (q, q, q, None, y.astype(np.float64))]:\n"
        '    raises(TypeError, "float32", N.attention, *args, 1.0, isa, 2)',
        "ok",
    ),
    "attention_bad_outputs": (
        "q = rand(1, 2, 5, 4); y = np.empty_like(q)\n"
        'raises(ValueError, "share memory", N.attention, q, q, q, None,'
        " np.lib.stride_tricks.as_strided(y, y.shape, (0, 0, 16, 4)), 1.0, isa, 2)\n"
        'raises(ValueError, "overlap", N.attention, q, q.copy(), q.copy(), None, q, 1.0, isa, 2)\n'
        'raises(ValueError, "y must have shape", N.attention, q, q, q, None,'
        " np.empty((1, 2, 5, 5), f), 1.0, isa, 2)\n"
        'raises(ValueError, "4 dimension", N.attention, q[0], q[0], q[0], None, y[0], 1.0, isa,'
        " 2)\n"
        "N.attention(q, q, q, None, huge(q.shape), 1.0, isa, 2)",
        "TypeError",
    ),
    "attention_extreme_threads_and_scale": (
        "q = rand(3, 5, 33, 16); want = np.empty_like(q); y = np.empty_like(q)\n"
        "N.attention(q, q, q, None, want, 0.25, isa, 1)\n"
        "for t in (-(2**31), 0, 2**31 - 1, 257):\n"
        "    N.attention(q, q, q, None, y, 0.25, isa, t)\n"
        "    assert (bits(y) == bits(want)).all(), t\n"
        'N.attention(q, q, q, None, y, float("nan"), isa, 2)\n'
        "assert np.isnan(y).all()",
        "ok",
    ),
    # -- unary_fast
    "unary_fast_ranges": (
        "x = rand(100)\n"
        "for b, e in [(0, 2**62), (-1, 5), (2**63 - 1, -1), (-(2**63), -(2**63)), (50, 49),"
        " (0, -2)]:\n"
        '    raises(ValueError, "element range", N.unary_fast, "gelu", x, x, isa, b, e, 4)\n'
        'y = x.copy(); N.unary_fast("gelu", y, y, isa, 100, 100, 4)\n'
        "assert (bits(y) == bits(x)).all()",
        "ok",
    ),
    "unary_fast_empty": (
        'N.unary_fast("erf", np.zeros(0, f), np.zeros(0, f), isa, 0, -1, 2**31 - 1)\n'
        'N.unary_fast("erf", np.zeros((2**40, 0), f), np.zeros(0, f), isa, 0, 0, 4)\n'
        'N.unary_fast("erf", off((0,)), off((0,)), isa)',
        "ok",
    ),
    "unary_fast_huge_broadcast": (
        'N.unary_fast("gelu", huge((2**40,)), np.zeros(1, f), isa)',
        "ValueError: x must be C-contiguous",
    ),
    "unary_fast_misaligned": (
        'raises(ValueError, "x must be an aligned", N.unary_fast, "gelu", off((64,)),'
        " np.zeros(64, f), isa)\n"
        'N.unary_fast("gelu", np.zeros(64, f), off((64,)), isa)',
        "ValueError: out must be an aligned float32 array",
    ),
    "unary_fast_wrong_dtypes": (
        'raises(TypeError, "x must be a float32", N.unary_fast, "gelu", np.zeros(64, np.float16),'
        " np.zeros(64, f), isa)\n"
        'N.unary_fast("gelu", np.zeros(64, f), np.zeros(64, np.int32), isa)',
        "TypeError: out must be a float32 array",
    ),
    "unary_fast_strided": (
        'raises(ValueError, "C-contiguous", N.unary_fast, "gelu", np.zeros(128, f)[::2],'
        " np.zeros(64, f), isa)\n"
        'N.unary_fast("gelu", np.zeros(64, f), np.zeros(64, f)[::-1], isa)',
        "ValueError: out must be C-contiguous",
    ),
    "unary_fast_overlap_and_read_only": (
        'x = np.zeros(128, f); raises(ValueError, "overlap", N.unary_fast, "gelu", x[:64],'
        " x[1:65], isa)\n"
        "y = np.zeros(4, f); y.flags.writeable = False\n"
        'N.unary_fast("gelu", np.zeros(4, f), y, isa)',
        "TypeError",
    ),
    "unary_fast_extreme_threads": (
        "x = rand(300001) * 4; want = np.empty_like(x); y = np.empty_like(x)\n"
        'N.unary_fast("erf", x, want, isa, 0, -1, 1)\n'
        "for t in (-(2**31), 0, 2**31 - 1, 257, 3):\n"
        '    N.unary_fast("erf", x, y, isa, 0, -1, t)\n'
        "    assert (bits(y) == bits(want)).all(), t\n"
        "ref = np.array([math.erf(v) for v in x[::997].astype(float)])\n"
        "assert np.allclose(want[::997], ref, rtol=1e-6, atol=1e-7)",
        "ok",
    ),
    # -- layer_norm
    "layer_norm_empty": (
        "one = np.ones(1, f)\n"
        "for x, s in [(np.zeros((0, 5), f), np.ones(5, f)), (np.zeros((5, 0), f), np.ones(0, f)),\n"
        "             (np.zeros((5, 0), f), one), (np.empty((2**40, 0), f), one),\n"
        "             (np.empty((0, 2**40), f), one), (off((0, 8)), np.ones(8, f))]:\n"
        "    N.layer_norm(x, x, s, s, 1e-5, isa, 2**31 - 1)",
        "ok",
    ),
    "layer_norm_huge_broadcast": (
        "N.layer_norm(huge((2**40, 4)), np.zeros((1, 4), f), np.ones(4, f), None, 1e-5, isa, 2)",
        "ValueError: x must be C-contiguous",
    ),
    "layer_norm_broadcast_scale": (
        "x = rand(3, 8); N.layer_norm(x, np.empty_like(x), huge((8,)), None, 1e-5, isa, 2)",
        "ValueError: scale must be C-contiguous",
    ),
    "layer_norm_misaligned": (
        "x = rand(3, 8); s = np.ones(8, f)\n"
        "y = np.empty_like(x)\n"
        "for args in [(off((3, 8)), y, s, None), (x, off((3, 8)), s, None),\n"
        "             (x, y, off((8,)), None), (x, y, s, off((8,)))]:\n"
        '    raises(ValueError, "must be an aligned float32 array", N.layer_norm, *args, 1e-5,'
        " isa, 2)",
        "ok",
    ),
    "layer_norm_wrong_dtypes": (
        "x = rand(3, 8); s = np.ones(8, f)\n"
        "for args in [(x.astype(np.float64), np.empty_like(x), s, None),\n"
        "             (x, np.empty((3, 8), np.float64), s, None),\n"
        "             (x, np.empty_like(x), s.astype(np.float16), None),\n"
        "             (x, np.empty_like(x), s, s.astype(np.int64))]:\n"
        '    raises(TypeError, "float32", N.layer_norm, *args, 1e-5, isa, 2)',
        "ok",
    ),
    "layer_norm_shapes": (
        'raises(ValueError, "2 dimension", N.layer_norm, np.ones(8, f), np.ones(8, f),'
        " np.ones(8, f), None, 1e-5, isa, 2)\n"
        'raises(ValueError, "2 dimension", N.layer_norm, np.ones((2, 3, 8), f),'
        " np.ones((2, 3, 8), f), np.ones(8, f), None, 1e-5, isa, 2)\n"
        'raises(ValueError, "C-contiguous", N.layer_norm, np.ones((6, 8), f)[::2],'
        " np.ones((3, 8), f), np.ones(8, f), None, 1e-5, isa, 2)\n"
        "x = rand(3, 8); N.layer_norm(x, np.empty_like(x), np.ones(8, f), np.ones(7, f), 1e-5,"
        " isa, 2)",
        "ValueError: bias must have 8 elements or one, got 7",
    ),
    "layer_norm_overlap": (
        "x = rand(3, 8); y = np.empty_like(x)\n"
        'raises(ValueError, "overlap", N.layer_norm, x, y, y[0], None, 1e-5, isa, 2)\n'
        "buf = np.ones(40, f)\n"
        "N.layer_norm(buf[:24].reshape(3, 8), buf[8:32].reshape(3, 8), np.ones(8, f), None, 1e-5,"
        " isa, 2)",
        "ValueError: out must not overlap x unless it is x itself",
    ),
    "layer_norm_eps_and_threads": (  # against float64; eps -1: rows 0, 1 NaN, the rest finite
        "x = rand(1000, 384) * 3; x[0] = 1; x[1] /= 18; s, b = rand(384), rand(384)\n"
        "want = np.empty_like(x); y = np.empty_like(x)\n"
        "N.layer_norm(x, want, s, b, 1e-5, isa, 1)\n"
        "for t in (-(2**31), 0, 2**31 - 1, 257, 3):\n"
        "    N.layer_norm(x, y, s, b, 1e-5, isa, t)\n"
        "    assert (bits(y) == bits(want)).all(), t\n"
        "for eps in (1e-5, float('nan'), -1.0):\n"
        "    N.layer_norm(x, y, s, b, eps, isa, 2)\n"
        "    c = x - x.mean(-1, keepdims=True, dtype=float)\n"
        "    with np.errstate(invalid='ignore'):\n"
        "        ref = c / np.sqrt((c * c).mean(-1, keepdims=True) + eps) * s + b\n"
        "    assert np.allclose(y, ref, rtol=1e-4, atol=1e-4, equal_nan=True), eps\n"
        "assert np.isnan(y[:2]).all() and np.isfinite(y[2:]).all()",
        "ok",
    ),
    # -- softmax
    "softmax_empty": (
        "for x in [np.zeros((0, 5), f), np.zeros((5, 0), f), np.empty((2**40, 0), f),\n"
        "          np.empty((0, 2**40), f), off((0, 8))]:\n"
        "    N.softmax(x, x, isa, 2**31 - 1)",
        "ok",
    ),
    "softmax_huge_broadcast": (
        "N.softmax(huge((2**40, 4)), np.zeros((1, 4), f), isa, 2)",
        "ValueError: x must be C-contiguous",
    ),
    "softmax_misaligned_dtypes_shapes": (
        "x = rand(3, 8); y = np.empty_like(x)\n"
        'aligned = "must be an aligned float32 array"\n'
        "raises(ValueError, aligned, N.softmax, off((3, 8)), y, isa, 2)\n"
        "raises(ValueError, aligned, N.softmax, x, off((3, 8)), isa, 2)\n"
        'raises(TypeError, "float32", N.softmax, x.astype(np.float64), y, isa, 2)\n'
        'raises(ValueError, "2 dimension", N.softmax, np.ones(8, f), np.ones(8, f), isa, 2)\n'
        'raises(ValueError, "C-contiguous", N.softmax, np.ones((6, 8), f)[::2], y, isa, 2)\n'
        "N.softmax(x, np.empty((3, 7), f), isa, 2)",
        "ValueError: y must have x's shape",
    ),
    "softmax_overlap": (
        "buf = rand(40)\n"
        "N.softmax(buf[:24].reshape(3, 8), buf[8:32].reshape(3, 8), isa, 2)",
        "ValueError: out must not overlap x unless it is x itself",
    ),
    "softmax_values_and_threads": (  # against float64; rows of NaN, inf and -inf give NaN
        "x = rand(1000, 1001) * 30; x[0, 5] = np.nan; x[1, 7] = np.inf; x[2] = -np.inf\n"
        "want = np.empty_like(x); y = np.empty_like(x)\n"
        "N.softmax(x, want, isa, 1)\n"
        "for t in (-(2**31), 0, 2**31 - 1, 257, 3):\n"
        "    N.softmax(x, y, isa, t)\n"
        "    assert (bits(y) == bits(want)).all(), t\n"
        "d = x[3:].astype(float); e = np.exp(d - d.max(-1, keepdims=True))\n"
        "assert np.allclose(y[3:], e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-12)\n"
        "assert np.isnan(y[:3]).all() and np.isfinite(y[3:]).all()",
        "ok",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(NATIVE_CASES))
def test_native_entry_point_hostile_arguments(name: str) -> None:
    """RnnPlan, attention, unary_fast, layer_norm and softmax called directly with extreme sizes,
    broadcast (zero-stride) views of huge extents, empty arrays, misaligned, strided, read-only
    and wrongly typed arrays and extreme thread counts: a refusal or a checked result, each in
    a child process that must not die of a signal."""
    body, want = NATIVE_CASES[name]
    out = run_child(CASE_CHILD.format(body=textwrap.indent(body, "    ")))
    assert out.splitlines()[-1].startswith(want), out


def test_few_items_wake_few_workers() -> None:
    """A call of 4 items with threads=256 wakes 3 workers, not the 255 an earlier call started:
    the threads whose voluntary context switches moved are counted over 20 such calls (each
    woken worker sleeps again after its spin)."""
    out = run_child(
        NATIVE_CHILD
        + """
import time

def switches():
    out = {}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/status") as fh:
            for line in fh:
                if line.startswith("voluntary_ctxt_switches"):
                    out[tid] = int(line.split()[1])
    return out

big, x = np.ones(256 << 16, f), np.ones(4 << 16, f)  # unary's blocks are 2^16 elements
N.unary("exp", big, big, isa, 0, -1, 256)  # every worker started
time.sleep(0.3)
before = switches()
for _ in range(20):
    N.unary("exp", x, x, isa, 0, -1, 256)
    time.sleep(0.01)
time.sleep(0.3)
after = switches()
print(len(before), sum(after.get(t, n) != n for t, n in before.items()))
"""
    )
    threads, moved = map(int, out.split())
    assert threads >= 256, out  # the pool's 255 workers were there to wake
    assert moved <= 3 + 3, out  # 3 workers, this thread and some slack


def test_forked_child_runs_on_the_pool() -> None:
    """fork() while another thread runs a kernel on the pool: the child copied mutexes, condition
    variables and counters that name the parent's workers (it hung in the condition variable's
    broadcast); it now starts over and computes on workers of its own."""
    out = run_child(
        NATIVE_CHILD
        + """
import threading, time

stop = False

def busy():
    b = np.ones(64 << 16, f)
    while not stop:
        N.unary("exp", b, b, isa, 0, -1, 4)

thread = threading.Thread(target=busy)
thread.start()
time.sleep(0.2)
failed = 0
for _ in range(10):
    pid = os.fork()
    if pid == 0:
        x = np.full(8 << 16, 0.5, f)
        y = np.empty_like(x)
        N.unary("exp", x, y, isa, 0, -1, 4)
        os._exit(0 if np.allclose(y, np.exp(0.5)) and len(os.listdir("/proc/self/task")) > 1
                 else 3)
    for _ in range(200):  # 10 s
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            failed += status != 0
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        failed += 1
stop = True
thread.join()
print("failed", failed)
"""
    )
    assert out.split() == ["failed", "0"], out
