"""The SDK loop's side of the tool-call walk: doom-loop guard, approvals, stop on denial.

The walk itself — checks (unknown tool, bad arguments), permission gate, status texts —
is :mod:`.tool_walk`, shared with the direct loop. What is the SDK loop's own: every call
passes, one at a time, through the checks → the doom-loop guard → the permission gate →
approval (``AskApproval``) when the gate says ask → ``RunTool``; a human's denial (and a
denied doom-loop ask) stops the turn, answering the calls not yet run; a policy denial is
told to the model and the turn goes on. :class:`SdkToolCalls` is that part of
:class:`~corvid_actors.loop.sdk.SdkLoop`.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from corvid_actors.loop.doom import is_doom_loop
from corvid_actors.loop.effects import ApprovalDecided, AskApproval, Effect, RunTool
from corvid_actors.loop.rules import LoopRules
from corvid_actors.loop.tool_walk import (
    ToolWalk,
    announce,
    check_call,
    finished_status,
    gate,
    running_status,
)
from corvid_actors.loop.turn import NOT_RUN_INTERRUPTED, Phase
from corvid_actors.providers.base import ChatMessage, ToolCall
from corvid_actors.vocabulary import PermissionCheck, ToolResult

if TYPE_CHECKING:  # sdk.py imports this module
    from corvid_actors.loop.sdk import _Turn
    from corvid_actors.loop.settings import SdkLoopSettings

DEFAULT_DENIAL_MESSAGE = "Permission denied by user"
DOOM_DENIAL_MESSAGE = "Repeated call denied by user (doom-loop guard)"
SKIPPED_MESSAGE = "Not run: the turn was stopped before this call."


class SdkToolCalls:
    """The tool-call part of the SDK loop (see the module docstring)."""

    _turn: _Turn
    _phase: Phase
    _messages: list[ChatMessage]
    _s: SdkLoopSettings
    _rules: LoopRules
    _check: PermissionCheck
    _tool_names: frozenset[str]
    _walk: ToolWalk
    _approval_kind: str
    _recent: deque[tuple[str, dict[str, object]]]
    _doom_whitelist: set[str]

    if TYPE_CHECKING:  # the loop's own steps (SdkLoop)

        def _proceed(self, *, blocked: bool = False, reason: str = "normal") -> list[Effect]: ...

        def _end_interrupted(self, partial: str) -> list[Effect]: ...

    def _advance_tools(self) -> list[Effect]:
        """Walk the remaining calls until one waits (approval or run) or all are done."""
        if self._turn.interrupted:
            # a safe point (no tool runs now): the calls left are not run, the model reads why
            return self._skip_remaining(NOT_RUN_INTERRUPTED) + self._end_interrupted("")
        effects: list[Effect] = []
        while self._phase is Phase.TOOLS and (call := self._walk.current) is not None:
            effects += self._open_call(call)
        if self._phase is not Phase.TOOLS:
            return effects
        return effects + self._proceed()

    def _open_call(self, call: ToolCall) -> list[Effect]:
        effects: list[Effect] = [announce(call)]
        failed = check_call(call, self._tool_names)
        if failed is not None:
            return effects + self._finish_call(call, failed)
        if self._rules.is_plan_call(call):
            # the plan is this loop's own state: no doom-loop guard, no approval, no worker
            result, plan_effects = self._rules.plan_call(call)
            return effects + plan_effects + self._finish_call(call, result)
        self._recent.append((call.name, dict(call.arguments)))
        threshold = self._s.doom_loop_threshold
        if call.name not in self._doom_whitelist and is_doom_loop(list(self._recent), threshold):
            self._approval_kind = "doom_loop"
            self._phase = Phase.WAIT_APPROVAL
            description = (
                f"{call.name} was called {threshold}× in a row with identical input "
                "(possible doom loop). Allow it to continue?"
            )
            return effects + [AskApproval(call=call, description=description, kind="doom_loop")]
        return effects + self._authorize(call)

    def _authorize(self, call: ToolCall) -> list[Effect]:
        verdict = gate(call, self._check, self._rules)
        if verdict.action == "deny":
            message = verdict.message or f"Permission denied for {call.name}"
            return self._finish_call(call, ToolResult(message, is_error=True))
        if verdict.action == "ask":
            self._approval_kind = verdict.kind
            self._phase = Phase.WAIT_APPROVAL
            return [AskApproval(call=call, description=verdict.description, kind=verdict.kind)]
        return self._run(call)

    def _run(self, call: ToolCall) -> list[Effect]:
        self._phase = Phase.WAIT_TOOL
        return [running_status(call), RunTool(call=call)]

    def _on_approval(self, call: ToolCall, decision: ApprovalDecided) -> list[Effect]:
        self._phase = Phase.TOOLS
        if self._turn.interrupted:  # interrupted while it waited: not run (_advance_tools)
            return self._advance_tools()
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
        return effects + (self._advance_tools() if self._phase is Phase.TOOLS else [])

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
        self._walk.advance()
        status = finished_status(
            call, result.output, is_error=result.is_error,
            preview=result.output[: self._s.tool_preview_chars],
        )
        return [*kept, status]

    def _skip_remaining(self, message: str) -> list[Effect]:
        """Answer every call not yet run with ``message`` (the API needs a result for each
        tool_use) and mark it failed."""
        effects: list[Effect] = []
        while (call := self._walk.current) is not None:
            effects += self._finish_call(call, ToolResult(message, is_error=True))
        return effects

    def _stop_turn(self, call: ToolCall, message: str, reason: str) -> list[Effect]:
        """A denial blocks the turn: answer this call and the rest, then stop."""
        effects = self._finish_call(call, ToolResult(message, is_error=True))
        effects += self._skip_remaining(SKIPPED_MESSAGE)
        return effects + self._proceed(blocked=True, reason=reason)
