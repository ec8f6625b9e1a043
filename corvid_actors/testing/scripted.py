"""A scripted model provider for simulations: replies, streamed deltas, errors, outages,
health-probe results and latency in simulated time.

Turns are queued and consumed in order by model calls. A turn may be tied to a
conversation with ``match``: it is used only by a call whose last user message
contains that text, which lets concurrent sessions be scripted independently. With no
scripted turn left, the provider answers ``default_reply``.

    provider = ScriptedProvider(clock)
    provider.reply("Hello!", deltas=3, latency_s=2.0)
    provider.crash("model server fell over")       # exit 1: chat sessions restart
    provider.outage("connection refused")          # the session pauses
    provider.health_results = [False, True]        # first probe fails, then healthy
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from corvid_actors.clock import Clock
from corvid_actors.providers.base import (
    CancelToken,
    ErrorKind,
    ModelInfo,
    ModelRequest,
    ModelResponse,
    ProviderError,
    StreamCallback,
    StreamCancelled,
    TextDelta,
    ToolCall,
    Usage,
)


@dataclass
class ScriptedTurn:
    """One scripted model call: a reply, or an error to raise."""

    text: str = ""
    deltas: int = 1
    latency_s: float = 0.0
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    error: BaseException | None = None
    match: str | None = None
    stop_reason: str = "end_turn"


class ScriptedProvider:
    """See the module docstring. Thread-safe: sessions call it from their workers."""

    name = "scripted"

    def __init__(self, clock: Clock | None = None, *, default_reply: str = "ok",
                 context_window: int = 8192, name: str = "scripted") -> None:
        self.clock = clock
        self.name = name
        self.default_reply = default_reply
        self.context_window = context_window
        self.responder: Callable[[ModelRequest], ScriptedTurn | None] | None = None
        #: health-probe answers: a bool for all probes, or a list consumed in order
        #: (its last value repeats)
        self.health_results: bool | list[bool] = True
        self.requests: list[ModelRequest] = []
        self.health_probes = 0
        self._turns: list[ScriptedTurn] = []
        self._lock = threading.Lock()

    # --- scripting ----------------------------------------------------------------------

    def add(self, turn: ScriptedTurn) -> ScriptedProvider:
        with self._lock:
            self._turns.append(turn)
        return self

    def reply(self, text: str, *, deltas: int = 1, latency_s: float = 0.0, match: str | None = None,
              usage: Usage | None = None, cost_usd: float = 0.0,
              tool_calls: Iterable[ToolCall] = ()) -> ScriptedProvider:
        return self.add(ScriptedTurn(text=text, deltas=deltas, latency_s=latency_s, match=match,
                                     usage=usage or Usage(), cost_usd=cost_usd, tool_calls=tuple(tool_calls),
                                     stop_reason="tool_use" if tool_calls else "end_turn"))

    def tool_call(self, name: str, arguments: dict[str, Any], *, text: str = "", call_id: str | None = None,
                  match: str | None = None) -> ScriptedProvider:
        with self._lock:
            n = len(self.requests) + len(self._turns)
        return self.reply(text, match=match, tool_calls=[ToolCall(call_id or f"call_{n}", name, arguments)])

    def crash(self, message: str = "scripted provider failure", *, match: str | None = None,
              latency_s: float = 0.0) -> ScriptedProvider:
        """A fatal provider error: the session exits with code 1."""
        return self.add(ScriptedTurn(error=ProviderError(ErrorKind.FATAL, message), match=match,
                                     latency_s=latency_s))

    def outage(self, message: str = "connection refused", *, match: str | None = None,
               latency_s: float = 0.0) -> ScriptedProvider:
        """A retryable upstream error: the session reports an outage and pauses."""
        return self.add(ScriptedTurn(error=ProviderError(ErrorKind.RETRYABLE, message), match=match,
                                     latency_s=latency_s))

    def fail_with(self, error: BaseException, *, match: str | None = None) -> ScriptedProvider:
        return self.add(ScriptedTurn(error=error, match=match))

    @property
    def pending_turns(self) -> int:
        with self._lock:
            return len(self._turns)

    # --- the Provider protocol ------------------------------------------------------------

    def stream(self, request: ModelRequest, on_event: StreamCallback, cancel: CancelToken) -> ModelResponse:
        turn = self._next_turn(request)
        if turn.latency_s > 0:
            if self.clock is None:
                raise RuntimeError("ScriptedProvider needs a clock for latency")
            if not self.clock.wait(turn.latency_s, cancel):
                raise StreamCancelled()
        cancel.raise_if_cancelled()
        if turn.error is not None:
            raise turn.error
        for chunk in _chunks(turn.text, turn.deltas):
            cancel.raise_if_cancelled()
            on_event(TextDelta(chunk))
        usage = turn.usage
        if usage == Usage():
            usage = Usage(input_tokens=sum(len(m.content) for m in request.messages) // 4,
                          output_tokens=len(turn.text) // 4)
        return ModelResponse(text=turn.text, tool_calls=turn.tool_calls, stop_reason=turn.stop_reason,
                             usage=usage, cost_usd=turn.cost_usd, model=request.model)

    def health(self) -> bool:
        """Answers from ``health_results`` (a bool, or a list consumed in order)."""
        with self._lock:
            self.health_probes += 1
            results = self.health_results
            if isinstance(results, list):
                if not results:
                    return True
                value = results[0]
                if len(results) > 1:
                    results.pop(0)
                return value
            return results

    def model_info(self, model: str) -> ModelInfo:
        return ModelInfo(name=model, context_window=self.context_window)

    def _next_turn(self, request: ModelRequest) -> ScriptedTurn:
        last_user = next((m.content for m in reversed(request.messages) if m.role == "user"), "")
        with self._lock:
            self.requests.append(request)
            for i, turn in enumerate(self._turns):
                if turn.match is None or turn.match in last_user:
                    return self._turns.pop(i)
        if self.responder is not None:
            turn = self.responder(request)
            if turn is not None:
                return turn
        return ScriptedTurn(text=self.default_reply)


def _chunks(text: str, n: int) -> list[str]:
    if not text:
        return []
    n = max(1, min(n, len(text)))
    size = -(-len(text) // n)
    return [text[i:i + size] for i in range(0, len(text), size)]
