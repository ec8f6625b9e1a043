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
  ``abort()`` returns no effects, and nothing is emitted after it.
- the OpenAgent rules (:mod:`.rules`, off unless ``rules`` is given): ``update_plan``,
  the history policy before each call and compaction, the plan in the system prompt,
  the payload-growth failsafe (a trip compacts through the summary call, or stops),
  observation caps on tool results, and the approval policy after the permission check.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from corvid_actors.events import (
    Assistant,
    ContentBlockStart,
    ContextUsage,
    ErrorEvent,
    Result,
    RetryScheduled,
    SystemEvent,
    Thinking,
    ToolStatus,
    context_compacted,
)
from corvid_actors.loop.doom import is_doom_loop
from corvid_actors.loop.effects import (
    ApprovalDecided,
    AskApproval,
    CallModel,
    Effect,
    Emit,
    Exit,
    LoopInput,
    ModelFailed,
    ModelSucceeded,
    PersistMessage,
    ReportOutage,
    RunTool,
    Schedule,
    TimerFired,
    ToolFinished,
    TurnFinished,
    TurnMetrics,
    UserMessage,
)
from corvid_actors.loop.payload_guard import GrowthCheck
from corvid_actors.loop.prompts import (
    COMPACTION_SYSTEM_PROMPT,
    compacted_user_message,
    compaction_request_text,
)
from corvid_actors.loop.retry import retry_delay, should_retry
from corvid_actors.loop.rules import LoopRules
from corvid_actors.loop.settings import SdkLoopSettings
from corvid_actors.providers.base import (
    ChatMessage,
    ErrorKind,
    ModelRequest,
    ModelResponse,
    ProviderError,
    ToolCall,
    ToolSpec,
    Usage,
)
from corvid_actors.tools.base import Permission, PermissionCheck, ToolResult

#: what the loop does after a model response and its tool calls (the processor's signal,
#: plus "finish" for a turn that has nothing left to do)
LoopSignal = Literal["continue", "stop", "compact", "finish"]

DEFAULT_DENIAL_MESSAGE = "Permission denied by user"
DOOM_DENIAL_MESSAGE = "Repeated call denied by user (doom-loop guard)"
SKIPPED_MESSAGE = "Not run: the turn was stopped before this call."
PERCENT = 100.0


# --- pure rules ---------------------------------------------------------------------


def context_tokens(usage: Usage) -> int:
    """Tokens of context a call used. Anthropic reports cached prompt tokens apart from
    ``input_tokens``, so all three count toward the window."""
    return usage.input_tokens + usage.cache_read_tokens + usage.cache_creation_tokens


def needs_compaction(tokens: int, context_window: int, threshold: float) -> bool:
    """True when ``tokens`` exceed ``threshold`` × ``context_window`` (a window of 0
    means unknown: never compact)."""
    return context_window > 0 and tokens > threshold * context_window


def next_signal(*, blocked: bool, compaction_due: bool, calls_made: bool) -> LoopSignal:
    """What follows a processed response: ``stop`` (a denial blocked the turn), else
    ``finish`` (no tool was called: the turn is over), else ``compact`` (the context is
    over the threshold), else ``continue`` (call the model with the tool results).

    Unlike the processor seed, stop wins over compact (a human who denied a call gets no
    further model call) and a turn that is over does not compact; in both cases the due
    compaction runs before the next turn's first model call instead.
    """
    if blocked:
        return "stop"
    if not calls_made:
        return "finish"
    return "compact" if compaction_due else "continue"


# --- the state machine --------------------------------------------------------------


class _Phase(enum.Enum):
    IDLE = "idle"  # between turns
    MODEL = "model"  # a CallModel is outstanding
    RETRY_WAIT = "retry_wait"  # a retry timer is outstanding
    TOOLS = "tools"  # walking the response's tool calls (transient)
    APPROVAL = "approval"  # an AskApproval is outstanding
    TOOL_RUN = "tool_run"  # a RunTool is outstanding
    EXITED = "exited"  # Exit was returned
    ABORTED = "aborted"  # abort() was called


