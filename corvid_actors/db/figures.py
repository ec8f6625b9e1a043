"""The store's own counters for the metrics: message commits and their time, replays after
a lost connection, fenced writes (``Store.figures``; read at scrape time by
:func:`corvid_actors.actors.stats.runtime_stats`)."""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["WriteFigures"]


class WriteFigures:
    """Counts kept as the store works; thread-safe (the writer thread, callers, actors)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._commits = 0
        self._commit_s = 0.0
        self._replays = 0
        self._fenced = 0

    def committed(self, seconds: float) -> None:
        """One batch of messages committed, in ``seconds`` (the runtime's clock)."""
        with self._lock:
            self._commits += 1
            self._commit_s += max(0.0, seconds)

    def replayed(self) -> None:
        """An operation met a lost connection: reconnected and run once more."""
        with self._lock:
            self._replays += 1

    def fenced(self) -> None:
        """The database refused a stale incarnation's write (``db/fencing.py``)."""
        with self._lock:
            self._fenced += 1

    def snapshot(self) -> dict[str, Any]:
        """``{"message_commits", "message_commit_s_total", "replays", "fenced_writes"}``."""
        with self._lock:
            return {"message_commits": self._commits, "message_commit_s_total": self._commit_s,
                    "replays": self._replays, "fenced_writes": self._fenced}
