"""The Anthropic ("SDK-process") agent loop as a pure state machine.

Behaviour of the SDK-process and stream-processor seeds, without I/O (see
:mod:`corvid_actors.loop.effects` for the contract with the session actor):

- every tool call passes, one at a time, through: argument check → doom-loop guard →
  the injected :data:`PermissionCheck` (protected paths first, then the permission mode)
  → approval (``AskApproval``) when the check says ASK → ``RunTool``. Each call's state
  is published as ``tool_status``: pending → running → completed | error.
- a human's denial (and a denied doom-loop ask) stops the turn: ``result`` subtype
  ``"stopped"``; a policy denial (DENY) is told to the model and the turn goes on.
- retryable provider errors are retried with exponential backoff through ``Schedule`` /
  ``TimerFired``; the consecutive API-error count survives retries and turns until a
  success, so the outage threshold (3) is reachable: the loop then reports the outage
  (``ReportOutage``) and emits nothing else — the supervisor pauses the session.
- a response whose context exceeds 90 % of the window triggers compaction (one summary
  call); a compaction that did not bring the context under the threshold is not repeated
  in the same turn.
- fatal errors: ``result`` subtype ``"error"``, ``error`` (``sdk_error``), ``Exit(1)``.
- ``InterruptTurn`` (double texting) ends the turn at its next safe point
  (``turn.interrupt_step``): ``result`` subtype ``"interrupted"``, the partial reply kept.
  ``abort()`` returns no effects, and nothing is emitted after it.
- the OpenAgent rules (:mod:`.rules`, off unless ``rules`` is given): ``update_plan``,
  the history policy before each call and compaction, the plan in the system prompt,
  the payload-growth failsafe (a trip compacts through the summary call, or stops),
  observation caps on tool results, and the approval policy after the permission check.

The loop hands the turn (:mod:`.sdk_turn`) and the conversation to its collaborators, the
tool-call walk (:mod:`.sdk_tools`, on the shared :mod:`.tool_walk`) and compaction
(:mod:`.sdk_compaction`); their verdicts only the loop turns into its next step.
"""

from __future__ import annotations

from collections.abc import Sequence

from corvid_actors.core.vocabulary import PermissionCheck, ToolSpec
from corvid_actors.events import Assistant, ErrorEvent, Result, RetryScheduled, Thinking
from corvid_actors.loop.effects import (
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
    PersistMessage,
    ReportOutage,
    Schedule,
    TimerFired,
    ToolFinished,
    TurnFinished,
    UserMessage,
)
from corvid_actors.loop.retry import retry_delay, should_retry
from corvid_actors.loop.rules import LoopRules
from corvid_actors.loop.sdk_compaction import SdkCompaction, context_tokens, next_signal
from corvid_actors.loop.sdk_tools import SdkToolCalls
from corvid_actors.loop.sdk_turn import Next, Proceed, SdkTurn, StopSession, Verdict
from corvid_actors.loop.settings import SdkLoopSettings
from corvid_actors.loop.tool_walk import ToolWalk
from corvid_actors.loop.turn import (
    InputQueue,
    Phase,
    interrupt_effects,
    interrupt_step,
    interrupted_reply,
)
from corvid_actors.providers.base import (
    ChatMessage,
    ErrorKind,
    ModelRequest,
    ModelResponse,
    ProviderError,
    ToolCall,
)


