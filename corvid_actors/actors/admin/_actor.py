"""The AdminActor: the operator's commands as messages.

Each command of :data:`corvid_actors.daemon.protocol.COMMANDS` arrives as an
:class:`AdminCommand` (ask) with checked arguments; the actor answers with JSON-ready
data, or raises :class:`~corvid_actors.errors.AdminError` (the asker gets it). It
reaches the rest of the tree by messages only — the supervisor, the ApprovalBroker, the
EventBus, the SlotPool and the CreditBank — reads the timer table's counts (no actor: it
answers on this thread) and reads rows from the store (while the store cannot be reached,
``sessions`` answers from the supervisor: the local view, ``_admin_views.local_view``).
``health`` probes providers on a worker thread and replies with a Future the asker waits
on, so a slow provider never blocks this mailbox. The commands that only relay to the
ApprovalBroker or the CreditBank are functions in ``_admin_commands`` (with the ask every
command makes), the health report in ``_admin_health``, the operator's views of sessions
and events in ``_admin_views``, the commands that start, stop and resume sessions in
``_admin_lifecycle``.

It also keeps the last events of recent sessions (for ``admin session ID``), logs session
lifecycle events with ``session_id`` and ``agent`` bound, and registers followers
(:class:`Follow` / :class:`Unfollow`) on the EventBus for ``corvid-actors events``.

Messages: :class:`AdminCommand`, :class:`Follow` → unfollow callable, :class:`Unfollow`,
:class:`Ready` → True, :class:`BeginShutdown` (from now on commands that start or change work are refused).
All run on the actor's thread; each message's docstring says who sends it and what it replies.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from typing import Any

import pykka

import corvid_actors.actors.admin._commands as cmd
from corvid_actors.actors import supervisor as sv
from corvid_actors.actors.admin._cluster import (
    ClusterRouter,
    RemoteEvents,
    deliver_here,
    route,
)
from corvid_actors.actors.admin._commands import ask_actor
from corvid_actors.actors.admin._followers import Followers, Sink
from corvid_actors.actors.admin._health import health_report, process_stats
from corvid_actors.actors.admin._history import merged, select, stored_items
from corvid_actors.actors.admin._lifecycle import SessionCommands
from corvid_actors.actors.admin._sessions import SessionViews
from corvid_actors.actors.admin._views import (
    UNRECORDED_EVENTS,
    RecentEvents,
    agent_summary,
    resolve_session_id,
)
from corvid_actors.actors.base import ActivityTracker, TrackedActor, tell
from corvid_actors.actors.cluster import Rebalance
from corvid_actors.actors.events import BusStats, SubscribeAll, UnsubscribeAll
from corvid_actors.actors.slots import SlotStats
from corvid_actors.actors.timers import Timers
from corvid_actors.clock import Clock, iso_utc
from corvid_actors.errors import (
    BAD_REQUEST,
    SHUTTING_DOWN,
    UNAVAILABLE,
    AdminError,
)
from corvid_actors.events import Event, to_dict
from corvid_actors.policy.access import agent_access
from corvid_actors.schema.sections import AccessConfig, DaemonConfig
from corvid_actors.telemetry.metrics import RuntimeMetrics

#: commands refused once the daemon is shutting down (they start or change work)
MUTATING_COMMANDS = frozenset({"start", "send", "resume", "extend", "approve", "crash", "mode", "credits_grant",
                               "rebalance", "restart"})


@dataclass(frozen=True)
class AdminCommand:
    """One checked operator command (see ``daemon.protocol.COMMANDS``).

    Asked by the daemon's admin socket handler (``Daemon._handle``, on a connection
    thread); runs on the actor's thread. Replies with the command's JSON-ready result (a
    ``pykka.Future`` for ``health``: wait on it) or raises ``AdminError``."""

    name: str
    args: Mapping[str, Any] = field(default_factory=dict)
    #: forwarded by another daemon of the cluster: run here, never forwarded again
    forwarded: bool = False
    #: who sent it (``Request.caller``): an approval's answerer
    caller: str = ""


@dataclass(frozen=True)
class Follow:
    """Stream events (of one session, or all) to ``sink(session_id, at_iso, event_dict)``,
    called on the EventBus thread.

    Asked by the daemon for ``corvid-actors events`` (``Daemon._follow``, on a connection
    thread); runs on the actor's thread. Replies with a callable (any thread) that ends
    the stream by telling :class:`Unfollow`."""

    session_id: str | None
    sink: Callable[[str, str, dict[str, Any]], None]


@dataclass(frozen=True)
class Unfollow:
    """End the stream :class:`Follow` started for ``sink``. Told by the callable Follow
    replied with (on the caller's thread); runs on the actor's thread; no reply."""

    sink: Callable[[str, str, dict[str, Any]], None]


@dataclass(frozen=True)
class Ready:
    """Asked by the daemon once at start-up (``Daemon._start_runtime``, on the main
    thread), before any session is resumed; runs on the actor's thread. Replies True;
    once it has, the actor hears every event published afterwards."""


@dataclass(frozen=True)
class BeginShutdown:
    """Told by the daemon when its graceful shutdown begins
    (``daemon.shutdown.stop_gracefully``); runs on the actor's thread; no reply. From then
    on the commands of :data:`MUTATING_COMMANDS` are refused with ``shutting_down``."""

    reason: str = "server_shutdown"


@dataclass(frozen=True)
class _Seen:
    """An event the bus handed to ``_on_event`` (EventBus thread), recorded on ours."""

    session_id: str
    at: str
    event: dict[str, Any]


@dataclass(frozen=True)
class AdminWiring:
    """What the AdminActor talks to. ``about`` holds daemon facts for ``health`` (pid, data
    directory, model server); ``request_shutdown(reason)`` asks the daemon to stop."""

    supervisor: pykka.ActorRef[Any]
    approvals: pykka.ActorRef[Any]
    bus: pykka.ActorRef[Any]
    timers: Timers
    slot_pool: pykka.ActorRef[Any] | None
    credits: pykka.ActorRef[Any] | None
    store: Any
    providers: Mapping[str, Any]
    clock: Clock
    settings: DaemonConfig = field(default_factory=DaemonConfig)
    about: Mapping[str, Any] = field(default_factory=dict)
    request_shutdown: Callable[[str], None] | None = None
    #: several daemons: where a session's commands run (None: this daemon runs alone)
    router: ClusterRouter | None = None
    #: the agents' access and budget defaults (``admin agents`` shows spend against the caps)
    access: AccessConfig = field(default_factory=AccessConfig)
    #: the runtime's metrics: ``stats`` shows one reading of them (what ``/metrics`` serves)
    metrics: RuntimeMetrics | None = None
    #: called once with ``fields(session_id) -> {"agent", "turn"}`` for the daemon's log records
    log_fields: Callable[[Callable[[str], dict[str, Any]]], None] | None = None


class AdminActor(TrackedActor):
    """See the module docstring."""
    survive_errors = True  # one bad told message never kills it (actors/base.py)

    def __init__(self, tracker: ActivityTracker, wiring: AdminWiring) -> None:
        super().__init__(tracker)
        self.w = wiring
        self.s = wiring.settings
        self._started = wiring.clock.monotonic()
        self._recent = RecentEvents(self.s.recent_events, self.s.recent_event_sessions, self._agent_of,
                                    self._turns_done_of)
        if wiring.log_fields is not None:  # the daemon's log records name each session's agent and turn
            wiring.log_fields(self._recent.log_fields)
        self._followers = Followers(wiring.bus, wiring.clock, self._recent)
        self._views = SessionViews(wiring.store, wiring.supervisor, wiring.approvals, wiring.router,
                                   wiring.access, self.s, self._recent)
        life = SessionCommands(wiring.store, wiring.supervisor, wiring.router)
        self._stopping = False
        broker, bank = wiring.approvals, wiring.credits
        self._commands: dict[str, Callable[[Mapping[str, Any]], Any]] = {
            "health": self._cmd_health, "stats": self._cmd_stats, "agents": self._cmd_agents,
            "sessions": self._cmd_sessions, "sessions_page": self._views.page, "session": self._cmd_session,
            "start": life.start, "send": life.send, "stop": life.stop, "resume": life.resume, "extend": life.extend,
            "approvals": self._cmd_approvals, "approve": partial(cmd.approve, broker),
            "deny": partial(cmd.deny, broker), "mode": partial(cmd.mode, broker),
            "credits_balance": partial(cmd.credits_balance, bank),
            "credits_grant": partial(cmd.credits_grant, bank, self.s.max_credit_grant),
            "shutdown": self._cmd_shutdown, "drain": self._cmd_drain, "rebalance": self._cmd_rebalance,
            "history": self._cmd_history, "restart": life.restart,
            "crash": lambda args: cmd.crash(self.w.supervisor, self.s.allow_fault_commands, lambda: self._sid(args)),
            # internal (no protocol command): another daemon held a message for a session here
            "deliver_held": lambda args: deliver_here(self.w.router, self.w.supervisor, self._sid(args)),
        }

    # --- lifecycle --------------------------------------------------------------------------

    def on_start(self) -> None:
        # An ask, not a tell: by the time anyone hears back from this actor (Ready), the
        # bus has the subscription, so no event published later is missed.
        self.w.bus.ask(SubscribeAll(self._on_event))

    def on_stop(self) -> None:
        # The daemon stops this actor after the runtime's own actors (it answers the operator
        # until then): a bus already stopped holds no subscription, so there is nothing to
        # undo, and telling it would log a dead core actor on every clean shutdown.
        alive = self.w.bus.is_alive()
        if alive:
            tell(self.w.bus, UnsubscribeAll(self._on_event))
        self._followers.close(alive)

    def _on_event(self, session_id: str, event: Event) -> None:
        # On the EventBus thread: keep it cheap, hand the rest to our own mailbox.
        if event.type in UNRECORDED_EVENTS:
            return
        tell(self.actor_ref, _Seen(session_id, iso_utc(self.w.clock.now()), to_dict(event)))

    # --- dispatch ---------------------------------------------------------------------------

    def on_receive(self, message: Any) -> Any:
        match message:
            case AdminCommand(name, args, forwarded, caller):
                handler = self._commands.get(name)
                if name in ("approve", "deny") and caller:
                    args = {**args, "answered_by": caller}
                if handler is None:
                    raise AdminError(BAD_REQUEST, f"the admin actor has no command {name!r}")
                # several daemons: a send is held for the session's next owner, never refused
                held = name == "send" and self.w.router is not None
                if self._stopping and name in MUTATING_COMMANDS and not held:
                    raise AdminError(SHUTTING_DOWN, "the daemon is shutting down and accepts no new work")
                if self.w.router is not None:
                    # a daemon just woken (or cut off) first learns which sessions are still
                    # its own: nothing it answers or delivers is about one taken meanwhile
                    self.w.router.seat.confirm_leases()
                if self.w.router is not None and not forwarded:
                    me = self.actor_ref
                    return route(self.w.router, name, args, handler, self._sid,
                                 lambda: me.ask(AdminCommand(name, args, forwarded=True, caller=caller)))
                return handler(args)
            case RemoteEvents(events):
                self._followers.remote(events)
            case Follow(session_id, sink):
                return self._follow(session_id, sink)
            case Unfollow(sink):
                self._followers.unfollow(sink)
            case Ready():
                return True
            case BeginShutdown():
                self._stopping = True
            case _Seen(session_id, at, event):
                self._recent.record(session_id, at, event)
        return None

    def _sid(self, args: Mapping[str, Any]) -> str:
        return resolve_session_id(self.w.store, args["session"])

    # --- sessions -----------------------------------------------------------------------------

    def _cmd_sessions(self, args: Mapping[str, Any]) -> list[dict[str, Any]] | dict[str, Any]:
        return self._views.sessions(args)

    def _cmd_session(self, args: Mapping[str, Any]) -> dict[str, Any]:
        return self._views.session(self._sid(args), args)

    def _cmd_approvals(self, args: Mapping[str, Any]) -> list[dict[str, Any]]:
        return cmd.list_approvals(self.w.approvals, self._sid(args) if args.get("session") else None)

    # --- daemon -------------------------------------------------------------------------------

    def _cmd_agents(self, args: Mapping[str, Any]) -> list[dict[str, Any]]:
        spend = self.w.store.spend_by_agent()
        return [agent_summary(a, agent_access(a, self.w.access), spend.get(a.id, 0.0))
                for a in self.w.store.list_agents()]

    def _cmd_stats(self, args: Mapping[str, Any]) -> dict[str, Any]:
        stats: dict[str, Any]
        if self.w.metrics is not None:  # one reading: the figures and the samples /metrics serves
            stats, stats["metrics"] = cmd.read_metrics(self.w.metrics)
        else:
            stats = {"supervisor": ask_actor(self.w.supervisor, sv.SupervisorStats()),
                     "event_bus": ask_actor(self.w.bus, BusStats(), "event bus"), "timers": self.w.timers.stats()}
            if self.w.slot_pool is not None:
                stats["slots"] = ask_actor(self.w.slot_pool, SlotStats(), "slot pool")
        stats["admin"] = {"followers": len(self._followers), "sessions_with_recent_events": len(self._recent)}
        stats["process"] = process_stats()
        stats["sandbox"] = self.w.about.get("sandbox", {})
        return stats

    def _cmd_health(self, args: Mapping[str, Any]) -> pykka.Future[dict[str, Any]]:
        # the timer table is no actor, but answers is_alive() as one (until shutdown closes it)
        actors: dict[str, pykka.ActorRef[Any] | Timers | None] = {
            "supervisor": self.w.supervisor, "approvals": self.w.approvals, "event_bus": self.w.bus,
            "timers": self.w.timers, "slot_pool": self.w.slot_pool, "credits": self.w.credits}
        alive = {name: ref.is_alive() for name, ref in actors.items() if ref is not None}
        running = paused = 0
        if alive.get("supervisor"):
            running = len(ask_actor(self.w.supervisor, sv.ActiveSessionIds()))
            paused = len(ask_actor(self.w.supervisor, sv.PausedSessionIds()))
        base = {"daemon": {**self.w.about, "uptime_s": round(self.w.clock.monotonic() - self._started, 3),
                           "shutting_down": self._stopping},
                "actors": alive, "sessions": {"running": running, "paused": paused}}
        if self.w.router is not None:
            base["cluster"] = self.w.router.health()
        future: pykka.Future[dict[str, Any]] = pykka.ThreadingFuture()
        providers = dict(self.w.providers)
        store = self.w.store

        def probe() -> None:
            future.set(health_report(base, alive, store, providers))

        self._tracker.run_tracked(probe, "admin-health")
        return future

    def _cmd_shutdown(self, args: Mapping[str, Any]) -> dict[str, Any]:
        if self.w.request_shutdown is None:
            raise AdminError(UNAVAILABLE, "this runtime has no daemon to shut down")
        self._stopping = True
        self.w.request_shutdown(args.get("reason", "admin_shutdown"))
        # The pid lets `admin shutdown --wait` return only once the process has exited.
        return {"shutting_down": True, "pid": self.w.about.get("pid")}

    def _cmd_drain(self, args: Mapping[str, Any]) -> dict[str, Any]:
        if self.w.request_shutdown is None:
            raise AdminError(UNAVAILABLE, "this runtime has no daemon to drain")
        if self.w.router is None:
            raise AdminError(BAD_REQUEST, "drain hands sessions over to other daemons: this one runs alone "
                                          "([cluster] enabled is off); use shutdown")
        self._stopping = True
        self.w.request_shutdown("drain")
        return {"draining": True, "daemon_id": self.w.router.daemon_id, "pid": self.w.about.get("pid")}

    def _cmd_rebalance(self, args: Mapping[str, Any]) -> dict[str, Any]:
        # this daemon's part; the router asks every other daemon for theirs (_admin_cluster)
        if self.w.router is None:
            raise AdminError(BAD_REQUEST, "rebalance moves sessions between daemons: this one runs alone "
                                          "([cluster] enabled is off)")
        result: dict[str, Any] = ask_actor(self.w.supervisor, Rebalance("admin"))
        return result

    # --- events -------------------------------------------------------------------------------

    def _cmd_history(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """The session's recent history (``_admin_history``) and whether more may come:
        ``live`` while it has an incarnation here or is paused for an auto-resume (several
        daemons: while its row says it runs anywhere)."""
        sid = self._sid(args)
        row = self.w.store.require_session(sid)
        live = bool(ask_actor(self.w.supervisor, sv.IsRunning(sid))) or bool(
            ask_actor(self.w.supervisor, sv.IsPaused(sid)))
        if self.w.router is not None:
            live = live or row.status in ("loading", "running", "paused")
        since_s = args.get("since_s")
        since_iso = iso_utc(self.w.clock.now() - timedelta(seconds=float(since_s))) if since_s else None
        stored = self.w.store.messages(sid, last=self.s.history_messages)
        items = merged(stored_items(stored), self._recent.of(sid))
        chosen = select(items, since_iso=since_iso, tail=args.get("tail"))
        return {"session": sid, "status": row.status, "live": live,
                "events": [{"session_id": sid, "at": item.pop("at"), "event": item} for item in chosen]}

    def _follow(self, session_id: str | None, sink: Sink) -> Callable[[], None]:
        self._followers.follow(resolve_session_id(self.w.store, session_id) if session_id else None, sink)
        ref = self.actor_ref

        def unfollow() -> None:
            tell(ref, Unfollow(sink))

        return unfollow

    def _turns_done_of(self, session_id: str) -> int:
        row = self.w.store.get_session(session_id)
        return int(row.cumulative_turns or 0) if row is not None else 0

    def _agent_of(self, session_id: str) -> str:
        row = self.w.store.get_session(session_id)
        agent = self.w.store.get_agent(row.agent_id) if row is not None and row.agent_id else None
        return agent.name if agent is not None else ""
