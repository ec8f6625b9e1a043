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
- text-only replies may be nudged (:mod:`.nudges`); made-up tool output is not kept
  while mid-chain nudges are left; once they are spent the reply ends the turn as a
  normal ``assistant`` text, as in the original.
- council roles (member, discusser, reviewer) get no tools and a reasoning-only prompt.
- provider errors: context overflow → summary + last 4 messages, retried once; tools
  unsupported → tools off for the session, retried; retryable → backoff through
  ``Schedule``, and at ``api_failure_threshold`` consecutive failures (kept across
  turns until a success) ``ReportOutage``; anything else → ``error`` + ``Exit(1)``.
- the OpenAgent rules (:mod:`.rules`, off unless ``rules`` is given): ``update_plan``,
  the history policy before trimming, the plan in the system prompt, the payload-growth
  failsafe before each call (a trip compacts to a plain-text summary, or stops),
  observation caps on tool results, and the approval policy after the permission check.
"""

from __future__ import annotations

import dataclasses
import enum
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from corvid_actors.events import (
    Assistant,
    ContentBlockStart,
    ContextUsage,
    ContextWarning,
    ErrorEvent,
    MessageStop,
    Result,
    RetryScheduled,
    SystemEvent,
    Thinking,
    ToolStatus,
    context_compacted,
)
from corvid_actors.loop.effects import (
    AcquireSlot,
    ApprovalDecided,
    AskApproval,
    CallModel,
    Effect,
    Emit,
    Exit,
    LoopInput,
    ModelFailed,
    ModelSucceeded,
    ReleaseSlot,
    ReportOutage,
    RunTool,
    Schedule,
    SlotGranted,
    SlotTimedOut,
    TimerFired,
    ToolFinished,
    TurnFinished,
    TurnMetrics,
    UserMessage,
)
from corvid_actors.loop.nudges import (
    HALLUCINATION_NUDGE,
    detect_hallucinated_tool_output,
    detect_nudge_reason,
    nudge_message,
    strip_hallucination,
)
from corvid_actors.loop.payload_guard import GrowthCheck, compact_for_growth
from corvid_actors.loop.repeats import RepeatTracker
from corvid_actors.loop.retry import retry_delay, should_retry
from corvid_actors.loop.rules import LoopRules
from corvid_actors.loop.settings import DirectLoopSettings
from corvid_actors.loop.tiers import (
    TierCaps,
    tier_for_model,
)
from corvid_actors.loop.tokens import estimate_messages_tokens
from corvid_actors.loop.tool_results import cap_tool_result, max_tool_result_chars
from corvid_actors.loop.trimming import (
    overflow_recovery,
    trim_messages,
    truncate_old_tool_results,
)
from corvid_actors.providers.base import (
    ChatMessage,
    ErrorKind,
    ModelRequest,
    ModelResponse,
    ProviderError,
    ToolCall,
    ToolSpec,
)
from corvid_actors.tools.base import Permission, PermissionCheck, ToolResult

#: council deliberation roles that reason without tools (the seed's councilRole values)
COUNCIL_ROLES = frozenset({"member", "discusser", "reviewer"})

COUNCIL_REASONING_PROMPT = (
    "You are taking part in a council deliberation. You have no tools in this session: "
    "reason from your own knowledge and from what the discussion contains. Take a clear "
    "position, give the reasoning behind it, and say where you are uncertain. Do not claim "
    "to have read files, run commands or looked anything up."
)

#: the original's wording of the summary epilogue's request (direct-process.ts)
SUMMARY_REQUEST = (
    "Summarize what you accomplished. Be concise — state the key actions taken and their results."
)

_WARNING_TEXT = {
    "info": "Context is {pct:.0f}% full.",
    "warning": "Context is {pct:.0f}% full; older messages will be trimmed (/compact to compact now).",
    "critical": "Context is {pct:.0f}% full; the conversation will be trimmed or summarised.",
}


def council_system_prompt(role_prompt: str) -> str:
    """The reasoning-only system prompt of a council role; the agent's prompt is its role."""
    role = role_prompt.strip()
    return COUNCIL_REASONING_PROMPT + (f"\n\n## Your role\n{role}" if role else "")


class _Phase(enum.Enum):
    IDLE = "idle"
    WAIT_SLOT = "wait_slot"
    WAIT_MODEL = "wait_model"
    WAIT_TOOL = "wait_tool"
    WAIT_APPROVAL = "wait_approval"
    WAIT_RETRY = "wait_retry"
    DONE = "done"


