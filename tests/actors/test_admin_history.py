"""Which part of a session's history ``corvid-actors events ID`` shows (``actors/_admin_history``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from corvid_actors.actors.admin._history import merged, select, stored_items

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Row:
    role: str
    content: str
    timestamp: datetime


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def kinds(items):
    return [item.get("role") or item["type"] for item in items]


STORED = [Row("user", "one", T0), Row("assistant", "answer one", T0 + timedelta(seconds=2)),
          Row("user", "two", T0 + timedelta(seconds=10)), Row("assistant", "answer two", T0 + timedelta(seconds=12)),
          Row("user", "three", T0 + timedelta(seconds=20))]
RING = [{"at": at(1), "type": "session_started"}, {"at": at(2), "type": "assistant"}, {"at": at(2), "type": "result"},
        {"at": at(12), "type": "assistant"}, {"at": at(12), "type": "result"}, {"at": at(21), "type": "tool_status"}]


def test_the_default_is_the_current_turn_and_the_last_finished_one():
    items = merged(stored_items(STORED), RING)
    # the ring saw every assistant answer: the stored copies are left out
    assert kinds(items) == ["user", "session_started", "assistant", "result", "user", "assistant", "result",
                            "user", "tool_status"]
    assert kinds(select(items)) == ["user", "assistant", "result", "user", "tool_status"]
    assert select(items)[0]["text"] == "two"


def test_after_a_restart_the_store_alone_marks_the_turns():
    items = merged(stored_items(STORED[:4]), [])
    assert [item["text"] for item in select(items)] == ["two", "answer two"]


def test_since_and_tail_choose_by_time_and_by_count():
    items = merged(stored_items(STORED), RING)
    assert kinds(select(items, since_iso=at(12))) == ["assistant", "result", "user", "tool_status"]
    assert kinds(select(items, tail=2)) == ["user", "tool_status"]
    assert kinds(select(items, since_iso=at(12), tail=1)) == ["tool_status"]


def test_with_no_finished_turn_everything_is_shown():
    items = merged(stored_items(STORED[:1]), [{"at": at(1), "type": "session_started"}])
    assert kinds(select(items)) == ["user", "session_started"]


def test_a_stored_reply_the_ring_also_holds_is_shown_once_whatever_their_times():
    # under load the row is stamped before the ring's first event (the dashboard saw it twice)
    stored = [Row("user", "one", T0), Row("assistant", "answer one", T0 + timedelta(seconds=2))]
    ring = [{"at": at(3), "type": "assistant", "content": "answer one"}, {"at": at(3), "type": "result"}]
    items = merged(stored_items(stored), ring)
    assert kinds(items) == ["user", "assistant", "result"]
    assert items[1].get("content") == "answer one" and "stored" not in items[1]


def test_an_older_stored_reply_the_ring_never_saw_is_kept():
    stored = [Row("user", "one", T0), Row("assistant", "answer one", T0 + timedelta(seconds=2))]
    ring = [{"at": at(3), "type": "session_started"}]
    assert kinds(merged(stored_items(stored), ring)) == ["user", "assistant", "session_started"]
