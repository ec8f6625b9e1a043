"""Ollama reply reading: one streamed ``/api/chat`` reply collected into a ModelResponse,
and the model facts read from ``/api/show``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import ollama

from corvid_actors.providers._deferred_text import DeferredText, Soon
from corvid_actors.providers._ollama_lean import ChatPart
from corvid_actors.providers.base import (
    ErrorKind,
    ModelInfo,
    ModelRequest,
    ModelResponse,
    ProviderError,
    StreamCallback,
    TextDelta,
    ToolCall,
    ToolCallStarted,
    Usage,
)
from corvid_actors.providers.text_tools import CallTextGate, parse_tool_calls, repair_native_call

_PARAMETERS_PER_BILLION = 1e9
_SIZE_SUFFIX_IN_BILLIONS = {"K": 1e-6, "M": 1e-3, "B": 1.0, "T": 1e3}


def parse_parameter_size(text: str | None) -> float | None:
    """``"14.8B"`` → 14.8, ``"500M"`` → 0.5 (billions of parameters); None if unreadable."""
    match = re.fullmatch(r"\s*([\d.]+)\s*([KMBT])?\s*", text or "", re.IGNORECASE)
    if match is None:
        return None
    try:
        value = float(match.group(1))
    except ValueError:
        return None
    return value * _SIZE_SUFFIX_IN_BILLIONS[(match.group(2) or "B").upper()]


class ReplyCollector:
    """Accumulates one streamed reply and streams its text; runs on the stream thread.

    In text-tools mode the text goes through a :class:`CallTextGate` so that call text
    is never shown, and the calls are parsed out at the end.

    ``soon`` (the I/O loop's ``call_soon``; not in text-tools mode) defers the text: the
    lines read in one network chunk (hundreds while the reader is behind the server) are
    shown as one ``TextDelta`` when the loop next runs its callbacks — right after this
    chunk, before the next read — instead of one per line. Anything else shown (a tool
    call, the end) shows the pending text first, so the order is kept and the text is the
    same; the owner calls :meth:`flush_text` when the stream ends early (an error, a
    cancel), so every line read is shown as before.
    """

    def __init__(self, request: ModelRequest, on_event: StreamCallback, *, text_mode: bool,
                 soon: Soon | None = None) -> None:
        self._request = request
        self._on_event = on_event
        self._gate = CallTextGate(on_event, [t.name for t in request.tools]) if text_mode else None
        self._text: list[str] = []
        # deferred (one delta per network chunk) only outside text-tools mode
        self._deferred = None if text_mode or soon is None else DeferredText(
            lambda text: on_event(TextDelta(text)), soon)
        self._thinking: list[str] = []
        self._calls: list[ToolCall] = []
        self._final: ollama.ChatResponse | None = None

    def _show(self, text: str) -> None:
        if self._gate is not None:
            self._gate.feed(text)
        else:
            self._on_event(TextDelta(text))

    def add(self, part: ChatPart) -> None:
        """Take one streamed line: the client's ``ChatResponse``, or a ``TextPart`` for a
        plain text line (``_ollama_lean``)."""
        deferred = self._deferred
        if deferred is not None:
            deferred.raise_failed()
        message = part.message  # (one line per streamed token: read each field once)
        content = message.content
        if content:
            self._text.append(content)
            if deferred is not None:
                deferred.add(content)
            elif self._gate is None:
                self._on_event(TextDelta(content))
            else:
                self._gate.feed(content)
        if message.thinking:
            self._thinking.append(message.thinking)
        for native in message.tool_calls or ():
            self.flush_text()  # the text before the call is shown before it
            # the client drops tool-call ids: number them per reply
            call = ToolCall(
                id=f"call_{len(self._calls)}",
                name=native.function.name,
                arguments=dict(native.function.arguments or {}),
            )
            self._calls.append(repair_native_call(call, self._request.tools))
            self._on_event(ToolCallStarted(self._calls[-1].id, self._calls[-1].name))
        if part.done and isinstance(part, ollama.ChatResponse):  # (a TextPart is never done)
            self._final = part

    def flush_text(self) -> None:
        """Show the text added since the last flush as one ``TextDelta`` (deferred mode;
        a no-op otherwise, or when nothing is pending)."""
        if self._deferred is not None:
            self._deferred.flush()

    def finish(self) -> ModelResponse:
        """The whole reply; a stream without its ``done`` line counts as a drop."""
        if self._deferred is not None:
            self._deferred.raise_failed()
        self.flush_text()
        final = self._final
        if final is None:
            raise ProviderError(ErrorKind.RETRYABLE, "ollama: stream ended before the final chunk")
        text = "".join(self._text)
        if not text and not self._calls and self._thinking:
            # some thinking models answer only in the thinking channel (reference §6)
            text = "".join(self._thinking)
            self._show(text)
        calls = list(self._calls)
        if self._gate is not None:
            parsed, text = parse_tool_calls(text, self._request.tools)
            for call in parsed:
                calls.append(
                    ToolCall(f"call_{len(calls)}", call.name, call.arguments, call.arguments_error)
                )
            self._gate.finish(text)
            for call in calls[len(self._calls) :]:
                self._on_event(ToolCallStarted(call.id, call.name))
        return ModelResponse(
            text=text,
            tool_calls=tuple(calls),
            stop_reason="tool_use" if calls else (final.done_reason or "stop"),
            usage=Usage(
                input_tokens=final.prompt_eval_count or 0, output_tokens=final.eval_count or 0
            ),
            model=final.model or self._request.model,
        )


def info_from_show(model: str, shown: ollama.ShowResponse, num_ctx: int) -> ModelInfo:
    details: Mapping[str, Any] = shown.modelinfo or {}
    arch = details.get("general.architecture")
    length = details.get(f"{arch}.context_length") if arch else None
    if length is None:
        length = next((v for k, v in details.items() if k.endswith(".context_length")), None)
    window = (
        min(int(length), num_ctx) if isinstance(length, int | float) and length > 0 else num_ctx
    )
    size = parse_parameter_size(shown.details.parameter_size if shown.details else None)
    count = details.get("general.parameter_count")
    if size is None and isinstance(count, int | float) and count > 0:
        size = count / _PARAMETERS_PER_BILLION
    capabilities = getattr(shown, "capabilities", None)
    vision = None if capabilities is None else "vision" in capabilities
    return ModelInfo(name=model, context_window=window, parameter_size_b=size, supports_images=vision)
