"""The Ollama provider, through the official ``ollama`` client.

Every call builds its own :class:`ollama.Client` (and so its own httpx connection
pool) on an :class:`AbortableTransport` (module ``_ollama_transport``), because the client's streaming generator
cannot be closed from another thread while it is being iterated: a stop shuts the
response's socket down from the cancelling thread, the blocked read returns, and the
server sees the disconnect and stops generating.

Errors are classified once, in :func:`classify_ollama_error` (module
``_ollama_errors``), which knows every exception type the client lets through.
"""

from __future__ import annotations

import base64
import binascii
import re
import threading
from collections.abc import Mapping
from typing import Any

import ollama
from loguru import logger

from corvid_actors.providers._ollama_errors import classify_ollama_error, classify_text
from corvid_actors.providers._ollama_transport import AbortableTransport, shared_ssl_context
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
from corvid_actors.providers.text_tools import (
    DEFAULT_TEXT_TOOL_FAMILIES,
    CallTextGate,
    format_tool_calls,
    parse_tool_calls,
    repair_native_call,
    tool_instructions,
    uses_text_tools,
    wrap_tool_output,
)
from corvid_actors.vocabulary import CancelToken, StreamCancelled, ToolSpec

# --- request building ------------------------------------------------------------------


def _ollama_tool(spec: ToolSpec) -> dict[str, Any]:
    """A tool in the shape the client validates (it keeps only these fields anyway)."""
    params = spec.parameters or {}
    properties: dict[str, Any] = {}
    for key, prop in (params.get("properties") or {}).items():
        prop = prop if isinstance(prop, Mapping) else {}
        kept = {k: prop[k] for k in ("type", "items", "enum") if k in prop}
        if isinstance(prop.get("description"), str):
            kept["description"] = prop["description"]
        properties[key] = kept
    function: dict[str, Any] = {
        "name": spec.name,
        "description": spec.description,
        "parameters": {"type": "object", "properties": properties},
    }
    if params.get("required"):
        function["parameters"]["required"] = list(params["required"])
    return {"type": "function", "function": function}


def build_messages(request: ModelRequest, *, text_tools: bool, images: bool = False) -> list[dict[str, Any]]:
    """Our conversation as Ollama chat messages.

    Multimodal user messages send their text parts; with ``images`` (the model has the
    ``vision`` capability) their base64 images go in the message's ``images`` field too
    (Ollama cannot fetch ``url`` images: those are left out).

    Native mode: assistant ``tool_calls`` and ``tool`` messages with ``tool_name`` (the
    client drops ids, so results pair with calls by order and name). Text-tools mode:
    the tool instructions join the system prompt, calls are replayed as the JSON array
    the model was asked to write, and consecutive results become one user message of
    ``«tool_output»`` blocks.
    """
    system = request.system
    if text_tools and request.tools:
        system = (system + "\n\n" if system else "") + tool_instructions(request.tools)
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    merging_results = False
    for message in request.messages:
        if message.role == "tool" and text_tools:
            wrapped = wrap_tool_output(
                message.tool_name or "tool", message.content, is_error=message.is_error
            )
            if merging_results:
                out[-1]["content"] += "\n\n" + wrapped
            else:
                out.append({"role": "user", "content": wrapped})
            merging_results = True
            continue
        merging_results = False
        if message.role == "tool":
            out.append(
                {"role": "tool", "content": message.content, "tool_name": message.tool_name or ""}
            )
        elif message.role == "assistant" and message.tool_calls:
            out.append(_assistant_with_calls(message, text_tools=text_tools))
        else:
            entry: dict[str, Any] = {"role": message.role, "content": message.content}
            attached = _base64_images(message) if images else []
            if attached:
                entry["images"] = attached
            out.append(entry)
    return out


def _base64_images(message: ChatMessage) -> list[ollama.Image]:
    out = []
    for block in message.blocks:
        source = block.get("source") or {}
        if block.get("type") != "image" or source.get("type") != "base64":
            continue
        try:
            raw = base64.b64decode(source.get("data", ""), validate=True)
        except (binascii.Error, ValueError):
            logger.warning("an image block with invalid base64 data was left out of the Ollama request")
            continue
        out.append(ollama.Image(value=raw))
    return out


