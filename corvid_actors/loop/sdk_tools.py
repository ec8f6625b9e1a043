"""The SDK loop's side of the tool-call walk: doom-loop guard, approvals, stop on denial.

The walk itself — checks (unknown tool, bad arguments), permission gate, status texts —
is :mod:`.tool_walk`, shared with the direct loop. What is the SDK loop's own: every call
passes, one at a time, through the checks → the doom-loop guard → the permission gate →
approval (``AskApproval``) when the gate says ask → ``RunTool``; a human's denial (and a
denied doom-loop ask) stops the turn, answering the calls not yet run; a policy denial is
told to the model and the turn goes on. :class:`SdkToolCalls` is that collaborator of
:class:`~corvid_actors.loop.sdk.SdkLoop`: it walks the
:class:`~corvid_actors.loop.sdk_turn.SdkTurn`'s calls over the conversation it is given,
answers with effects and a verdict (:mod:`.sdk_turn`), and keeps the doom-loop guard's
own state (the turn's recent calls, the tools a human allowed to repeat).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from corvid_actors.core.vocabulary import PermissionCheck, ToolResult
from corvid_actors.loop.doom import is_doom_loop
from corvid_actors.loop.effects import ApprovalDecided, AskApproval, Effect, RunTool
from corvid_actors.loop.rules import LoopRules
from corvid_actors.loop.sdk_turn import PROCEED, Next, Proceed, SdkTurn
from corvid_actors.loop.settings import SdkLoopSettings
from corvid_actors.loop.tool_walk import (
    ToolWalk,
    announce,
    check_call,
    finished_status,
    gate,
    pending_status,
    running_status,
)
from corvid_actors.loop.turn import NOT_RUN_INTERRUPTED
from corvid_actors.providers.base import ChatMessage, ToolCall

DEFAULT_DENIAL_MESSAGE = "Permission denied by user"
DOOM_DENIAL_MESSAGE = "Repeated call denied by user (doom-loop guard)"
SKIPPED_MESSAGE = "Not run: the turn was stopped before this call."

#: a step's effects and what the loop does next
Step = tuple[list[Effect], Next | Proceed]


class SdkToolCalls:
    """The tool-call walk of the SDK loop (see the module docstring).

    Owned by one :class:`~corvid_actors.loop.sdk.SdkLoop` and driven on its thread.
    """

    def __init__(self, *, rules: LoopRules, settings: SdkLoopSettings, check: PermissionCheck,
                 tool_names: frozenset[str]) -> None:
        self._rules = rules
        self._s = settings
        self._check = check
        self._tool_names = tool_names
        self._recent: deque[tuple[str, dict[str, object]]] = deque(
            maxlen=max(settings.doom_loop_threshold, 1)
        )
        self._doom_whitelist: set[str] = set()

    def begin_turn(self) -> None:
        """A user message opens a turn: the doom-loop guard is about the model repeating
        itself without human input, so the calls before it no longer count."""
        self._recent.clear()

    def open(self, turn: SdkTurn, messages: list[ChatMessage], calls: Sequence[ToolCall]) -> Step:
        """A response asked for ``calls`` (they become ``turn.walk``): each is announced
        ``pending``, then walked — unless the turn has made its last model call
        (``TURN_LIMIT``: every call is answered "not run"). No calls: ``Proceed``."""
        turn.walk = ToolWalk(calls)
        if not calls:
            return [], PROCEED
        effects: list[Effect] = [pending_status(c) for c in calls]
        if turn.metrics.iterations >= self._s.max_iterations:
            limit = self._s.max_iterations
            message = f"Not run: the turn reached its limit of {limit} model calls."
            return effects + self.skip_remaining(turn, messages, message), Next.TURN_LIMIT
        more, then = self.advance(turn, messages)
        return effects + more, then

    def advance(self, turn: SdkTurn, messages: list[ChatMessage]) -> Step:
        """Walk ``turn``'s remaining calls until one waits (approval or run) or all are
        done (``Proceed``)."""
        if turn.interrupted:
            # a safe point (no tool runs now): the calls left are not run, the model reads why
            return self.skip_remaining(turn, messages, NOT_RUN_INTERRUPTED), Next.END_INTERRUPTED
        effects: list[Effect] = []
        while (call := turn.walk.current) is not None:
            opened, wait = self._open_call(turn, messages, call)
            effects += opened
            if wait is not None:
                return effects, wait
        return effects, PROCEED

    def _open_call(self, turn: SdkTurn, messages: list[ChatMessage],
                   call: ToolCall) -> tuple[list[Effect], Next | None]:
        effects: list[Effect] = [announce(call)]
        failed = check_call(call, self._tool_names)
        if failed is not None:
            return effects + self.finish_call(turn, messages, call, failed), None
        if self._rules.is_plan_call(call):
            # the plan is this loop's own state: no doom-loop guard, no approval, no worker
            result, plan_effects = self._rules.plan_call(call)
            return effects + plan_effects + self.finish_call(turn, messages, call, result), None
        self._recent.append((call.name, dict(call.arguments)))
        threshold = self._s.doom_loop_threshold
        if call.name not in self._doom_whitelist and is_doom_loop(list(self._recent), threshold):
            turn.approval_kind = "doom_loop"
            description = (
                f"{call.name} was called {threshold}× in a row with identical input "
                "(possible doom loop). Allow it to continue?"
            )
            return effects + [AskApproval(call=call, description=description, kind="doom_loop")], Next.WAIT_APPROVAL
        authorized, wait = self._authorize(turn, messages, call)
        return effects + authorized, wait

    def _authorize(self, turn: SdkTurn, messages: list[ChatMessage],
                   call: ToolCall) -> tuple[list[Effect], Next | None]:
        verdict = gate(call, self._check, self._rules)
        if verdict.action == "deny":
            message = verdict.message or f"Permission denied for {call.name}"
            return self.finish_call(turn, messages, call, ToolResult(message, is_error=True)), None
        if verdict.action == "ask":
            turn.approval_kind = verdict.kind
            return [AskApproval(call=call, description=verdict.description, kind=verdict.kind)], Next.WAIT_APPROVAL
        return self._run(call), Next.WAIT_TOOL

    def _run(self, call: ToolCall) -> list[Effect]:
        return [running_status(call), RunTool(call=call)]

    def approved(self, turn: SdkTurn, messages: list[ChatMessage], call: ToolCall,
                 decision: ApprovalDecided) -> Step:
        """A human decided on ``call`` (the current one): run it, tell the model no, or
        stop the turn; then walk on."""
        if turn.interrupted:  # interrupted while it waited: not run (advance says so)
            return self.advance(turn, messages)
        wait: Next | None
        if turn.approval_kind == "doom_loop":
            if not decision.allowed:
                return self._stop_turn(turn, messages, call, decision.message or DOOM_DENIAL_MESSAGE, "doom_loop")
            if decision.scope == "session":
                self._doom_whitelist.add(call.name)
            # the repetition is allowed; the call still needs its ordinary permission
            effects, wait = self._authorize(turn, messages, call)
        elif decision.allowed:
            self._rules.approved(call, decision)
            if decision.updated_input is not None:
                call = ToolCall(id=call.id, name=call.name, arguments=dict(decision.updated_input))
            effects, wait = self._run(call), Next.WAIT_TOOL
        else:
            message = decision.message or DEFAULT_DENIAL_MESSAGE
            if self._s.stop_on_denial:
                return self._stop_turn(turn, messages, call, message, "permission_denied")
            effects, wait = self.finish_call(turn, messages, call, ToolResult(message, is_error=True)), None
        if wait is not None:
            return effects, wait
        more, then = self.advance(turn, messages)
        return effects + more, then

    def finish_call(self, turn: SdkTurn, messages: list[ChatMessage], call: ToolCall,
                     result: ToolResult) -> list[Effect]:
        """Record ``result`` for ``call`` (the current one) and move to the next one."""
        result, kept = self._rules.observe(call, result)
        messages.append(
            ChatMessage(
                role="tool",
                content=result.output,
                tool_call_id=call.id,
                tool_name=call.name,
                is_error=result.is_error,
            )
        )
        turn.metrics.tool_calls += 1
        turn.walk.advance()
        status = finished_status(
            call, result.output, is_error=result.is_error,
            preview=result.output[: self._s.tool_preview_chars],
        )
        return [*kept, status]

    def skip_remaining(self, turn: SdkTurn, messages: list[ChatMessage], message: str) -> list[Effect]:
        """Answer every call of ``turn`` not yet run with ``message`` (the API needs a
        result for each tool_use) and mark it failed."""
        effects: list[Effect] = []
        while (call := turn.walk.current) is not None:
            effects += self.finish_call(turn, messages, call, ToolResult(message, is_error=True))
        return effects

    def _stop_turn(self, turn: SdkTurn, messages: list[ChatMessage], call: ToolCall,
                   message: str, reason: str) -> Step:
        """A denial blocks the turn: answer this call and the rest, then stop."""
        effects = self.finish_call(turn, messages, call, ToolResult(message, is_error=True))
        effects += self.skip_remaining(turn, messages, SKIPPED_MESSAGE)
        return effects, Proceed(blocked=True, reason=reason)
