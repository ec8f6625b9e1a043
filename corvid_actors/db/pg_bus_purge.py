"""The bus tables' purge: rows nobody will read again are deleted (issue 20).

A forwarded command's row is deleted by the caller that collects its result, a withdrawn
one by the caller that withdrew it, an abandoned one by the target when it finishes. Rows
outlive that path only when a daemon died at the wrong moment: a caller killed while it
waited leaves a result nobody collects; a target that died after taking a command leaves
it ``taken`` (its caller marks it ``abandoned`` and nobody finishes it); a command for a
daemon that is gone stays ``pending`` if its caller died too. On a long-running cluster
these add up, so every daemon's bus purges now and then:

- rows whose command is over (``done``, ``failed``, ``withdrawn``, ``abandoned``) once
  they are older than ``finished_retention_s``;
- rows still ``pending`` or ``taken`` once they are older than ``unanswered_retention_s``
  — far longer than any caller waits (the admin's timeout), so no live caller loses its
  row; a pending one that old would only run a command whose caller is long gone;
- oversized-event rows (``cluster_events``) past the events' retention.

Each statement deletes at most ``batch`` rows picked through the ``created_at`` index
(short transactions, no long lock on a backlog), and a pass repeats while a batch came
back full. Deleting a row a target is still working on is harmless: its answer updates
nothing. Every daemon purges; two purging at once skip each other's rows (``SKIP LOCKED``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from loguru import logger

from corvid_actors.clock import Clock
from corvid_actors.db.pg_notify import WakeSignal
from corvid_actors.errors import CorvidError

#: runs one statement string and returns the rows of its last statement (PgSender.run)
RunStatement = Callable[..., list[tuple[Any, ...]]]

#: the states of a command that is over: its row only waits for its reader
FINISHED_STATES = ("done", "failed", "withdrawn", "abandoned")

#: one batch of old command rows: the oldest first, through the created_at index
_PURGE_COMMANDS = (
    "WITH old AS (SELECT id FROM cluster_commands WHERE created_at < %s AND "
    "(state IN ('done', 'failed', 'withdrawn', 'abandoned') OR created_at < %s) "
    "ORDER BY created_at LIMIT %s FOR UPDATE SKIP LOCKED) "
    "DELETE FROM cluster_commands c USING old WHERE c.id = old.id")
_PURGE_EVENTS = (
    "WITH old AS (SELECT id FROM cluster_events WHERE created_at < %s ORDER BY created_at LIMIT %s "
    "FOR UPDATE SKIP LOCKED) DELETE FROM cluster_events e USING old WHERE e.id = old.id")


@dataclass(frozen=True)
class PurgePolicy:
    """How often a daemon's bus purges, how old a command row must be to go, and how many
    go per statement (``[cluster.bus]``; see the module docstring)."""

    interval_s: float
    finished_retention_s: float
    unanswered_retention_s: float
    batch: int


@dataclass(frozen=True)
class PurgeCutoffs:
    """Rows created before these instants (naive UTC, as the tables store them) go."""

    finished: datetime
    unanswered: datetime
    events: datetime

    @property
    def oldest_kept(self) -> datetime:
        """The later of the two command cutoffs: no command row younger than this goes."""
        return max(self.finished, self.unanswered)


def purge_cutoffs(now: datetime, policy: PurgePolicy, events_retention_s: float) -> PurgeCutoffs:
    """The cutoffs of a purge at ``now`` (aware or naive UTC)."""
    naive = now.replace(tzinfo=None)
    return PurgeCutoffs(finished=naive - timedelta(seconds=policy.finished_retention_s),
                        unanswered=naive - timedelta(seconds=policy.unanswered_retention_s),
                        events=naive - timedelta(seconds=events_retention_s))


@dataclass(frozen=True)
class PurgeResult:
    """What one purge pass deleted."""

    commands: int
    events: int
    statements: int


def _deleted(run: RunStatement, sql: str, params: Sequence[Any]) -> int:
    # "DELETE … RETURNING 1" would ship every row back; count(*) over the RETURNING does not
    rows = run(f"WITH gone AS ({sql} RETURNING 1) SELECT count(*) FROM gone", params, replay_safe=True)
    return int(rows[0][0]) if rows else 0


def purge_bus_tables(run: RunStatement, now: datetime, policy: PurgePolicy,
                     events_retention_s: float) -> PurgeResult:
    """Delete the bus rows past their retention at ``now`` (see the module docstring);
    oversized-event rows go after ``events_retention_s``.

    ``run`` is the bus's sender (one statement per call, replayed once on a lost
    connection: deleting twice is deleting once). Raises StoreError if the database
    cannot be reached; what was deleted before stays deleted.
    """
    cut = purge_cutoffs(now, policy, events_retention_s)
    commands = events = statements = 0
    while True:
        n = _deleted(run, _PURGE_COMMANDS, (cut.oldest_kept, cut.unanswered, policy.batch))
        commands += n
        statements += 1
        if n < policy.batch:
            break
    while True:
        n = _deleted(run, _PURGE_EVENTS, (cut.events, policy.batch))
        events += n
        statements += 1
        if n < policy.batch:
            break
    return PurgeResult(commands, events, statements)


class BusPurger:
    """A worker thread that runs ``purge()`` every ``interval_s`` (through the Clock),
    from :meth:`start` until :meth:`stop`. A failed pass is logged; the next one retries."""

    def __init__(self, purge: Callable[[], PurgeResult], *, clock: Clock, interval_s: float, name: str) -> None:
        self._purge = purge
        self._clock = clock
        self._interval_s = interval_s
        self._name = name
        self._stop = WakeSignal()
        self._thread: threading.Thread | None = None
        #: passes run, and rows deleted by them; the last failed pass's error, None once
        #: one succeeds (for tests and ``admin health``)
        self.passes = 0
        self.deleted = 0
        self.last_error: str | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()

    def stats(self) -> dict[str, Any]:
        """Passes run, rows deleted, the last failed pass's error (None: the last one worked)."""
        return {"passes": self.passes, "deleted_rows": self.deleted, "last_error": self.last_error}

    def stop(self) -> None:
        """Wake the thread and join it (after its statement, if it runs one). Idempotent."""
        self._stop.fire()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        while self._clock.wait(self._interval_s, cancel=self._stop):
            try:
                result = self._purge()
            except CorvidError as exc:
                logger.warning("{}: purging the bus tables failed ({}); next try in {:g}s",
                               self._name, exc, self._interval_s)
                self.last_error = str(exc)
                continue
            self.last_error = None
            self.passes += 1
            self.deleted += result.commands + result.events
            if result.commands or result.events:
                logger.info("{}: purged {} command row(s) and {} event row(s)", self._name,
                            result.commands, result.events)
