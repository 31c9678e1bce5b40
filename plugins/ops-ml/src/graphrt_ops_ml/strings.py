"""The ai.onnx string operators: StringNormalizer, StringSplit, StringConcat, RegexFullMatch.

Strings are numpy object arrays of ``str`` (a ``bytes`` element is read as UTF-8).  Python loops
over the elements: string work has no vectorised numpy form worth the copies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel

from ._re2 import PatternError, compile_re2

OBJECT = np.dtype(object)
CASE_ACTIONS = ("LOWER", "UPPER", "NONE")


def text(value: Any) -> str:
    """One string element as ``str``."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return str(value)


def need_strings(kernel: OpKernel, dtype: np.dtype, what: str = "the input") -> None:
    if np.dtype(dtype) != OBJECT:
        raise kernel.fail(f"{what} must be a string tensor, got {dtype}")


class StringNormalizer(OpKernel):
    """Drops the stopwords of a [C] or [1, C] string tensor, then changes the case.

    Case mapping is locale-independent: Python's ``str.lower`` / ``str.upper`` (Unicode's full
    case mapping, as scikit-learn's ``lowercase=True`` does), whatever ``locale`` says.  The
    ``locale`` attribute (default "en_US" in the spec) is accepted and ignored: no value changes
    the mapping, so a Turkish dotless i is not produced for "tr_TR".  Where onnxruntime maps one
    character at a time through the C library's locale, results differ for the few characters
    whose full mapping is not one character: "ß".upper() is "SS", "İ".lower() is "i̇", and a final
    capital sigma lowers to "ς".  With ``is_case_sensitive`` 0 a stopword matches when both
    lower-case alike (``str.lower``, not ``casefold``: "STRASSE" is not "straße").

    Output shape: [C'] for [C], [1, C'] for [1, C], C' the strings kept; when none is kept
    (every string a stopword, or C = 0) the output is [""] of shape [1] or [1, 1], as the spec
    and onnx's reference implementation say.
    """

    outputs_data_dependent = True
    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        action = node.attr("case_change_action", "NONE")
        action = action.decode() if isinstance(action, bytes) else action
        if action not in CASE_ACTIONS:
            raise self.fail(
                f"case_change_action must be one of {', '.join(CASE_ACTIONS)}, got {action!r}"
            )
        self.action = action
        self.case_sensitive = bool(node.attr("is_case_sensitive", 0))
        words = [text(w) for w in node.attr("stopwords", None) or ()]
        self.stopwords = frozenset(words if self.case_sensitive else (w.lower() for w in words))
        self.locale = node.attr("locale")  # accepted, documented as not changing the mapping

    def _keep(self, s: str) -> bool:
        return (s if self.case_sensitive else s.lower()) not in self.stopwords

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x = inputs[0]
        need_strings(self, x.dtype)
        if not (x.ndim == 1 or (x.ndim == 2 and x.shape[0] == 1)):
            raise self.fail(
                f"the input must be [C] or [1, C], got shape {list(x.shape)}", "invalid_input"
            )
        kept = [s for s in map(text, x.reshape(-1)) if not self.stopwords or self._keep(s)]
        if self.action == "LOWER":
            kept = [s.lower() for s in kept]
        elif self.action == "UPPER":
            kept = [s.upper() for s in kept]
        if not kept:
            kept = [""]
        shape = (len(kept),) if x.ndim == 1 else (1, len(kept))
        y = ctx.allocate_output(0, OBJECT, shape)
        y.reshape(-1)[:] = kept


class StringSplit(OpKernel):
    """Each string split on ``delimiter`` into X.shape + [D] (padded with "") and the counts.

    The semantics are Python's ``str.split(delimiter or None, maxsplit)``, as onnx's reference
    implementation: no (or an empty) delimiter splits on runs of Unicode whitespace and drops
    leading and trailing whitespace; a delimiter splits at each occurrence, so "" gives one empty
    substring; ``maxsplit`` negative or absent is unlimited.  (onnxruntime 1.32 differs: its
    whitespace is " " only, it strips the remainder after ``maxsplit`` splits, and it gives "" no
    substring.)
    """

    outputs_data_dependent = True
    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        delimiter = node.attr("delimiter")
        self.delimiter = text(delimiter) if delimiter else None
        maxsplit = node.attr("maxsplit")
        self.maxsplit = -1 if maxsplit is None or maxsplit < 0 else int(maxsplit)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x = inputs[0]
        need_strings(self, x.dtype)
        parts = [text(s).split(self.delimiter, self.maxsplit) for s in x.reshape(-1)]
        width = max(map(len, parts), default=0)
        y = ctx.allocate_output(0, OBJECT, x.shape + (width,))
        z = ctx.allocate_output(1, np.int64, x.shape)
        flat = y.reshape(-1, width) if width else None
        counts = z.reshape(-1)
        y.fill("")
        for i, row in enumerate(parts):
            counts[i] = len(row)
            if row:
                flat[i, : len(row)] = row


class StringConcat(OpKernel):
    """X + Y elementwise, numpy-broadcast: object arrays add their ``str`` elements."""

    supports_exact = True

    def infer(self, ctx: InferContext) -> None:
        need_strings(self, ctx.dtype(0), "X")
        need_strings(self, ctx.dtype(1), "Y")
        try:
            shape = np.broadcast_shapes(ctx.shape(0), ctx.shape(1))
        except ValueError:
            raise self.fail(
                f"shapes {list(ctx.shape(0))} and {list(ctx.shape(1))} do not broadcast",
                "invalid_input",
            ) from None
        ctx.set_output(0, OBJECT, shape)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x, y = inputs
        if all(type(s) is str for a in (x, y) for s in a.reshape(-1)):
            np.add(x, y, out=outputs[0])
        else:
            join = np.frompyfunc(lambda a, b: text(a) + text(b), 2, 1)
            outputs[0][...] = join(x, y)


class RegexFullMatch(OpKernel):
    """True where the whole string matches ``pattern`` (RE2 syntax, see ``_re2``).

    The pattern is translated and compiled when the kernel is built; one RE2 cannot express in
    Python's ``re``, or one ``re`` could take exponential time on (``_re2_guard``), is refused
    there (``unsupported``), one RE2 refuses is ``invalid_model``.
    """

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        pattern = node.attr("pattern")
        if pattern is None:
            raise self.fail("attribute pattern is required")
        try:
            self.regex = compile_re2(text(pattern))
        except PatternError as exc:
            raise self.fail(str(exc), exc.kind) from None

    def infer(self, ctx: InferContext) -> None:
        need_strings(self, ctx.dtype(0), "X")
        ctx.set_output(0, np.bool_, ctx.shape(0))

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x, y = inputs[0], outputs[0]
        full = self.regex.fullmatch
        found = (full(text(s)) is not None for s in x.reshape(-1))
        y[...] = np.fromiter(found, np.bool_, count=x.size).reshape(x.shape)
