"""What the store's errors mean: a lost server connection, a SQLite file that cannot be
written, and the one-line form of an error for logs and health. Also the two private
members of peewee's ``Database`` the store must reach to drop a dead connection, typed in
one place."""

from __future__ import annotations

from typing import Any, cast

import peewee as pw

#: what psycopg2 / psycopg say when the connection is gone (lower case)
_LOST_CONNECTION = (
    "server closed the connection", "connection already closed", "terminating connection",
    "could not connect", "connection refused", "no connection to the server", "connection timed out",
    "could not receive data", "could not send data", "the connection is closed", "connection reset",
    "ssl connection has been closed", "connection not open", "server conn crashed", "eof detected",
)
#: what SQLite says when its file cannot be written any more (lower case)
_SQLITE_FILE_FAULT = ("readonly database", "disk i/o error", "unable to open database file",
                      "database disk image is malformed", "database or disk is full")



def is_file_fault(exc: BaseException) -> bool:
    """Does SQLite say its file cannot be written any more?"""
    text = str(exc).lower()
    return any(fragment in text for fragment in _SQLITE_FILE_FAULT)


def says_connection_lost(exc: BaseException) -> bool:
    """Does the driver's message say the server connection is gone?"""
    text = str(exc).lower()
    return any(fragment in text for fragment in _LOST_CONNECTION)


def open_connection(db: pw.Database) -> Any | None:
    """The driver connection peewee holds for this thread, or None.

    peewee keeps it in the private ``_state`` (a thread-local with ``conn`` and
    ``reset()``) and has no public accessor; the store needs it to see whether a
    PostgreSQL connection was closed under it and to drop a dead one. The cast is
    narrow: only these two members are used (see :func:`drop_connection`)."""
    return getattr(cast(Any, db)._state, "conn", None)


def drop_connection(db: pw.Database, *, close: bool) -> None:
    """Forget peewee's connection for this thread (``close``: close it first, ignoring a
    refusal, as a dead connection may refuse). The next ``db.connect()`` opens a new one."""
    loose = cast(Any, db)  # private peewee members, see open_connection
    conn = open_connection(db)
    if close and conn is not None:
        try:
            loose._close(conn)
        except Exception:  # noqa: BLE001 - it is gone either way
            pass
    loose._state.reset()


def one_line(exc: BaseException) -> str:
    """An exception as one short line for logs and health (drivers add newlines and hints)."""
    text = " ".join(str(exc).split())
    return text[:300] if text else type(exc).__name__

