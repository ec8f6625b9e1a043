"""The SessionActor: one per *running* session incarnation; the loop's imperative shell.

It feeds its loop (a pure state machine, ``corvid_actors.loop``) with inputs and performs
the effects the loop returns. Blocking work — a model stream, a tool run — goes to a
worker thread that reports back with a message, so the mailbox is never blocked:
``Abort``, user messages, approval answers and timers are handled at once, mid-stream.

Everything this incarnation publishes passes through its :class:`Lifeline`. The
supervisor closes the lifeline *before* it publishes the final event of a stop, so no
event of this incarnation — not even a streamed delta already in flight on the worker —
can come after the end.

Messages in: :class:`Begin`, :class:`Ready`, :class:`UserInput` (from the supervisor,
or straight from ``Runtime.send_message`` through the live registry,
``corvid_actors.actors.live``), :class:`ExtendTimeout`, :class:`CheckTimeout`,
:class:`Abort`, and the answers of SlotPool, ApprovalBroker, CreditBank and Timers
(each defined by the module of the actor that sends it: ``slots``, ``approvals``,
``credits``).
Messages out (to the supervisor, lifecycle only): :class:`Built` / :class:`BuildFailed`,
:class:`SessionEnded`, :class:`OutageReported`, :class:`TimedOut`,
:class:`SessionCrashed`, :class:`StopRequested`, :class:`WritesHandedOver` (its failed
writes, still pending when it ends: the supervisor goes on retrying them).

Building (provider, tools, MCP servers, prompts) happens on this incarnation's own
worker thread, not on the supervisor's: the actor starts with a ``build`` callable, runs
it on a worker and reports :class:`Built` (or :class:`BuildFailed`) before its first
turn; the supervisor sends ``Begin``/``Ready`` only then. A hanging MCP server delays
only its own session; a stop during the build closes the lifeline at once, and what the
build made is closed when it finishes.

Turn accounting is this actor's: it counts turns (``sessions.open_turns`` /
``total_turns`` when a user message arrives), adds each turn's cost and count
(``add_session_usage``) and asks the CreditBank to charge it; the supervisor reads the
:class:`TurnTally` when the incarnation ends. Conversation writes have one owner each:
user messages — whoever accepts them (``Runtime.send_message`` on the caller's thread,
the supervisor for start/resume prompts); assistant text and the loop's notes
(``PersistMessage``) — this actor; exit notes — the supervisor. A write that fails is
retried with backoff (``corvid_actors.actors.retry``), never fatal to the actor.
"""

from __future__ import annotations

import hashlib
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pykka
from loguru import logger

from corvid_actors.actors.approvals import (
    ApprovalAnswer,
    ApprovalAsked,
    CancelSession,
    RequestApproval,
)
from corvid_actors.actors.base import ActivityTracker, TrackedActor, tell
from corvid_actors.actors.credits import ChargeTurn, CreditsExhausted
from corvid_actors.actors.events import Publish
from corvid_actors.actors.retry import PendingWrites, RetryWrites
from corvid_actors.actors.slots import AcquireSlot, ReleaseSlot, SlotAnswer, SlotQueued
from corvid_actors.actors.timers import CancelTimer, ScheduleTimer
from corvid_actors.clock import Clock, iso_after
from corvid_actors.config_sections import RetrySchedule
from corvid_actors.events import (
    ApprovalRequestEvent,
    ApprovalResolved,
    Assistant,
    ContentBlockDelta,
    ErrorEvent,
    Event,
    PlanEvent,
    QueueStatus,
    Result,
    RetryScheduled,
    SystemEvent,
    Thinking,
)
from corvid_actors.loop import effects as fx
from corvid_actors.loop.payload_guard import SNAPSHOT_ROLE, request_size
from corvid_actors.loop.plan import plan_to_json
from corvid_actors.providers.base import (
    CancelToken,
    ErrorKind,
    ModelRequest,
    Provider,
    ProviderError,
    SessionExit,
    StreamCancelled,
    StreamEvent,
    TextDelta,
)
from corvid_actors.tools.base import ToolContext, ToolRegistry, ToolResult
from corvid_actors.wiring import close_resources

