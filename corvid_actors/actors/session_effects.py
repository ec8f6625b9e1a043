"""The effect side of the session actor: performing what its loop returns.

:class:`SessionEffects` is the half of :class:`~corvid_actors.actors.session.SessionActor`
that turns the loop's effects (``corvid_actors.loop.effects``) into actions: publishing
events through the lifeline (and storing what they carry: the plan, assistant replies,
the turn's usage), starting model calls and tool runs on worker threads
(:mod:`.session_work`), asking the ApprovalBroker and the SlotPool, scheduling the
loop's timers, and ending the incarnation. It runs on the actor's thread only and holds
no state of its own (the actor's ``__init__`` makes it).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pykka
from loguru import logger

from corvid_actors.actors.approvals import ApprovalAnswer, CancelSession, RequestApproval, Resolve
from corvid_actors.actors.base import ActivityTracker, tell
from corvid_actors.actors.credits import ChargeTurn
from corvid_actors.actors.retry import PendingWrites
from corvid_actors.actors.session_messages import (
    IdleDue,
    LoopTimerDue,
    OutageReported,
    SessionEnded,
    WorkerDone,
    WritesHandedOver,
    approval_id_for,
)
from corvid_actors.actors.session_wiring import SessionWiring, TurnTally
from corvid_actors.actors.session_work import (
    Work,
    async_model_call,
    model_call,
    model_outcome,
    tool_run,
    write_snapshot,
)
from corvid_actors.actors.slots import AcquireSlot, ReleaseSlot
from corvid_actors.actors.timers import CancelTimer, ScheduleTimer
from corvid_actors.clock import Clock, iso_after
from corvid_actors.events import (
    Assistant,
    ErrorEvent,
    Event,
    PlanEvent,
    Result,
    RetryScheduled,
    SystemEvent,
)
from corvid_actors.io_loop import IoLoop, IoLoopStopped
from corvid_actors.loop import effects as fx
from corvid_actors.loop.payload_guard import SNAPSHOT_ROLE
from corvid_actors.loop.plan import plan_to_json
from corvid_actors.loop.turn import APPROVAL_WITHDRAWN
from corvid_actors.providers.base import (
    AsyncStreaming,
    CallDone,
    ModelRequest,
    StreamEvent,
    TextDelta,
    ToolCall,
    streams_async,
    streams_on_clock,
)
from corvid_actors.telemetry.tracing import ModelCallSpan, TurnTrace
from corvid_actors.vocabulary import CancelToken, StreamCancelled


class SessionEffects:
    """Performs a session loop's effects (see the module docstring)."""

    w: SessionWiring
    sid: str
    gen: int
    actor_ref: pykka.ActorRef[Any]
    _tracker: ActivityTracker
    _clock: Clock
    _loop: fx.Loop
    _tally: TurnTally
    _trace: TurnTrace
    _writes: PendingWrites
    _ended: bool
    _last_error: str
    _turn_started: float
    _turns_open: int
    _turn_seq: int
    _worker_seq: int
    _worker_cancel: CancelToken | None
    _streamed: list[str]
    _awaiting_approval: set[str]
    _approval_details: dict[str, tuple[Any, str, str]]
    _approval_seq: int
    _slot_request: int
    _slot_state: str
    _slot_queued: bool
    _idle_armed: bool
    _idle_due: datetime | None
    _loop_timers: set[str]

    if TYPE_CHECKING:  # the actor's own (SessionActor)

        def _touch(self) -> None: ...

        def _note_deadline(self, *, busy: bool = False) -> None: ...

        def _write(self, what: str, write: Any) -> None: ...

        def _rearm_timeout(self) -> None: ...

        def _start_held_turn(self) -> bool: ...

        def _schedule_passivation(self) -> None: ...

        def _cancel_passivation(self) -> None: ...

    # --- effects --------------------------------------------------------------------------

    def _perform(self, effects: list[fx.Effect]) -> None:
        # A run of consecutive Emit effects (a reply's assistant, result and thinking)
        # reaches the bus as one message: the lifeline holds what is published until the
        # run ends, and before anything of the run tells another actor (_turn_completed).
        lifeline = self.w.lifeline
        holding = False
        closing = fx.closing_replies(effects)
        try:
            for index, effect in enumerate(effects):
                if self._ended or lifeline.closed:
                    return
                if type(effect) is fx.Emit:
                    if not holding:
                        lifeline.hold()
                        holding = True
                    self._emit(effect.event, reply_closes_turn=index in closing)
                    continue
                if holding:
                    lifeline.flush()
                    holding = False
                self._perform_one(effect)
        finally:
            if holding:
                lifeline.flush()

    def _perform_one(self, effect: fx.Effect) -> None:
        match effect:
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
                self._loop_timers.add(token)
                tell(self.w.timers, ScheduleTimer((self.sid, f"loop:{token}", self.gen), delay_s,
                                                  self.actor_ref, LoopTimerDue(self.gen, token)))
            case fx.ReportOutage(text):
                self.w.lifeline.refuse_input()
                self._trace.end("outage")
                self._release_everything()
                self._ended = True
                tell(self.w.supervisor, OutageReported(self.sid, self.gen, text))
            case fx.TurnFinished():
                self._turn_finished()
            case fx.StopModelCall():
                self._stop_model_call()
            case fx.WithdrawApproval():
                self._withdraw_approval()
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
        path = write_snapshot(self.w.snapshot_dir, self.sid, self._clock.now(), content)
        if path is not None:
            self.w.lifeline.publish(SystemEvent(subtype="payload_snapshot", message=str(path)))

    def _emit(self, event: Event, *, reply_closes_turn: bool = False) -> None:
        """Store what ``event`` carries, then publish it. ``reply_closes_turn``: the event
        is a turn's reply whose row closes the turn (an Assistant), or the Result of a turn
        its reply closed (see :func:`~corvid_actors.loop.effects.closing_replies`)."""
        if isinstance(event, PlanEvent):
            # stored before it is published: a reader told of the change finds it in the store
            plan = plan_to_json(event.steps)
            self._write("the plan", lambda: self.w.store.update_session(self.sid, plan=plan))
        if isinstance(event, RetryScheduled) and not event.due_at:
            event = replace(event, due_at=iso_after(self._clock, event.delay_s))
        if isinstance(event, Assistant) and event.content:
            text = event.content
            self._write("the assistant's reply", lambda: self.w.store.append_message(
                self.sid, "assistant", text, closes_turn=reply_closes_turn))
        if isinstance(event, ErrorEvent) and event.message:
            self._last_error = event.message
        elif isinstance(event, Result) and event.subtype == "success":
            self._last_error = ""  # a turn that went well: earlier errors explain no later exit
        if isinstance(event, Result) and not event.duration_ms:
            event = replace(event, duration_ms=int((self._clock.monotonic() - self._turn_started) * 1000))
        self.w.lifeline.publish(event)
        if isinstance(event, Result):
            self._trace.end(event.subtype)
            self._turn_completed(event.subtype, event.total_cost_usd, closed_by_reply=reply_closes_turn)

    def _turn_completed(self, subtype: str, cost: float, *, closed_by_reply: bool = False) -> None:
        """A turn's result: its cost and count, stored; a success closes an open turn and
        resets the supervisor's outage backoff, an interrupted turn (double texting) closes
        its open turn too — in its reply's own statement when it had one (``closed_by_reply``),
        else with the usage; the CreditBank charges it."""
        answered = subtype == "success"
        closed = subtype in fx.CLOSING_RESULTS and not closed_by_reply
        self._tally.cost_usd += cost
        if answered:
            self._tally.answered = True
        self._write("the turn's usage", lambda: self.w.store.add_session_usage(
            self.sid, cost_usd=cost, turns=1, answered=closed))
        if self.w.credits is not None:
            self.w.lifeline.flush(keep_holding=True)  # the result is out before the charge
            tell(self.w.credits, ChargeTurn(self.sid, self.w.source, self.actor_ref))

    def _turn_finished(self) -> None:
        self._turns_open = max(self._turns_open - 1, 0)
        self._tally.in_turn = self._turns_open > 0
        self._turn_seq += 1
        if self._turns_open:
            # the loop starts the next queued message's turn right after TurnFinished
            self._turn_started = self._clock.monotonic()
            self._trace.start(self._tally.turns - self._turns_open + 1)
            return
        self._trace.end("finished")  # a turn that ended without a result
        if self._start_held_turn():
            return
        self._rearm_timeout()
        self._schedule_idle()
        self._note_deadline()

    def _schedule_idle(self, due: datetime | None = None) -> None:
        """Between turns: waiting ``idle_timeout_s`` for a user message ends the session.
        ``due``: the idle exit another daemon stored for this session taken over (issue 36),
        kept instead of a full ``idle_timeout_s`` from now (at once if it has passed). The
        wall-clock due time is what the cluster seat stores (``_note_deadline``)."""
        self._schedule_passivation()
        if self.w.idle_timeout_s is None:
            return
        now = self._clock.now()
        delay_s = self.w.idle_timeout_s if due is None else max((due - now).total_seconds(), 0.0)
        self._idle_armed = True
        self._idle_due = now + timedelta(seconds=delay_s)
        tell(self.w.timers, ScheduleTimer((self.sid, "idle", self.gen), delay_s,
                                          self.actor_ref, IdleDue(self.gen, self._turn_seq)))

    def _cancel_idle(self) -> None:
        self._cancel_passivation()
        self._idle_due = None
        if self._idle_armed:
            self._idle_armed = False
            tell(self.w.timers, CancelTimer((self.sid, "idle", self.gen)))

    def _end(self, code: int) -> None:
        self.w.lifeline.refuse_input()
        self._trace.end("exited")
        self._release_everything()
        self._ended = True
        tell(self.w.supervisor, SessionEnded(self.sid, self.gen, code, self._last_error if code else ""))

    def _abort(self) -> None:
        self.w.lifeline.refuse_input()
        self._trace.end("aborted")
        if not self._ended and self._loop is not None:  # no loop yet while it builds
            self._clean_up(self._loop.abort())
        self._release_everything()
        self._ended = True
        self.actor_ref.stop(block=False)

    def _clean_up(self, effects: list[fx.Effect]) -> None:
        """Apply the clean-up effects ``Loop.abort()`` returned (its contract, see
        ``corvid_actors.loop.effects.Loop.abort``): the lifeline may be closed already,
        so only what publishes and starts nothing is performed — ``ReleaseSlot`` and
        ``PersistMessage``; anything else is dropped (and logged: a loop bug)."""
        for effect in effects:
            match effect:
                case fx.ReleaseSlot():
                    self._give_back_slot()
                case fx.PersistMessage(role, content) if role not in ("assistant", SNAPSHOT_ROLE):
                    self._write(f"a {role} message",
                                lambda role=role, content=content: self.w.store.append_message(
                                    self.sid, role, content))
                case _:
                    logger.bind(session_id=self.sid).warning("effect after abort dropped: {}", effect)

    def _release_everything(self) -> None:
        if self._worker_cancel is not None:
            self._worker_cancel.cancel()
            self._worker_cancel = None
        if self._slot_state != "none":
            self._give_back_slot()
        self._cancel_idle()
        tell(self.w.timers, CancelTimer((self.sid, "timeout", self.gen)))
        if self.w.approvals is not None and self._awaiting_approval:
            # its own pending requests only; the supervisor's cleanup drops the grants (a
            # passivated session keeps them: it has none pending, issue 37)
            tell(self.w.approvals, CancelSession(self.sid, "Session stopped"))
        pending = self._writes.take()
        if pending:
            tell(self.w.supervisor, WritesHandedOver(self.sid, pending))

    # --- model calls and tools ------------------------------------------------------------

    def _start_model_call(self, request: ModelRequest, purpose: str) -> None:
        lifeline, stream_text = self.w.lifeline, purpose == "turn"
        request = replace(request, session_id=self.sid, generation=self.gen, at=self._clock.monotonic())
        actor = self
        streamed: list[str] = []
        self._streamed = streamed
        tap = self.w.journal  # the journal keeps the chunks' sizes: one append per chunk
        sizes = tap.model_request(request, purpose) if tap is not None else None

        def on_event(event: StreamEvent) -> None:
            actor._touch()
            if isinstance(event, TextDelta) and event.text:
                if sizes is not None:
                    if not sizes:
                        tap.first_chunk()
                    sizes.append(len(event.text))
                if stream_text:
                    streamed.append(event.text)
                    lifeline.publish_text(event.text)

        provider, io_loop = self.w.provider, self.w.io_loop
        span = self._trace.model_call(request, self.w.provider_name)
        if self._tracker.inline is not None and streams_on_clock(provider):
            cancel, on_done = self._new_call(request, span)
            if provider.stream_soon(request, on_event, cancel, on_done):
                return
        if io_loop is not None and streams_async(provider):
            self._run_on_io_loop(io_loop, provider, request, on_event, span)
        else:
            self._run_on_worker(model_call(provider, request, on_event, self.sid, span), f"model-{self.sid[:8]}")

    def _stop_model_call(self) -> None:
        """``StopModelCall`` (double texting ``interrupt``): cancel the model call in flight
        — between two streamed chunks; a late outcome of it is ignored — and tell the loop
        what it streamed (``ModelStopped``)."""
        if self._worker_cancel is not None:
            self._worker_cancel.cancel()
            self._worker_cancel = None
        self._worker_seq += 1
        streamed, self._streamed = "".join(self._streamed), []
        self._touch()
        self._perform(self._loop.handle(fx.ModelStopped(streamed)))

    def _new_call(self, request: ModelRequest, span: ModelCallSpan) -> tuple[CancelToken, CallDone]:
        """A model call that runs without a worker: its cancel token (cancelled with the
        run: a stop, an abort, the lifeline closing) and the ``on_done`` that reports its
        outcome as ``WorkerDone``, like a worker's (any thread; nothing once cancelled)."""
        self._worker_seq += 1
        seq = self._worker_seq
        cancel = CancelToken()
        self._worker_cancel = cancel
        self.w.lifeline.cancel.on_cancel(cancel.cancel)
        ref, sid = self.actor_ref, self.sid

        def on_done(response: Any, error: BaseException | None) -> None:
            span.finish(response, error if error is not None or not cancel.cancelled else StreamCancelled())
            if cancel.cancelled or isinstance(error, (StreamCancelled, asyncio.CancelledError)):
                return
            tell(ref, WorkerDone(seq, model_outcome(response, error, request, sid)))

        return cancel, on_done

    def _run_on_io_loop(self, io_loop: IoLoop[Any], provider: AsyncStreaming, request: ModelRequest,
                        on_event: Any, span: ModelCallSpan) -> None:
        """The model call as a task on the runtime's I/O loop (no thread of its own); its
        outcome comes back as ``WorkerDone`` like a worker's. Cancelling the run's token (a
        stop, an abort, the lifeline closing) cancels the task: the stream is closed."""
        cancel, on_done = self._new_call(request, span)
        try:
            call = io_loop.submit(async_model_call(provider, request, on_event, cancel), on_done)
        except IoLoopStopped:  # the runtime is shutting down: the call would never answer
            self._run_on_worker(model_call(self.w.provider, request, on_event, self.sid, span),
                                f"model-{self.sid[:8]}")
            return
        cancel.on_cancel(call.cancel)

    def _start_tool(self, call: ToolCall) -> None:
        if self.w.journal is not None:
            self.w.journal.tool_started(call)
        work = tool_run(self.w.tools.get(call.name), self.w.tool_context, call,
                        self._trace.tool_call(call.name, call.id))
        self._run_on_worker(work, f"tool-{call.name}-{self.sid[:8]}")

    def _run_on_worker(self, work: Work, name: str) -> None:
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
                tell(ref, WorkerDone(seq, result))

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
        self._trace.asked(call.id, call.name)
        self._tally.asked_slots_or_approvals = True
        tell(self.w.approvals, RequestApproval(
            approval_id=approval_id, session_id=self.sid, call_id=call.id, tool_name=call.name,
            description=description, kind=kind, timeout_s=self.w.approval_timeout_s,
            reply_to=self.actor_ref, tool_input=dict(call.arguments),
        ))

    def _withdraw_approval(self) -> None:
        """``WithdrawApproval`` (double texting ``interrupt``): the broker denies the request
        the loop waits for (the latest asked: one at a time); its ``ApprovalAnswer`` goes to
        the loop as ever. An answer already on its way wins (then nothing matches here)."""
        if self.w.approvals is not None and self._awaiting_approval:
            tell(self.w.approvals, Resolve(approval_id_for(self.sid, self.gen, self._approval_seq), "deny",
                                           APPROVAL_WITHDRAWN))

    # --- slots ------------------------------------------------------------------------------

    def _acquire_slot(self, model: str) -> None:
        self._slot_request += 1
        self._slot_queued = False
        if self.w.slot_pool is None:
            self._slot_state = "held"
            self._perform(self._loop.handle(fx.SlotGranted()))
            return
        self._slot_state = "waiting"
        self._tally.asked_slots_or_approvals = True
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
