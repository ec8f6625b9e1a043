"""The Anthropic provider: the Messages API through the official ``anthropic`` SDK.

One :meth:`AnthropicProvider.stream` call is one streamed ``POST /v1/messages`` with the
system prompt, the conversation and the tools. Text deltas and tool-call starts are
forwarded to the caller as they arrive; the result carries text, tool calls (arguments
accumulated per content block), stop reason, usage with cache tokens and the cost.

The SDK's own retries are off (``max_retries=0``): the runtime's loop retries, in
simulated time, and counts failures toward an outage. Every failure leaves this module as
a :class:`ProviderError` classified by :func:`classify_anthropic_error`
(see :mod:`corvid_actors.providers._anthropic_errors`).

Cancelling (``CancelToken.cancel()`` from the actor thread) shuts the socket down and
closes the stream, so the blocked read on the worker returns at once and the server sees
the client go away; the call then raises :class:`StreamCancelled`.
"""

from __future__ import annotations

import copy
import json
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx2

from corvid_actors.providers._anthropic_errors import classify_anthropic_error
from corvid_actors.providers.base import (
    ChatMessage,
    ErrorKind,
    ModelInfo,
    ModelRequest,
    ModelResponse,
    ProviderError,
    ProviderTraits,
    StreamCallback,
    TextDelta,
    ToolCall,
    ToolCallStarted,
    Usage,
)
from corvid_actors.vocabulary import CancelToken, StreamCancelled, ToolSpec

__all__ = ["AnthropicProvider", "ModelPrice", "classify_anthropic_error", "cost_usd"]

_TOKENS_PER_PRICE_UNIT = 1_000_000
#: the stop reason with which the API says the model ran out of context window
CONTEXT_EXCEEDED_STOP_REASON = "model_context_window_exceeded"


@dataclass(frozen=True)
class ModelPrice:
    """USD per million tokens, by kind of token (a row of the config price table)."""

    input_per_mtok: float
    output_per_mtok: float
    cache_read_per_mtok: float = 0.0
    cache_write_per_mtok: float = 0.0


def cost_usd(usage: Usage, price: ModelPrice | None) -> float:
    """What ``usage`` costs at ``price`` (0.0 when the model has no price)."""
    if price is None:
        return 0.0
    return (
        usage.input_tokens * price.input_per_mtok
        + usage.output_tokens * price.output_per_mtok
        + usage.cache_read_tokens * price.cache_read_per_mtok
        + usage.cache_creation_tokens * price.cache_write_per_mtok
    ) / _TOKENS_PER_PRICE_UNIT


def lookup_by_model(table: Mapping[str, Any], model: str) -> Any | None:
    """``table[model]``, else the entry of the longest key that prefixes ``model``.

    So a table keyed ``claude-sonnet-4-5`` also prices ``claude-sonnet-4-5-20250929``.
    """
    if model in table:
        return table[model]
    keys = [k for k in table if model.startswith(k)]
    return table[max(keys, key=len)] if keys else None


# --- request conversion (pure) ---------------------------------------------------------


def to_anthropic_messages(messages: tuple[ChatMessage, ...]) -> tuple[list[dict[str, Any]], str]:
    """Convert our conversation to Messages API ``messages``, plus extra system text.

    Assistant tool calls become ``tool_use`` blocks (ids kept); consecutive tool results
    and the user text after them form one user message (``tool_result`` blocks first, as
    the API requires). ``system``-role entries have no place in ``messages``: their text
    is returned to be appended to the system prompt.
    """
    out: list[dict[str, Any]] = []
    extra_system: list[str] = []
    for message in messages:
        if message.role == "system":
            extra_system.append(message.content)
            continue
        if message.role == "assistant":
            blocks: list[dict[str, Any]] = []
            if message.content:
                blocks.append({"type": "text", "text": message.content})
            blocks += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)}
                for c in message.tool_calls
            ]
            if blocks:  # the API rejects an empty assistant turn
                out.append({"role": "assistant", "content": blocks})
            continue
        if message.role == "tool":
            blocks = [{"type": "tool_result", "tool_use_id": message.tool_call_id or "",
                       "content": message.content, "is_error": message.is_error}]
        elif message.blocks:
            # multimodal user content goes as given: text and image blocks, in order
            blocks = [copy.deepcopy(b) for b in message.blocks]
        else:
            blocks = [{"type": "text", "text": message.content}]
        if out and out[-1]["role"] == "user":
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": "user", "content": blocks})
    return out, "\n\n".join(extra_system)


