"""The SessionSupervisor: the process manager of the seed, as an actor.

It owns every running :class:`~corvid_actors.actors.session.SessionActor`, one per
session (1:1), and decides what happens when one ends: clean exit, crash with
backoff restart (chat sessions), pause on an upstream outage with health-probed
auto-resume, timeout, stop. The decisions are pure functions in
``corvid_actors.supervision``; this module performs them.

Invariants kept here (seed numbering): 1 one actor per session (a new incarnation
has a new generation; messages and timers of an old one are ignored), 2 stale sessions
reset at start-up (``Runtime``), 6/7 context reset through the resume path, 8 crash
auto-restart, 9 outage pause and auto-resume, 10 timeouts, 12 events before
subscriber removal, 13 orphan pruning, 14 ``_cleanup`` as the single cleanup path.

Lifecycle only: the supervisor starts, stops, restarts, pauses and resumes incarnations
and hears about their ends (:class:`SessionEnded`, :class:`SessionCrashed`,
:class:`OutageReported`, :class:`TimedOut`, :class:`StopRequested`) — not about every
turn. User messages to a running session do not pass through it: ``Runtime.send_message``
persists them and tells the incarnation through the live registry
(``corvid_actors.actors.live``), which only this actor writes. It is asked to deliver
only when that fast path does not apply (no incarnation, a resumed incarnation's first
message, a context reset, an incarnation that refuses input or died: the cold path).
Turn accounting (turn counts, cost, credit charges) is the session actor's.

Failures: a told handler that raises (a store error, a bug) does not stop this actor:
the session concerned gets a ``session_error`` event and the error is logged; the
writes that must happen (session status, exit notes) go through
:class:`~corvid_actors.actors.retry.PendingWrites` and are retried with backoff through
the Timers actor. An asked request that raises replies with the exception.

Requests (ask): see the message classes below; each replies as its docstring says.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Any

import pykka
from loguru import logger

from corvid_actors.actors.approvals import CancelSession
from corvid_actors.actors.base import ActivityTracker, TrackedActor, tell
from corvid_actors.actors.credits import CreditsExhausted
from corvid_actors.actors.events import PruneSessions, Publish, RemoveSession
from corvid_actors.actors.live import LiveSession, LiveSessions
from corvid_actors.actors.retry import PendingWrites, RetryWrites
from corvid_actors.actors.session import (
    Abort,
    Begin,
    BuildFailed,
    Built,
    CheckTimeout,
    ExtendTimeout,
    InjectedCrash,
    Lifeline,
    OutageReported,
    Ready,
    SessionActor,
    SessionCrashed,
    SessionEnded,
    SessionWiring,
    StopRequested,
    TimedOut,
    TurnTally,
    UserInput,
    WritesHandedOver,
)
from corvid_actors.actors.slots import ReleaseSlot
from corvid_actors.actors.timers import CancelTimer, CancelTimers, ScheduleTimer
from corvid_actors.clock import Clock, iso_after
from corvid_actors.config import Config
from corvid_actors.content import UserContent, content_blocks, image_blocks, text_parts
from corvid_actors.errors import RuntimeStoppedError, StoreError
from corvid_actors.events import (
    ErrorEvent,
    Event,
    SessionError,
    SessionExited,
    SessionPaused,
    SessionRestarting,
    SessionResumed,
    SessionStarted,
    SessionStopped,
    SystemEvent,
)
from corvid_actors.loop.payload_guard import snapshot_dir
from corvid_actors.loop.prompts import build_resume_prompt, with_context_summary
from corvid_actors.loop.trimming import summarize_conversation
from corvid_actors.providers.base import ChatMessage
from corvid_actors.supervision import (
    active_turns,
    auto_resume_delay,
    auto_resume_exhausted,
    completed_note,
    crashed_note,
    extended_timeout,
    needs_context_reset,
    restart_after_crash,
    restart_count_after_uptime,
    zero_turn_breaker_trips,
)
from corvid_actors.wiring import close_resources

#: a restart or resume due when the store failed is due again this much later (seconds)
_DUE_RETRY_S = 5.0
#: how many of a session's latest system messages the zero-turn breaker reads
_BREAKER_NOTES_WINDOW = 50

# --- requests ---------------------------------------------------------------------------


@dataclass(frozen=True)
class StartProcess:
    """Start (or restart) a session. Replies with its pseudo-PID, or None when it could
    not start (an ``error`` event says why). Raises NotFoundError for an unknown session.
    ``prompt`` may be multimodal content blocks (``corvid_actors.content``)."""

    session_id: str
    prompt: UserContent | None = None


@dataclass(frozen=True)
class ResumeProcess:
    """Resume with history (warm: just send ``prompt``). Replies with the pid or None."""

    session_id: str
    prompt: UserContent | None = None


@dataclass(frozen=True)
class StopProcess:
    """Replies True if it stopped something; False (nothing published) when the session
    is stopped already — no incarnation, not paused, no restart pending, row ``stopped``."""

    session_id: str
    reason: str = "user_stop"


@dataclass(frozen=True)
class SendMessage:
    """Replies True if a running session accepted the message (persisted first).
    ``text`` may be multimodal content blocks (``corvid_actors.content``). The slow path
    of ``Runtime.send_message`` (see the module docstring).

    False when no incarnation runs, or when the incarnation refuses input (it is ending):
    then nothing is persisted and the incarnation is evicted, so the next resume
    cold-starts. ``fallback``: the generation of the incarnation whose direct delivery
    was refused after the caller's lookup (its actor ended in between). If that one is
    still the current incarnation, it is evicted and the session cold-starts with the
    message (True if it started); if the supervisor has stopped or replaced it meanwhile,
    the message goes to a newer incarnation, or nowhere (False) — a stop stays a stop."""

    session_id: str
    text: UserContent
    fallback: int = 0


@dataclass(frozen=True)
class IsRunning:
    session_id: str


@dataclass(frozen=True)
class IsPaused:
    session_id: str


@dataclass(frozen=True)
class ActiveSessionIds:
    pass


@dataclass(frozen=True)
class PausedSessionIds:
    pass


@dataclass(frozen=True)
class ResumeSession:
    """Manual resume of a paused session; replies False if it is not paused, or if its row
    was deleted while it was paused (the paused record is dropped then)."""

    session_id: str


@dataclass(frozen=True)
class ExtendSessionTimeout:
    """Replace the running session's pending inactivity deadline with now +
    min(``additional_s``, 4 × default); its next event re-arms the default timeout.
    Replies False if the session is not running."""

    session_id: str
    additional_s: float


@dataclass(frozen=True)
class CleanupSessionState:
    session_id: str


@dataclass(frozen=True)
class SupervisorStats:
    pass


@dataclass(frozen=True)
class SessionInfo:
    """Replies with a dict of in-memory facts about sessions (all when ``session_id`` is None)."""

    session_id: str | None = None


@dataclass(frozen=True)
class Shutdown:
    reason: str = "server_shutdown"


@dataclass(frozen=True)
class RefuseInput:
    """Fault hook (``corvid_actors.testing.refuse_input``): the running incarnation refuses
    user input from now on, as one does between its end and the supervisor hearing of it.
    Replies False when the session is not running."""

    session_id: str


@dataclass(frozen=True)
class KillIncarnation:
    """Fault hook (``corvid_actors.testing.kill_incarnation``): the running incarnation's
    actor fails as on a bug (``SessionCrashed``: the crash path, restart with backoff).
    Replies False when the session is not running."""

    session_id: str


class StartTicket:
    """The reply to :class:`StartProcess` / :class:`ResumeProcess` while the new
    incarnation builds itself (off the supervisor's thread): :meth:`wait` blocks the asker
    — never the supervisor — until it is built (its pid) or will not run (None: the build
    failed, with a ``spawn_error`` event, or it was stopped first)."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._pid: int | None = None

    def resolve(self, pid: int | None) -> None:
        if not self._done.is_set():
            self._pid = pid
            self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout_s: float | None = None) -> int | None:
        """The pid, or None; ``timeout_s`` (real seconds) passed: None."""
        self._done.wait(timeout_s)
        return self._pid


