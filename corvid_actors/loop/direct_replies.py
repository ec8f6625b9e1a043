"""The direct loop's answers to the model: replies, tool-call requests and failures.

The collaborator of :class:`~corvid_actors.loop.direct.DirectLoop` that decides what a
model outcome leads to (see that module's docstring for the rules): text is kept, nudged
or ends the turn; tool calls are checked for a stall and handed to the walk
(:mod:`.direct_tools`); a provider error is recovered from (context overflow, tools
unsupported), retried with backoff, reported as an outage, or fatal. It works on the
:class:`~corvid_actors.loop.direct_turn.DirectTurn` and the history it is given, and
answers with effects and a verdict (:mod:`.direct_turn`) the loop acts on. Its own state
is what only it reads: the repeat tracker, the consecutive API failures (kept across
turns until a success) and whether the model refused tools.
"""

from __future__ import annotations

from corvid_actors.core.vocabulary import TASK_AGENT, ToolSpec
from corvid_actors.events import Assistant, ContextWarning, MessageStop, RetryScheduled, SystemEvent
from corvid_actors.loop.direct_context import SUMMARY_REQUEST
from corvid_actors.loop.direct_turn import DirectTurn, Fatal, Next, Outage, Retry, Verdict
from corvid_actors.loop.effects import Effect, Emit
from corvid_actors.loop.nudges import (
    HALLUCINATION_NUDGE,
    detect_hallucinated_tool_output,
    detect_nudge_reason,
    nudge_message,
    strip_hallucination,
)
from corvid_actors.loop.repeats import RepeatTracker
from corvid_actors.loop.retry import retry_delay, should_retry
from corvid_actors.loop.rules import LoopRules
from corvid_actors.loop.settings import DirectLoopSettings
from corvid_actors.loop.tiers import TierCaps
from corvid_actors.loop.tool_walk import ToolWalk
from corvid_actors.loop.trimming import overflow_recovery
from corvid_actors.providers.base import ChatMessage, ErrorKind, ModelResponse, ProviderError

#: a step's effects and what the loop does next
Step = tuple[list[Effect], Verdict]