def _assistant_with_calls(message: ChatMessage, *, text_tools: bool) -> dict[str, Any]:
    if text_tools:
        content = (message.content + "\n" if message.content else "") + format_tool_calls(
            message.tool_calls
        )
        return {"role": "assistant", "content": content}
    calls = [{"function": {"name": c.name, "arguments": c.arguments}} for c in message.tool_calls]
    return {"role": "assistant", "content": message.content, "tool_calls": calls}


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


class _ReplyCollector:
    """Accumulates one streamed reply and streams its text; runs on the stream thread.

    In text-tools mode the text goes through a :class:`CallTextGate` so that call text
    is never shown, and the calls are parsed out at the end.
    """

    def __init__(self, request: ModelRequest, on_event: StreamCallback, *, text_mode: bool) -> None:
        self._request = request
        self._on_event = on_event
        self._gate = CallTextGate(on_event, [t.name for t in request.tools]) if text_mode else None
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._calls: list[ToolCall] = []
        self._final: ollama.ChatResponse | None = None

    def _show(self, text: str) -> None:
        if self._gate is not None:
            self._gate.feed(text)
        else:
            self._on_event(TextDelta(text))

    def add(self, part: ollama.ChatResponse) -> None:
        """Take one streamed line."""
        if part.message.content:
            self._text.append(part.message.content)
            self._show(part.message.content)
        if part.message.thinking:
            self._thinking.append(part.message.thinking)
        for native in part.message.tool_calls or ():
            # the client drops tool-call ids: number them per reply
            call = ToolCall(
                id=f"call_{len(self._calls)}",
                name=native.function.name,
                arguments=dict(native.function.arguments or {}),
            )
            self._calls.append(repair_native_call(call, self._request.tools))
            self._on_event(ToolCallStarted(self._calls[-1].id, self._calls[-1].name))
        if part.done:
            self._final = part

    def finish(self) -> ModelResponse:
        """The whole reply; a stream without its ``done`` line counts as a drop."""
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


# --- the provider ----------------------------------------------------------------------


class OllamaProvider:
    """Streams chat turns from an Ollama server; see the module docstring.

    ``num_ctx``/``num_predict``/``keep_alive`` are sent with every chat request
    (``request.max_tokens`` overrides ``num_predict``). ``request_timeout_s`` is
    httpx's per-operation timeout (so, for a stream, the longest silence between
    chunks); ``None`` waits for ever and relies on cancellation. ``probe_timeout_s``
    bounds the health, model-info and listing calls. All methods block: call them on a
    worker thread. The instance holds no connection, so one may serve many threads.
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
    ) -> None:
        self.host = host
        self.num_ctx = num_ctx
        self.num_predict = num_predict
        self.keep_alive = keep_alive
        self.text_tool_families = text_tool_families
        self.request_timeout_s = request_timeout_s
        self.probe_timeout_s = probe_timeout_s
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
        client = ollama.Client(host=self.host, timeout=self.request_timeout_s, transport=transport)
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

    def _run_chat(
        self,
        client: ollama.Client,
        request: ModelRequest,
        on_event: StreamCallback,
        text_mode: bool,
    ) -> ModelResponse:
        native_tools = request.tools and not text_mode
        reply = _ReplyCollector(request, on_event, text_mode=text_mode)
        for part in client.chat(
            model=request.model,
            messages=build_messages(request, text_tools=text_mode, images=self._takes_images(request)),
            tools=[_ollama_tool(t) for t in request.tools] if native_tools else None,
            stream=True,
            options={
                "num_ctx": self.num_ctx,
                "num_predict": request.max_tokens or self.num_predict,
            },
            keep_alive=self.keep_alive,
        ):
            reply.add(part)
        return reply.finish()

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
        info = _info_from_show(model, shown, self.num_ctx)
        with self._info_lock:
            self._info_cache[model] = info
        return info


def _info_from_show(model: str, shown: ollama.ShowResponse, num_ctx: int) -> ModelInfo:
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


__all__ = [
    "OllamaProvider",
    "build_messages",
    "classify_ollama_error",
    "classify_text",
    "parse_parameter_size",
]
