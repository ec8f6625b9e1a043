"""PostgreSQL fixtures for the cluster tests: the store tests' (a database per run, a fresh
schema per test; skipped locally when the server is unreachable, FAILED in CI)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.db.conftest import open_store, pg_database_url, pg_url  # noqa: F401 - fixtures

#: anything a daemon does on request, on a loaded machine (seconds)
WAIT_S = 10.0


def wait_for(check: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
    """``check()``'s first truthy value, polled every 20 ms for at most ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout_s}s: {what}")
