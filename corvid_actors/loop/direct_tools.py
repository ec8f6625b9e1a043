"""The direct loop's side of the tool-call walk: run, gate and record one call at a time.

The walk itself — checks, permission gate, status texts — is :mod:`.tool_walk`, shared
with the SDK loop. What is the direct loop's own: every check's failure (unknown tool,
bad arguments, a denial, a human's "no") is a text result and the loop goes on, and a
result is capped to what the context can take (:mod:`.tool_results`) before it is kept —
by the observation caps when they are on (the context cap is their byte cap for that
result: one cut, stating the tool output's own size), else by the seed's own cut.
:class:`DirectToolCalls` is the collaborator of
:class:`~corvid_actors.loop.direct.DirectLoop` that does this: it walks the
:class:`~corvid_actors.loop.direct_turn.DirectTurn`'s calls over the history it is
given, answers with effects and a verdict (:mod:`.direct_turn`), and holds no state of
its own.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from corvid_actors.core.vocabulary import PermissionCheck, ToolResult
from corvid_actors.events import MessageStop
from corvid_actors.loop.direct_turn import DirectTurn, Next
from corvid_actors.loop.effects import ApprovalDecided, AskApproval, Effect, Emit, RunTool
from corvid_actors.loop.rules import LoopRules, settings_from_config
from corvid_actors.loop.settings import DirectLoopSettings
from corvid_actors.loop.tokens import estimate_messages_tokens
from corvid_actors.loop.tool_results import TruncationShape, cap_tool_result, max_tool_result_chars
from corvid_actors.loop.tool_walk import announce, check_call, finished_status, gate, running_status
from corvid_actors.loop.turn import NOT_RUN_INTERRUPTED
from corvid_actors.providers.base import ChatMessage, ToolCall


def denied(name: str, message: str) -> ToolResult:
    """What the model reads for a denied call (the original's wording)."""
    text = f"Permission denied for tool: {name}" + (f": {message}" if message else "")
    return ToolResult(text, is_error=True)


class DirectToolCalls:
    """The tool-call walk of the direct loop (see the module docstring).

    Owned by one :class:`~corvid_actors.loop.direct.DirectLoop` and driven on its thread.
    """

    def __init__(self, *, rules: LoopRules, settings: DirectLoopSettings,
                 permission_check: PermissionCheck, tool_names: frozenset[str],
                 context_window: int, system: str) -> None:
        self._rules = rules
        self._settings = settings
        self._permission_check = permission_check
        self._tool_names = tool_names
        self._context_window = context_window
        self._system = system

    def walk(self, turn: DirectTurn, history: list[ChatMessage]) -> tuple[list[Effect], Next]:
        """Work through ``turn``'s pending calls until one needs the actor (``WAIT_TOOL``,
        ``WAIT_APPROVAL``); when none is left, ``ITERATE`` (or ``END_INTERRUPTED``)."""
        walk = turn.walk
        effects: list[Effect] = []
        if turn.interrupted:
            # a safe point (no tool runs now): the calls left are not run, the model reads why
            while (call := walk.current) is not None:
                effects += self.record(turn, history, call, ToolResult(NOT_RUN_INTERRUPTED, is_error=True))
            return effects + [Emit(MessageStop())], Next.END_INTERRUPTED
        while (call := walk.current) is not None:
            effects.append(announce(call))
            failed = check_call(call, self._tool_names)
            if failed is not None:
                effects += self.record(turn, history, call, failed)
                continue
            if self._rules.is_plan_call(call):
                # the plan is this loop's own state: no permission, no worker
                result, plan_effects = self._rules.plan_call(call)
                effects += plan_effects + self.record(turn, history, call, result)
                continue
            verdict = gate(call, self._permission_check, self._rules)
            if verdict.action == "deny":
                effects += self.record(turn, history, call, denied(call.name, verdict.message))
                continue
            if verdict.action == "ask":
                return effects + [AskApproval(call, verdict.description, verdict.kind)], Next.WAIT_APPROVAL
            return effects + self._run(call), Next.WAIT_TOOL
        return effects + [Emit(MessageStop())], Next.ITERATE

    def approved(self, turn: DirectTurn, history: list[ChatMessage], call: ToolCall,
                 decision: ApprovalDecided) -> tuple[list[Effect], Next]:
        """A human decided on ``call`` (the current one): run it, or record the denial
        and walk on."""
        self._rules.approved(call, decision)
        if turn.interrupted:  # interrupted while it waited: not run (walk says so)
            return self.walk(turn, history)
        if not decision.allowed:
            effects = self.record(turn, history, call, denied(call.name, decision.message))
            more, then = self.walk(turn, history)
            return effects + more, then
        if decision.updated_input is not None:
            call = dataclasses.replace(call, arguments=dict(decision.updated_input))
            turn.walk.replace_current(call)
        return self._run(call), Next.WAIT_TOOL

    def _run(self, call: ToolCall) -> list[Effect]:
        return [running_status(call), RunTool(call)]

    def record(self, turn: DirectTurn, history: list[ChatMessage], call: ToolCall,
               result: ToolResult) -> list[Effect]:
        """Cap ``result`` of the current call, append it as a tool message, publish its
        status and move the walk on."""
        turn.walk.advance()
        settings = self._settings
        used = estimate_messages_tokens(history, self._system, settings.token_settings)
        limit = max_tool_result_chars(self._context_window, used, settings)
        result, output, kept = model_visible_result(self._rules, call, result, limit,
                                                    settings.truncation_shape)
        history.append(
            ChatMessage(
                role="tool",
                content=output,
                tool_call_id=call.id,
                tool_name=call.name,
                is_error=result.is_error,
            )
        )
        status = finished_status(
            call,
            output,
            is_error=result.is_error,
            preview=cap_tool_result(output, settings.tool_status_output_chars),
            error_chars=settings.tool_status_error_chars,
        )
        return [*kept, status]


def model_visible_result(rules: LoopRules, call: ToolCall, result: ToolResult, limit: int,
                         truncation_shape: TruncationShape) -> tuple[ToolResult, str, list[Effect]]:
    """What the model is given of ``result`` under a cap of ``limit`` characters: the
    observed result, its capped text, and the effects the observation keeps (the full
    output for the operator). ``Runtime.run_tool``'s ``model_sees`` is this too.

    The seed's cap counts the tool's own output: with the observation caps on, it is
    their byte cap for this result (one cut, whose notice states the output's lines and
    bytes, JSON keeping its real tail); with them off, the seed's own cut.
    """
    observed, kept = rules.observe(call, result, max_chars=limit)
    # lone surrogates (undecodable bytes) would break the client's JSON encoding
    output = observed.output.encode("utf-8", "replace").decode("utf-8")
    output = cap_tool_result(output, limit, truncation_shape)  # a no-op after an observation
    return observed, output, list(kept)


def model_view(call: ToolCall, result: ToolResult, config: Any, context_window: int,
               command_tools: tuple[str, ...]) -> str:
    """What the direct loop gives the model of ``result`` as the first tool result of a
    conversation (``Runtime.run_tool``'s ``model_sees``): :func:`model_visible_result`
    under the 30 % cap of one result in an empty conversation. ``config``: a
    :class:`~corvid_actors.config.Config`."""
    rules = LoopRules(settings_from_config(config), command_tools=command_tools)
    settings = config.direct_loop
    limit = max_tool_result_chars(context_window, 0, settings)
    return model_visible_result(rules, call, result, limit, settings.truncation_shape)[1]
