"""Timers: the per-owner index stays exact under schedule, reschedule, cancel, cancel-by-owner
and firing, so a session's cleanup costs O(its timers) and the table loses or keeps nothing
it should not."""

from __future__ import annotations

import random
from typing import Any

import pykka
import pytest

from corvid_actors.actors.base import ActivityTracker
from corvid_actors.actors.timers import (
    CancelTimer,
    CancelTimers,
    ScheduleTimer,
    TimerIndexCheck,
    Timers,
    TimerStats,
)
from corvid_actors.testing import SimClock
from tests.actors.recording import Inbox


@pytest.fixture
def rig():
    clock = SimClock()
    tracker = ActivityTracker()
    timers = Timers(clock)  # a table, not an actor: nothing to start or stop
    inbox = Inbox.start(tracker)
    clock.attach(tracker, lambda: tracker.wait_idle(5))
    yield clock, tracker, timers, inbox
    pykka.ActorRegistry.stop_all()
    clock.close()


def _index(timers: Timers) -> dict[str, Any]:
    return timers.ask(TimerIndexCheck())


def test_cancel_timers_cancels_only_that_owners_keys(rig):
    clock, tracker, timers, inbox = rig
    for owner in ("a", "b"):
        for kind in ("restart", "stable", "slot_wait"):
            timers.tell(ScheduleTimer((owner, kind), 10, inbox, f"{owner}-{kind}"))
    timers.tell(ScheduleTimer("plain", 10, inbox, "plain"))
    timers.tell(ScheduleTimer(("a",), 10, inbox, "a-alone"))
    timers.tell(CancelTimers("a"))
    tracker.wait_idle(5)
    assert timers.ask(TimerStats())["timers"] == 4
    assert _index(timers)["exact"]
    clock.advance(10)
    assert sorted(inbox.ask("dump")) == ["b-restart", "b-slot_wait", "b-stable", "plain"]
    assert timers.ask(TimerStats())["timers"] == 0
    assert _index(timers)["by_owner"] == {}


def test_a_rescheduled_key_fires_once_with_the_new_message(rig):
    clock, tracker, timers, inbox = rig
    timers.tell(ScheduleTimer(("s", "restart"), 5, inbox, "old"))
    timers.tell(ScheduleTimer(("s", "restart"), 8, inbox, "new"))
    tracker.wait_idle(5)
    assert _index(timers)["by_owner"] == {"s": {("s", "restart")}}
    clock.advance(5)
    assert inbox.ask("dump") == []
    clock.advance(3)
    assert inbox.ask("dump") == ["new"]
    assert _index(timers)["by_owner"] == {}


@pytest.mark.parametrize("seed", range(6))
def test_index_is_exact_under_random_operations(rig, seed):
    """A model of what should be pending, checked against the table after every step: the
    count, the index, and exactly which messages fired (and none that were cancelled)."""
    clock, tracker, timers, inbox = rig
    rnd = random.Random(seed)
    owners = [f"s{i}" for i in range(6)] + ["supervisor"]
    kinds = ["restart", "stable", "slot_wait", "resume"]
    model: dict[Any, tuple[float, str]] = {}  # key -> (due, message)
    fired_expected: list[str] = []
    serial = 0
    for _ in range(400):
        op = rnd.random()
        if op < 0.45:
            key: Any = (rnd.choice(owners), rnd.choice(kinds)) if rnd.random() < 0.9 else f"k{rnd.randrange(3)}"
            delay = rnd.choice([1.0, 2.0, 3.5, 7.0])
            serial += 1
            message = f"m{serial}"
            timers.tell(ScheduleTimer(key, delay, inbox, message))
            model[key] = (clock.elapsed + delay, message)
        elif op < 0.6:
            key = (rnd.choice(owners), rnd.choice(kinds))
            timers.tell(CancelTimer(key))
            model.pop(key, None)
        elif op < 0.7:
            owner = rnd.choice(owners)
            timers.tell(CancelTimers(owner))
            for key in [k for k in model if isinstance(k, tuple) and k[0] == owner]:
                del model[key]
        else:
            step = rnd.choice([0.5, 1.0, 2.0])
            tracker.wait_idle(5)
            target = clock.elapsed + step
            for key, (due, message) in sorted(model.items(), key=lambda kv: kv[1][0]):
                if due <= target:
                    fired_expected.append(message)
                    del model[key]
            clock.advance(step)
        tracker.wait_idle(5)
        index = _index(timers)
        assert index["exact"]
        assert index["keys"] == set(model)
        assert timers.ask(TimerStats())["timers"] == len(model)
    assert sorted(inbox.ask("dump")) == sorted(fired_expected)
    clock.advance(10)
    assert sorted(inbox.ask("dump")) == sorted(fired_expected + [m for _, m in model.values()])
    assert _index(timers) == {"exact": True, "keys": set(), "by_owner": {}}
