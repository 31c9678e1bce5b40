"""RE2 patterns (RegexFullMatch, com.microsoft Tokenizer) rewritten for Python's ``re``.

ONNX names RE2's syntax; Python's ``re`` reads most of it the same way, and this module rewrites
what it reads differently, refusing what it cannot map:

- ``\\d \\w \\s \\b`` and the POSIX classes ``[[:alpha:]]`` are ASCII in RE2 (Python's are
  Unicode): they become explicit ASCII sets (``\\s`` is ``[\\t\\n\\f\\r ]``, without ``\\v``);
- ``$`` outside multiline mode becomes ``\\Z`` (Python's ``$`` also matches before a final
  newline), ``\\z`` becomes ``\\Z``; ``\\x{10FFFF}``, ``\\Q...\\E`` and ``\\0oo`` become
  escaped literals, ``(?<name>`` becomes ``(?P<name>``, a ``{`` not starting a repetition is a
  literal;
- a flag group ``(?i)`` after the start applies, as in RE2, to the rest of its group: it becomes
  a scoped group ``(?i:...)`` closed at each ``|`` and reopened after it;
- what RE2 itself refuses (backreferences, lookaround, atomic groups, possessive repeats,
  ``\\Z``, ``(?#``, unknown escapes, repetition counts above 1000, also when nested counts are
  multiplied) is an invalid model, as onnxruntime's RE2 refuses it;
- what RE2 accepts and ``re`` cannot express here (``\\p{Greek}`` classes, ``\\C``, a negated
  ``\\D \\W \\S`` or ``[:^alpha:]`` inside a bracket class, the ungreedy flag ``U`` where
  greediness matters) is refused as unsupported.

RE2 matches in linear time; Python's ``re`` backtracks, so a pattern repeating a body that
matches one text in many ways (``(a+)+``, ``(a|aa)*``) could take exponential time on a long
string it does not match: ``_re2_guard`` refuses those as unsupported (its docstring has the
rule), so that no model hangs the process.
"""

from __future__ import annotations

import re

from ._re2_guard import backtracking_risk, repeat_size

_WORD = "0-9A-Za-z_"
_SPACE = "\\t\\n\\f\\r "
#: Escapes standing for ASCII sets: (set body, negated).
_SETS = {
    "d": ("0-9", False),
    "D": ("0-9", True),
    "w": (_WORD, False),
    "W": (_WORD, True),
    "s": (_SPACE, False),
    "S": (_SPACE, True),
}
_POSIX = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "ascii": "\\x00-\\x7f",
    "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\x0b\\f\\r ",
    "upper": "A-Z",
    "word": _WORD,
    "xdigit": "0-9A-Fa-f",
}
_BOUNDARY = f"(?:(?<=[{_WORD}])(?![{_WORD}])|(?<![{_WORD}])(?=[{_WORD}]))"
_NOT_BOUNDARY = f"(?:(?<=[{_WORD}])(?=[{_WORD}])|(?<![{_WORD}])(?![{_WORD}]))"
_KEPT_LETTERS = set("afnrtvA")  # escapes both read alike
_MAX_REPEAT = 1000  # RE2's limit on a count, and on counts of nested repetitions multiplied
_REPEAT = re.compile(r"\{(\d+)(,(\d*))?\}")


