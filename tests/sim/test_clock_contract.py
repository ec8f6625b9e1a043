"""The Clock is time only: the settle/tracker wiring is the actors layer's ``ActivityAware``,
which the simulated clock implements and the real clock does not."""

from __future__ import annotations

import threading
import time

from corvid_actors.actors.base import ActivityAware, ActivityTracker
from corvid_actors.clock import Clock, RealClock
from corvid_actors.core.vocabulary import CancelToken
from corvid_actors.testing import sim_runtime


def test_the_clock_protocol_is_time_only():
    members = {name for name in vars(Clock) if not name.startswith("_")}
    assert members == {"now", "monotonic", "call_later", "wait", "start", "stop"}


def test_only_the_simulated_clock_needs_the_runtimes_work_accounting(sim_clock):
    real = RealClock()
    try:
        assert not isinstance(real, ActivityAware)
        assert isinstance(sim_clock, ActivityAware)
    finally:
        real.stop()


def test_the_runtime_attaches_its_tracker_and_settle_to_an_activity_aware_clock(sim_clock, scripted):
    runtime = sim_runtime(sim_clock, scripted)
    try:
        done = []
        runtime.internals.tracker.run_tracked(lambda: done.append(sim_clock.wait(10)), "waiter")
        runtime.settle(5)  # returns although the worker runs: parked on the clock (tracker)
        assert done == []
        sim_clock.advance(10)  # settles the runtime after the timer fired (settle)
        assert done == [True]
    finally:
        runtime.shutdown()


def test_a_parked_waiter_is_not_work_in_flight_and_a_cancel_wakes_it(sim_clock):
    tracker = ActivityTracker()
    sim_clock.attach(tracker, lambda: tracker.wait_idle(5))
    token = CancelToken()
    results = []
    tracker.run_tracked(lambda: results.append(sim_clock.wait(60, token)), "waiter")
    tracker.wait_idle(5)  # returns: the waiter is parked, not busy
    assert results == [] and sim_clock.pending() == 1
    token.cancel()
    tracker.wait_idle(5)
    assert results == [False]


def test_the_real_clock_waits_with_any_cancellable():
    class Flag:
        def __init__(self) -> None:
            self.cancelled = False
            self._callbacks: list = []

        def on_cancel(self, callback):
            if self.cancelled:  # the protocol: a token that already fired calls back at once
                callback()
            self._callbacks.append(callback)
            return lambda: None

        def fire(self) -> None:
            self.cancelled = True
            for callback in self._callbacks:
                callback()

    clock, flag = RealClock(), Flag()
    try:
        threading.Thread(target=flag.fire).start()
        started = time.monotonic()
        assert clock.wait(30, flag) is False  # woken by the cancel, long before 30 s
        assert time.monotonic() - started < 5
    finally:
        clock.stop()
