"""RE2 patterns Python's backtracking ``re`` could take exponential time on are refused when the
session is built (RegexFullMatch, com.microsoft Tokenizer), so that no model hangs the process;
the patterns accepted run fast on long hostile strings and agree with onnxruntime (RE2).

The checks that run patterns on long strings run in a subprocess with a timeout: a guard that
wrongly accepted an exponential pattern fails them instead of hanging the test run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tests._models import ort_session
from tests.ml.conftest import REASON

pytest.importorskip("graphrt_ops_ml", reason=REASON)

import graphrt
from graphrt.errors import SessionError
from tests.ml.test_strings import BASE, MS, B, S, model, refused, strings

ROOT = Path(__file__).resolve().parents[2]

#: Each matches one text in many ways under an outer repetition: 2^n paths for Python's re.
HOSTILE = [
    r"(a+)+$",
    r"(a|aa)*c",
    r"(a*)*b",
    r"(\w+\s?)+",
    r"(a|a)*b",
    r"(ab|[a]b)+c",
    r"(\d+,?)+x",
    r"(-?\d+)+x",
    r"(\w+\w+\.)+",
    r"(\w+\.\w*)+!",
    r"((\w+\.)+)*!",
    r"(.*,)*x",
    r"(a{1,5})+b",
    r"(a{1,2}){1,300}b",
    r"(?i)(k*\x{212a}*,)+x",
    r"(?:\w+\.(?:|))+!",
]

#: Accepted: the outer repetition's passes are cut one way (fixed length, or a delimiter).
SAFE = [
    r"\d+",
    r"[a-z]+@[a-z]+\.com",
    r"(ab)+",
    r"(\w+\s)+",
    r"\w+@(\w+\.)+\w+",
    r"(\d{1,3}\.){3}\d{1,3}",
    r"(?i)(\w+\.)+",
    r"(,\s*\d+)*",
    r"(a|bb)+",
    r"(ab(cd)?)+",
    r"(\b\w+\b\s)+",
    r"(?:cat|car)+",
    r"((\w+\.)+){1,2}",
]

SHORT_TEXTS = strings(
    ["", "a", "ab", "abab", "aab", "a.", "a.b.", "ab cd ", "1.2.3.4", ",1, 2", "bbabb",
     "abcdab", "catcar", "a@b.com", "x@y.z.w", "aaaa!", "A.b."]
)  # fmt: skip


def hostile_models(pattern: str):
    yield model("RegexFullMatch", [("x", S)], [("y", B)], pattern=pattern)
    yield model("Tokenizer", [("x", S)], [("y", S)], domain=MS, **BASE, tokenexp=pattern)
    yield model("Tokenizer", [("x", S)], [("y", S)], domain=MS, **BASE, separators=[" ", pattern])


@pytest.mark.parametrize("pattern", HOSTILE)
def test_hostile_patterns_are_refused_when_the_session_is_built(pattern: str) -> None:
    for m in hostile_models(pattern):
        refused(m, "unsupported", "exponential")
        with pytest.raises(SessionError) as info:
            graphrt.Session(m)
        assert repr(pattern) in str(info.value)
    # RE2 takes them (in linear time): the refusal is Python's engine's limit, not the model's
    ort_session(next(hostile_models(pattern)))


@pytest.mark.parametrize("pattern", SAFE)
def test_safe_patterns_are_accepted_and_match_onnxruntime(pattern: str) -> None:
    m = model("RegexFullMatch", [("x", S)], [("y", B)], pattern=pattern)
    got = graphrt.Session(m).run(None, {"x": SHORT_TEXTS})[0]
    want = ort_session(m).run(None, {"x": SHORT_TEXTS})[0]
    assert got.tolist() == want.tolist()


def run_isolated(code: str, timeout: float) -> str:
    """Run ``code`` in a fresh interpreter at the repository root; fail on error or timeout."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"no answer within {timeout} s: a pattern backtracks too long")
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


PRELUDE = """
    import numpy as np
    import graphrt
    from graphrt.errors import SessionError
    from tests._models import ort_session
    from tests.ml.test_strings import B, BASE, MS, S, model, strings
    """