# --- the lifeline ------------------------------------------------------------------------


class Lifeline:
    """An incarnation's publish gate and kill switch, shared by its actor, its worker and
    the supervisor. ``close()`` is synchronous: once it returns, nothing more is published
    and the in-flight worker call is cancelled."""

    def __init__(self, session_id: str, bus: pykka.ActorRef[Any]) -> None:
        self.session_id = session_id
        self._bus = bus
        self._lock = threading.Lock()
        self._closed = False
        self._accepting_input = True
        self.cancel = CancelToken()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def accepting_input(self) -> bool:
        """False once the incarnation has ended (or been closed): a user message sent now
        would never be answered, so the supervisor refuses it instead of persisting it."""
        return self._accepting_input and not self._closed

    def refuse_input(self) -> None:
        """The incarnation takes no more user messages (it is ending)."""
        self._accepting_input = False

    def publish(self, event: Event) -> bool:
        with self._lock:
            if self._closed:
                return False
            tell(self._bus, Publish(self.session_id, event))
            return True

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._accepting_input = False
        self.cancel.cancel()


@dataclass
class TurnTally:
    """An incarnation's turn accounting, written by its actor only; the supervisor reads it
    when the incarnation ends (exit notes, ``session_info``). Starts with the counts the
    session had (a new incarnation goes on counting)."""

    turns: int = 0
    cost_usd: float = 0.0
    #: a turn of this incarnation succeeded (the supervisor resets the outage backoff)
    answered: bool = False


# --- messages ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Begin:
    """The first message; ``blocks`` when it is multimodal (``prompt`` is its text).
    ``counts_turn``: a user message that opens a new turn (a resumed incarnation's first
    message); the start's own prompt was counted by the supervisor's start write."""

    prompt: str
    blocks: tuple[dict[str, Any], ...] = ()
    counts_turn: bool = False


@dataclass(frozen=True)
class Ready:
    """Start without a turn: the incarnation waits for its first message (a resumed
    session that was not mid-turn calls no model until someone speaks)."""


@dataclass(frozen=True)
class UserInput:
    """A user message; ``blocks`` when it is multimodal (``text`` is its text parts)."""

    text: str
    blocks: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class ExtendTimeout:
    """Replace the pending inactivity deadline with now + ``timeout_s`` (already capped by
    the supervisor); the session's next event re-arms the default timeout."""

    timeout_s: float


@dataclass(frozen=True)
class CheckTimeout:
    pass


@dataclass(frozen=True)
class Abort:
    """Stop now: cancel in-flight work and end the actor without emitting anything."""


@dataclass(frozen=True)
class InjectedCrash:
    """Fault hook (``corvid_actors.testing.kill_incarnation``): the actor fails on this
    message as on any bug in it — ``on_failure`` runs and the supervisor hears
    ``SessionCrashed`` (exit code 1, restart with backoff)."""

    reason: str = "incarnation killed (fault hook)"


class InjectedCrashError(RuntimeError):
    """What the actor raises on :class:`InjectedCrash`."""


@dataclass(frozen=True)
class SessionEnded:
    session_id: str
    generation: int
    code: int
    #: the last error the incarnation published (for the exit note), "" for a clean end
    error: str = ""


@dataclass(frozen=True)
class OutageReported:
    session_id: str
    generation: int
    message: str


@dataclass(frozen=True)
class Built:
    """The incarnation is built (``built``: the ``wiring.BuiltSession``) and waits for
    ``Begin``/``Ready``. Its ``built.resources`` are the supervisor's to close from now on."""

    session_id: str
    generation: int
    built: Any


@dataclass(frozen=True)
class BuildFailed:
    """Building the incarnation raised (a spawn error); the actor has stopped."""

    session_id: str
    generation: int
    error: str


