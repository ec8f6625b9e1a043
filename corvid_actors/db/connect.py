"""Opening a database from a URL: SQLite (file in WAL mode, or ``:memory:``) or PostgreSQL.

Only :class:`~corvid_actors.db.store.Store` opens databases; this module holds the
URL rules and the SQLite settings so the store itself is only about reads and writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import peewee as pw
from playhouse.db_url import connect as connect_url

from corvid_actors.errors import StoreError


def open_database(url: str, *, busy_timeout_ms: int = 30000) -> pw.Database:
    """A peewee database for ``url`` (sqlite:///path, sqlite:///:memory:, postgresql://…)."""
    scheme = urlparse(url).scheme
    if scheme.startswith("sqlite"):
        path = url.split(":///", 1)[1] if ":///" in url else ""
        if not path:
            raise StoreError(f"SQLite URL needs a path: {url!r} (e.g. sqlite:///data/corvid.db)")
        if path != ":memory:":
            try:
                Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create the directory for {url!r}: {exc}") from exc
            path = str(Path(path).expanduser())
        # journal_mode=wal is not a pragma here: see enable_wal (it needs a retry).
        pragmas: dict[str, Any] = {"foreign_keys": 1, "busy_timeout": busy_timeout_ms}
        if path != ":memory:":
            pragmas["synchronous"] = "normal"
        return pw.SqliteDatabase(path, pragmas=pragmas, check_same_thread=False, thread_safe=False)
    if scheme.startswith(("postgres", "postgresql")):
        try:
            return connect_url(url, thread_safe=False, autorollback=True)
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise StoreError(
                "PostgreSQL needs psycopg2: pip install 'corvid-actors[postgres]'"
            ) from exc
    raise StoreError(f"unsupported database URL {url!r}: use sqlite:///PATH or postgresql://…")


#: attempts at switching a file database to WAL while other connections race for it
_WAL_SWITCH_ATTEMPTS = 50


def enable_wal(db: pw.SqliteDatabase) -> None:
    """Put a file database in WAL mode (persistent: later connections find it set).

    Switching to WAL needs an exclusive lock and SQLite answers "database is locked" at
    once, without its busy handler, when another connection holds a lock (two processes
    opening a fresh database together). Between attempts, ``BEGIN IMMEDIATE`` waits
    (with the busy timeout) until the other connection's write lock is released.
    """
    last: Exception | None = None
    for _ in range(_WAL_SWITCH_ATTEMPTS):
        try:
            mode = db.execute_sql("PRAGMA journal_mode = wal").fetchone()[0]
        except pw.OperationalError as exc:
            if "locked" not in str(exc):
                raise
            last = exc
            db.execute_sql("BEGIN IMMEDIATE")
            db.execute_sql("ROLLBACK")
            continue
        if str(mode).lower() == "wal":
            return
        raise StoreError(f"SQLite refused WAL mode (journal_mode is {mode!r})")
    raise StoreError(f"could not switch the database to WAL mode: {last}")