def test_safe_patterns_run_fast_on_long_hostile_texts() -> None:
    """Strings of 4000 characters repeating the patterns' units, with an end that fails them:
    exponential for a nested pattern accepted by mistake, quick for the accepted ones."""
    code = (
        PRELUDE
        + f"""
    units = ["a", "ab", "a.", "a ", "1.", ",1", "cat", "a1,", "bb"]
    texts = strings([u * (4000 // len(u)) + t for u in units for t in ("", "!", " ", ".")])
    for pattern in {SAFE!r}:
        m = model("RegexFullMatch", [("x", S)], [("y", B)], pattern=pattern)
        got = graphrt.Session(m).run(None, {{"x": texts}})[0]
        want = ort_session(m).run(None, {{"x": texts}})[0]
        assert got.tolist() == want.tolist(), pattern
    print("ok")
    """
    )
    assert run_isolated(code, timeout=120).strip() == "ok"


def test_random_nested_patterns_are_refused_or_fast_and_match_onnxruntime() -> None:
    """Random patterns nesting repetitions and alternatives: each is refused (unsupported), or
    agrees with onnxruntime on short strings and answers on 300-character hostile ones."""
    code = (
        PRELUDE
        + """
    import random
    rng = random.Random(11)
    atoms = ["a", "b", ",", r"\\d", r"\\w", r"\\s", "[ab]", "[^,]", ".", r"\\.", "1", r"\\b", "^"]
    repeats = ["", "", "*", "+", "?", "{1,3}", "{2,}", "*?"]

    def pattern(depth=0):
        out = ""
        for _ in range(rng.randint(1, 3)):
            if rng.random() < 0.3 and depth < 3:
                inner = pattern(depth + 1)
                if rng.random() < 0.3:
                    inner += "|" + pattern(depth + 1)
                out += "(" + inner + ")" + rng.choice(["*", "+", "{2,}", "?", "", "{1,5}"])
            else:
                out += rng.choice(atoms) + rng.choice(repeats)
        return out

    units = ["a", "ab", "a,", "1", "a ", "1.", "aab", ", "]
    short = strings([u * k + t for u in units for k in (1, 3) for t in ("", "!", ",")] + [""])
    long = strings([u * (300 // len(u)) + t for u in units for t in ("", "!", ",", " ")])
    accepted = refused = 0
    for _ in range(250):
        p = pattern()
        m = model("RegexFullMatch", [("x", S)], [("y", B)], pattern=p)
        try:
            session = graphrt.Session(m)
        except SessionError as exc:
            assert exc.kind == "unsupported" and "exponential" in str(exc), (p, exc)
            refused += 1
            continue
        accepted += 1
        want = ort_session(m)
        for texts in (short, long):
            got = session.run(None, {"x": texts})[0]
            assert got.tolist() == want.run(None, {"x": texts})[0].tolist(), p
    assert accepted > 50 and refused > 30, (accepted, refused)
    print("ok")
    """
    )
    assert run_isolated(code, timeout=180).strip() == "ok"


def test_tokenizer_with_a_delimited_repetition_matches_onnxruntime() -> None:
    texts = strings(["a.b.c d.e", "x", "ab.cd.ef.!", "...."])
    m = model("Tokenizer", [("x", S)], [("y", S)], domain=MS, **BASE, tokenexp=r"(\w+\.)+")
    got = graphrt.Session(m).run(None, {"x": texts})[0]
    want = np.asarray(ort_session(m).run(None, {"x": texts})[0])
    assert got.tolist() == want.astype(object).tolist()


@pytest.mark.parametrize(
    ("pattern", "ok"),
    [
        (r"(ab{2}){500}", True),
        (r"(ab{2}){501}", False),
        (r"a{1001}", False),
        (r"(a{2,}){501}", False),
    ],
)
def test_repetition_counts_beyond_re2s_limit_are_invalid(pattern: str, ok: bool) -> None:
    """RE2 refuses counts above 1000, multiplied along nested repetitions."""
    m = model("RegexFullMatch", [("x", S)], [("y", B)], pattern=pattern)
    if ok:
        texts = strings(["abb" * 500, "abb" * 499])
        got = graphrt.Session(m).run(None, {"x": texts})[0]
        assert got.tolist() == ort_session(m).run(None, {"x": texts})[0].tolist()
    else:
        refused(m, "invalid_model", "1000")
        with pytest.raises(Exception):  # noqa: B017 (onnxruntime's own error type)
            ort_session(m)
