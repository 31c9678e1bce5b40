"""Which patterns Python's backtracking ``re`` may take exponential time on, where RE2 is linear.

A repetition (``*``, ``+``, ``{n,}``, or a bound above 2) over a body that matches one text in
several ways lets the engine try every way to cut a long text into passes before it fails: 2^n
for ``(a+)+`` or ``(a|aa)*``.  ``backtracking_risk`` refuses such a body when it

- holds a repetition of varying length (``(\\w+\\s?)+``, ``(a*)*``, ``(a{1,5})+``), unless the
  body starts or ends with an item of fixed length matching characters nothing else in the body
  matches (the delimiter: each pass then ends at or right before one) and its other items split
  the text of a pass one way (two items of varying length are adjacent with no character in
  common, or have between them a fixed item sharing no character with either): ``(\\w+\\.)+``,
  ``(\\w+\\s)+``, ``(,\\s*\\d+)*``, ``(\\d{1,3}\\.){3}`` are accepted;
- or holds alternatives that may start with the same character or be empty (``(ab|a)+``),
  unless all are sequences of one-character items, of one length, that no text matches twice
  (``(?:cat|car)+``).

The test is conservative, not exact: some patterns it refuses are safe (``(ab|a)+``), and
patterns it accepts may still take quadratic time (``\\w*\\w*``, a search for ``\\w+\\s``
in a long word), as they do in other backtracking engines.
"""

from __future__ import annotations

import re

try:
    from re import _parser
except ImportError:  # Python 3.10
    import sre_parse as _parser  # type: ignore[no-redef]

# The tree is the one Python's own parser gives for the translated pattern (``re._parser``, the
# module ``re.compile`` uses): a list of (opcode, argument) items.  Character sets are lists of
# inclusive code point intervals; None stands for "any character" where a set is not worked out.

_ANY = [(0, 0x10FFFF)]
_PAIRS = 250_000  # alternatives compared pairwise at most
_CASE_SPAN = 4096  # wider sets under (?i) are taken as any character rather than case-folded
#: What Python's (?i) matches beyond lower and upper case: dotted and dotless i, Kelvin, long s.
_MORE_FOLDS = {"i": [(0x130, 0x131)], "k": [(0x212A, 0x212A)], "s": [(0x17F, 0x17F)]}


def _op(item: tuple[object, object]) -> str:
    return str(item[0])


def _merge(sets: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(sets):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(hi, out[-1][1]))
        else:
            out.append((lo, hi))
    return out


