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

After a store outage it sweeps nothing (and declares nobody gone) until one heartbeat plus
``outage_grace_s`` after it saw the store back (``ClusterSeat.sweep_held``), and while the
store is down its heartbeat retries it at once: every live owner renews before anyone may
take its sessions (issue 36). :class:`RenewNow` renews off schedule when the leases are not
known to be valid — a woken daemon — before the admin answers and when a lifeline dropped
an event, so the sessions taken meanwhile stop at once, not at the next heartbeat.

Messages: :class:`AdoptSessions` and :class:`SessionsLost` (told to the supervisor);
``ask(ClusterStats())`` on the member replies with a dict of counts.
"""
from __future__ import annotations

import os
import random
import socket
import uuid
from dataclasses import dataclass
from typing import Any

import pykka
from loguru import logger

from corvid_actors.actors.base import ActivityTracker, TrackedActor, tell
from corvid_actors.actors.cluster._seat import ClusterSeat, sweep_resumes_at
from corvid_actors.actors.timers import ScheduleTimer, Timers
from corvid_actors.db.models import DaemonState
from corvid_actors.errors import FencedWrite, StoreError

__all__ = ["AdoptSessions", "ClusterMember", "ClusterSeat", "ClusterStats", "DeliverHeld", "HandOverIdle",
           "Rebalance", "RenewNow", "SendOrHold", "SessionsLost", "new_daemon_id", "sweep_resumes_at"]


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
class Rebalance:
    """Hand idle sessions over (issue 36): this daemon offers those beyond ``[cluster]
    rebalance_tolerance`` more than the least-loaded live daemon holds to the least loaded
    (``db.balance.rebalance_moves``), whose next sweep takes them. Only sessions waiting
    for their user move — never one mid-turn, starting, paused or due for a restart — so
    the move costs no model turn (the new owner resumes them ready). Asked by the
    AdminActor (``admin rebalance``; replies with a dict: ``daemon_id``, ``load`` before,
    ``moved`` by target, ``kept_busy``), told by the ClusterMember when a daemon joins
    (``rebalance_on_join``); handled on the supervisor's thread."""

    #: why (the sessions' ``session_stopped`` reason is ``rebalance`` either way)
    cause: str = "admin"


@dataclass(frozen=True)
class SendOrHold:
    """A user message for a session (issue 36 item 2): delivered to its incarnation when it
    runs here (this daemon owns it and does not drain), else committed to the hand-off
    buffer (``db/held.py``) for its owner — started here first when nobody owns it.
    Asked by the AdminActor (``admin send`` with several daemons); handled on the
    supervisor's thread (so a hand-over never runs between the check and the delivery).
    Replies ``{"held": bool, "owner": daemon id or None, "pid": pid, StartTicket or None,
    "taken": n}``; the message is committed before the reply either way."""

    session_id: str
    text: Any


@dataclass(frozen=True)
class DeliverHeld:
    """Take the messages held for a session and deliver them (issue 36 item 2), when this
    daemon owns it and does not drain; with ``start``, claim and start it first when
    nobody owns it. Asked by the AdminActor (another daemon held a message: its
    ``deliver_held``), told by the ClusterMember (its heartbeat's backstop); handled on the
    supervisor's thread. Replies as :class:`SendOrHold` does (without ``held``)."""

    session_id: str
    start: bool = False


@dataclass(frozen=True)
class HandOverIdle:
    """A draining daemon hands over the sessions waiting for their user now (issue 36
    item 2), and a mid-turn one once its turn has ended (asked again by the drain): their
    rows are marked for resume, their leases released (any other daemon's sweep claims
    them, and delivers what was held for them) and their incarnations stopped
    (``session_stopped``, reason ``reason``). Asked by the daemon's drain; handled on the
    supervisor's thread. Replies with the ids handed over."""

    reason: str = "drain"


@dataclass(frozen=True)
class ClusterStats:
    """Asked by tests, the admin and the metrics (any thread); replies ``{"daemon_id",
    "heartbeats", "sweeps", "adopted", "lost", "owned", "heartbeat_age_s"}``."""


@dataclass(frozen=True)
class _Heartbeat:
    """Time to renew (told by the timer table; handled on the member's thread)."""


@dataclass(frozen=True)
class RenewNow:
    """Renew now, off the heartbeat's schedule, unless a heartbeat has succeeded within
    ``lease_s`` (issue 36): asked by the admin before it answers, told by a session's
    lifeline when it had to drop an event (a woken daemon). Handled on the member's thread,
    so it never runs beside a heartbeat; its sessions taken meanwhile are marked lost (and
    the supervisor told) before it returns."""


