"""The Ollama provider, through the official ``ollama`` client.

Every call builds its own :class:`ollama.Client` (and so its own httpx connection
pool) on an :class:`AbortableTransport` (module ``_ollama_transport``), because the client's streaming generator
cannot be closed from another thread while it is being iterated: a stop shuts the
response's socket down from the cancelling thread, the blocked read returns, and the
server sees the disconnect and stops generating.

:meth:`OllamaProvider.astream` is the same call on the runtime's I/O loop
(:mod:`corvid_actors.core.io_loop`) through ``ollama.AsyncClient``: one client (one connection
pool) per provider and loop, made on the loop; cancelling the task closes the stream at
its current read, so the server sees the disconnect. The lines of one network chunk reach
``on_event`` as one ``TextDelta`` (``ReplyCollector``'s deferred mode): per line, only the
client's parse is paid — and for a plain text line not even its pydantic model: both chat
clients are the ``_ollama_lean`` subclasses, which read such a line into a slotted
``TextPart`` (every other line is the client's own ``ChatResponse``).

Request building lives in ``_ollama_request``, reply reading in ``_ollama_reply``.
Errors are classified once, in :func:`classify_ollama_error` (module
``_ollama_errors``), which knows every exception type the client lets through.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import ollama
from loguru import logger

from corvid_actors.core.io_loop import IoLoop
from corvid_actors.core.vocabulary import CancelToken, StreamCancelled
from corvid_actors.providers._ollama_errors import classify_ollama_error, classify_text
from corvid_actors.providers._ollama_lean import LeanAsyncChatClient, LeanChatClient
from corvid_actors.providers._ollama_reply import (
    ReplyCollector,
    info_from_show,
    parse_parameter_size,
)
from corvid_actors.providers._ollama_request import build_messages, ollama_tool
from corvid_actors.providers._ollama_transport import AbortableTransport, shared_ssl_context
from corvid_actors.providers.base import (
    ModelInfo,
    ModelRequest,
    ModelResponse,
    ProviderError,
    ProviderTraits,
    StreamCallback,
)
from corvid_actors.providers.text_tools import DEFAULT_TEXT_TOOL_FAMILIES, uses_text_tools

#: idle connections the async client keeps open for the next call
ASYNC_KEEPALIVE = 64


class OllamaProvider:
    """Streams chat turns from an Ollama server; see the module docstring.

    ``num_ctx``/``num_predict``/``keep_alive`` are sent with every chat request
    (``request.max_tokens`` overrides ``num_predict``). ``request_timeout_s`` is
    httpx's per-operation timeout (so, for a stream, the longest silence between
    chunks); ``None`` waits for ever and relies on cancellation. ``probe_timeout_s``
    bounds the health, model-info and listing calls. ``max_connections`` caps the async
    client's pool (None: no cap); a stream beyond it waits for a free connection, so keep
    it at or above the calls that run at once (the runtime's default provider gets
    ``[providers] ollama_max_connections``, raised to ``[slots] max_parallel``). All
    methods block: call them on a worker thread. The instance holds no connection, so one
    may serve many threads.
    """

    name = "ollama"
    #: a local model server: sessions wait for a slot; pseudo-PIDs from direct_pid_base
    traits = ProviderTraits(uses_slots=True, pid_kind="direct")

    def __init__(
        self,
        host: str,
        *,
        num_ctx: int = 8192,
        num_predict: int = 2048,
        keep_alive: str | None = "5m",
        text_tool_families: tuple[str, ...] = DEFAULT_TEXT_TOOL_FAMILIES,
        request_timeout_s: float | None = None,
        probe_timeout_s: float = 3.0,
        max_connections: int | None = None,
    ) -> None:
        self.host = host
        self.num_ctx = num_ctx
        self.num_predict = num_predict
        self.keep_alive = keep_alive
        self.text_tool_families = text_tool_families
        self.request_timeout_s = request_timeout_s
        self.probe_timeout_s = probe_timeout_s
        self.max_connections = max_connections
        self._info_lock = threading.Lock()
        self._info_cache: dict[str, ModelInfo] = {}

    def uses_text_tools(self, model: str) -> bool:
        """True when ``model`` is offered tools through the prompt, not natively."""
        return uses_text_tools(model, self.text_tool_families)

    # -- chat ------------------------------------------------------------------------

    def stream(
        self, request: ModelRequest, on_event: StreamCallback, cancel: CancelToken
    ) -> ModelResponse:
        """Stream one ``/api/chat`` turn; see :meth:`Provider.stream`."""
        cancel.raise_if_cancelled()
        text_mode = bool(request.tools) and self.uses_text_tools(request.model)
        transport = AbortableTransport()
        client = self._new_chat_client(transport)
        unregister = cancel.on_cancel(transport.abort)
        try:
            return self._run_chat(client, request, on_event, text_mode)
        except ProviderError:
            if cancel.cancelled:
                raise StreamCancelled() from None
            raise
        except Exception as exc:
            if cancel.cancelled:
                raise StreamCancelled() from exc
            error = classify_ollama_error(exc)
            logger.bind(model=request.model, kind=error.kind.value).debug(
                "ollama call failed: {}", error.message
            )
            raise error from exc
        finally:
            unregister()
            client.close()

    def _new_chat_client(self, transport: AbortableTransport) -> ollama.Client:
        # one per call (see the module docstring); the lean client for the per-line parse
        return LeanChatClient(host=self.host, timeout=self.request_timeout_s, transport=transport)

    def _chat_args(self, request: ModelRequest, text_mode: bool, images: bool) -> dict[str, Any]:
        """The ``chat`` arguments of one turn (the same for the sync and async clients)."""
        native_tools = request.tools and not text_mode
        return {
            "model": request.model,
            "messages": build_messages(request, text_tools=text_mode, images=images),
            "tools": [ollama_tool(t) for t in request.tools] if native_tools else None,
            "stream": True,
            "options": {"num_ctx": self.num_ctx, "num_predict": request.max_tokens or self.num_predict},
            "keep_alive": self.keep_alive,
        }

    def _run_chat(
        self,
        client: ollama.Client,
        request: ModelRequest,
        on_event: StreamCallback,
        text_mode: bool,
    ) -> ModelResponse:
        reply = ReplyCollector(request, on_event, text_mode=text_mode)
        for part in client.chat(**self._chat_args(request, text_mode, self._takes_images(request))):
            reply.add(part)
        return reply.finish()

    async def astream(
        self, request: ModelRequest, on_event: StreamCallback, cancel: CancelToken
    ) -> ModelResponse:
        """:meth:`stream` as a coroutine on the runtime's I/O loop (see the module
        docstring). Cancelling its task (or ``cancel``) closes the stream and raises
        :class:`StreamCancelled`; failures are classified as in :meth:`stream`."""
        cancel.raise_if_cancelled()
        text_mode = bool(request.tools) and self.uses_text_tools(request.model)
        images = False
        if any(m.blocks for m in request.messages):  # rare: /api/show, on a thread, cached
            images = await asyncio.get_running_loop().run_in_executor(None, self._takes_images, request)
        loop = IoLoop.current()
        own_client = loop is None  # a plain asyncio program awaiting astream itself
        client = self._new_async_client() if loop is None else loop.resource(
            ("ollama", id(self)), self._new_async_client, _close_ollama)
        # the lines of one network chunk are shown as one delta (see ReplyCollector)
        reply = ReplyCollector(request, on_event, text_mode=text_mode, soon=asyncio.get_running_loop().call_soon)
        try:
            stream: Any = await client.chat(**self._chat_args(request, text_mode, images))
            try:
                async for part in stream:
                    reply.add(part)
                    if cancel.cancelled:
                        raise StreamCancelled()
            finally:
                reply.flush_text()  # every line read is shown, however the stream ends
                await stream.aclose()  # leaves the response's ``async with``: the socket is closed
            return reply.finish()
        except asyncio.CancelledError:
            raise StreamCancelled() from None
        except ProviderError:
            if cancel.cancelled:
                raise StreamCancelled() from None
            raise
        except StreamCancelled:
            raise
        except Exception as exc:
            if cancel.cancelled:
                raise StreamCancelled() from exc
            error = classify_ollama_error(exc)
            logger.bind(model=request.model, kind=error.kind.value).debug("ollama call failed: {}", error.message)
            raise error from exc
        finally:
            if own_client:
                await client.close()

    def _new_async_client(self) -> ollama.AsyncClient:
        # One per provider and I/O loop (its connection pool), made on the loop's thread.
        # Capped when asked (issue 37): httpcore walks every connection of the pool on each
        # request, so an unbounded pool makes every call cost more as it grows. Never below
        # the calls that run at once (the runtime raises the cap to the slot pool's size):
        # with 1,000 streams through a pool of 256 the e2e test of 1,000 concurrent streams
        # did not finish; and not httpx's default of 100, whose pool timeout is the request
        # timeout.
        keepalive = ASYNC_KEEPALIVE if self.max_connections is None else min(ASYNC_KEEPALIVE, self.max_connections)
        return LeanAsyncChatClient(host=self.host, timeout=self.request_timeout_s,
                                   limits=httpx.Limits(max_connections=self.max_connections,
                                                       max_keepalive_connections=keepalive))

    def _takes_images(self, request: ModelRequest) -> bool:
        """Send images only to a model whose ``/api/show`` lists ``vision`` (others get
        the text parts; a text model given images fails the whole call)."""
        if not any(m.blocks for m in request.messages):
            return False
        return self.model_info(request.model).supports_images is True

    # -- probes ----------------------------------------------------------------------

    def _probe_client(self) -> ollama.Client:
        return ollama.Client(
            host=self.host, timeout=self.probe_timeout_s, verify=shared_ssl_context()
        )

    def health(self) -> bool:
        """True iff the server answers ``/api/tags`` within ``probe_timeout_s`` with a status
        below 500 (the original's probe rule: a 4xx means the server is up)."""
        try:
            with self._probe_client() as client:
                client.list()
        except ollama.ResponseError as exc:
            logger.debug("ollama health probe answered {}: {}", exc.status_code, exc)
            return 0 < exc.status_code < 500
        except Exception as exc:  # noqa: BLE001 - any other failure means "not healthy"
            logger.debug("ollama health probe failed: {}", exc)
            return False
        return True

    def list_models(self) -> list[str]:
        """Names of the models the server has (``/api/tags``); raises ProviderError."""
        try:
            with self._probe_client() as client:
                return [m.model for m in client.list().models if m.model]
        except Exception as exc:
            raise classify_ollama_error(exc) from exc

    def loaded_vram_bytes(self) -> int:
        """Sum of ``size_vram`` over loaded models (``/api/ps``); raises ProviderError."""
        try:
            with self._probe_client() as client:
                return sum(int(m.size_vram or 0) for m in client.ps().models)
        except Exception as exc:
            raise classify_ollama_error(exc) from exc

    def model_info(self, model: str) -> ModelInfo:
        """Context budget and size from ``/api/show``, cached per model.

        The budget is ``min(model's context_length, num_ctx)``: the server silently
        truncates prompts at ``num_ctx``. If ``/api/show`` fails the answer is
        ``num_ctx`` and an unknown size, and it is not cached (retry next time).
        """
        with self._info_lock:
            cached = self._info_cache.get(model)
        if cached is not None:
            return cached
        try:
            with self._probe_client() as client:
                shown = client.show(model)
        except Exception as exc:  # noqa: BLE001 - fall back, as the seed does
            logger.bind(model=model).debug("ollama /api/show failed, using num_ctx: {}", exc)
            return ModelInfo(name=model, context_window=self.num_ctx, parameter_size_b=None)
        info = info_from_show(model, shown, self.num_ctx)
        with self._info_lock:
            self._info_cache[model] = info
        return info


async def _close_ollama(client: ollama.AsyncClient) -> None:
    await client.close()


__all__ = [
    "OllamaProvider",
    "build_messages",
    "classify_ollama_error",
    "classify_text",
    "parse_parameter_size",
]