class SdkLoop:
    """The SDK-process loop (implements :class:`corvid_actors.loop.effects.Loop`).

    Called from the session actor's thread only; holds the conversation. ``history``
    seeds the conversation (e.g. a restored session). A user message that arrives while a
    turn runs is queued and starts the next turn right after ``TurnFinished``.
    """

    def __init__(
        self,
        *,
        model: str,
        system_prompt: str,
        tools: Sequence[ToolSpec],
        permission_check: PermissionCheck,
        context_window: int,
        settings: SdkLoopSettings | None = None,
        history: Sequence[ChatMessage] = (),
        rules: LoopRules | None = None,
    ) -> None:
        self._model = model
        self._system = system_prompt
        self._rules = rules or LoopRules.off()
        self._tools = self._rules.offered_tools(tools)
        self._s = settings or SdkLoopSettings()
        self._messages: list[ChatMessage] = list(history)
        self._phase = Phase.IDLE
        self._turn = SdkTurn()
        self._queue = InputQueue()
        # the outstanding (or to-be-retried) model call and its failed attempts
        self._pending: CallModel | None = None
        self._attempt = 0
        self._retry_token: str | None = None
        self._timer_seq = 0
        self._api_errors = 0
        # the collaborators: each sees only what it is given here, and the turn and
        # conversation handed to each call
        self._compaction = SdkCompaction(rules=self._rules, settings=self._s, model=model,
                                         window=context_window)
        self._tool_calls = SdkToolCalls(rules=self._rules, settings=self._s, check=permission_check,
                                        tool_names=frozenset(spec.name for spec in self._tools))

    # --- Loop protocol -------------------------------------------------------------

    @property
    def history(self) -> list[ChatMessage]:
        """A copy of the conversation as the loop holds it."""
        return list(self._messages)

    @property
    def consecutive_api_errors(self) -> int:
        """Retryable API errors since the last success (for diagnostics)."""
        return self._api_errors

    def start(self, prompt: str | UserMessage) -> list[Effect]:
        """Begin the first turn with ``prompt``."""
        return self.handle(UserMessage.of(prompt))

    def abort(self) -> list[Effect]:
        """The session is being stopped: no clean-up effects, and silence from now on."""
        self._phase = Phase.DONE
        self._queue.clear()
        self._pending = None
        self._retry_token = None
        return []

    def handle(self, event: LoopInput) -> list[Effect]:
        """Advance on ``event``; inputs that do not answer the outstanding effect (late
        timers, stale results) are ignored."""
        if self._phase is Phase.DONE:
            return []
        match event:
            case UserMessage():
                first = self._queue.offer(event, idle=self._phase is Phase.IDLE)
                return [] if first is None else self._begin_turn(first)
            case ModelSucceeded(response=response) if self._phase is Phase.WAIT_MODEL:
                return self._on_model_success(response, event)
            case ModelFailed(error=error) if self._phase is Phase.WAIT_MODEL:
                return self._on_model_failure(error)
            case TimerFired(token=token) if (
                self._phase is Phase.WAIT_RETRY and token == self._retry_token
            ):
                return self._resend()
            case ApprovalDecided() if (
                self._phase is Phase.WAIT_APPROVAL and self._turn.walk.is_current(event.call_id)
            ):
                self._phase = Phase.TOOLS
                return self._follow(*self._tool_calls.approved(
                    self._turn, self._messages, self._current_call(), event))
            case ToolFinished(call_id=call_id, result=result) if (
                self._phase is Phase.WAIT_TOOL and self._turn.walk.is_current(call_id)
            ):
                self._phase = Phase.TOOLS
                finished = self._tool_calls.finish_call(self._turn, self._messages, self._current_call(), result)
                return finished + self._advance_tools()
            case InterruptTurn():
                return self._on_interrupt()
            case ModelStopped(text=text) if self._phase is Phase.WAIT_MODEL:
                return self._end_interrupted(text)
        return []

    # --- what the collaborators' verdicts lead to -----------------------------------

    def _follow(self, effects: list[Effect], then: Verdict) -> list[Effect]:
        """``effects`` of a collaborator's step, then the step its verdict names."""
        match then:
            case Next.CALL_MODEL:
                return effects + self._call_model()
            case Next.COMPACT:
                return effects + self._start_compaction()
            case Next.WAIT_APPROVAL:
                self._phase = Phase.WAIT_APPROVAL
            case Next.WAIT_TOOL:
                self._phase = Phase.WAIT_TOOL
            case Next.END_INTERRUPTED:
                return effects + self._end_interrupted("")
            case Next.TURN_LIMIT:  # the SDK's own subtype for a turn cut off by its limit
                return effects + self._end_turn("error_max_turns", "max_iterations")
            case Proceed(blocked=blocked, reason=reason):
                return effects + self._proceed(blocked=blocked, reason=reason)
            case StopSession(why=why):
                return effects + self._stop_for_growth(why)
        return effects

    def _advance_tools(self) -> list[Effect]:
        """Walk the response's remaining calls (:meth:`SdkToolCalls.advance`)."""
        return self._follow(*self._tool_calls.advance(self._turn, self._messages))

    def _start_compaction(self) -> list[Effect]:
        self._messages = self._rules.prepare_history(self._messages)
        return self._send(self._compaction.request(self._messages))

    # --- double texting: interrupt -------------------------------------------------

    def _on_interrupt(self) -> list[Effect]:
        turn, purpose = self._turn, self._pending.purpose if self._pending is not None else ""
        step = interrupt_step(self._phase, waiting=len(self._queue), call_purpose=purpose,
                              interrupted=turn.interrupted)
        turn.interrupted = turn.interrupted or step != "ignore"
        # "later": _advance_tools (tool finished) or _call_model ends the turn
        return interrupt_effects(step, self._end_interrupted)

    def _end_interrupted(self, partial: str) -> list[Effect]:
        """The turn ends here: ``partial`` (what the stopped call streamed) kept, marked."""
        reply = interrupted_reply(partial)
        self._pending = None
        self._retry_token = None
        self._messages.append(ChatMessage(role="assistant", content=reply))
        self._turn.last_text = reply
        return [Emit(Assistant(content=reply, interrupted=True)), PersistMessage(role="assistant", content=reply),
                *self._end_turn("interrupted", "interrupted")]

    # --- turns ---------------------------------------------------------------------

    def _begin_turn(self, message: UserMessage) -> list[Effect]:
        text = message.text
        self._turn = SdkTurn(prompt=text)
        self._rules.begin_turn()
        self._tool_calls.begin_turn()
        self._messages.append(ChatMessage(role="user", content=text, blocks=message.blocks))
        # a compaction left due by the previous turn runs before this turn's first call
        first = self._start_compaction() if self._compaction.due else self._call_model()
        return [Emit(Thinking(thinking=True)), *first]

    def _proceed(self, *, blocked: bool = False, reason: str = "normal") -> list[Effect]:
        """After a response and its tool calls: stop, finish, compact or call again."""
        due = self._compaction.due and not self._turn.compaction_blocked
        signal = next_signal(blocked=blocked, compaction_due=due, calls_made=bool(self._turn.walk.calls))
        if signal == "stop":
            return self._end_turn("stopped", reason)
        if signal == "finish":
            return self._end_turn("success", reason)
        if signal == "compact":
            return self._start_compaction()
        return self._call_model()

    def _call_model(self) -> list[Effect]:
        if self._turn.interrupted:  # a safe point: after the tools, or a compaction
            return self._end_interrupted("")
        self._messages = self._rules.prepare_history(self._messages)
        request = ModelRequest(
            model=self._model,
            system=self._rules.system_prompt(self._system),
            messages=tuple(self._messages),
            tools=self._tools,
        )
        verdict = self._rules.check(request)
        if verdict.tripped:
            return self._follow(*self._compaction.tripped(request, verdict))
        return self._send(CallModel(request=request, purpose="turn"))

    def _stop_for_growth(self, why: str) -> list[Effect]:
        self._turn.metrics.termination_reason = "payload_growth"
        self._phase = Phase.DONE
        self._pending = None
        return [Emit(self._result("error", f"Session stopped: {why}")), Exit(1)]

    def _send(self, call: CallModel) -> list[Effect]:
        self._pending = call
        self._attempt = 0
        self._phase = Phase.WAIT_MODEL
        return [call]

    def _end_turn(self, subtype: str, reason: str) -> list[Effect]:
        turn = self._turn
        turn.metrics.termination_reason = reason
        effects: list[Effect] = []
        if turn.last_context_tokens:
            effects.append(Emit(self._compaction.usage(turn.last_context_tokens, len(self._messages))))
        effects += [
            Emit(self._result(subtype, turn.last_text)),
            Emit(Thinking(thinking=False)),
            TurnFinished(),
        ]
        self._phase = Phase.IDLE
        turn.walk = ToolWalk()
        waiting = self._queue.next()
        if waiting is not None:
            effects += self._begin_turn(waiting)
        return effects

    def _result(self, subtype: str, text: str) -> Result:
        return self._turn.result(subtype, num_turns=self._turn.metrics.iterations, text=text)

    def _current_call(self) -> ToolCall:
        call = self._turn.walk.current
        assert call is not None, "only called while a call is outstanding"
        return call

    # --- model results -------------------------------------------------------------

    def _on_model_success(self, response: ModelResponse, event: ModelSucceeded) -> list[Effect]:
        purpose = self._pending.purpose if self._pending else "turn"
        self._pending = None
        self._api_errors = 0
        self._turn.add(response)
        if purpose == "compaction":
            return self._follow(*self._compaction.compacted(self._turn, self._messages, response))
        return self._rules.on_reply(event) + self._on_turn_response(response)

    def _on_turn_response(self, response: ModelResponse) -> list[Effect]:
        turn = self._turn
        turn.metrics.iterations += 1
        turn.overflow_retry_used = False
        turn.last_text = response.text
        effects: list[Effect] = []
        self._messages.append(
            ChatMessage(role="assistant", content=response.text, tool_calls=response.tool_calls)
        )
        if response.text:
            effects += [
                Emit(Assistant(content=response.text)),
                PersistMessage(role="assistant", content=response.text),
            ]
        effects += self._compaction.note(turn, context_tokens(response.usage))
        self._phase = Phase.TOOLS
        opened, then = self._tool_calls.open(turn, self._messages, response.tool_calls)
        return self._follow(effects + opened, then)

    def _on_model_failure(self, error: ProviderError) -> list[Effect]:
        purpose = self._pending.purpose if self._pending else "turn"
        if error.kind is ErrorKind.RETRYABLE:
            self._api_errors += 1
            if self._api_errors >= self._s.api_failure_threshold:
                return self._report_outage(error)
            self._attempt += 1
            if should_retry(error, self._attempt, self._s.retry):
                return self._schedule_retry(error)
            return self._fail(f"{error.message} (gave up after {self._attempt} attempts)")
        # the seed: errors that are not API errors reset the outage count
        self._api_errors = 0
        turn = self._turn
        if (
            error.kind is ErrorKind.CONTEXT_OVERFLOW
            and purpose == "turn"
            and not turn.overflow_retry_used
        ):
            turn.overflow_retry_used = True
            return self._start_compaction()
        return self._fail(error.message)

    def _schedule_retry(self, error: ProviderError) -> list[Effect]:
        delay = retry_delay(self._attempt, error.retry_after_s, self._s.retry)
        self._timer_seq += 1
        self._retry_token = f"sdk-retry-{self._timer_seq}"
        self._phase = Phase.WAIT_RETRY
        self._turn.metrics.extra["retries"] += 1
        return [
            Emit(RetryScheduled(attempt=self._attempt, delay_s=delay, message=error.message)),
            Schedule(delay_s=delay, token=self._retry_token),
        ]

    def _resend(self) -> list[Effect]:
        self._retry_token = None
        if self._pending is None:  # cannot happen: a retry always has a pending call
            return []
        self._phase = Phase.WAIT_MODEL
        return [self._pending]

    def _report_outage(self, error: ProviderError) -> list[Effect]:
        count = self._api_errors
        # the supervisor pauses us; after a resume the count starts afresh
        self._api_errors = 0
        self._pending = None
        self._phase = Phase.IDLE
        self._turn.walk = ToolWalk()
        return [ReportOutage(f"{count} consecutive API errors; last: {error.message}")]

    def _fail(self, message: str) -> list[Effect]:
        self._turn.metrics.termination_reason = "error"
        self._phase = Phase.DONE
        self._pending = None
        return [
            Emit(self._result("error", message)),
            Emit(ErrorEvent(error_type="sdk_error", message=message)),
            Exit(1),
        ]
