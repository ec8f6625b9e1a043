"""A handler's run of events reaches the EventBus as one message (issue 18 item 4):
``PublishMany`` delivers its events in order, as consecutive ``Publish`` messages would,
and ``Lifeline.hold`` / ``flush`` gather what a session publishes meanwhile — from any
path — in the order it was published. A lifeline closed before the flush drops what it
held, as it drops a publish after the close."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from corvid_actors.actors.base import ActivityTracker
from corvid_actors.actors.events import EventBus, Publish, PublishMany, Subscribe, SubscribeAll
from corvid_actors.actors.session_wiring import Lifeline
from corvid_actors.events import (
    Assistant,
    ContentBlockDelta,
    Event,
    Result,
    SessionStarted,
    SessionStopped,
    Thinking,
)

SID = "s-1"


@pytest.fixture(params=["inline", "threads"])
def bus(request) -> Iterator[tuple[Any, ActivityTracker, list[tuple[str, Event]], list[Event]]]:
    tracker = ActivityTracker(request.param)
    ref = EventBus.start(tracker)
    everyone: list[tuple[str, Event]] = []
    mine: list[Event] = []
    ref.ask(SubscribeAll(lambda sid, e: everyone.append((sid, e))))
    ref.ask(Subscribe(SID, lambda _sid, e: mine.append(e)))
    yield ref, tracker, everyone, mine
    ref.stop()


def test_publish_many_delivers_each_event_in_order_to_session_and_global_subscribers(bus):
    ref, tracker, everyone, mine = bus
    events = (SessionStarted(pid=1), Thinking(thinking=True), Assistant(content="hi"), Result(subtype="success"))
    ref.tell(PublishMany(SID, events))
    ref.tell(Publish(SID, SessionStopped(reason="user_stop")))
    tracker.wait_idle(5)
    assert mine == [*events, SessionStopped(reason="user_stop")]
    assert everyone == [(SID, e) for e in mine]


def test_held_events_reach_the_bus_in_publish_order_as_one_message(bus):
    ref, tracker, _everyone, mine = bus
    lifeline = Lifeline(SID, ref)
    lifeline.publish(SessionStarted(pid=1))
    lifeline.hold()
    for event in (Assistant(content="hi"), Result(subtype="success"), Thinking(thinking=False)):
        assert lifeline.publish(event)
    tracker.wait_idle(5)
    assert mine == [SessionStarted(pid=1)]  # held: not yet on the bus
    lifeline.flush()
    lifeline.publish(ContentBlockDelta(text="after"))  # not held any more: straight on
    tracker.wait_idle(5)
    assert mine == [SessionStarted(pid=1), Assistant(content="hi"), Result(subtype="success"),
                    Thinking(thinking=False), ContentBlockDelta(text="after")]


def test_streamed_text_published_while_held_keeps_its_place_among_the_held_events(bus):
    # publish_text (the I/O loop's path for streamed chunks) must not overtake what the
    # actor holds: a chunk streamed after a held event arrives after it
    ref, tracker, _everyone, mine = bus
    lifeline = Lifeline(SID, ref)
    lifeline.publish_text("before ")
    lifeline.hold()
    lifeline.publish(Thinking(thinking=True))
    assert lifeline.publish_text("during")
    lifeline.flush()
    lifeline.publish_text(" after")
    tracker.wait_idle(5)
    assert mine == [ContentBlockDelta(text="before "), Thinking(thinking=True), ContentBlockDelta(text="during"),
                    ContentBlockDelta(text=" after")]


def test_a_flush_that_keeps_holding_delivers_what_came_so_far(bus):
    ref, tracker, _everyone, mine = bus
    lifeline = Lifeline(SID, ref)
    lifeline.hold()
    lifeline.publish(Result(subtype="success"))
    lifeline.flush(keep_holding=True)
    lifeline.publish(Thinking(thinking=False))
    tracker.wait_idle(5)
    assert mine == [Result(subtype="success")]
    lifeline.flush()
    tracker.wait_idle(5)
    assert mine == [Result(subtype="success"), Thinking(thinking=False)]


def test_what_a_closed_lifeline_held_is_dropped(bus):
    ref, tracker, _everyone, mine = bus
    lifeline = Lifeline(SID, ref)
    lifeline.hold()
    lifeline.publish(Assistant(content="late"))
    lifeline.close()  # the supervisor ended the incarnation meanwhile
    lifeline.flush()
    assert not lifeline.publish(Thinking(thinking=False))
    tracker.wait_idle(5)
    assert mine == []


def test_a_global_subscriber_without_deltas_hears_every_event_but_the_streamed_text(bus):
    # the journal's subscription: it keeps the chunks' sizes itself, so the bus spares it a
    # callback per delta (issue 40's journal cost); the others still hear the deltas
    ref, tracker, everyone, mine = bus
    quiet: list[Event] = []
    ref.ask(SubscribeAll(lambda _sid, e: quiet.append(e), deltas=False))
    lifeline = Lifeline(SID, ref)
    sent = [SessionStarted(pid=1), ContentBlockDelta(text="a"), Assistant(content="a"), Result(subtype="success")]
    for event in sent:
        lifeline.publish(event)
    lifeline.publish_text("b")  # the streamed path (a buffer the bus delivers as one delta)
    lifeline.publish(SessionStopped(reason="user_stop"))
    tracker.wait_idle(5)
    assert [e for e in quiet] == [e for e in mine if not isinstance(e, ContentBlockDelta)]
    assert [e.text for e in mine if isinstance(e, ContentBlockDelta)] == ["a", "b"]
    assert [e for _sid, e in everyone] == mine
