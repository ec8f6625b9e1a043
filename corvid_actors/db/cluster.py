"""Several daemons on one database (issue 20): daemon registry, session leases, claims.

Each daemon registers a row in ``daemons`` and renews it every ``[cluster] heartbeat_s``
(:meth:`ClusterStore.heartbeat`), which also renews every lease it owns, in one statement;
those operations are the registry's (:mod:`corvid_actors.db.daemon_registry`), which the
cluster store holds as ``daemons``.
A running session has one owner under a lease (``session_leases``: owner, expiry, fencing
epoch, durable timers). :meth:`ClusterStore.claim` takes sessions (``SELECT … FOR UPDATE
SKIP LOCKED`` on PostgreSQL, so claiming daemons never wait for each other) and adds one to
each claimed lease's epoch; the writes of a session incarnation carry its epoch and the
database refuses those of a stale one (:mod:`corvid_actors.db.fencing`,
:class:`~corvid_actors.errors.FencedWrite`). :meth:`ClusterStore.claim_expired` is the
failover sweep: a daemon takes expired leases, at most its fair share per sweep
(:func:`fair_share`). The lease row outlives its owners, so an epoch never goes back.

A lease row is in one of four states (``owner_id``, ``lease_expires_at``):

- owned: an owner and an expiry in the future (renewed by the owner's heartbeat);
- expired: an owner and an expiry in the past (the owner stopped renewing): swept;
- released: no owner, an expiry (:meth:`~ClusterStore.release`, a draining daemon hands
  the session over): swept at once;
- ended: neither (:meth:`~ClusterStore.finish`, the session stopped running): not swept;
  a new start claims it explicitly.

Every time comes from the caller (its Clock's ``now()``): this module reads no clock, so
simulated time governs leases as it governs everything else. SQLite stores run the same
operations for one daemon (the multi-daemon mode needs PostgreSQL; with SQLite a second
daemon on the file is refused, as before).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

import peewee as pw

from corvid_actors.db.cluster_sql import statements
from corvid_actors.db.daemon_registry import DaemonRegistry
from corvid_actors.db.models import DaemonState, SessionStatus
from corvid_actors.db.naive_utc import aware, naive, naive_or_none
from corvid_actors.db.ownership import HANDOVER, STOP, Ownership, OwnershipLog, Taken
from corvid_actors.db.store import Store
from corvid_actors.db.store_base import store_op
from corvid_actors.errors import FencedWrite

#: the durable timers of a lease (:meth:`ClusterStore.set_timers`)
TIMER_COLUMNS = ("restart_due_at", "resume_due_at", "inactivity_due_at", "idle_due_at")
#: ownership rows kept per session unless told (``[cluster] ownership_history_max``)
DEFAULT_HISTORY_MAX = 50
#: ``place_new_session`` without a bound
_NO_BOUND = 2**31 - 1


class Claim(NamedTuple):
    """A session claimed, and the epoch its new incarnation's writes carry."""

    session_id: str
    epoch: int


class Deadline(NamedTuple):
    """A running session's inactivity deadline (None: none, a turn is running) and idle-exit
    deadline (None: none — a turn is running, or its loop never exits idle), stored by the
    incarnation of ``epoch`` (:meth:`ClusterStore.set_inactivity_deadlines`)."""

    session_id: str
    epoch: int
    due: datetime | None
    idle_due: datetime | None = None


@dataclass(frozen=True)
class Lease:
    """A session's lease row; times are aware UTC (None: not set)."""

    session_id: str
    owner_id: str | None
    epoch: int
    lease_expires_at: datetime | None
    restart_due_at: datetime | None
    resume_due_at: datetime | None
    inactivity_due_at: datetime | None
    idle_due_at: datetime | None = None


def fair_share(expired: int, live_daemons: int, max_sessions: int, owned: int) -> int:
    """How many expired leases one daemon claims in one sweep.

    ``ceil(expired / live_daemons) + 1`` — its share, plus one so that rounding never leaves
    a lease behind — but never more than there are, nor past ``max_sessions`` (counting the
    ``owned`` leases it has). ``live_daemons`` counts the sweeper too (at least 1).
    """
    if expired <= 0:
        return 0
    share = math.ceil(expired / max(live_daemons, 1)) + 1
    return max(0, min(share, expired, max_sessions - owned))