class DirectReplies:
    """What a model outcome leads to in the direct loop (see the module docstring).

    Owned by one :class:`~corvid_actors.loop.direct.DirectLoop` and driven on its thread.
    """

    def __init__(self, *, rules: LoopRules, settings: DirectLoopSettings, caps: TierCaps,
                 kind: str, model: str, tools: tuple[ToolSpec, ...]) -> None:
        self._rules = rules
        self._settings = settings
        self._caps = caps
        self._kind = kind
        self._model = model
        self._tools = tools
        self._tracker = RepeatTracker()
        self._api_failures = 0
        self._tools_disabled = False

    @property
    def tools_disabled(self) -> bool:
        """True once the model said it does not support tools (for the rest of the session)."""
        return self._tools_disabled

    # --- model outcomes ---------------------------------------------------------------

    def handle(self, turn: DirectTurn, history: list[ChatMessage], response: ModelResponse) -> Step:
        """A model call of ``turn`` answered ``response``."""
        self._api_failures = 0
        turn.overflow_retried = False
        turn.add(response)
        if turn.purpose == "summary":
            return self._keep_text(turn, history, strip_hallucination(response.text)), Next.FINISH
        if response.tool_calls:
            return self._on_tool_calls(turn, history, response)
        return self._on_text(turn, history, response.text)

    def _keep_text(self, turn: DirectTurn, history: list[ChatMessage], text: str) -> list[Effect]:
        """Append and publish the assistant's text (if any), then close the iteration."""
        effects: list[Effect] = []
        if text.strip():
            history.append(ChatMessage(role="assistant", content=text))
            turn.last_text = text
            effects.append(Emit(Assistant(content=text)))
        return effects + [Emit(MessageStop())]

    def _on_tool_calls(self, turn: DirectTurn, history: list[ChatMessage], response: ModelResponse) -> Step:
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
            return effects + [Emit(MessageStop())], Next.SUMMARY
        history.append(
            ChatMessage(role="assistant", content=text, tool_calls=response.tool_calls)
        )
        turn.tools_used = True
        turn.metrics.tool_calls += len(response.tool_calls)
        turn.walk = ToolWalk(response.tool_calls)
        return effects, Next.WALK

    def _on_text(self, turn: DirectTurn, history: list[ChatMessage], text: str) -> Step:
        caps = self._caps
        hallucinated = detect_hallucinated_tool_output(text)
        if (
            hallucinated
            and turn.tools_used
            and turn.metrics.mid_chain_nudges < caps.max_mid_chain_nudges
        ):
            # made-up tool output: dropped, never published, and the model is told so
            turn.metrics.mid_chain_nudges += 1
            history.append(ChatMessage(role="user", content=HALLUCINATION_NUDGE))
            return [Emit(MessageStop())], Next.ITERATE
        # The rule is about tool chains only (seed invariant 8: "after tools have been
        # called"): before any tool ran, markers are an ordinary reply, kept whole; once
        # the mid-chain nudges are spent the reply ends the turn as it is (the original
        # keeps and emits it whole).
        effects = self._keep_text(turn, history, text)
        nudgeable = (
            self._kind == TASK_AGENT  # a chat agent's text is its answer, whatever its shape
            and bool(self._tools)
            and not self._tools_disabled
            and not turn.tools_used
            and turn.metrics.nudges < caps.max_nudges
            and turn.iteration < caps.max_tool_iterations  # never on the final iteration
        )
        reason = (
            detect_nudge_reason(text, turn.iteration, False, self._settings.nudge_rules)
            if nudgeable
            else None
        )
        if reason is None:
            return effects, Next.FINISH
        turn.metrics.nudges += 1
        history.append(ChatMessage(role="user", content=nudge_message(reason)))
        return effects, Next.ITERATE

    def failed(self, turn: DirectTurn, history: list[ChatMessage], error: ProviderError) -> Step:
        """A model call of ``turn`` failed with ``error``."""
        settings = self._settings
        if turn.purpose == "summary" and not self._retry_summary(turn, error):
            return self._summary_failed(history, error)
        if error.kind is ErrorKind.CONTEXT_OVERFLOW and not turn.overflow_retried:
            turn.overflow_retried = True
            keep = settings.trim_tiers.emergency_keep_last
            history[:] = overflow_recovery(history, keep)
            message = (
                f"Context window exceeded: conversation replaced by a summary and the last "
                f"{keep} messages; retrying once"
            )
            warning = ContextWarning(level="critical", usage_percent=100.0, message=message)
            return [Emit(warning)], Next.CALL_AGAIN
        offered = turn.purpose == "turn" and not self._tools_disabled and bool(self._tools)
        if error.kind is ErrorKind.TOOLS_UNSUPPORTED and offered:
            self._tools_disabled = True
            message = f"{self._model} does not support tools: continuing without tools"
            note = SystemEvent(subtype="tools_disabled", message=message)
            return [Emit(note)], Next.CALL_AGAIN
        if error.kind is ErrorKind.RETRYABLE:
            self._api_failures += 1
            if (self._api_failures >= settings.api_failure_threshold
                    or not should_retry(error, self._api_failures, settings.retry)):
                # an outage, not a failure of this session: the supervisor pauses it
                return [], Outage(error.message)
            delay = retry_delay(self._api_failures, error.retry_after_s, settings.retry)
            scheduled = RetryScheduled(
                attempt=self._api_failures, delay_s=delay, message=error.message
            )
            return [Emit(scheduled)], Retry(delay)
        return [], Fatal(error.message)

    def _retry_summary(self, turn: DirectTurn, error: ProviderError) -> bool:
        """Whether a failed summary call is tried again: once after a context overflow,
        and while a retryable error stays under the outage threshold."""
        if error.kind is ErrorKind.CONTEXT_OVERFLOW:
            return not turn.overflow_retried
        return error.kind is ErrorKind.RETRYABLE and self._api_failures + 1 < self._settings.api_failure_threshold

    def _summary_failed(self, history: list[ChatMessage], error: ProviderError) -> Step:
        """The original's ``Final summary call failed``: the turn still ends normally."""
        if error.kind is ErrorKind.RETRYABLE:
            self._api_failures += 1  # still counts towards an outage on the next turn
        if history and history[-1].role == "user" and history[-1].content == SUMMARY_REQUEST:
            history.pop()  # an unanswered request would only confuse the next turn
        note = SystemEvent(subtype="summary_failed", message=f"Final summary call failed: {error.message}")
        return [Emit(note)], Next.FINISH
