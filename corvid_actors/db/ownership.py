"""Where each session ran (issue 36 item 8): its owners over time, for ``admin session``.

One ``session_ownership`` row per lease held: the daemon, the lease's epoch, from when
until when, and why the session came (``reason_in``) and went (``reason_out``). The rows
are written by :class:`~corvid_actors.db.cluster.ClusterStore` in the transaction that
changes the lease, so the history cannot disagree with the lease: a session has at most
one open row (no ``ended_at``), its current owner's.

Why a session came to a daemon (``reason_in``):

- ``start``: a start, a resume of a stopped session, or a start-up taking a session a run
  without leases left to resume — nobody held it;
- ``failover``: its owner stopped renewing (expired lease), or registered again after a
  restart (its earlier life's leases are let go);
- ``drain``, ``shutdown``, ``rebalance``, ``handover``: its owner handed it over (its
  row's ``reason_out``), and this daemon's sweep took it.

Why it went (``reason_out``): ``stop`` (it stopped running there: ended lease),
``failover``, ``drain`` (``admin drain``), ``shutdown`` (any other orderly stop),
``rebalance`` (``admin rebalance``, or a daemon joining), ``handover`` (an adoption that
failed, handed to the next sweep).

Bounded: each write keeps the last ``[cluster] ownership_history_max`` rows of the
sessions it touches (0: no history is written). The single-daemon mode (SQLite, no
``[cluster]``) has no leases and writes no history.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

import peewee as pw

from corvid_actors.db.naive_utc import aware
from corvid_actors.db.store import Store

START = "start"
STOP = "stop"
FAILOVER = "failover"
DRAIN = "drain"
SHUTDOWN = "shutdown"
REBALANCE = "rebalance"
HANDOVER = "handover"
#: every reason a row may carry
REASONS = frozenset({START, STOP, FAILOVER, DRAIN, SHUTDOWN, REBALANCE, HANDOVER})


class Taken(NamedTuple):
    """A lease just claimed, with what it was before the claim."""

    session_id: str
    epoch: int
    previous_owner: str | None
    previous_expiry: Any  # naive UTC (text on SQLite), or None


@dataclass(frozen=True)
class Ownership:
    """One stretch of a session on one daemon; times are aware UTC (``until`` None: it
    is there now)."""

    daemon_id: str
    epoch: int
    since: datetime
    until: datetime | None
    reason_in: str
    reason_out: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (ISO times), for the admin."""
        return {"daemon": self.daemon_id, "epoch": self.epoch, "since": self.since.isoformat(),
                "until": None if self.until is None else self.until.isoformat(),
                "reason_in": self.reason_in, "reason_out": self.reason_out}


class OwnershipLog:
    """The ``session_ownership`` rows of a store. Its writes run inside the caller's
    transaction (a :class:`~corvid_actors.db.cluster.ClusterStore` operation); ``keep``:
    the rows kept per session (0: none written)."""

    def __init__(self, store: Store, keep: int) -> None:
        self.store = store
        self.keep = keep

    def taken(self, rows: Sequence[Taken], daemon_id: str, now: datetime) -> None:
        """``daemon_id`` claimed these leases at ``now`` (naive UTC): the previous owner's
        open row closes (``failover`` when it was another daemon's, ``stop`` when it was
        left open by an ended lease) and the new owner's opens, with the reason the
        previous state gives (a released lease: the reason it was released for)."""
        if self.keep <= 0 or not rows:
            return
        H = self.store.m.SessionOwnership
        ids = [row.session_id for row in rows]
        released = [row.session_id for row in rows if row.previous_owner is None and row.previous_expiry is not None]
        last = self._last_reasons(released) if released else {}
        closing: dict[str, list[str]] = defaultdict(list)
        opened = []
        for sid, epoch, owner, expiry in rows:
            if owner is not None and owner != daemon_id:
                out, came = FAILOVER, FAILOVER
            elif owner is None and expiry is not None:  # released: handed over for a reason
                out, came = HANDOVER, last.get(sid) or HANDOVER
            else:  # ended (or its own, never ended): a new start
                out, came = STOP, START
            closing[out].append(sid)
            opened.append({"session": sid, "daemon_id": daemon_id, "epoch": epoch, "started_at": now,
                           "reason_in": came})
        for reason, sids in closing.items():
            H.update(ended_at=now, reason_out=reason).where(H.session.in_(sids) & H.ended_at.is_null()).execute()
        H.insert_many(opened).execute()
        self._prune(ids)

    def ended(self, daemon_id: str, session_ids: Sequence[str] | None, now: datetime, reason: str) -> None:
        """``daemon_id`` let these leases go at ``now`` (``None``: all of its leases): its
        open rows of them close with ``reason``. Called in the transaction that changed
        the leases; the open rows are exactly the leases it held."""
        if reason not in REASONS:
            raise ValueError(f"an ownership reason is one of {', '.join(sorted(REASONS))} (got {reason!r})")
        if self.keep <= 0 or (session_ids is not None and not session_ids):
            return
        H = self.store.m.SessionOwnership
        which = (H.daemon_id == daemon_id) & H.ended_at.is_null()
        if session_ids is not None:
            which &= H.session.in_(list(session_ids))
        H.update(ended_at=now, reason_out=reason).where(which).execute()

    def of(self, session_id: str) -> list[Ownership]:
        """The session's history, oldest first (at most ``keep`` rows)."""
        H = self.store.m.SessionOwnership
        query = (H.select(H.daemon_id, H.epoch, H.started_at, H.ended_at, H.reason_in, H.reason_out)
                 .where(H.session == session_id).order_by(H.id.desc()).tuples())
        rows = [Ownership(str(d), int(e), aware(s) or datetime.min.replace(tzinfo=UTC), aware(u), str(i), o)
                for d, e, s, u, i, o in query]
        return rows[::-1]

    def _last_reasons(self, ids: Sequence[str]) -> dict[str, str | None]:
        # each session's newest row's reason_out (a released lease: why it was handed over)
        H = self.store.m.SessionOwnership
        newest = H.select(pw.fn.MAX(H.id)).where(H.session.in_(list(ids))).group_by(H.session)
        return {str(sid): reason for sid, reason in H.select(H.session, H.reason_out).where(H.id.in_(newest)).tuples()}

    def _prune(self, ids: Sequence[str]) -> None:
        # per session, keep the newest ``keep`` rows
        db = self.store.db
        p = db.param
        marks = ", ".join([p] * len(ids))
        db.execute_sql(
            "DELETE FROM session_ownership WHERE id IN (SELECT id FROM (SELECT id, row_number() OVER "
            f"(PARTITION BY session_id ORDER BY id DESC) AS n FROM session_ownership WHERE session_id IN ({marks})) "
            f"AS ranked WHERE ranked.n > {p})", (*ids, self.keep))


__all__ = ["DRAIN", "FAILOVER", "HANDOVER", "Ownership", "OwnershipLog", "REASONS", "REBALANCE", "SHUTDOWN",
           "START", "STOP", "Taken"]
