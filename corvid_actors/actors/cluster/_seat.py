"""This daemon's seat in a cluster of daemons on one PostgreSQL (issues 20 and 36): its
id, its leases, the lease-validity clock and the durable timers it stores. See
:class:`ClusterSeat`; the actor that keeps it is
:class:`~corvid_actors.actors.cluster.ClusterMember`."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from loguru import logger

from corvid_actors.clock import Clock
from corvid_actors.content import UserContent
from corvid_actors.db.cluster import ClusterStore, Deadline
from corvid_actors.db.held import HeldMessages, TakenMessage
from corvid_actors.db.models import DaemonState
from corvid_actors.db.ownership import REBALANCE, SHUTDOWN
from corvid_actors.db.store import Store
from corvid_actors.errors import StoreError
from corvid_actors.schema.sections import ClusterConfig

__all__ = ["ClusterSeat", "sweep_resumes_at"]

#: a deadline the lease may hold, not written from here (written at the next change)
_UNKNOWN = object()
#: a session's (inactivity, idle-exit) deadlines as reported to the seat
_Dues = tuple[datetime | None, datetime | None]


def sweep_resumes_at(store_back_at: float, config: ClusterConfig) -> float:
    """When (monotonic) a daemon that saw the store come back at ``store_back_at`` sweeps
    again: one heartbeat later — every live daemon's heartbeat retries the store at once,
    so each has renewed its leases by then — plus ``outage_grace_s`` for the spread of the
    daemons' clocks and reconnects."""
    return store_back_at + config.heartbeat_s + config.outage_grace_s



