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
    """An incarnation of the session was built and runs (a start, a resume, a restart)."""

    type: ClassVar[str] = "session_started"
    #: the incarnation's process id: a pseudo-PID counting from 800000 for direct
    #: (in-process) providers, as the original's direct processes
    pid: int = 0
    #: the incarnation's number within this Runtime (counts up across every session)
    generation: int = 0


@dataclass(frozen=True)
class SessionExited(Event):
    """The session's actor ended by itself; ``code`` 0 is a clean end."""

    type: ClassVar[str] = "session_exited"
    #: the exit code: 0 clean (idle exit, a scripted clean exit), 1 a crash or fatal error
    code: int = 0
    #: the session's user turns so far (all incarnations)
    num_turns: int = 0
    #: how long this incarnation ran, in milliseconds of the runtime's clock
    duration_ms: int = 0


@dataclass(frozen=True)
class SessionStopped(Event):
    """The session was stopped from outside (``reason``: user_stop, timeout, …)."""

    type: ClassVar[str] = "session_stopped"
    #: why: ``user_stop``, ``timeout``, ``replaced`` (a new start), ``server_shutdown``,
    #: ``credits_exhausted``, … (the ``reason`` given to ``stop_process``)
    reason: str = "user_stop"


@dataclass(frozen=True)
class SessionPaused(Event):
    """Upstream outage: the session is paused until ``resume_at`` (ISO time)."""

    type: ClassVar[str] = "session_paused"
    #: when the automatic resume is due (ISO 8601, UTC; simulated time under a SimClock)
    resume_at: str = ""
    #: this outage's pause count for the session (1 for the first; the backoff grows with it)
    attempt: int = 0


@dataclass(frozen=True)
class SessionResumed(Event):
    """A session paused by an outage goes on."""

    type: ClassVar[str] = "session_resumed"
    #: True for the timed automatic resume, False for ``Runtime.resume_session``
    automatic: bool = False


@dataclass(frozen=True)
class SessionRestarting(Event):
    """A crashed chat session will be restarted after ``delay_s``."""

    type: ClassVar[str] = "session_restarting"
    #: the restart's number within the current crash loop (1 for the first)
    attempt: int = 0
    #: seconds (of the runtime's clock) until the restart: 5, then 15, … (the backoff)
    delay_s: float = 0.0


@dataclass(frozen=True)
class ErrorEvent(Event):
    """An error; ``error_type`` is one of the seed's types (not_found, spawn_error,
    direct_process_error, sdk_error, slot_timeout, credits_exhausted, api_outage,
    auto_resume_exhausted, crash, payload_growth, budget_exceeded, …)."""

    type: ClassVar[str] = "error"
    #: the kind of error (see above)
    error_type: str = "unknown"
    #: what went wrong, for people (a provider bug's text: ``"ExcType: text"``)
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
    #: the kind (see above)
    error_type: str = "unknown"
    #: what happened, for people
    message: str = ""
    #: ``info`` | ``warning`` | ``error`` | ``fatal``
    severity: str = "error"
    #: whether sending a message (or waiting) brings the session back
    recoverable: bool = True


def context_compacted() -> SessionError:
    """The ``session_error`` a loop publishes after it compacted the conversation."""
    return SessionError(error_type="context_compacted", severity="info", recoverable=True,
                        message="Context compacted — continuing with condensed context.")


@dataclass(frozen=True)
class Thinking(Event):
    """The model is working on a turn (``thinking`` True) or finished it (False)."""

    type: ClassVar[str] = "thinking"
    #: True when a model call starts, False when the turn ends
    thinking: bool = True


@dataclass(frozen=True)
class ContentBlockDelta(Event):
    """A streamed chunk of assistant text."""

    type: ClassVar[str] = "content_block_delta"
    #: the chunk (deltas of one reply joined give its text; coalesced per network chunk
    #: unless ``supervisor.coalesce_deltas`` is off, as in ``sim_runtime``)
    text: str = ""


@dataclass(frozen=True)
class ContentBlockStart(Event):
    """A content block began; for tool calls ``block_type`` is ``tool_use``."""

    type: ClassVar[str] = "content_block_start"
    #: ``text`` or ``tool_use``
    block_type: str = "text"
    #: a tool call's tool name (empty for text)
    name: str = ""
    #: a tool call's id (the provider's, or given when the call had none)
    call_id: str = ""
    #: a tool call's arguments
    input: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class MessageStop(Event):
    """The end of one model iteration (turn boundary for observers)."""

    type: ClassVar[str] = "message_stop"


@dataclass(frozen=True)
class Assistant(Event):
    """A complete assistant message."""

    type: ClassVar[str] = "assistant"
    #: the message's whole text (also stored as the session's ``assistant`` message)
    content: str = ""
    #: the reply was cut short by the user's next message (double texting ``interrupt``):
    #: ``content`` is what was streamed, followed by ``loop.turn.INTERRUPTED_MARKER``
    interrupted: bool = False


@dataclass(frozen=True)
class ToolStatus(Event):
    """A tool call's state: pending → running → completed | error."""

    type: ClassVar[str] = "tool_status"
    #: a line for people ("Running read_file…", the result's first line, the error)
    status_message: str = ""
    #: the tool called
    tool_name: str = ""
    #: the call's id (matches ``content_block_start``'s ``call_id``)
    call_id: str = ""
    #: ``pending`` | ``running`` | ``completed`` | ``error``
    state: str = "running"
    #: when finished: a preview of what the model was given (capped at
    #: ``direct_loop.tool_status_output_chars``); empty before
    output: str = ""


