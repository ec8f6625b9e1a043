"""The effect side of the session actor: performing what its loop returns.

:class:`EffectPerformer`, held by :class:`~corvid_actors.actors.session.SessionActor`,
turns the loop's effects (``corvid_actors.loop.effects``) into actions: publishing
events through the lifeline (and storing what they carry: the plan, assistant replies,
the turn's usage), starting model calls and tool runs (:mod:`.session_calls`), asking
the ApprovalBroker and the SlotPool, scheduling the loop's timers, and ending the
incarnation. It runs on the actor's thread only; the incarnation's books are the
:class:`~corvid_actors.actors.session_state.SessionState` each call is given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pykka
from loguru import logger

from corvid_actors.actors.approvals import ApprovalAnswer, CancelSession, RequestApproval, Resolve
from corvid_actors.actors.base import ActivityTracker, tell
from corvid_actors.actors.credits import ChargeTurn
from corvid_actors.actors.retry import PendingWrites
from corvid_actors.actors.session_calls import Calls
from corvid_actors.actors.session_deadline import Deadlines
from corvid_actors.actors.session_messages import (
    IdleDue,
    LoopTimerDue,
    OutageReported,
    SessionEnded,
    WritesHandedOver,
    approval_id_for,
)
from corvid_actors.actors.session_passivation import Passivation
from corvid_actors.actors.session_state import SessionState
from corvid_actors.actors.session_wiring import SessionWiring
from corvid_actors.actors.session_work import write_snapshot
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
from corvid_actors.loop import effects as fx
from corvid_actors.loop.payload_guard import SNAPSHOT_ROLE
from corvid_actors.loop.plan import plan_to_json
from corvid_actors.loop.turn import APPROVAL_WITHDRAWN
from corvid_actors.telemetry.tracing import TurnTrace


class EffectPerformer:
    """Performs a session loop's effects (see the module docstring). Its collaborators:
    the incarnation's :class:`~.session_deadline.Deadlines` and
    :class:`~.session_passivation.Passivation`, and its own :class:`~.session_calls.Calls`;
    ``start_held_turn()``, the actor's: after the last turn, start the oldest message held
    for the budget check (True), or refuse them all (False)."""

    def __init__(self, w: SessionWiring, clock: Clock, tracker: ActivityTracker, trace: TurnTrace,
                 writes: PendingWrites, self_ref: pykka.ActorRef[Any], *, deadlines: Deadlines,
                 passivation: Passivation, start_held_turn: Callable[[], bool]) -> None:
        self.sid, self.gen = w.session_id, w.generation
        self._clock, self._trace, self._writes, self._ref = clock, trace, writes, self_ref
        self._deadlines, self._passivation, self._start_held_turn = deadlines, passivation, start_held_turn
        self._calls = Calls(w, clock, tracker, trace, self_ref, deadlines.touch)
        self.rewire(w)

    def rewire(self, w: SessionWiring) -> None:
        """The incarnation's build finished: ``w`` is its complete wiring (provider, loop, tools)."""
        self.w = w
        self._loop: fx.Loop = w.loop
        self._tally = w.tally
        self._calls.rewire(w)

    def write(self, what: str, write: Any) -> None:
        """Store something (``write()``), retried with backoff if it fails (never raises)."""
        self._writes.run(self.sid, what, write)

    # --- effects --------------------------------------------------------------------------

    def perform(self, state: SessionState, effects: list[fx.Effect]) -> None:
        """Perform ``effects`` (what the loop returned) in order; nothing after the end."""
        # A run of consecutive Emit effects (a reply's assistant, result and thinking)
        # reaches the bus as one message: the lifeline holds what is published until the
        # run ends, and before anything of the run tells another actor (_turn_completed).
        lifeline = self.w.lifeline
        holding = False
        closing = fx.closing_replies(effects)
        try:
            for index, effect in enumerate(effects):
                if state.ended or lifeline.closed:
                    return
                if type(effect) is fx.Emit:
                    if not holding:
                        lifeline.hold()
                        holding = True
                    self._emit(state, effect.event, reply_closes_turn=index in closing)
                    continue
                if holding:
                    lifeline.flush()
                    holding = False
                self._perform_one(state, effect)
        finally:
            if holding:
                lifeline.flush()

    def _perform_one(self, state: SessionState, effect: fx.Effect) -> None:
        match effect:
            case fx.CallModel(request, purpose):
                self._calls.model_call(state, request, purpose)
            case fx.RunTool(call):
                self._calls.tool(state, call)
            case fx.AskApproval(call, description, kind):
                self._ask_approval(state, call, description, kind)
            case fx.AcquireSlot(model):
                self._acquire_slot(state, model)
            case fx.ReleaseSlot():
                self.give_back_slot(state)
            case fx.Schedule(delay_s, token):
                state.loop_timers.add(token)
                tell(self.w.timers, ScheduleTimer((self.sid, f"loop:{token}", self.gen), delay_s,
                                                  self._ref, LoopTimerDue(self.gen, token)))
            case fx.ReportOutage(text):
                self.w.lifeline.refuse_input()
                self._trace.end("outage")
                self.release_everything(state)
                state.ended = True
                tell(self.w.supervisor, OutageReported(self.sid, self.gen, text))
            case fx.TurnFinished():
                self._turn_finished(state)
            case fx.StopModelCall():
                self._stop_model_call(state)
            case fx.WithdrawApproval():
                self._withdraw_approval(state)
            case fx.Exit(code):
                self.end(state, code)
            case fx.PersistMessage(role, content) if role == SNAPSHOT_ROLE:
                self._write_snapshot(content)
            case fx.PersistMessage(role, content):
                # Assistant replies are persisted from their Assistant events already.
                if role != "assistant":
                    self.write(f"a {role} message",
                               lambda role=role, content=content: self.w.store.append_message(
                                   self.sid, role, content))

    def _stop_model_call(self, state: SessionState) -> None:
        """``StopModelCall`` (double texting ``interrupt``): cancel the model call in flight
        and tell the loop what it streamed (``ModelStopped``)."""
        self.perform(state, self._loop.handle(fx.ModelStopped(self._calls.stop(state))))

    def _write_snapshot(self, content: str) -> None:
        """The payload-growth failsafe's diagnostic snapshot → a file in the data directory."""
        path = write_snapshot(self.w.snapshot_dir, self.sid, self._clock.now(), content)
        if path is not None:
            self.w.lifeline.publish(SystemEvent(subtype="payload_snapshot", message=str(path)))

    def _emit(self, state: SessionState, event: Event, *, reply_closes_turn: bool = False) -> None:
        """Store what ``event`` carries, then publish it. ``reply_closes_turn``: the event
        is a turn's reply whose row closes the turn (an Assistant), or the Result of a turn
        its reply closed (see :func:`~corvid_actors.loop.effects.closing_replies`)."""
        if isinstance(event, PlanEvent):
            # stored before it is published: a reader told of the change finds it in the store
            plan = plan_to_json(event.steps)
            self.write("the plan", lambda: self.w.store.update_session(self.sid, plan=plan))
        if isinstance(event, RetryScheduled) and not event.due_at:
            event = replace(event, due_at=iso_after(self._clock, event.delay_s))
        if isinstance(event, Assistant) and event.content:
            text = event.content
            self.write("the assistant's reply", lambda: self.w.store.append_message(
                self.sid, "assistant", text, closes_turn=reply_closes_turn))
        if isinstance(event, ErrorEvent) and event.message:
            state.last_error = event.message
        elif isinstance(event, Result) and event.subtype == "success":
            state.last_error = ""  # a turn that went well: earlier errors explain no later exit
        if isinstance(event, Result) and not event.duration_ms:
            event = replace(event, duration_ms=int((self._clock.monotonic() - state.turn_started) * 1000))
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
        self.write("the turn's usage", lambda: self.w.store.add_session_usage(
            self.sid, cost_usd=cost, turns=1, answered=closed))
        if self.w.credits is not None:
            self.w.lifeline.flush(keep_holding=True)  # the result is out before the charge
            tell(self.w.credits, ChargeTurn(self.sid, self.w.source, self._ref))

    def _turn_finished(self, state: SessionState) -> None:
        state.turns_open = max(state.turns_open - 1, 0)
        self._tally.in_turn = state.turns_open > 0
        state.turn_seq += 1
        if state.turns_open:
            # the loop starts the next queued message's turn right after TurnFinished
            state.turn_started = self._clock.monotonic()
            self._trace.start(self._tally.turns - state.turns_open + 1)
            return
        self._trace.end("finished")  # a turn that ended without a result
        if self._start_held_turn():
            return
        self._deadlines.rearm()
        self.schedule_idle(state)
        self._deadlines.note(state)

    def schedule_idle(self, state: SessionState, due: datetime | None = None) -> None:
        """Between turns: waiting ``idle_timeout_s`` for a user message ends the session.
        ``due``: the idle exit another daemon stored for this session taken over (issue 36),
        kept instead of a full ``idle_timeout_s`` from now (at once if it has passed). The
        wall-clock due time is what the cluster seat stores (``Deadlines.note``)."""
        self._passivation.schedule(state)
        if self.w.idle_timeout_s is None:
            return
        now = self._clock.now()
        delay_s = self.w.idle_timeout_s if due is None else max((due - now).total_seconds(), 0.0)
        state.idle_armed = True
        state.idle_due = now + timedelta(seconds=delay_s)
        tell(self.w.timers, ScheduleTimer((self.sid, "idle", self.gen), delay_s,
                                          self._ref, IdleDue(self.gen, state.turn_seq)))

    def cancel_idle(self, state: SessionState) -> None:
        """A turn starts (or the incarnation ends): the idle exit and passivation timers go."""
        self._passivation.cancel(state)
        state.idle_due = None
        if state.idle_armed:
            state.idle_armed = False
            tell(self.w.timers, CancelTimer((self.sid, "idle", self.gen)))

    def end(self, state: SessionState, code: int) -> None:
        """The incarnation exits with ``code``: everything released, the supervisor told."""
        self.w.lifeline.refuse_input()
        self._trace.end("exited")
        self.release_everything(state)
        state.ended = True
        tell(self.w.supervisor, SessionEnded(self.sid, self.gen, code, state.last_error if code else ""))

    def abort(self, state: SessionState) -> None:
        """``Abort``: the loop's clean-up performed, everything released, the actor stopped."""
        self.w.lifeline.refuse_input()
        self._trace.end("aborted")
        if not state.ended and self._loop is not None:  # no loop yet while it builds
            self._clean_up(state, self._loop.abort())
        self.release_everything(state)
        state.ended = True
        self._ref.stop(block=False)

    def _clean_up(self, state: SessionState, effects: list[fx.Effect]) -> None:
        """Apply the clean-up effects ``Loop.abort()`` returned (its contract, see
        ``corvid_actors.loop.effects.Loop.abort``): the lifeline may be closed already,
        so only what publishes and starts nothing is performed — ``ReleaseSlot`` and
        ``PersistMessage``; anything else is dropped (and logged: a loop bug)."""
        for effect in effects:
            match effect:
                case fx.ReleaseSlot():
                    self.give_back_slot(state)
                case fx.PersistMessage(role, content) if role not in ("assistant", SNAPSHOT_ROLE):
                    self.write(f"a {role} message",
                               lambda role=role, content=content: self.w.store.append_message(
                                   self.sid, role, content))
                case _:
                    logger.bind(session_id=self.sid).warning("effect after abort dropped: {}", effect)

    def release_everything(self, state: SessionState) -> None:
        """Cancel the work in flight, give back the slot, drop the timers and the pending
        approvals, hand the writes not yet stored to the supervisor."""
        if state.worker_cancel is not None:
            state.worker_cancel.cancel()
            state.worker_cancel = None
        if state.slot_state != "none":
            self.give_back_slot(state)
        self.cancel_idle(state)
        self._deadlines.cancel()
        if self.w.approvals is not None and state.awaiting_approval:
            # its own pending requests only; the supervisor's cleanup drops the grants (a
            # passivated session keeps them: it has none pending, issue 37)
            tell(self.w.approvals, CancelSession(self.sid, "Session stopped"))
        pending = self._writes.take()
        if pending:
            tell(self.w.supervisor, WritesHandedOver(self.sid, pending))

    # --- approvals --------------------------------------------------------------------------

    def _ask_approval(self, state: SessionState, call: Any, description: str, kind: str) -> None:
        state.awaiting_approval.add(call.id)
        if self.w.approvals is None:
            self._ref.tell(ApprovalAnswer(call.id, False, "No approval broker is configured"))
            return
        state.approval_seq += 1
        approval_id = approval_id_for(self.sid, self.gen, state.approval_seq)
        # approval_request is published when the broker says a human is asked (ApprovalAsked)
        state.approval_details[call.id] = (call, description, kind)
        self._trace.asked(call.id, call.name)
        self._tally.asked_slots_or_approvals = True
        tell(self.w.approvals, RequestApproval(
            approval_id=approval_id, session_id=self.sid, call_id=call.id, tool_name=call.name,
            description=description, kind=kind, timeout_s=self.w.approval_timeout_s,
            reply_to=self._ref, tool_input=dict(call.arguments),
        ))

    def _withdraw_approval(self, state: SessionState) -> None:
        """``WithdrawApproval`` (double texting ``interrupt``): the broker denies the request
        the loop waits for (the latest asked: one at a time); its ``ApprovalAnswer`` goes to
        the loop as ever. An answer already on its way wins (then nothing matches here)."""
        if self.w.approvals is not None and state.awaiting_approval:
            tell(self.w.approvals, Resolve(approval_id_for(self.sid, self.gen, state.approval_seq), "deny",
                                           APPROVAL_WITHDRAWN))

    # --- slots ------------------------------------------------------------------------------

    def _acquire_slot(self, state: SessionState, model: str) -> None:
        state.slot_request += 1
        state.slot_queued = False
        if self.w.slot_pool is None:
            state.slot_state = "held"
            self.perform(state, self._loop.handle(fx.SlotGranted()))
            return
        state.slot_state = "waiting"
        self._tally.asked_slots_or_approvals = True
        tell(self.w.slot_pool, AcquireSlot(self.sid, state.slot_request, model, self.w.slot_weight,
                                           self._ref))

    def give_back_slot(self, state: SessionState) -> None:
        """Give the slot held (or requested) back to the SlotPool."""
        held, state.slot_state = state.slot_state, "none"
        if self.w.slot_pool is None:
            return
        # Nothing held or requested: nothing to give back — unless this incarnation has
        # ended, when a grant may be racing the abort (ReleaseSlot is idempotent).
        if held == "none" and not state.ended:
            return
        tell(self.w.slot_pool, ReleaseSlot(self.sid))
