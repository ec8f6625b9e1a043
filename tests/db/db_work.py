"""The work a statement does, in the database's own units (not seconds): tests that a read
does not grow with a table compare these at two table sizes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from corvid_actors.db.store import Store

T = TypeVar("T")


def sqlite_steps(store: Store, run: Callable[[], T]) -> tuple[T, int]:
    """``run()``'s result and the SQLite virtual machine instructions it took (in hundreds)."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    conn = store.db.connection()
    conn.set_progress_handler(count, 100)
    try:
        result = run()
    finally:
        conn.set_progress_handler(None, 0)
    return result, steps
