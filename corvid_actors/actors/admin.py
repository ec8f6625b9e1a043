"""The AdminActor: the operator's commands as messages.

Each command of :data:`corvid_actors.admin_socket.COMMANDS` arrives as an
:class:`AdminCommand` (ask) with checked arguments; the actor answers with JSON-ready
data, or raises :class:`~corvid_actors.admin_socket.AdminError` (the asker gets it). It
reaches the rest of the tree by messages only — the supervisor, the ApprovalBroker, the
EventBus, the Timers, the SlotPool and the CreditBank — and reads rows from the store.
``health`` probes providers on a worker thread and replies with a Future the asker waits
on, so a slow provider never blocks this mailbox.

It also keeps the last events of recent sessions (for ``admin session ID``), logs session
lifecycle events with ``session_id`` and ``agent`` bound, and registers followers
(:class:`Follow` / :class:`Unfollow`) on the EventBus for ``corvid-actors events``.

Messages: :class:`AdminCommand`, :class:`Follow` → unfollow callable, :class:`Unfollow`,
:class:`Ready` → True, :class:`BeginShutdown` (from now on commands that start or change work are refused).
All run on the actor's thread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pykka

from corvid_actors.actors import approvals as ap
from corvid_actors.actors import credits
from corvid_actors.actors import supervisor as sv
from corvid_actors.actors._admin_views import (
    UNRECORDED_EVENTS,
    RecentEvents,
    process_stats,
    resolve_session_id,
    session_summary,
)
from corvid_actors.actors.base import ActivityTracker, TrackedActor, tell
from corvid_actors.actors.events import BusStats, SubscribeAll, UnsubscribeAll
from corvid_actors.actors.slots import SlotStats
from corvid_actors.actors.timers import TimerStats
from corvid_actors.admin_protocol import (
    BAD_REQUEST,
    CONFLICT,
    NOT_FOUND,
    SHUTTING_DOWN,
    UNAVAILABLE,
    AdminError,
)
from corvid_actors.clock import Clock, iso_utc
from corvid_actors.config_sections import DaemonConfig
from corvid_actors.errors import ConflictError, CorvidError, NotFoundError, RuntimeStoppedError
from corvid_actors.events import Event, to_dict

#: commands refused once the daemon is shutting down (they start or change work)
MUTATING_COMMANDS = frozenset({"start", "send", "resume", "extend", "approve", "mode", "credits_grant"})


@dataclass(frozen=True)
class AdminCommand:
    """One checked operator command (see ``admin_socket.COMMANDS``). Replies with its result
    (a ``pykka.Future`` for ``health``: wait on it) or raises ``AdminError``."""

    name: str
    args: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Follow:
    """Stream events (of one session, or all) to ``sink(session_id, at_iso, event_dict)``,
    called on the EventBus thread. Replies with a callable that ends the stream."""

    session_id: str | None
    sink: Callable[[str, str, dict[str, Any]], None]


@dataclass(frozen=True)
class Unfollow:
    sink: Callable[[str, str, dict[str, Any]], None]


@dataclass(frozen=True)
class Ready:
    """Replies True; once it has, the actor hears every event published afterwards."""


@dataclass(frozen=True)
class BeginShutdown:
    reason: str = "server_shutdown"


@dataclass(frozen=True)
class _Seen:
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
    timers: pykka.ActorRef[Any]
    slot_pool: pykka.ActorRef[Any] | None
    credits: pykka.ActorRef[Any] | None
    store: Any
    providers: Mapping[str, Any]
    clock: Clock
    settings: DaemonConfig = field(default_factory=DaemonConfig)
    about: Mapping[str, Any] = field(default_factory=dict)
    request_shutdown: Callable[[str], None] | None = None


class AdminActor(TrackedActor):
    """See the module docstring."""
    survive_errors = True  # one bad told message never kills it (actors/base.py)

    def __init__(self, tracker: ActivityTracker, wiring: AdminWiring) -> None:
        super().__init__(tracker)
        self.w = wiring
        self.s = wiring.settings
        self._started = wiring.clock.monotonic()
        self._recent = RecentEvents(self.s.recent_events, self.s.recent_event_sessions, self._agent_of)
        self._followers: dict[Any, Callable[[str, Event], None]] = {}
        self._stopping = False
        self._commands: dict[str, Callable[[Mapping[str, Any]], Any]] = {
            "health": self._cmd_health, "stats": self._cmd_stats, "agents": self._cmd_agents,
            "sessions": self._cmd_sessions, "session": self._cmd_session, "start": self._cmd_start_session,
            "send": self._cmd_send, "stop": self._cmd_stop, "resume": self._cmd_resume, "extend": self._cmd_extend,
            "approvals": self._cmd_approvals, "approve": self._cmd_approve, "deny": self._cmd_deny, "mode": self._cmd_mode,
            "credits_balance": self._cmd_credits_balance, "credits_grant": self._cmd_credits_grant,
            "shutdown": self._cmd_shutdown,
        }

    # --- lifecycle --------------------------------------------------------------------------

    def on_start(self) -> None:
        # An ask, not a tell: by the time anyone hears back from this actor (Ready), the
        # bus has the subscription, so no event published later is missed.
        self.w.bus.ask(SubscribeAll(self._on_event))

    def on_stop(self) -> None:
        tell(self.w.bus, UnsubscribeAll(self._on_event))
        for callback in self._followers.values():
            tell(self.w.bus, UnsubscribeAll(callback))
        self._followers.clear()

    def _on_event(self, session_id: str, event: Event) -> None:
        # On the EventBus thread: keep it cheap, hand the rest to our own mailbox.
        if event.type in UNRECORDED_EVENTS:
            return
        tell(self.actor_ref, _Seen(session_id, iso_utc(self.w.clock.now()), to_dict(event)))

    # --- dispatch ---------------------------------------------------------------------------

    def on_receive(self, message: Any) -> Any:
        match message:
            case AdminCommand(name, args):
                handler = self._commands.get(name)
                if handler is None:
                    raise AdminError(BAD_REQUEST, f"the admin actor has no command {name!r}")
                if self._stopping and name in MUTATING_COMMANDS:
                    raise AdminError(SHUTTING_DOWN, "the daemon is shutting down and accepts no new work")
                return handler(args)
            case Follow(session_id, sink):
                return self._follow(session_id, sink)
            case Unfollow(sink):
                callback = self._followers.pop(sink, None)
                if callback is not None:
                    tell(self.w.bus, UnsubscribeAll(callback))
            case Ready():
                return True
            case BeginShutdown():
                self._stopping = True
            case _Seen(session_id, at, event):
                self._recent.record(session_id, at, event)
        return None

    def _ask(self, ref: pykka.ActorRef[Any] | None, message: Any, what: str = "runtime") -> Any:
        if ref is None:
            raise AdminError(UNAVAILABLE, f"the {what} is not running in this daemon")
        try:
            # a start/resume replies with a ticket: wait for the new incarnation's pid
            return sv.started_pid(ref.ask(message))
        except pykka.ActorDeadError:
            raise AdminError(UNAVAILABLE, f"the {what} is shut down") from None
        except RuntimeStoppedError as exc:
            raise AdminError(SHUTTING_DOWN, str(exc)) from None
        except NotFoundError as exc:
            raise AdminError(NOT_FOUND, str(exc)) from None

    def _sid(self, args: Mapping[str, Any]) -> str:
        return resolve_session_id(self.w.store, args["session"])

    # --- sessions -----------------------------------------------------------------------------

    def _cmd_sessions(self, args: Mapping[str, Any]) -> list[dict[str, Any]]:
        status = args.get("status")
        rows = self.w.store.list_sessions(statuses=[status] if status else None,
                                          limit=args.get("limit", self.s.session_list_limit))
        info = self._ask(self.w.supervisor, sv.SessionInfo(None))
        pending = self._pending_counts()
        agents = {a.id: a.name for a in self.w.store.list_agents()}
        return [session_summary(row, info.get(row.id), pending.get(row.id, 0), agents) for row in rows]

    def _cmd_session(self, args: Mapping[str, Any]) -> dict[str, Any]:
        sid = self._sid(args)
        row = self.w.store.require_session(sid)
        info = self._ask(self.w.supervisor, sv.SessionInfo(sid)).get(sid)
        approvals = self._ask(self.w.approvals, ap.ListPending(sid))
        agents = {a.id: a.name for a in self.w.store.list_agents()}
        summary = session_summary(row, info, len(approvals), agents)
        n_messages = args.get("messages", self.s.session_messages_shown)
        messages = self.w.store.recent_messages(sid, n_messages, roles=("user", "assistant", "system"))
        n_events = args.get("events", self.s.recent_events)
        return {
            **summary,
            "pid": info.get("pid") if info else None,
            "provider": info.get("provider") if info else None,
            "timeout_s": info.get("timeout_s") if info else None,
            "restart_pending": bool(row.restart_pending),
            "initial_prompt": row.initial_prompt,
            "created_at": iso_utc(row.created_at),
            "updated_at": iso_utc(row.updated_at),
            "approvals": approvals,
            "messages": [{"role": role, "content": content} for role, content in messages],
            "events": self._recent.of(sid)[-n_events:],
        }

    def _cmd_start_session(self, args: Mapping[str, Any]) -> dict[str, Any]:
        store = self.w.store
        agent = store.find_agent(args["agent"])
        created = agent is None
        settings = {k: args[k] for k in ("provider", "model", "permission_mode") if k in args}
        if agent is None and not args.get("create"):
            names = ", ".join(a.name for a in store.list_agents()) or "none yet"
            raise AdminError(NOT_FOUND, f"no agent {args['agent']!r} (agents: {names}); add --create to create it "
                                        "(with --provider, --model, --permission-mode)")
        if created or settings:
            try:
                agent = store.ensure_agent(args["agent"], **settings)
            except ConflictError as exc:
                raise AdminError(CONFLICT, str(exc)) from None
        session = store.create_session(agent_id=agent.id, source=args.get("source", "web"),
                                       name=args.get("name", ""), participant=args.get("participant", ""),
                                       initial_prompt=args["prompt"])
        pid = self._ask(self.w.supervisor, sv.StartProcess(session.id, args["prompt"]))
        if pid is None:
            raise AdminError(CONFLICT, f"session {session.id} could not start; "
                                       f"see `corvid-actors admin session {session.id[:8]}`")
        return {"session": session.id, "pid": pid, "agent": agent.name, "created_agent": created}

    def _cmd_send(self, args: Mapping[str, Any]) -> dict[str, Any]:
        sid = self._sid(args)
        # ResumeProcess delivers to a running session, or resumes an ended one with its
        # history; either way the message is persisted before this reply (acknowledged).
        pid = self._ask(self.w.supervisor, sv.ResumeProcess(sid, args["text"]))
        return {"session": sid, "delivered": pid is not None, "pid": pid}

    def _cmd_stop(self, args: Mapping[str, Any]) -> dict[str, Any]:
        sid = self._sid(args)
        was_running = bool(self._ask(self.w.supervisor, sv.IsRunning(sid)))
        was_paused = bool(self._ask(self.w.supervisor, sv.IsPaused(sid)))
        # a session stopped already is left as it is: no second session_stopped
        stopped = bool(self._ask(self.w.supervisor, sv.StopProcess(sid, "user_stop")))
        return {"session": sid, "was_running": was_running, "was_paused": was_paused,
                "already_stopped": not stopped}

    def _cmd_resume(self, args: Mapping[str, Any]) -> dict[str, Any]:
        sid = self._sid(args)
        if self._ask(self.w.supervisor, sv.IsPaused(sid)):
            self._ask(self.w.supervisor, sv.ResumeSession(sid))
            return {"session": sid, "how": "resumed_paused"}
        if self._ask(self.w.supervisor, sv.IsRunning(sid)):
            return {"session": sid, "how": "already_running"}
        pid = self._ask(self.w.supervisor, sv.ResumeProcess(sid, None))
        if pid is None:
            raise AdminError(CONFLICT, f"session {sid} could not resume; see `corvid-actors admin session {sid[:8]}`")
        return {"session": sid, "how": "resumed_with_history", "pid": pid}

    def _cmd_extend(self, args: Mapping[str, Any]) -> dict[str, Any]:
        sid = self._sid(args)
        requested_s = float(args["minutes"]) * 60
        if not self._ask(self.w.supervisor, sv.ExtendSessionTimeout(sid, requested_s)):
            raise AdminError(CONFLICT, f"session {sid} is not running")
        after = self._ask(self.w.supervisor, sv.SessionInfo(sid)).get(sid, {}).get("timeout_s")
        # The new deadline is now + the request, capped at 4x the default timeout
        # (supervision.extended_timeout): say so when the cap applied.
        capped = after is not None and after < requested_s - 1e-6
        return {"session": sid, "timeout_s": after, "requested_s": requested_s, "capped": capped}

    # --- approvals ---------------------------------------------------------------------------

    def _pending_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for item in self._ask(self.w.approvals, ap.ListPending(None), "approval broker"):
            counts[item["session_id"]] = counts.get(item["session_id"], 0) + 1
        return counts

    def _cmd_approvals(self, args: Mapping[str, Any]) -> list[dict[str, Any]]:
        sid = self._sid(args) if args.get("session") else None
        return list(self._ask(self.w.approvals, ap.ListPending(sid), "approval broker"))


    def _resolve(self, approval_id: str, behavior: str, message: str) -> dict[str, Any]:
        try:
            resolved = self._ask(self.w.approvals, ap.Resolve(approval_id, behavior, message), "approval broker")
        except ValueError as exc:
            raise AdminError(BAD_REQUEST, str(exc)) from None
        if resolved is None:
            raise AdminError(NOT_FOUND, f"no pending approval {approval_id!r} (or the prefix is ambiguous); "
                                        "see `corvid-actors admin approvals`")
        return dict(resolved)

    def _cmd_approve(self, args: Mapping[str, Any]) -> dict[str, Any]:
        behavior = "allow_session" if args.get("session_wide") else "allow"
        return self._resolve(args["approval"], behavior, args.get("message", ""))

    def _cmd_deny(self, args: Mapping[str, Any]) -> dict[str, Any]:
        return self._resolve(args["approval"], "deny", args.get("message", ""))

    def _cmd_mode(self, args: Mapping[str, Any]) -> dict[str, Any]:
        if "mode" not in args:
            return {"mode": self._ask(self.w.approvals, ap.GetMode(), "approval broker")}
        try:
            return {"mode": self._ask(self.w.approvals, ap.SetMode(args["mode"]), "approval broker")}
        except ValueError as exc:
            raise AdminError(BAD_REQUEST, str(exc)) from None

    # --- credits ------------------------------------------------------------------------------

    def _credit_messages(self) -> Any:
        if self.w.credits is None:
            raise AdminError(UNAVAILABLE, "credits are not enabled in this daemon "
                                          "(set daemon.with_credits = true in the config and restart)")
        return credits

    def _cmd_credits_balance(self, args: Mapping[str, Any]) -> dict[str, Any]:
        credits = self._credit_messages()
        participant = args["participant"]
        balance = self._ask(self.w.credits, credits.GetBalance(participant), "credit bank")
        out: dict[str, Any] = {"participant": participant, "balance": int(balance)}
        if "transactions" in args:
            out["transactions"] = list(self._ask(self.w.credits, credits.GetTransactions(
                participant, args["transactions"]), "credit bank"))
        return out

    def _cmd_credits_grant(self, args: Mapping[str, Any]) -> dict[str, Any]:
        credits = self._credit_messages()
        amount = args["amount"]
        if amount > self.s.max_credit_grant:
            raise AdminError(BAD_REQUEST, f"a single grant is at most {self.s.max_credit_grant} credits "
                                          "(daemon.max_credit_grant)")
        try:
            balance = self._ask(self.w.credits, credits.GrantCredits(
                args["participant"], amount, "grant", args.get("reason", "") or "admin grant"), "credit bank")
        except (ValueError, CorvidError) as exc:
            raise AdminError(BAD_REQUEST, str(exc)) from None
        return {"participant": args["participant"], "granted": amount, "balance": int(balance)}

    # --- daemon -------------------------------------------------------------------------------

    def _cmd_agents(self, args: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [{"id": a.id, "name": a.name, "provider": a.provider, "model": a.model,
                 "permission_mode": a.permission_mode} for a in self.w.store.list_agents()]

    def _cmd_stats(self, args: Mapping[str, Any]) -> dict[str, Any]:
        stats: dict[str, Any] = {"supervisor": self._ask(self.w.supervisor, sv.SupervisorStats()),
                                 "event_bus": self._ask(self.w.bus, BusStats(), "event bus"),
                                 "timers": self._ask(self.w.timers, TimerStats(), "timers")}
        if self.w.slot_pool is not None:
            stats["slots"] = self._ask(self.w.slot_pool, SlotStats(), "slot pool")
        stats["admin"] = {"followers": len(self._followers), "sessions_with_recent_events": len(self._recent)}
        stats["process"] = process_stats()
        stats["sandbox"] = self.w.about.get("sandbox", {})
        return stats

    def _cmd_health(self, args: Mapping[str, Any]) -> pykka.Future[dict[str, Any]]:
        actors = {"supervisor": self.w.supervisor, "approvals": self.w.approvals, "event_bus": self.w.bus,
                  "timers": self.w.timers, "slot_pool": self.w.slot_pool, "credits": self.w.credits}
        alive = {name: ref.is_alive() for name, ref in actors.items() if ref is not None}
        running = paused = 0
        if alive.get("supervisor"):
            running = len(self._ask(self.w.supervisor, sv.ActiveSessionIds()))
            paused = len(self._ask(self.w.supervisor, sv.PausedSessionIds()))
        base = {"daemon": {**self.w.about, "uptime_s": round(self.w.clock.monotonic() - self._started, 3),
                           "shutting_down": self._stopping},
                "actors": alive, "sessions": {"running": running, "paused": paused}}
        future: pykka.Future[dict[str, Any]] = pykka.ThreadingFuture()
        providers = dict(self.w.providers)
        store = self.w.store

        def probe() -> None:
            # The store first: a lost connection or a SQLite file gone / read-only makes the
            # daemon refuse sends, so health must say so (and why) until it is back.
            reason = store.probe() if hasattr(store, "probe") else None
            base["store"] = {"ok": reason is None, **({"reason": reason} if reason else {})}
            results: dict[str, Any] = {}
            for name, provider in providers.items():
                try:
                    healthy = bool(provider.health())
                except Exception as exc:  # noqa: BLE001 - a probe that raises means "not healthy"
                    healthy, results[name] = False, {"error": str(exc)}
                results.setdefault(name, {})["healthy"] = healthy
            ok = reason is None and all(alive.values()) and all(r["healthy"] for r in results.values())
            reasons = ([f"store unavailable: {reason}"] if reason else []) + [
                f"the {name} actor is dead" for name, up in alive.items() if not up] + [
                f"model provider {name} is not healthy" for name, r in results.items() if not r["healthy"]]
            future.set({"status": "ok" if ok else "degraded", **({"reasons": reasons} if reasons else {}),
                        **base, "providers": results})

        self._tracker.run_tracked(probe, "admin-health")
        return future

    def _cmd_shutdown(self, args: Mapping[str, Any]) -> dict[str, Any]:
        if self.w.request_shutdown is None:
            raise AdminError(UNAVAILABLE, "this runtime has no daemon to shut down")
        self._stopping = True
        self.w.request_shutdown(args.get("reason", "admin_shutdown"))
        # The pid lets `admin shutdown --wait` return only once the process has exited.
        return {"shutting_down": True, "pid": self.w.about.get("pid")}

    # --- events -------------------------------------------------------------------------------

    def _follow(self, session_id: str | None, sink: Callable[[str, str, dict[str, Any]], None]) -> Callable[[], None]:
        wanted = resolve_session_id(self.w.store, session_id) if session_id else None
        clock = self.w.clock

        def callback(sid: str, event: Event) -> None:
            # A global subscription filtered here: a session's own subscriber set is
            # removed when it ends, and a follower should see it come back.
            if wanted is None or sid == wanted:
                sink(sid, iso_utc(clock.now()), to_dict(event))

        self._followers[sink] = callback
        self._ask(self.w.bus, SubscribeAll(callback), "event bus")
        ref = self.actor_ref
        return lambda: tell(ref, Unfollow(sink))

    def _agent_of(self, session_id: str) -> str:
        row = self.w.store.get_session(session_id)
        agent = self.w.store.get_agent(row.agent_id) if row is not None and row.agent_id else None
        return agent.name if agent is not None else ""