@dataclass
class _Turn:
    """Per-turn accounting and compaction bookkeeping."""

    #: the user message that started the turn (kept verbatim through compaction)
    prompt: str = ""
    cost_usd: float = 0.0
    usage: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens"), 0
        )
    )
    metrics: TurnMetrics = field(
        default_factory=lambda: TurnMetrics(extra={"compactions": 0, "retries": 0})
    )
    last_text: str = ""
    last_context_tokens: int = 0
    #: a compaction ran; the next response tells whether it shrank the context
    awaiting_shrink_check: bool = False
    #: a compaction did not shrink the context: no more compaction in this turn
    compaction_blocked: bool = False
    #: the one compaction-and-retry for a context overflow is used
    overflow_retry_used: bool = False

    def account(self, response: ModelResponse) -> None:
        self.cost_usd += response.cost_usd
        u = response.usage
        self.usage["input_tokens"] += u.input_tokens
        self.usage["output_tokens"] += u.output_tokens
        self.usage["cache_read_tokens"] += u.cache_read_tokens
        self.usage["cache_creation_tokens"] += u.cache_creation_tokens


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
        # a compaction started by the payload-growth failsafe is outstanding
        self._growth_compaction = False
        self._check = permission_check
        self._window = context_window
        self._s = settings or SdkLoopSettings()
        self._messages: list[ChatMessage] = list(history)
        self._phase = _Phase.IDLE
        self._turn = _Turn()
        self._queued: deque[UserMessage] = deque()
        # the outstanding (or to-be-retried) model call and its failed attempts
        self._pending: CallModel | None = None
        self._attempt = 0
        self._retry_token: str | None = None
        self._timer_seq = 0
        self._api_errors = 0
        # a response reported a context over the threshold: compact before the next call
        self._compact_due = False
        # the tool calls of the current response and where we are in them
        self._calls: tuple[ToolCall, ...] = ()
        self._index = 0
        self._approval_kind = ""
        self._recent: deque[tuple[str, dict[str, object]]] = deque(
            maxlen=max(self._s.doom_loop_threshold, 1)
        )
        self._doom_whitelist: set[str] = set()

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
        self._phase = _Phase.ABORTED
        self._pending = None
        self._retry_token = None
        return []

    def handle(self, event: LoopInput) -> list[Effect]:
        """Advance on ``event``; inputs that do not answer the outstanding effect (late
        timers, stale results) are ignored."""
        if self._phase in (_Phase.ABORTED, _Phase.EXITED):
            return []
        match event:
            case UserMessage():
                if self._phase is _Phase.IDLE:
                    return self._begin_turn(event)
                self._queued.append(event)
                return []
            case ModelSucceeded(response=response) if self._phase is _Phase.MODEL:
                return self._on_model_success(response, event)
            case ModelFailed(error=error) if self._phase is _Phase.MODEL:
                return self._on_model_failure(error)
            case TimerFired(token=token) if (
                self._phase is _Phase.RETRY_WAIT and token == self._retry_token
            ):
                return self._resend()
            case ApprovalDecided() if (
                self._phase is _Phase.APPROVAL and event.call_id == self._current.id
            ):
                return self._on_approval(event)
            case ToolFinished(call_id=call_id, result=result) if (
                self._phase is _Phase.TOOL_RUN and call_id == self._current.id
            ):
                self._phase = _Phase.TOOLS
                return self._finish_call(self._current, result) + self._advance_tools()
        return []

    # --- turns ---------------------------------------------------------------------

    def _begin_turn(self, message: UserMessage) -> list[Effect]:
        text = message.text
        self._turn = _Turn(prompt=text)
        self._rules.begin_turn()
        # the doom-loop guard is about the model repeating itself without human input
        self._recent.clear()
        self._messages.append(ChatMessage(role="user", content=text, blocks=message.blocks))
        # a compaction left due by the previous turn runs before this turn's first call
        first = self._start_compaction() if self._compact_due else self._call_model()
        return [Emit(Thinking(thinking=True)), *first]

    def _proceed(self, *, blocked: bool = False, reason: str = "normal") -> list[Effect]:
        """After a response and its tool calls: stop, finish, compact or call again."""
        due = self._compact_due and not self._turn.compaction_blocked
        signal = next_signal(blocked=blocked, compaction_due=due, calls_made=bool(self._calls))
        if signal == "stop":
            return self._end_turn("stopped", reason)
        if signal == "finish":
            return self._end_turn("success", reason)
        if signal == "compact":
            return self._start_compaction()
        return self._call_model()

    def _call_model(self) -> list[Effect]:
        self._messages = self._rules.prepare_history(self._messages)
        request = ModelRequest(
            model=self._model,
            system=self._rules.system_prompt(self._system),
            messages=tuple(self._messages),
            tools=self._tools,
        )
        verdict = self._rules.check(request)
        if verdict.tripped:
            return self._on_payload_growth(request, verdict)
        return self._send(CallModel(request=request, purpose="turn"))

    def _on_payload_growth(self, request: ModelRequest, verdict: GrowthCheck) -> list[Effect]:
        """The failsafe tripped: the request is not sent; compact, or stop the session."""
        effects, stop = self._rules.trip(request, verdict)
        if stop:
            return effects + self._stop_for_growth("the request payload ballooned")
        self._rules.compacted()
        self._growth_compaction = True
        return effects + self._start_compaction()

    def _stop_for_growth(self, why: str) -> list[Effect]:
        self._turn.metrics.termination_reason = "payload_growth"
        self._phase = _Phase.EXITED
        self._pending = None
        return [Emit(self._result("error", f"Session stopped: {why}")), Exit(1)]

    def _send(self, call: CallModel) -> list[Effect]:
        self._pending = call
        self._attempt = 0
        self._phase = _Phase.MODEL
        return [call]

    def _end_turn(self, subtype: str, reason: str) -> list[Effect]:
        turn = self._turn
        turn.metrics.termination_reason = reason
        effects: list[Effect] = []
        if turn.last_context_tokens:
            effects.append(Emit(self._context_usage(turn.last_context_tokens)))
        effects += [
            Emit(self._result(subtype, turn.last_text)),
            Emit(Thinking(thinking=False)),
            TurnFinished(),
        ]
        self._phase = _Phase.IDLE
        self._calls = ()
        if self._queued:
            effects += self._begin_turn(self._queued.popleft())
        return effects

    def _result(self, subtype: str, text: str) -> Result:
        turn = self._turn
        return Result(
            subtype=subtype,
            total_cost_usd=turn.cost_usd,
            num_turns=turn.metrics.iterations,
            result=text,
            usage=dict(turn.usage),
            metrics=turn.metrics.as_dict(),
        )

    def _context_usage(self, tokens: int) -> ContextUsage:
        percent = round(PERCENT * tokens / self._window, 1) if self._window > 0 else 0.0
        return ContextUsage(
            estimated_tokens=tokens,
            context_window=self._window,
            usage_percent=percent,
            messages_count=len(self._messages),
        )

    # --- model results -------------------------------------------------------------

    def _on_model_success(self, response: ModelResponse, event: ModelSucceeded) -> list[Effect]:
        purpose = self._pending.purpose if self._pending else "turn"
        self._pending = None
        self._api_errors = 0
        self._turn.account(response)
        if purpose == "compaction":
            return self._on_compacted(response)
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
        effects += self._note_context(context_tokens(response.usage))
        self._calls = response.tool_calls
        self._index = 0
        if not self._calls:
            return effects + self._proceed()
        effects += [
            Emit(ToolStatus(status_message=f"Waiting to run {c.name}", tool_name=c.name,
                            call_id=c.id, state="pending"))
            for c in self._calls
        ]
        if turn.metrics.iterations >= self._s.max_iterations:
            limit = self._s.max_iterations
            effects += self._skip_remaining(
                f"Not run: the turn reached its limit of {limit} model calls."
            )
            # the SDK's own subtype for a turn cut off by its turn limit
            return effects + self._end_turn("error_max_turns", "max_iterations")
        self._phase = _Phase.TOOLS
        return effects + self._advance_tools()

    def _note_context(self, tokens: int) -> list[Effect]:
        """Record the context size and decide whether a compaction is due."""
        turn = self._turn
        turn.last_context_tokens = tokens
        over = needs_compaction(tokens, self._window, self._s.compaction_threshold)
        effects: list[Effect] = []
        if turn.awaiting_shrink_check:
            turn.awaiting_shrink_check = False
            if over:
                # compacting again would summarise a summary for nothing: stop here
                turn.compaction_blocked = True
                effects.append(
                    Emit(
                        SystemEvent(
                            subtype="compaction_ineffective",
                            message=(
                                f"Context still at {tokens} tokens after compaction; "
                                "not compacting again this turn."
                            ),
                        )
                    )
                )
        self._compact_due = over and not turn.compaction_blocked
        return effects

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
        self._phase = _Phase.RETRY_WAIT
        self._turn.metrics.extra["retries"] += 1
        return [
            Emit(RetryScheduled(attempt=self._attempt, delay_s=delay, message=error.message)),
            Schedule(delay_s=delay, token=self._retry_token),
        ]

    def _resend(self) -> list[Effect]:
        self._retry_token = None
        if self._pending is None:  # cannot happen: a retry always has a pending call
            return []
        self._phase = _Phase.MODEL
        return [self._pending]

    def _report_outage(self, error: ProviderError) -> list[Effect]:
        count = self._api_errors
        # the supervisor pauses us; after a resume the count starts afresh
        self._api_errors = 0
        self._pending = None
        self._phase = _Phase.IDLE
        self._calls = ()
        return [ReportOutage(f"{count} consecutive API errors; last: {error.message}")]

    def _fail(self, message: str) -> list[Effect]:
        self._turn.metrics.termination_reason = "error"
        self._phase = _Phase.EXITED
        self._pending = None
        return [
            Emit(self._result("error", message)),
            Emit(ErrorEvent(error_type="sdk_error", message=message)),
            Exit(1),
        ]

    # --- compaction ----------------------------------------------------------------

    def _start_compaction(self) -> list[Effect]:
        self._messages = self._rules.prepare_history(self._messages)
        text = compaction_request_text(self._messages, self._s.compaction_entry_max_chars)
        request = ModelRequest(
            model=self._model,
            system=COMPACTION_SYSTEM_PROMPT,
            messages=(ChatMessage(role="user", content=text),),
            tools=(),
        )
        return self._send(CallModel(request=request, purpose="compaction"))

    def _on_compacted(self, response: ModelResponse) -> list[Effect]:
        turn = self._turn
        summary = response.text.strip()
        self._compact_due = False
        for_growth, self._growth_compaction = self._growth_compaction, False
        if not summary and for_growth:
            # going on with the full conversation would send the runaway request
            return self._stop_for_growth("compaction after payload growth returned no summary")
        if not summary:
            # nothing to continue from: keep the conversation, do not try again this turn
            turn.compaction_blocked = True
            note = "Compaction returned no summary; continuing with the full conversation."
            return [Emit(SystemEvent(subtype="compaction", message=note)), *self._call_model()]
        before = len(self._messages)
        # the turn's own prompt, not "the last user message": after an earlier compaction
        # that would be the previous summary, and summaries would nest
        self._messages = [
            ChatMessage(role="user", content=compacted_user_message(summary, turn.prompt))
        ]
        turn.awaiting_shrink_check = True
        turn.metrics.extra["compactions"] += 1
        note = f"Conversation compacted: {before} messages replaced by a summary."
        return [
            Emit(SystemEvent(subtype="compaction", message=note)),
            Emit(context_compacted()),
            PersistMessage(role="system", content=summary),
            *self._call_model(),
        ]

    # --- tool calls ----------------------------------------------------------------

    @property
    def _current(self) -> ToolCall:
        return self._calls[self._index]

    def _advance_tools(self) -> list[Effect]:
        """Walk the remaining calls until one waits (approval or run) or all are done."""
        effects: list[Effect] = []
        while self._phase is _Phase.TOOLS and self._index < len(self._calls):
            effects += self._open_call(self._current)
        if self._phase is not _Phase.TOOLS:
            return effects
        return effects + self._proceed()

    def _open_call(self, call: ToolCall) -> list[Effect]:
        effects: list[Effect] = [
            Emit(ContentBlockStart(block_type="tool_use", name=call.name, call_id=call.id,
                                   input=dict(call.arguments)))
        ]
        if call.arguments_error is not None:
            result = ToolResult(f"Invalid arguments for {call.name}: {call.arguments_error}", True)
            return effects + self._finish_call(call, result)
        if self._rules.is_plan_call(call):
            # the plan is this loop's own state: no doom-loop guard, no approval, no worker
            result, plan_effects = self._rules.plan_call(call)
            return effects + plan_effects + self._finish_call(call, result)
        self._recent.append((call.name, dict(call.arguments)))
        threshold = self._s.doom_loop_threshold
        if call.name not in self._doom_whitelist and is_doom_loop(list(self._recent), threshold):
            self._approval_kind = "doom_loop"
            self._phase = _Phase.APPROVAL
            description = (
                f"{call.name} was called {threshold}× in a row with identical input "
                "(possible doom loop). Allow it to continue?"
            )
            return effects + [AskApproval(call=call, description=description, kind="doom_loop")]
        return effects + self._authorize(call)

    def _authorize(self, call: ToolCall) -> list[Effect]:
        review = self._rules.review(call, self._check(call.name, dict(call.arguments)))
        decision = review.decision
        if decision.permission is Permission.DENY:
            message = decision.message or f"Permission denied for {call.name}"
            return self._finish_call(call, ToolResult(message, is_error=True))
        if decision.permission is Permission.ASK:
            self._approval_kind = review.kind
            self._phase = _Phase.APPROVAL
            description = decision.description or f"Use tool: {call.name}"
            return [AskApproval(call=call, description=description, kind=review.kind)]
        return self._run(call)

    def _run(self, call: ToolCall) -> list[Effect]:
        self._phase = _Phase.TOOL_RUN
        return [
            Emit(ToolStatus(status_message=f"Running {call.name}", tool_name=call.name,
                            call_id=call.id, state="running")),
            RunTool(call=call),
        ]

    def _on_approval(self, decision: ApprovalDecided) -> list[Effect]:
        call = self._current
        self._phase = _Phase.TOOLS
        if self._approval_kind == "doom_loop":
            if not decision.allowed:
                return self._stop_turn(call, decision.message or DOOM_DENIAL_MESSAGE, "doom_loop")
            if decision.scope == "session":
                self._doom_whitelist.add(call.name)
            # the repetition is allowed; the call still needs its ordinary permission
            effects = self._authorize(call)
        elif decision.allowed:
            self._rules.approved(call, decision)
            if decision.updated_input is not None:
                call = ToolCall(id=call.id, name=call.name, arguments=dict(decision.updated_input))
            effects = self._run(call)
        else:
            message = decision.message or DEFAULT_DENIAL_MESSAGE
            if self._s.stop_on_denial:
                return self._stop_turn(call, message, "permission_denied")
            effects = self._finish_call(call, ToolResult(message, is_error=True))
        return effects + (self._advance_tools() if self._phase is _Phase.TOOLS else [])

    def _finish_call(self, call: ToolCall, result: ToolResult) -> list[Effect]:
        """Record ``result`` for the current call and move to the next one."""
        result, kept = self._rules.observe(call, result)
        self._messages.append(
            ChatMessage(
                role="tool",
                content=result.output,
                tool_call_id=call.id,
                tool_name=call.name,
                is_error=result.is_error,
            )
        )
        self._turn.metrics.tool_calls += 1
        self._index += 1
        state = "error" if result.is_error else "completed"
        verb = "Failed" if result.is_error else "Completed"
        preview = result.output[: self._s.tool_preview_chars]
        status = ToolStatus(status_message=f"{verb} {call.name}", tool_name=call.name,
                            call_id=call.id, state=state, output=preview)
        return [*kept, Emit(status)]

    def _skip_remaining(self, message: str) -> list[Effect]:
        """Answer every call not yet run with ``message`` (the API needs a result for each
        tool_use) and mark it failed."""
        effects: list[Effect] = []
        while self._index < len(self._calls):
            effects += self._finish_call(self._current, ToolResult(message, is_error=True))
        return effects

    def _stop_turn(self, call: ToolCall, message: str, reason: str) -> list[Effect]:
        """A denial blocks the turn: answer this call and the rest, then stop."""
        effects = self._finish_call(call, ToolResult(message, is_error=True))
        effects += self._skip_remaining(SKIPPED_MESSAGE)
        return effects + self._proceed(blocked=True, reason=reason)
