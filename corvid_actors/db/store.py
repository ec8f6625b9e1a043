"""The Store: every database read and write the runtime makes, behind one lock.

One connection per store, shared by all actor threads and serialised by a lock: in
one process there is never "database is locked" (SQLite sees one writer), and
``:memory:`` databases are the same database on every thread. SQLite runs in WAL mode
with a busy timeout for other processes (the CLI reading while the daemon writes), and
every transaction begins IMMEDIATE so that another process's writer makes it wait, never
fail. PostgreSQL works through the same models, by URL (see :mod:`.connect`).

A write returns only after its transaction committed: ``append_message`` returning is
the acknowledgement that the message is durable. Concurrent ``append_message`` calls share
commits (group commit, ``corvid_actors.db.group_commit``): each still returns only after
the transaction holding its row committed.

The store survives its server (see :meth:`Store.run`): an operation that finds the
connection lost reconnects and replays once (nothing was committed, so a replay writes
nothing twice); while the server stays down, operations fail at once with
:class:`~corvid_actors.errors.StoreUnavailableError` ("store unavailable: …") and a
reconnect is tried at most once per backoff step (``store.reconnect_backoff_*``). A SQLite
file deleted, replaced or made read-only under the running store is detected before each
write (the open file's device/inode against the path's, and its write bits) and reported
the same way, so a write is refused rather than acknowledged into a file that is gone.
:attr:`Store.unavailable_reason` says why while it lasts; :meth:`Store.probe` checks now.

The store is one class made of parts, one module each: the connection, lock and
availability (:mod:`.store_base`), the catalog (:mod:`.catalog`: projects, agents,
personas, skill bundles, MCP configs), sessions (:mod:`.sessions`), messages
(:mod:`.messages`), the session-start read (:mod:`.session_context`) and the start-up
resume's bulk reads (:mod:`.resume_reads`). It reads and
writes rows only: prompts are built by the loop (``loop.prompts``).
"""

from __future__ import annotations

from corvid_actors.db.messages import MessageRows
from corvid_actors.db.resume_reads import ResumeReads
from corvid_actors.db.session_context import SessionContextReads


class Store(SessionContextReads, MessageRows, ResumeReads):
    """Typed access to the database. Thread-safe; every method is one transaction."""