def started_pid(reply: Any, timeout_s: float | None = None) -> int | None:
    """What StartProcess / ResumeProcess replied, as a pid or None (waits for a ticket)."""
    return reply.wait(timeout_s) if isinstance(reply, StartTicket) else reply


# --- internal -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _RestartDue:
    session_id: str
    attempt: int


@dataclass(frozen=True)
class _StableDue:
    session_id: str
    generation: int


@dataclass(frozen=True)
class _ResumeDue:
    session_id: str
    seq: int


@dataclass(frozen=True)
class _ProbeResult:
    session_id: str
    seq: int
    healthy: bool


@dataclass(frozen=True)
class _FallbackCheck:
    pass


@dataclass(frozen=True)
class _Prune:
    pass


@dataclass
class _Incarnation:
    generation: int
    ref: pykka.ActorRef[Any]
    lifeline: Lifeline
    pid: int
    started_at: float
    provider_name: str
    #: the inactivity timeout last set: the default, or what extend_timeout granted (it
    #: holds until the session's next event, which re-arms the default)
    timeout_s: float
    #: its entry in the live registry (``entry.begun``: False while a resumed incarnation
    #: waits for its first message, which goes to it with the history, see ``_send``)
    entry: LiveSession
    #: its turn accounting (the session actor's; read here when it ends)
    tally: TurnTally
    #: blocking closers of what the incarnation owns (BuiltSession.resources)
    resources: tuple[Any, ...] = ()
    #: True until it reports Built: its first message and what was sent meanwhile wait
    building: bool = True
    #: resolved with the pid when built, None when it never runs (the asker waits on it)
    ticket: StartTicket | None = None
    #: Begin or Ready, told when it is built; then the held messages, in their order
    first: Any = None
    held: list[Any] = field(default_factory=list)


@dataclass
class _Meta:
    """What survives between incarnations of one session (the seed's sessionMeta)."""

    source: str = "web"
    restart_count: int = 0
    outage_attempts: int = 0
    restart_pending: bool = False
    started_at_iso: str = ""
    #: turn accounting of the ended incarnations (a running one's is in its TurnTally)
    cost_usd: float = 0.0
    turns: int = 0


