"""One fuzz worker process for the whole test session (started on first use)."""

from __future__ import annotations

import pytest

from .harness import Worker


@pytest.fixture(scope="session")
def fuzz_worker():
    worker = Worker()
    yield worker
    worker.dispose()