@dataclass(frozen=True)
class WritesHandedOver:
    """The ending incarnation's writes that failed and are still pending: the supervisor
    goes on retrying them (``PendingWrites.adopt``), so they outlive the incarnation."""

    session_id: str
    writes: tuple[Any, ...]


@dataclass(frozen=True)
class StopRequested:
    """The incarnation asks to be stopped (``session_stopped`` with ``reason``), e.g. when
    the CreditBank says its participant's credits are exhausted."""

    session_id: str
    generation: int
    reason: str


@dataclass(frozen=True)
class TimedOut:
    session_id: str
    generation: int


@dataclass(frozen=True)
class SessionCrashed:
    session_id: str
    generation: int
    error: str


def approval_id_for(session_id: str, generation: int, seq: int) -> str:
    """An 8-character approval id, as the original's (the head of a uuid): hex digits of
    a hash, so simulations replay the same ids while ids of different sessions differ."""
    return hashlib.blake2s(f"{session_id}/{generation}/{seq}".encode(), digest_size=4).hexdigest()


@dataclass(frozen=True)
class _LoopTimer:
    generation: int
    token: str


@dataclass(frozen=True)
class _IdleDue:
    generation: int
    turn_seq: int


@dataclass(frozen=True)
class _TimeoutDue:
    generation: int


@dataclass(frozen=True)
class _WorkerDone:
    seq: int
    result: fx.LoopInput | _ExitRequested


@dataclass(frozen=True)
class _BuildDone:
    wiring: Any = None
    built: Any = None
    error: str = ""


@dataclass(frozen=True)
class _ExitRequested:
    """A worker's outcome that bypasses the loop: the provider asked to end (SessionExit)."""

    code: int


# --- collaborators -----------------------------------------------------------------------


@dataclass
class SessionWiring:
    """The references and settings an incarnation is built with (made by the supervisor)."""

    session_id: str
    generation: int
    lifeline: Lifeline
    supervisor: pykka.ActorRef[Any]
    timers: pykka.ActorRef[Any]
    clock: Clock
    store: Any
    provider: Provider
    loop: fx.Loop
    tools: ToolRegistry
    tool_context: ToolContext
    timeout_s: float
    #: waiting this long for a user message ends the session cleanly (exit 0); None: no
    #: idle exit, the session waits until the inactivity timeout stops it
    idle_timeout_s: float | None
    slot_pool: pykka.ActorRef[Any] | None = None
    approvals: pykka.ActorRef[Any] | None = None
    approval_timeout_s: float = 55.0
    slot_weight: int = 1
    #: where payload-growth snapshots are written (None: not written, only logged)
    snapshot_dir: Path | None = None
    #: turn accounting (shared with the supervisor, who reads it at the end)
    tally: TurnTally = field(default_factory=TurnTally)
    #: the session's source (the CreditBank charges ``chat`` turns) and the bank, if any
    source: str = ""
    credits: pykka.ActorRef[Any] | None = None
    #: how writes the store refused are retried (``[store.write_retry]``)
    write_retry: RetrySchedule = field(default_factory=RetrySchedule)


