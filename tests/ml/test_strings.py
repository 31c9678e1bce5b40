"""The string operators of graphrt-ops-ml: StringNormalizer, StringSplit, StringConcat,
RegexFullMatch and com.microsoft Tokenizer, against onnxruntime (and onnx's reference
implementation where the spec's reference is the rule), then scikit-learn text pipelines
converted by skl2onnx.

onnxruntime's StringNormalizer needs a locale the C library knows: the cases compared with it
name "C.UTF-8" (onnxruntime's default "en_US.UTF-8" is not installed everywhere).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from tests._models import make_model, ort_session, tensor
from tests.ml.conftest import REASON

pytest.importorskip("graphrt_ops_ml", reason=REASON)

import graphrt
from graphrt.errors import SessionError

S, I64, B = TensorProto.STRING, TensorProto.INT64, TensorProto.BOOL
MS = "com.microsoft"


def strings(values) -> np.ndarray:
    return np.array(values, dtype=object)


def model(op, inputs, outputs, opset=20, domain="", **attrs):
    """One node; ``inputs``/``outputs`` are (name, elem type) pairs."""
    node = helper.make_node(op, [n for n, _ in inputs], [n for n, _ in outputs], domain=domain)
    node.attribute.extend(helper.make_attribute(k, v) for k, v in attrs.items())
    return make_model(
        [node],
        [tensor(n, t, None) for n, t in inputs],
        [tensor(n, t, None) for n, t in outputs],
        opset=opset,
        domains=(domain,) if domain else (),
    )


def both(m, feeds):
    """graphrt's outputs and onnxruntime's."""
    return graphrt.Session(m).run(None, feeds), ort_session(m).run(None, feeds)


def same(got, want) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.shape == w.shape, (g, w)
        if w.dtype.kind in "OUS":
            assert g.dtype == object
            assert g.tolist() == w.astype(object).tolist()
        else:
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)


def refused(m, kind: str, match: str | None = None) -> None:
    with pytest.raises(SessionError, match=match) as info:
        graphrt.Session(m)
    assert info.value.kind == kind


# -- StringNormalizer --------------------------------------------------------------------------

NORMALIZER_CASES = [
    (["Monday", "tuesday", "MONDAY"], dict(case_change_action="UPPER", stopwords=["monday"])),
    (
        ["Monday", "tuesday", "MONDAY"],
        dict(case_change_action="LOWER", stopwords=["monday"], is_case_sensitive=1),
    ),
    ([["Monday", "monday", "Friday"]], dict(case_change_action="LOWER", stopwords=["monday"])),
    (["Monday", "monday"], dict(case_change_action="LOWER", stopwords=["MONDAY"])),
    ([["Monday", "monday"]], dict(case_change_action="UPPER", stopwords=["monday"])),
    (["ÉCOLE", "Ça", "naïve", "日本語", "Ωmega"], dict(case_change_action="LOWER")),
    (["école", "ça", "naïve", "日本語", "ωmega"], dict(case_change_action="UPPER")),
    (["École", "école", "x"], dict(stopwords=["ÉCOLE"])),
    (["École", "école", "x"], dict(stopwords=["ÉCOLE"], is_case_sensitive=1)),
    (["a", "B"], dict()),
    (["a", "B"], dict(case_change_action="NONE", stopwords=["b"])),
]


@pytest.mark.parametrize(("x", "attrs"), NORMALIZER_CASES)
def test_string_normalizer_matches_onnxruntime(x, attrs) -> None:
    m = model("StringNormalizer", [("x", S)], [("y", S)], opset=10, locale="C.UTF-8", **attrs)
    same(*both(m, {"x": strings(x)}))


@pytest.mark.parametrize(
    ("x", "want"),
    [
        (strings([]), [""]),  # nothing kept: [""] of shape [1]
        (strings([[]]).reshape(1, 0), [[""]]),  # [1, 1] for [1, C]
        (strings(["monday", "Monday"]), [""]),
        (strings([["MONDAY"]]), [[""]]),
    ],
)
def test_string_normalizer_empty_output_shapes(x, want) -> None:
    m = model("StringNormalizer", [("x", S)], [("y", S)], opset=10, stopwords=["monday"])
    (got,) = graphrt.Session(m).run(None, {"x": x})
    (ref,) = ReferenceEvaluator(m).run(None, {"x": x})
    assert got.shape == np.asarray(ref).shape == np.asarray(want).shape
    assert got.tolist() == want


def test_string_normalizer_full_case_mapping_whatever_the_locale() -> None:
    """Python's str.upper/lower (Unicode's full mapping), the same for every locale."""
    x = strings(["Straße", "İstanbul", "ΣΑΣ", "I\u0131"])
    upper = ["STRASSE", "İSTANBUL", "ΣΑΣ", "II"]
    lower = ["straße", "i\u0307stanbul", "σας", "i\u0131"]
    for locale in (None, "en_US", "tr_TR", "de_DE.UTF-8"):
        extra = {} if locale is None else {"locale": locale}
        for action, want in (("UPPER", upper), ("LOWER", lower)):
            m = model(
                "StringNormalizer",
                [("x", S)],
                [("y", S)],
                opset=10,
                case_change_action=action,
                **extra,
            )
            assert graphrt.Session(m).run(None, {"x": x})[0].tolist() == want


def test_string_normalizer_refusals() -> None:
    bad = model("StringNormalizer", [("x", S)], [("y", S)], opset=10, case_change_action="lower")
    refused(bad, "invalid_model", "case_change_action")
    m = model("StringNormalizer", [("x", S)], [("y", S)], opset=10)
    with pytest.raises(SessionError) as info:
        graphrt.Session(m).run(None, {"x": strings([["a", "b"], ["c", "d"]])})
    assert info.value.kind == "invalid_input"


# -- StringSplit --------------------------------------------------------------------------------

SPLIT_INPUTS = [
    strings(["a,b,,c", "x", ",lead", "trail,", "日本,語"]),
    strings([["a;;b;;", "c"], ["é;;ü", ";;"]]),
    strings(["  a  b ", "x", "\t\u03b1\n\u03b2\u3000\u03b3 ", ""]),
    strings(["one two three four", "five"]),
    strings([]),
    strings([[], []]).reshape(2, 0),
    strings(["", ""]),
]
SPLIT_ATTRS = [
    dict(delimiter=","),
    dict(delimiter=";;"),
    dict(),
    dict(delimiter=""),
    dict(maxsplit=1),
    dict(delimiter=",", maxsplit=2),
    dict(maxsplit=0),
]


@pytest.mark.parametrize("attrs", SPLIT_ATTRS)
@pytest.mark.parametrize("x", SPLIT_INPUTS)
def test_string_split_matches_reference(x, attrs) -> None:
    m = model("StringSplit", [("x", S)], [("y", S), ("n", I64)], **attrs)
    got = graphrt.Session(m).run(None, {"x": x})
    same(got, ReferenceEvaluator(m).run(None, {"x": x}))


@pytest.mark.parametrize(
    ("x", "attrs"),
    [
        (strings(["a,b,,c", "x", "日本,語"]), dict(delimiter=",")),
        (strings([["a;;b;;c", "d"], ["é;;ü", ";;"]]), dict(delimiter=";;", maxsplit=1)),
        (strings(["a b c d", "x"]), dict(maxsplit=2)),
        (strings(["a b  c"]), dict(maxsplit=-1)),
        (strings([]), dict(delimiter=",")),
        (strings([[], []]).reshape(2, 0), dict()),
        (strings("a,b,,c"), dict(delimiter=",")),  # a scalar: [D] and a scalar count
    ],
)
def test_string_split_matches_onnxruntime(x, attrs) -> None:
    """Where onnxruntime reads the spec as the reference does (it splits whitespace on " "
    only and gives "" no substring; see StringSplit's docstring)."""
    m = model("StringSplit", [("x", S)], [("y", S), ("n", I64)], **attrs)
    same(*both(m, {"x": x}))


# -- StringConcat -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (strings(["a", "bc", ""]), strings(["x", "", "yz"])),
        (strings([["a"], ["b"]]), strings(["1", "2", "3"])),
        (strings("pre-"), strings([["日本", "é"], ["", "Ω"]])),
        (strings("a"), strings("b")),
        (strings([]), strings("x")),
        (strings([[], []]).reshape(2, 0), strings(["q"])),
    ],
)
def test_string_concat_matches_onnxruntime(a, b) -> None:
    m = model("StringConcat", [("a", S), ("b", S)], [("y", S)])
    same(*both(m, {"a": a, "b": b}))


