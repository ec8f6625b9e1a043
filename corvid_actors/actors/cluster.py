"""This daemon's seat in a cluster of daemons on one PostgreSQL (issue 20).

:class:`ClusterSeat` is what the supervisor needs to own sessions: it claims a session's
lease before an incarnation starts (the lease's new epoch then rides on every write the
store makes for that session: ``Store.fence``), finishes it when the session stops
running here, and says whether this daemon's leases are surely still its own
(:meth:`ClusterSeat.lease_valid`: no heartbeat has succeeded for ``lease_s`` seconds —
a paused or cut-off daemon — means another daemon may have claimed them, so the session's
lifeline publishes nothing until a heartbeat says otherwise).

:class:`ClusterMember` is the actor that keeps the seat: every ``[cluster] heartbeat_s`` it
renews the daemon's row and all its leases in one statement; when fewer leases were
renewed than the store writes for, the missing ones were claimed by another daemon and the
supervisor is told :class:`SessionsLost` (it stops those incarnations without a word).
After a heartbeat it stores the inactivity deadlines its sessions reported to the seat
since the last one, those that changed only, in one more statement (none when nothing
changed): :meth:`ClusterSeat.flush_deadlines`.
Every ``sweep_interval_s`` (plus jitter) it declares dead daemons gone and claims its fair
share of expired or released leases; the supervisor is told :class:`AdoptSessions` and
resumes them as a start-up after a crash does (a turn only for a session that was mid-turn).

Messages: :class:`AdoptSessions` and :class:`SessionsLost` (told to the supervisor);
``ask(ClusterStats())`` on the member replies with a dict of counts.
"""

from __future__ import annotations

import os
import random
import socket
import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pykka
from loguru import logger

from corvid_actors.actors.base import ActivityTracker, TrackedActor, tell
from corvid_actors.actors.timers import ScheduleTimer, Timers
from corvid_actors.clock import Clock
from corvid_actors.config_sections import ClusterConfig
from corvid_actors.db.cluster import ClusterStore, Deadline
from corvid_actors.db.models import DaemonState
from corvid_actors.db.store import Store
from corvid_actors.errors import FencedWrite, StoreError

__all__ = ["AdoptSessions", "ClusterMember", "ClusterSeat", "ClusterStats", "SessionsLost", "new_daemon_id",
           "sweep_resumes_at"]


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


def new_daemon_id() -> str:
    """``host:pid:random`` — one process, one id (a restarted daemon is a new member)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class AdoptSessions:
    """Sessions this daemon has just claimed (their epochs are fenced in the store already):
    resume each. Told by the ClusterMember (its thread); handled on the supervisor's."""

    session_ids: tuple[str, ...]


@dataclass(frozen=True)
class SessionsLost:
    """Sessions another daemon has claimed: stop their incarnations here without a write or
    an event. Told by the ClusterMember and by a write refused as fenced (any thread);
    handled on the supervisor's thread."""

    session_ids: tuple[str, ...]


@dataclass(frozen=True)
class ClusterStats:
    """Asked by tests and the admin (any thread); replies ``{"daemon_id", "heartbeats",
    "sweeps", "adopted", "lost", "owned"}``."""


@dataclass(frozen=True)
class _Heartbeat:
    """Time to renew (told by the timer table; handled on the member's thread)."""


@dataclass(frozen=True)
class _Sweep:
    """Time to sweep expired leases (told by the timer table; handled on the member's thread)."""


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
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def register(self) -> None:
        """Register the daemon (live); its leases are valid for ``lease_s`` from now."""
        started = self.clock.monotonic()
        self.cluster.register_daemon(self.daemon_id, socket.gethostname(), os.getpid(), self.version,
                                     self.clock.now())
        self.valid_until = started + self.config.lease_s

    def lease_valid(self) -> bool:
        """True while a heartbeat has renewed this daemon's leases less than ``lease_s`` ago."""
        return self.clock.monotonic() < self.valid_until

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
                self.cluster.release(self.daemon_id, [sid])
            except StoreError as exc:
                logger.bind(session_id=sid).warning("could not hand the session's lease over ({})", exc)

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
                self.cluster.finish(self.daemon_id, [sid])
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

    def believed(self) -> set[str]:
        """The sessions this daemon believes it owns (the store writes for them)."""
        with self._lock:
            return {sid for sid in self.store.fenced_sessions() if sid not in self._lost}

    def leave(self) -> None:
        """This daemon stops: its row says gone (nobody waits for its heartbeat)."""
        self.cluster.set_daemon_state(self.daemon_id, DaemonState.GONE)

    def release_all(self) -> int:
        """Hand every lease over (an orderly shutdown): other daemons claim them at once."""
        with self._lock:
            self._lost.clear()
            self._deadlines.clear()
            self._stored_deadlines.clear()
        return self.cluster.release(self.daemon_id)


