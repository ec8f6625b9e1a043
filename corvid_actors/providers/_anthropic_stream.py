"""Anthropic stream reading: raw Messages API stream events folded into a ModelResponse
(tool arguments parsed from their accumulated JSON), and the closer that stops an
in-flight stream from the cancelling thread.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx2

from corvid_actors.providers._anthropic_pricing import ModelPrice, cost_usd
from corvid_actors.providers._deferred_text import DeferredText, Soon
from corvid_actors.providers.base import (
    ModelResponse,
    StreamCallback,
    TextDelta,
    ToolCall,
    ToolCallStarted,
    Usage,
)


def parse_tool_input(raw: str, initial: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Arguments of a tool call from its accumulated ``input_json_delta`` text.

    Returns ``(arguments, error)``; malformed JSON or a non-object gives ``({}, reason)``
    so the loop can tell the model instead of running the tool.
    """
    if not raw.strip():
        return dict(initial), None
    try:
        value = json.loads(raw)
    except ValueError as exc:
        return {}, f"tool arguments are not valid JSON ({exc}): {raw[:200]!r}"
    if not isinstance(value, dict):
        return {}, f"tool arguments must be a JSON object, got {type(value).__name__}"
    return value, None


class CallbackFailed(Exception):
    """Carries an exception raised by the caller's ``on_event`` past the classifier."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(str(original))
        self.original = original


@dataclass
class _ToolBlock:
    id: str
    name: str
    initial: dict[str, Any]
    chunks: list[str]


class TurnAccumulator:
    """Folds raw stream events into a :class:`ModelResponse` (one per call)."""

    def __init__(self, model: str, on_event: StreamCallback, *,
                 soon: Soon | None = None) -> None:
        self.model = model
        self.on_event = on_event
        #: text deltas read in one network chunk are one ``TextDelta`` when ``soon`` (the
        #: I/O loop's ``call_soon``) is given; else one per delta, at once
        self._text = DeferredText(lambda text: self._emit(TextDelta(text)), soon)
        self.texts: dict[int, list[str]] = {}
        self.tools: dict[int, _ToolBlock] = {}
        self.usage: dict[str, int] = {}
        self.stop_reason: str | None = None
        self.finished = False

    def _emit(self, event: TextDelta | ToolCallStarted) -> None:
        try:
            self.on_event(event)
        except Exception as exc:
            raise CallbackFailed(exc) from exc

    def flush_text(self) -> None:
        """Show the text deferred so far as one ``TextDelta`` (nothing when none is)."""
        self._text.flush()

    def raise_failed(self) -> None:
        """Raise what the subscriber raised in a deferred flush, if it did."""
        self._text.raise_failed()

    def _merge_usage(self, usage: Any) -> None:
        # message_delta usage is cumulative and may omit fields: keep the latest non-null.
        for name in ("input_tokens", "output_tokens", "cache_read_input_tokens",
                     "cache_creation_input_tokens"):
            value = getattr(usage, name, None)
            if value is not None:
                self.usage[name] = value

    def feed(self, event: Any) -> None:
        self._text.raise_failed()
        kind = event.type
        if kind == "message_start":
            self.model = event.message.model or self.model
            self._merge_usage(event.message.usage)
        elif kind == "content_block_start":
            block = event.content_block
            if block.type == "text":
                self.texts[event.index] = [block.text] if block.text else []
                if block.text:
                    self._text.add(block.text)
            elif block.type == "tool_use":
                self.tools[event.index] = _ToolBlock(block.id, block.name, dict(block.input or {}), [])
                self.flush_text()  # the text before the call is shown before it
                self._emit(ToolCallStarted(block.id, block.name))
        elif kind == "content_block_delta":
            delta = event.delta
            if delta.type == "text_delta" and delta.text:
                self.texts.setdefault(event.index, []).append(delta.text)
                self._text.add(delta.text)
            elif delta.type == "input_json_delta" and event.index in self.tools:
                self.tools[event.index].chunks.append(delta.partial_json)
        elif kind == "message_delta":
            self.stop_reason = event.delta.stop_reason or self.stop_reason
            self._merge_usage(event.usage)
        elif kind == "message_stop":
            self.finished = True

    def response(self, price: ModelPrice | None) -> ModelResponse:
        calls = []
        for index in sorted(self.tools):
            block = self.tools[index]
            arguments, error = parse_tool_input("".join(block.chunks), block.initial)
            calls.append(ToolCall(block.id, block.name, arguments, error))
        usage = Usage(
            input_tokens=self.usage.get("input_tokens", 0),
            output_tokens=self.usage.get("output_tokens", 0),
            cache_read_tokens=self.usage.get("cache_read_input_tokens", 0),
            cache_creation_tokens=self.usage.get("cache_creation_input_tokens", 0),
        )
        text = "".join("".join(self.texts[i]) for i in sorted(self.texts))
        return ModelResponse(text, tuple(calls), self.stop_reason or "end_turn", usage,
                             cost_usd(usage, price), self.model)


class StreamCloser:
    """Closes the in-flight stream when the CancelToken fires (on the cancelling thread).

    ``Stream.close()`` alone closes the socket's file descriptor, which on Linux does
    not wake a ``recv`` blocked in another thread; shutting the socket down first does,
    and sends the FIN that tells the server the client is gone.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stream: Any = None
        self._cancelled = False

    def attach(self, stream: Any) -> None:
        with self._lock:
            self._stream = stream
            cancelled = self._cancelled
        if cancelled:  # cancelled while the request was in flight
            self.cancel()

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            stream = self._stream
        if stream is not None:
            _shutdown_socket(stream.response)
            stream.close()


def _shutdown_socket(response: httpx2.Response) -> None:
    network_stream = response.extensions.get("network_stream")
    sock = network_stream.get_extra_info("socket") if network_stream is not None else None
    if sock is None:
        return
    try:
        # socket.socket's own shutdown, not SSLSocket's (which drops its TLS state
        # under the reading thread's feet).
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass  # already closed
