"""The direct loop's side of the tool-call walk: run, gate and record one call at a time.

The walk itself — checks, permission gate, status texts — is :mod:`.tool_walk`, shared
with the SDK loop. What is the direct loop's own: every check's failure (unknown tool,
bad arguments, a denial, a human's "no") is a text result and the loop goes on, and a
result is capped to what the context can take (:mod:`.tool_results`) before it is kept —
by the observation caps when they are on (the context cap is their byte cap for that
result: one cut, stating the tool output's own size), else by the seed's own cut.
:class:`DirectToolCalls` is the part of :class:`~corvid_actors.loop.direct.DirectLoop`
that does this; it holds no state of its own.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from corvid_actors.events import MessageStop
from corvid_actors.loop.effects import ApprovalDecided, AskApproval, Effect, Emit, RunTool
from corvid_actors.loop.rules import LoopRules, settings_from_config
from corvid_actors.loop.tokens import estimate_messages_tokens
from corvid_actors.loop.tool_results import TruncationShape, cap_tool_result, max_tool_result_chars
from corvid_actors.loop.tool_walk import announce, check_call, finished_status, gate, running_status
from corvid_actors.loop.turn import NOT_RUN_INTERRUPTED, Phase
from corvid_actors.providers.base import ChatMessage, ToolCall
from corvid_actors.vocabulary import PermissionCheck, ToolResult

if TYPE_CHECKING:  # direct.py imports this module
    from corvid_actors.loop.direct import _Turn
    from corvid_actors.loop.settings import DirectLoopSettings


def denied(name: str, message: str) -> ToolResult:
    """What the model reads for a denied call (the original's wording)."""
    text = f"Permission denied for tool: {name}" + (f": {message}" if message else "")
    return ToolResult(text, is_error=True)


class DirectToolCalls:
    """The tool-call half of the direct loop (see the module docstring)."""

    _turn: _Turn
    _phase: Phase
    _history: list[ChatMessage]
    _system: str
    _settings: DirectLoopSettings
    _context_window: int
    _tool_names: frozenset[str]
    _rules: LoopRules
    _permission_check: PermissionCheck

    if TYPE_CHECKING:  # the loop's: the calls are done, call the model again; or the
        # user's next message interrupted the turn

        def _next_iteration(self) -> list[Effect]: ...

        def _end_interrupted(self, partial: str) -> list[Effect]: ...

    def _next_call(self) -> list[Effect]:
        """Work through the pending calls until one needs the actor (run or approval)."""
        walk = self._turn.walk
        effects: list[Effect] = []
        if self._turn.interrupted:
            # a safe point (no tool runs now): the calls left are not run, the model reads why
            while (call := walk.current) is not None:
                effects += self._record_result(call, ToolResult(NOT_RUN_INTERRUPTED, is_error=True))
            return effects + [Emit(MessageStop())] + self._end_interrupted("")
        while (call := walk.current) is not None:
            effects.append(announce(call))
            failed = check_call(call, self._tool_names)
            if failed is not None:
                effects += self._record_result(call, failed)
                continue
            if self._rules.is_plan_call(call):
                # the plan is this loop's own state: no permission, no worker
                result, plan_effects = self._rules.plan_call(call)
                effects += plan_effects + self._record_result(call, result)
                continue
            verdict = gate(call, self._permission_check, self._rules)
            if verdict.action == "deny":
                effects += self._record_result(call, denied(call.name, verdict.message))
                continue
            if verdict.action == "ask":
                self._phase = Phase.WAIT_APPROVAL
                return effects + [AskApproval(call, verdict.description, verdict.kind)]
            return effects + self._run(call)
        return effects + [Emit(MessageStop())] + self._next_iteration()

    def _on_approval(self, call: ToolCall, decision: ApprovalDecided) -> list[Effect]:
        self._rules.approved(call, decision)
        if self._turn.interrupted:  # interrupted while it waited: not run (_next_call says so)
            return self._next_call()
        if not decision.allowed:
            return self._record_result(call, denied(call.name, decision.message)) + self._next_call()
        if decision.updated_input is not None:
            call = dataclasses.replace(call, arguments=dict(decision.updated_input))
            self._turn.walk.replace_current(call)
        return self._run(call)

    def _run(self, call: ToolCall) -> list[Effect]:
        self._phase = Phase.WAIT_TOOL
        return [running_status(call), RunTool(call)]

    def _record_result(self, call: ToolCall, result: ToolResult) -> list[Effect]:
        """Cap ``result`` of the current call, append it as a tool message, publish its
        status and move the walk on."""
        self._turn.walk.advance()
        settings = self._settings
        used = estimate_messages_tokens(self._history, self._system, settings.token_settings)
        limit = max_tool_result_chars(self._context_window, used, settings)
        result, output, kept = model_visible_result(self._rules, call, result, limit,
                                                    settings.truncation_shape)
        self._history.append(
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