class PatternError(ValueError):
    """A pattern refused: ``kind`` is "invalid_model" (RE2 refuses it too) or "unsupported"."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def _invalid(pattern: str, why: str) -> PatternError:
    return PatternError(f"invalid RE2 pattern {pattern!r}: {why}", "invalid_model")


def _unsupported(pattern: str, why: str) -> PatternError:
    return PatternError(
        f"RE2 pattern {pattern!r} cannot be run with Python's re: {why}", "unsupported"
    )


class _Translator:
    def __init__(self, pattern: str, greedy_matters: bool) -> None:
        self.p = pattern
        self.greedy_matters = greedy_matters
        self.out: list[str] = []
        # per open group: the flags of the scoped groups opened by mid-group flag groups
        self.frames: list[list[str]] = [[]]
        self.multiline = [False]  # per open group: whether (?m) is on
        self.i = 0

    def run(self) -> str:
        p = self.p
        while self.i < len(p):
            c = p[self.i]
            if c == "\\":
                self.out.append(self._escape(in_class=False))
            elif c == "[":
                self._bracket()
            elif c == "(":
                self._group()
            elif c == ")":
                self._close_scoped()
                if len(self.frames) == 1:
                    raise _invalid(p, "unmatched )")
                self.frames.pop()
                self.multiline.pop()
                self.out.append(")")
                self.i += 1
            elif c == "|":
                scoped = self.frames[-1]
                self._close_scoped()
                self.out.append("|")
                for flags in scoped:
                    self.out.append(f"(?{flags}:")
                self.frames[-1] = scoped
                self.i += 1
            elif c == "{":
                m = _REPEAT.match(p, self.i)
                if m is None:
                    self.out.append("\\{")
                    self.i += 1
                else:
                    self.out.append(m.group(0))
                    self.i = m.end()
                    self._after_repeat()
            elif c in "^$":
                # grouped, as every assertion here: RE2 may repeat one, Python may not
                multiline = self.multiline[-1]
                self.out.append(f"(?:{c})" if c == "^" or multiline else "(?:\\Z)")
                self.i += 1
            elif c in "*+?":
                self.out.append(c)
                self.i += 1
                self._after_repeat()
            else:
                self.out.append(c)
                self.i += 1
        self._close_scoped()
        if len(self.frames) != 1:
            raise _invalid(p, "missing )")
        return "".join(self.out)

    def _after_repeat(self) -> None:
        p = self.p
        if self.i < len(p) and p[self.i] == "+":
            raise _invalid(p, "possessive repetition is not RE2")
        if self.i < len(p) and p[self.i] == "?":
            self.out.append("?")
            self.i += 1

    def _close_scoped(self) -> None:
        self.out.append(")" * len(self.frames[-1]))
        self.frames[-1] = []

    def _group(self) -> None:
        p, i = self.p, self.i
        if not p.startswith("(?", i):
            self.frames.append([])
            self.multiline.append(self.multiline[-1])
            self.out.append("(")
            self.i += 1
            return
        rest = p[i + 2 : i + 4]
        if rest.startswith(("=", "!", "<=", "<!")):
            raise _invalid(p, "lookaround is not RE2")
        if rest.startswith((">", "#", "P=", "P>")):
            raise _invalid(p, f"(?{rest[0]} is not RE2")
        if rest.startswith(("P<", "<")):
            start = i + (4 if rest.startswith("P") else 3)
            end = p.find(">", start)
            if end < 0:
                raise _invalid(p, "unterminated group name")
            self.frames.append([])
            self.multiline.append(self.multiline[-1])
            self.out.append(f"(?P<{p[start:end]}>")
            self.i = end + 1
            return
        m = re.compile(r"\(\?([a-zA-Z]*)(-[a-zA-Z]*)?([:)])").match(p, i)
        if m is None:
            raise _invalid(p, "unknown group syntax")
        on, off = m.group(1), (m.group(2) or "-")[1:]
        bad = sorted(set(on + off) - set("imsU"))
        if bad:
            raise _invalid(p, f"unknown flag {bad[0]!r}")
        if "U" in on + off:
            if self.greedy_matters:
                raise _unsupported(p, "the ungreedy flag U has no Python equivalent")
            on, off = on.replace("U", ""), off.replace("U", "")
        flags = on + (f"-{off}" if off else "")
        self.i = m.end()
        multiline = ("m" in on or self.multiline[-1]) and "m" not in off
        if m.group(3) == ":":
            self.frames.append([])
            self.multiline.append(multiline)
            self.out.append(f"(?{flags}:")
        elif not flags:
            pass
        elif not self.out and len(self.frames) == 1 and not off:
            self.multiline[-1] = multiline
            self.out.append(f"(?{flags})")  # leading global flags: Python's own form
        else:
            self.multiline[-1] = multiline
            self.frames[-1].append(flags)
            self.out.append(f"(?{flags}:")

    def _bracket(self) -> None:
        p = self.p
        self.i += 1
        parts = ["["]
        if p.startswith("^", self.i):
            parts.append("^")
            self.i += 1
        first = True
        while True:
            if self.i >= len(p):
                raise _invalid(p, "missing ]")
            c = p[self.i]
            if c == "]" and not first:
                self.i += 1
                break
            first = False
            if c == "\\":
                parts.append(self._escape(in_class=True))
            elif c == "[" and p.startswith("[:", self.i):
                end = p.find(":]", self.i + 2)
                if end < 0:
                    raise _invalid(p, "unterminated POSIX class")
                name = p[self.i + 2 : end]
                if name.startswith("^"):
                    raise _unsupported(p, f"negated POSIX class [:{name}:] inside a set")
                if name not in _POSIX:
                    raise _invalid(p, f"unknown POSIX class [:{name}:]")
                parts.append(_POSIX[name])
                self.i = end + 2
            elif c in "[&~|":
                parts.append("\\" + c)  # literal in RE2; Python warns of nested-set syntax
                self.i += 1
            else:
                parts.append(c)
                self.i += 1
        parts.append("]")
        self.out.append("".join(parts))

    def _escape(self, in_class: bool) -> str:
        p = self.p
        if self.i + 1 >= len(p):
            raise _invalid(p, "trailing backslash")
        c = p[self.i + 1]
        self.i += 2
        if c in _SETS:
            body, negated = _SETS[c]
            if not in_class:
                return f"[^{body}]" if negated else f"[{body}]"
            if negated:
                raise _unsupported(p, f"\\{c} inside a bracket class")
            return body
        if c in "pP":
            raise _unsupported(p, f"Unicode class \\{c}")
        if c == "C":
            raise _unsupported(p, "\\C (any byte)")
        if c == "Q":
            end = p.find("\\E", self.i)
            end = len(p) if end < 0 else end
            text = p[self.i : end]
            self.i = end + 2
            return "".join(_literal(ch, in_class) for ch in text)
        if c == "E":
            return ""
        if c == "x":
            if p.startswith("{", self.i):
                end = p.find("}", self.i)
                digits = p[self.i + 1 : end] if end > 0 else ""
                if not digits or not all(d in "0123456789abcdefABCDEF" for d in digits):
                    raise _invalid(p, "bad \\x{...} escape")
                self.i = end + 1
                code = int(digits, 16)
                if code > 0x10FFFF:
                    raise _invalid(p, "\\x{...} beyond U+10FFFF")
                return _literal(chr(code), in_class)
            return "\\x"
        if c == "0":
            digits = ""
            while len(digits) < 2 and self.i < len(p) and p[self.i] in "01234567":
                digits += p[self.i]
                self.i += 1
            return _literal(chr(int(digits or "0", 8)), in_class)
        if c.isdigit():
            raise _invalid(p, "backreferences are not RE2")
        if not in_class:
            if c == "b":
                return _BOUNDARY
            if c == "B":
                return _NOT_BOUNDARY
            if c == "z":
                return "(?:\\Z)"
            if c == "A":
                return "(?:\\A)"
        if c in _KEPT_LETTERS and not (in_class and c == "A"):
            return "\\" + c
        if c.isascii() and c.isalnum():
            raise _invalid(p, f"unknown escape \\{c}")
        return _literal(c, in_class)


def _literal(ch: str, in_class: bool) -> str:
    if in_class:
        return "\\" + ch if ch in "\\]^-[&~|" else ch
    return re.escape(ch)


def compile_re2(pattern: str, greedy_matters: bool = False) -> re.Pattern[str]:
    """The Python regex matching what RE2 matches for ``pattern``; PatternError when refused.

    ``greedy_matters``: the caller takes the text of matches (not only whether one matches),
    so the ungreedy flag cannot be dropped.
    """
    translated = _Translator(pattern, greedy_matters).run()
    try:
        regex = re.compile(translated)
    except re.error as exc:
        raise _invalid(pattern, str(exc)) from None
    except (OverflowError, RecursionError) as exc:
        raise _unsupported(pattern, str(exc)) from None
    try:
        too_many = repeat_size(translated) > _MAX_REPEAT
        risk = backtracking_risk(translated)
    except RecursionError as exc:
        raise _unsupported(pattern, str(exc)) from None
    if too_many:
        raise _invalid(pattern, f"nested repetition counts multiply beyond {_MAX_REPEAT}")
    if risk is not None:
        raise _unsupported(pattern, risk)
    return regex