class ClusterStore:
    """The cluster tables of a :class:`~corvid_actors.db.store.Store` (its connection, lock
    and reconnects). Each method is one transaction; thread-safe as the store is. Several
    daemons each use their own store (their own connection) on one database."""

    def __init__(self, store: Store, *, history_max: int = DEFAULT_HISTORY_MAX) -> None:
        self.store = store
        self._sql = statements(store.is_sqlite)
        #: where each session ran, written with each lease change (issue 36; 0: not written)
        self.history = OwnershipLog(store, history_max)
        #: the ``daemons`` table: registration, heartbeat, state
        self.daemons = DaemonRegistry(store, self._sql, self.history)

    # --- daemons: the registry (:class:`~corvid_actors.db.daemon_registry.DaemonRegistry`) ----

    def register_daemon(self, daemon_id: str, host: str, pid: int | None, version: str, now: datetime) -> list[str]:
        """Register the daemon as live: :meth:`DaemonRegistry.register_daemon`."""
        return self.daemons.register_daemon(daemon_id, host, pid, version, now)

    def heartbeat(self, daemon_id: str, now: datetime, lease_s: float) -> int:
        """Renew the heartbeat and the daemon's leases: :meth:`DaemonRegistry.heartbeat`."""
        return self.daemons.heartbeat(daemon_id, now, lease_s)

    def set_daemon_state(self, daemon_id: str, state: str) -> bool:
        """Set the daemon's state: :meth:`DaemonRegistry.set_daemon_state`."""
        return self.daemons.set_daemon_state(daemon_id, state)

    def daemon_state(self, daemon_id: str) -> str | None:
        """The daemon's state: :meth:`DaemonRegistry.daemon_state`."""
        return self.daemons.daemon_state(daemon_id)

    def live_daemons(self, now: datetime, grace_s: float) -> list[str]:
        """Ids of the live daemons: :meth:`DaemonRegistry.live_daemons`."""
        return self.daemons.live_daemons(now, grace_s)

    def live_daemon_versions(self, now: datetime, grace_s: float) -> dict[str, str]:
        """The live daemons' versions: :meth:`DaemonRegistry.live_daemon_versions`."""
        return self.daemons.live_daemon_versions(now, grace_s)

    def expire_dead_daemons(self, now: datetime, grace_s: float, *, sparing: str = "") -> list[str]:
        """Declare silent daemons gone: :meth:`DaemonRegistry.expire_dead_daemons`."""
        return self.daemons.expire_dead_daemons(now, grace_s, sparing=sparing)

    # --- claims ---------------------------------------------------------------------------

    @store_op
    def claim(self, sessions: Sequence[str] | pw.SelectQuery, daemon_id: str, now: datetime, lease_s: float, *,
              limit: int | None = None) -> list[Claim]:
        """Claim sessions for ``daemon_id`` until ``now + lease_s``; what it got, with each
        lease's new epoch (one more than before, at every claim).

        ``sessions``: ids, or a query selecting session ids (``S.select(S.id).where(…)``).
        A session is taken when it is not owned, owned by this daemon already (a new
        incarnation), or its lease expired; a session another daemon's live lease holds, or
        one a concurrent claim or write has locked (``SKIP LOCKED``), is left out, as are
        unknown ids. A session without a lease row gets one (epoch 0, then claimed: 1).
        A daemon that is not live claims nothing; one that is gone raises :class:`FencedWrite`.
        """
        if isinstance(sessions, (str, bytes)):
            raise TypeError("claim takes a sequence of session ids or a query, not one id")
        with self.store.transaction():
            if not self._may_claim(daemon_id):
                return []
            candidates, args = self._candidates(sessions)
            if not args and not isinstance(sessions, pw.SelectQuery):
                return []
            self._execute(self._sql.ensure_leases.format(candidates=candidates), *args)
            return self._claim(f"session_id IN ({candidates})", args, self._sql.claimable, (daemon_id, naive(now)),
                               "session_id", limit, daemon_id, now, lease_s)

    @store_op
    def claim_expired(self, daemon_id: str, now: datetime, lease_s: float, live_daemons: int,
                      max_sessions: int) -> list[Claim]:
        """The failover sweep: claim expired and released leases of other daemons, oldest
        first, at most ``fair_share(expired, live_daemons, max_sessions, owned)`` of them
        (``live_daemons``: how many daemons sweep, this one included)."""
        at = naive(now)
        with self.store.transaction():
            if not self._may_claim(daemon_id):
                return []
            expired, owned = self._execute(self._sql.count_expired, daemon_id, at, daemon_id, at,
                                           daemon_id).fetchone()
            take = fair_share(int(expired), live_daemons, max_sessions, int(owned))
            if take <= 0:
                return []
            return self._claim(self._sql.held, [], self._sql.expired, (daemon_id, at, daemon_id, at),
                               "lease_expires_at, session_id",
                               take, daemon_id, now, lease_s)

    @store_op
    def claim_unleased_resumes(self, daemon_id: str, now: datetime, lease_s: float, *,
                               limit: int | None = None) -> list[Claim]:
        """Claim the sessions whose row says they must be resumed — marked for resume
        (``restart_pending``), or left ``running``/``loading`` by a dead run — but that no
        lease covers: no lease row, or an ended one (no owner, no expiry). Such rows come
        from runs without leases (one daemon, before the cluster mode was enabled): no
        sweep ever sees them. A released or expired lease is the sweep's; a live one is
        its owner's. The claimed rows are reset as a one-daemon start-up resets them (mark
        taken, a row left running → idle, no pid), in the same transaction, so two daemons
        starting at once resume each session once. At most ``limit``; oldest id first."""
        S, L = self.store.m.Session, self.store.m.SessionLease
        covered = L.select(L.session).where((L.session == S.id) & (L.owner.is_null(False)
                                                                   | L.lease_expires_at.is_null(False)))
        left_running = S.status.in_([SessionStatus.RUNNING, SessionStatus.LOADING])
        pending = S.select(S.id).where(((S.restart_pending == True) | left_running)  # noqa: E712
                                       & ~pw.fn.EXISTS(covered))
        with self.store.transaction():
            if not self._may_claim(daemon_id):
                return []
            candidates, args = self._candidates(pending)
            self._execute(self._sql.ensure_leases.format(candidates=candidates), *args)
            claims = self._claim(f"session_id IN ({candidates})", args, self._sql.claimable,
                                 (daemon_id, naive(now)), "session_id", limit, daemon_id, now, lease_s)
            ids = [claim.session_id for claim in claims]
            if ids:
                S.update(restart_pending=False).where(S.id.in_(ids)).execute()
                S.update(status=SessionStatus.IDLE, pid=None).where(S.id.in_(ids) & left_running).execute()
        return claims

    def _claim(self, scope: str, args: Sequence[Any], claimable: str, claimable_args: tuple[Any, ...],
               order: str, limit: int | None, daemon_id: str, now: datetime, lease_s: float) -> list[Claim]:
        until = naive(now + timedelta(seconds=lease_s))
        sql = self._sql.claim.format(scope=scope, claimable=claimable, order=order,
                                     limit="" if limit is None else f"LIMIT {int(limit)}")
        if not self.store.is_sqlite:
            rows = self._execute(sql, *args, *claimable_args, daemon_id, until).fetchall()
            taken = [Taken(str(sid), int(epoch), owner, expiry) for sid, epoch, owner, expiry in rows]
        else:
            before = {row[0]: (row[1], row[2]) for row in self._execute(sql, *args, *claimable_args).fetchall()}
            if not before:
                return []
            ids = json.dumps(list(before))
            self._execute(self._sql.claim_update.format(candidates=self._sql.ids_param), daemon_id, until, ids)
            rows = self._execute(self._sql.claim_read.format(candidates=self._sql.ids_param), ids).fetchall()
            taken = [Taken(str(sid), int(epoch), *before[sid]) for sid, epoch in rows]
        self.history.taken(taken, daemon_id, naive(now))
        return sorted(Claim(row.session_id, row.epoch) for row in taken)

    def _may_claim(self, daemon_id: str) -> bool:
        row = self._execute(self._sql.daemon_state, daemon_id).fetchone()
        if row is None or row[0] == DaemonState.GONE:
            raise FencedWrite(f"daemon {daemon_id!r} is not registered or was declared gone: it may not "
                              "claim sessions; register it again")
        return bool(row[0] == DaemonState.LIVE)

    # --- hand-over and end ----------------------------------------------------------------

    @store_op
    def release(self, daemon_id: str, session_ids: Sequence[str] | None = None, *, now: datetime,
                reason: str = HANDOVER, offered_to: str | None = None) -> int:
        """Hand sessions over (a draining daemon, after stopping their incarnations): their
        leases lose their owner and any daemon's next sweep claims them. ``None``: all of
        the daemon's leases. Leases it no longer owns are left alone. Returns how many.
        Their ownership rows close at ``now`` with ``reason`` (``drain``, ``shutdown``,
        ``rebalance``, ``handover``), which the next owner's row carries as its reason in.
        ``offered_to``: only that daemon's sweep takes them until they expire (a rebalance)."""
        with self.store.transaction():
            if session_ids is None:
                count = int(self._execute(self._sql.release_all, offered_to, daemon_id).rowcount)
            elif not session_ids:
                return 0
            else:
                sql = self._sql.release.format(candidates=self._sql.ids_param)
                count = int(self._execute(sql, offered_to, daemon_id, self._ids_arg(session_ids)).rowcount)
            self.history.ended(daemon_id, session_ids, naive(now), reason)
            return count

    @store_op
    def finish(self, daemon_id: str, session_ids: Sequence[str], *, now: datetime) -> int:
        """The sessions stopped running here: their leases end (no owner, no expiry, timers
        cleared) and no sweep takes them; the rows stay, so the next claim's epoch is
        higher still. Leases the daemon no longer owns are left alone. Returns how many.
        Their ownership rows close at ``now`` (``stop``)."""
        if not session_ids:
            return 0
        with self.store.transaction():
            sql = self._sql.finish.format(candidates=self._sql.ids_param)
            count = int(self._execute(sql, daemon_id, self._ids_arg(session_ids)).rowcount)
            self.history.ended(daemon_id, session_ids, naive(now), STOP)
            return count

    @store_op
    def set_timers(self, daemon_id: str, session_id: str, epoch: int, **due: datetime | None) -> bool:
        """Store durable timers of a session (``restart_due_at``, ``resume_due_at``,
        ``inactivity_due_at``, ``idle_due_at``; None clears one) in its lease, so a daemon that takes the
        session over finds them. Guarded by owner and epoch: False (nothing written) when
        the lease is no longer this incarnation's."""
        unknown = set(due) - set(TIMER_COLUMNS)
        if unknown:
            raise ValueError(f"unknown lease timers {sorted(unknown)}; use {', '.join(TIMER_COLUMNS)}")
        if not due:
            return True
        L = self.store.m.SessionLease
        values = {getattr(L, name): None if at is None else naive(at) for name, at in due.items()}
        with self.store.transaction():
            query = L.update(values).where((L.session == session_id) & (L.owner == daemon_id) & (L.epoch == epoch))
            return bool(query.execute())

    @store_op
    def set_inactivity_deadlines(self, daemon_id: str, deadlines: Sequence[Deadline]) -> int:
        """Store the inactivity and idle-exit deadlines of several running sessions (None
        clears one) in their leases, each guarded by owner and epoch as :meth:`set_timers` is: a lease no
        longer this incarnation's is left alone. One statement on PostgreSQL whatever the
        count (the heartbeat's flush, :class:`~corvid_actors.actors.cluster.ClusterSeat`);
        one per row on SQLite (one daemon). Returns how many leases were written."""
        if not deadlines:
            return 0
        with self.store.transaction():
            if self.store.is_sqlite:
                return sum(self._execute(self._sql.inactivity_deadlines, naive_or_none(due), naive_or_none(idle),
                                         sid, epoch, daemon_id).rowcount for sid, epoch, due, idle in deadlines)
            ids = [str(row.session_id) for row in deadlines]
            epochs = [int(row.epoch) for row in deadlines]
            dues = [naive_or_none(row.due) for row in deadlines]
            idles = [naive_or_none(row.idle_due) for row in deadlines]
            return int(self._execute(self._sql.inactivity_deadlines, ids, epochs, dues, idles, daemon_id).rowcount)

    # --- reads ----------------------------------------------------------------------------

    @store_op
    def owner_of(self, session_id: str) -> Lease | None:
        """The session's lease (owner, epoch, expiry, timers), or None if it never had one."""
        leases = self.leases([session_id])
        return leases[0] if leases else None

    @store_op
    def leases(self, session_ids: Sequence[str]) -> list[Lease]:
        """The lease rows of these sessions (those that have one), by session id."""
        if not session_ids:
            return []
        with self.store.transaction():
            sql = self._sql.leases.format(candidates=self._sql.ids_param)
            rows = self._execute(sql, self._ids_arg(session_ids)).fetchall()
        return [Lease(str(r[0]), r[1], int(r[2]), aware(r[3]), aware(r[4]), aware(r[5]), aware(r[6]),
                      aware(r[7])) for r in rows]

    @store_op
    def ownership(self, session_id: str) -> list[Ownership]:
        """Where the session ran, oldest first (at most ``history_max`` rows; see
        :mod:`corvid_actors.db.ownership`)."""
        with self.store.transaction():
            return self.history.of(session_id)

    @store_op
    def owned_by(self, daemon_id: str) -> list[str]:
        """Ids of the sessions whose lease the daemon holds (expired or not), sorted."""
        with self.store.transaction():
            return [row[0] for row in self._execute(self._sql.owned_by, daemon_id).fetchall()]

    @store_op
    def load(self, now: datetime, grace_s: float) -> dict[str, int]:
        """The live daemons (as :meth:`live_daemons`) and how many leases each holds or has
        been offered (a rebalance's hand-over not yet taken), by id."""
        cutoff = naive(now - timedelta(seconds=grace_s))
        with self.store.transaction():
            return {str(d): int(n) for d, n in self._execute(self._sql.load, cutoff).fetchall()}

    @store_op
    def place_new_session(self, now: datetime, grace_s: float, max_sessions: int | None = None) -> str | None:
        """The live daemon (heartbeat at most ``grace_s`` old) with the fewest leases, below
        ``max_sessions`` when given; ties go to the smallest id. None: no daemon has room."""
        cutoff = naive(now - timedelta(seconds=grace_s))
        bound = _NO_BOUND if max_sessions is None else max_sessions
        with self.store.transaction():
            row = self._execute(self._sql.place, cutoff, bound).fetchone()
        return None if row is None else str(row[0])

    # --- helpers --------------------------------------------------------------------------

    def _candidates(self, sessions: Sequence[str] | pw.SelectQuery) -> tuple[str, list[Any]]:
        """The SQL selecting the candidate session ids, and its parameters."""
        if isinstance(sessions, pw.SelectQuery):
            sql, params = sessions.sql()
            return sql, list(params)
        ids = list(dict.fromkeys(str(sid) for sid in sessions))
        return (self._sql.ids_param, [self._ids_arg(ids)]) if ids else ("", [])

    def _ids_arg(self, ids: Sequence[str]) -> Any:
        # one parameter for a list of ids: a text[] on PostgreSQL, JSON for SQLite's json_each
        ids = [str(sid) for sid in ids]
        return json.dumps(ids) if self.store.is_sqlite else ids

    def _execute(self, sql: str, *params: Any) -> Any:
        return self.store.db.execute_sql(sql, params)


__all__ = ["DEFAULT_HISTORY_MAX", "Claim", "ClusterStore", "Deadline", "Lease", "TIMER_COLUMNS", "fair_share"]
