"""The timer table (issue 18): scheduling and cancelling run on the caller's thread, a due
timer is told to its target by the clock's callback — unless it was cancelled or replaced
first, decided under the table's lock — and nothing is called while that lock is held."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pykka
import pytest

from corvid_actors.actors.base import ActivityTracker, TrackedActor, tell
from corvid_actors.actors.timers import (
    CancelTimer,
    CancelTimers,
    ScheduleTimer,
    TimerIndexCheck,
    Timers,
    TimerStats,
)
from corvid_actors.clock import RealClock
from corvid_actors.testing import SimClock
from tests.actors.recording import Inbox

#: real seconds a test waits for something that should take microseconds
WAIT_S = 2.0


class Recorder:
    """A synchronous target (anything with ``tell`` is one): records on the telling thread."""

    def __init__(self, on_tell: Any = None) -> None:
        self.got: list[Any] = []
        self.threads: list[str] = []
        self._lock = threading.Lock()
        self._on_tell = on_tell

    def tell(self, message: Any) -> None:
        with self._lock:
            self.got.append(message)
            self.threads.append(threading.current_thread().name)
        if self._on_tell is not None:
            self._on_tell(message)


@pytest.fixture
def clock():
    c = SimClock()
    yield c
    c.close()


def test_a_key_scheduled_again_replaces_its_timer(clock):
    timers, target = Timers(clock), Recorder()
    timers.schedule(("s", "restart"), 5, target, "old")
    timers.schedule(("s", "restart"), 8, target, "new")
    assert clock.pending() == 1  # the old handle is cancelled, not just ignored when due
    clock.advance(5)
    assert target.got == []
    clock.advance(3)
    assert target.got == ["new"]
    assert timers.stats()["timers"] == 0


def test_cancel_before_due_tells_nothing_and_says_whether_there_was_a_timer(clock):
    timers, target = Timers(clock), Recorder()
    timers.schedule(("s", "idle"), 5, target, "idle")
    assert timers.cancel(("s", "idle")) is True
    assert timers.cancel(("s", "idle")) is False
    assert timers.cancel("never scheduled") is False
    clock.advance(10)
    assert target.got == [] and clock.pending() == 0


def test_cancel_owner_cancels_only_that_owners_timers(clock):
    timers, target = Timers(clock), Recorder()
    for owner in ("a", "b"):
        for kind in ("restart", "stable"):
            timers.schedule((owner, kind), 1, target, f"{owner}-{kind}")
    timers.schedule("a", 1, target, "plain key 'a' is no owner's")
    assert timers.cancel_owner("a") == 2
    assert timers.cancel_owner("a") == 0
    assert timers.index_check() == {"exact": True, "keys": {("b", "restart"), ("b", "stable"), "a"},
                                    "by_owner": {"b": {("b", "restart"), ("b", "stable")}}}
    clock.advance(1)
    assert sorted(target.got) == ["b-restart", "b-stable", "plain key 'a' is no owner's"]


def test_the_messages_of_the_actor_it_replaced_are_handled_on_the_callers_thread(clock):
    timers, target = Timers(clock), Recorder()
    assert tell(timers, ScheduleTimer(("s", "a"), 1, target, "a")) is True
    tell(timers, ScheduleTimer(("s", "b"), 1, target, "b"))
    tell(timers, ScheduleTimer(("t", "c"), 1, target, "c"))
    # done when tell returns: no settle, no mailbox
    assert timers.ask(TimerStats()) == {"timers": 3, "by_kind": {"a": 1, "b": 1, "c": 1}, "clock_handles": 3}
    tell(timers, CancelTimer(("s", "a")))
    timers.tell(CancelTimers("t"))
    assert timers.ask(TimerIndexCheck())["keys"] == {("s", "b")}
    future = timers.ask(TimerStats(), block=False)
    assert future.get()["timers"] == 1
    clock.advance(1)
    assert target.got == ["b"]
    assert target.threads == [threading.current_thread().name]  # the thread that advanced


def test_a_bad_told_message_is_logged_not_raised_and_an_asked_one_raises(clock):
    timers = Timers(clock)
    timers.tell(ScheduleTimer(["unhashable"], 1, Recorder(), "x"))  # as a told message: logged
    with pytest.raises(TypeError):
        timers.ask(ScheduleTimer(["unhashable"], 1, Recorder(), "x"))
    future = timers.ask(ScheduleTimer(["unhashable"], 1, Recorder(), "x"), block=False)
    with pytest.raises(TypeError):
        future.get()
    # anything that is no timer message is ignored, as the actor did (a sink for answers)
    timers.tell("not a timer message")
    assert timers.ask("not a timer message") is None
    assert timers.stats()["timers"] == 0 and timers.is_alive()


def test_a_dead_target_is_skipped_silently(clock):
    tracker = ActivityTracker()
    clock.attach(tracker, lambda: tracker.wait_idle(WAIT_S))
    timers = Timers(clock)
    dead, alive = Inbox.start(tracker), Inbox.start(tracker)
    try:
        dead.stop()
        timers.schedule(("s", "late"), 1, dead, "too late")
        timers.schedule(("s", "due"), 2, alive, "due")
        clock.advance(2)  # no exception out of the clock's callback
        assert alive.ask("dump") == ["due"]
        assert timers.stats()["timers"] == 0
    finally:
        pykka.ActorRegistry.stop_all()


def test_close_cancels_everything_and_drops_later_schedules(clock):
    timers, target = Timers(clock), Recorder()
    timers.schedule(("s", "a"), 1, target, "a")
    timers.close()
    assert not timers.is_alive() and clock.pending() == 0
    timers.schedule(("s", "b"), 1, target, "b")
    tell(timers, ScheduleTimer(("s", "c"), 1, target, "c"))
    clock.advance(5)
    assert target.got == [] and clock.pending() == 0


# --- no lock held while telling ---------------------------------------------------------------


def test_a_target_that_schedules_from_inside_the_tell_does_not_deadlock(clock):
    """The table's lock is not re-entrant: a target whose ``tell`` schedules again (a
    synchronous one, here) would hang if the table told it under the lock."""
    timers = Timers(clock)
    ticks: list[int] = []

    def again(n: int) -> None:
        ticks.append(n)
        if n < 5:
            timers.schedule(("r", "tick"), 1, target, n + 1)
            timers.cancel(("r", "other"))

    target = Recorder(again)
    timers.schedule(("r", "tick"), 1, target, 1)
    done = threading.Event()

    def drive() -> None:
        clock.advance(10)
        done.set()

    # advancing a SimClock takes no real time: a hang means the lock was held
    threading.Thread(target=drive, name="advance", daemon=True).start()
    assert done.wait(WAIT_S), "deadlock: the target was told under the table's lock"
    assert ticks == [1, 2, 3, 4, 5]


def test_an_actor_that_schedules_from_its_timer_message_under_the_inline_dispatcher(clock):
    """Simulations: the clock's callback runs on the advancing thread, which then runs the
    target's handler (settle); the handler schedules its next timer through the table.
    (The inline tell only queues the message: the synchronous target above is the one that
    would hang if the table told under its lock.)"""
    tracker = ActivityTracker("inline")
    clock.attach(tracker, lambda: tracker.wait_idle(WAIT_S))
    timers = Timers(clock)

    class Ticker(TrackedActor):
        def __init__(self, tracker: ActivityTracker) -> None:
            super().__init__(tracker)
            self.seen: list[int] = []

        def on_receive(self, message: Any) -> Any:
            if message == "dump":
                return list(self.seen)
            self.seen.append(message)
            if message < 5:
                tell(timers, ScheduleTimer(("ticker", "tick"), 1, self.actor_ref, message + 1))
            return None

    ticker = Ticker.start(tracker)
    try:
        tell(timers, ScheduleTimer(("ticker", "tick"), 1, ticker, 1))
        done = threading.Event()

        def drive() -> None:
            clock.advance(10)
            done.set()

        threading.Thread(target=drive, name="advance", daemon=True).start()
        assert done.wait(WAIT_S), "deadlock: the target was run under the table's lock"
        assert ticker.ask("dump") == [1, 2, 3, 4, 5]
        assert timers.stats()["timers"] == 0
    finally:
        pykka.ActorRegistry.stop_all()


# --- a fire racing a cancel, on real threads --------------------------------------------------


def test_a_fire_racing_a_cancel_on_another_thread_is_decided_once():
    """The real clock fires timer i on its thread while another thread cancels it around its
    due time. Whichever takes the table's lock first wins: a cancel that found the timer
    means the target never hears of it; a cancel that did not means the target is told
    exactly once. (A message already told is not recalled: targets drop late timers by
    their generation — the session's keys carry it.) Bounded: about 0.4 s."""
    clock = RealClock()
    clock.start()
    timers = Timers(clock)
    target = Recorder()
    n, spacing = 200, 0.002
    rnd = random.Random(7)
    jitter = [rnd.uniform(-0.002, 0.006) for _ in range(n)]
    cancelled: dict[int, bool] = {}
    try:
        t0 = time.monotonic()
        for i in range(n):
            timers.schedule(("race", i), t0 + i * spacing - time.monotonic(), target, i)

        def canceller() -> None:
            for i in range(n):
                pause = t0 + i * spacing + jitter[i] - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                cancelled[i] = timers.cancel(("race", i))

        thread = threading.Thread(target=canceller, name="canceller")
        thread.start()
        thread.join(WAIT_S)
        assert not thread.is_alive()
        # one timer after all of them: the clock fires in due order on one thread, so once
        # it is told every earlier fire has finished telling
        last = threading.Event()
        timers.schedule("last", 0.0, Recorder(lambda _m: last.set()), "last")
        assert last.wait(WAIT_S)
    finally:
        timers.close()
        clock.stop()
    told = target.got
    assert len(told) == len(set(told)), "a timer was told twice"
    assert set(told) == {i for i in range(n) if not cancelled[i]}
    assert set(told) and len(told) < n, "the race was never run both ways"
    assert timers.stats()["timers"] == 0
