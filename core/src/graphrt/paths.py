"""Kernel paths: alternative kernels chosen once per session from hardware checks."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping

from graphrt.errors import SessionError
from graphrt.kernel import NodeInfo, OpKernel

__all__ = ["BASE_PATH", "KernelPath", "choose_path", "path_available"]

#: The numpy kernels of the operator table itself: always present.
BASE_PATH = "numpy"
ENV_VAR = "GRAPHRT_KERNEL_PATH"


@dataclasses.dataclass(frozen=True)
class KernelPath:
    """A set of kernels that replace the table's for the operators it covers.

    ``rank`` orders paths when the user asks for "auto": the available path with the highest
    rank wins.  ``kernels`` maps (domain, op_type) to a factory taking the node and the table's
    own factory (so a native kernel can fall back to the numpy one for cases it does not handle).
    """

    name: str
    rank: int
    available: Callable[[], bool]
    kernels: Mapping[
        tuple[str, str], Callable[[NodeInfo, Callable[[NodeInfo], OpKernel]], OpKernel]
    ]
    plugin: str = ""


def choose_path(paths: list[KernelPath], requested: str | None) -> KernelPath | None:
    """The path for a session: the forced one, or the best available; None means numpy.

    ``requested`` (the session option) wins over the environment variable.  The variable is a
    process-wide default: it applies to sessions whose operator table has kernel paths, and a
    session without any (``plugins=[]``, an allow-list without the native plugin) runs the
    table's numpy kernels instead of failing.
    """
    if not requested and not paths and os.environ.get(ENV_VAR):
        return None
    requested = requested or os.environ.get(ENV_VAR) or "auto"
    if requested == BASE_PATH:
        return None
    if requested == "auto":
        usable = [p for p in paths if path_available(p)]
        return max(usable, key=lambda p: p.rank) if usable else None
    for p in paths:
        if p.name == requested:
            if not path_available(p):
                raise SessionError(
                    "unsupported", f"kernel path {requested!r} is not available on this machine"
                )
            return p
    known = ", ".join([BASE_PATH, "auto"] + [p.name for p in paths])
    raise SessionError(
        "unsupported", f"unknown kernel path {requested!r}; installed paths: {known}"
    )


def path_available(path: KernelPath) -> bool:
    """Whether the path can run here; a hardware check that raises means "not available"."""
    try:
        return bool(path.available())
    except Exception:  # a broken hardware check means "not available", never a crash
        return False
