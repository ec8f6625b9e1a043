"""The Ollama API wire format, as the stub server speaks it (pure functions and data).

Scripted turns (:class:`Turn`), the models table (:class:`StubModel`) and the JSON
bodies of ``/api/chat`` chunks, ``/api/tags``, ``/api/show`` and ``/api/ps``. No
sockets or threads here; :mod:`corvid_actors.testing.ollama_stub` serves them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from corvid_actors.core.jsontypes import JsonObject, JsonValue, WireJson

#: Fault kinds understood by ``OllamaStubServer.add_fault``.
FAULT_KINDS = frozenset(
    {"no_tools", "http_500", "http_503", "http_429", "drop_mid_stream", "context_length", "slow"}
)
#: Faults that answer with an HTTP error (or, after some chunks, an in-stream error line).
FAULT_STATUS: Mapping[str, int] = {
    "no_tools": 400,
    "http_500": 500,
    "http_503": 503,
    "http_429": 429,
    "context_length": 400,
}
#: Error texts, as a real server words them.
_FAULT_TEXT: Mapping[str, str] = {
    "http_500": (
        "model runner has unexpectedly stopped, this may be due to resource limitations "
        "or an internal error, check ollama server logs for details"
    ),
    "http_503": "server busy, please try again. maximum pending requests exceeded",
    "http_429": "too many requests",
    "context_length": "prompt too long; exceeded max context length by 512 tokens",
}
#: Ollama's timestamps are irrelevant to clients; a constant keeps recordings stable.
CREATED_AT = "2026-01-01T00:00:00Z"
SERVER_VERSION = "0.12.6"
#: Per-chunk delay of a "slow" fault when the test gives none.
SLOW_CHUNK_DELAY_S = 0.05
#: Rough prompt-token estimate for ``prompt_eval_count`` (chars per token).
_CHARS_PER_TOKEN = 4


@dataclass
class StubModel:
    """One model the stub pretends to have (``size_vram`` in bytes, for ``/api/ps``)."""

    parameter_size: str = "8.0B"
    context_length: int = 32768
    family: str = "llama"
    supports_tools: bool = True
    size_vram: int = 0
    #: ``/api/show`` lists the ``vision`` capability (the model takes images)
    supports_vision: bool = False


DEFAULT_MODELS: Mapping[str, StubModel] = {
    "llama3.1:8b": StubModel("8.0B", 131072, "llama"),
    "qwen3:8b": StubModel("8.2B", 40960, "qwen3"),
    "qwen2.5-coder:14b": StubModel("14.8B", 32768, "qwen2"),
    "gemma2:2b": StubModel("2.6B", 8192, "gemma2", supports_tools=False),
    "qwen2.5:0.5b": StubModel("494.03M", 32768, "qwen2"),
    "llava:7b": StubModel("7B", 4096, "llama", supports_tools=False, supports_vision=True),
}


@dataclass
class Turn:
    """One scripted answer to an ``/api/chat`` request.

    ``text`` is streamed in ``chunks`` pieces (None: one per word) with ``delay_s``
    before each; ``tool_calls`` follow as native calls. ``fault`` (one of
    :data:`FAULT_KINDS`) replaces or interrupts the answer: HTTP faults answer with
    ``status`` and ``{"error": error}``, or, with ``after_chunks`` > 0, stream that
    many chunks and then an in-stream error line; ``drop_mid_stream`` closes the
    socket after ``after_chunks`` chunks (``reset`` sends an RST instead of a FIN);
    ``slow`` is a plain reply with a per-chunk delay. ``thinking`` is streamed first,
    in the ``thinking`` field, as thinking models do. ``match``: see
    ``OllamaStubServer.add_turn``.
    """

    text: str = ""
    tool_calls: list[tuple[str, JsonObject]] = field(default_factory=list)
    chunks: int | None = None
    delay_s: float = 0.0
    match: str | None = None
    fault: str | None = None
    after_chunks: int = 0
    status: int | None = None
    error: str | None = None
    reset: bool = False
    done_reason: str = "stop"
    thinking: str = ""

    @property
    def http_fault(self) -> bool:
        """Does this turn answer with an error (status, or in-stream error line)?"""
        return self.fault in FAULT_STATUS

    def error_status(self) -> int:
        return self.status or FAULT_STATUS.get(self.fault or "", 500)

    def error_text(self, model: str) -> str:
        """The ``error`` field of the fault's answer."""
        if self.error is not None:
            return self.error
        if self.fault == "no_tools":
            return no_tools_text(model)
        return _FAULT_TEXT.get(self.fault or "", _FAULT_TEXT["http_500"])


