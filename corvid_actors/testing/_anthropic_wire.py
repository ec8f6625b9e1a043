"""The Anthropic Messages API wire format, as the stub server speaks it (pure functions).

Scripted turns (:class:`Turn`) and faults (:class:`Fault`) become the exact SSE event
sequence or JSON message the real API sends; no sockets or threads here, so the format
can be read and checked on its own. :mod:`corvid_actors.testing.anthropic_stub` serves it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from corvid_actors.core.jsontypes import JsonObject, WireJson

# --- the script: what one /v1/messages request gets ------------------------------------

#: HTTP faults: kind -> (status, error type, message)
_HTTP_FAULTS: Mapping[str, tuple[int, str, str]] = {
    "http_429": (429, "rate_limit_error", "stub: rate limit exceeded"),
    "http_500": (500, "api_error", "stub: internal server error"),
    "http_529": (529, "overloaded_error", "stub: overloaded"),
    "http_401": (401, "authentication_error", "stub: invalid x-api-key"),
    "http_400": (400, "invalid_request_error", "stub: invalid request"),
    "context_overflow": (
        400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"
    ),
}
#: every fault kind add_fault() accepts
FAULT_KINDS = frozenset({*_HTTP_FAULTS, "stream_error", "drop", "stall", "slow"})
#: the error type the real API puts in the body for a status
ERROR_STATUS: Mapping[int, str] = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
    500: "api_error", 503: "api_error", 529: "overloaded_error",
}
_STATUS_OF_TYPE = {v: k for k, v in ERROR_STATUS.items() if k != 503}
_CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class TextContent:
    """A text block, streamed as one ``text_delta`` per chunk."""

    text: str
    chunks: tuple[str, ...]


@dataclass(frozen=True)
class ToolUseContent:
    """A tool_use block whose arguments are streamed as these ``input_json_delta`` chunks."""

    id: str
    name: str
    json_chunks: tuple[str, ...]


@dataclass(frozen=True)
class Fault:
    """A scripted failure (see :meth:`AnthropicStubServer.add_fault`)."""

    kind: str
    retry_after_s: float | None = None
    retry_after_ms: float | None = None
    error_type: str | None = None
    after_events: int = 0
    message: str | None = None

    @property
    def is_http(self) -> bool:
        return self.kind in _HTTP_FAULTS

    @property
    def stream_error_type(self) -> str:
        return self.error_type or "overloaded_error"

    def http_error(self) -> tuple[int, JsonObject]:
        """Status and JSON body of this fault as a plain HTTP error."""
        if self.kind in _HTTP_FAULTS:
            status, error_type, message = _HTTP_FAULTS[self.kind]
            return status, error_body(self.error_type or error_type, self.message or message)
        error_type = self.stream_error_type
        return _STATUS_OF_TYPE.get(error_type, 500), error_body(error_type, self.stream_error_message)

    @property
    def stream_error_message(self) -> str:
        return self.message or "stub: in-stream error"


@dataclass(frozen=True)
class Turn:
    """What one ``/v1/messages`` request gets: content blocks, stop reason, usage, fault.

    ``match`` (a substring of the last user message's text) makes the turn wait for a
    request that contains it; ``delay_s`` waits before every SSE event.
    """

    content: tuple[TextContent | ToolUseContent, ...] = ()
    stop_reason: str = "end_turn"
    usage: Mapping[str, int] | None = None
    delay_s: float = 0.0
    fault: Fault | None = None
    match: str | None = None


def error_body(error_type: str, message: str) -> JsonObject:
    """The API's error envelope."""
    return {"type": "error", "error": {"type": error_type, "message": message}}


def estimate_tokens(body: WireJson) -> int:
    """A rough, deterministic token count of a request (characters / 4)."""
    if isinstance(body, dict):
        body = {k: body.get(k) for k in ("system", "messages", "tools")}
    return max(1, len(json.dumps(body)) // _CHARS_PER_TOKEN)


def last_user_text(body: Mapping[str, WireJson]) -> str:
    """Text of the last user message: its text blocks and tool_result contents."""
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            return _text_of(message.get("content"))
    return ""


def _text_of(content: WireJson) -> str:
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content or []:
        if isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif isinstance(block, dict) and block.get("type") == "tool_result":
            parts.append(_text_of(block.get("content")))
    return "\n".join(parts)


def split_words(text: str) -> list[str]:
    """Split ``text`` into word-sized chunks (each word keeps its trailing space)."""
    return re.findall(r"\S+\s*|\s+", text)


def split_evenly(text: str, pieces: int) -> list[str]:
    """Split ``text`` into at most ``pieces`` nearly equal chunks."""
    if not text:
        return []
    size = -(-len(text) // max(1, pieces))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _usage(turn: Turn, body: Mapping[str, WireJson]) -> JsonObject:
    text = "".join(b.text if isinstance(b, TextContent) else "".join(b.json_chunks) for b in turn.content)
    usage: JsonObject = {
        "input_tokens": estimate_tokens(body),
        "output_tokens": max(1, len(text) // _CHARS_PER_TOKEN),
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
    }
    usage.update(turn.usage or {})
    return usage


def _tool_input(block: ToolUseContent) -> JsonObject:
    try:
        value = json.loads("".join(block.json_chunks) or "{}")
    except ValueError:
        return {}  # a non-streamed reply cannot carry malformed JSON; send it empty
    return value if isinstance(value, dict) else {}


def turn_events(turn: Turn, body: Mapping[str, WireJson], message_id: str) -> list[tuple[str, JsonObject]]:
    """The full SSE sequence of ``turn``: message_start, ping, blocks, message_delta, stop."""
    usage = _usage(turn, body)
    start_usage: JsonObject = {**usage, "output_tokens": 1}  # the API reports 1 output token at start
    events: list[tuple[str, JsonObject]] = [
        ("message_start", {"type": "message_start", "message": {
            "id": message_id, "type": "message", "role": "assistant", "model": body["model"],
            "content": [], "stop_reason": None, "stop_sequence": None, "usage": start_usage}}),
        ("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(turn.content):
        if isinstance(block, TextContent):
            start: JsonObject = {"type": "text", "text": ""}
            deltas: list[JsonObject] = [{"type": "text_delta", "text": c} for c in block.chunks]
        else:
            start = {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
            # like the API, the first input_json_delta is empty
            deltas = [{"type": "input_json_delta", "partial_json": c} for c in ("", *block.json_chunks)]
        events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}))
        events += [("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}) for d in deltas]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(("message_delta", {
        "type": "message_delta", "delta": {"stop_reason": turn.stop_reason, "stop_sequence": None},
        "usage": usage}))  # message_delta usage is cumulative
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def turn_message(turn: Turn, body: Mapping[str, WireJson], message_id: str) -> JsonObject:
    """``turn`` as a non-streamed Message object."""
    content = [
        {"type": "text", "text": b.text} if isinstance(b, TextContent)
        else {"type": "tool_use", "id": b.id, "name": b.name, "input": _tool_input(b)}
        for b in turn.content
    ]
    return {"id": message_id, "type": "message", "role": "assistant", "model": body["model"],
            "content": content, "stop_reason": turn.stop_reason, "stop_sequence": None,
            "usage": _usage(turn, body)}
