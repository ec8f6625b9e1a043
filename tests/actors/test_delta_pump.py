"""Streamed text from the I/O loop through the DeltaPump (issue 37 item 3): the bus is
told at most once per interval for every stream, the first token of a reply at once;
every character arrives, in order, before any later event of its session; a closed
lifeline's text still goes out ahead of what follows; a buffer told twice is delivered
once. The I/O loop and the bus are the real ones (threads); no test waits for the
interval to pass unless it says so, and every wait is bounded."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from corvid_actors.actors.base import ActivityTracker
from corvid_actors.actors.delta_pump import DeltaPump
from corvid_actors.actors.events import (
    BusStats,
    DeltaBuffer,
    EventBus,
    Publish,
    PublishDeltas,
    Subscribe,
    SubscribeAll,
)
from corvid_actors.actors.session_wiring import Lifeline
from corvid_actors.config import Config
from corvid_actors.core.io_loop import IoLoop
from corvid_actors.errors import ConfigError
from corvid_actors.events import ContentBlockDelta, Event, SessionStopped, Thinking

WAIT_S = 5.0
#: long enough that no test sees the pump's timer fire unless it waits for it
NEVER_S = 60.0


class Seen:
    """A subscriber: what it was given, in order; wakes waiters on each event."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.cond = threading.Condition()

    def __call__(self, _sid: str, event: Event) -> None:
        with self.cond:
            self.events.append(event)
            self.cond.notify_all()

    def wait_for(self, predicate: Any) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: predicate(self.events), WAIT_S)

    def text(self) -> str:
        return "".join(e.text for e in self.events if isinstance(e, ContentBlockDelta))

    def deltas(self) -> list[str]:
        return [e.text for e in self.events if isinstance(e, ContentBlockDelta)]


@pytest.fixture
def rig() -> Iterator[tuple[Any, ActivityTracker, IoLoop[Any]]]:
    tracker = ActivityTracker()
    bus = EventBus.start(tracker)
    io_loop: IoLoop[Any] = IoLoop()
    io_loop.start()
    yield bus, tracker, io_loop
    io_loop.stop()
    bus.stop()


def on_loop(io_loop: IoLoop[Any], fn: Any) -> Any:
    """Run ``fn()`` as a coroutine's body on the I/O loop thread (as a provider's stream
    calls the lifeline) and return what it returns."""
    done = threading.Event()
    out: list[Any] = []

    async def body() -> Any:
        return fn()

    io_loop.submit(body, lambda result, error: (out.append(error or result), done.set()))
    assert done.wait(WAIT_S)
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


def pass_time_on_loop(io_loop: IoLoop[Any], seconds: float) -> None:
    """Let ``seconds`` of real time pass on the I/O loop (its timers run meanwhile)."""
    done = threading.Event()
    io_loop.submit(lambda: asyncio.sleep(seconds), lambda _r, _e: done.set())
    assert done.wait(WAIT_S)


def streaming(io_loop: IoLoop[Any], lifeline: Lifeline, words: list[str], per_iteration: int = 7) -> None:
    """Publish ``words`` from a task on the I/O loop, a few per loop iteration (as a
    network read hands over several lines), yielding to the loop in between."""
    done = threading.Event()

    async def body() -> None:
        for k, word in enumerate(words):
            assert lifeline.publish_text(word)
            if k % per_iteration == per_iteration - 1:
                await asyncio.sleep(0.0005)

    io_loop.submit(body, lambda _r, _e: done.set())
    assert done.wait(WAIT_S)


