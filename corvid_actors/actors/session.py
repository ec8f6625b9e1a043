"""The SessionActor: one per *running* session incarnation; the loop's imperative shell.

It feeds its loop (a pure state machine, ``corvid_actors.loop``) with inputs and performs
the effects the loop returns. Blocking work — a model stream, a tool run — goes to a
worker thread that reports back with a message, so the mailbox is never blocked:
``Abort``, user messages, approval answers and timers are handled at once, mid-stream.

Everything this incarnation publishes passes through its :class:`Lifeline`. The
supervisor closes the lifeline *before* it publishes the final event of a stop, so no
event of this incarnation — not even a streamed delta already in flight on the worker —
can come after the end.

Messages in and out are defined in :mod:`.session_messages` (in: ``Begin``, ``Ready``,
``UserInput`` — from the supervisor, or straight from ``Runtime.send_message`` through
the live registry — ``ExtendTimeout``, ``CheckTimeout``, ``Abort``; out, to the
supervisor: ``Built``/``BuildFailed``, ``SessionEnded``, ``OutageReported``,
``TimedOut``, ``SessionCrashed``, ``StopRequested``, ``WritesHandedOver``), plus the
answers of SlotPool, ApprovalBroker, CreditBank and Timers (each defined by the module
of the actor that sends it: ``slots``, ``approvals``, ``credits``). What it is built
with is :mod:`.session_wiring`; the blocking work its workers run, :mod:`.session_work`.

User messages go to the loop as they arrive: the loop queues those that come mid-turn
(``corvid_actors.loop.effects.Loop``); the actor only counts how many turns are open.
With the double-texting policy ``interrupt`` (``wiring.double_texting``, see
:mod:`corvid_actors.double_texting`) a mid-turn message is followed by ``InterruptTurn``;
the loop may answer ``StopModelCall``, and the actor cancels the model call and tells it
what was streamed (``ModelStopped``). A running tool is never cancelled for it.

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

Spending caps are checked here before every turn, whoever started it
(:mod:`.session_budget`): over a cap the turn is not started — an ``error`` and a
``session_error`` (``budget_exceeded``), the user message left stored as sent (the
running loop does not see it), the session waiting for its user. A capped session keeps the
messages that arrive mid-turn itself (not in the loop's queue, whose next turn would start
unchecked right after ``TurnFinished``) — except under ``interrupt``, where the loop needs
the message to end the running turn, and the check comes when it arrives.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from loguru import logger

from corvid_actors.actors.approvals import ApprovalAnswer, ApprovalAsked
from corvid_actors.actors.base import ActivityTracker, TrackedActor, tell
from corvid_actors.actors.cluster import SessionsLost
from corvid_actors.actors.credits import CreditsExhausted
from corvid_actors.actors.retry import PendingWrites, RetryWrites
from corvid_actors.actors.session_budget import TurnBudget, budget_events
from corvid_actors.actors.session_effects import SessionEffects
from corvid_actors.actors.session_messages import (
    Abort,
    Begin,
    BuildDone,
    BuildFailed,
    Built,
    CheckTimeout,
    ExtendTimeout,
    IdleDue,
    InjectedCrash,
    InjectedCrashError,
    LoopTimerDue,
    PassivateDue,
    Ready,
    SessionCrashed,
    StopRequested,
    TimedOut,
    TimeoutDue,
    UserInput,
    WorkerDone,
)
from corvid_actors.actors.session_passivation import SessionPassivation
from corvid_actors.actors.session_wiring import SessionWiring
from corvid_actors.actors.session_work import ExitRequested
from corvid_actors.actors.slots import SlotAnswer, SlotQueued
from corvid_actors.actors.timers import ScheduleTimer
from corvid_actors.clock import iso_after
from corvid_actors.double_texting import INTERRUPT
from corvid_actors.events import ApprovalRequestEvent, ApprovalResolved, QueueStatus, Thinking
from corvid_actors.loop import effects as fx
from corvid_actors.telemetry.tracing import TurnTrace
from corvid_actors.vocabulary import CancelToken
from corvid_actors.wiring import close_resources


class SessionActor(SessionEffects, SessionPassivation, TrackedActor):
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
        #: when the inactivity timer is due (monotonic): re-armed when a turn ends only if
        #: activity moved the deadline past it (see :meth:`_rearm_timeout`)
        self._timeout_at = 0.0
        self._worker_seq = 0
        #: an idle timer is scheduled (cancel it only then: one message fewer per turn)
        self._idle_armed = False
        #: when the armed idle exit is due (wall clock, stored by the cluster seat), or None
        self._idle_due: datetime | None = None
        #: passivation (issue 37, :mod:`.session_passivation`): its timer is armed; the user
        #: messages taken; the loop's timers in flight (tokens)
        self._passivate_armed = False
        self._received = 0
        self._loop_timers: set[str] = set()
        self._worker_cancel: CancelToken | None = None
        #: the text the model call in flight has streamed so far (for StopModelCall)
        self._streamed: list[str] = []
        #: user messages handed to the loop whose turn has not finished: the loop queues
        #: those that arrive mid-turn, and each starts exactly one turn, in order
        self._turns_open = 0
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
        #: the spending caps, checked before each turn (see :mod:`.session_budget`)
        self._budget = TurnBudget(self.sid, wiring.budget, wiring.access, wiring.store)
        #: user messages that came mid-turn to a capped session: each starts its turn after
        #: the running one, once the caps are checked (uncapped, the loop queues them)
        self._held: deque[tuple[str, tuple[dict[str, Any], ...], bool]] = deque()
        #: the span of the turn in flight (OpenTelemetry), across the turn's messages
        self._trace = TurnTrace(wiring.tracing, session_id=self.sid, agent=wiring.agent, source=wiring.source,
                                generation=self.gen)
        self._writes = PendingWrites(timers=wiring.timers, owner=None, key=(self.sid, "write-retry", self.gen),
                                     publish=lambda _sid, event: self.w.lifeline.publish(event),
                                     schedule=wiring.write_retry,
                                     on_fenced=lambda sid: tell(self.w.supervisor, SessionsLost((sid,))))

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
                tell(ref, BuildDone(error=str(exc)))
                return
            if lifeline.closed or not tell(ref, BuildDone(wiring, built)):
                close_resources(built.resources, sid)  # stopped during the build

        self._tracker.run_tracked(body, f"build-{sid[:8]}", never_parks=True)

    def _built(self, done: BuildDone) -> None:
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
        if self.w.journal is not None:  # before the release cancels what is in flight
            self.w.journal.crash(f"{exception_type.__name__}: {exception_value}")
        self.w.lifeline.refuse_input()
        self._trace.end("crashed")
        self._release_everything()
        tell(self.w.supervisor, SessionCrashed(self.sid, self.gen, f"{exception_type.__name__}: {exception_value}"))

    def on_receive(self, message: Any) -> Any:
        if self._ended or self.w.lifeline.closed:
            if isinstance(message, BuildDone) and message.built is not None:
                # stopped during the build: what it made is closed (blocking: on a worker)
                resources, sid = message.built.resources, self.sid
                self._tracker.run_tracked(lambda: close_resources(resources, sid), f"close-{sid[:8]}", never_parks=True)
            if isinstance(message, SlotAnswer) and message.granted:
                self._give_back_slot()  # granted during the abort: release it (race-safe)
            if isinstance(message, Abort):
                self._abort()
            return None
        self._count_received(message)
        match message:
            case BuildDone():
                self._built(message)
            case InjectedCrash(reason):
                raise InjectedCrashError(reason)
            case Begin(prompt, blocks, counts_turn):
                if self._over_budget():
                    self._wait_for_user()  # the prompt stays stored; the next message may start
                else:
                    if counts_turn:
                        self._count_turn()
                    self._begin(prompt, blocks)
            case Ready():
                self._wait_for_user()
            case UserInput(text, blocks, opened) if not self._begun:
                if not self._over_budget(opened):
                    self._count_turn(opened)
                    self._begin(text, blocks)  # the supervisor sends Begin first; never lose a message
            case UserInput(text, blocks, opened) if self._turns_open and self._budget.capped and (
                    self.w.double_texting != INTERRUPT):
                # capped: it waits here, not in the loop, so that its turn is checked when it
                # would start (the loop would start it right after the running turn)
                self._held.append((text, blocks, opened))
            case UserInput(text, blocks, opened):
                self._user_turn(text, blocks, opened)
            case WorkerDone(seq, result):
                if seq == self._worker_seq:
                    self._worker_cancel = None
                    self._touch()
                    if self.w.journal is not None:  # the outside world's answer, as the loop gets it
                        self.w.journal.outcome(result)
                    if isinstance(result, ExitRequested):
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
            case ApprovalAnswer(call_id, allowed, text, updated, scope, approval_id, answered_by):
                if call_id not in self._awaiting_approval:
                    return None
                self._awaiting_approval.discard(call_id)
                self._approval_details.pop(call_id, None)
                self._trace.decided(call_id, allowed)
                self._touch()
                if self.w.journal is not None:
                    self.w.journal.approval(call_id, allowed, text, scope, asked=approval_id in self._announced,
                                            answered_by=answered_by)
                if approval_id in self._announced:
                    # a request answered at once was never shown, so its answer is not either
                    self._announced.discard(approval_id)
                    self.w.lifeline.publish(ApprovalResolved(
                        id=approval_id, behavior="allow" if allowed else "deny", message=text,
                        answered_by=answered_by))
                self._perform(self._loop.handle(fx.ApprovalDecided(call_id, allowed, text, updated, scope)))
            case LoopTimerDue(gen, token) if gen == self.gen:
                self._loop_timers.discard(token)
                self._perform(self._loop.handle(fx.TimerFired(token)))
            case IdleDue(gen, turn_seq) if gen == self.gen:
                if not self._turns_open and turn_seq == self._turn_seq:
                    self._end(0)
            case PassivateDue(gen, turn_seq) if gen == self.gen:
                self._passivate_due(turn_seq)
            case TimeoutDue(gen) if gen == self.gen:
                self._check_timeout()
            case CheckTimeout():
                self._check_timeout()
            case ExtendTimeout(timeout_s):
                self._extension = (self._activity_seq, self._clock.monotonic() + max(timeout_s, 0.0))
                self._schedule_timeout(min(timeout_s, self._timeout_s))
                if not self._turns_open:
                    self._note_deadline()
            case Abort():
                self._abort()
            case CreditsExhausted(sid) if sid == self.sid:
                tell(self.w.supervisor, StopRequested(self.sid, self.gen, "credits_exhausted"))
            case RetryWrites():
                self._writes.flush()
        return None

    def _wait_for_user(self) -> None:
        """No turn: wait for the first message as after a finished turn (a late subscriber
        hears "not thinking", as between turns)."""
        self._touch()
        if self.w.inherited_deadline is not None:
            self._inherit_deadline(self.w.inherited_deadline)
        self.w.lifeline.publish(Thinking(thinking=False))
        self._schedule_idle(self.w.inherited_idle_deadline)
        self._note_deadline()

    def _user_turn(self, text: str, blocks: tuple[dict[str, Any], ...], opened: bool = False) -> None:
        """A user message for the begun loop: its turn starts now (idle), or it waits in the
        loop's queue (mid-turn); not at all when a spending cap is reached. ``opened``: the
        sender stored its turn counted open already."""
        if self._over_budget(opened):
            return
        self._count_turn(opened)
        self._touch()
        if not self._turns_open:
            self._turn_started = self._clock.monotonic()
            self._cancel_idle()
            self._note_deadline(busy=True)
            self._trace.start(self._tally.turns)
        # mid-turn, the loop queues it: its turn starts after TurnFinished
        mid_turn = self._turns_open > 0
        self._turns_open += 1
        if self.w.journal is not None:
            self.w.journal.user(text, False)
        self._tally.in_turn = True
        self._perform(self._loop.handle(fx.UserMessage(text, blocks)))
        if mid_turn and self.w.double_texting == INTERRUPT:
            # double texting: the running turn ends at its next safe point instead
            self._perform(self._loop.handle(fx.InterruptTurn()))

    def _start_held_turn(self) -> bool:
        """The last turn finished: the oldest message held for the budget check starts its
        turn (True), or — a cap reached — each held message is refused in turn (False:
        the session waits for its user)."""
        while self._held and not self._ended:
            text, blocks, opened = self._held.popleft()
            self._user_turn(text, blocks, opened)
            if self._turns_open:
                return True
        return False

    def _over_budget(self, opened: bool = False) -> bool:
        """A spending cap is reached: the turn is not started, the session gets an ``error``
        and a ``session_error`` (``budget_exceeded``), the user message stays stored as sent
        (``opened``: the turn its sender counted open is closed and uncounted)."""
        spend = self._budget.refusal(self._tally.cost_usd)
        if spend is None:
            return False
        if opened:
            self._write("the turn count", lambda: self.w.store.uncount_opened_turn(self.sid))
        logger.bind(session_id=self.sid, event="budget_exceeded").info("turn not started: {}", spend.message())
        for event in budget_events(spend):
            self.w.lifeline.publish(event)
        return True

    def _count_turn(self, opened: bool = False) -> None:
        """A user message opens a turn: counted here, stored open until its result —
        by its sender already when ``opened`` (in the message's own statement)."""
        self._tally.turns += 1
        if opened:
            return
        turns = self._tally.turns
        self._write("the turn count", lambda: self.w.store.open_turn(self.sid, total_turns=turns))

    def _write(self, what: str, write: Any) -> None:
        self._writes.run(self.sid, what, write)

    def _begin(self, prompt: str, blocks: tuple[dict[str, Any], ...] = ()) -> None:
        self._begun = True
        self._touch()
        self._cancel_idle()
        self._note_deadline(busy=True)
        self._turn_started = self._clock.monotonic()
        self._turns_open = 1
        self._tally.in_turn = True
        self._trace.start(self._tally.turns)
        if self.w.journal is not None:
            self.w.journal.user(prompt, True)
        # a plain string unless multimodal: loops written for strings keep working
        self._perform(self._loop.start(fx.UserMessage(prompt, blocks) if blocks else prompt))

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

    def _inherit_deadline(self, due: datetime) -> None:
        """Wait until ``due`` (the deadline another daemon stored for this waiting session)
        instead of a full timeout; held as an extension is: the next event re-arms the
        default. A deadline already past ends the session at once, as it would have there."""
        remaining = (due - self._clock.now()).total_seconds()
        self._extension = (self._activity_seq, self._clock.monotonic() + remaining)
        self._schedule_timeout(max(min(remaining, self._timeout_s), 0.0))

    def _note_deadline(self, *, busy: bool = False) -> None:
        """Several daemons: tell the seat the wall-clock inactivity deadline while the
        session waits for its user, or None when a turn starts (``busy``): kept in memory,
        stored by the next heartbeat. Called at those transitions only, never per event."""
        sink = self.w.deadline_sink
        if sink is None:
            return
        if busy:
            sink(self.sid, None, None)
        else:
            now = self._clock.now()
            sink(self.sid, now + timedelta(seconds=self._deadline() - self._clock.monotonic()), self._idle_due)

    def _schedule_timeout(self, delay_s: float) -> None:
        delay_s = max(delay_s, 0.0)
        self._timeout_at = self._clock.monotonic() + delay_s
        tell(self.w.timers, ScheduleTimer((self.sid, "timeout", self.gen), delay_s,
                                          self.actor_ref, TimeoutDue(self.gen)))

    def _rearm_timeout(self) -> None:
        """The session goes quiet (its last turn finished): move the inactivity timer to
        the deadline, so that it fires once, when the session is due, instead of firing at
        the old time to find the deadline moved and re-arm then (a timer firing and a
        message per incarnation). The deadline is the one :meth:`_check_timeout` would
        compute; activity only moves it later, and the check still re-arms if it has."""
        now = self._clock.monotonic()
        due = min(self._deadline(), now + self._timeout_s)
        if due > self._timeout_at:
            self._schedule_timeout(due - now)

    def _check_timeout(self) -> None:
        now = self._clock.monotonic()
        deadline = self._deadline()
        if now >= deadline:
            tell(self.w.supervisor, TimedOut(self.sid, self.gen))
        else:
            # An event may re-arm the default before an extension's deadline: check again
            # no later than one default timeout from now (activity only pushes it later).
            self._schedule_timeout(min(deadline, now + self._timeout_s) - now)
