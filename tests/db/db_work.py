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


def postgres_rows_read(store: Store, table: str, run: Callable[[], T]) -> tuple[T, int]:
    """``run()``'s result and the rows of ``table`` PostgreSQL read for it: by sequential
    scans and fetched by index scans (``pg_stat_xact_user_tables``, inside one transaction,
    whose counts it reports before they are flushed). The table is analysed first, as
    autovacuum has long done for a table of that size in a real database."""
    store.db.execute_sql(f'ANALYZE "{table}"')
    counts = ("SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables "
              "WHERE relname = %s AND schemaname = current_schema()")
    with store.transaction():
        [[before]] = store.db.execute_sql(counts, (table,)).fetchall()
        result = run()
        [[after]] = store.db.execute_sql(counts, (table,)).fetchall()
    return result, int(after) - int(before)


def work(store: Store, table: str, run: Callable[[], T]) -> tuple[T, int]:
    """``run()``'s result and its work: SQLite VM steps, or PostgreSQL rows of ``table`` read."""
    return sqlite_steps(store, run) if store.is_sqlite else postgres_rows_read(store, table, run)