class SessionActor(TrackedActor):
    """``wiring`` complete, or — with ``build`` — a partial one (no provider, loop, tools
    yet) that ``build()`` (run on a worker) returns complete, with the ``BuiltSession``."""

    def __init__(self, tracker: ActivityTracker, wiring: SessionWiring,
                 build: Callable[[], tuple[SessionWiring, Any]] | None = None) -> None:
        super().__init__(tracker)
        self.w = wiring
        self._build = build
        self.sid = wiring.session_id
        self.gen = wiring.generation
        self._loop = wiring.loop
        self._clock = wiring.clock
        self._last_activity = self._clock.monotonic()
        #: counts activity (events): an extension holds only while no event came after it
        self._activity_seq = 0
        self._timeout_s = wiring.timeout_s
        #: (activity_seq when granted, monotonic deadline) of the last extend_timeout
        self._extension: tuple[int, float] | None = None
        self._worker_seq = 0
        self._worker_cancel: CancelToken | None = None
        self._in_turn = False
        self._pending_input: deque[fx.UserMessage] = deque()
        self._turn_seq = 0
        self._slot_request = 0
        self._slot_state = "none"  # none | waiting | held
        #: a queue_status with the waiting text was published for the current request
        self._slot_queued = False
        self._ended = False
        self._awaiting_approval: set[str] = set()
        #: call id → (call, description, kind) of requests not yet announced by the broker
        self._approval_details: dict[str, tuple[Any, str, str]] = {}
        #: approval ids published as ``approval_request`` (their resolution is published too)
        self._announced: set[str] = set()
        self._approval_seq = 0
        self._turn_started = self._clock.monotonic()
        self._begun = False
        self._last_error = ""
        self._tally = wiring.tally
        self._writes = PendingWrites(timers=wiring.timers, owner=None, key=(self.sid, "write-retry", self.gen),
                                     publish=lambda _sid, event: self.w.lifeline.publish(event),
                                     schedule=wiring.write_retry)

    # --- lifecycle ------------------------------------------------------------------------

    def on_start(self) -> None:
        self._writes.bind(self.actor_ref)
        self._schedule_timeout(self._timeout_s)
        if self._build is not None:
            self._start_build(self._build)

    def _start_build(self, build: Callable[[], tuple[SessionWiring, Any]]) -> None:
        ref, lifeline, sid = self.actor_ref, self.w.lifeline, self.sid

        def body() -> None:
            try:
                wiring, built = build()
            except Exception as exc:  # noqa: BLE001 - any build failure is a spawn error, reported
                logger.bind(session_id=sid).opt(exception=True).warning("session failed to start")
                tell(ref, _BuildDone(error=str(exc)))
                return
            if lifeline.closed or not tell(ref, _BuildDone(wiring, built)):
                close_resources(built.resources, sid)  # stopped during the build

        self._tracker.run_tracked(body, f"build-{sid[:8]}")

    def _built(self, done: _BuildDone) -> None:
        self._build = None
        if done.wiring is None:
            self._ended = True
            tell(self.w.supervisor, BuildFailed(self.sid, self.gen, done.error))
            self._release_everything()
            self.actor_ref.stop(block=False)
            return
        self.w = done.wiring
        self._loop = done.wiring.loop
        self._tally = done.wiring.tally
        tell(self.w.supervisor, Built(self.sid, self.gen, done.built))

    def on_failure(self, exception_type: Any, exception_value: Any, traceback: Any) -> None:
        logger.bind(session_id=self.sid).opt(exception=(exception_type, exception_value, traceback)).error(
            "session actor crashed"
        )
        self.w.lifeline.refuse_input()
        self._release_everything()
        tell(self.w.supervisor, SessionCrashed(self.sid, self.gen, f"{exception_type.__name__}: {exception_value}"))

    def on_receive(self, message: Any) -> Any:
        if self._ended or self.w.lifeline.closed:
            if isinstance(message, _BuildDone) and message.built is not None:
                # stopped during the build: what it made is closed (blocking: on a worker)
                resources, sid = message.built.resources, self.sid
                self._tracker.run_tracked(lambda: close_resources(resources, sid), f"close-{sid[:8]}")
            if isinstance(message, SlotAnswer) and message.granted:
                self._give_back_slot()  # granted during the abort: release it (race-safe)
            if isinstance(message, Abort):
                self._abort()
            return None
        match message:
            case _BuildDone():
                self._built(message)
            case InjectedCrash(reason):
                raise InjectedCrashError(reason)
            case Begin(prompt, blocks, counts_turn):
                if counts_turn:
                    self._count_turn()
                self._begin(prompt, blocks)
            case Ready():
                # no turn: wait for the first message as after a finished turn (a late
                # subscriber hears "not thinking", as between turns)
                self._touch()
                self.w.lifeline.publish(Thinking(thinking=False))
                self._turn_finished()
            case UserInput(text, blocks) if not self._begun:
                self._count_turn()
                self._begin(text, blocks)  # the supervisor sends Begin first; never lose a message
            case UserInput(text, blocks):
                self._count_turn()
                self._touch()
                if self._in_turn:
                    self._pending_input.append(fx.UserMessage(text, blocks))
                else:
                    self._turn_started = self._clock.monotonic()
                    tell(self.w.timers, CancelTimer((self.sid, "idle", self.gen)))
                    self._in_turn = True
                    self._perform(self._loop.handle(fx.UserMessage(text, blocks)))
            case _WorkerDone(seq, result):
                if seq == self._worker_seq:
                    self._worker_cancel = None
                    self._touch()
                    if isinstance(result, _ExitRequested):
                        self._end(result.code)
                    else:
                        self._perform(self._loop.handle(result))
            case SlotAnswer(request_id, granted):
                if request_id != self._slot_request or self._slot_state != "waiting":
                    if granted:
                        self._give_back_slot()
                    return None
                self._slot_state = "held" if granted else "none"
                if self._slot_queued:
                    # "no longer waiting" only after a real wait (an immediate grant says nothing)
                    self._slot_queued = False
                    self.w.lifeline.publish(QueueStatus(status_message=""))
                self._perform(self._loop.handle(fx.SlotGranted() if granted else fx.SlotTimedOut()))
            case SlotQueued(request_id, status):
                if request_id == self._slot_request and self._slot_state == "waiting":
                    self._slot_queued = True
                    self.w.lifeline.publish(QueueStatus(status_message=status))
            case ApprovalAsked(call_id, approval_id, created_at, expires):
                details = self._approval_details.pop(call_id, None)
                if call_id in self._awaiting_approval and details is not None:
                    call, description, kind = details
                    self._announced.add(approval_id)
                    self.w.lifeline.publish(ApprovalRequestEvent(
                        id=approval_id, session_id=self.sid, tool_name=call.name, description=description,
                        created_at=created_at or iso_after(self._clock, 0),
                        timeout_s=self.w.approval_timeout_s if expires else 0.0, kind=kind,
                    ))
            case ApprovalAnswer(call_id, allowed, text, updated, scope, approval_id):
                if call_id not in self._awaiting_approval:
                    return None
                self._awaiting_approval.discard(call_id)
                self._approval_details.pop(call_id, None)
                self._touch()
                if approval_id in self._announced:
                    # a request answered at once was never shown, so its answer is not either
                    self._announced.discard(approval_id)
                    self.w.lifeline.publish(ApprovalResolved(
                        id=approval_id, behavior="allow" if allowed else "deny", message=text))
                self._perform(self._loop.handle(fx.ApprovalDecided(call_id, allowed, text, updated, scope)))
            case _LoopTimer(gen, token) if gen == self.gen:
                self._perform(self._loop.handle(fx.TimerFired(token)))
            case _IdleDue(gen, turn_seq) if gen == self.gen:
                if not self._in_turn and turn_seq == self._turn_seq:
                    self._end(0)
            case _TimeoutDue(gen) if gen == self.gen:
                self._check_timeout()
            case CheckTimeout():
                self._check_timeout()
            case ExtendTimeout(timeout_s):
                self._extension = (self._activity_seq, self._clock.monotonic() + max(timeout_s, 0.0))
                self._schedule_timeout(min(timeout_s, self._timeout_s))
            case Abort():
                self._abort()
            case CreditsExhausted(sid) if sid == self.sid:
                tell(self.w.supervisor, StopRequested(self.sid, self.gen, "credits_exhausted"))
            case RetryWrites():
                self._writes.flush()
        return None

    def _count_turn(self) -> None:
        """A user message opens a turn: counted here, stored open until its result."""
        self._tally.turns += 1
        turns = self._tally.turns
        self._write("the turn count", lambda: self.w.store.open_turn(self.sid, total_turns=turns))

    def _write(self, what: str, write: Any) -> None:
        self._writes.run(self.sid, what, write)

    def _begin(self, prompt: str, blocks: tuple[dict[str, Any], ...] = ()) -> None:
        self._begun = True
        self._touch()
        tell(self.w.timers, CancelTimer((self.sid, "idle", self.gen)))
        self._turn_started = self._clock.monotonic()
        self._in_turn = True
        # a plain string unless multimodal: loops written for strings keep working
        self._perform(self._loop.start(fx.UserMessage(prompt, blocks) if blocks else prompt))

    # --- effects --------------------------------------------------------------------------

    def _perform(self, effects: list[fx.Effect]) -> None:
        for effect in effects:
            if self._ended or self.w.lifeline.closed:
                return
            match effect:
                case fx.Emit(event):
                    self._emit(event)
                case fx.CallModel(request, purpose):
                    self._start_model_call(request, purpose)
                case fx.RunTool(call):
                    self._start_tool(call)
                case fx.AskApproval(call, description, kind):
                    self._ask_approval(call, description, kind)
                case fx.AcquireSlot(model):
                    self._acquire_slot(model)
                case fx.ReleaseSlot():
                    self._give_back_slot()
                case fx.Schedule(delay_s, token):
                    tell(self.w.timers, ScheduleTimer((self.sid, f"loop:{token}", self.gen), delay_s,
                                                      self.actor_ref, _LoopTimer(self.gen, token)))
                case fx.ReportOutage(text):
                    self.w.lifeline.refuse_input()
                    self._release_everything()
                    self._ended = True
                    tell(self.w.supervisor, OutageReported(self.sid, self.gen, text))
                case fx.TurnFinished():
                    self._turn_finished()
                case fx.Exit(code):
                    self._end(code)
                case fx.PersistMessage(role, content) if role == SNAPSHOT_ROLE:
                    self._write_snapshot(content)
                case fx.PersistMessage(role, content):
                    # Assistant replies are persisted from their Assistant events already.
                    if role != "assistant":
                        self._write(f"a {role} message",
                                    lambda role=role, content=content: self.w.store.append_message(
                                        self.sid, role, content))

    def _write_snapshot(self, content: str) -> None:
        """The payload-growth failsafe's diagnostic snapshot → a file in the data directory."""
        log = logger.bind(session_id=self.sid)
        if self.w.snapshot_dir is None:
            log.warning("payload-growth snapshot not written: no snapshot directory configured")
            return
        stamp = self._clock.now().strftime("%Y%m%dT%H%M%S%fZ")
        path = self.w.snapshot_dir / f"payload-{self.sid}-{stamp}.json"
        try:
            self.w.snapshot_dir.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")
        except OSError as exc:
            log.warning("payload-growth snapshot not written to {}: {}", path, exc)
            return
        log.warning("payload-growth snapshot written to {}", path)
        self.w.lifeline.publish(SystemEvent(subtype="payload_snapshot", message=str(path)))

    def _emit(self, event: Event) -> None:
        if isinstance(event, PlanEvent):
            # stored before it is published: a reader told of the change finds it in the store
            plan = plan_to_json(event.steps)
            self._write("the plan", lambda: self.w.store.update_session(self.sid, plan=plan))
        if isinstance(event, RetryScheduled) and not event.due_at:
            event = replace(event, due_at=iso_after(self._clock, event.delay_s))
        if isinstance(event, Assistant) and event.content:
            text = event.content
            self._write("the assistant's reply", lambda: self.w.store.append_message(self.sid, "assistant", text))
        if isinstance(event, ErrorEvent) and event.message:
            self._last_error = event.message
        elif isinstance(event, Result) and event.subtype == "success":
            self._last_error = ""  # a turn that went well: earlier errors explain no later exit
        if isinstance(event, Result) and not event.duration_ms:
            event = replace(event, duration_ms=int((self._clock.monotonic() - self._turn_started) * 1000))
        self.w.lifeline.publish(event)
        if isinstance(event, Result):
            self._turn_completed(event.subtype, event.total_cost_usd)

    def _turn_completed(self, subtype: str, cost: float) -> None:
        """A turn's result: its cost and count, stored; a success closes an open turn and
        resets the supervisor's outage backoff; the CreditBank charges it."""
        answered = subtype == "success"
        self._tally.cost_usd += cost
        if answered:
            self._tally.answered = True
        self._write("the turn's usage", lambda: self.w.store.add_session_usage(
            self.sid, cost_usd=cost, turns=1, answered=answered))
        if self.w.credits is not None:
            tell(self.w.credits, ChargeTurn(self.sid, self.w.source, self.actor_ref))

    def _turn_finished(self) -> None:
        self._in_turn = False
        self._turn_seq += 1
        if self._pending_input:
            self._turn_started = self._clock.monotonic()
            self._in_turn = True
            self._perform(self._loop.handle(self._pending_input.popleft()))
            return
        if self.w.idle_timeout_s is None:
            return
        tell(self.w.timers, ScheduleTimer((self.sid, "idle", self.gen), self.w.idle_timeout_s,
                                          self.actor_ref, _IdleDue(self.gen, self._turn_seq)))

    def _end(self, code: int) -> None:
        self.w.lifeline.refuse_input()
        self._release_everything()
        self._ended = True
        tell(self.w.supervisor, SessionEnded(self.sid, self.gen, code, self._last_error if code else ""))

    def _abort(self) -> None:
        self.w.lifeline.refuse_input()
        if not self._ended and self._loop is not None:  # no loop yet while it builds
            self._loop.abort()
        self._release_everything()
        self._ended = True
        self.actor_ref.stop(block=False)

    def _release_everything(self) -> None:
        if self._worker_cancel is not None:
            self._worker_cancel.cancel()
            self._worker_cancel = None
        if self._slot_state != "none":
            self._give_back_slot()
        for kind in ("idle", "timeout"):
            tell(self.w.timers, CancelTimer((self.sid, kind, self.gen)))
        if self.w.approvals is not None:
            tell(self.w.approvals, CancelSession(self.sid, "Session stopped"))
        pending = self._writes.take()
        if pending:
            tell(self.w.supervisor, WritesHandedOver(self.sid, pending))

    # --- model calls and tools ------------------------------------------------------------

    def _start_model_call(self, request: ModelRequest, purpose: str) -> None:
        provider, lifeline, stream_text = self.w.provider, self.w.lifeline, purpose == "turn"
        request = replace(request, session_id=self.sid, generation=self.gen)
        actor = self

        def on_event(event: StreamEvent) -> None:
            actor._touch()
            if stream_text and isinstance(event, TextDelta) and event.text:
                lifeline.publish(ContentBlockDelta(text=event.text))

        def call(cancel: CancelToken) -> fx.LoopInput | _ExitRequested:
            try:
                response = provider.stream(request, on_event, cancel)
                return fx.ModelSucceeded(response, request_bytes=_request_size(request))
            except ProviderError as exc:
                return fx.ModelFailed(exc)
            except SessionExit as exc:
                return _ExitRequested(exc.code)
            except StreamCancelled:
                raise
            except Exception as exc:  # noqa: BLE001 - an unclassified provider bug is fatal, not a hang
                logger.bind(session_id=self.sid).exception("provider raised an unclassified error")
                return fx.ModelFailed(ProviderError(ErrorKind.FATAL, f"{type(exc).__name__}: {exc}"))

        self._run_on_worker(call, f"model-{self.sid[:8]}")

    def _start_tool(self, call: Any) -> None:
        tool = self.w.tools.get(call.name)
        ctx = self.w.tool_context

        def run(cancel: CancelToken) -> fx.LoopInput:
            if tool is None:
                return fx.ToolFinished(call.id, ToolResult(f"Unknown tool: {call.name}", is_error=True))
            try:
                result = tool.handler(dict(call.arguments), replace(ctx, cancel=cancel))
            except Exception as exc:  # noqa: BLE001 - a tool bug becomes a result the model sees
                result = ToolResult(f"Tool execution error: {type(exc).__name__}: {exc}", is_error=True)
            return fx.ToolFinished(call.id, result)

        self._run_on_worker(run, f"tool-{call.name}-{self.sid[:8]}")

    def _run_on_worker(self, work: Any, name: str) -> None:
        self._worker_seq += 1
        seq = self._worker_seq
        cancel = CancelToken()
        self._worker_cancel = cancel
        self.w.lifeline.cancel.on_cancel(cancel.cancel)
        ref = self.actor_ref

        def body() -> None:
            try:
                result = work(cancel)
            except StreamCancelled:
                return
            if not cancel.cancelled:
                tell(ref, _WorkerDone(seq, result))

        self._tracker.run_tracked(body, name)

    def _ask_approval(self, call: Any, description: str, kind: str) -> None:
        self._awaiting_approval.add(call.id)
        if self.w.approvals is None:
            self.actor_ref.tell(ApprovalAnswer(call.id, False, "No approval broker is configured"))
            return
        self._approval_seq += 1
        approval_id = approval_id_for(self.sid, self.gen, self._approval_seq)
        # approval_request is published when the broker says a human is asked (ApprovalAsked)
        self._approval_details[call.id] = (call, description, kind)
        tell(self.w.approvals, RequestApproval(
            approval_id=approval_id, session_id=self.sid, call_id=call.id, tool_name=call.name,
            description=description, kind=kind, timeout_s=self.w.approval_timeout_s,
            reply_to=self.actor_ref, tool_input=dict(call.arguments),
        ))

    # --- slots ------------------------------------------------------------------------------

    def _acquire_slot(self, model: str) -> None:
        self._slot_request += 1
        self._slot_queued = False
        if self.w.slot_pool is None:
            self._slot_state = "held"
            self._perform(self._loop.handle(fx.SlotGranted()))
            return
        self._slot_state = "waiting"
        tell(self.w.slot_pool, AcquireSlot(self.sid, self._slot_request, model, self.w.slot_weight,
                                           self.actor_ref))

    def _give_back_slot(self) -> None:
        state, self._slot_state = self._slot_state, "none"
        if self.w.slot_pool is None:
            return
        # Nothing held or requested: nothing to give back — unless this incarnation has
        # ended, when a grant may be racing the abort (ReleaseSlot is idempotent).
        if state == "none" and not self._ended:
            return
        tell(self.w.slot_pool, ReleaseSlot(self.sid))

    # --- timeout ------------------------------------------------------------------------

    def _touch(self) -> None:
        """An event: re-arms the default inactivity timeout (ends any extension)."""
        self._last_activity = self._clock.monotonic()
        self._activity_seq += 1

    def _deadline(self) -> float:
        extension = self._extension
        if extension is not None and extension[0] == self._activity_seq:
            return extension[1]
        return self._last_activity + self._timeout_s

    def _schedule_timeout(self, delay_s: float) -> None:
        tell(self.w.timers, ScheduleTimer((self.sid, "timeout", self.gen), max(delay_s, 0.0),
                                          self.actor_ref, _TimeoutDue(self.gen)))

    def _check_timeout(self) -> None:
        now = self._clock.monotonic()
        deadline = self._deadline()
        if now >= deadline:
            tell(self.w.supervisor, TimedOut(self.sid, self.gen))
        else:
            # An event may re-arm the default before an extension's deadline: check again
            # no later than one default timeout from now (activity only pushes it later).
            self._schedule_timeout(min(deadline, now + self._timeout_s) - now)


def _request_size(request: ModelRequest) -> int:
    # one measure for the actor and the loop's payload-growth failsafe
    return request_size(request)