def test_every_character_arrives_in_order_in_fewer_deltas_than_tokens(rig: Any) -> None:
    bus, tracker, io_loop = rig
    seen, everyone = Seen(), Seen()
    bus.ask(Subscribe("s", seen))
    bus.ask(SubscribeAll(everyone))
    pump = DeltaPump(bus, io_loop, 0.02)
    lifeline = Lifeline("s", bus, pump=pump)
    words = [f"w{i} " for i in range(600)]
    streaming(io_loop, lifeline, words)
    lifeline.publish(SessionStopped())
    assert seen.wait_for(lambda evs: evs and isinstance(evs[-1], SessionStopped))
    tracker.wait_idle(WAIT_S)
    assert seen.text() == "".join(words)
    assert all(type(e) is ContentBlockDelta and e.type == "content_block_delta" for e in seen.events[:-1])
    assert 1 <= len(seen.deltas()) < len(words) // 5  # merged: the bus was not told per token
    assert everyone.deltas() == seen.deltas()  # the global subscriber sees the same deltas
    assert pump.batches <= len(seen.deltas())


def test_the_first_token_of_a_reply_goes_out_at_once(rig: Any) -> None:
    """A quiet pump tells the first buffer at once (a fast subscriber is not kept waiting
    for the interval); what follows within the interval waits and merges."""
    bus, tracker, io_loop = rig
    seen = Seen()
    bus.ask(Subscribe("s", seen))
    lifeline = Lifeline("s", bus, pump=DeltaPump(bus, io_loop, NEVER_S))
    on_loop(io_loop, lambda: lifeline.publish_text("Hello"))
    assert seen.wait_for(lambda evs: len(evs) == 1)
    assert seen.deltas() == ["Hello"]
    on_loop(io_loop, lambda: lifeline.publish_text(","))
    on_loop(io_loop, lambda: lifeline.publish_text(" world"))
    tracker.wait_idle(WAIT_S)
    assert seen.deltas() == ["Hello"]  # held by the pump (its interval has not passed)
    lifeline.publish(Thinking(thinking=False))  # another event: the held text goes first
    assert seen.wait_for(lambda evs: len(evs) == 3)
    assert [(e.type, getattr(e, "text", None)) for e in seen.events] == [
        ("content_block_delta", "Hello"), ("content_block_delta", ", world"), ("thinking", None)]


def test_the_pump_tells_held_text_when_its_interval_has_passed(rig: Any) -> None:
    bus, _tracker, io_loop = rig
    seen = Seen()
    bus.ask(Subscribe("s", seen))
    lifeline = Lifeline("s", bus, pump=DeltaPump(bus, io_loop, 0.05))
    on_loop(io_loop, lambda: lifeline.publish_text("a"))
    assert seen.wait_for(lambda evs: len(evs) == 1)  # taken by the bus: "b" starts a new buffer
    on_loop(io_loop, lambda: lifeline.publish_text("b"))
    on_loop(io_loop, lambda: lifeline.publish_text("c"))
    # nothing else is published: the pump's own timer delivers "bc" (bounded wait)
    assert seen.wait_for(lambda evs: "".join(e.text for e in evs) == "abc")
    assert seen.deltas() == ["a", "bc"]


def test_one_batch_carries_every_streaming_session(rig: Any) -> None:
    bus, tracker, io_loop = rig
    seen = Seen()
    bus.ask(SubscribeAll(seen))
    pump = DeltaPump(bus, io_loop, NEVER_S)
    lifelines = [Lifeline(f"s{k}", bus, pump=pump) for k in range(20)]
    on_loop(io_loop, lambda: lifelines[0].publish_text("first"))  # a quiet pump: told at once
    assert seen.wait_for(lambda evs: len(evs) == 1)

    def everyone_speaks() -> None:
        for k, lifeline in enumerate(lifelines):
            lifeline.publish_text(f"{k}a ")
            lifeline.publish_text(f"{k}b ")

    on_loop(io_loop, everyone_speaks)
    tracker.wait_idle(WAIT_S)
    assert len(seen.events) == 1 and pump.batches == 1  # all of it waits for the interval
    for lifeline in lifelines:  # each session's next event tells its own held text first
        lifeline.publish(SessionStopped())
    assert seen.wait_for(lambda evs: sum(isinstance(e, SessionStopped) for e in evs) == 20)
    assert seen.deltas()[1:] == [f"{k}a {k}b " for k in range(20)]