@dataclass(frozen=True)
class Result(Event):
    """End of a turn, with cost and loop metrics."""

    type: ClassVar[str] = "result"
    #: ``success``, ``error`` (the turn failed: ``result`` says why) or ``interrupted``
    #: (the user's next message ended it, double texting ``interrupt``; ``result`` is the
    #: partial reply as kept, marker included)
    subtype: str = "success"
    #: the turn's cost in US dollars (as the provider priced it; 0 for local models)
    total_cost_usd: float = 0.0
    #: model iterations in the turn (tool rounds included)
    num_turns: int = 0
    #: how long the turn took, in milliseconds of the runtime's clock
    duration_ms: int = 0
    #: the final reply's text, or the error's message
    result: str = ""
    #: tokens: ``input_tokens``, ``output_tokens`` (and cache counts when reported)
    usage: dict[str, int] = field(default_factory=dict)
    #: the loop's metrics (direct loop: ``termination_reason``, ``stall_detected``,
    #: ``stall_type``, iteration counts …); empty for the conversation loop
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ApprovalRequestEvent(Event):
    """A tool use awaits approval. Never carries the tool's raw input."""

    type: ClassVar[str] = "approval_request"
    #: the request's id, for ``Runtime.resolve_approval``
    id: str = ""
    #: the session that asks
    session_id: str = ""
    #: the tool to be run
    tool_name: str = ""
    #: what the call would do, for people ("Write file: notes.txt")
    description: str = ""
    #: when it was asked (ISO 8601, UTC)
    created_at: str = ""
    #: seconds until it is denied by itself (``approvals.timeout_s``; chat: ``chat_timeout_s``)
    timeout_s: float = 0.0
    #: ``tool`` (a permission ask), ``command`` (a command the allowlist does not cover) or
    #: ``doom_loop`` (the same call repeated)
    kind: str = "tool"


@dataclass(frozen=True)
class ApprovalResolved(Event):
    """An approval request was answered (by a person, its timeout, or a shutdown)."""

    type: ClassVar[str] = "approval_resolved"
    #: the request's id
    id: str = ""
    #: ``allow`` | ``deny`` | ``allow_session``
    behavior: str = "deny"
    #: the answer's note (a denial's reason is told to the model)
    message: str = ""
    #: who answered: ``admin:<user>`` (the admin CLI), ``http:<token name>``,
    #: ``chat:<user>``, ``library`` (``Runtime.resolve_approval``'s default), or empty
    #: when the runtime answered itself (a timeout, a stop, a shutdown)
    answered_by: str = ""


@dataclass(frozen=True)
class QueueStatus(Event):
    """Waiting for an inference slot (empty message: no longer waiting)."""

    type: ClassVar[str] = "queue_status"
    #: "Waiting for an inference slot…" while queued; empty once granted
    status_message: str = ""


@dataclass(frozen=True)
class ContextUsage(Event):
    """How full the model's context is before a model call (direct and SDK loops)."""

    type: ClassVar[str] = "context_usage"
    #: the conversation's estimated size in tokens (system prompt and tools included)
    estimated_tokens: int = 0
    #: the model's context window in tokens
    context_window: int = 0
    #: ``estimated_tokens`` as a percentage of ``context_window``
    usage_percent: float = 0.0
    #: messages in the conversation sent
    messages_count: int = 0
    #: whether older messages were trimmed for this call
    trimmed: bool = False


@dataclass(frozen=True)
class ContextWarning(Event):
    """The context passed a warning level (once per level and incarnation)."""

    type: ClassVar[str] = "context_warning"
    #: ``info`` | ``warning`` | ``critical``
    level: str = "info"
    #: the usage that crossed it, in percent of the context window
    usage_percent: float = 0.0
    #: the warning, for people
    message: str = ""


@dataclass(frozen=True)
class RetryScheduled(Event):
    """A retryable provider error: the next attempt is due at ``due_at``."""

    type: ClassVar[str] = "retry"
    #: the retry's number (1 for the first)
    attempt: int = 0
    #: seconds until it (``retry-after`` when the provider gave one)
    delay_s: float = 0.0
    #: when it is due (ISO 8601, UTC; simulated time under a SimClock)
    due_at: str = ""
    #: the error retried
    message: str = ""


@dataclass(frozen=True)
class SystemEvent(Event):
    """Informational notes (provider_selected, compaction, low credits, …)."""

    type: ClassVar[str] = "system"
    #: the note's kind: ``provider_selected``, ``context_reset``, ``warm_path_failed``,
    #: ``sandbox_unavailable``, ``payload_snapshot``, …
    subtype: str = ""
    #: the note, for people
    message: str = ""


@dataclass(frozen=True)
class CreditsLow(Event):
    """The participant's credit balance fell to the low mark (``credits.low_credit_threshold``)."""

    type: ClassVar[str] = "credits_low"
    #: credits left
    remaining: int = 0
    #: the notice, for people
    message: str = ""


@dataclass(frozen=True)
class PlanEvent(Event):
    """The session's plan changed (the ``update_plan`` tool; OpenAgent rules)."""

    type: ClassVar[str] = "plan"
    #: the whole plan: ``{"id", "title", "status" (pending | running | completed |
    #: blocked), "waiting_for"}`` each
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
