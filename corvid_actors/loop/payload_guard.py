"""The payload-growth failsafe (OpenAgent seed): never send a request that ballooned.

The size of every request sent to a provider is recorded. After each model reply the
guard re-baselines on the request plus that reply, so the model's own long answers do
not count as growth. A later request of the same turn that is at least
``growth_factor`` (5) times the baseline *and* more than ``min_growth_bytes`` (1 KiB)
larger trips the failsafe: the loop does not send it; it writes a diagnostic snapshot
of the request (through a ``PersistMessage`` with :data:`SNAPSHOT_ROLE`, which the
session actor turns into a file in the data directory), emits an ``error`` event
(``payload_growth``) and then compacts the conversation or stops the session
(``on_trip``). A second trip in the same turn always stops: the compaction did not
help, and compacting again would loop.

The first request of a turn is never checked: it carries the user's own message, and a
human pasting a long text is not a runaway. What trips the guard is growth *inside* a
turn — tool results and loop additions piling up between two model calls.

Pure functions and a frozen state; the loop owns one :class:`GrowthGuard`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from corvid_actors.loop.summaries import summarize_conversation
from corvid_actors.providers.base import ChatMessage, ModelRequest, ModelResponse

#: ``PersistMessage.role`` of a diagnostic snapshot: the session actor writes it to a file
SNAPSHOT_ROLE = "payload_snapshot"
#: ``error`` event type of a trip
PAYLOAD_GROWTH_ERROR = "payload_growth"
#: bytes counted per message on top of its content (role, framing), as the actor counts
MESSAGE_OVERHEAD_BYTES = 16
#: the snapshot directory under the data directory when none is configured
DEFAULT_SNAPSHOT_SUBDIR = "snapshots"

ON_TRIP_COMPACT = "compact"
ON_TRIP_STOP = "stop"


@dataclass(frozen=True)
class GuardSettings:
    """Constants of the failsafe (seed values as defaults)."""

    enabled: bool = True
    growth_factor: float = 5.0
    min_growth_bytes: int = 1024
    #: "compact" (summarise the conversation and go on) or "stop" (end the session)
    on_trip: str = ON_TRIP_COMPACT


# --- measuring ----------------------------------------------------------------------------


def message_size(message: ChatMessage) -> int:
    """Bytes one message adds to a request (the same measure as :func:`request_size`)."""
    size = len(message.content.encode()) + MESSAGE_OVERHEAD_BYTES
    for call in message.tool_calls:
        size += len(call.name) + len(repr(call.arguments))
    return size


def tools_size(request: ModelRequest) -> int:
    """Bytes the tool definitions add to a request (name, description, JSON schema)."""
    return sum(len(t.name) + len(t.description.encode()) + len(json.dumps(t.parameters, default=str))
               for t in request.tools)


def request_size(request: ModelRequest) -> int:
    """The size of a request as sent: system prompt, every message, the tool definitions.

    The session actor reports this in ``ModelSucceeded.request_bytes``; the loop uses the
    same measure before sending, so the two agree. Tool definitions count because they
    are part of every payload: without them a short system prompt would make one
    ordinary tool output look like a five-fold growth.
    """
    return (len(request.system.encode()) + sum(message_size(m) for m in request.messages)
            + tools_size(request))


def reply_size(response: ModelResponse) -> int:
    """Bytes a reply adds to the next request (its text and tool calls)."""
    return message_size(ChatMessage(role="assistant", content=response.text,
                                    tool_calls=response.tool_calls))


# --- the rule -----------------------------------------------------------------------------


@dataclass(frozen=True)
class GrowthCheck:
    """The verdict on one request: ``tripped`` when it must not be sent."""

    tripped: bool
    size: int
    baseline: int | None


def has_ballooned(size: int, baseline: int | None, settings: GuardSettings) -> bool:
    """The seed's rule: ≥ factor × baseline and more than min_growth_bytes larger."""
    if baseline is None or not settings.enabled:
        return False
    return size >= settings.growth_factor * baseline and size - baseline > settings.min_growth_bytes


@dataclass(frozen=True)
class GrowthGuard:
    """The guard's state: the baseline (None: nothing to compare with), the size of the
    request last checked (used when a reply arrives without ``request_bytes``), and
    whether it tripped in this turn already (a second trip stops: compacting again and
    again would only hide a runaway)."""

    baseline: int | None = None
    last_checked: int = 0
    tripped_in_turn: bool = False

    def check(self, request: ModelRequest, settings: GuardSettings) -> tuple[GrowthGuard, GrowthCheck]:
        size = request_size(request)
        tripped = has_ballooned(size, self.baseline, settings)
        verdict = GrowthCheck(tripped, size, self.baseline)
        return replace(self, last_checked=size, tripped_in_turn=self.tripped_in_turn or tripped), verdict

    def after_reply(self, request_bytes: int, response: ModelResponse) -> GrowthGuard:
        """Re-baseline: what was sent plus what the model answered."""
        sent = request_bytes or self.last_checked
        return replace(self, baseline=sent + reply_size(response), last_checked=sent)

    def compacted(self) -> GrowthGuard:
        """The conversation was compacted: the next request is not compared."""
        return replace(self, baseline=None)

    def new_turn(self) -> GrowthGuard:
        """A user message opens a turn: the next request is not compared."""
        return GrowthGuard(None, self.last_checked)


def trip_message(check: GrowthCheck, settings: GuardSettings, *, stop: bool) -> str:
    action = "stopping the session" if stop else "compacting the conversation"
    return (
        f"Request payload grew from {check.baseline} to {check.size} bytes "
        f"(limit: {settings.growth_factor:g}x and more than {settings.min_growth_bytes} bytes); "
        f"it was not sent. A diagnostic snapshot was saved to the data directory; {action}."
    )


# --- snapshot and compaction ---------------------------------------------------------------


def _message_json(message: ChatMessage) -> dict[str, Any]:
    data: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        data["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments}
                              for c in message.tool_calls]
    if message.tool_call_id:
        data["tool_call_id"] = message.tool_call_id
    if message.tool_name:
        data["tool_name"] = message.tool_name
    if message.is_error:
        data["is_error"] = True
    return data


def snapshot_json(request: ModelRequest, check: GrowthCheck, settings: GuardSettings) -> str:
    """The diagnostic snapshot: why the guard tripped and the request it refused."""
    return json.dumps({
        "reason": PAYLOAD_GROWTH_ERROR,
        "baseline_bytes": check.baseline,
        "request_bytes": check.size,
        "growth_factor": settings.growth_factor,
        "min_growth_bytes": settings.min_growth_bytes,
        "model": request.model,
        "system": request.system,
        "tools": [tool.name for tool in request.tools],
        "messages": [_message_json(m) for m in request.messages],
    }, ensure_ascii=False, indent=1, default=str)


def compact_for_growth(history: Sequence[ChatMessage]) -> list[ChatMessage]:
    """The direct loop's compaction on a trip: one plain-text ``[Context Summary]`` user
    message (no model call). Its size is bounded by the summary limits, whatever ballooned;
    no tool call is left without its result."""
    return [ChatMessage(role="user", content=summarize_conversation(history))]


def snapshot_dir(data_dir: str, configured: str = "") -> Path:
    """Where snapshots go: ``configured`` if set, else ``<data_dir>/snapshots``."""
    base = Path(configured) if configured else Path(data_dir) / DEFAULT_SNAPSHOT_SUBDIR
    return base.expanduser()
