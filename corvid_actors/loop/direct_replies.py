"""The direct loop's answers to the model: replies, tool-call requests and failures.

The half of :class:`~corvid_actors.loop.direct.DirectLoop` that decides what a model
outcome leads to (see that module's docstring for the rules): text is kept, nudged or
ends the turn; tool calls are checked for a stall and handed to the walk
(:mod:`.direct_tools`); a provider error is recovered from (context overflow, tools
unsupported), retried with backoff, reported as an outage, or fatal. Holds no state of
its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from corvid_actors.events import Assistant, ContextWarning, MessageStop, RetryScheduled, SystemEvent
from corvid_actors.loop.direct_context import SUMMARY_REQUEST
from corvid_actors.loop.effects import Effect, Emit, ReportOutage, Schedule
from corvid_actors.loop.nudges import (
    HALLUCINATION_NUDGE,
    detect_hallucinated_tool_output,
    detect_nudge_reason,
    nudge_message,
    strip_hallucination,
)
from corvid_actors.loop.repeats import RepeatTracker
from corvid_actors.loop.retry import should_retry
from corvid_actors.loop.rules import LoopRules
from corvid_actors.loop.tiers import TierCaps
from corvid_actors.loop.tool_walk import ToolWalk
from corvid_actors.loop.trimming import overflow_recovery
from corvid_actors.loop.turn import Phase
from corvid_actors.providers.base import ChatMessage, ErrorKind, ModelResponse, ProviderError
from corvid_actors.vocabulary import TASK_AGENT, ToolSpec

if TYPE_CHECKING:  # direct.py imports this module
    from corvid_actors.loop.direct import _Turn
    from corvid_actors.loop.settings import DirectLoopSettings


class DirectReplies:
    """What a model outcome leads to in the direct loop (see the module docstring)."""

    _turn: _Turn
    _phase: Phase
    _history: list[ChatMessage]
    _settings: DirectLoopSettings
    _rules: LoopRules
    _model: str
    _tools: tuple[ToolSpec, ...]
    _tools_disabled: bool
    _tracker: RepeatTracker
    _api_failures: int
    _retry_seq: int
    _retry_token: str
    caps: TierCaps
    kind: str

    if TYPE_CHECKING:  # the loop's own steps (DirectLoop, DirectToolCalls)

        def _next_iteration(self) -> list[Effect]: ...

        def _next_call(self) -> list[Effect]: ...

        def _call_model(self, purpose: str) -> list[Effect]: ...

        def _summary_epilogue(self) -> list[Effect]: ...

        def _finish_turn(self) -> list[Effect]: ...

        def _release(self) -> list[Effect]: ...

        def _fatal(self, message: str) -> list[Effect]: ...

        def _retry_delay(self, attempt: int, error: ProviderError) -> float: ...

    # --- model outcomes ---------------------------------------------------------------

    def _on_response(self, response: ModelResponse) -> list[Effect]:
        turn = self._turn
        self._api_failures = 0
        turn.overflow_retried = False
        turn.add(response)
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
        turn.walk = ToolWalk(response.tool_calls)
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
        # The rule is about tool chains only (seed invariant 8: "after tools have been
        # called"): before any tool ran, markers are an ordinary reply, kept whole; once
        # the mid-chain nudges are spent the reply ends the turn as it is (the original
        # keeps and emits it whole).
        effects = self._keep_text(text)
        nudgeable = (
            self.kind == TASK_AGENT  # a chat agent's text is its answer, whatever its shape
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
                self._phase = Phase.IDLE
                return self._release() + [ReportOutage(error.message)]
            delay = self._retry_delay(self._api_failures, error)
            self._retry_seq += 1
            self._retry_token = f"direct-retry-{self._retry_seq}"
            self._phase = Phase.WAIT_RETRY
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