def _complement(sets: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, pos = [], 0
    for lo, hi in _merge(sets):
        if lo > pos:
            out.append((pos, lo - 1))
        pos = hi + 1
    return out + ([(pos, 0x10FFFF)] if pos <= 0x10FFFF else [])


def _fold(sets: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``sets`` widened by the case variants (?i) matches too."""
    if sum(hi - lo + 1 for lo, hi in sets) > _CASE_SPAN:
        return _ANY
    extra = []
    for lo, hi in sets:
        for code in range(lo, hi + 1):
            ch = chr(code)
            for variant in (ch.lower(), ch.upper(), ch.casefold()):
                if len(variant) == 1:
                    extra.append((ord(variant), ord(variant)))
                    extra += _MORE_FOLDS.get(variant.lower(), [])
    return _merge(sets + extra)


def _overlap(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> bool:
    return any(lo1 <= hi2 and lo2 <= hi1 for lo1, hi1 in a for lo2, hi2 in b)


def _shared(sets: list[list[tuple[int, int]]]) -> bool:
    """Whether two of ``sets`` (each merged) have a character in common (one sort, not pairs)."""
    reach = -1
    for lo, hi in sorted(iv for one in sets for iv in one):
        if lo <= reach:  # intervals of one set neither overlap nor touch: another set's
            return True
        reach = max(reach, hi)
    return False


def _char_set(item: tuple[object, object], ignore_case: bool) -> list[tuple[int, int]] | None:
    """The characters a one-character item matches; None when the item is not one character."""
    op, arg = _op(item), item[1]
    if op == "LITERAL":
        sets = [(arg, arg)]
    elif op == "NOT_LITERAL":
        sets = _complement([(arg, arg)])
    elif op == "ANY":
        return _ANY
    elif op == "IN":
        sets, negate = [], False
        for sub in arg:  # type: ignore[union-attr]
            sub_op = _op(sub)
            if sub_op == "NEGATE":
                negate = True
            elif sub_op == "LITERAL":
                sets.append((sub[1], sub[1]))
            elif sub_op == "RANGE":
                sets.append(sub[1])
            else:  # a Unicode category: not worked out
                return _ANY
        sets = _merge(sets)
        if negate:
            return _ANY if ignore_case else _complement(sets)
    else:
        return None
    return _fold(sets) if ignore_case else _merge(sets)


def _with_flags(flags: int, add: int, remove: int) -> int:
    return (flags | add) & ~remove


def _consumed(items: list, flags: int) -> list[tuple[int, int]]:
    """Every character ``items`` may consume (lookaround contents aside)."""
    out: list[tuple[int, int]] = []
    for item in items:
        op, arg = _op(item), item[1]
        one = _char_set(item, bool(flags & re.IGNORECASE))
        if one is not None:
            out += one
        elif op in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            out += _consumed(arg[2], flags)
        elif op == "SUBPATTERN":
            out += _consumed(arg[3], _with_flags(flags, arg[1], arg[2]))
        elif op == "BRANCH":
            for branch in arg[1]:
                out += _consumed(branch, flags)
        elif op not in ("AT", "ASSERT", "ASSERT_NOT"):
            return _ANY
    return _merge(out)


def _first(items: list, flags: int) -> tuple[list[tuple[int, int]], bool]:
    """The characters a match of ``items`` may start with, and whether it may be empty."""
    out: list[tuple[int, int]] = []
    for item in items:
        op, arg = _op(item), item[1]
        one = _char_set(item, bool(flags & re.IGNORECASE))
        if one is not None:
            return _merge(out + one), False
        if op in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            sets, empty = _first(arg[2], flags)
            empty = empty or arg[0] == 0
        elif op == "SUBPATTERN":
            sets, empty = _first(arg[3], _with_flags(flags, arg[1], arg[2]))
        elif op == "BRANCH":
            firsts = [_first(branch, flags) for branch in arg[1]]
            sets = [s for f, _ in firsts for s in f]
            empty = any(e for _, e in firsts)
        elif op in ("AT", "ASSERT", "ASSERT_NOT"):
            sets, empty = [], True
        else:
            return _ANY, True
        out += sets
        if not empty:
            return _merge(out), False
    return _merge(out), True


def _varies(item: tuple[object, object]) -> bool:
    """Whether a repetition item matches non-empty text of more than one length."""
    low, high = item[1][0], item[1][1]
    width = _width(item[1][2])
    return width[1] > 0 and (low != high or width[0] != width[1])


def _width(items: list) -> tuple[int, int]:
    sub = _parser.SubPattern(_parser.State(), list(items))
    return sub.getwidth()


def _assertion(item: tuple) -> bool:
    """Whether ``item`` is an assertion that holds one way at most: ``^ $ \\A \\z``, or the
    translation of ``\\b`` or ``\\B`` (two lookaround alternatives that exclude each other)."""
    op, arg = _op(item), item[1]
    if op in ("AT", "ASSERT", "ASSERT_NOT"):
        return True
    if op == "SUBPATTERN" and len(arg[3]) == 1:
        return _assertion(arg[3][0])
    if op == "BRANCH":  # lookarounds come only from the translation: RE2 has none
        return all(b and all(_op(x) in ("ASSERT", "ASSERT_NOT") for x in b) for b in arg[1])
    return False


def _letters(items: list, flags: int) -> tuple[tuple[tuple[int, int], ...], ...] | None:
    """The character set of each position of ``items`` when all are one-character items."""
    sets = [_char_set(item, bool(flags & re.IGNORECASE)) for item in items]
    return None if any(s is None for s in sets) else tuple(tuple(s) for s in sets)


def _alternatives_overlap(branches: list, flags: int) -> bool:
    """Whether two alternatives may match one text (or one may be empty).  Alternatives that
    start with no character in common cannot; nor can words of one length differing at some
    place by characters (compared pairwise up to ``_PAIRS`` pairs, literals by one lookup)."""
    firsts = [_first(branch, flags) for branch in branches]
    if any(empty for _, empty in firsts):
        return True
    if not _shared([f for f, _ in firsts]):
        return False
    words = [_letters(branch, flags) for branch in branches]
    if any(w is None for w in words) or len({len(w) for w in words}) != 1:
        return True
    if len(set(words)) < len(words):
        return True
    literal = all(_op(item) == "LITERAL" for branch in branches for item in branch)
    if literal and not flags & re.IGNORECASE:
        return False  # distinct literal words
    if len(words) ** 2 > _PAIRS:
        return True
    return any(
        all(_overlap(list(x), list(y)) for x, y in zip(a, b))
        for i, a in enumerate(words)
        for b in words[i + 1 :]
    )


def _ambiguity(items: list, flags: int) -> str | None:
    """Why a repeated ``items`` may match one text in many ways (None if it cannot)."""
    for item in items:
        op, arg = _op(item), item[1]
        if _assertion(item):
            why = None
        elif op in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            if _varies(item):
                return "a repetition of varying length"
            why = _ambiguity(arg[2], flags)
        elif op == "SUBPATTERN":
            why = _ambiguity(arg[3], _with_flags(flags, arg[1], arg[2]))
        elif op == "BRANCH":
            if _alternatives_overlap(arg[1], flags):
                return "alternatives that may match the same text or be empty"
            why = next((w for b in arg[1] if (w := _ambiguity(b, flags))), None)
        else:
            why = None
        if why:
            return why
    return None


def _part(item: tuple, flags: int) -> tuple[list[tuple[int, int]], bool] | None:
    """(the characters it consumes, whether its length varies) for an item of a repeated body
    that matches any text one way: a one-character item, a group or alternation of fixed length
    without ambiguity, or a repetition of one of these; None for others."""
    op, arg = _op(item), item[1]
    one = _char_set(item, bool(flags & re.IGNORECASE))
    if one is not None:
        return one, False
    if op == "SUBPATTERN" and len(arg[3]) == 1:
        return _part(arg[3][0], _with_flags(flags, arg[1], arg[2]))
    if op in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
        inner = _part(arg[2][0], flags) if len(arg[2]) == 1 else None
        if inner is None or inner[1]:
            return None
        return inner[0], arg[0] != arg[1]
    if op in ("SUBPATTERN", "BRANCH"):
        low, high = _width([item])
        if low == high and _ambiguity([item], flags) is None:
            return _consumed([item], flags), False
    return None


def _delimited(items: list, flags: int) -> bool:
    """Whether ``items`` (the body of a repetition) starts or ends with a character no other
    item consumes (so each pass of the outer repetition ends right before or at one), and its
    other items split the text of a pass one way."""
    while len(items) == 1 and _op(items[0]) == "SUBPATTERN":
        arg = items[0][1]
        items, flags = arg[3], _with_flags(flags, arg[1], arg[2])
    parts = []  # (set, varies) per consuming item
    for item in items:
        if _assertion(item):
            continue
        part = _part(item, flags)
        if part is None:
            return False
        parts.append(part)
    for delimiter, rest in ((parts[:1], parts[1:]), (parts[-1:], parts[:-1])):
        if not delimiter or delimiter[0][1]:
            continue
        if any(_overlap(delimiter[0][0], s) for s, _ in rest):
            continue
        varied = [i for i, (_, v) in enumerate(rest) if v]
        if all(_separated(rest, a, b) for i, a in enumerate(varied) for b in varied[i + 1 :]):
            return True
    return False


def _separated(parts: list[tuple[list[tuple[int, int]], bool]], a: int, b: int) -> bool:
    """Whether the text of repeated items ``a`` < ``b`` splits one way: next to each other they
    share no character, else an unrepeated item between them matches none of theirs."""
    if b == a + 1:
        return not _overlap(parts[a][0], parts[b][0])
    return any(
        not v and not _overlap(s, parts[a][0]) and not _overlap(s, parts[b][0])
        for s, v in parts[a + 1 : b]
    )


def _risk(items: list, flags: int) -> str | None:
    for item in items:
        op, arg = _op(item), item[1]
        if op in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            body = arg[2]
            # twice at most costs no more than two repetitions one after the other
            if arg[1] > 2 and _width(body)[1] > 0:
                why = _ambiguity(body, flags)
                if why and (why.startswith("alternatives") or not _delimited(body, flags)):
                    return (
                        f"it repeats {why}, so a text may match it in many ways and Python's "
                        "backtracking regex engine may take exponential time on it (RE2 is "
                        "linear); a repetition is accepted over fixed-length text, or over "
                        "varying items split by a delimiter nothing else in them matches, as "
                        "in (\\w+\\.)+ or (\\w+\\s)+"
                    )
            found = _risk(body, flags)
        elif op == "SUBPATTERN":
            found = _risk(arg[3], _with_flags(flags, arg[1], arg[2]))
        elif op == "BRANCH":
            found = next((r for b in arg[1] if (r := _risk(b, flags))), None)
        elif op in ("ASSERT", "ASSERT_NOT"):
            found = _risk(arg[1], flags)
        else:
            found = None
        if found:
            return found
    return None


def backtracking_risk(translated: str) -> str | None:
    """Why Python's ``re`` may take exponential time on ``translated`` (a Python pattern that
    compiles), or None."""
    tree = _parser.parse(translated)
    return _risk(tree.data, tree.state.flags)


def repeat_size(translated: str) -> int:
    """The largest product of counts along nested ``{n,m}`` repetitions (``m``, or ``n`` when
    unbounded), which RE2 refuses above 1000 (its repetition-size limit)."""

    def size(items: list) -> int:
        most = 1
        for item in items:
            op, arg = _op(item), item[1]
            if op in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
                count = arg[1] if arg[1] != _parser.MAXREPEAT else arg[0]
                most = max(most, max(count, 1) * size(arg[2]))
            elif op == "SUBPATTERN":
                most = max(most, size(arg[3]))
            elif op == "BRANCH":
                most = max([most] + [size(b) for b in arg[1]])
        return most

    return size(_parser.parse(translated).data)
