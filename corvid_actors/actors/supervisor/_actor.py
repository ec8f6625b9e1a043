"""The SessionSupervisor actor: its mailbox, the message switch, and surviving errors.

A thin shell (Erlang's ``supervisor`` behaviour to the callback modules beside it): each
message goes to the concern that handles it — ``_start`` (starts and their tickets),
``_resume`` (resume, send, context reset, zero-turn breaker), ``_exits`` (exit, crash,
restart backoff, stability reset, timeout, stop), ``_outage`` (pause and auto-resume),
``_housekeeping`` (safety net, pruner, shutdown, info) — over the books of
:class:`~corvid_actors.actors.supervisor._core.SupervisorCore`.
"""

from __future__ import annotations

from typing import Any

import pykka
from loguru import logger

from corvid_actors.actors.base import ActivityTracker, TrackedActor, tell
from corvid_actors.actors.cluster import (
    AdoptSessions,
    ClusterSeat,
    DeliverHeld,
    HandOverIdle,
    Rebalance,
    SendOrHold,
    SessionsLost,
)
from corvid_actors.actors.credits import CreditsExhausted
from corvid_actors.actors.live import LiveSessions
from corvid_actors.actors.retry import RetryWrites
from corvid_actors.actors.session_messages import (
    BuildFailed,
    Built,
    ExtendTimeout,
    InjectedCrash,
    OutageReported,
    SessionCrashed,
    SessionEnded,
    StopRequested,
    TimedOut,
    WantsPassivation,
    WritesHandedOver,
)
from corvid_actors.actors.supervisor import (
    _exits,
    _handoff,
    _housekeeping,
    _outage,
    _passivation,
    _rebalance,
    _resume,
    _start,
    _takeover,
)
from corvid_actors.actors.supervisor._core import SupervisorCore
from corvid_actors.actors.supervisor._messages import (
    REQUESTS,
    ActiveSessionIds,
    CleanupSessionState,
    ExtendSessionTimeout,
    IsPaused,
    IsRunning,
    KillIncarnation,
    PausedSessionIds,
    RefuseInput,
    ResumeMany,
    ResumeProcess,
    ResumeSession,
    SendMessage,
    SessionInfo,
    Shutdown,
    StartProcess,
    StartTicket,
    StopProcess,
    SupervisorStats,
)
from corvid_actors.actors.supervisor._state import (
    _FallbackCheck,
    _PassivatedDue,
    _ProbeResult,
    _Prune,
    _RestartDue,
    _ResumeDue,
)
from corvid_actors.actors.timers import ScheduleTimer, Timers
from corvid_actors.clock import Clock
from corvid_actors.config import Config
from corvid_actors.content import UserContent
from corvid_actors.core.io_loop import IoLoop
from corvid_actors.events import SessionError
from corvid_actors.policy.supervision import extended_timeout, failure_kind
from corvid_actors.telemetry.tracing import NO_TRACING, Tracing

#: a restart or resume due when the store failed is due again this much later (seconds)
DUE_RETRY_S = 5.0