@dataclass
class ClusterSeat:
    """The daemon's membership: its id, its leases' store and the lease-validity clock.
    Thread-safe (the supervisor claims on its thread, the member renews on its own)."""

    cluster: ClusterStore
    store: Store
    daemon_id: str
    config: ClusterConfig
    clock: Clock
    #: this daemon's software version (the ``daemons`` row says which version each runs)
    version: str = ""
    #: monotonic time until which no other daemon can have claimed this one's leases
    valid_until: float = 0.0
    #: sessions reported lost whose store epoch is kept (so late writes stay refused)
    _lost: set[str] = field(default_factory=set)
    #: sessions whose lease holds a durable timer set from here (cleared when it is done)
    _timed: set[str] = field(default_factory=set)
    #: (inactivity, idle-exit) deadlines reported since the last flush (latest per
    #: session; None: a turn is running) and the ones the leases hold as written from here
    _deadlines: dict[str, _Dues] = field(default_factory=dict)
    _stored_deadlines: dict[str, _Dues] = field(default_factory=dict)
    #: the store was seen down and not back since (its availability listener: ``store_seen``)
    _store_down: bool = False
    #: monotonic time this daemon last saw the store come back from an outage (None: never)
    _store_back_at: float | None = None
    #: the ClusterMember's ways to renew off schedule (set when it starts): ``ask_renewal``
    #: waits for it, ``tell_renewal`` does not (see :class:`RenewNow`)
    ask_renewal: Callable[[], object] | None = None
    tell_renewal: Callable[[], object] | None = None
    #: a renewal was told and has not run yet (one at a time), and when (monotonic) the
    #: last renewal off schedule began: while cut off, at most one per ``heartbeat_s``
    _renewal_told: bool = False
    _renewed_off_schedule_at: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    #: this daemon drains (issue 36 item 2): it sweeps nothing, takes no held message, and
    #: holds every message sent to its sessions for their next owner
    draining: bool = False

    def __post_init__(self) -> None:
        self.held = HeldMessages(self.store)

    def register(self) -> None:
        """Register the daemon (live); its leases are valid for ``lease_s`` from now."""
        started = self.clock.monotonic()
        self.cluster.register_daemon(self.daemon_id, socket.gethostname(), os.getpid(), self.version,
                                     self.clock.now())
        self.valid_until = started + self.config.lease_s

    def lease_valid(self) -> bool:
        """True while a heartbeat has renewed this daemon's leases less than ``lease_s`` ago."""
        return self.clock.monotonic() < self.valid_until

    def may_publish(self) -> bool:
        """A session's lifeline gate: :meth:`lease_valid`; when not, the daemon may just have
        woken (``SIGCONT``, a long pause) with its sessions taken over while their streams go
        on — a renewal is told at once (not at the next heartbeat), and the sessions it finds
        lost are stopped (issue 36). Cheap when the lease is valid: one clock read."""
        if self.lease_valid():
            return True
        tell_renewal = self.tell_renewal
        if tell_renewal is not None:
            with self._lock:
                tell_now = not self._renewal_told and not self._renewed_recently()
                if tell_now:
                    self._renewal_told = True
            if tell_now:
                tell_renewal()
        return False

    def confirm_leases(self) -> bool:
        """Before the admin answers or delivers anything (issue 36): when no heartbeat has
        succeeded for ``lease_s`` (a daemon just woken, or cut off), renew now and wait for
        it, so what it says next leaves out the sessions taken meanwhile (:meth:`owns`).
        True when the leases are surely this daemon's afterwards."""
        if self.lease_valid():
            return True
        with self._lock:
            recently = self._renewed_recently()
        if self.ask_renewal is not None and not recently:
            self.ask_renewal()
        return self.lease_valid()

    def renewing_off_schedule(self) -> None:
        """The member begins a renewal off schedule (:class:`RenewNow`)."""
        with self._lock:
            self._renewed_off_schedule_at = self.clock.monotonic()

    def renewal_ran(self) -> None:
        """The member renewed (or tried): the next dropped event may tell another renewal."""
        with self._lock:
            self._renewal_told = False

    def _renewed_recently(self) -> bool:
        # with the lock held: a daemon cut off drops events all the time, and each renewal
        # tries to reconnect; once per heartbeat_s is enough (a woken one renews at once)
        at = self._renewed_off_schedule_at
        return at is not None and self.clock.monotonic() - at < self.config.heartbeat_s

    def store_seen(self, reason: str | None) -> None:
        """The store's availability listener: ``reason`` when it went down, None when it is
        back (on whichever thread noticed; cheap)."""
        with self._lock:
            if reason is not None:
                self._store_down = True
            elif self._store_down:
                self._store_down = False
                self._store_back_at = self.clock.monotonic()

    @property
    def store_back_at(self) -> float | None:
        """Monotonic time this daemon last saw the store come back from an outage (None: never)."""
        return self._store_back_at

    def store_down(self) -> bool:
        """The store was seen down and has not been seen back since."""
        return self._store_down

    def sweep_held(self) -> bool:
        """No sweep now (issue 36): the store is down, or came back less than ``heartbeat_s
        + outage_grace_s`` ago. During an outage longer than ``lease_s`` every lease lapses;
        the owners' first heartbeats after it renew them, and a sweep before those would
        take the sessions of healthy daemons (and declare them gone)."""
        with self._lock:
            if self._store_down:
                return True
            back_at = self._store_back_at
        return back_at is not None and self.clock.monotonic() < sweep_resumes_at(back_at, self.config)

    def owns(self, sid: str) -> bool:
        """The store writes for ``sid`` under a lease this daemon claimed and has not lost."""
        with self._lock:
            return self.store.epoch_of(sid) is not None and sid not in self._lost

    def claim(self, sid: str) -> int | None:
        """Claim ``sid`` for a new incarnation here; its epoch (now fenced in the store), or
        None when another daemon's live lease holds it."""
        claims = self.cluster.claim([sid], self.daemon_id, self.clock.now(), self.config.lease_s)
        if not claims:
            return None
        self.adopt(sid, claims[0].epoch)
        return claims[0].epoch

    def claim_unleased_resumes(self) -> list[str]:
        """At start-up: claim the sessions a run without leases left to resume (marked for
        resume, or left running, with no lease: ``ClusterStore.claim_unleased_resumes``),
        at most ``max_sessions`` minus those held here. Their ids, fenced here; the caller
        resumes them. Called on the starting thread, before the sessions are resumed."""
        room = max(self.config.max_sessions - len(self.believed()), 0)
        claims = self.cluster.claim_unleased_resumes(self.daemon_id, self.clock.now(), self.config.lease_s,
                                                     limit=room)
        for claim in claims:
            self.adopt(claim.session_id, claim.epoch)
        if claims and len(claims) == room:
            logger.warning("cluster: claimed {} session(s) left to resume, as many as max_sessions allows; "
                           "another daemon's start-up takes the rest", room)
        return [claim.session_id for claim in claims]

    def adopt(self, sid: str, epoch: int) -> None:
        """``sid`` is this daemon's under ``epoch`` (claimed by a start or a sweep)."""
        with self._lock:
            self._lost.discard(sid)
            self._forget_deadline(sid)  # what the lease holds was written by another incarnation
            self.store.fence(sid, epoch)

    def note_deadline(self, sid: str, due: datetime | None, idle_due: datetime | None = None) -> None:
        """The session's inactivity deadline is now ``due`` (None: a turn is running, the
        deadline is re-armed by its events) and its idle exit is due at ``idle_due`` (None:
        none armed). Kept in memory only; the next heartbeat stores the changed ones
        (:meth:`flush_deadlines`). Called by the session actor on its thread when it starts
        waiting for its user, starts a turn, or is extended."""
        with self._lock:
            self._deadlines[sid] = (due, idle_due)

    def flush_deadlines(self) -> int:
        """Store the inactivity deadlines that changed since the last flush in their leases,
        in one statement (none when nothing changed), so a daemon that takes a waiting
        session over ends it at the same instant this one would have. Returns how many
        were written. Called by the ClusterMember after each heartbeat, on its thread;
        on a store error the deadlines are kept for the next one (and it raises)."""
        with self._lock:
            pending, self._deadlines = self._deadlines, {}
            rows = [Deadline(sid, epoch, *dues) for sid, dues in sorted(pending.items(), key=lambda item: item[0])
                    if (epoch := self.store.epoch_of(sid)) is not None and sid not in self._lost
                    and self._stored_deadlines.get(sid, _UNKNOWN) != dues]
        if not rows:
            return 0
        try:
            written = self.cluster.set_inactivity_deadlines(self.daemon_id, rows)
        except StoreError:
            with self._lock:
                for row in rows:
                    self._deadlines.setdefault(row.session_id, (row.due, row.idle_due))  # unless a newer one came
            raise
        with self._lock:
            for row in rows:
                if self.store.epoch_of(row.session_id) == row.epoch:
                    self._stored_deadlines[row.session_id] = (row.due, row.idle_due)
        return written

    def _forget_deadline(self, sid: str) -> None:
        # with the lock held
        self._deadlines.pop(sid, None)
        self._stored_deadlines.pop(sid, None)

    def lose(self, sid: str) -> None:
        """``sid`` was claimed elsewhere: its writes from here stay refused (the old epoch
        is kept) and it no longer counts as owned."""
        with self._lock:
            self._forget_deadline(sid)
            if self.store.epoch_of(sid) is not None:
                self._lost.add(sid)

    def release(self, sid: str) -> None:
        """Hand ``sid`` over without running it here (its adoption failed): the lease loses
        its owner and any daemon's next sweep, this one's included, claims it again. Its
        writes from here carry no epoch again. A store error is logged: the lease then
        expires as it would have anyway, since this daemon stops believing it owns it."""
        with self._lock:
            self._forget_deadline(sid)
            self._lost.discard(sid)
            had = self.store.epoch_of(sid) is not None
            self.store.unfence(sid)
        if had:
            try:
                self.cluster.release(self.daemon_id, [sid], now=self.clock.now())
            except StoreError as exc:
                logger.bind(session_id=sid).warning("could not hand the session's lease over ({})", exc)

    def offer(self, sids: list[str], target: str) -> int:
        """Hand ``sids`` over to daemon ``target`` (a rebalance, issue 36): their leases lose
        their owner and are offered to it (its next sweep takes them; anyone's once they
        expire). Called before their incarnations stop here: until then, their writes are
        still fenced by this daemon's epochs (refused once ``target`` claimed them). How
        many were handed over; a store error propagates (nothing moved)."""
        return self.cluster.release(self.daemon_id, sids, now=self.clock.now(), reason=REBALANCE, offered_to=target)

    def hand_over(self, sids: list[str], reason: str) -> int:
        """Release ``sids``' leases for any other daemon's sweep (a drain, issue 36 item 2),
        before their incarnations stop here (their writes stay fenced until then). How many
        were released; a store error propagates (nothing moved)."""
        return self.cluster.release(self.daemon_id, sids, now=self.clock.now(), reason=reason)

    def finish(self, sid: str) -> None:
        """``sid`` stopped running here: its lease ends (nobody resumes it) and its writes
        carry no epoch again. A lost session's lease is not this daemon's to end."""
        with self._lock:
            self._forget_deadline(sid)  # the lease's end clears its deadline
            lost = sid in self._lost
            self._lost.discard(sid)
            had = self.store.epoch_of(sid) is not None
            self.store.unfence(sid)
        if had and not lost:
            try:
                self.cluster.finish(self.daemon_id, [sid], now=self.clock.now())
            except StoreError as exc:  # its lease expires; a sweep may then resume it elsewhere
                logger.bind(session_id=sid).warning("could not end the session's lease ({})", exc)

    def set_due(self, sid: str, *, restart_in_s: float | None = None, resume_in_s: float | None = None) -> None:
        """Store the session's crash-restart or outage auto-resume due time in its lease, so
        that a daemon taking it over honours it at the same instant (durable timers)."""
        due: dict[str, datetime | None] = {}
        now = self.clock.now()
        if restart_in_s is not None:
            due["restart_due_at"] = now + timedelta(seconds=restart_in_s)
        if resume_in_s is not None:
            due["resume_due_at"] = now + timedelta(seconds=resume_in_s)
        self._write_due(sid, due)

    def note_due(self, sid: str) -> None:
        """The session's lease holds a due time (set by an earlier owner)."""
        self._timed.add(sid)

    def clear_due(self, sid: str) -> None:
        """The session runs again here: its lease's due times are done."""
        if sid in self._timed:
            self._write_due(sid, {"restart_due_at": None, "resume_due_at": None})

    def _write_due(self, sid: str, due: dict[str, datetime | None]) -> None:
        epoch = self.store.epoch_of(sid)
        if epoch is None or not due:
            return
        try:
            self.cluster.set_timers(self.daemon_id, sid, epoch, **due)
        except StoreError as exc:  # the timer still runs here; only a takeover would miss it
            logger.bind(session_id=sid).warning("could not store the session's due time ({})", exc)
            return
        if any(value is not None for value in due.values()):
            self._timed.add(sid)
        else:
            self._timed.discard(sid)

    def hold(self, sid: str, content: UserContent) -> int:
        """Commit a message for ``sid`` in the hand-off buffer (``db/held.py``): its next
        owner — whichever daemon takes it — delivers it. A store error propagates (the
        message is not acknowledged)."""
        return self.held.hold(sid, content, self.daemon_id)

    def take_held(self, sid: str) -> list[TakenMessage]:
        """The messages held for ``sid``, moved into its conversation under this daemon's
        lease (exactly once across daemons: ``HeldMessages.take``); none while draining,
        or when ``sid`` is not this daemon's."""
        epoch = self.store.epoch_of(sid)
        if self.draining or epoch is None or not self.owns(sid):
            return []
        return self.held.take(sid, self.daemon_id, epoch)

    def believed(self) -> set[str]:
        """The sessions this daemon believes it owns (the store writes for them)."""
        with self._lock:
            return {sid for sid in self.store.fenced_sessions() if sid not in self._lost}

    def leave(self) -> None:
        """This daemon stops: its row says gone (nobody waits for its heartbeat)."""
        self.cluster.set_daemon_state(self.daemon_id, DaemonState.GONE)

    def release_all(self, reason: str = SHUTDOWN) -> int:
        """Hand every lease over (an orderly shutdown: ``drain`` or ``shutdown``, the
        reason the ownership history gives): other daemons claim them at once."""
        with self._lock:
            self._lost.clear()
            self._deadlines.clear()
            self._stored_deadlines.clear()
        return self.cluster.release(self.daemon_id, now=self.clock.now(), reason=reason)
