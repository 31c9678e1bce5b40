"""The cyclic garbage collector paused while a session or a plan is built.

Building a session makes tens of thousands of small objects (nodes, attributes, steps) that all
live as long as the session.  With the collector running, every 700 of them start a young
collection that finds nothing to free, and the survivors pushed into the oldest generation start
full collections, which walk every object of the process: a cost set by what else the process
holds (an ML stack's millions of objects), not by the model.  Paused, the objects are examined
once, by the first young collection after the build.  Nothing is lost: cyclic garbage made
meanwhile is collected then.

Nested and concurrent builds share one pause (a counter); the collector is enabled again when
the last one ends, and only if it was enabled when the first began.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["gc_paused"]

_lock = threading.Lock()
_depth = 0
_resume = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Run the body with the cyclic collector disabled (see the module's docstring)."""
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()
