"""The direct (Ollama) agent loop as a pure state machine.

Behaviour of the direct-process seed, without I/O (the contract with the session actor
is :mod:`corvid_actors.loop.effects`; the rules live in pure modules beside this one):

- a turn acquires an inference slot first and holds it for all its iterations; every
  way out of a granted turn (end, fatal error, outage) releases it; a slot that was
  never granted is never released.
- each iteration trims the context (:mod:`.trimming`), reports ``context_usage`` and
  calls the model; at most ``max_tool_iterations`` model calls per turn (the model's
  tier may lower it, :mod:`.tiers`).
- tool calls run one at a time: unknown tool, bad arguments and denials become text
  results and the loop goes on; results are capped (:mod:`.tool_results`).
- a stall (same call 3×, same tool 5×, A-B-A-B ping-pong, :mod:`.repeats`) or the
  iteration cap ends the turn with a summary epilogue: one more call, tools disabled,
  its reply emitted as ``assistant``. A summary call that fails (after the usual retries)
  ends the turn normally with what was already produced, as the original does.
- text-only replies of a ``task`` agent may be nudged (:mod:`.nudges`); a ``chat`` agent
  converses, so its replies are never nudged to act (a question back, a short or a long
  answer are all legitimate in a conversation); made-up tool output after tools
  were called is not kept while mid-chain nudges are left (before any tool call the
  markers are an ordinary reply); once they are spent the reply ends the turn as a
  normal ``assistant`` text, as in the original.
- council roles (member, discusser, reviewer) get no tools and a reasoning-only prompt.
- provider errors: context overflow → summary + last 4 messages, retried once; tools
  unsupported → tools off for the session, retried; retryable → backoff through
  ``Schedule``, and at ``api_failure_threshold`` consecutive failures (kept across
  turns until a success) ``ReportOutage``; anything else → ``error`` + ``Exit(1)``.
- ``InterruptTurn`` (double texting ``interrupt``) with a message waiting ends the turn at
  its next safe point: a turn's stream at once (``StopModelCall``), a retry wait at once,
  otherwise after the running tool, the slot or the approval (the calls left are answered
  "not run"); a summary call is let finish. ``result`` subtype ``"interrupted"``, the
  partial reply kept with ``turn.INTERRUPTED_MARKER``.
- the OpenAgent rules (:mod:`.rules`, off unless ``rules`` is given): ``update_plan``,
  the history policy before trimming, the plan in the system prompt, the payload-growth
  failsafe before each call (a trip compacts to a plain-text summary, or stops),
  observation caps on tool results, and the approval policy after the permission check.

The module holds the Loop protocol and the turn structure. The loop holds two
collaborators and hands them the turn (:class:`~.direct_turn.DirectTurn`) and the history
explicitly: what a model outcome leads to is :class:`~.direct_replies.DirectReplies`, the
tool-call walk :class:`~.direct_tools.DirectToolCalls` (on the shared :mod:`.tool_walk`);
each answers with effects and a verdict (:mod:`.direct_turn`) that only the loop turns
into its next step. Context trimming and warnings are :mod:`.direct_context`; turn
accounting and the input queue :mod:`.turn`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from corvid_actors.core.vocabulary import AGENT_KINDS, TASK_AGENT, PermissionCheck, ToolSpec
from corvid_actors.events import (
    Assistant,
    ErrorEvent,
    MessageStop,
    SystemEvent,
    Thinking,
    context_compacted,
)
from corvid_actors.loop.direct_context import (
    COUNCIL_ROLES,
    SUMMARY_REQUEST,
    council_system_prompt,
    prepare_context,
)
from corvid_actors.loop.direct_replies import DirectReplies
from corvid_actors.loop.direct_tools import DirectToolCalls
from corvid_actors.loop.direct_turn import DirectTurn, Fatal, Next, Outage, Retry, Verdict
from corvid_actors.loop.effects import (
    AcquireSlot,
    ApprovalDecided,
    CallModel,
    Effect,
    Emit,
    Exit,
    InterruptTurn,
    LoopInput,
    ModelFailed,
    ModelStopped,
    ModelSucceeded,
    ReleaseSlot,
    ReportOutage,
    Schedule,
    SlotGranted,
    SlotTimedOut,
    TimerFired,
    ToolFinished,
    TurnFinished,
    TurnMetrics,
    UserMessage,
)
from corvid_actors.loop.payload_guard import GrowthCheck, compact_for_growth
from corvid_actors.loop.rules import LoopRules
from corvid_actors.loop.settings import DirectLoopSettings
from corvid_actors.loop.tiers import (
    TierCaps,
    tier_for_model,
)
from corvid_actors.loop.turn import (
    InputQueue,
    Phase,
    interrupt_effects,
    interrupt_step,
    interrupted_reply,
)
from corvid_actors.providers.base import ChatMessage, ModelRequest


class DirectLoop:
    """The direct loop of one session (see the module docstring).

    Driven by the session actor on its own thread; not thread-safe. Messages that
    arrive mid-turn are queued and start the next turn right after ``TurnFinished``.
    ``tier`` (from the model name) and ``caps`` (the iteration and nudge limits in
    force: the tier's when ``use_tier_caps``, else the settings') are read-only.
    """

    def __init__(
        self,
        *,
        model: str,
        system_prompt: str,
        tools: Sequence[ToolSpec],
        permission_check: PermissionCheck,
        context_window: int,
        settings: DirectLoopSettings = DirectLoopSettings(),  # noqa: B008 - frozen
        council_role: str | None = None,
        history: Sequence[ChatMessage] = (),
        rules: LoopRules | None = None,
        kind: str = TASK_AGENT,
    ) -> None:
        if kind not in AGENT_KINDS:
            raise ValueError(f"kind must be one of {AGENT_KINDS}, not {kind!r}")
        self._model = model
        #: ``task`` (initial nudges on) or ``chat`` (none): read-only
        self.kind = kind
        self._settings = settings
        self._rules = rules or LoopRules.off()
        self._council = council_role in COUNCIL_ROLES
        self._tools: tuple[ToolSpec, ...] = () if self._council else self._rules.offered_tools(tools)
        self._system = council_system_prompt(system_prompt) if self._council else system_prompt
        self._context_window = context_window
        self.tier = tier_for_model(model, settings.tier_rules)
        caps = settings.tier_caps.get(self.tier) if settings.use_tier_caps else None
        self.caps = caps or TierCaps(
            settings.max_tool_iterations, settings.max_nudges, settings.max_mid_chain_nudges
        )
        self._history = list(history)
        # the collaborators: each sees only what it is given here, and the turn and history
        # handed to each call
        self._replies = DirectReplies(rules=self._rules, settings=settings, caps=self.caps,
                                      kind=kind, model=model, tools=self._tools)
        self._tool_calls = DirectToolCalls(
            rules=self._rules, settings=settings, permission_check=permission_check,
            tool_names=frozenset(spec.name for spec in self._tools),
            context_window=context_window, system=self._system)
        self._warning_level = -1
        self._retry_seq = 0
        self._retry_token = ""
        self._phase = Phase.IDLE
        self._slot_held = False
        self._queue = InputQueue()
        self._turn = self._new_turn()

    # --- the Loop protocol ------------------------------------------------------------

    @property
    def history(self) -> list[ChatMessage]:
        """A copy of the conversation as the next model call would see it."""
        return list(self._history)

    @property
    def tools_disabled(self) -> bool:
        """True once the model said it does not support tools (for the rest of the session)."""
        return self._replies.tools_disabled

    def start(self, prompt: str | UserMessage) -> list[Effect]:
        """Begin the first turn with ``prompt``."""
        return self.handle(UserMessage.of(prompt))

    def abort(self) -> list[Effect]:
        """Stop: nothing more is emitted, queued messages are dropped; no clean-up effects
        (the actor releases any slot it holds)."""
        self._phase = Phase.DONE
        self._queue.clear()
        return []

    def handle(self, event: LoopInput) -> list[Effect]:
        """Advance on ``event``; inputs the loop is not waiting for are ignored."""
        phase, turn = self._phase, self._turn
        if phase is Phase.DONE:
            return []
        if isinstance(event, UserMessage):
            # first come, first served: older queued messages go before this one
            first = self._queue.offer(event, idle=phase is Phase.IDLE)
            if first is not None:
                return self._begin_turn(first)
        elif isinstance(event, SlotGranted) and phase is Phase.WAIT_SLOT:
            self._slot_held = True
            return self._next_iteration()
        elif isinstance(event, SlotTimedOut) and phase is Phase.WAIT_SLOT:
            self._phase = Phase.DONE
            message = f"Could not acquire model slot for {self._model} — timed out waiting"
            return [Emit(ErrorEvent(error_type="slot_timeout", message=message)), Exit(1)]
        elif isinstance(event, ModelSucceeded) and phase is Phase.WAIT_MODEL:
            return self._rules.on_reply(event) + self._follow(
                *self._replies.handle(turn, self._history, event.response))
        elif isinstance(event, ModelFailed) and phase is Phase.WAIT_MODEL:
            return self._follow(*self._replies.failed(turn, self._history, event.error))
        elif isinstance(event, ToolFinished) and phase is Phase.WAIT_TOOL:
            call = turn.walk.current
            if call is not None and call.id == event.call_id:
                return self._tool_calls.record(turn, self._history, call, event.result) + self._next_call()
        elif isinstance(event, ApprovalDecided) and phase is Phase.WAIT_APPROVAL:
            call = turn.walk.current
            if call is not None and call.id == event.call_id:
                return self._follow(*self._tool_calls.approved(turn, self._history, call, event))
        elif isinstance(event, TimerFired) and phase is Phase.WAIT_RETRY:
            if event.token == self._retry_token:
                return self._call_model(turn.purpose)
        elif isinstance(event, InterruptTurn):
            return self._on_interrupt()
        elif isinstance(event, ModelStopped) and phase is Phase.WAIT_MODEL:
            return self._end_interrupted(event.text)
        return []

    # --- double texting: interrupt ------------------------------------------------------

    def _on_interrupt(self) -> list[Effect]:
        turn = self._turn
        step = interrupt_step(self._phase, waiting=len(self._queue), call_purpose=turn.purpose,
                              interrupted=turn.interrupted)
        turn.interrupted = turn.interrupted or step != "ignore"
        # "later": _next_iteration (slot granted, tools done) or _next_call (tool finished) ends the turn
        return interrupt_effects(step, self._end_interrupted)

    def _end_interrupted(self, partial: str) -> list[Effect]:
        """The turn ends here: ``partial`` (what the stopped call streamed) kept, marked."""
        reply = interrupted_reply(partial)
        self._history.append(ChatMessage(role="assistant", content=reply))
        self._turn.last_text = reply
        self._turn.metrics.termination_reason = "interrupted"
        return [Emit(Assistant(content=reply, interrupted=True)), Emit(MessageStop())] + self._finish_turn(
            "interrupted")

    # --- what the collaborators' verdicts lead to -------------------------------------

    def _follow(self, effects: list[Effect], then: Verdict) -> list[Effect]:
        """``effects`` of a collaborator's step, then the step its verdict names."""
        match then:
            case Next.ITERATE:
                return effects + self._next_iteration()
            case Next.CALL_AGAIN:
                return effects + self._call_model(self._turn.purpose)
            case Next.SUMMARY:
                return effects + self._summary_epilogue()
            case Next.WALK:
                return effects + self._next_call()
            case Next.FINISH:
                return effects + self._finish_turn()
            case Next.END_INTERRUPTED:
                return effects + self._end_interrupted("")
            case Next.WAIT_APPROVAL:
                self._phase = Phase.WAIT_APPROVAL
            case Next.WAIT_TOOL:
                self._phase = Phase.WAIT_TOOL
            case Retry(delay_s=delay):
                self._retry_seq += 1
                self._retry_token = f"direct-retry-{self._retry_seq}"
                self._phase = Phase.WAIT_RETRY
                return effects + [Schedule(delay_s=delay, token=self._retry_token)]
            case Outage(message=message):
                self._phase = Phase.IDLE
                return effects + self._release() + [ReportOutage(message)]
            case Fatal(message=message):
                return effects + self._fatal(message)
        return effects

    def _next_call(self) -> list[Effect]:
        """Work through the turn's pending tool calls (:meth:`DirectToolCalls.walk`)."""
        return self._follow(*self._tool_calls.walk(self._turn, self._history))

    # --- turn structure ---------------------------------------------------------------

    def _new_turn(self) -> DirectTurn:
        extra: dict[str, Any] = {"model": self._model, "tier": self.tier.value}
        return DirectTurn(metrics=TurnMetrics(extra=extra))

    def _begin_turn(self, message: UserMessage) -> list[Effect]:
        self._turn = self._new_turn()
        self._history.append(ChatMessage(role="user", content=message.text, blocks=message.blocks))
        self._rules.begin_turn()
        self._phase = Phase.WAIT_SLOT
        return [Emit(Thinking(thinking=True)), AcquireSlot(self._model)]

    def _next_iteration(self) -> list[Effect]:
        turn = self._turn
        if turn.interrupted:  # a safe point: the slot came, or the turn's tools are done
            return self._end_interrupted("")
        if turn.iteration >= self.caps.max_tool_iterations:
            turn.metrics.termination_reason = "max_iterations"
            return self._summary_epilogue() if turn.tools_used else self._finish_turn()
        turn.iteration += 1
        self._history = self._rules.prepare_history(self._history)
        self._history, effects, self._warning_level = prepare_context(
            self._history, self._system, self._context_window, self._settings, self._warning_level
        )
        return effects + self._call_model("turn")

    def _call_model(self, purpose: str) -> list[Effect]:
        self._turn.purpose = purpose
        offer = purpose == "turn" and not self._replies.tools_disabled
        request = ModelRequest(
            model=self._model,
            system=self._rules.system_prompt(self._system),
            messages=tuple(self._history),
            tools=self._tools if offer else (),
        )
        verdict = self._rules.check(request)
        if verdict.tripped:
            return self._on_payload_growth(request, verdict, purpose)
        self._phase = Phase.WAIT_MODEL
        return [CallModel(request, purpose=purpose)]

    def _on_payload_growth(self, request: ModelRequest, verdict: GrowthCheck, purpose: str) -> list[Effect]:
        """The failsafe tripped: the request is not sent; compact and go on, or stop."""
        effects, stop = self._rules.trip(request, verdict)
        if stop:
            self._turn.metrics.termination_reason = "payload_growth"
            self._phase = Phase.DONE
            return effects + [self._result("error")] + self._release() + [Exit(1)]
        before = len(self._history)
        self._history = compact_for_growth(self._history)
        self._rules.compacted()
        note = f"Conversation compacted: {before} messages replaced by a summary (payload growth)."
        return effects + [Emit(SystemEvent(subtype="compaction", message=note)),
                          Emit(context_compacted())] + self._call_model(purpose)

    def _summary_epilogue(self) -> list[Effect]:
        self._turn.metrics.needs_summary = True
        self._history.append(ChatMessage(role="user", content=SUMMARY_REQUEST))
        return self._call_model("summary")

    def _release(self) -> list[Effect]:
        if not self._slot_held:
            return []
        self._slot_held = False
        return [ReleaseSlot()]

    def _result(self, subtype: str) -> Emit:
        turn = self._turn
        turn.metrics.iterations = turn.iteration
        return Emit(turn.result(subtype, num_turns=turn.iteration))

    def _finish_turn(self, subtype: str = "success") -> list[Effect]:
        effects: list[Effect] = [self._result(subtype), Emit(Thinking(thinking=False))]
        effects += self._release()
        effects.append(TurnFinished())
        self._phase = Phase.IDLE
        waiting = self._queue.next()
        if waiting is not None:
            effects += self._begin_turn(waiting)
        return effects

    def _fatal(self, message: str) -> list[Effect]:
        self._turn.metrics.termination_reason = "error"
        self._phase = Phase.DONE
        effects: list[Effect] = [
            self._result("error"),
            Emit(ErrorEvent(error_type="direct_process_error", message=message)),
        ]
        return effects + self._release() + [Exit(1)]