@dataclass
class _Paused:
    seq: int
    resume_at_iso: str
    attempt: int
    reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class SessionSupervisor(TrackedActor):
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
        timers: pykka.ActorRef[Any],
        slot_pool: pykka.ActorRef[Any] | None = None,
        approvals: pykka.ActorRef[Any] | None = None,
        credits: pykka.ActorRef[Any] | None = None,
        live: LiveSessions | None = None,
    ) -> None:
        super().__init__(tracker)
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
        self.live = live if live is not None else LiveSessions()
        self._writes = PendingWrites(timers=timers, owner=None, key=("supervisor", "write-retry"),
                                     publish=self._publish, schedule=config.store.write_retry)
        self._running: dict[str, _Incarnation] = {}
        self._meta: dict[str, _Meta] = {}
        self._paused: dict[str, _Paused] = {}
        self._generation = 0
        self._seq = 0
        self._next_pid = {"sdk": self.sup.sdk_pid_base, "direct": self.sup.direct_pid_base}
        self._fallback_scheduled = False
        self._prune_scheduled = False
        self._shutting_down = False

    # --- dispatch ---------------------------------------------------------------------------

    def on_start(self) -> None:
        self._writes.bind(self.actor_ref)

    def on_receive(self, message: Any) -> Any:
        try:
            return self._dispatch(message)
        except Exception as exc:
            if isinstance(message, _REQUESTS):
                raise  # an ask: the asker gets the exception (Pykka keeps the actor)
            # A told message (an incarnation's report, a timer): Pykka would stop this
            # actor — and with it the runtime — for one bad message. Say so and go on.
            sid = getattr(message, "session_id", "")
            logger.bind(session_id=sid or None).opt(exception=True).error(
                "supervisor could not handle {}", type(message).__name__)
            kind = _error_kind(exc)
            retry = self._retry_due(message) if kind == "store_error" else None
            if sid:
                self._publish(sid, SessionError(
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
        tell(self.timers, ScheduleTimer(key, _DUE_RETRY_S, self.actor_ref, message))
        return _DUE_RETRY_S

    def _dispatch(self, message: Any) -> Any:  # noqa: C901 - a flat message switch reads best
        match message:
            case StartProcess(sid, prompt):
                self._refuse_if_stopping()
                if prompt:
                    self.store.require_session(sid)
                    self.store.append_message(sid, "user", prompt)
                return self._start(sid, prompt or None)
            case ResumeProcess(sid, prompt):
                self._refuse_if_stopping()
                return self._resume(sid, prompt)
            case SendMessage(sid, text, fallback):
                return self._send(sid, text, fallback=fallback)
            case StopProcess(sid, reason):
                return self._stop_request(sid, reason)
            case IsRunning(sid):
                return sid in self._running
            case IsPaused(sid):
                return sid in self._paused
            case ActiveSessionIds():
                return list(self._running)
            case PausedSessionIds():
                return list(self._paused)
            case ResumeSession(sid):
                return self._manual_resume(sid)
            case ExtendSessionTimeout(sid, additional_s):
                inc = self._running.get(sid)
                if inc is None:
                    return False
                inc.timeout_s = extended_timeout(self.sup, additional_s)
                tell(inc.ref, ExtendTimeout(inc.timeout_s))
                return True
            case CleanupSessionState(sid):
                self._cleanup(sid)
            case SupervisorStats():
                return {
                    "processes": len(self._running),
                    "session_meta": len(self._meta),
                    "paused_sessions": len(self._paused),
                }
            case SessionInfo(sid):
                return self._info(sid)
            case Shutdown(reason):
                self._shutdown(reason)
            case RefuseInput(sid):
                inc = self._running.get(sid)
                if inc is not None:
                    inc.lifeline.refuse_input()
                return inc is not None
            case KillIncarnation(sid):
                inc = self._running.get(sid)
                if inc is not None:
                    tell(inc.ref, InjectedCrash())
                return inc is not None
            # --- from session actors
            case SessionEnded(sid, gen, code, error) if self._current(sid, gen):
                self._handle_exit(sid, code, error)
            case SessionCrashed(sid, gen, error) if self._current(sid, gen):
                self._publish(sid, ErrorEvent(error_type="crash", message=error))
                self._handle_exit(sid, 1, error)
            case OutageReported(sid, gen, text) if self._current(sid, gen):
                self._pause_for_outage(sid, text)
            case Built(sid, gen, built) if self._current(sid, gen) and self._running[sid].building:
                self._on_built(sid, built)
            case Built(sid, gen, built):
                # stopped (or replaced) while it was building: what it made is closed here
                resources = tuple(built.resources)
                if resources:
                    self._tracker.run_tracked(lambda: close_resources(resources, sid), f"close-{sid[:8]}")
            case BuildFailed(sid, gen, error) if self._current(sid, gen):
                self._build_failed(sid, error)
            case StopRequested(sid, gen, reason) if self._current(sid, gen):
                self._stop_session(sid, reason)
            case CreditsExhausted(sid):
                # Runtime.charge_turn (or a bank with no reply_to) names the supervisor
                self._stop_request(sid, "credits_exhausted")
            case RetryWrites():
                self._writes.flush()
            case WritesHandedOver(_, writes):
                self._writes.adopt(writes)
            case TimedOut(sid, gen) if self._current(sid, gen):
                timeout_s = self._running[sid].timeout_s
                self._publish(sid, SessionError(
                    error_type="timeout", severity="warning", recoverable=True,
                    message=f"Session stopped after {timeout_s:g}s without activity. Send a message to resume."))
                self._stop_session(sid, "timeout")
            # --- timers
            case _RestartDue(sid, attempt):
                self._restart_due(sid, attempt)
            case _StableDue(sid, gen) if self._current(sid, gen):
                meta = self._meta.get(sid)
                if meta is not None:
                    uptime = self.clock.monotonic() - self._running[sid].started_at
                    meta.restart_count = restart_count_after_uptime(self.sup, meta.restart_count, uptime)
            case _ResumeDue(sid, seq):
                self._resume_due(sid, seq)
            case _ProbeResult(sid, seq, healthy):
                self._probe_result(sid, seq, healthy)
            case _FallbackCheck():
                self._fallback_scheduled = False
                now = self.clock.monotonic()
                for inc in self._running.values():
                    # an incarnation younger than its timeout cannot be overdue: leave it be
                    if now - inc.started_at >= self._due_after(inc):
                        tell(inc.ref, CheckTimeout())
                self._ensure_housekeeping()
            case _Prune():
                self._prune()
        return None

    def _current(self, sid: str, generation: int) -> bool:
        inc = self._running.get(sid)
        return inc is not None and inc.generation == generation

    def _refuse_if_stopping(self) -> None:
        if self._shutting_down:
            raise RuntimeStoppedError("the runtime is shutting down and accepts no new sessions")

    # --- start / resume / send ------------------------------------------------------------------

    def _start(self, sid: str, prompt: UserContent | None, *, begin: bool = True,
               turns: int | None = None) -> StartTicket | None:
        """Start an incarnation. ``begin``: its first turn is ``prompt`` (or the initial
        prompt); otherwise it comes up ready and waits for a message. ``turns``: the turn
        count it starts with (default, as the original's start: at least 1, the prompt).

        The incarnation builds itself on its own worker (off this thread): the reply is a
        :class:`StartTicket` that gets the pid when it reports ``Built`` (see
        ``_on_built``), or None when the build fails or it is stopped first."""
        if sid in self._running:
            self._stop_session(sid, "replaced")
        ctx = self.store.session_context(sid)  # NotFoundError goes to the asker
        session = ctx.session
        if session.project_id and ctx.project is None:
            self._publish(sid, ErrorEvent(error_type="not_found", message=f"Project {session.project_id} not found"))
            return None
        blocks = content_blocks(prompt) if prompt is not None else ()
        text = text_parts(blocks) if blocks else (prompt if isinstance(prompt, str) else session.initial_prompt or "")
        self._generation += 1
        gen = self._generation
        lifeline = Lifeline(sid, self.bus)
        timeout_s = self.sup.session_timeout_s
        meta = self._meta.setdefault(sid, _Meta(source=session.source))
        meta.source = session.source
        tally = TurnTally(turns=turns if turns is not None else max(meta.turns, session.total_turns or 0, 1),
                          cost_usd=meta.cost_usd)
        partial = SessionWiring(
            session_id=sid, generation=gen, lifeline=lifeline, supervisor=self.actor_ref,
            timers=self.timers, clock=self.clock, store=self.store, provider=None,  # type: ignore[arg-type]
            loop=None, tools=None, tool_context=None,  # type: ignore[arg-type]
            timeout_s=timeout_s, idle_timeout_s=None, approvals=self.approvals,
            snapshot_dir=snapshot_dir(self.cfg.store.data_dir, self.cfg.payload_guard.snapshot_dir),
            tally=tally, source=session.source, credits=self.credits, write_retry=self.cfg.store.write_retry,
        )
        builder, sup, slot_pool = self.builder, self.sup, self.slot_pool

        def build() -> tuple[SessionWiring, Any]:
            # on the incarnation's worker: provider routing, tools, MCP servers, prompts
            built = builder.build(ctx)
            return replace(
                partial, provider=built.provider, loop=built.loop, tools=built.tools,
                tool_context=built.tool_context,
                idle_timeout_s=sup.session_idle_timeout_s if built.loop_kind in sup.idle_exit_loops else None,
                slot_pool=slot_pool if built.uses_slots else None, approval_timeout_s=built.approval_timeout_s,
                slot_weight=built.slot_weight,
            ), built

        ref = SessionActor.start(self._tracker, partial, build)
        entry = LiveSession(sid, gen, ref, lifeline, tally, begun=begin)
        ticket = StartTicket()
        self._running[sid] = _Incarnation(gen, ref, lifeline, 0, self.clock.monotonic(), "", timeout_s, entry,
                                          tally, ticket=ticket,
                                          first=Begin(text, blocks) if begin else Ready())
        self._ensure_housekeeping()
        return ticket

    def _on_built(self, sid: str, built: Any) -> None:
        """The incarnation is built: it runs from now on (row, events, its first message)."""
        inc = self._running[sid]
        meta = self._meta.setdefault(sid, _Meta())
        kind = built.pid_kind
        pid = self._next_pid[kind]
        self._next_pid[kind] += 1
        inc.pid, inc.provider_name, inc.resources = pid, built.provider_name, tuple(built.resources)
        inc.started_at = self.clock.monotonic()
        inc.building = False
        meta.restart_pending = False
        meta.started_at_iso = iso_after(self.clock, 0)
        meta.turns = inc.tally.turns
        begin = isinstance(inc.first, Begin)
        tally, gen = inc.tally, inc.generation
        # open_turns: the first turn is in flight (begin) or there is none (ready)
        self._write(sid, "the session status", lambda: self.store.update_session(
            sid, pid=pid, status="running", restart_pending=False, total_turns=tally.turns,
            open_turns=1 if begin else 0))
        tell(self.timers, CancelTimer((sid, "restart")))
        tell(self.timers, ScheduleTimer((sid, "stable"), self.sup.stable_period_s, self.actor_ref,
                                        _StableDue(sid, gen)))
        self._publish(sid, SessionStarted(pid=pid, generation=gen))
        self._publish(sid, SystemEvent(subtype="provider_selected", message=built.provider_selected
                                       or f"Provider: {built.provider_name} ({built.model})"))
        for notice in built.notices:
            self._publish(sid, notice)
        tell(inc.ref, inc.first)
        # messages sent while it was building, in their order
        held, inc.held, inc.first = inc.held, [], None
        for message in held:
            tell(inc.ref, message)
        # only now may the send path tell it directly
        self.live.put(inc.entry)
        if inc.ticket is not None:
            inc.ticket.resolve(pid)
        self._ensure_housekeeping()

    def _build_failed(self, sid: str, error: str) -> None:
        self._kill(sid)
        self._write(sid, "the session status", lambda: self.store.update_session(sid, status="error", pid=None))
        self._publish(sid, ErrorEvent(error_type="spawn_error", message=error))
        self._publish(sid, SessionError(error_type="spawn_error", message=error, severity="fatal",
                                        recoverable=False))

    def _resume(self, sid: str, prompt: UserContent | None) -> int | None:
        inc = self._running.get(sid)
        if inc is not None:
            if not prompt:
                return inc.ticket if inc.building else inc.pid
            if needs_context_reset(inc.entry.delivered, self.cfg.session.max_turns_before_context_reset):
                self._publish(sid, SystemEvent(subtype="context_reset",
                                               message="Context reset: restarting with recent history"))
                self._kill(sid)
            elif self._send(sid, prompt):
                return inc.ticket if inc.building else inc.pid
            else:
                # the incarnation refused the message (it is ending): _send evicted it
                self._publish(sid, SystemEvent(subtype="warm_path_failed",
                                               message="Warm path failed, falling back to cold start"))
        session = self.store.require_session(sid)
        # Decided before the breaker may delete the history: a turn in flight at the end of
        # the last incarnation, or a user message nobody answered. Only then does a resume
        # without a new message call the model (a restart spends no turn on a session that
        # was waiting for its user).
        unanswered = self._unanswered_request(sid, session) if not prompt else None
        self._zero_turn_breaker(sid, session)
        session = self.store.require_session(sid)
        history = self.store.recent_messages(sid, self.cfg.session.resume_history_messages)
        if prompt:
            self.store.append_message(sid, "user", prompt)
        turns = active_turns(history, new_prompt=bool(prompt))
        if not prompt and (unanswered is None or not (history or unanswered)):
            return self._start(sid, None, begin=False, turns=turns)
        blocks = content_blocks(prompt) if prompt else ()
        new_text = text_parts(blocks) if blocks else str(prompt or "")
        if history:
            text = build_resume_prompt(
                history, new_text, max_messages=self.cfg.session.resume_history_messages,
                max_chars=self.cfg.session.resume_history_message_chars, interrupted=not prompt,
            )
        else:
            text = new_text or unanswered or ""
        text = with_context_summary(session.conversation_summary or "", text)
        if blocks:
            # the history prompt as the text, the new message's images after it
            return self._start(sid, ({"type": "text", "text": text}, *image_blocks(blocks)), turns=turns)
        return self._start(sid, text, turns=turns)

    def _unanswered_request(self, sid: str, session: Any) -> str | None:
        """The request a resume without a new message must answer, or None when the session
        was not mid-turn: a turn was open when its last incarnation ended, or its newest
        user/assistant message is the user's, or it never had one and has an initial prompt."""
        last = self.store.last_message_role(sid)
        if (session.open_turns or 0) > 0 or last == "user":
            users = self.store.recent_messages(sid, 1, roles=("user",))
            return users[0][1] if users else (session.initial_prompt or "")
        if last is None and session.initial_prompt:
            return str(session.initial_prompt)
        return None

    def _zero_turn_breaker(self, sid: str, session: Any) -> None:
        """Reference §Resume 3: the last N exit notes all say ``Turns: 0`` — every resume dies
        before a turn. Summarise the history, store the summary, delete the messages,
        say so (``context_exhausted``) and let the resume start fresh."""
        notes = [c for _, c in self.store.recent_messages(sid, _BREAKER_NOTES_WINDOW, roles=("system",))]
        if not zero_turn_breaker_trips(notes, self.cfg.session.zero_turn_breaker_threshold):
            return
        messages = [ChatMessage(role=m.role, content=m.content)
                    for m in self.store.messages(sid) if m.role in ("user", "assistant")]
        project = self.store.get_project(session.project_id) if session.project_id else None
        summary = summarize_conversation(messages, project.name if project is not None else None)
        self.store.update_session(sid, conversation_summary=summary, status="idle", pid=None, total_turns=0,
                                  open_turns=0)
        deleted = self.store.delete_messages(sid)
        meta = self._meta.get(sid)
        if meta is not None:
            meta.turns = 0
        logger.bind(session_id=sid).warning("zero-turn death loop: {} messages replaced by a summary", deleted)
        self._publish(sid, SessionError(error_type="context_exhausted", severity="info", recoverable=True,
                                        message="Session context was bloated — restarting with fresh context."))

    def _send(self, sid: str, text: UserContent, *, fallback: int = 0) -> bool:
        inc = self._running.get(sid)
        if inc is None:
            return False  # stopped, ended or crashed meanwhile: not running, as for any send
        # cold-start only for the very incarnation the caller could not reach, never while
        # shutting down
        cold = bool(fallback) and inc.generation == fallback and not self._shutting_down
        if not inc.lifeline.accepting_input or not inc.ref.is_alive():
            self._evict(sid)
            return self._cold_send(sid, text) if cold else False
        if needs_context_reset(inc.entry.delivered, self.cfg.session.max_turns_before_context_reset):
            return self._resume(sid, text) is not None
        blocks = content_blocks(text)
        plain = text_parts(blocks) if blocks else str(text)
        message: Begin | UserInput = UserInput(plain, blocks)
        if not inc.entry.begun:
            # a resumed incarnation's first turn: the message with the stored history (as
            # the text; a multimodal message's images after it)
            history = self.store.recent_messages(sid, self.cfg.session.resume_history_messages)
            first = build_resume_prompt(history, plain, max_messages=self.cfg.session.resume_history_messages,
                                        max_chars=self.cfg.session.resume_history_message_chars)
            row = self.store.get_session(sid)
            first = with_context_summary(getattr(row, "conversation_summary", "") or "", first)
            message = Begin(first, ({"type": "text", "text": first}, *image_blocks(blocks)) if blocks else (),
                            counts_turn=True)
        message_id = self.store.append_message(sid, "user", text)
        if inc.building:
            # told after its first message when it is built (the order is kept)
            inc.held.append(message)
            inc.entry.record_delivery()
            inc.entry.mark_begun()
            return True
        # the session actor counts the turn (and stores it open) when the message arrives
        if not inc.entry.deliver(message):
            self.store.delete_message(message_id)  # refused: nothing of it stays
            self._evict(sid)
            return self._cold_send(sid, text) if cold else False
        inc.entry.mark_begun()
        return True

    def _cold_send(self, sid: str, text: UserContent) -> bool:
        """A message whose direct delivery was refused after it was accepted: the session
        cold-starts with it (resume with history), so it is not lost."""
        self._publish(sid, SystemEvent(subtype="warm_path_failed",
                                       message="Warm path failed, falling back to cold start"))
        return self._resume(sid, text) is not None

    def _evict(self, sid: str) -> None:
        """Drop an incarnation that refuses input, silently (as the original's map delete):
        the session keeps its meta, its row goes idle, and the next resume cold-starts."""
        self._kill(sid)
        self._write(sid, "the session status", lambda: self.store.update_session(sid, pid=None, status="idle"))

    # --- stop / exit ---------------------------------------------------------------------------

    def _kill(self, sid: str) -> _Incarnation | None:
        """End the incarnation silently (its lifeline closes first: it publishes nothing more)."""
        inc = self._running.pop(sid, None)
        if inc is not None:
            inc.lifeline.close()
            self.live.remove(sid, inc.generation)
            if inc.ticket is not None:
                inc.ticket.resolve(None)  # it never ran (a built one's ticket is resolved already)
            tell(inc.ref, Abort())
            # the incarnation's turn accounting, kept for the next one and the exit note
            meta = self._meta.setdefault(sid, _Meta())
            meta.turns, meta.cost_usd = inc.tally.turns, inc.tally.cost_usd
            if inc.tally.answered:
                meta.outage_attempts = 0  # a turn went well: the outage backoff starts over
            tell(self.timers, CancelTimer((sid, "stable")))
            self._release_session_resources(sid)
            if not self._running and self._fallback_scheduled:
                # nothing left to check: the safety net is not kept waiting for nobody
                self._fallback_scheduled = False
                tell(self.timers, CancelTimer(("supervisor", "fallback")))
            if inc.resources:
                # Closing may block (an MCP server gets a grace period before its process
                # tree is killed): a tracked worker does it, so settle() waits for it.
                resources = inc.resources
                self._tracker.run_tracked(lambda: close_resources(resources, sid), f"close-{sid[:8]}")
        return inc

    def _stop_request(self, sid: str, reason: str) -> bool:
        meta = self._meta.get(sid)
        if sid not in self._running and sid not in self._paused and not (meta and meta.restart_pending):
            row = self.store.get_session(sid)
            if row is not None and row.status == "stopped":
                return False  # stopped already: no second session_stopped
        self._stop_session(sid, reason)
        return True

    def _stop_session(self, sid: str, reason: str, *, write: bool = True) -> None:
        """``write=False``: the row was stopped already (the shutdown's batched marking)."""
        self._kill(sid)
        if write:
            self._write(sid, "the session status", lambda: self.store.update_session(sid, pid=None, status="stopped"))
        self._publish(sid, SessionStopped(reason=reason))
        self._cleanup(sid)

    def _handle_exit(self, sid: str, code: int, error: str = "") -> None:
        inc = self._kill(sid)
        assert inc is not None
        meta = self._meta.setdefault(sid, _Meta())
        duration_s = self.clock.monotonic() - inc.started_at
        status = "idle" if code == 0 else "error"
        self._write(sid, "the session status", lambda: self.store.update_session(sid, pid=None, status=status))
        if code == 0:
            note = completed_note(duration_s, meta.turns)
        else:
            note = crashed_note(code, error, duration_s, meta.turns)
        self._write(sid, "the exit note", lambda: self.store.append_message(sid, "system", note))
        decision = restart_after_crash(self.sup, source=meta.source, exit_code=code,
                                       restarts_so_far=meta.restart_count)
        if code != 0:
            self._publish(sid, SessionError(error_type="crash", message=error or f"Session crashed with exit code {code}",
                                            severity="warning" if decision.restart else "error", recoverable=True))
        self._publish(sid, SessionExited(code=code, num_turns=meta.turns, duration_ms=int(duration_s * 1000)))
        if decision.restart:
            meta.restart_count = decision.attempt
            meta.restart_pending = True
            self._publish(sid, SessionRestarting(attempt=decision.attempt, delay_s=decision.delay_s))
            tell(self.timers, ScheduleTimer((sid, "restart"), decision.delay_s, self.actor_ref,
                                            _RestartDue(sid, decision.attempt)))
            self._ensure_housekeeping()
            return
        if code != 0 and meta.source in self.sup.auto_restart_sources:
            self._publish(sid, ErrorEvent(
                error_type="max_restarts_exceeded",
                message=f"Session crashed {meta.restart_count + 1} times; giving up after {self.sup.max_restarts} restarts",
            ))
        self._cleanup(sid)

    def _restart_due(self, sid: str, attempt: int) -> None:
        meta = self._meta.get(sid)
        if meta is None or not meta.restart_pending or sid in self._running or self._shutting_down:
            return
        row = self.store.get_session(sid)
        if row is None or row.status == "stopped":
            self._cleanup(sid)
            return
        meta.restart_pending = False
        self._resume(sid, None)

    # --- outage ----------------------------------------------------------------------------------

    def _pause_for_outage(self, sid: str, reason: str) -> None:
        """Pause (not a restart): due for a resume after 5 min × 3^resumes (capped). The
        give-up after ``auto_resume_max_attempts`` resumes happens at the due check."""
        self._kill(sid)
        meta = self._meta.setdefault(sid, _Meta())
        delay_s = auto_resume_delay(self.sup, meta.outage_attempts)
        self._write(sid, "the session status", lambda: self.store.update_session(sid, pid=None, status="paused"))
        self._seq += 1
        resume_iso = iso_after(self.clock, delay_s)
        self._paused[sid] = _Paused(self._seq, resume_iso, meta.outage_attempts + 1, reason)
        logger.bind(session_id=sid, event="api_outage").warning("session paused by an API outage: {}", reason)
        self._publish(sid, ErrorEvent(error_type="api_outage",
                                      message=f"Session paused due to API outage — auto-resume in {delay_s / 60:g}min"))
        self._publish(sid, SessionPaused(resume_at=resume_iso, attempt=meta.outage_attempts + 1))
        tell(self.timers, ScheduleTimer((sid, "resume"), delay_s, self.actor_ref, _ResumeDue(sid, self._seq)))
        self._ensure_housekeeping()

    def _resume_due(self, sid: str, seq: int) -> None:
        paused = self._paused.get(sid)
        if paused is None or paused.seq != seq or self._shutting_down:
            return
        if self.store.get_session(sid) is None:
            self._cleanup(sid)  # deleted while paused: nothing left to resume
            return
        meta = self._meta.setdefault(sid, _Meta())
        if auto_resume_exhausted(self.sup, meta.outage_attempts):
            self._exhausted(sid, meta.outage_attempts)
            return
        probe = self.builder.health_probe(sid)
        ref = self.actor_ref

        def run() -> None:
            try:
                healthy = bool(probe())
            except Exception:  # noqa: BLE001 - a probe that raises means "not healthy"
                healthy = False
            tell(ref, _ProbeResult(sid, seq, healthy))

        self._tracker.run_tracked(run, f"probe-{sid[:8]}")

    def _probe_result(self, sid: str, seq: int, healthy: bool) -> None:
        paused = self._paused.get(sid)
        if paused is None or paused.seq != seq:
            return
        if healthy:
            meta = self._meta.setdefault(sid, _Meta())
            meta.outage_attempts += 1  # attempts count resumes, not probes
            del self._paused[sid]
            self._publish(sid, SessionResumed(automatic=True))
            self._resume(sid, None)
            return
        # Still down: the session stays due and is probed again one check interval later.
        delay_s = self.sup.auto_resume_check_interval_s
        self._seq += 1
        paused.seq = self._seq
        paused.resume_at_iso = iso_after(self.clock, delay_s)
        tell(self.timers, ScheduleTimer((sid, "resume"), delay_s, self.actor_ref, _ResumeDue(sid, self._seq)))

    def _exhausted(self, sid: str, attempts: int) -> None:
        self._paused.pop(sid, None)
        self._write(sid, "the session status", lambda: self.store.update_session(sid, pid=None, status="error"))
        self._publish(sid, ErrorEvent(error_type="auto_resume_exhausted",
                                      message=f"Auto-resume abandoned after {attempts} attempts"))
        self._cleanup(sid)

    def _manual_resume(self, sid: str) -> bool:
        if sid not in self._paused:
            return False
        if self.store.get_session(sid) is None:
            self._cleanup(sid)  # the row was deleted while paused: drop the paused record
            return False
        del self._paused[sid]
        tell(self.timers, CancelTimer((sid, "resume")))
        meta = self._meta.setdefault(sid, _Meta())
        meta.restart_count = 0
        meta.outage_attempts = 0
        self._publish(sid, SessionResumed(automatic=False))
        self._resume(sid, None)
        return True

    # --- writes -----------------------------------------------------------------------------------

    def _write(self, sid: str, what: str, write: Any) -> None:
        """A write that must happen: now, or retried with backoff (never raises)."""
        self._writes.run(sid, what, write)

    # --- housekeeping ---------------------------------------------------------------------------------

    def _ensure_housekeeping(self) -> None:
        if self._running and not self._fallback_scheduled:
            self._fallback_scheduled = True
            # The safety net has nothing to do before the first incarnation could be overdue:
            # schedule it for then, and every 60 s from then on.
            now = self.clock.monotonic()
            earliest_due = min(inc.started_at + self._due_after(inc) for inc in self._running.values())
            delay = max(self.sup.timeout_fallback_check_s, earliest_due - now)
            tell(self.timers, ScheduleTimer(("supervisor", "fallback"), delay, self.actor_ref, _FallbackCheck()))
        if (self._running or self._meta or self._paused) and not self._prune_scheduled:
            self._prune_scheduled = True
            tell(self.timers, ScheduleTimer(("supervisor", "prune"), self.sup.orphan_prune_interval_s,
                                            self.actor_ref, _Prune()))

    def _due_after(self, inc: _Incarnation) -> float:
        """The least uptime after which ``inc`` may be overdue: an extension may be shorter
        than the default, and the default is back after the session's next event."""
        return min(inc.timeout_s, self.sup.session_timeout_s)

    def _prune(self) -> None:
        self._prune_scheduled = False
        try:
            ghosts = self.store.reset_ghost_sessions(list(self._running))
        except Exception:  # noqa: BLE001 - a told handler must not die of a store error; next sweep retries
            logger.opt(exception=True).warning("orphan pruner could not repair ghost session rows")
            ghosts = []
        for sid in ghosts:
            # "running" with no live incarnation: reset as at start-up (idle, marked for resume)
            logger.bind(session_id=sid).warning("ghost session row (running, no incarnation) reset to idle")
        keep = set(self._running) | set(self._paused)
        keep |= {sid for sid, meta in self._meta.items() if meta.restart_pending}
        for sid in [s for s in self._meta if s not in keep]:
            del self._meta[sid]
        tell(self.bus, PruneSessions(frozenset(keep)))
        self._ensure_housekeeping()

    def _release_session_resources(self, sid: str) -> None:
        if self.slot_pool is not None:
            tell(self.slot_pool, ReleaseSlot(sid))
        if self.approvals is not None:
            tell(self.approvals, CancelSession(sid, "Session stopped"))

    def _cleanup(self, sid: str) -> None:
        """The single, idempotent cleanup path (seed invariant 14)."""
        self._kill(sid)
        self._meta.pop(sid, None)
        self._paused.pop(sid, None)
        tell(self.timers, CancelTimers(sid))
        self._release_session_resources(sid)
        tell(self.bus, RemoveSession(sid))

    def _shutdown(self, reason: str) -> None:
        self._shutting_down = True
        # Marked for resume in batches (one UPDATE per chunk of ids, not one transaction
        # per session: 10,000 sessions stop in seconds); the rows are written before any
        # session_stopped is published, as one session at a time did. If a batch fails,
        # each session's mark goes through _write (retried with backoff) as before.
        mark = self._mark_for_resume
        running = list(self._running)
        pending = [sid for sid in self._paused if sid not in self._running]
        pending += [sid for sid, meta in self._meta.items()
                    if meta.restart_pending and sid not in self._running and sid not in self._paused]
        running_marked = self._mark_many(running, stopped=True)
        pending_marked = self._mark_many(pending)
        for sid in running:
            if not running_marked:
                mark(sid)
            self._stop_session(sid, reason, write=not running_marked)
        for sid in list(self._paused):
            if not pending_marked:
                mark(sid)
            self._cleanup(sid)
        for sid in list(self._meta):
            if not pending_marked and self._meta[sid].restart_pending:
                mark(sid)
            self._cleanup(sid)
        # every session's subscribers, also of sessions never started here (globals stay)
        tell(self.bus, PruneSessions(frozenset()))
        tell(self.timers, CancelTimer(("supervisor", "fallback")))
        tell(self.timers, CancelTimer(("supervisor", "prune")))

    def _mark_many(self, sids: list[str], *, stopped: bool = False) -> bool:
        """Mark ``sids`` for resume (``stopped``: and stopped) in batched statements; False
        (nothing assumed written) when the store refused: the caller marks one by one."""
        if not sids:
            return True
        try:
            self.store.mark_for_resume(sids, stopped=stopped)
        except Exception:  # noqa: BLE001 - the per-session path retries with backoff
            logger.opt(exception=True).warning("batched resume marks failed for {} session(s); "
                                               "marking them one by one", len(sids))
            return False
        return True

    def _mark_for_resume(self, sid: str) -> None:
        self._write(sid, "the resume mark", lambda: self.store.update_session(sid, restart_pending=True))

    def _publish(self, sid: str, event: Event) -> None:
        tell(self.bus, Publish(sid, event))

    def _info(self, sid: str | None) -> dict[str, Any]:
        now = self.clock.monotonic()
        ids = [sid] if sid else sorted(set(self._running) | set(self._paused) | set(self._meta))
        out: dict[str, Any] = {}
        for s in ids:
            inc, meta, paused = self._running.get(s), self._meta.get(s), self._paused.get(s)
            out[s] = {
                "running": inc is not None,
                "pid": (inc.pid or None) if inc else None,  # none yet while it builds
                "generation": inc.generation if inc else None,
                "provider": inc.provider_name if inc else None,
                "uptime_s": round(now - inc.started_at, 3) if inc else 0.0,
                "timeout_s": inc.timeout_s if inc else None,
                "restarts": meta.restart_count if meta else 0,
                "turns": inc.tally.turns if inc else (meta.turns if meta else 0),
                "cost_usd": inc.tally.cost_usd if inc else (meta.cost_usd if meta else 0.0),
                "paused_until": paused.resume_at_iso if paused else None,
                "restart_pending": meta.restart_pending if meta else False,
            }
        return out


#: the asked requests: their exceptions go back to the asker
_REQUESTS = (StartProcess, ResumeProcess, StopProcess, SendMessage, IsRunning, IsPaused, ActiveSessionIds,
             PausedSessionIds, ResumeSession, ExtendSessionTimeout, CleanupSessionState, SupervisorStats,
             SessionInfo, Shutdown, RefuseInput, KillIncarnation)


def _error_kind(exc: Exception) -> str:
    """``store_error`` for a failed database operation, else ``internal_error``."""
    module = type(exc).__module__ or ""
    if isinstance(exc, StoreError) or module.split(".")[0] in {"peewee", "sqlite3", "psycopg2", "psycopg"}:
        return "store_error"
    return "internal_error"