def test_a_slow_subscriber_gets_the_text_merged_and_in_order(rig: Any) -> None:
    bus, tracker, io_loop = rig
    release, blocked = threading.Event(), threading.Event()
    seen = Seen()

    def slow(sid: str, event: Event) -> None:
        seen(sid, event)
        if not blocked.is_set():
            blocked.set()
            assert release.wait(WAIT_S)

    bus.ask(Subscribe("s", slow))
    lifeline = Lifeline("s", bus, pump=DeltaPump(bus, io_loop, 0.001))
    on_loop(io_loop, lambda: lifeline.publish_text("x0 "))
    assert blocked.wait(WAIT_S)  # the bus is stuck on the first delta
    words = [f"x{i} " for i in range(1, 400)]
    streaming(io_loop, lifeline, words)
    lifeline.publish(SessionStopped())
    release.set()
    assert seen.wait_for(lambda evs: evs and isinstance(evs[-1], SessionStopped))
    tracker.wait_idle(WAIT_S)
    assert seen.text() == "x0 " + "".join(words)
    # everything streamed while the bus was stuck reached it as one delta
    assert seen.deltas() == ["x0 ", "".join(words)]
    assert bus.ask(BusStats())["deltas_merged"] == len(words) - 1


def test_close_mid_stream_sends_the_held_text_before_what_follows_and_nothing_after(rig: Any) -> None:
    """A stop closes the lifeline, then the supervisor publishes ``session_stopped``: the
    text the pump still held arrives first; a token read after the close is dropped."""
    bus, tracker, io_loop = rig
    seen = Seen()
    bus.ask(Subscribe("s", seen))
    pump = DeltaPump(bus, io_loop, 0.05)
    lifeline = Lifeline("s", bus, pump=pump)
    on_loop(io_loop, lambda: lifeline.publish_text("one "))
    assert seen.wait_for(lambda evs: len(evs) == 1)  # taken by the bus: "two " waits in the pump
    on_loop(io_loop, lambda: lifeline.publish_text("two "))
    lifeline.close()
    assert on_loop(io_loop, lambda: lifeline.publish_text("late")) is False
    bus.tell(Publish("s", SessionStopped()))  # what the supervisor publishes after the close
    assert seen.wait_for(lambda evs: evs and isinstance(evs[-1], SessionStopped))
    pass_time_on_loop(io_loop, 0.1)  # the pump's timer fires: "two " was told by the close
    tracker.wait_idle(WAIT_S)
    assert [(e.type, getattr(e, "text", None)) for e in seen.events] == [
        ("content_block_delta", "one "), ("content_block_delta", "two "), ("session_stopped", None)]
    assert pump.batches == 1 and not pump._scheduled  # its pending entry was skipped


def test_a_buffer_told_twice_is_delivered_once(rig: Any) -> None:
    bus, tracker, _io_loop = rig
    seen = Seen()
    bus.ask(Subscribe("s", seen))
    buffer = DeltaBuffer("once")
    bus.tell(PublishDeltas("s", buffer))
    bus.tell(PublishDeltas("s", buffer))
    bus.tell(PublishDeltas("s", DeltaBuffer("then")))
    assert seen.wait_for(lambda evs: len(evs) == 2)
    tracker.wait_idle(WAIT_S)
    assert seen.deltas() == ["once", "then"]


def test_off_the_loop_thread_the_lifeline_tells_the_bus_itself(rig: Any) -> None:
    """A worker thread's stream (a provider without ``astream``) never waits for the pump."""
    bus, _tracker, io_loop = rig
    seen = Seen()
    bus.ask(Subscribe("s", seen))
    pump = DeltaPump(bus, io_loop, NEVER_S)
    lifeline = Lifeline("s", bus, pump=pump)
    lifeline.publish_text("from a worker")
    assert seen.wait_for(lambda evs: len(evs) == 1)
    assert seen.deltas() == ["from a worker"] and pump.batches == 0


def test_a_negative_delta_interval_is_refused_with_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="delta_interval_ms"):
        Config().replace(supervisor={"delta_interval_ms": -1.0})
    assert Config().supervisor.delta_interval_ms == 10.0