class SessionSupervisor(TrackedActor):
    """The process manager (see :mod:`corvid_actors.actors.supervisor`). Asked the requests
    of ``_messages``; told its incarnations' reports (``SessionEnded``, ``SessionCrashed``,
    ``OutageReported``, ``Built``, ``BuildFailed``, ``StopRequested``, ``TimedOut``,
    ``WritesHandedOver``), ``CreditsExhausted`` and its own timers. All on its thread."""

    survive_errors = True  # issue 16 (i16b hook): a told message that raises is logged, not fatal

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
        slot_pool: pykka.ActorRef[Any] | None = None,
        approvals: pykka.ActorRef[Any] | None = None,
        credits: pykka.ActorRef[Any] | None = None,
        live: LiveSessions | None = None,
        io_loop: IoLoop[Any] | None = None,
        cluster: ClusterSeat | None = None,
        tracing: Tracing = NO_TRACING,
        journal: Any = None,
    ) -> None:
        super().__init__(tracker)
        self.core = SupervisorCore(
            tracker, config=config, clock=clock, store=store, builder=builder, bus=bus, timers=timers,
            slot_pool=slot_pool, approvals=approvals, credits=credits,
            live=live if live is not None else LiveSessions(), io_loop=io_loop, cluster=cluster,
            tracing=tracing, journal=journal,
        )

    def on_start(self) -> None:
        self.core.me = self.actor_ref
        self.core.writes.bind(self.actor_ref)

    def on_receive(self, message: Any) -> Any:
        try:
            return self._dispatch(message)
        except Exception as exc:
            if isinstance(message, (*REQUESTS, SendOrHold, HandOverIdle)):
                raise  # an ask: the asker gets the exception (Pykka keeps the actor)
            # A told message (an incarnation's report, a timer): Pykka would stop this
            # actor — and with it the runtime — for one bad message. Say so and go on.
            sid = getattr(message, "session_id", "")
            logger.bind(session_id=sid or None).opt(exception=True).error(
                "supervisor could not handle {}", type(message).__name__)
            kind = failure_kind(exc)
            retry = self._retry_due(message) if kind == "store_error" else None
            if sid:
                self.core.publish(sid, SessionError(
                    error_type=kind, severity="warning" if retry else "error", recoverable=True,
                    message=f"The supervisor could not handle {type(message).__name__}: "
                            f"{type(exc).__name__}: {exc}" + (f"; trying again in {retry:g}s" if retry else "")))
            return None

    def _retry_due(self, message: Any) -> float | None:
        """A restart or resume that was due but hit a store error is due again a little
        later (it must not be lost); the delay, or None for other messages."""
        match message:
            case _RestartDue(sid, _):
                key: tuple[str, str] = (sid, "restart")
            case _ResumeDue(sid, _):
                key = (sid, "resume")
            case _:
                return None
        tell(self.core.timers, ScheduleTimer(key, DUE_RETRY_S, self.actor_ref, message))
        return DUE_RETRY_S

    def _dispatch(self, message: Any) -> Any:
        if isinstance(message, REQUESTS):
            return self._request(message)
        if isinstance(message, Rebalance):  # asked by the admin, told by the ClusterMember
            return _rebalance.rebalance(self.core, message.cause)
        match message:  # the hand-off buffer (issue 36 item 2): asked by the admin or the drain
            case SendOrHold(sid, text):
                return _handoff.send_or_hold(self.core, sid, text)
            case DeliverHeld(sid, start):
                return _handoff.deliver(self.core, sid, start=start)
            case HandOverIdle(reason):
                return _handoff.hand_over_idle(self.core, reason)
        self._report(message)
        return None

    def _request(self, message: Any) -> Any:  # noqa: C901 - a flat message switch reads best
        core = self.core
        match message:
            case StartProcess(sid, prompt):
                return self._start_process(sid, prompt)
            case ResumeProcess(sid, prompt):
                core.refuse_if_stopping()
                return _resume.resume(core, sid, prompt)
            case ResumeMany(sids):
                return _resume.resume_many(core, sids)
            case SendMessage(sid, text, fallback):
                return _resume.send(core, sid, text, fallback=fallback)
            case StopProcess(sid, reason):
                return _exits.stop_request(core, sid, reason)
            case IsRunning(sid):
                return sid in core.running or sid in core.passivated
            case IsPaused(sid):
                return sid in core.paused
            case ActiveSessionIds():
                return core.live_ids()
            case PausedSessionIds():
                return list(core.paused)
            case ResumeSession(sid):
                return _outage.manual_resume(core, sid)
            case ExtendSessionTimeout(sid, additional_s):
                return self._extend(sid, additional_s)
            case CleanupSessionState(sid):
                core.cleanup(sid)
            case SupervisorStats():
                return _housekeeping.stats(core)
            case SessionInfo(sid):
                return _housekeeping.info(core, sid)
            case Shutdown(reason):
                _housekeeping.shutdown(core, reason)
            case RefuseInput(sid):
                inc = core.running.get(sid)
                if inc is not None:
                    inc.lifeline.refuse_input()
                return inc is not None
            case KillIncarnation(sid):
                inc = core.running.get(sid)
                if inc is not None:
                    tell(inc.ref, InjectedCrash())
                return inc is not None
        return None

    def _report(self, message: Any) -> None:  # noqa: C901 - a flat message switch reads best
        """Told messages: the incarnations' reports (an old generation's are ignored), the
        credit bank's, and the supervisor's own timers."""
        core = self.core
        match message:
            case SessionEnded(sid, gen, code, error) if core.current(sid, gen):
                _exits.handle_exit(core, sid, code, error)
            case SessionCrashed(sid, gen, error) if core.current(sid, gen):
                _exits.crashed(core, sid, error)
            case OutageReported(sid, gen, text) if core.current(sid, gen):
                _outage.pause_for_outage(core, sid, text)
            case Built(sid, gen, built) if core.current(sid, gen) and core.running[sid].building:
                _start.on_built(core, sid, built)
                _handoff.after_built(core, sid)  # several daemons: what was held for it
            case Built(sid, gen, built):
                _start.built_too_late(core, sid, built)
            case BuildFailed(sid, gen, error) if core.current(sid, gen):
                _start.build_failed(core, sid, error)
            case StopRequested(sid, gen, reason) if core.current(sid, gen):
                core.stop_session(sid, reason)
            case CreditsExhausted(sid):
                # Runtime.charge_turn (or a bank with no reply_to) names the supervisor
                _exits.stop_request(core, sid, "credits_exhausted")
            case RetryWrites():
                core.writes.flush()
            case WritesHandedOver(_, writes):
                core.writes.adopt(writes)
            case TimedOut(sid, gen) if core.current(sid, gen):
                _exits.timed_out(core, sid)
            case _RestartDue(sid, _):
                _exits.restart_due(core, sid)
            case _ResumeDue(sid, seq):
                _outage.resume_due(core, sid, seq)
            case _ProbeResult(sid, seq, healthy):
                _outage.probe_result(core, sid, seq, healthy)
            case _FallbackCheck():
                _housekeeping.fallback_check(core)
            case _Prune():
                _housekeeping.prune(core)
            case WantsPassivation(sid, gen) if core.current(sid, gen):
                _passivation.offered(core, message)
            case _PassivatedDue(sid, seq):
                _passivation.due(core, sid, seq)
            case AdoptSessions(sids):
                _takeover.adopt(core, sids)
            case SessionsLost(sids):
                for sid in sids:
                    core.lost(sid)

    def _start_process(self, sid: str, prompt: UserContent | None) -> StartTicket | None:
        core = self.core
        core.refuse_if_stopping()
        if prompt:
            core.store.require_session(sid)
            if not _start.claim_here(core, sid):  # another daemon runs it: the prompt is not stored here
                return None
            core.store.append_message(sid, "user", prompt)
        return _start.start(core, sid, prompt or None)

    def _extend(self, sid: str, additional_s: float) -> bool:
        inc = self.core.running.get(sid)
        if inc is None:
            return _passivation.extend(self.core, sid, additional_s)
        inc.timeout_s = extended_timeout(self.core.sup, additional_s)
        self.core.track_due(sid, inc)
        tell(inc.ref, ExtendTimeout(inc.timeout_s))
        return True

