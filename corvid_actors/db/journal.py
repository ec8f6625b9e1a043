"""The journal's table: what the outside world said to each journaled session (issue 40).

Each entry is one row of ``journal_entries``: the session, when (seconds since the epoch on
the runtime's clock), a kind (``start``, ``user``, ``model``, ``tool``, ``approval``,
``event``) and its data, a JSON object compressed with zlib. Rows are queued on a
:class:`~corvid_actors.db.writer.MessageWriter` of their own and committed in batches: a
model call is one row however many chunks it streamed, and no caller waits for a commit.
:meth:`JournalStore.purge` deletes what is older than the retention.

    journal = JournalStore(store)
    journal.append("sid", at, "model", {"text": "hi"})     # returns at once
    journal.flush()                                         # blocks until all committed
    journal.entries("sid")                                  # [(at, kind, data), …] in order
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from typing import Any

from peewee import fn

from corvid_actors.db.store import Store
from corvid_actors.db.store_base import store_op
from corvid_actors.db.writer import MessageWriter, WriteAck

#: rows committed in one transaction at most
MAX_BATCH = 500

Row = tuple[str, float, str, bytes]


def encode(data: Any) -> bytes:
    """``data`` as stored: compact JSON, zlib-compressed."""
    return zlib.compress(json.dumps(data, separators=(",", ":"), default=str).encode("utf-8"), 6)


def decode(blob: bytes | memoryview) -> Any:
    return json.loads(zlib.decompress(bytes(blob)).decode("utf-8"))


class JournalStore:
    """The journal rows of ``store``. Thread-safe: :meth:`append` from any thread."""

    def __init__(self, store: Store, *, writer: bool = True) -> None:
        self.store = store
        self.m = store.m
        self._writer: MessageWriter[Row, None] | None = (
            MessageWriter(self._commit, max_batch=MAX_BATCH, name="journal-writer") if writer else None)
        self._last: WriteAck[None] | None = None

    def append(self, session_id: str, at: float, kind: str, data: Any) -> None:
        """Queue one entry (committed with the others queued by then; returns at once)."""
        row = (session_id, at, kind, encode(data))
        if self._writer is None:
            self._commit([row])
            return
        self._last = self._writer.submit_async(row)

    def flush(self, timeout_s: float = 10.0) -> None:
        """Wait until every entry queued so far has committed (the writer commits in order)."""
        last = self._last
        if last is not None:
            last.exception(timeout_s)

    def close(self) -> None:
        """Commit what is queued, then stop the writer thread."""
        if self._writer is not None:
            self._writer.close()

    @store_op
    def _commit(self, rows: Sequence[Row]) -> Sequence[None]:
        J = self.m.JournalEntry
        with self.store.transaction():
            J.insert_many([{"session_id": s, "at": at, "kind": k, "data": d} for s, at, k, d in rows]).execute()
        return [None] * len(rows)

    @store_op
    def entries(self, session_id: str) -> list[tuple[float, str, Any]]:
        """The session's entries in the order they were written: ``(at, kind, data)``."""
        J = self.m.JournalEntry
        rows = J.select(J.at, J.kind, J.data).where(J.session_id == session_id).order_by(J.id)
        return [(r.at, r.kind, decode(r.data)) for r in rows]

    @store_op
    def sessions(self) -> list[str]:
        """The sessions with journal entries, most recently journaled first."""
        J = self.m.JournalEntry
        rows = J.select(J.session_id, fn.MAX(J.id).alias("last")).group_by(J.session_id).order_by(
            fn.MAX(J.id).desc())
        return [r.session_id for r in rows]

    @store_op
    def purge(self, older_than: float) -> int:
        """Delete the entries written before ``older_than`` (epoch seconds); how many."""
        J = self.m.JournalEntry
        with self.store.transaction():
            return int(J.delete().where(J.at < older_than).execute())

    @store_op
    def size(self, session_id: str) -> int:
        """The stored (compressed) bytes of the session's entries."""
        J = self.m.JournalEntry
        return sum(len(bytes(r.data)) for r in J.select(J.data).where(J.session_id == session_id))
