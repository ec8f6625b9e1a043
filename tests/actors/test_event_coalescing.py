"""Coalesced deltas (issue 18): while the EventBus is behind, a session's consecutive
``content_block_delta`` events reach subscribers merged, in order; idle, each is its own.

The bus is made "behind" for real: a subscriber blocks on an event the test controls
while the test publishes more deltas through the session's Lifeline.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from corvid_actors.actors.base import ActivityTracker
from corvid_actors.actors.events import BusStats, EventBus, Subscribe, SubscribeAll
from corvid_actors.actors.session_wiring import Lifeline
from corvid_actors.events import ContentBlockDelta, Event, SessionStarted, SessionStopped, Thinking

WAIT_S = 5.0
SID = "s-1"


class Gate:
    """A subscriber that records what it is given and blocks on its first delta until
    ``release()`` (so the bus stays behind meanwhile)."""

    def __init__(self) -> None:
        self.seen: list[Event] = []
        self.blocked = threading.Event()
        self.released = threading.Event()
        self.done = threading.Event()

    def __call__(self, _sid: str, event: Event) -> None:
        self.seen.append(event)
        if isinstance(event, ContentBlockDelta) and not self.blocked.is_set():
            self.blocked.set()
            assert self.released.wait(WAIT_S)
        if isinstance(event, SessionStopped):
            self.done.set()

    def release(self) -> None:
        self.released.set()


@pytest.fixture
def bus() -> Iterator[Any]:
    tracker = ActivityTracker()
    ref = EventBus.start(tracker)
    yield ref, tracker
    ref.stop()


def behind(ref: Any) -> tuple[Gate, Lifeline]:
    """A gated subscriber, and a lifeline whose first delta ("a") the bus is stuck on."""
    gate = Gate()
    ref.ask(Subscribe(SID, gate))
    lifeline = Lifeline(SID, ref)
    lifeline.publish(ContentBlockDelta(text="a"))
    assert gate.blocked.wait(WAIT_S)
    return gate, lifeline


def text_of(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, ContentBlockDelta))


def deltas(events: list[Event]) -> list[Event]:
    return [e for e in events if isinstance(e, ContentBlockDelta)]


def test_a_busy_bus_merges_deltas_and_the_text_is_identical(bus: Any) -> None:
    ref, tracker = bus
    gate, everyone = Gate(), []
    ref.ask(Subscribe(SID, gate))
    ref.ask(SubscribeAll(lambda _sid, e: everyone.append(e)))
    lifeline = Lifeline(SID, ref)
    words = [f"w{i} " for i in range(200)]
    lifeline.publish(SessionStarted())
    lifeline.publish(ContentBlockDelta(text=words[0]))
    assert gate.blocked.wait(WAIT_S)
    for word in words[1:]:
        lifeline.publish(ContentBlockDelta(text=word))
    lifeline.publish(SessionStopped())
    gate.release()
    assert gate.done.wait(WAIT_S)
    tracker.wait_idle(WAIT_S)
    assert text_of(gate.seen) == "".join(words)
    # the first delta alone (the bus took it at once), the other 199 merged into one
    assert [e.text for e in deltas(gate.seen)] == [words[0], "".join(words[1:])]
    assert ref.ask(BusStats())["deltas_merged"] == 198
    # the global subscriber sees the same events in the same order
    assert [(e.type, getattr(e, "text", None)) for e in everyone] == \
        [(e.type, getattr(e, "text", None)) for e in gate.seen]
    assert isinstance(gate.seen[0], SessionStarted) and isinstance(gate.seen[-1], SessionStopped)


def test_another_event_seals_the_buffer_so_order_is_kept(bus: Any) -> None:
    ref, tracker = bus
    gate, lifeline = behind(ref)
    for event in (ContentBlockDelta(text="b"), ContentBlockDelta(text="c"), Thinking(thinking=False),
                  ContentBlockDelta(text="d"), ContentBlockDelta(text="e"), SessionStopped()):
        lifeline.publish(event)
    gate.release()
    assert gate.done.wait(WAIT_S)
    tracker.wait_idle(WAIT_S)
    assert [(e.type, getattr(e, "text", None)) for e in gate.seen] == [
        ("content_block_delta", "a"), ("content_block_delta", "bc"), ("thinking", None),
        ("content_block_delta", "de"), ("session_stopped", None)]


def test_an_idle_bus_delivers_every_delta_as_it_comes(bus: Any) -> None:
    ref, tracker = bus
    seen: list[Event] = []
    ref.ask(Subscribe(SID, lambda _sid, e: seen.append(e)))
    lifeline = Lifeline(SID, ref)
    for i in range(20):
        lifeline.publish(ContentBlockDelta(text=f"{i},"))
        tracker.wait_idle(WAIT_S)  # the bus has delivered it before the next comes
    assert [e.text for e in deltas(seen)] == [f"{i}," for i in range(20)]
    assert ref.ask(BusStats())["deltas_merged"] == 0


def test_nothing_is_published_after_close_even_into_an_open_buffer(bus: Any) -> None:
    ref, tracker = bus
    gate, lifeline = behind(ref)
    lifeline.publish(ContentBlockDelta(text="b"))  # queued: published before the close
    lifeline.close()
    assert lifeline.publish(ContentBlockDelta(text="late")) is False
    assert lifeline.publish(SessionStopped()) is False
    gate.release()
    tracker.wait_idle(WAIT_S)
    assert text_of(gate.seen) == "ab"


def test_deltas_from_several_threads_keep_each_threads_order(bus: Any) -> None:
    """Two sessions streaming at once through a slow subscriber: each session's text is
    intact and in order (coalescing never mixes sessions)."""
    ref, tracker = bus
    seen: dict[str, list[str]] = {"a": [], "b": []}
    lock = threading.Lock()

    def slow(sid: str, event: Event) -> None:
        if isinstance(event, ContentBlockDelta):
            with lock:
                seen[sid].append(event.text)

    ref.ask(SubscribeAll(slow))
    lifelines = {sid: Lifeline(sid, ref) for sid in seen}

    def stream(sid: str) -> None:
        for i in range(2000):
            lifelines[sid].publish(ContentBlockDelta(text=f"{i} "))

    threads = [threading.Thread(target=stream, args=(sid,)) for sid in seen]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    tracker.wait_idle(WAIT_S)
    expected = "".join(f"{i} " for i in range(2000))
    assert "".join(seen["a"]) == expected and "".join(seen["b"]) == expected


def test_publish_text_is_publish_of_a_delta_and_keeps_the_order(bus: Any) -> None:
    """``publish_text`` (the streamed-chunk path: no event object per chunk) merges into
    the same buffer as ``publish(ContentBlockDelta)``, and other events still seal it."""
    ref, tracker = bus
    gate, lifeline = behind(ref)
    assert lifeline.publish_text("b") is True
    lifeline.publish(ContentBlockDelta(text="c"))
    lifeline.publish_text("d")
    lifeline.publish(Thinking(thinking=False))
    lifeline.publish_text("e")
    lifeline.publish_text("f")
    lifeline.publish(SessionStopped())
    gate.release()
    assert gate.done.wait(WAIT_S)
    tracker.wait_idle(WAIT_S)
    assert [(e.type, getattr(e, "text", None)) for e in gate.seen] == [
        ("content_block_delta", "a"), ("content_block_delta", "bcd"), ("thinking", None),
        ("content_block_delta", "ef"), ("session_stopped", None)]
    lifeline.close()
    assert lifeline.publish_text("late") is False


def test_without_coalescing_publish_text_delivers_every_chunk(bus: Any) -> None:
    ref, tracker = bus
    gate = Gate()
    ref.ask(Subscribe(SID, gate))
    lifeline = Lifeline(SID, ref, coalesce=False)
    lifeline.publish_text("a")
    assert gate.blocked.wait(WAIT_S)
    for text in ("b", "c"):
        lifeline.publish_text(text)
    lifeline.publish(SessionStopped())
    gate.release()
    assert gate.done.wait(WAIT_S)
    tracker.wait_idle(WAIT_S)
    assert [e.text for e in deltas(gate.seen)] == ["a", "b", "c"]