def no_tools_text(model: str) -> str:
    """What Ollama answers (400) when tools are offered to a model without tool support."""
    return f"registry.ollama.ai/library/{model} does not support tools"


def split_chunks(text: str, chunks: int | None) -> list[str]:
    """``text`` as streamed pieces: one per word (keeping spaces) or ``chunks`` equal parts."""
    if not text:
        return []
    if chunks is None:
        words = text.split(" ")
        pieces = [w + " " for w in words[:-1]]
        return pieces + [words[-1]] if words[-1] else pieces
    count = max(1, min(chunks, len(text)))
    size, extra = divmod(len(text), count)
    pieces, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        pieces.append(text[start:end])
        start = end
    return pieces


def last_user_text(body: Mapping[str, WireJson]) -> str:
    """Content of the last ``user`` message of a chat request ("" if none)."""
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            return str(message.get("content") or "")
    return ""


# --- bodies ----------------------------------------------------------------------------


def _digest(name: str) -> str:
    return "sha256:" + hashlib.sha256(name.encode()).hexdigest()


def details(spec: StubModel) -> JsonObject:
    """The ``details`` object of tags, show and ps entries."""
    return {
        "parent_model": "",
        "format": "gguf",
        "family": spec.family,
        "families": [spec.family],
        "parameter_size": spec.parameter_size,
        "quantization_level": "Q4_K_M",
    }


def tags_body(models: Mapping[str, StubModel]) -> JsonObject:
    """``GET /api/tags``."""
    return {
        "models": [
            {
                "name": name,
                "model": name,
                "modified_at": CREATED_AT,
                "size": 1,
                "digest": _digest(name),
                "details": details(spec),
            }
            for name, spec in models.items()
        ]
    }


def ps_body(models: Mapping[str, StubModel], loaded: list[str]) -> JsonObject:
    """``GET /api/ps``: the ``loaded`` models that are in the table."""
    return {
        "models": [
            {
                "name": name,
                "model": name,
                "size": max(spec.size_vram, 1),
                "digest": _digest(name),
                "details": details(spec),
                "expires_at": CREATED_AT,
                "size_vram": spec.size_vram,
                "context_length": spec.context_length,
            }
            for name in loaded
            if (spec := models.get(name)) is not None
        ]
    }


def show_body(name: str, spec: StubModel) -> JsonObject:
    """``POST /api/show``: context length under ``<arch>.context_length`` as Ollama has it."""
    capabilities: list[JsonValue] = ["completion"]
    capabilities += (["tools"] if spec.supports_tools else []) + (["vision"] if spec.supports_vision else [])
    return {
        "modelfile": f"FROM {name}",
        "parameters": "stop <|im_end|>",
        "template": "{{ .Prompt }}",
        "details": details(spec),
        "model_info": {
            "general.architecture": spec.family,
            f"{spec.family}.context_length": spec.context_length,
            "general.parameter_count": 1,
        },
        "capabilities": capabilities,
        "modified_at": CREATED_AT,
    }


def chunk(model: str, message: JsonObject) -> JsonObject:
    """One streamed ``/api/chat`` line before the last."""
    return {"model": model, "created_at": CREATED_AT, "message": message, "done": False}


def tool_calls_message(turn: Turn) -> JsonObject:
    """The assistant message carrying a turn's native tool calls."""
    calls: list[JsonValue] = [{"function": {"name": n, "arguments": a}} for n, a in turn.tool_calls]
    return {"role": "assistant", "content": "", "tool_calls": calls}


def final_chunk(model: str, turn: Turn, body: Mapping[str, WireJson]) -> JsonObject:
    """The ``done: true`` line, with done_reason and token counts."""
    prompt_chars = sum(
        len(str(m.get("content") or "")) for m in body.get("messages") or [] if isinstance(m, dict)
    )
    return {
        "model": model,
        "created_at": CREATED_AT,
        "message": {"role": "assistant", "content": ""},
        "done": True,
        "done_reason": turn.done_reason,
        "total_duration": 1,
        "load_duration": 1,
        "prompt_eval_count": max(1, prompt_chars // _CHARS_PER_TOKEN),
        "prompt_eval_duration": 1,
        "eval_count": len(split_chunks(turn.text, turn.chunks)) + len(turn.tool_calls),
        "eval_duration": 1,
    }


def whole_answer(model: str, turn: Turn, body: Mapping[str, WireJson]) -> JsonObject:
    """The single object of a ``"stream": false`` chat."""
    message: JsonObject = {"role": "assistant", "content": turn.text}
    if turn.thinking:
        message["thinking"] = turn.thinking
    if turn.tool_calls:
        message["tool_calls"] = tool_calls_message(turn)["tool_calls"]
    return {**final_chunk(model, turn, body), "message": message}
