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

The actor keeps the mailbox, the build, the turn accounting and the budget; the rest is
done by collaborators it holds, each handed the incarnation's books
(:class:`~.session_state.SessionState`) at the call: the effect performer
(:mod:`.session_effects`, which starts model calls and tools through :mod:`.session_calls`),
the inactivity timeout (:mod:`.session_deadline`) and passivation (:mod:`.session_passivation`).

User messages go to the loop as they arrive: the loop queues those that come mid-turn
(``corvid_actors.loop.effects.Loop``); the actor only counts how many turns are open.
With the double-texting policy ``interrupt`` (``wiring.double_texting``, see
:mod:`corvid_actors.core.double_texting`) a mid-turn message is followed by ``InterruptTurn``;
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

from collections.abc import Callable
from typing import Any

from loguru import logger

from corvid_actors.actors.approvals import ApprovalAnswer, ApprovalAsked
from corvid_actors.actors.base import ActivityTracker, TrackedActor, tell
from corvid_actors.actors.cluster import SessionsLost
from corvid_actors.actors.credits import CreditsExhausted
from corvid_actors.actors.retry import PendingWrites, RetryWrites
from corvid_actors.actors.session_budget import TurnBudget, budget_events
from corvid_actors.actors.session_deadline import Deadlines
from corvid_actors.actors.session_effects import EffectPerformer
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
    TimeoutDue,
    UserInput,
    WorkerDone,
)
from corvid_actors.actors.session_passivation import Passivation
from corvid_actors.actors.session_state import SessionState
from corvid_actors.actors.session_wiring import SessionWiring
from corvid_actors.actors.session_work import ExitRequested
from corvid_actors.actors.slots import SlotAnswer, SlotQueued
from corvid_actors.clock import iso_after
from corvid_actors.core.double_texting import INTERRUPT
from corvid_actors.events import ApprovalRequestEvent, ApprovalResolved, QueueStatus, Thinking
from corvid_actors.loop import effects as fx
from corvid_actors.telemetry.tracing import TurnTrace
from corvid_actors.wiring.builder import close_resources


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
        ref = self.actor_ref
        #: the inactivity timeout (its own books: the last activity, an extension, the timer)
        self._deadlines = Deadlines(self.sid, self.gen, self._clock, wiring.timeout_s, timers=wiring.timers,
                                    supervisor=wiring.supervisor, deadline_sink=wiring.deadline_sink, self_ref=ref)
        #: the incarnation's books, passed to its collaborators (see :mod:`.session_state`)
        self._state = SessionState(turn_started=self._clock.monotonic())
        self._tally = wiring.tally
        #: the spending caps, checked before each turn (see :mod:`.session_budget`)
        self._budget = TurnBudget(self.sid, wiring.budget, wiring.access, wiring.store)
        #: the span of the turn in flight (OpenTelemetry), across the turn's messages
        self._trace = TurnTrace(wiring.tracing, session_id=self.sid, agent=wiring.agent, source=wiring.source,
                                generation=self.gen)
        self._writes = PendingWrites(timers=wiring.timers, owner=None, key=(self.sid, "write-retry", self.gen),
                                     publish=lambda _sid, event: self.w.lifeline.publish(event),
                                     schedule=wiring.write_retry,
                                     on_fenced=lambda sid: tell(self.w.supervisor, SessionsLost((sid,))))
        self._passivation = Passivation(self.sid, self.gen, self._clock, wiring.passivate_after_s,
                                        timers=wiring.timers, supervisor=wiring.supervisor, self_ref=ref,
                                        deadline=self._deadlines.deadline)
        #: performs what the loop returns (events, model calls, tools, slots, approvals, timers)
        self._effects = EffectPerformer(wiring, self._clock, tracker, self._trace, self._writes, ref,
                                        deadlines=self._deadlines, passivation=self._passivation,
                                        start_held_turn=self._start_held_turn)

    # --- lifecycle ------------------------------------------------------------------------

    def on_start(self) -> None:
        self._writes.bind(self.actor_ref)
        self._deadlines.schedule(self.w.timeout_s)
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
            self._state.ended = True
            tell(self.w.supervisor, BuildFailed(self.sid, self.gen, done.error))
            self._effects.release_everything(self._state)
            self.actor_ref.stop(block=False)
            return
        self.w = done.wiring
        self._effects.rewire(done.wiring)
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
        self._effects.release_everything(self._state)
        tell(self.w.supervisor, SessionCrashed(self.sid, self.gen, f"{exception_type.__name__}: {exception_value}"))

    def on_receive(self, message: Any) -> Any:
        state = self._state
        if state.ended or self.w.lifeline.closed:
            if isinstance(message, BuildDone) and message.built is not None:
                # stopped during the build: what it made is closed (blocking: on a worker)
                resources, sid = message.built.resources, self.sid
                self._tracker.run_tracked(lambda: close_resources(resources, sid), f"close-{sid[:8]}", never_parks=True)
            if isinstance(message, SlotAnswer) and message.granted:
                self._effects.give_back_slot(state)  # granted during the abort: release it (race-safe)
            if isinstance(message, Abort):
                self._effects.abort(state)
            return None
        Passivation.count_received(state, message)
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
            case UserInput(text, blocks, opened) if not state.begun:
                if not self._over_budget(opened):
                    self._count_turn(opened)
                    self._begin(text, blocks)  # the supervisor sends Begin first; never lose a message
            case UserInput(text, blocks, opened) if state.turns_open and self._budget.capped and (
                    self.w.double_texting != INTERRUPT):
                # capped: it waits here, not in the loop, so that its turn is checked when it
                # would start (the loop would start it right after the running turn)
                state.held.append((text, blocks, opened))
            case UserInput(text, blocks, opened):
                self._user_turn(text, blocks, opened)
            case WorkerDone(seq, result):
                if seq == state.worker_seq:
                    state.worker_cancel = None
                    self._deadlines.touch()
                    if self.w.journal is not None:  # the outside world's answer, as the loop gets it
                        self.w.journal.outcome(result)
                    if isinstance(result, ExitRequested):
                        self._effects.end(state, result.code)
                    else:
                        self._effects.perform(state, self._loop.handle(result))
            case SlotAnswer(request_id, granted):
                if request_id != state.slot_request or state.slot_state != "waiting":
                    if granted:
                        self._effects.give_back_slot(state)
                    return None
                state.slot_state = "held" if granted else "none"
                if state.slot_queued:
                    # "no longer waiting" only after a real wait (an immediate grant says nothing)
                    state.slot_queued = False
                    self.w.lifeline.publish(QueueStatus(status_message=""))
                self._effects.perform(state, self._loop.handle(fx.SlotGranted() if granted else fx.SlotTimedOut()))
            case SlotQueued(request_id, status):
                if request_id == state.slot_request and state.slot_state == "waiting":
                    state.slot_queued = True
                    self.w.lifeline.publish(QueueStatus(status_message=status))
            case ApprovalAsked(call_id, approval_id, created_at, expires):
                details = state.approval_details.pop(call_id, None)
                if call_id in state.awaiting_approval and details is not None:
                    call, description, kind = details
                    state.announced.add(approval_id)
                    self.w.lifeline.publish(ApprovalRequestEvent(
                        id=approval_id, session_id=self.sid, tool_name=call.name, description=description,
                        created_at=created_at or iso_after(self._clock, 0),
                        timeout_s=self.w.approval_timeout_s if expires else 0.0, kind=kind,
                    ))
            case ApprovalAnswer(call_id, allowed, text, updated, scope, approval_id, answered_by):
                if call_id not in state.awaiting_approval:
                    return None
                state.awaiting_approval.discard(call_id)
                state.approval_details.pop(call_id, None)
                self._trace.decided(call_id, allowed)
                self._deadlines.touch()
                if self.w.journal is not None:
                    self.w.journal.approval(call_id, allowed, text, scope, asked=approval_id in state.announced,
                                            answered_by=answered_by)
                if approval_id in state.announced:
                    # a request answered at once was never shown, so its answer is not either
                    state.announced.discard(approval_id)
                    self.w.lifeline.publish(ApprovalResolved(
                        id=approval_id, behavior="allow" if allowed else "deny", message=text,
                        answered_by=answered_by))
                self._effects.perform(state, self._loop.handle(fx.ApprovalDecided(call_id, allowed, text, updated, scope)))
            case LoopTimerDue(gen, token) if gen == self.gen:
                state.loop_timers.discard(token)
                self._effects.perform(state, self._loop.handle(fx.TimerFired(token)))
            case IdleDue(gen, turn_seq) if gen == self.gen:
                if not state.turns_open and turn_seq == state.turn_seq:
                    self._effects.end(state, 0)
            case PassivateDue(gen, turn_seq) if gen == self.gen:
                self._passivation.due(state, turn_seq)
            case TimeoutDue(gen) if gen == self.gen:
                self._deadlines.check()
            case CheckTimeout():
                self._deadlines.check()
            case ExtendTimeout(timeout_s):
                self._deadlines.extend(timeout_s)
                if not state.turns_open:
                    self._deadlines.note(state)
            case Abort():
                self._effects.abort(state)
            case CreditsExhausted(sid) if sid == self.sid:
                tell(self.w.supervisor, StopRequested(self.sid, self.gen, "credits_exhausted"))
            case RetryWrites():
                self._writes.flush()
        return None

    def _wait_for_user(self) -> None:
        """No turn: wait for the first message as after a finished turn (a late subscriber
        hears "not thinking", as between turns)."""
        self._deadlines.touch()
        if self.w.inherited_deadline is not None:
            self._deadlines.inherit(self.w.inherited_deadline)
        self.w.lifeline.publish(Thinking(thinking=False))
        self._effects.schedule_idle(self._state, self.w.inherited_idle_deadline)
        self._deadlines.note(self._state)

    def _user_turn(self, text: str, blocks: tuple[dict[str, Any], ...], opened: bool = False) -> None:
        """A user message for the begun loop: its turn starts now (idle), or it waits in the
        loop's queue (mid-turn); not at all when a spending cap is reached. ``opened``: the
        sender stored its turn counted open already."""
        if self._over_budget(opened):
            return
        self._count_turn(opened)
        self._deadlines.touch()
        if not self._state.turns_open:
            self._state.turn_started = self._clock.monotonic()
            self._effects.cancel_idle(self._state)
            self._deadlines.note(self._state, busy=True)
            self._trace.start(self._tally.turns)
        # mid-turn, the loop queues it: its turn starts after TurnFinished
        mid_turn = self._state.turns_open > 0
        self._state.turns_open += 1
        if self.w.journal is not None:
            self.w.journal.user(text, False)
        self._tally.in_turn = True
        self._effects.perform(self._state, self._loop.handle(fx.UserMessage(text, blocks)))
        if mid_turn and self.w.double_texting == INTERRUPT:
            # double texting: the running turn ends at its next safe point instead
            self._effects.perform(self._state, self._loop.handle(fx.InterruptTurn()))

    def _start_held_turn(self) -> bool:
        """The last turn finished: the oldest message held for the budget check starts its
        turn (True), or — a cap reached — each held message is refused in turn (False:
        the session waits for its user)."""
        while self._state.held and not self._state.ended:
            text, blocks, opened = self._state.held.popleft()
            self._user_turn(text, blocks, opened)
            if self._state.turns_open:
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
            self._effects.write("the turn count", lambda: self.w.store.uncount_opened_turn(self.sid))
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
        self._effects.write("the turn count", lambda: self.w.store.open_turn(self.sid, total_turns=turns))

    def _begin(self, prompt: str, blocks: tuple[dict[str, Any], ...] = ()) -> None:
        self._state.begun = True
        self._deadlines.touch()
        self._effects.cancel_idle(self._state)
        self._deadlines.note(self._state, busy=True)
        self._state.turn_started = self._clock.monotonic()
        self._state.turns_open = 1
        self._tally.in_turn = True
        self._trace.start(self._tally.turns)
        if self.w.journal is not None:
            self.w.journal.user(prompt, True)
        # a plain string unless multimodal: loops written for strings keep working
        self._effects.perform(self._state, self._loop.start(fx.UserMessage(prompt, blocks) if blocks else prompt))
