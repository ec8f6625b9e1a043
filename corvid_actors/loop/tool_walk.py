"""The tool-call walk both agent loops share: one call at a time, checked, gated, announced.

Pure. A model response's tool calls are walked in order (:class:`ToolWalk`); each call is
announced (``content_block_start``), then checked — an unknown tool or arguments that are
not a JSON object become an error *result the model reads*, and the walk goes on — then
passed through the permission gate (:func:`gate`: the injected permission check, then the
OpenAgent approval policy). What each loop does around that (the direct loop's result
caps, the SDK loop's doom-loop guard and its stop on a human's denial) stays in the loop.

The ``tool_status`` texts are the original's: ``[tool] Running tool...``, ``[tool] Done``,
``[tool] Error: <first line of the output>``; a call waiting behind another is
``[tool] Waiting to run...`` (state ``pending``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from corvid_actors.core.vocabulary import Permission, PermissionCheck, ToolResult
from corvid_actors.events import ContentBlockStart, ToolStatus
from corvid_actors.loop.effects import Emit
from corvid_actors.loop.rules import LoopRules
from corvid_actors.providers.base import ToolCall

#: how much of a failed tool's first output line its ``tool_status`` message shows
TOOL_STATUS_ERROR_CHARS = 200


class ToolWalk:
    """A cursor over one response's tool calls: ``current`` until ``advance()`` passes it."""

    def __init__(self, calls: Sequence[ToolCall] = ()) -> None:
        self._calls = tuple(calls)
        self._index = 0

    @property
    def current(self) -> ToolCall | None:
        """The call being handled, or None once every call is done."""
        return self._calls[self._index] if self._index < len(self._calls) else None

    @property
    def calls(self) -> tuple[ToolCall, ...]:
        return self._calls

    def advance(self) -> None:
        """The current call has its result: go to the next one."""
        self._index = min(self._index + 1, len(self._calls))

    def replace_current(self, call: ToolCall) -> None:
        """Use ``call`` (the same id, e.g. with a human's edited input) for the current one."""
        calls = list(self._calls)
        calls[self._index] = call
        self._calls = tuple(calls)

    def is_current(self, call_id: str) -> bool:
        """True when ``call_id`` answers the current call (late or stale answers do not)."""
        current = self.current
        return current is not None and current.id == call_id

    def remaining(self) -> list[ToolCall]:
        """The current call and those after it."""
        return list(self._calls[self._index:])


# --- checks ------------------------------------------------------------------------------


def unknown_tool(name: str) -> ToolResult:
    """The result for a call of a tool the loop did not offer (the original's wording)."""
    return ToolResult(f"Unknown tool: {name}", is_error=True)


def check_call(call: ToolCall, offered: Iterable[str]) -> ToolResult | None:
    """The error result for a call that cannot run — an unknown tool, or arguments that
    are not a JSON object — or None when the call may go on to the permission gate."""
    if call.name not in offered:
        return unknown_tool(call.name)
    if call.arguments_error:
        return ToolResult(
            f"Invalid arguments for tool {call.name}: {call.arguments_error}", is_error=True
        )
    return None


@dataclass(frozen=True)
class GateVerdict:
    """What the permission gate says about a call: ``run`` it, ``deny`` it (``message``
    for the model, "" when the check gave none), or ``ask`` a human (``description``,
    approval ``kind``)."""

    action: str
    message: str = ""
    description: str = ""
    kind: str = "tool"


def gate(call: ToolCall, check: PermissionCheck, rules: LoopRules) -> GateVerdict:
    """The permission check (protected paths, then the permission mode), then the
    OpenAgent approval policy (which may turn an ASK into an allow)."""
    review = rules.review(call, check(call.name, dict(call.arguments)))
    decision = review.decision
    if decision.permission is Permission.DENY:
        return GateVerdict("deny", message=decision.message)
    if decision.permission is Permission.ASK:
        description = decision.description or f"Use tool: {call.name}"
        return GateVerdict("ask", description=description, kind=review.kind)
    return GateVerdict("run")


# --- events -------------------------------------------------------------------------------


def announce(call: ToolCall) -> Emit:
    """The ``content_block_start`` of a tool call (published before anything else of it)."""
    return Emit(
        ContentBlockStart(
            block_type="tool_use", name=call.name, call_id=call.id, input=dict(call.arguments)
        )
    )


def pending_status(call: ToolCall) -> Emit:
    """A call waiting behind earlier calls of the same response."""
    return Emit(
        ToolStatus(
            status_message=f"[{call.name}] Waiting to run...",
            tool_name=call.name,
            call_id=call.id,
            state="pending",
        )
    )


def running_status(call: ToolCall) -> Emit:
    """The call was handed to the worker."""
    return Emit(
        ToolStatus(
            status_message=f"[{call.name}] Running tool...",
            tool_name=call.name,
            call_id=call.id,
            state="running",
        )
    )


def finished_status(
    call: ToolCall,
    output: str,
    *,
    is_error: bool,
    preview: str,
    error_chars: int = TOOL_STATUS_ERROR_CHARS,
) -> Emit:
    """The call has its result: ``completed`` or ``error`` (with the output's first line),
    carrying ``preview`` (each loop decides how much of the output it shows)."""
    stripped = output.strip()
    first_line = stripped.splitlines()[0] if stripped else ""
    message = f"[{call.name}] Error: {first_line[:error_chars]}" if is_error else f"[{call.name}] Done"
    return Emit(
        ToolStatus(
            status_message=message,
            tool_name=call.name,
            call_id=call.id,
            state="error" if is_error else "completed",
            output=preview,
        )
    )
