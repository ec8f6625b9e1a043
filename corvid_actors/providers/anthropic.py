"""The Anthropic provider: the Messages API through the official ``anthropic`` SDK.

One :meth:`AnthropicProvider.stream` call is one streamed ``POST /v1/messages`` with the
system prompt, the conversation and the tools. Text deltas and tool-call starts are
forwarded to the caller as they arrive; the result carries text, tool calls (arguments
accumulated per content block), stop reason, usage with cache tokens and the cost.

The SDK's own retries are off (``max_retries=0``): the runtime's loop retries, in
simulated time, and counts failures toward an outage. Every failure leaves this module as
a :class:`ProviderError` classified by :func:`classify_anthropic_error`
(see :mod:`corvid_actors.providers._anthropic_errors`). Request conversion lives in
``_anthropic_request``, stream reading in ``_anthropic_stream``, prices in
``_anthropic_pricing``.

Cancelling (``CancelToken.cancel()`` from the actor thread) shuts the socket down and
closes the stream, so the blocked read on the worker returns at once and the server sees
the client go away; the call then raises :class:`StreamCancelled`.

:meth:`AnthropicProvider.astream` is the same call on the runtime's I/O loop
(:mod:`corvid_actors.core.io_loop`) through ``anthropic.AsyncAnthropic`` (one client per provider
and loop, made on the loop); cancelling its task closes the stream at its current read.
"""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any

import anthropic
import httpx2

from corvid_actors.core.io_loop import IoLoop
from corvid_actors.core.vocabulary import CancelToken, StreamCancelled
from corvid_actors.providers._anthropic_errors import classify_anthropic_error
from corvid_actors.providers._anthropic_pricing import (
    ModelPrice,
    cost_usd,
    lookup_by_model,
)
from corvid_actors.providers._anthropic_request import to_anthropic_messages, to_anthropic_tools
from corvid_actors.providers._anthropic_stream import CallbackFailed, StreamCloser, TurnAccumulator
from corvid_actors.providers.base import (
    ErrorKind,
    ModelInfo,
    ModelRequest,
    ModelResponse,
    ProviderError,
    ProviderTraits,
    StreamCallback,
)

__all__ = ["AnthropicProvider", "ModelPrice", "classify_anthropic_error", "cost_usd"]

#: the stop reason with which the API says the model ran out of context window
CONTEXT_EXCEEDED_STOP_REASON = "model_context_window_exceeded"


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
        self._async_options: dict[str, Any] = {"api_key": api_key, "base_url": base_url, "max_retries": 0,
                                               **options}
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
        params = self._params(request)
        closer = StreamCloser()
        unregister = cancel.on_cancel(closer.cancel)
        turn = TurnAccumulator(request.model, on_event)
        try:
            stream = self._client.messages.create(**params)
            closer.attach(stream)
            with stream:
                for event in stream:
                    turn.feed(event)
                    cancel.raise_if_cancelled()
        except CallbackFailed as failed:
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
        return self._finish(turn, request)

    async def astream(self, request: ModelRequest, on_event: StreamCallback, cancel: CancelToken) -> ModelResponse:
        """:meth:`stream` as a coroutine on the runtime's I/O loop (see the module docstring)."""
        cancel.raise_if_cancelled()
        params = self._params(request)
        loop = IoLoop.current()
        own_client = loop is None  # a plain asyncio program awaiting astream itself
        client = self._new_async_client() if loop is None else loop.resource(
            ("anthropic", id(self)), self._new_async_client, _close_anthropic)
        # the text deltas of one network chunk are shown as one (see TurnAccumulator)
        turn = TurnAccumulator(request.model, on_event, soon=asyncio.get_running_loop().call_soon)
        try:
            stream = await client.messages.create(**params)
            async with stream:
                try:
                    async for event in stream:
                        turn.feed(event)
                        if cancel.cancelled:
                            raise StreamCancelled()
                finally:
                    turn.flush_text()  # every delta read is shown, however the stream ends
            turn.raise_failed()
        except asyncio.CancelledError:
            raise StreamCancelled() from None
        except CallbackFailed as failed:
            raise failed.original from None
        except StreamCancelled:
            raise
        except Exception as exc:
            if cancel.cancelled:
                raise StreamCancelled() from exc
            raise classify_anthropic_error(exc) from exc
        finally:
            if own_client:
                await client.close()
        cancel.raise_if_cancelled()
        return self._finish(turn, request)

    def _new_async_client(self) -> anthropic.AsyncAnthropic:
        # one per provider and I/O loop (its connection pool), made on the loop's thread
        return anthropic.AsyncAnthropic(**self._async_options)

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        """The Messages API arguments of one streamed call (sync and async alike)."""
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
        return params

    def _finish(self, turn: TurnAccumulator, request: ModelRequest) -> ModelResponse:
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


async def _close_anthropic(client: anthropic.AsyncAnthropic) -> None:
    await client.close()