def to_anthropic_tools(tools: tuple[ToolSpec, ...]) -> list[dict[str, Any]]:
    """Our tool specs as Messages API tool definitions."""
    return [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools]


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


# --- streaming -------------------------------------------------------------------------


class _CallbackFailed(Exception):
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


class _TurnAccumulator:
    """Folds raw stream events into a :class:`ModelResponse` (one per call)."""

    def __init__(self, model: str, on_event: StreamCallback) -> None:
        self.model = model
        self.on_event = on_event
        self.texts: dict[int, list[str]] = {}
        self.tools: dict[int, _ToolBlock] = {}
        self.usage: dict[str, int] = {}
        self.stop_reason: str | None = None
        self.finished = False

    def _emit(self, event: TextDelta | ToolCallStarted) -> None:
        try:
            self.on_event(event)
        except Exception as exc:
            raise _CallbackFailed(exc) from exc

    def _merge_usage(self, usage: Any) -> None:
        # message_delta usage is cumulative and may omit fields: keep the latest non-null.
        for name in ("input_tokens", "output_tokens", "cache_read_input_tokens",
                     "cache_creation_input_tokens"):
            value = getattr(usage, name, None)
            if value is not None:
                self.usage[name] = value

    def feed(self, event: Any) -> None:
        kind = event.type
        if kind == "message_start":
            self.model = event.message.model or self.model
            self._merge_usage(event.message.usage)
        elif kind == "content_block_start":
            block = event.content_block
            if block.type == "text":
                self.texts[event.index] = [block.text] if block.text else []
                if block.text:
                    self._emit(TextDelta(block.text))
            elif block.type == "tool_use":
                self.tools[event.index] = _ToolBlock(block.id, block.name, dict(block.input or {}), [])
                self._emit(ToolCallStarted(block.id, block.name))
        elif kind == "content_block_delta":
            delta = event.delta
            if delta.type == "text_delta" and delta.text:
                self.texts.setdefault(event.index, []).append(delta.text)
                self._emit(TextDelta(delta.text))
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


class _StreamCloser:
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


# --- the provider ----------------------------------------------------------------------