@dataclass(frozen=True)
class _Sweep:
    """Time to sweep expired leases (told by the timer table; handled on the member's thread)."""



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
        self._stats = {"heartbeats": 0, "sweeps": 0, "adopted": 0, "lost": 0, "joined": 0}
        #: the live daemons the last sweep saw (None: none yet), to notice one joining
        self._live: set[str] | None = None

    def on_start(self) -> None:
        me = self.actor_ref
        self.seat.ask_renewal = lambda: me.ask(RenewNow())
        self.seat.tell_renewal = lambda: tell(me, RenewNow())
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
            case RenewNow():
                try:
                    if not self.seat.lease_valid():
                        self.seat.renewing_off_schedule()
                        self._heartbeat()
                finally:
                    self.seat.renewal_ran()
            case ClusterStats():
                seat = self.seat
                # the heartbeat's lag: how long since the last renewal that succeeded
                age_s = seat.clock.monotonic() - (seat.valid_until - seat.config.lease_s)
                return {"daemon_id": seat.daemon_id, **self._stats, "owned": len(seat.believed()),
                        "heartbeat_age_s": round(max(0.0, age_s), 3)}
        return None

    def on_stop(self) -> None:
        self.seat.ask_renewal = self.seat.tell_renewal = None
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
        if renewed < len(believed):
            # the sessions taken meanwhile are marked lost BEFORE the leases count as valid
            # again: the lifelines' gate and the admin (confirm_leases) let nothing of them out
            try:
                owned = set(seat.cluster.owned_by(seat.daemon_id))
            except StoreError as exc:
                logger.warning("cluster: could not read this daemon's leases ({})", exc)
                return
            self._lost(believed - owned)
        seat.valid_until = started + cfg.lease_s
        try:
            seat.flush_deadlines()
        except StoreError as exc:  # kept: the next heartbeat writes them
            logger.warning("cluster: could not store the sessions' inactivity deadlines ({})", exc)
        self._check_schema()
        self._deliver_held()

    def _deliver_held(self) -> None:
        """The backstop of the hand-off buffer (issue 36 item 2): the sessions of this
        daemon with messages held for them — accepted by another daemon whose notice did
        not arrive, or meanwhile — are told to take them (one query; none while draining)."""
        seat = self.seat
        if seat.draining:
            return
        try:
            sids = seat.held.sessions_of(seat.daemon_id)
        except StoreError as exc:
            logger.warning("cluster: could not read the messages held for this daemon's sessions ({})", exc)
            return
        for sid in sids:
            tell(self.supervisor, DeliverHeld(sid))

    def _check_schema(self) -> None:
        """Another release may have migrated the database since this daemon opened it (one
        row read per heartbeat): on a schema it cannot run with, it takes no new work — no
        sweep, no start (the supervisor refuses), and its row says draining, so nobody
        places a session on it (issue 36)."""
        seat = self.seat
        refused_before = seat.store.schema_refusal is not None
        try:
            refusal = seat.store.check_schema()
        except StoreError as exc:
            logger.warning("cluster: could not read the schema's version ({})", exc)
            return
        if refusal is not None and not refused_before:
            logger.error("cluster: this daemon takes no new work (its row says draining): {}", refusal)
            try:
                seat.cluster.set_daemon_state(seat.daemon_id, DaemonState.DRAINING)
            except StoreError as exc:
                logger.warning("cluster: could not mark this daemon draining ({})", exc)

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
        if seat.sweep_held() or seat.store.schema_refusal is not None or seat.draining:
            return  # a draining daemon takes nothing: what it hands over goes to the others
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
        self._notice_joins(set(live))
        if not claims:
            return
        for claim in claims:
            seat.adopt(claim.session_id, claim.epoch)
        self._stats["adopted"] += len(claims)
        logger.info("cluster: claimed {} session(s) whose owner stopped renewing", len(claims))
        tell(self.supervisor, AdoptSessions(tuple(c.session_id for c in claims)))

    def _notice_joins(self, live: set[str]) -> None:
        """A daemon joined since the last sweep (issue 36): with ``rebalance_on_join``, this
        one offers it the idle sessions beyond its share (the supervisor decides which).
        Every daemon notices at its own next sweep; the arrival needs no message."""
        seen, self._live = self._live, live
        if seen is None:
            return
        joined = live - seen - {self.seat.daemon_id}
        if not joined:
            return
        self._stats["joined"] += len(joined)
        if self.seat.config.rebalance_on_join:
            logger.info("cluster: daemon(s) {} joined: offering them idle sessions", ", ".join(sorted(joined)))
            tell(self.supervisor, Rebalance(cause="join"))