class ClusterMember(TrackedActor):
    """See the module docstring."""

    survive_errors = True  # one bad told message never kills it (actors/base.py)

    def __init__(self, tracker: ActivityTracker, *, seat: ClusterSeat, timers: Timers,
                 supervisor: pykka.ActorRef[Any]) -> None:
        super().__init__(tracker)
        self.seat = seat
        self.timers = timers
        self.supervisor = supervisor
        # jitter from the daemon id: daemons do not sweep in step, and a run is reproducible
        self._rng = random.Random(seat.daemon_id)
        self._stats = {"heartbeats": 0, "sweeps": 0, "adopted": 0, "lost": 0}

    def on_start(self) -> None:
        self.seat.store.add_listener(self.seat.store_seen)
        self._schedule(_Heartbeat(), self.seat.config.heartbeat_s)
        self._schedule(_Sweep(), self._rng.uniform(0.0, self.seat.config.sweep_jitter_s))

    def on_receive(self, message: Any) -> Any:
        match message:
            case _Heartbeat():
                try:
                    self._heartbeat()
                finally:  # whatever went wrong, the daemon keeps beating
                    self._schedule(_Heartbeat(), self.seat.config.heartbeat_s)
            case _Sweep():
                cfg = self.seat.config
                try:
                    self._sweep()
                finally:
                    self._schedule(_Sweep(), cfg.sweep_interval_s + self._rng.uniform(0.0, cfg.sweep_jitter_s))
            case ClusterStats():
                return {"daemon_id": self.seat.daemon_id, **self._stats, "owned": len(self.seat.believed())}
        return None

    def on_stop(self) -> None:
        self.seat.store.remove_listener(self.seat.store_seen)

    def _schedule(self, message: object, delay_s: float) -> None:
        tell(self.timers, ScheduleTimer(("cluster", type(message).__name__), delay_s, self.actor_ref, message))

    def _heartbeat(self) -> None:
        seat, cfg = self.seat, self.seat.config
        started = seat.clock.monotonic()
        believed = seat.believed()
        if seat.store_down():
            # retry the store now, whatever its reconnect backoff: the owners renew their
            # leases within one heartbeat of the store's return (the sweeps wait that long)
            seat.store.probe()
        try:
            renewed = seat.cluster.heartbeat(seat.daemon_id, seat.clock.now(), cfg.lease_s)
        except FencedWrite:
            # declared gone (no heartbeat for too long): every lease may be another's now
            logger.warning("cluster: this daemon was declared gone; stopping its {} session(s) and "
                           "registering again", len(believed))
            self._lost(believed)
            try:
                seat.register()
            except StoreError as exc:
                logger.warning("cluster: could not register again ({}); retrying at the next heartbeat", exc)
            return
        except StoreError as exc:  # the leases stay valid until they would have expired
            logger.warning("cluster: heartbeat failed ({})", exc)
            return
        self._stats["heartbeats"] += 1
        seat.valid_until = started + cfg.lease_s
        try:
            seat.flush_deadlines()
        except StoreError as exc:  # kept: the next heartbeat writes them
            logger.warning("cluster: could not store the sessions' inactivity deadlines ({})", exc)
        if renewed < len(believed):
            try:
                owned = set(seat.cluster.owned_by(seat.daemon_id))
            except StoreError as exc:
                logger.warning("cluster: could not read this daemon's leases ({})", exc)
                return
            self._lost(believed - owned)

    def _lost(self, sids: set[str]) -> None:
        if not sids:
            return
        for sid in sids:
            self.seat.lose(sid)
        self._stats["lost"] += len(sids)
        logger.warning("cluster: {} session(s) were claimed by another daemon: stopping them here", len(sids))
        tell(self.supervisor, SessionsLost(tuple(sorted(sids))))

    def _sweep(self) -> None:
        seat, cfg = self.seat, self.seat.config
        if seat.store_down():
            seat.store.probe()  # back? then the grace starts now (sweep_held)
        if seat.sweep_held():
            return
        now = seat.clock.now()
        try:
            seat.cluster.expire_dead_daemons(now, cfg.dead_daemon_grace_s, sparing=seat.daemon_id)
            live = seat.cluster.live_daemons(now, cfg.dead_daemon_grace_s)
            claims = seat.cluster.claim_expired(seat.daemon_id, now, cfg.lease_s, max(len(live), 1),
                                                cfg.max_sessions)
        except FencedWrite:
            return  # declared gone: the next heartbeat registers again
        except StoreError as exc:
            logger.warning("cluster: sweep failed ({})", exc)
            return
        self._stats["sweeps"] += 1
        if not claims:
            return
        for claim in claims:
            seat.adopt(claim.session_id, claim.epoch)
        self._stats["adopted"] += len(claims)
        logger.info("cluster: claimed {} session(s) whose owner stopped renewing", len(claims))
        tell(self.supervisor, AdoptSessions(tuple(c.session_id for c in claims)))
