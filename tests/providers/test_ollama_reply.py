"""ReplyCollector (``providers/_ollama_reply``): the lines of one streamed reply, and how
their text is shown — one ``TextDelta`` per line, or, deferred on the I/O loop, one per
network chunk (the lines read before the loop runs its callbacks), with the same text in
the same order."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import ollama
import pytest

from corvid_actors.core.vocabulary import CancelToken, ToolSpec
from corvid_actors.providers._ollama_reply import ReplyCollector
from corvid_actors.providers.base import (
    ModelRequest,
    ProviderError,
    StreamEvent,
    TextDelta,
    ToolCallStarted,
)
from corvid_actors.providers.ollama import OllamaProvider
from corvid_actors.testing.ollama_stub import OllamaStubServer, Turn
from tests.providers.manual_soon import Soon

MODEL = "llama3.2:1b"
REQUEST = ModelRequest(model=MODEL, system="", messages=())


def line(text: str = "", *, done: bool = False,
         calls: tuple[tuple[str, dict[str, Any]], ...] = ()) -> ollama.ChatResponse:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [{"function": {"name": n, "arguments": a}} for n, a in calls]
    return ollama.ChatResponse(model=MODEL, message=message, done=done,
                               done_reason="stop" if done else None)


def shown(events: list[StreamEvent]) -> list[Any]:
    return [e.text if isinstance(e, TextDelta) else ("call", e.name) for e in events]


def test_without_soon_every_line_is_its_own_delta() -> None:
    events: list[StreamEvent] = []
    reply = ReplyCollector(REQUEST, events.append, text_mode=False)
    for text in ("a ", "b ", "c"):
        reply.add(line(text))
    reply.add(line(done=True))
    reply.flush_text()  # a no-op without soon
    assert shown(events) == ["a ", "b ", "c"]
    assert reply.finish().text == "a b c"
    assert shown(events) == ["a ", "b ", "c"]


def test_deferred_lines_of_one_chunk_are_one_delta_and_the_text_is_the_same() -> None:
    events: list[StreamEvent] = []
    soon = Soon()
    reply = ReplyCollector(REQUEST, events.append, text_mode=False, soon=soon)
    for text in ("a ", "b ", "c "):
        reply.add(line(text))
    assert events == [] and len(soon.pending) == 1  # one flush per chunk, not per line
    soon.run()
    reply.add(line("d "))
    soon.run()
    soon.run()  # nothing pending: nothing shown
    reply.add(line("e"))
    reply.add(line(done=True))
    response = reply.finish()  # the end shows what is pending
    assert shown(events) == ["a b c ", "d ", "e"]
    assert response.text == "a b c d e" == "".join(e.text for e in events if isinstance(e, TextDelta))
    soon.run()  # the flush scheduled for "e" finds nothing left
    assert len(events) == 3


def with_read_file_tool(*, text_mode: bool) -> tuple[ReplyCollector, list[StreamEvent], Soon]:
    """A collector for a request offering one tool, its events and its manual ``call_soon``."""
    events: list[StreamEvent] = []
    soon = Soon()
    tools = (ToolSpec(name="read_file", description="read"),)
    reply = ReplyCollector(ModelRequest(model=MODEL, system="", messages=(), tools=tools), events.append,
                           text_mode=text_mode, soon=soon)
    return reply, events, soon


def test_a_tool_call_shows_the_pending_text_before_it() -> None:
    reply, events, soon = with_read_file_tool(text_mode=False)
    reply.add(line("let me "))
    reply.add(line("look"))
    reply.add(line(calls=(("read_file", {"path": "a.txt"}),)))
    reply.add(line(" done"))
    reply.add(line(done=True))
    reply.finish()
    assert shown(events) == ["let me look", ("call", "read_file"), " done"]


def test_text_tools_mode_ignores_soon_and_filters_as_before() -> None:
    reply, events, soon = with_read_file_tool(text_mode=True)
    reply.add(line("plain text"))
    reply.add(line(done=True))
    assert soon.pending == []
    assert reply.finish().text == "plain text"
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "plain text"
    assert not [e for e in events if isinstance(e, ToolCallStarted)]


# --- over the stub, on a real event loop (the provider's astream) -------------------


@pytest.fixture
def stub() -> Iterator[OllamaStubServer]:
    with OllamaStubServer() as server:
        yield server


def astream(stub: OllamaStubServer, events: list[StreamEvent]) -> Any:
    provider = OllamaProvider(stub.url)
    return asyncio.run(provider.astream(REQUEST, events.append, CancelToken()))


def test_astream_shows_the_exact_text_in_order_in_at_most_one_delta_per_line(stub: OllamaStubServer) -> None:
    words = [f"w{i} " for i in range(2000)]
    stub.add_turn(Turn(text="".join(words)))
    events: list[StreamEvent] = []
    response = astream(stub, events)
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert "".join(deltas) == "".join(words) == response.text
    assert 1 <= len(deltas) <= len(words)


def test_astream_shows_every_line_read_before_a_mid_stream_drop(stub: OllamaStubServer) -> None:
    stub.add_fault("drop_mid_stream", after_chunks=3, text="a b c d e")
    events: list[StreamEvent] = []
    with pytest.raises(ProviderError):
        astream(stub, events)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "a b c "


def test_a_subscriber_failing_in_a_deferred_flush_ends_the_stream_as_it_would_undeferred() -> None:
    # the deferred flush runs as a loop callback, where an exception would be logged and
    # lost: it is kept and raised by the stream's next line (or its end) instead
    def on_event(event: StreamEvent) -> None:
        raise RuntimeError("the subscriber failed")

    soon = Soon()
    reply = ReplyCollector(REQUEST, on_event, text_mode=False, soon=soon)
    reply.add(line("Hello"))
    soon.run()  # the loop runs its callbacks: the flush fails there
    with pytest.raises(RuntimeError, match="the subscriber failed"):
        reply.add(line(" world"))
    reply = ReplyCollector(REQUEST, on_event, text_mode=False, soon=soon)
    reply.add(line("Hello"))
    soon.run()
    with pytest.raises(RuntimeError, match="the subscriber failed"):
        reply.finish()
