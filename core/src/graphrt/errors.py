"""The one exception type users catch, and warnings about plugins."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["KINDS", "PluginError", "PluginLoadWarning", "SessionError"]

#: Every value ``SessionError.kind`` can take.
KINDS = (
    "unsupported_operator",
    "exact_mode_unavailable",
    "invalid_model",
    "unsupported",
    "invalid_input",
    "closed",
    "cancelled",
    "resource_exhausted",
    "kernel_error",
)


class SessionError(Exception):
    """Everything a session refuses, with a machine-readable ``kind``.

    ``node`` names the node where there is one; ``operators`` lists every operator concerned as
    ``"Type (opset N)"`` (all missing operators at once, or every operator without exact support).
    """

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        node: str | None = None,
        operators: Sequence[str] = (),
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown SessionError kind {kind!r}")
        super().__init__(message)
        self.kind = kind
        self.node = node
        self.operators = list(operators)

    def __str__(self) -> str:
        return f"[{self.kind}] {self.args[0]}"

    def __reduce__(self):  # keep kind and operators across pickling (multiprocessing, pytest-xdist)
        return (_rebuild, (self.kind, self.args[0], self.node, self.operators))


def _rebuild(kind: str, message: str, node: str | None, operators: list[str]) -> SessionError:
    return SessionError(kind, message, node=node, operators=operators)


class PluginError(SessionError):
    """A plugin could not be loaded (strict mode), is invalid, or ties with another one.

    A SessionError of kind "unsupported", so one ``except SessionError`` catches everything a
    session refuses.
    """

    def __init__(self, message: str) -> None:
        super().__init__("unsupported", message)

    def __reduce__(self):
        return (PluginError, (self.args[0],))


class PluginLoadWarning(UserWarning):
    """A plugin failed to import and was skipped; the message names it and the cause."""
