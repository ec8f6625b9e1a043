"""Typed session events, named as the seeds name them.

Every event is a frozen dataclass with a class-level ``type`` (the seed's event name).
Subscribers receive ``(session_id, event)``. :func:`to_dict` gives the JSON shape used
by the admin socket and the event log.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass(frozen=True)
class Event:
    """Base of all session events."""

    type: ClassVar[str] = "event"


@dataclass(frozen=True)
class SessionStarted(Event):
    type: ClassVar[str] = "session_started"
    pid: int = 0
    generation: int = 0


@dataclass(frozen=True)
class SessionExited(Event):
    """The session's actor ended by itself; ``code`` 0 is a clean end."""

    type: ClassVar[str] = "session_exited"
    code: int = 0
    num_turns: int = 0
    duration_ms: int = 0


@dataclass(frozen=True)
class SessionStopped(Event):
    """The session was stopped from outside (``reason``: user_stop, timeout, …)."""

    type: ClassVar[str] = "session_stopped"
    reason: str = "user_stop"


@dataclass(frozen=True)
class SessionPaused(Event):
    """Upstream outage: the session is paused until ``resume_at`` (ISO time)."""

    type: ClassVar[str] = "session_paused"
    resume_at: str = ""
    attempt: int = 0


@dataclass(frozen=True)
class SessionResumed(Event):
    type: ClassVar[str] = "session_resumed"
    automatic: bool = False


@dataclass(frozen=True)
class SessionRestarting(Event):
    """A crashed chat session will be restarted after ``delay_s``."""

    type: ClassVar[str] = "session_restarting"
    attempt: int = 0
    delay_s: float = 0.0


@dataclass(frozen=True)
class ErrorEvent(Event):
    """An error; ``error_type`` is one of the seed's types (not_found, spawn_error,
    direct_process_error, sdk_error, slot_timeout, credits_exhausted, api_outage,
    auto_resume_exhausted, crash, payload_growth, …)."""

    type: ClassVar[str] = "error"
    error_type: str = "unknown"
    message: str = ""


@dataclass(frozen=True)
class SessionError(Event):
    """A session-level problem for people, with how bad it is (the original's shape).

    ``error_type``: spawn_error, crash, credits_exhausted, context_exhausted,
    context_compacted, timeout, budget_exceeded (a spending cap reached: the turn was not
    started, see ``Runtime.check_budget``). ``severity``: info | warning | error | fatal.
    ``recoverable``: whether sending a message (or waiting) brings the session back.
    Published beside the ``error``/``system`` event that carries the details.
    """

    type: ClassVar[str] = "session_error"
    error_type: str = "unknown"
    message: str = ""
    severity: str = "error"
    recoverable: bool = True


def context_compacted() -> SessionError:
    """The ``session_error`` a loop publishes after it compacted the conversation."""
    return SessionError(error_type="context_compacted", severity="info", recoverable=True,
                        message="Context compacted — continuing with condensed context.")


@dataclass(frozen=True)
class Thinking(Event):
    type: ClassVar[str] = "thinking"
    thinking: bool = True


@dataclass(frozen=True)
class ContentBlockDelta(Event):
    """A streamed chunk of assistant text."""

    type: ClassVar[str] = "content_block_delta"
    text: str = ""


@dataclass(frozen=True)
class ContentBlockStart(Event):
    """A content block began; for tool calls ``block_type`` is ``tool_use``."""

    type: ClassVar[str] = "content_block_start"
    block_type: str = "text"
    name: str = ""
    call_id: str = ""
    input: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class MessageStop(Event):
    """The end of one model iteration (turn boundary for observers)."""

    type: ClassVar[str] = "message_stop"


@dataclass(frozen=True)
class Assistant(Event):
    """A complete assistant message."""

    type: ClassVar[str] = "assistant"
    content: str = ""


@dataclass(frozen=True)
class ToolStatus(Event):
    """A tool call's state: pending → running → completed | error."""

    type: ClassVar[str] = "tool_status"
    status_message: str = ""
    tool_name: str = ""
    call_id: str = ""
    state: str = "running"
    output: str = ""


@dataclass(frozen=True)
class Result(Event):
    """End of a turn, with cost and loop metrics."""

    type: ClassVar[str] = "result"
    subtype: str = "success"
    total_cost_usd: float = 0.0
    num_turns: int = 0
    duration_ms: int = 0
    result: str = ""
    usage: dict[str, int] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ApprovalRequestEvent(Event):
    """A tool use awaits approval. Never carries the tool's raw input."""

    type: ClassVar[str] = "approval_request"
    id: str = ""
    session_id: str = ""
    tool_name: str = ""
    description: str = ""
    created_at: str = ""
    timeout_s: float = 0.0
    kind: str = "tool"


@dataclass(frozen=True)
class ApprovalResolved(Event):
    type: ClassVar[str] = "approval_resolved"
    id: str = ""
    behavior: str = "deny"
    message: str = ""


@dataclass(frozen=True)
class QueueStatus(Event):
    """Waiting for an inference slot (empty message: no longer waiting)."""

    type: ClassVar[str] = "queue_status"
    status_message: str = ""


@dataclass(frozen=True)
class ContextUsage(Event):
    type: ClassVar[str] = "context_usage"
    estimated_tokens: int = 0
    context_window: int = 0
    usage_percent: float = 0.0
    messages_count: int = 0
    trimmed: bool = False


@dataclass(frozen=True)
class ContextWarning(Event):
    type: ClassVar[str] = "context_warning"
    level: str = "info"
    usage_percent: float = 0.0
    message: str = ""


@dataclass(frozen=True)
class RetryScheduled(Event):
    """A retryable provider error: the next attempt is due at ``due_at``."""

    type: ClassVar[str] = "retry"
    attempt: int = 0
    delay_s: float = 0.0
    due_at: str = ""
    message: str = ""


@dataclass(frozen=True)
class SystemEvent(Event):
    """Informational notes (provider_selected, compaction, low credits, …)."""

    type: ClassVar[str] = "system"
    subtype: str = ""
    message: str = ""


@dataclass(frozen=True)
class CreditsLow(Event):
    type: ClassVar[str] = "credits_low"
    remaining: int = 0
    message: str = ""


@dataclass(frozen=True)
class PlanEvent(Event):
    type: ClassVar[str] = "plan"
    steps: tuple[dict[str, Any], ...] = ()


#: events after which a session incarnation produces nothing more
TERMINAL_EVENT_TYPES = frozenset({"session_exited", "session_stopped", "session_paused"})


#: field values ``dataclasses.asdict`` would return as they are (immutable scalars)
_SCALARS = frozenset({str, int, float, bool, type(None)})
#: the field names of each event class, in order (dataclasses.fields per call is a cost)
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def to_dict(event: Event) -> dict[str, Any]:
    """The JSON-ready form of ``event``: ``{"type": ..., **fields}``."""
    cls = type(event)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(event))
    data: dict[str, Any] = {"type": event.type}
    for name in names:
        value = getattr(event, name)
        if type(value) in _SCALARS:
            data[name] = value
        elif type(value) is dict and all(type(k) in _SCALARS and type(v) in _SCALARS for k, v in value.items()):
            data[name] = dict(value)  # a flat dict (usage, metrics): asdict's copy, done directly
        else:
            # a nested value (blocks, steps): asdict's deep conversion, as before
            return {"type": event.type, **dataclasses.asdict(event)}
    return data