@dataclass
class _Turn:
    """What one user turn accumulates."""

    metrics: TurnMetrics
    iteration: int = 0
    tools_used: bool = False
    purpose: str = "turn"
    overflow_retried: bool = False
    cost_usd: float = 0.0
    usage: dict[str, int] = field(default_factory=dict)
    last_text: str = ""
    pending: deque[ToolCall] = field(default_factory=deque)
    current: ToolCall | None = None


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
    ) -> None:
        self._model = model
        self._settings = settings
        self._rules = rules or LoopRules.off()
        self._council = council_role in COUNCIL_ROLES
        self._tools: tuple[ToolSpec, ...] = () if self._council else self._rules.offered_tools(tools)
        self._tool_names = frozenset(spec.name for spec in self._tools)
        self._system = council_system_prompt(system_prompt) if self._council else system_prompt
        self._permission_check = permission_check
        self._context_window = context_window
        self.tier = tier_for_model(model, settings.tier_rules)
        caps = settings.tier_caps.get(self.tier) if settings.use_tier_caps else None
        self.caps = caps or TierCaps(
            settings.max_tool_iterations, settings.max_nudges, settings.max_mid_chain_nudges
        )
        self._history = list(history)
        self._tools_disabled = False
        self._tracker = RepeatTracker()
        self._api_failures = 0
        self._warning_level = -1
        self._retry_seq = 0
        self._retry_token = ""
        self._phase = _Phase.IDLE
        self._slot_held = False
        self._queue: deque[UserMessage] = deque()
        self._turn = self._new_turn()

    # --- the Loop protocol ------------------------------------------------------------

    @property
    def history(self) -> list[ChatMessage]:
        """A copy of the conversation as the next model call would see it."""
        return list(self._history)

    @property
    def tools_disabled(self) -> bool:
        """True once the model said it does not support tools (for the rest of the session)."""
        return self._tools_disabled

    def start(self, prompt: str | UserMessage) -> list[Effect]:
        """Begin the first turn with ``prompt``."""
        return self.handle(UserMessage.of(prompt))

    def abort(self) -> list[Effect]:
        """Stop: nothing more is emitted; the actor releases any slot it holds."""
        self._phase = _Phase.DONE
        return []

    def handle(self, event: LoopInput) -> list[Effect]:
        """Advance on ``event``; inputs the loop is not waiting for are ignored."""
        phase, turn = self._phase, self._turn
        if phase is _Phase.DONE:
            return []
        if isinstance(event, UserMessage):
            self._queue.append(event)
            if phase is _Phase.IDLE:
                # first come, first served: older queued messages go before this one
                return self._begin_turn(self._queue.popleft())
        elif isinstance(event, SlotGranted) and phase is _Phase.WAIT_SLOT:
            self._slot_held = True
            return self._next_iteration()
        elif isinstance(event, SlotTimedOut) and phase is _Phase.WAIT_SLOT:
            self._phase = _Phase.DONE
            message = f"Could not acquire model slot for {self._model} — timed out waiting"
            return [Emit(ErrorEvent(error_type="slot_timeout", message=message)), Exit(1)]
        elif isinstance(event, ModelSucceeded) and phase is _Phase.WAIT_MODEL:
            return self._rules.on_reply(event) + self._on_response(event.response)
        elif isinstance(event, ModelFailed) and phase is _Phase.WAIT_MODEL:
            return self._on_failure(event.error)
        elif isinstance(event, ToolFinished) and phase is _Phase.WAIT_TOOL:
            if turn.current is not None and turn.current.id == event.call_id:
                return self._record_result(turn.current, event.result) + self._next_call()
        elif isinstance(event, ApprovalDecided) and phase is _Phase.WAIT_APPROVAL:
            if turn.current is not None and turn.current.id == event.call_id:
                return self._on_approval(turn.current, event)
        elif isinstance(event, TimerFired) and phase is _Phase.WAIT_RETRY:
            if event.token == self._retry_token:
                return self._call_model(turn.purpose)
        return []

    # --- turn structure ---------------------------------------------------------------

    def _new_turn(self) -> _Turn:
        extra: dict[str, Any] = {"model": self._model, "tier": self.tier.value}
        return _Turn(metrics=TurnMetrics(extra=extra))

    def _begin_turn(self, message: UserMessage) -> list[Effect]:
        self._turn = self._new_turn()
        self._history.append(ChatMessage(role="user", content=message.text, blocks=message.blocks))
        self._rules.begin_turn()
        self._phase = _Phase.WAIT_SLOT
        return [Emit(Thinking(thinking=True)), AcquireSlot(self._model)]

    def _next_iteration(self) -> list[Effect]:
        turn = self._turn
        if turn.iteration >= self.caps.max_tool_iterations:
            turn.metrics.termination_reason = "max_iterations"
            return self._summary_epilogue() if turn.tools_used else self._finish_turn()
        turn.iteration += 1
        return self._prepare_context() + self._call_model("turn")

    def _call_model(self, purpose: str) -> list[Effect]:
        self._turn.purpose = purpose
        offer = purpose == "turn" and not self._tools_disabled
        request = ModelRequest(
            model=self._model,
            system=self._rules.system_prompt(self._system),
            messages=tuple(self._history),
            tools=self._tools if offer else (),
        )
        verdict = self._rules.check(request)
        if verdict.tripped:
            return self._on_payload_growth(request, verdict, purpose)
        self._phase = _Phase.WAIT_MODEL
        return [CallModel(request, purpose=purpose)]

    def _on_payload_growth(self, request: ModelRequest, verdict: GrowthCheck, purpose: str) -> list[Effect]:
        """The failsafe tripped: the request is not sent; compact and go on, or stop."""
        effects, stop = self._rules.trip(request, verdict)
        if stop:
            self._turn.metrics.termination_reason = "payload_growth"
            self._phase = _Phase.DONE
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
        return Emit(
            Result(
                subtype=subtype,
                total_cost_usd=turn.cost_usd,
                num_turns=turn.iteration,
                result=turn.last_text,
                usage=dict(turn.usage),
                metrics=turn.metrics.as_dict(),
            )
        )

    def _finish_turn(self) -> list[Effect]:
        effects: list[Effect] = [self._result("success"), Emit(Thinking(thinking=False))]
        effects += self._release()
        effects.append(TurnFinished())
        self._phase = _Phase.IDLE
        if self._queue:
            effects += self._begin_turn(self._queue.popleft())
        return effects

    def _fatal(self, message: str) -> list[Effect]:
        self._turn.metrics.termination_reason = "error"
        self._phase = _Phase.DONE
        effects: list[Effect] = [
            self._result("error"),
            Emit(ErrorEvent(error_type="direct_process_error", message=message)),
        ]
        return effects + self._release() + [Exit(1)]

    # --- context ----------------------------------------------------------------------

    def _prepare_context(self) -> list[Effect]:
        self._history = self._rules.prepare_history(self._history)
        settings, history = self._settings, self._history
        # the newest assistant message's tool results are never "stale", however many
        last_assistant = max(
            (i for i, m in enumerate(history) if m.role == "assistant"), default=len(history)
        )
        keep = max(settings.stale_tool_result_keep_last, len(history) - last_assistant)
        history = truncate_old_tool_results(history, keep, settings.stale_tool_result_chars)
        trim = trim_messages(history, self._system, self._context_window, settings)
        self._history = list(trim.messages)
        usage = trim.estimated_tokens / self._context_window if self._context_window else 0.0
        percent = round(usage * 100, 1)
        effects: list[Effect] = [
            Emit(
                ContextUsage(
                    estimated_tokens=trim.estimated_tokens,
                    context_window=self._context_window,
                    usage_percent=percent,
                    messages_count=len(self._history),
                    trimmed=trim.trimmed,
                )
            )
        ]
        crossed = [i for i, (at, _) in enumerate(settings.context_warning_levels) if usage >= at]
        level = crossed[-1] if crossed else -1
        if level > self._warning_level:
            name = settings.context_warning_levels[level][1]
            text = _WARNING_TEXT.get(name, "Context is {pct:.0f}% full.").format(pct=percent)
            effects.append(Emit(ContextWarning(level=name, usage_percent=percent, message=text)))
        # falling back under a level re-arms its warning
        self._warning_level = level
        return effects

    # --- model outcomes ---------------------------------------------------------------

    def _on_response(self, response: ModelResponse) -> list[Effect]:
        turn = self._turn
        self._api_failures = 0
        turn.overflow_retried = False
        turn.cost_usd += response.cost_usd
        for name in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens"):
            turn.usage[name] = turn.usage.get(name, 0) + getattr(response.usage, name)
        if turn.purpose == "summary":
            return self._keep_text(strip_hallucination(response.text)) + self._finish_turn()
        if response.tool_calls:
            return self._on_tool_calls(response)
        return self._on_text(response.text)

    def _keep_text(self, text: str) -> list[Effect]:
        """Append and publish the assistant's text (if any), then close the iteration."""
        effects: list[Effect] = []
        if text.strip():
            self._history.append(ChatMessage(role="assistant", content=text))
            self._turn.last_text = text
            effects.append(Emit(Assistant(content=text)))
        return effects + [Emit(MessageStop())]

    def _on_tool_calls(self, response: ModelResponse) -> list[Effect]:
        turn = self._turn
        text = strip_hallucination(response.text)
        effects: list[Effect] = [Emit(Assistant(content=text))] if text.strip() else []
        # plan updates are bookkeeping: they neither make nor hide a stall
        work = [c for c in response.tool_calls if not self._rules.is_plan_call(c)]
        stall = None
        if work:
            self._tracker, stall = self._tracker.observe(work, self._settings)
        if stall is not None:
            # the stalled calls are not run, so they never enter the history
            self._tracker = RepeatTracker()
            turn.metrics.termination_reason = stall.value
            return effects + [Emit(MessageStop())] + self._summary_epilogue()
        self._history.append(
            ChatMessage(role="assistant", content=text, tool_calls=response.tool_calls)
        )
        turn.tools_used = True
        turn.metrics.tool_calls += len(response.tool_calls)
        turn.pending = deque(response.tool_calls)
        return effects + self._next_call()

    def _on_text(self, text: str) -> list[Effect]:
        turn, caps = self._turn, self.caps
        hallucinated = detect_hallucinated_tool_output(text)
        if (
            hallucinated
            and turn.tools_used
            and turn.metrics.mid_chain_nudges < caps.max_mid_chain_nudges
        ):
            # made-up tool output: dropped, never published, and the model is told so
            turn.metrics.mid_chain_nudges += 1
            self._history.append(ChatMessage(role="user", content=HALLUCINATION_NUDGE))
            return [Emit(MessageStop())] + self._next_iteration()
        # Before any tool ran, made-up output is cut off; once the mid-chain nudges are
        # spent the reply ends the turn as it is (the original keeps and emits it whole).
        clean = strip_hallucination(text) if hallucinated and not turn.tools_used else text
        effects = self._keep_text(clean)
        nudgeable = (
            bool(self._tools)
            and not self._tools_disabled
            and not turn.tools_used
            and turn.metrics.nudges < caps.max_nudges
            and turn.iteration < caps.max_tool_iterations  # never on the final iteration
        )
        reason = (
            detect_nudge_reason(clean, turn.iteration, False, self._settings.nudge_rules)
            if nudgeable
            else None
        )
        if reason is None:
            return effects + self._finish_turn()
        turn.metrics.nudges += 1
        self._history.append(ChatMessage(role="user", content=nudge_message(reason)))
        return effects + self._next_iteration()

    def _on_failure(self, error: ProviderError) -> list[Effect]:
        turn, settings = self._turn, self._settings
        if turn.purpose == "summary" and not self._retry_summary(error):
            return self._summary_failed(error)
        if error.kind is ErrorKind.CONTEXT_OVERFLOW and not turn.overflow_retried:
            turn.overflow_retried = True
            keep = settings.trim_tiers.emergency_keep_last
            self._history = overflow_recovery(self._history, keep)
            message = (
                f"Context window exceeded: conversation replaced by a summary and the last "
                f"{keep} messages; retrying once"
            )
            warning = ContextWarning(level="critical", usage_percent=100.0, message=message)
            return [Emit(warning)] + self._call_model(turn.purpose)
        offered = turn.purpose == "turn" and not self._tools_disabled and bool(self._tools)
        if error.kind is ErrorKind.TOOLS_UNSUPPORTED and offered:
            self._tools_disabled = True
            message = f"{self._model} does not support tools: continuing without tools"
            note = SystemEvent(subtype="tools_disabled", message=message)
            return [Emit(note)] + self._call_model(turn.purpose)
        if error.kind is ErrorKind.RETRYABLE:
            self._api_failures += 1
            if (self._api_failures >= settings.api_failure_threshold
                    or not should_retry(error, self._api_failures, settings.retry)):
                # an outage, not a failure of this session: the supervisor pauses it
                self._phase = _Phase.IDLE
                return self._release() + [ReportOutage(error.message)]
            delay = retry_delay(self._api_failures, error.retry_after_s, settings.retry)
            self._retry_seq += 1
            self._retry_token = f"direct-retry-{self._retry_seq}"
            self._phase = _Phase.WAIT_RETRY
            scheduled = RetryScheduled(
                attempt=self._api_failures, delay_s=delay, message=error.message
            )
            return [Emit(scheduled), Schedule(delay_s=delay, token=self._retry_token)]
        return self._fatal(error.message)

    def _retry_summary(self, error: ProviderError) -> bool:
        """Whether a failed summary call is tried again: once after a context overflow,
        and while a retryable error stays under the outage threshold."""
        if error.kind is ErrorKind.CONTEXT_OVERFLOW:
            return not self._turn.overflow_retried
        return error.kind is ErrorKind.RETRYABLE and self._api_failures + 1 < self._settings.api_failure_threshold

    def _summary_failed(self, error: ProviderError) -> list[Effect]:
        """The original's ``Final summary call failed``: the turn still ends normally."""
        if error.kind is ErrorKind.RETRYABLE:
            self._api_failures += 1  # still counts towards an outage on the next turn
        if self._history and self._history[-1].role == "user" and self._history[-1].content == SUMMARY_REQUEST:
            self._history.pop()  # an unanswered request would only confuse the next turn
        note = SystemEvent(subtype="summary_failed", message=f"Final summary call failed: {error.message}")
        return [Emit(note)] + self._finish_turn()

    # --- tool calls -------------------------------------------------------------------

    def _next_call(self) -> list[Effect]:
        """Work through the pending calls until one needs the actor (run or approval)."""
        turn = self._turn
        effects: list[Effect] = []
        while turn.pending:
            call = turn.pending.popleft()
            turn.current = call
            start = ContentBlockStart(
                block_type="tool_use", name=call.name, call_id=call.id, input=dict(call.arguments)
            )
            effects.append(Emit(start))
            if call.name not in self._tool_names:
                effects += self._record_result(call, ToolResult(f"Unknown tool: {call.name}", True))
                continue
            if call.arguments_error:
                text = f"Invalid arguments for tool {call.name}: {call.arguments_error}"
                effects += self._record_result(call, ToolResult(text, True))
                continue
            if self._rules.is_plan_call(call):
                # the plan is this loop's own state: no permission, no worker
                result, plan_effects = self._rules.plan_call(call)
                effects += plan_effects + self._record_result(call, result)
                continue
            review = self._rules.review(call, self._permission_check(call.name, dict(call.arguments)))
            decision = review.decision
            if decision.permission is Permission.DENY:
                effects += self._record_result(call, _denied(call.name, decision.message))
                continue
            if decision.permission is Permission.ASK:
                self._phase = _Phase.WAIT_APPROVAL
                description = decision.description or f"Use tool: {call.name}"
                return effects + [AskApproval(call, description, review.kind)]
            return effects + self._run(call)
        turn.current = None
        return effects + [Emit(MessageStop())] + self._next_iteration()

    def _on_approval(self, call: ToolCall, decision: ApprovalDecided) -> list[Effect]:
        self._rules.approved(call, decision)
        if not decision.allowed:
            return (
                self._record_result(call, _denied(call.name, decision.message)) + self._next_call()
            )
        if decision.updated_input is not None:
            call = dataclasses.replace(call, arguments=dict(decision.updated_input))
            self._turn.current = call
        return self._run(call)

    def _run(self, call: ToolCall) -> list[Effect]:
        self._phase = _Phase.WAIT_TOOL
        status = ToolStatus(
            status_message=f"[{call.name}] Running tool...",
            tool_name=call.name,
            call_id=call.id,
            state="running",
        )
        return [Emit(status), RunTool(call)]

    def _record_result(self, call: ToolCall, result: ToolResult) -> list[Effect]:
        """Cap ``result``, append it as a tool message and publish its status."""
        result, kept = self._rules.observe(call, result)
        settings = self._settings
        used = estimate_messages_tokens(self._history, self._system, settings.token_settings)
        limit = max_tool_result_chars(self._context_window, used, settings)
        # lone surrogates (undecodable bytes) would break the client's JSON encoding
        output = result.output.encode("utf-8", "replace").decode("utf-8")
        output = cap_tool_result(output, limit, settings.truncation_shape)
        self._history.append(
            ChatMessage(
                role="tool",
                content=output,
                tool_call_id=call.id,
                tool_name=call.name,
                is_error=result.is_error,
            )
        )
        first_line = output.strip().splitlines()[0] if output.strip() else ""
        error_text = first_line[: settings.tool_status_error_chars]
        status = ToolStatus(
            status_message=(
                f"[{call.name}] Error: {error_text}" if result.is_error else f"[{call.name}] Done"
            ),
            tool_name=call.name,
            call_id=call.id,
            state="error" if result.is_error else "completed",
            output=cap_tool_result(output, settings.tool_status_output_chars),
        )
        return [*kept, Emit(status)]


def _denied(name: str, message: str) -> ToolResult:
    text = f"Permission denied for tool: {name}" + (f": {message}" if message else "")
    return ToolResult(text, is_error=True)
