"""The Anthropic provider's text on the I/O loop (``providers/_anthropic_stream``): the
text deltas read in one network chunk are shown as one ``TextDelta`` when the loop next
runs its callbacks, with the same text in the same order; a tool call shows the pending
text first; a subscriber's failure in the deferred flush still fails the call."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from corvid_actors.providers._anthropic_stream import CallbackFailed, TurnAccumulator
from corvid_actors.providers.base import StreamEvent, TextDelta, ToolCallStarted
from tests.providers.manual_soon import Soon


def text_start(index: int, text: str = "") -> Any:
    return SimpleNamespace(type="content_block_start", index=index, content_block=SimpleNamespace(type="text", text=text))


def text_delta(index: int, text: str) -> Any:
    return SimpleNamespace(type="content_block_delta", index=index, delta=SimpleNamespace(type="text_delta", text=text))


def tool_start(index: int, name: str) -> Any:
    return SimpleNamespace(type="content_block_start", index=index,
                           content_block=SimpleNamespace(type="tool_use", id=f"toolu_{index}", name=name, input={}))


def shown(events: list[StreamEvent]) -> list[Any]:
    return [e.text if isinstance(e, TextDelta) else ("call", e.name) for e in events if
            isinstance(e, (TextDelta, ToolCallStarted))]


def test_the_deltas_read_before_the_loop_runs_its_callbacks_are_one_delta() -> None:
    events: list[StreamEvent] = []
    soon = Soon()
    turn = TurnAccumulator("m", events.append, soon=soon)
    for event in (text_start(0), text_delta(0, "Hel"), text_delta(0, "lo"), text_delta(0, ",")):
        turn.feed(event)
    assert events == [] and len(soon.pending) == 1  # one flush scheduled, not one per delta
    soon.run()
    turn.feed(text_delta(0, " world"))
    soon.run()
    assert shown(events) == ["Hello,", " world"]
    assert "".join(turn.texts[0]) == "Hello, world"


def test_a_tool_call_shows_the_text_before_it_first() -> None:
    events: list[StreamEvent] = []
    soon = Soon()
    turn = TurnAccumulator("m", events.append, soon=soon)
    for event in (text_start(0), text_delta(0, "Let me look"), tool_start(1, "read_file"), text_start(2),
                  text_delta(2, "done")):
        turn.feed(event)
    turn.flush_text()  # the stream's end
    assert shown(events) == ["Let me look", ("call", "read_file"), "done"]


def test_without_soon_every_delta_is_its_own() -> None:
    events: list[StreamEvent] = []
    turn = TurnAccumulator("m", events.append)
    for event in (text_start(0, "A"), text_delta(0, "b"), text_delta(0, "c")):
        turn.feed(event)
    assert shown(events) == ["A", "b", "c"]


def test_a_subscriber_failing_in_the_deferred_flush_fails_the_stream() -> None:
    # the flush runs as a loop callback, where asyncio would only log the exception
    def on_event(event: StreamEvent) -> None:
        raise RuntimeError("the subscriber failed")

    soon = Soon()
    turn = TurnAccumulator("m", on_event, soon=soon)
    turn.feed(text_delta(0, "Hello"))
    soon.run()  # no exception escapes into the loop
    with pytest.raises(CallbackFailed):
        turn.feed(text_delta(0, " world"))
    turn = TurnAccumulator("m", on_event, soon=soon)
    turn.feed(text_delta(0, "Hello"))
    soon.run()
    with pytest.raises(CallbackFailed):
        turn.raise_failed()  # the stream ended meanwhile: raised at its end


def test_on_a_real_loop_a_burst_of_deltas_is_one_delta_with_the_same_text() -> None:
    events: list[StreamEvent] = []

    async def main() -> None:
        turn = TurnAccumulator("m", events.append, soon=asyncio.get_running_loop().call_soon)
        turn.feed(text_start(0))
        for word in ("one ", "two ", "three"):  # parsed from one chunk: no await in between
            turn.feed(text_delta(0, word))
        await asyncio.sleep(0)  # the loop runs its callbacks (the next read would)
        turn.feed(text_delta(0, "!"))
        await asyncio.sleep(0)

    asyncio.run(main())
    assert shown(events) == ["one two three", "!"]
