"""The send lane: the store's connection for ``Runtime.send_message``'s user turns (issue 37).

A message sent to a running session is committed before ``send_message`` returns. On the
store's own connection it queued behind the store lock, held by turns by the sessions'
writes (their replies, their usage, the writer thread's batches): a thousand sends to a
thousand live sessions waited ~60 % of their time there. The lane is a second connection
(a SQLite file, PostgreSQL) with a lock only senders take, so a sender never waits for a
session's write in this process; on SQLite the two connections still share the file's
write lock, held for one statement at a time (SQLite's busy timeout covers it).

Each user message and its turn are **one statement**: the row carries ``opens_turn``, and
the database's trigger (:mod:`corvid_actors.db.turn_opening`) counts the turn open in the
session's row. On SQLite and PostgreSQL a single statement commits by itself (autocommit):
no ``BEGIN``/``COMMIT`` round trips, each of which would give the GIL away and have to win
it back. Concurrent senders (an HTTP API's threads) share statements: the first leads a
batch (:class:`~corvid_actors.db.group_commit.GroupCommitter`, no thread hop); a batch
that fails is committed again item by item, so one bad message fails only its sender.

An in-memory SQLite database (simulations, tests) has one connection: its lane commits
on the store's connection under the store's lock. So does a caller already inside the
store's transaction (the row joins it).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import peewee as pw

from corvid_actors.db.connect import open_database
from corvid_actors.db.faults import drop_connection
from corvid_actors.db.group_commit import GroupCommitter
from corvid_actors.db.store_core import StoreCore
from corvid_actors.db.writer import WriterClosed

#: (session_id, content): a user message that opens a turn
TurnRow = tuple[str, str]


class SendLane:
    """Commits user turns on a connection of their own (see the module docstring).
    Thread-safe; opened at the first send, closed with the store."""

    def __init__(self, store: StoreCore, *, busy_timeout_ms: int, max_batch: int) -> None:
        self._store = store
        self._busy_timeout_ms = busy_timeout_ms
        self._db: pw.Database | None = None
        self._open_lock = threading.Lock()
        self._commits: GroupCommitter[TurnRow, int] = GroupCommitter(self._commit, max_batch=max_batch)
        self._sql: dict[int, str] = {}
        self._closed = False

    @property
    def separate(self) -> bool:
        """Does the lane commit on a connection of its own (a SQLite file, PostgreSQL)?"""
        store = self._store
        return not (store.is_sqlite and str(store.db.database) == ":memory:")

    def append(self, session_id: str, content: str) -> int:
        """Store ``content`` as a user message of ``session_id`` that opens a turn; its id,
        once committed. Raises what the store's writes raise (StoreUnavailableError,
        FencedWrite, StoreError)."""
        # through the store's run, the seam of every operation (down: refused at once; the
        # faults of corvid_actors.testing see it as an append)
        return int(self._store.run(self.append_user_turn, session_id, content))

    def append_user_turn(self, session_id: str, content: str) -> int:
        """:meth:`append` inside the store's ``run``."""
        if not self.separate or self._store.in_transaction():
            return self._commit_on_store([(session_id, content)])[0]
        return self._commits.submit((session_id, content))

    def close(self) -> None:
        with self._open_lock:
            self._closed = True
            if self._db is not None and not self._db.is_closed():
                drop_connection(self._db, close=True)
            self._db = None

    # --- committing -------------------------------------------------------------------

    def _commit_on_store(self, rows: Sequence[TurnRow]) -> list[int]:
        store = self._store
        with store.lock:
            store.check_writable()
            try:
                return self._insert(store.db, rows)
            except (pw.DatabaseError, pw.InterfaceError) as exc:
                raise store.write_error(exc, not store.in_transaction()) from exc

    def _commit(self, rows: Sequence[TurnRow]) -> list[int]:
        """One batch, on the lane's connection (the GroupCommitter's leader runs it)."""
        store = self._store
        store.check_writable()
        db = self._connection()
        try:
            return self._insert(db, rows)
        except (pw.DatabaseError, pw.InterfaceError) as exc:
            if store.is_lost(exc):
                drop_connection(db, close=True)  # the next batch opens a new one
            # a single autocommit statement: cut off, it may have committed (never replayed)
            raise store.write_error(exc, True) from exc

    def _connection(self) -> pw.Database:
        with self._open_lock:
            if self._closed:
                raise WriterClosed("the store is closed: nothing more can be written")
            if self._db is None:
                self._db = open_database(self._store.url, busy_timeout_ms=self._busy_timeout_ms)
            self._db.connect(reuse_if_open=True)
            return self._db

    def _insert(self, db: pw.Database, rows: Sequence[TurnRow]) -> list[int]:
        store = self._store
        M = store.m.SessionMessage
        sql = self._insert_sql(db, len(rows))
        stamp = M.timestamp.db_value(M.timestamp.default())
        params: list[Any] = []
        epoch_of = store.epoch_of  # the owner's lease epoch: the fencing trigger checks it
        for sid, content in rows:
            params += (str(sid), "user", str(content), 0.0, stamp, epoch_of(str(sid)), True)
        if not isinstance(db, pw.SqliteDatabase):
            cursor = db.execute_sql(sql + f' RETURNING "{M.id.column_name}"', params)
            return sorted(row[0] for row in cursor.fetchall())  # a sequence: ids in VALUES order
        # consecutive rowids for one multi-row INSERT (see db/message_batches.py)
        last = db.execute_sql(sql, params).lastrowid
        return list(range(last - len(rows) + 1, last + 1))

    def _insert_sql(self, db: pw.Database, n: int) -> str:
        sql = self._sql.get(n)
        if sql is None:
            M = self._store.m.SessionMessage
            fields = (M.session, M.role, M.content, M.cost_usd, M.timestamp, M.writer_epoch, M.opens_turn)
            group = "(" + ", ".join([db.param] * len(fields)) + ")"
            columns = ", ".join(f'"{f.column_name}"' for f in fields)
            sql = f'INSERT INTO "{M._meta.table_name}" ({columns}) VALUES ' + ", ".join([group] * n)
            if n <= 16:
                self._sql[n] = sql
        return sql
