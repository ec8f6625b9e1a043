"""Scripted turns: :class:`ScriptedTurn` values and their :class:`Turn` constructors, and
how a reply's text streams in chunks. Their public home is
:mod:`corvid_actors.testing.scripted` (re-exported there and from
:mod:`corvid_actors.testing`); the provider that serves them is
:class:`~corvid_actors.testing.scripted.ScriptedProvider`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from corvid_actors.providers.base import ErrorKind, ProviderError, ToolCall, Usage


@dataclass
class ScriptedTurn:
    """One scripted step: a reply, an error to raise, an exit, or a start failure.

    Build them with :class:`Turn`. ``usage`` left at zero is estimated from the text.
    """

    text: str = ""
    deltas: int = 1
    latency_s: float = 0.0
    #: simulated seconds between two streamed chunks (0: all at once, after the latency)
    delta_interval_s: float = 0.0
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    error: BaseException | None = None
    match: str | None = None
    stop_reason: str = "end_turn"
    #: end the incarnation with this exit code instead of answering (SessionExit)
    exit_code: int | None = None
    #: fail the session's next start with this message (consumed by a start, not a call)
    start_failure: str | None = None
    #: the streamed chunks exactly (a replayed reply keeps its recorded boundaries);
    #: None: ``text`` split into ``deltas`` chunks
    chunks: tuple[str, ...] | None = None


ToolCallLike = ToolCall | tuple[str, Mapping[str, Any]]


class Turn:
    """Constructors of :class:`ScriptedTurn` values, for ``for_session`` and ``add``."""

    @staticmethod
    def reply(text: str = "", *, deltas: int = 1, latency_s: float = 0.0, delta_interval_s: float = 0.0,
              tool_calls: Iterable[ToolCallLike] = (), usage: Usage | Mapping[str, int] | None = None,
              cost_usd: float = 0.0, stop_reason: str | None = None) -> ScriptedTurn:
        """A model reply: ``text`` streamed in ``deltas`` chunks after ``latency_s`` simulated
        seconds — the first chunk then, each next one ``delta_interval_s`` later (a slow
        stream: a stop or an interrupt may cut it between chunks) — with ``tool_calls`` (``ToolCall`` or ``(name, arguments)``; ids are given
        when the turn is served if left empty) and ``usage`` (a ``Usage`` or a dict such as
        ``{"input_tokens": 120, "output_tokens": 40}``; estimated from the text if left out)."""
        calls = tuple(c if isinstance(c, ToolCall) else ToolCall("", c[0], dict(c[1])) for c in tool_calls)
        if isinstance(usage, Mapping):
            usage = Usage(**usage)
        return ScriptedTurn(text=text, deltas=deltas, latency_s=latency_s, delta_interval_s=delta_interval_s,
                            tool_calls=calls,
                            usage=usage or Usage(), cost_usd=cost_usd,
                            stop_reason=stop_reason or ("tool_use" if calls else "end_turn"))

    @staticmethod
    def tool_call(name: str, arguments: Mapping[str, Any] | None = None, *, text: str = "",
                  latency_s: float = 0.0) -> ScriptedTurn:
        """A reply that calls one tool. The session's loop must offer tools: the scripted
        provider's sessions run the plain ``conversation`` loop unless the runtime maps it
        to one with tools (``sim_runtime(loop_for_provider={"scripted": "direct"})``); a
        call that reaches a loop without tools is a :class:`ScriptError` naming the loop,
        not dropped."""
        return Turn.reply(text, latency_s=latency_s, tool_calls=[(name, dict(arguments or {}))])

    @staticmethod
    def api_error(kind: ErrorKind | str, message: str = "scripted API error", *, status: int | None = None,
                  retry_after_s: float | None = None, error_type: str | None = None,
                  latency_s: float = 0.0) -> ScriptedTurn:
        """A classified provider error of ``kind`` (``retryable``, ``context_overflow``,
        ``tools_unsupported``, ``fatal``), as a real provider raises it."""
        kind = kind if isinstance(kind, ErrorKind) else ErrorKind(kind)
        return ScriptedTurn(error=ProviderError(kind, message, status=status, retry_after_s=retry_after_s,
                                                error_type=error_type), latency_s=latency_s)

    @staticmethod
    def crash(message: str = "scripted provider failure", *, latency_s: float = 0.0) -> ScriptedTurn:
        """A fatal provider error: the turn fails and the session exits with code 1."""
        return Turn.api_error(ErrorKind.FATAL, message, latency_s=latency_s)

    @staticmethod
    def outage(message: str = "connection refused", *, latency_s: float = 0.0) -> ScriptedTurn:
        """A retryable upstream error (connection refused): counts toward an outage pause."""
        return Turn.api_error(ErrorKind.RETRYABLE, message, latency_s=latency_s)

    @staticmethod
    def exit(code: int = 0, *, latency_s: float = 0.0) -> ScriptedTurn:
        """The incarnation ends with exit ``code`` instead of answering (nothing more of the
        turn is published; ``session_exited`` follows)."""
        return ScriptedTurn(exit_code=code, latency_s=latency_s)

    @staticmethod
    def clean_exit(*, latency_s: float = 0.0) -> ScriptedTurn:
        """The incarnation ends with code 0 (the session goes idle; nothing restarts it)."""
        return Turn.exit(0, latency_s=latency_s)

    @staticmethod
    def start_failure(message: str = "scripted start failure") -> ScriptedTurn:
        """The session's next start fails while it is built: an ``error`` event of type
        ``spawn_error`` carrying ``message``; no incarnation runs."""
        return ScriptedTurn(start_failure=message)


def turn_chunks(turn: ScriptedTurn) -> list[str]:
    """The chunks ``turn``'s reply streams in: its recorded ``chunks``, else its text split
    into ``deltas`` chunks of (nearly) equal size."""
    return list(turn.chunks) if turn.chunks is not None else _chunks(turn.text, turn.deltas)


def _chunks(text: str, n: int) -> list[str]:
    if not text:
        return []
    n = max(1, min(n, len(text)))
    size = -(-len(text) // n)
    return [text[i:i + size] for i in range(0, len(text), size)]
