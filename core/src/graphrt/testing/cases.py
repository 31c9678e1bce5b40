"""What a plugin author registers for graphrt.testing: sample inputs and a reference."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["Case"]


@dataclasses.dataclass(frozen=True)
class Case:
    """A sample of one operator for graphrt.testing, with its reference result.

    ``reference(*inputs, **attrs)`` returns the expected output (or a list of them); absent
    inputs (None) are left out of its arguments.  ``domain`` None matches the operator in any
    domain the plugin gives it; ``opset`` None: the highest opset the operator's line covers.
    ``deterministic=False`` (a random operator) skips the checks that compare runs.
    """

    op_type: str
    inputs: Sequence[Any]
    attrs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    reference: Callable[..., Any] | None = None
    domain: str | None = None
    opset: int | None = None
    num_outputs: int = 1
    rtol: float = 1e-5
    atol: float = 1e-6
    name: str = ""
    deterministic: bool = True
