"""com.microsoft Tokenizer: strings broken into tokens, padded to the longest row.

skl2onnx emits it between a StringNormalizer and a TfIdfVectorizer for scikit-learn's
CountVectorizer and TfidfVectorizer.  The rules follow onnxruntime's contrib operator (its
documentation, and its results where the documentation is silent):

- ``separators`` (regular expressions, RE2 syntax) split each string one separator after the
  other: the first splits the string, the second each piece, and so on; empty pieces are dropped.
  A single empty separator ``[""]``, or ``tokenexp`` ".", breaks strings into characters (newlines
  included).  Where a separator matches the empty string, the character there is taken as the
  separator (onnxruntime takes one byte, and fails when that cuts a multi-byte character).
- ``tokenexp`` (one RE2 expression; used when ``separators`` is not set) takes its matches as the
  tokens, each the longest match at the leftmost place a match starts (RE2's longest-match
  mode), searching again after it; empty matches are skipped.
- tokens shorter than ``mincharnum`` characters are dropped; ``mark`` puts 0x02 before and 0x03
  after each row's tokens, ``pad_value`` fills the rest of a row.

Shapes: [C] gives [C, D] and [N, C] gives [N, C, D], D the most tokens of a string (plus 2 with
``mark``); D is 0 when no string has a token (then no marks either).  An empty input gives [0]
for [0] and [N, 0] for [N, C] with N or C zero.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from graphrt.plugin import KernelContext, NodeInfo, OpKernel

from ._re2 import PatternError, compile_re2
from .strings import OBJECT, need_strings, text

START, END = "\x02", "\x03"

#: Patterns for which Python's first match is also RE2's longest one: no alternation, group,
#: optional or bounded repetition (classes, escapes, literals, greedy * and + only).
_SIMPLE = re.compile(r"[^|(?{]*")
_LEADING_FLAGS = re.compile(r"\(\?[a-zA-Z]+\)")


class _Matcher:
    """Leftmost-longest matching (RE2's longest-match mode) with Python's leftmost-first ``re``.

    Python's first match starts where RE2's does; for a pattern that is not ``simple`` a longer
    match there is looked for, from the longest candidate down.  A candidate end ``e`` before
    the string's end is checked with the pattern followed by "one character, then the end" on
    the string cut after ``e + 1``: an assertion at ``e`` (``\\b``, ``$``) still sees that
    character, as it would in the whole string.
    """

    def __init__(self, regex: re.Pattern[str], simple: bool) -> None:
        self.regex = regex
        self.simple = simple
        flags = _LEADING_FLAGS.match(regex.pattern)  # Python wants them first
        lead = flags.group(0) if flags else ""
        body = regex.pattern[len(lead) :]
        self.ends_before_last = re.compile(f"{lead}(?:{body})(?=(?s:.)\\Z)")

    def matches(self, s: str) -> list[tuple[int, int]]:
        """The successive matches of ``s``: each searched for after the previous one, or one
        character after an empty one.  For a simple pattern Python's ``finditer`` gives just
        these (an empty first match at a place means no longer one starts there)."""
        if self.simple:
            return [m.span() for m in self.regex.finditer(s)]
        found, pos = [], 0
        while pos <= len(s):
            span = self.span(s, pos)
            if span is None:
                break
            found.append(span)
            pos = max(span[1], span[0] + 1)
        return found

    def span(self, s: str, pos: int) -> tuple[int, int] | None:
        m = self.regex.search(s, pos)
        if m is None:
            return None
        start, end = m.span()
        if self.simple:
            return start, end
        if end < len(s) and self.regex.fullmatch(s, start) is not None:
            return start, len(s)
        for e in range(len(s) - 1, end, -1):
            if self.ends_before_last.match(s, start, e + 1) is not None:
                return start, e
        return start, end


class Tokenizer(OpKernel):
    """[C] -> [C, D], [N, C] -> [N, C, D] tokens (rules in the module docstring)."""

    outputs_data_dependent = True
    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        for name in ("mark", "mincharnum", "pad_value"):
            if node.attr(name) is None:
                raise self.fail(f"attribute {name} is required")
        self.mark = bool(node.attr("mark"))
        self.mincharnum = int(node.attr("mincharnum"))
        if self.mincharnum < 1:
            raise self.fail(f"mincharnum must be positive, got {self.mincharnum}")
        self.pad = text(node.attr("pad_value"))
        separators = node.attr("separators")
        tokenexp = node.attr("tokenexp")
        self.chars = False
        self.separators: list[_Matcher] = []
        self.tokenexp: _Matcher | None = None
        if separators:
            patterns = [text(s) for s in separators]
            self.chars = patterns == [""]
            if not self.chars:
                self.separators = [self._compile(p) for p in patterns]
        elif tokenexp:
            self.chars = text(tokenexp) == "."  # as onnxruntime: "." matches newlines too
            if not self.chars:
                self.tokenexp = self._compile(text(tokenexp))
        else:
            raise self.fail("one of separators and tokenexp (non-empty) must be set")
        if self.chars and self.mincharnum > 1:
            raise self.fail(
                f"mincharnum {self.mincharnum} drops every token of character tokenization "
                "(separators [''] or tokenexp '.')"
            )

    def _compile(self, pattern: str) -> _Matcher:
        try:
            regex = compile_re2(pattern, greedy_matters=True)
        except PatternError as exc:
            raise self.fail(str(exc), exc.kind) from None
        return _Matcher(regex, _SIMPLE.fullmatch(pattern) is not None)

    def tokens(self, s: str) -> list[str]:
        """The tokens of one string, before ``mincharnum`` and marks."""
        if self.chars:
            return list(s)
        if self.tokenexp is not None:
            if self.tokenexp.simple:  # no groups: findall gives the matches
                return [t for t in self.tokenexp.regex.findall(s) if t]
            return [s[a:b] for a, b in self.tokenexp.matches(s) if b > a]
        pieces = [s]
        for separator in self.separators:
            split: list[str] = []
            for piece in pieces:
                pos = 0
                for start, end in separator.matches(piece):
                    split.append(piece[pos:start])
                    pos = max(end, start + 1)  # an empty match: the character there
                split.append(piece[pos:])
            pieces = [p for p in split if p]
        return pieces

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x = inputs[0]
        need_strings(self, x.dtype)
        if x.ndim not in (1, 2):
            raise self.fail(
                f"the input must be [C] or [N, C], got shape {list(x.shape)}", "invalid_input"
            )
        if x.size == 0:
            ctx.allocate_output(0, OBJECT, (0,) if x.ndim == 1 else (x.shape[0], 0))
            return
        rows = [self.tokens(text(s)) for s in x.reshape(-1)]
        if self.mincharnum > 1:  # (tokens are never empty)
            rows = [[t for t in row if len(t) >= self.mincharnum] for row in rows]
        width = max(map(len, rows))
        if width and self.mark:
            rows = [[START, *row, END] for row in rows]
            width += 2
        y = ctx.allocate_output(0, OBJECT, x.shape + (width,))
        if width:
            flat = y.reshape(-1, width)
            flat.fill(self.pad)
            for i, row in enumerate(rows):
                flat[i, : len(row)] = row
