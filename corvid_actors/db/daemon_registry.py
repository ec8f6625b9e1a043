"""The daemons of several on one database (issue 20): the ``daemons`` table — each
daemon's registration, its heartbeat (which renews its leases too) and its state (live,
draining, gone), and the sweep that declares a silent one gone.

:class:`DaemonRegistry` is a collaborator of :class:`~corvid_actors.db.cluster.ClusterStore`,
which holds it as ``daemons`` and answers these operations through it. It works on the
store's connection, lock and reconnects, the cluster's SQL statements and its ownership
log; each method is one transaction, and every time comes from the caller.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from corvid_actors.db.cluster_sql import Statements
from corvid_actors.db.models import DaemonState
from corvid_actors.db.naive_utc import naive
from corvid_actors.db.ownership import FAILOVER, OwnershipLog
from corvid_actors.db.store import Store
from corvid_actors.db.store_base import store_op
from corvid_actors.errors import FencedWrite


class DaemonRegistry:
    """See the module docstring. Thread-safe as the store is."""

    def __init__(self, store: Store, sql: Statements, history: OwnershipLog) -> None:
        self.store = store
        self._sql = sql
        self._history = history

    @store_op
    def register_daemon(self, daemon_id: str, host: str, pid: int | None, version: str, now: datetime) -> list[str]:
        """Register (or re-register) the daemon as live. A daemon id is one process: every
        lease still held under this id by an earlier life (a restart, or a life that was
        declared gone and stopped its sessions) loses its owner and expires now at the
        latest — nothing of theirs runs here — so any daemon's sweep, this one's included,
        or an explicit :meth:`~corvid_actors.db.cluster.ClusterStore.claim` takes them over
        with a new epoch. (Kept under this id, an expired lease would be renewed by the next
        heartbeat with nothing running.) Returns the ids of those whose lease had not
        expired yet."""
        at = naive(now)
        with self.store.transaction():
            self._execute(self._sql.register, daemon_id, host, pid, at, at, version)
            earlier = [row[0] for row in self._execute(self._sql.leases_of, at, daemon_id).fetchall()]
            self._execute(self._sql.release_leases_of, at, at, daemon_id)
            self._history.ended(daemon_id, None, at, FAILOVER)  # nothing of its earlier life runs
        return sorted(earlier)

    @store_op
    def heartbeat(self, daemon_id: str, now: datetime, lease_s: float) -> int:
        """Renew the daemon's heartbeat and every lease it owns until ``now + lease_s``; the
        number of leases renewed. One statement on PostgreSQL (two in one transaction on
        SQLite). Leases another daemon claimed are no longer this one's and stay as they are.

        Raises :class:`FencedWrite` if the daemon is not registered or was declared gone:
        its sessions may be running elsewhere, so it must stop them and register again.
        """
        at, until = naive(now), naive(now + timedelta(seconds=lease_s))
        with self.store.transaction():
            if self.store.is_sqlite:
                beats = self._execute(self._sql.heartbeat, at, daemon_id).rowcount
                renewed = self._execute(self._sql.heartbeat_leases, until, daemon_id).rowcount if beats else 0
            else:
                beats, renewed = self._execute(self._sql.heartbeat, at, daemon_id, until).fetchone()
        if not beats:
            raise FencedWrite(f"daemon {daemon_id!r} is not registered or was declared gone (no heartbeat "
                              "for too long): stop its sessions and register it again")
        return int(renewed)

    @store_op
    def set_daemon_state(self, daemon_id: str, state: str) -> bool:
        """Set the daemon's state (``DaemonState``: live, draining, gone); False if unknown."""
        if state not in (DaemonState.LIVE, DaemonState.DRAINING, DaemonState.GONE):
            raise ValueError(f"a daemon's state is live, draining or gone (got {state!r})")
        D = self.store.m.Daemon
        with self.store.transaction():
            return bool(D.update(state=state).where(D.id == daemon_id).execute())

    @store_op
    def daemon_state(self, daemon_id: str) -> str | None:
        """The daemon's state, or None if it is not registered."""
        with self.store.transaction():
            row = self._execute(self._sql.daemon_state, daemon_id).fetchone()
        return None if row is None else str(row[0])

    @store_op
    def live_daemons(self, now: datetime, grace_s: float) -> list[str]:
        """Ids of the live daemons whose heartbeat is at most ``grace_s`` old, sorted."""
        cutoff = naive(now - timedelta(seconds=grace_s))
        with self.store.transaction():
            return [row[0] for row in self._execute(self._sql.live_daemons, cutoff).fetchall()]

    @store_op
    def live_daemon_versions(self, now: datetime, grace_s: float) -> dict[str, str]:
        """The software version each live daemon registered with (as :meth:`live_daemons`),
        by id: during a rolling upgrade, two releases run side by side."""
        D = self.store.m.Daemon
        cutoff = naive(now - timedelta(seconds=grace_s))
        with self.store.transaction():
            query = (D.select(D.id, D.version).where((D.state == DaemonState.LIVE) & (D.heartbeat_at >= cutoff))
                     .order_by(D.id).tuples())
            return {daemon_id: version for daemon_id, version in query}

    @store_op
    def expire_dead_daemons(self, now: datetime, grace_s: float, *, sparing: str = "") -> list[str]:
        """Declare gone every daemon whose heartbeat is older than ``grace_s``; their ids.
        Their leases expired long before (``grace_s`` ≥ ``lease_s``) and are swept as any
        expired lease; a gone daemon's next heartbeat raises :class:`FencedWrite`.

        ``sparing``: the sweeping daemon's id. A daemon that sweeps is alive, however late
        its own heartbeat is (a loaded host): declaring itself gone would only make it stop
        and restart every session it holds."""
        cutoff = naive(now - timedelta(seconds=grace_s))
        with self.store.transaction():
            if self.store.is_sqlite:
                ids = [row[0] for row in self._execute(self._sql.dead_daemons, cutoff, sparing).fetchall()]
                if ids:
                    self._execute(self._sql.mark_gone, cutoff, sparing)
            else:
                ids = [row[0] for row in self._execute(self._sql.mark_gone, cutoff, sparing).fetchall()]
        return sorted(ids)

    def _execute(self, sql: str, *params: Any) -> Any:
        return self.store.db.execute_sql(sql, params)