class AnthropicProvider:
    """The :class:`~corvid_actors.providers.base.Provider` for Anthropic's Messages API.

    ``prices`` and ``context_windows`` are the config tables, keyed by model name (or
    a prefix of it). ``timeout_s`` None keeps the SDK's default timeout;
    ``health_timeout_s`` bounds the health probe. ``http_client`` injects a shared
    ``httpx2.Client`` (connection pool, proxies); the provider never closes a client it
    did not create. Thread-safe: every method may run on any worker thread.
    """

    name = "anthropic"
    #: a hosted API: no local slots; sessions get pseudo-PIDs from supervisor.sdk_pid_base
    traits = ProviderTraits(uses_slots=False, pid_kind="sdk")

    def __init__(
        self,
        api_key: str,
        *,
        base_url: str | None = None,
        max_tokens: int = 8192,
        prices: Mapping[str, ModelPrice] | None = None,
        context_windows: Mapping[str, int] | None = None,
        default_context_window: int = 200_000,
        timeout_s: float | None = None,
        health_timeout_s: float = 10.0,
        http_client: httpx2.Client | None = None,
    ) -> None:
        self.max_tokens = max_tokens
        self.prices = dict(prices or {})
        self.context_windows = dict(context_windows or {})
        self.default_context_window = default_context_window
        self.health_timeout_s = health_timeout_s
        options: dict[str, Any] = {} if timeout_s is None else {"timeout": timeout_s}
        # The loop owns retries (simulated time, outage counting): the SDK must not retry.
        self._client = anthropic.Anthropic(api_key=api_key, base_url=base_url, max_retries=0,
                                           http_client=http_client, **options)
        self._owns_http_client = http_client is None
        self._info_lock = threading.Lock()
        self._info_cache: dict[str, ModelInfo] = {}

    def close(self) -> None:
        """Release the HTTP connection pool (unless it was injected)."""
        if self._owns_http_client:
            self._client.close()

    def stream(self, request: ModelRequest, on_event: StreamCallback, cancel: CancelToken) -> ModelResponse:
        """One streamed Messages API call (see :class:`Provider`)."""
        cancel.raise_if_cancelled()
        messages, extra_system = to_anthropic_messages(request.messages)
        system = "\n\n".join(s for s in (request.system, extra_system) if s)
        params: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_tokens or self.max_tokens,
            "messages": messages,
            "stream": True,
        }
        if system:
            params["system"] = system
        if request.tools:
            params["tools"] = to_anthropic_tools(request.tools)
        closer = _StreamCloser()
        unregister = cancel.on_cancel(closer.cancel)
        turn = _TurnAccumulator(request.model, on_event)
        try:
            stream = self._client.messages.create(**params)
            closer.attach(stream)
            with stream:
                for event in stream:
                    turn.feed(event)
                    cancel.raise_if_cancelled()
        except _CallbackFailed as failed:
            raise failed.original from None
        except StreamCancelled:
            raise
        except Exception as exc:
            if cancel.cancelled:  # the read failed because we closed the stream
                raise StreamCancelled() from exc
            raise classify_anthropic_error(exc) from exc
        finally:
            unregister()
        cancel.raise_if_cancelled()
        if turn.stop_reason == CONTEXT_EXCEEDED_STOP_REASON:
            raise ProviderError(
                ErrorKind.CONTEXT_OVERFLOW,
                f"{request.model} filled its context window mid-reply; compact or trim the conversation",
                error_type=CONTEXT_EXCEEDED_STOP_REASON,
            )
        if not turn.finished:
            raise ProviderError(ErrorKind.RETRYABLE, "Anthropic stream ended before message_stop")
        return turn.response(lookup_by_model(self.prices, turn.model) or lookup_by_model(self.prices, request.model))

    def health(self) -> bool:
        """True iff the API answers with any status below 500 (the seed's probe: POST {})."""
        try:
            self._client.post("/v1/messages", body={}, cast_to=httpx2.Response,
                              options={"timeout": self.health_timeout_s})
        except anthropic.APIStatusError as exc:
            return exc.status_code < 500
        except (anthropic.APIError, httpx2.HTTPError, OSError):
            return False
        return True

    def model_info(self, model: str) -> ModelInfo:
        """Context window from the config table, else the Models API, else the default.

        Answers from the API (and 404s) are cached; a failed lookup is not, so a
        later call retries it.
        """
        window = lookup_by_model(self.context_windows, model)
        if window is not None:
            return ModelInfo(model, int(window))
        with self._info_lock:
            cached = self._info_cache.get(model)
        if cached is not None:
            return cached
        try:
            found = self._client.models.retrieve(model, timeout=self.health_timeout_s).max_input_tokens
        except anthropic.NotFoundError:
            found = None
        except (anthropic.APIError, httpx2.HTTPError, OSError):
            return ModelInfo(model, self.default_context_window)
        info = ModelInfo(model, found or self.default_context_window)
        with self._info_lock:
            self._info_cache[model] = info
        return info
