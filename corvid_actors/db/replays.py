"""The replay store: keys of signed requests already accepted, until they expire.

A signed webhook request carries a timestamp; it is accepted only inside a tolerance
window around now, and its signature only once within that window. The keys live in the
database (``webhook_replays``), so neither a restart of the bot nor a second process
sharing a PostgreSQL store reopens the window. :class:`MemoryReplayStore` is the same
contract in memory, for a transport used without a store.
"""

from __future__ import annotations

import threading
from datetime import datetime

from corvid_actors.db.naive_utc import naive
from corvid_actors.db.store import Store
from corvid_actors.db.store_base import store_op


class ReplayStore:
    """Durable replay keys in ``store``. Thread- and process-safe (one transaction each)."""

    durable = True

    def __init__(self, store: Store) -> None:
        self.store = store
        self.m = store.m

    @store_op
    def first_use(self, key: str, *, now: datetime, expires_at: datetime) -> bool:
        """Record ``key`` until ``expires_at``; False when it is already recorded (a replay).
        Expired keys are dropped first, in the same transaction."""
        R = self.m.WebhookReplay
        with self.store.transaction():
            R.delete().where(R.expires_at < naive(now)).execute()
            cursor = self.store.db.execute(
                R.insert(key=key, expires_at=naive(expires_at)).on_conflict_ignore())
            return bool(cursor.rowcount == 1)

    @store_op
    def forget(self, key: str) -> None:
        """Drop ``key`` (its request was not handled: a retry may use it again)."""
        R = self.m.WebhookReplay
        with self.store.transaction():
            R.delete().where(R.key == key).execute()


class MemoryReplayStore:
    """:class:`ReplayStore`'s contract in memory: lost on restart (hence ``durable``)."""

    durable = False

    def __init__(self) -> None:
        self._keys: dict[str, datetime] = {}
        self._lock = threading.Lock()

    def first_use(self, key: str, *, now: datetime, expires_at: datetime) -> bool:
        with self._lock:
            for old in [k for k, until in self._keys.items() if until < now]:
                del self._keys[old]
            if key in self._keys:
                return False
            self._keys[key] = expires_at
            return True

    def forget(self, key: str) -> None:
        with self._lock:
            self._keys.pop(key, None)


__all__ = ["MemoryReplayStore", "ReplayStore"]
