"""The SessionSupervisor's books and the primitive moves every concern is made of.

:class:`SupervisorCore` holds what the supervisor talks to (store, builder, bus, timers,
slot pool, approvals, credits, the live registry) and what it remembers (incarnations,
per-session meta, paused sessions, counters). Its methods are the moves the concern
modules (``_start``, ``_resume``, ``_exits``, ``_outage``, ``_housekeeping``) combine:
end an incarnation silently (:meth:`~SupervisorCore.kill`), the single cleanup path
(seed invariant 14), a stop, a write that must happen, an event, the housekeeping
timers. Everything runs on the supervisor's thread; blocking work (closing an
incarnation's resources) goes to a tracked worker.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from typing import Any

import pykka

from corvid_actors.actors.approvals import CancelSession
from corvid_actors.actors.base import ActivityTracker, tell
from corvid_actors.actors.cluster import ClusterSeat, SessionsLost
from corvid_actors.actors.delta_pump import DeltaPump
from corvid_actors.actors.events import Publish, PublishMany, RemoveSession
from corvid_actors.actors.live import LiveSessions
from corvid_actors.actors.retry import PendingWrites
from corvid_actors.actors.session_messages import Abort
from corvid_actors.actors.slots import ReleaseSlot
from corvid_actors.actors.supervisor._state import (
    Incarnation,
    Meta,
    Passivated,
    Paused,
    _FallbackCheck,
    _Prune,
)
from corvid_actors.actors.timers import CancelTimer, CancelTimers, ScheduleTimer, Timers
from corvid_actors.clock import Clock
from corvid_actors.config import Config
from corvid_actors.core.io_loop import IoLoop
from corvid_actors.errors import RuntimeStoppedError
from corvid_actors.events import Event, SessionStopped
from corvid_actors.loop.payload_guard import snapshot_dir
from corvid_actors.policy.supervision import fallback_check_at, overdue_after
from corvid_actors.telemetry.tracing import NO_TRACING, Tracing
from corvid_actors.wiring.builder import close_resources


class SupervisorCore:
    """The supervisor's collaborators, tables and primitive moves (see the module docstring).

    ``me`` is the supervisor's own ref (the target of its timers), set when it starts."""

    def __init__(
        self,
        tracker: ActivityTracker,
        *,
        config: Config,
        clock: Clock,
        store: Any,
        builder: Any,
        bus: pykka.ActorRef[Any],
        timers: Timers,
        slot_pool: pykka.ActorRef[Any] | None,
        approvals: pykka.ActorRef[Any] | None,
        credits: pykka.ActorRef[Any] | None,
        live: LiveSessions,
        io_loop: IoLoop[Any] | None = None,
        cluster: ClusterSeat | None = None,
        tracing: Tracing = NO_TRACING,
        journal: Any = None,
    ) -> None:
        #: the runtime's journal (``corvid_actors.actors.journal.Journal``; None: off)
        self.journal = journal
        self.tracker = tracker
        #: OpenTelemetry spans: the supervisor's decisions here, the sessions' through their wiring
        self.tracing = tracing
        #: the runtime's I/O loop: model calls of providers that stream asynchronously
        self.io_loop = io_loop
        #: streamed text from the I/O loop to the bus, at most once per interval (issue 37)
        self.delta_pump = DeltaPump(bus, io_loop, config.supervisor.delta_interval_ms / 1000) if (
            io_loop is not None and config.supervisor.coalesce_deltas and config.supervisor.delta_interval_ms > 0
        ) else None
        #: this daemon's seat among several on one PostgreSQL (issue 20); None: one daemon
        self.cluster = cluster
        self.cfg = config
        self.sup = config.supervisor
        self.clock = clock
        self.store = store
        self.builder = builder
        self.bus = bus
        self.timers = timers
        self.slot_pool = slot_pool
        self.approvals = approvals
        self.credits = credits
        #: the registry of live incarnations the send path reads (written here only)
        self.live = live
        #: where the payload guard's snapshots go (resolved once: every start passes it on)
        self.snapshot_dir = snapshot_dir(config.store.data_dir, config.payload_guard.snapshot_dir)
        self.me: pykka.ActorRef[Any] | None = None
        self.writes = PendingWrites(timers=timers, owner=None, key=("supervisor", "write-retry"),
                                    publish=self.publish, schedule=config.store.write_retry,
                                    on_fenced=self._fenced_write)
        self.running: dict[str, Incarnation] = {}
        self.meta: dict[str, Meta] = {}
        self.paused: dict[str, Paused] = {}
        #: sessions live without an actor (issue 37, ``_passivation``): idle, reactivated
        #: by their next message
        self.passivated: dict[str, Passivated] = {}
        self.generation = 0
        self.seq = 0
        self.next_pid = {"sdk": self.sup.sdk_pid_base, "direct": self.sup.direct_pid_base}
        self.fallback_scheduled = False
        #: when the scheduled safety net runs, and when it last ran (monotonic)
        self.fallback_at = 0.0
        self.last_fallback = -math.inf
        #: (when it could first be overdue, generation, sid) per incarnation start, build or
        #: extension: a heap whose stale entries :meth:`earliest_due` drops as it meets them
        self.due_heap: list[tuple[float, int, str]] = []
        self.prune_scheduled = False
        self.shutting_down = False

    @property
    def ref(self) -> pykka.ActorRef[Any]:
        """The supervisor's own ref (bound in ``on_start``)."""
        assert self.me is not None, "the supervisor has not started"
        return self.me

    # --- reads --------------------------------------------------------------------------------

    def current(self, sid: str, generation: int) -> bool:
        """True when ``generation`` is the session's running incarnation (seed invariant 1:
        messages of an old incarnation are ignored)."""
        inc = self.running.get(sid)
        return inc is not None and inc.generation == generation

    def meta_of(self, sid: str) -> Meta:
        """The session's meta, created on first use."""
        return self.meta.setdefault(sid, Meta())

    def live_ids(self) -> list[str]:
        """The sessions that run here: with an incarnation, or passivated (issue 37)."""
        return [*self.running, *(sid for sid in self.passivated if sid not in self.running)]

    def unpassivate(self, sid: str) -> bool:
        """The session is no longer passivated (it was reactivated, stopped or lost): its
        record, its timer and its mark in the live registry go. True if it was."""
        rec = self.passivated.pop(sid, None)
        if rec is None:
            return False
        tell(self.timers, CancelTimer((sid, "passivated")))
        self.live.unpassivate(sid)
        return True

    def refuse_if_stopping(self) -> None:
        """Raise RuntimeStoppedError (to the asker) once the shutdown has begun."""
        if self.shutting_down:
            raise RuntimeStoppedError("the runtime is shutting down and accepts no new sessions")

    # --- effects ------------------------------------------------------------------------------

    def publish(self, sid: str, event: Event) -> None:
        """Tell the EventBus ``event`` of ``sid`` (several daemons: not while this daemon's
        leases may be another's — a paused daemon says nothing until a heartbeat)."""
        if self.cluster is not None and not self.cluster.lease_valid():
            return
        tell(self.bus, Publish(sid, event))

    def publish_all(self, sid: str, events: Sequence[Event]) -> None:
        """:meth:`publish` each of ``events``, in order, as one message to the EventBus."""
        if len(events) == 1:
            self.publish(sid, events[0])
        elif events and (self.cluster is None or self.cluster.lease_valid()):
            tell(self.bus, PublishMany(sid, tuple(events)))

    def _fenced_write(self, sid: str) -> None:
        if self.me is not None:
            tell(self.me, SessionsLost((sid,)))

    def lost(self, sid: str) -> None:
        """Another daemon claimed ``sid`` (issue 20): end its incarnation and forget it here,
        without a write (it would be refused) or an event (the new owner speaks for it)."""
        if self.cluster is not None:
            self.cluster.lose(sid)
        self.kill(sid)
        self.unpassivate(sid)
        self.meta.pop(sid, None)
        self.paused.pop(sid, None)
        tell(self.timers, CancelTimers(sid))
        self.release_session_resources(sid)

    def write(self, sid: str, what: str, write: Callable[[], Any]) -> None:
        """A write that must happen: now, or retried with backoff (never raises)."""
        self.writes.run(sid, what, write)

    def set_status(self, sid: str, status: str) -> None:
        """The row's status (and no pid), a write that must happen."""
        self.write(sid, "the session status", lambda: self.store.update_session(sid, pid=None, status=status))

    def close_later(self, sid: str, resources: tuple[Any, ...]) -> None:
        """Close an incarnation's resources on a tracked worker: closing may block (an MCP
        server gets a grace period before its process tree is killed), settle() waits."""
        if resources:
            self.tracker.run_tracked(lambda: close_resources(resources, sid), f"close-{sid[:8]}", never_parks=True)

    # --- the primitive moves ------------------------------------------------------------------

    def kill(self, sid: str) -> Incarnation | None:
        """End the incarnation silently (its lifeline closes first: it publishes nothing more)."""
        inc = self.running.pop(sid, None)
        if inc is None:
            return None
        inc.lifeline.close()
        self.live.remove(sid, inc.generation)
        if inc.ticket is not None:
            inc.ticket.resolve(None)  # it never ran (a built one's ticket is resolved already)
        tell(inc.ref, Abort())
        # the incarnation's turn accounting, kept for the next one and the exit note
        meta = self.meta_of(sid)
        meta.turns, meta.cost_usd = inc.tally.turns, inc.tally.cost_usd
        if inc.tally.answered:
            meta.outage_attempts = 0  # a turn went well: the outage backoff starts over
        if inc.tally.asked_slots_or_approvals:
            # An incarnation that never asked the SlotPool or the ApprovalBroker holds
            # nothing there (what an earlier one held went when it ended): two messages
            # fewer per session end. One that asked is released here even if it released
            # itself (a crash, or a request still on its way, is covered).
            self.release_session_resources(sid)
        if not self.running and self.fallback_scheduled:
            # nothing left to check: the safety net is not kept waiting for nobody
            self.fallback_scheduled = False
            self.due_heap.clear()
            tell(self.timers, CancelTimer(("supervisor", "fallback")))
        elif self.fallback_scheduled and not self.shutting_down:
            # the net waited for this incarnation, which ended on time: it waits for the
            # next one instead of firing to find nobody overdue
            self.schedule_fallback(only_later=True)
        self.close_later(sid, inc.resources)
        return inc

    def evict(self, sid: str) -> None:
        """Drop an incarnation that refuses input, silently (as the original's map delete):
        the session keeps its meta, its row goes idle, and the next resume cold-starts."""
        self.kill(sid)
        self.set_status(sid, "idle")

    def stop_session(self, sid: str, reason: str, *, write: bool = True, notice: Event | None = None) -> None:
        """Stop: row ``stopped``, ``session_stopped``, cleanup. ``write=False``: the row was
        stopped already (the shutdown's batched marking). ``notice``: an event that says
        why, published just before ``session_stopped`` (one message with it)."""
        released = self.kill(sid) is not None
        if write:
            self.set_status(sid, "stopped")
        stopped = SessionStopped(reason=reason)
        self.publish_all(sid, (notice, stopped) if notice is not None else (stopped,))
        self.cleanup(sid, released=released)

    def release_session_resources(self, sid: str) -> None:
        """The session's slot and pending approvals go (told, not asked)."""
        if self.slot_pool is not None:
            tell(self.slot_pool, ReleaseSlot(sid))
        if self.approvals is not None:
            tell(self.approvals, CancelSession(sid, "Session stopped"))

    def cleanup(self, sid: str, *, released: bool = False) -> None:
        """The single, idempotent cleanup path (seed invariant 14). ``released``: the caller
        has just killed the incarnation in this same handler, so its slot and approvals
        were released then (not told twice: two messages fewer per session end)."""
        killed = self.kill(sid)
        self.unpassivate(sid)
        self.meta.pop(sid, None)
        self.paused.pop(sid, None)
        tell(self.timers, CancelTimers(sid))
        if killed is None and not released:  # else kill() has released them, in this same handler
            self.release_session_resources(sid)
        if self.cluster is not None and not self.shutting_down:
            # it no longer runs here and nobody is to resume it (a shutdown releases the
            # leases instead: other daemons resume those sessions at once)
            self.cluster.finish(sid)
        tell(self.bus, RemoveSession(sid))

    # --- housekeeping timers ------------------------------------------------------------------

    def ensure_housekeeping(self) -> None:
        """Schedule the timeout safety net and the orphan pruner when there is work for them."""
        if self.running and not self.fallback_scheduled:
            self.fallback_scheduled = True
            self.schedule_fallback()
        if (self.running or self.meta or self.paused or self.passivated) and not self.prune_scheduled:
            self.prune_scheduled = True
            tell(self.timers, ScheduleTimer(("supervisor", "prune"), self.sup.orphan_prune_interval_s,
                                            self.ref, _Prune()))

    def schedule_fallback(self, *, only_later: bool = False) -> None:
        """(Re)schedule the safety net for ``supervision.fallback_check_at`` of the running
        incarnations; ``only_later``: only if that is later than it is scheduled now."""
        earliest = self.earliest_due()
        if earliest is None:
            return
        now = self.clock.monotonic()
        at = max(fallback_check_at(self.sup, earliest, self.last_fallback), now)
        if only_later and at <= self.fallback_at:
            return
        self.fallback_at = at
        tell(self.timers, ScheduleTimer(("supervisor", "fallback"), at - now, self.ref, _FallbackCheck()))

    def track_due(self, sid: str, inc: Incarnation) -> None:
        """``inc`` started, was built or had its timeout changed: note when it could first
        be overdue (see :meth:`earliest_due`)."""
        heapq.heappush(self.due_heap, (inc.started_at + self.due_after(inc), inc.generation, sid))

    def earliest_due(self) -> float | None:
        """When the first running incarnation could be overdue (None: none runs).
        Amortised O(log n): entries of ended incarnations, and ones a later build or
        extension replaced, are dropped when they come to the top."""
        heap = self.due_heap
        while heap:
            due, gen, sid = heap[0]
            inc = self.running.get(sid)
            if inc is not None and inc.generation == gen and inc.started_at + self.due_after(inc) == due:
                return due
            heapq.heappop(heap)
        if self.running:
            # an incarnation not noted (a path that changed one without track_due): the
            # heap is rebuilt rather than the safety net left unscheduled
            for sid, inc in self.running.items():
                self.track_due(sid, inc)
            return heap[0][0]
        return None

    def due_after(self, inc: Incarnation) -> float:
        """The least uptime after which ``inc`` may be overdue (``supervision.overdue_after``)."""
        return overdue_after(self.sup, inc.timeout_s)