def test_string_concat_refuses_shapes_that_do_not_broadcast() -> None:
    m = model("StringConcat", [("a", S), ("b", S)], [("y", S)])
    with pytest.raises(SessionError):
        graphrt.Session(m).run(None, {"a": strings(["a", "b"]), "b": strings(["a", "b", "c"])})


# -- RegexFullMatch -----------------------------------------------------------------------------

REGEX_TEXTS = strings(
    [
        "", "a", "abc", "ABC", "a1", "é1", "١٢", "a_b", "a b", "a\tb", "a\x0bb", "x\n",
        "foo@bar.com", "user@mail.example.org", "日本語", "Éé", "{,3}", "a.b", "aaa",
        "k", "\u212a", "ss", "ß",
    ]
)  # fmt: skip
PATTERNS = [
    r"a",
    r"\w+",
    r"\d+",
    r"\D+",
    r"\w\d",
    r"[\w\s]+",
    r"a\sb",
    r"\S+",
    r"a\b.*",
    r"\ba\B\w+",
    r"[[:alpha:]]+",
    r"[[:alnum:]_]+",
    r"[[:space:]x]+\n?",
    r"[^[:digit:]]*",
    r"(?i)abc|éé",
    r"x(?i)abc|ABC",
    r"(?i:a)BC|a(?i)b(c)",
    r"[a-z]+@[a-z]+\.(com|org)",
    r"\w+@(\w+\.)+\w+",
    r"\x{65e5}\x{672c}.",
    r"\Qa.b\E",
    r"{,3}",
    r"a{2,3}",
    r"a*?",
    r"(?U)a+",
    r"(?P<x>a)(?<y>b)c",
    r"\Aabc\z",
    r"abc$",
    r"x$\n?",  # RE2's $ is the end of the text only, Python's also before a final newline
    r"(?m)x$\n?",
    r"^a.*",
    r"(?s)x.",
    r"x.",
    r"[^a]+",
    r"(?i)k",
    r"(?i)ss",
    r"\0141",
    r"[\x{3b1}-\x{3c9}]+",
    r"[a-c&&b]+",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_regex_full_match_matches_onnxruntime(pattern: str) -> None:
    m = model("RegexFullMatch", [("x", S)], [("y", B)], pattern=pattern)
    same(*both(m, {"x": REGEX_TEXTS}))
    same(*both(m, {"x": REGEX_TEXTS.reshape(1, -1, 1)[:, :0]}))  # empty


@pytest.mark.parametrize(
    ("pattern", "kind", "match"),
    [
        (r"(a)\1", "invalid_model", "backreference"),
        (r"a(?=b)", "invalid_model", "lookaround"),
        (r"a(?<!b)", "invalid_model", "lookaround"),
        (r"(?>a)", "invalid_model", "RE2"),
        (r"a*+", "invalid_model", "possessive"),
        (r"a\Z", "invalid_model", "escape"),
        (r"(a", "invalid_model", "missing"),
        (r"[a", "invalid_model", "missing"),
        (r"\pL+", "unsupported", "Unicode class"),
        (r"\p{Greek}", "unsupported", "Unicode class"),
        (r"[\D]", "unsupported", "bracket"),
        (r"[[:^alpha:]]", "unsupported", "POSIX"),
    ],
)
def test_regex_full_match_refusals(pattern: str, kind: str, match: str) -> None:
    m = model("RegexFullMatch", [("x", S)], [("y", B)], pattern=pattern)
    refused(m, kind, match)
    if kind == "invalid_model":  # RE2 refuses these too
        with pytest.raises(Exception):  # noqa: B017 (onnxruntime's own error type)
            ort_session(m)


# -- com.microsoft Tokenizer --------------------------------------------------------------------

BASE = dict(mark=0, pad_value="#", mincharnum=1)
TOKENIZER_CASES = [
    (["Hello World", "I love  computer science !"], dict(separators=[" "], **BASE)),
    (["Hello World", "I love"], dict(separators=[" "], mark=1, pad_value="<p>", mincharnum=1)),
    ([["a b", "c"], ["d e f", ""]], dict(separators=[" "], **BASE)),
    ([["a b", "c"], ["d e f", ""]], dict(separators=[" "], mark=1, pad_value="", mincharnum=1)),
    (["", ""], dict(separators=[" "], **BASE)),
    (["", ""], dict(separators=[" "], mark=1, pad_value="#", mincharnum=1)),
    ([["", ""], ["", "a"]], dict(separators=[" "], mark=1, pad_value="#", mincharnum=1)),
    (np.zeros((0,), object), dict(separators=[" "], **BASE)),
    (np.zeros((2, 0), object), dict(separators=[" "], **BASE)),
    (np.zeros((0, 3), object), dict(tokenexp="a", **BASE)),
    (["héllo wörld", "ab", "日本語"], dict(separators=[""], **BASE)),
    (["abc", "x"], dict(separators=[""], mark=1, pad_value="#", mincharnum=1)),
    (["ab cd, ef;g", "x"], dict(separators=[" ", ",", ";"], **BASE)),
    (["ab cd, ef;g", "x"], dict(separators=[" ", ", "], **BASE)),
    (["ab cd, ef;g", "x"], dict(separators=[" ", ", "], mark=0, pad_value="#", mincharnum=2)),
    (["a-b_c", "x"], dict(separators=["-b_", "b"], **BASE)),
    (["a-b_c", "x"], dict(separators=["b", "-b_"], **BASE)),
    (["xAy", "ok"], dict(separators=["A", "Ay"], **BASE)),
    (["xAy", "ok"], dict(separators=["Ay", "A"], **BASE)),
    (["abc", "x"], dict(separators=["a|ab"], **BASE)),
    (["ab  c", "x"], dict(separators=[" *"], **BASE)),
    (["ab  c", "x"], dict(separators=[" | +"], **BASE)),
    (["zabxy", "xx"], dict(separators=[" ", "ab|c*"], **BASE)),
    (["a1b22c", "x"], dict(separators=["[0-9]"], **BASE)),
    (["a\tb\nc d\x0be"], dict(separators=[r"\s"], **BASE)),
    (["é ab", "x"], dict(separators=[" "], mark=0, pad_value="#", mincharnum=2)),
    (["a", "ok"], dict(separators=[" "], mark=1, pad_value="#", mincharnum=2)),
    (["a", "b"], dict(separators=[" "], mark=1, pad_value="#", mincharnum=3)),
    (["a b"], dict(separators=[" "], tokenexp="a", **BASE)),
    (["x\x02y"], dict(separators=[" "], mark=1, pad_value="", mincharnum=1)),
    (["ab cd, ef;g a", "xyz"], dict(tokenexp="[a-z]+", **BASE)),
    (["ab cd, ef;g a", "xyz"], dict(tokenexp="[a-z]+", mark=0, pad_value="#", mincharnum=2)),
    (["the Cat sat_on 12 mats", "ok", "Über café"], dict(tokenexp=r"\b\w\w+\b", **BASE)),
    (["the Cat sat_on 12 mats", "Über café"], dict(tokenexp="[a-zA-Z0-9_]+", **BASE)),
    (["aaa", "ok", "baab"], dict(tokenexp="a*", **BASE)),
    (["aa", "x"], dict(tokenexp="a*?", **BASE)),
    (["ab", "abab", "x"], dict(tokenexp="a|ab", **BASE)),
    (["ab cd"], dict(tokenexp="(b)", **BASE)),
    (["ab cd"], dict(tokenexp=r"\bc", **BASE)),
    (["aab aaab"], dict(tokenexp="a*(ab)?", **BASE)),
    (["abcabc xx"], dict(tokenexp="(abc)+|x", mark=1, pad_value="-", mincharnum=1)),
    (["aé b", "x"], dict(tokenexp=r"[[:alpha:]]+", **BASE)),
    (["a\nb", "\n", "a\n\nb"], dict(tokenexp=".", **BASE)),  # characters, newlines too
    (["a\nb", "\n", "a\n\nb"], dict(tokenexp=".+", **BASE)),
    (["a\nb", "\n", "a\n\nb"], dict(separators=["."], **BASE)),
    (["b  aab", "x"], dict(tokenexp=r"(?i)\Wa*?\B", **BASE)),  # longest, \B at its end
    (["aaa", "ab a"], dict(tokenexp="^a", **BASE)),
    (["aab", "xab"], dict(tokenexp="^a|b", **BASE)),
    (["abc", "xyz"], dict(tokenexp=r"\Bb", **BASE)),
    (["a  b"], dict(tokenexp=" ?$| ", **BASE)),
    (["ab", "a b", ""], dict(separators=["^"], **BASE)),  # empty separator match: 1 char
    (["ab", "a b", ""], dict(separators=["$"], **BASE)),
    (["ab", "a b", "x"], dict(separators=[r"\b"], **BASE)),
    (["ab", "a b", "x"], dict(separators=[r"\B"], **BASE)),
    (["ab", "a b", "x"], dict(separators=["b*"], **BASE)),
    (["ab", "a b", "x", "b", "bb"], dict(separators=["b*$"], **BASE)),
    (["ab", "a b", "x", "b", "bb", "ba", "cba"], dict(separators=["^b*"], **BASE)),
    (["ab", "a b", "x", "b", "bab", "ba"], dict(separators=["b|$"], **BASE)),
    (["a,b", "a,,b", "a,b,", ",a"], dict(separators=[",|^"], **BASE)),
    (["ab cd", " x"], dict(separators=[" ", "^c"], **BASE)),  # each piece is a text
]


@pytest.mark.parametrize(("x", "attrs"), TOKENIZER_CASES)
def test_tokenizer_matches_onnxruntime(x, attrs) -> None:
    m = model("Tokenizer", [("x", S)], [("y", S)], domain=MS, **attrs)
    same(*both(m, {"x": strings(x)}))


def test_tokenizer_random_texts_match_onnxruntime() -> None:
    rs = np.random.RandomState(7)
    alphabet = list("ab c,;.-é日") + ["  ", "ab", "\t"]
    texts = strings(["".join(rs.choice(alphabet, rs.randint(0, 14))) for _ in range(120)]).reshape(
        30, 4
    )
    configs = [
        dict(separators=[" "]),
        dict(separators=[" +", ",", ";"]),
        dict(separators=["[,;.]", " "]),
        dict(separators=["b c", "a"]),
        dict(tokenexp="[a-c]+"),
        dict(tokenexp=r"\w+"),
        dict(tokenexp="ab|b c|c"),
        dict(tokenexp="[^ ,;]+"),
        dict(tokenexp="a?b*"),
    ]
    for config in configs:
        for mark, minchars in ((0, 1), (1, 2)):
            m = model(
                "Tokenizer",
                [("x", S)],
                [("y", S)],
                domain=MS,
                mark=mark,
                mincharnum=minchars,
                pad_value="#",
                **config,
            )
            same(*both(m, {"x": texts}))
            same(*both(m, {"x": texts[0]}))


_ATOMS = [
    "a", "b", "é", r"\d", r"\w", r"\s", r"\W", r"\D", r"\S", ".", "[ab]", "[^a]",
    "[[:alpha:]]", "[[:digit:]x]", r"[\d_]", r"\b", r"\B", "^", "$", "(?i:a)", r"\x{e9}",
    r"\Qa.\E", "[a-cé]", r"\.", "1", "_", " ", r"\n", "(?m)$", "(?s).", "(?m:^a)", "(?-m:$)",
]  # fmt: skip
_REPEATS = ["", "", "*", "+", "?", "{1,2}", "*?", "+?"]


def random_pattern(rng, depth: int = 0) -> str:
    """A random RE2 pattern of the features _re2 maps: classes, assertions, groups,
    alternation, flags in mid-pattern, lazy and bounded repeats.  Groups are not repeated
    without bound: Python's backtracking takes exponential time on nested unbounded repeats,
    where RE2 takes linear time (a limit of running RE2 patterns with ``re``)."""
    out = ""
    for _ in range(rng.randint(1, 3)):
        r = rng.random()
        if r < 0.15 and depth < 2:
            atom = "(" + random_pattern(rng, depth + 1) + ")" + rng.choice(["", "?", "{1,2}"])
        elif r < 0.22 and depth < 2:
            atom = f"(?:{random_pattern(rng, depth + 1)}|{random_pattern(rng, depth + 1)})"
            atom += rng.choice(["", "?", "{1,2}"])
        else:
            atom = rng.choice(_ATOMS) + rng.choice(_REPEATS)
        out += atom
    if rng.random() < 0.1:
        out = "(?i)" + out
    if rng.random() < 0.05:
        out += "(?i)" + rng.choice(_ATOMS) + "|B"
    return out


def ort_or_none(m):
    try:
        return ort_session(m)
    except Exception:  # onnxruntime's own error type: RE2 refused the pattern
        return None


FUZZ_TEXTS = strings(
    ["", "a", "ab", "aé", "A", "Ab", "1", "a1", "\u0661", "a b", "a\tb", "_", "a.", "é", "É", "ba",
     "aab", "a_1", " ", "ab\n", "a\nb", "\n", "a\n\n", "\u00a0"]
)  # fmt: skip


def test_regex_full_match_random_patterns_match_onnxruntime() -> None:
    import random

    rng = random.Random(3)
    for _ in range(300):
        pattern = random_pattern(rng)
        m = model("RegexFullMatch", [("x", S)], [("y", B)], pattern=pattern)
        ort = ort_or_none(m)
        if ort is None:
            refused(m, "invalid_model")
            continue
        got = graphrt.Session(m).run(None, {"x": FUZZ_TEXTS})
        assert got[0].tolist() == ort.run(None, {"x": FUZZ_TEXTS})[0].tolist(), pattern


def test_tokenizer_random_patterns_match_onnxruntime() -> None:
    import random

    from tests._versions import onnxruntime_release

    if onnxruntime_release() < (1, 21):
        pytest.skip(
            "onnxruntime < 1.21 (tox -e numpy1) spends minutes in its Tokenizer on some of "
            "these random patterns: the oracle, not graphrt; the default environment compares"
        )

    rng = random.Random(5)
    rs = np.random.RandomState(5)
    alphabet = list("ab é1_.\n") + ["ab", "  "]
    texts = strings(["".join(rs.choice(alphabet, rs.randint(0, 10))) for _ in range(40)])
    compared = 0
    for _ in range(300):
        pattern = random_pattern(rng)
        mode = dict(separators=[pattern]) if rng.random() < 0.3 else dict(tokenexp=pattern)
        m = model("Tokenizer", [("x", S)], [("y", S)], domain=MS, **BASE, **mode)
        ort = ort_or_none(m)
        if ort is None:
            refused(m, "invalid_model")
            continue
        try:
            want = ort.run(None, {"x": texts})[0]
        except Exception:  # an empty separator match cut a multi-byte character (text.py)
            assert "separators" in mode and "é" in "".join(texts)
            continue
        got = graphrt.Session(m).run(None, {"x": texts})[0]
        assert got.shape == want.shape and got.tolist() == want.tolist(), mode
        compared += 1
    assert compared > 250


@pytest.mark.parametrize(
    ("attrs", "kind"),
    [
        (dict(mark=0, pad_value="#", mincharnum=1), "invalid_model"),  # neither mode
        (dict(tokenexp=".", mark=0, pad_value="#", mincharnum=2), "invalid_model"),
        (dict(tokenexp="", mark=0, pad_value="#", mincharnum=1), "invalid_model"),
        (dict(separators=[" "], mark=0, pad_value="#", mincharnum=0), "invalid_model"),
        (dict(separators=[""], mark=0, pad_value="#", mincharnum=2), "invalid_model"),
        (dict(separators=[" "], mark=0, pad_value="#"), "invalid_model"),
        (dict(tokenexp=r"(a)\1", mark=0, pad_value="#", mincharnum=1), "invalid_model"),
        (dict(tokenexp=r"\pL+", mark=0, pad_value="#", mincharnum=1), "unsupported"),
        (dict(tokenexp=r"(?U)a+", mark=0, pad_value="#", mincharnum=1), "unsupported"),
    ],
)
def test_tokenizer_refusals(attrs, kind) -> None:
    refused(model("Tokenizer", [("x", S)], [("y", S)], domain=MS, **attrs), kind)


def test_tokenizer_refuses_three_dimensional_input() -> None:
    m = model("Tokenizer", [("x", S)], [("y", S)], domain=MS, separators=[" "], **BASE)
    with pytest.raises(SessionError) as info:
        graphrt.Session(m).run(None, {"x": strings([[["a"]]])})
    assert info.value.kind == "invalid_input"


# -- scikit-learn text pipelines ----------------------------------------------------------------

WORDS = (
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi "
    "rho sigma tau upsilon phi chi psi omega Über café naïve Ωmega 日本 a I"
).split()


def corpus(n: int, seed: int) -> list[str]:
    rs = np.random.RandomState(seed)
    docs = []
    for _ in range(n):
        words = rs.choice(WORDS, rs.randint(0, 14))
        seps = rs.choice([" ", "  ", ", ", ". ", "-", "\t"], len(words))
        docs.append("".join(w + s for w, s in zip(words, seps)).strip())
    return docs


@pytest.fixture(scope="module")
def training():
    docs = corpus(300, 0)
    labels = np.array(
        [("alpha" in d) + ("beta" in d or "Über" in d) + ("omega" in d) for d in docs]
    )
    return docs, labels


@pytest.mark.parametrize("vectorizer", ["tfidf", "count"])
def test_sklearn_text_pipeline_matches_onnxruntime(training, vectorizer) -> None:
    pytest.importorskip("sklearn", reason="scikit-learn is not installed")
    pytest.importorskip("skl2onnx", reason="skl2onnx is not installed")
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import StringTensorType
    from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    docs, labels = training
    vec = (
        TfidfVectorizer(ngram_range=(1, 2)) if vectorizer == "tfidf" else CountVectorizer(min_df=2)
    )
    clf = LogisticRegression(max_iter=500)
    pipe = make_pipeline(vec, clf).fit(docs, labels)
    options = {id(vec): {"locale": "C.UTF-8"}, id(clf): {"zipmap": False}}
    onx = to_onnx(
        pipe,
        initial_types=[("text", StringTensorType([None, 1]))],
        options=options,
        target_opset={"": 17, "ai.onnx.ml": 3},
    )
    ops = {n.op_type for n in onx.graph.node}
    assert {"StringNormalizer", "Tokenizer", "TfIdfVectorizer"} <= ops
    sess, ort = graphrt.Session(onx), ort_session(onx)
    test_docs = corpus(500, 1)
    for batch in (test_docs[:1], test_docs):
        x = strings(batch).reshape(-1, 1)
        got, want = sess.run(None, {"text": x}), ort.run(None, {"text": x})
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-7)
    assert len(set(want[0].tolist())) > 1  # the labels are not all one class


def test_string_operators_run_in_exact_mode() -> None:
    """No floating point: exact sessions take them and give the default mode's results."""
    nodes = [
        helper.make_node("StringNormalizer", ["x"], ["low"], case_change_action="LOWER"),
        helper.make_node("StringConcat", ["low", "x"], ["cat"]),
        helper.make_node("RegexFullMatch", ["cat"], ["hit"], pattern=r"[a-z]+\w*"),
        helper.make_node("StringSplit", ["cat"], ["parts", "n"], delimiter="b"),
        helper.make_node(
            "Tokenizer", ["x"], ["tok"], domain=MS, tokenexp="[a-z]+", **BASE
        ),
    ]  # fmt: skip
    m = make_model(
        nodes,
        [tensor("x", S, None)],
        [tensor(n, t, None) for n, t in [("hit", B), ("parts", S), ("n", I64), ("tok", S)]],
        opset=20,
        domains=(MS,),
    )
    x = strings(["Abc", "x Y", "日本b"])
    exact = graphrt.Session(m, mode="exact").run(None, {"x": x})
    fast = graphrt.Session(m).run(None, {"x": x})
    same(exact, fast)
    assert exact[0].tolist() == [True, False, False]
