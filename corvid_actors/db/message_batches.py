"""Inserting many session messages at once: the SQL behind the store's group commit.

:func:`insert_messages` writes rows with multi-row ``INSERT`` statements built once per
batch (peewee builds SQL at ~100 µs a row, more than the commits a batch saves) and
returns their ids in row order. On SQLite a batch that fits one statement is committed
by that statement alone (autocommit): no ``BEGIN``/``COMMIT`` round trips, each of which
would hand the GIL to the callers just woken and have to win it back. A larger batch, a
batch inside a caller's transaction, and PostgreSQL use one explicit transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import peewee as pw

from corvid_actors.db.store_core import StoreCore

#: (session_id, role, content, cost_usd, closes_turn): ``closes_turn``, a reply that closes
#: its session's turn in its own statement (db/turn_opening.py)
MessageRow = tuple[str, str, str, float, bool]

#: rows per INSERT statement: 7 bound values each stays far below SQLite's 32,766 limit
MAX_ROWS_PER_STATEMENT = 1000
#: INSERT statements of up to this many rows are built once per store, then reused
CACHED_INSERT_ROWS = 16


def insert_messages(store: StoreCore, rows: Sequence[MessageRow]) -> list[int]:
    """Insert ``rows`` atomically (all or none); their ids, in row order."""
    if not rows:
        return []
    chunks = [rows[i:i + MAX_ROWS_PER_STATEMENT] for i in range(0, len(rows), MAX_ROWS_PER_STATEMENT)]
    if store.is_sqlite and len(chunks) == 1 and not store.in_transaction():
        with store.lock:
            store.check_writable()  # a file deleted or read-only must refuse, not swallow, the rows
            try:
                return _insert_chunk(store, chunks[0])
            except pw.DatabaseError as exc:  # the store's errors (a file fault found now: unavailable)
                raise store.write_error(exc, True) from exc
    ids: list[int] = []
    with store.transaction():
        for chunk in chunks:
            ids += _insert_chunk(store, chunk)
    return ids


def _insert_sql(store: StoreCore, n: int) -> str:
    """The INSERT of ``n`` message rows (cached per store for the small batches that most
    commits are: a lone message, a turn)."""
    key = ("insert_messages", n)
    sql = store.sql_cache.get(key)
    if sql is None:
        M = store.m.SessionMessage
        fields = (M.session, M.role, M.content, M.cost_usd, M.timestamp, M.writer_epoch, M.closes_turn)
        group = "(" + ", ".join([store.db.param] * len(fields)) + ")"
        columns = ", ".join(f'"{f.column_name}"' for f in fields)
        sql = f'INSERT INTO "{M._meta.table_name}" ({columns}) VALUES ' + ", ".join([group] * n)
        if n <= CACHED_INSERT_ROWS:
            store.sql_cache[key] = sql
    return sql


def _insert_chunk(store: StoreCore, rows: Sequence[MessageRow]) -> list[int]:
    M = store.m.SessionMessage
    sql = _insert_sql(store, len(rows))
    # The rows of a batch share one timestamp (their commit's); text and numbers go to the
    # driver as they are, as peewee sends them.
    stamp = M.timestamp.db_value(M.timestamp.default())
    params: list[Any] = []
    epoch_of = store.epoch_of  # the owner's lease epoch (issue 20 fencing), None in one daemon
    for sid, role, content, cost, closes in rows:
        # NULL unless it closes a turn, as the previous release leaves it (the trigger's WHEN)
        params += (str(sid), str(role), str(content), float(cost), stamp, epoch_of(str(sid)), True if closes else None)
    if not store.is_sqlite:
        cursor = store.db.execute_sql(sql + f' RETURNING "{M.id.column_name}"', params)
        # a sequence hands out ids in VALUES order: the sorted ids are the rows' ids
        return sorted(row[0] for row in cursor.fetchall())
    # SQLite gives a multi-row INSERT consecutive rowids (it holds the write lock, and each
    # row takes max(rowid) + 1): the last id identifies them all.
    last = store.db.execute_sql(sql, params).lastrowid
    return list(range(last - len(rows) + 1, last + 1))
