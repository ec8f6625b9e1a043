"""Cancelled timers release their memory: the closure at once, the heap slot soon (issue 21).

Both clocks share :class:`corvid_actors.clock.TimerHeap`; each test runs against the
simulated clock and, where real time is not needed, the real one with delays of hours
(the timers never fire during the test).
"""

from __future__ import annotations

import gc
import random
import threading
import weakref

import pytest

from corvid_actors.clock import MIN_COMPACT_SIZE, RealClock, TimerHeap
from corvid_actors.testing import SimClock

HOUR_S = 3600.0


class _Payload:
    """Something a timer's closure holds (a session's message, say)."""


@pytest.fixture(params=["sim", "real"])
def clock(request):
    clock = SimClock() if request.param == "sim" else RealClock()
    yield clock
    clock.stop()


def test_cancelling_a_timer_releases_its_closure_at_once(clock):
    payload = _Payload()
    alive = weakref.ref(payload)
    handle = clock.call_later(30 * 60.0, lambda p=payload: p)
    del payload
    gc.collect()
    assert alive() is not None, "a scheduled timer keeps its closure"
    handle.cancel()
    gc.collect()
    assert alive() is None, "a cancelled timer still holds its closure until its due time"


def test_churned_timers_do_not_accumulate_in_the_heap(clock):
    # A session schedules long timers (timeout 30 min, idle 5 min, stable 10 min) and
    # cancels them when it stops a second later: the old heap held them all for hours.
    live = [clock.call_later(HOUR_S, lambda: None) for _ in range(20)]
    for i in range(20_000):
        clock.call_later((i % 7 + 1) * HOUR_S, lambda: None).cancel()
    assert clock.pending() == len(live)
    # at most twice the live timers, or the compaction threshold
    assert clock.held() <= max(2 * len(live), MIN_COMPACT_SIZE + 1)


def test_the_live_count_stays_exact_under_cancels_from_many_threads(clock):
    handles = [clock.call_later(HOUR_S + i, lambda: None) for i in range(4_000)]
    keep = set(random.Random(7).sample(range(len(handles)), 500))
    doomed = [h for i, h in enumerate(handles) if i not in keep]

    def cancel_all(chunk):
        for h in chunk:
            h.cancel()
            h.cancel()  # idempotent: counted once

    threads = [threading.Thread(target=cancel_all, args=(doomed[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5.0)
    assert clock.pending() == len(keep)
    assert clock.held() <= 2 * len(keep) + 1


def test_compaction_keeps_the_due_order():
    clock = SimClock()
    try:
        fired: list[int] = []
        rng = random.Random(21)
        handles = {}
        for n in range(1_000):
            handles[n] = clock.call_later(rng.uniform(1, 1_000), lambda n=n: fired.append(n))
        cancelled = set(rng.sample(range(1_000), 900))  # forces several compactions
        for n in cancelled:
            handles[n].cancel()
        assert clock.held() < 1_000
        clock.advance(1_001)
        expected = sorted((n for n in handles if n not in cancelled), key=lambda n: (handles[n].due, n))
        assert fired == expected
        assert clock.pending() == 0 and clock.held() == 0
    finally:
        clock.close()


def test_cancel_after_firing_does_not_disturb_the_count():
    clock = SimClock()
    try:
        fired = [clock.call_later(1.0, lambda: None) for _ in range(300)]
        clock.advance(2.0)
        later = [clock.call_later(HOUR_S, lambda: None) for _ in range(300)]
        for handle in fired:
            handle.cancel()  # too late: already fired
        assert clock.pending() == len(later)
        for handle in later[:200]:
            handle.cancel()
        assert clock.pending() == 100
        assert clock.held() <= 2 * 100 + MIN_COMPACT_SIZE
    finally:
        clock.close()


def test_firing_live_timers_does_not_leave_the_cancelled_ones_behind():
    clock = SimClock()
    try:
        fired = []
        for _ in range(500):
            clock.call_later(1.0, lambda: fired.append(1))
        clock.call_later(HOUR_S, lambda: None)  # live, and due before the cancelled ones
        for handle in [clock.call_later(2 * HOUR_S, lambda: None) for _ in range(499)]:
            handle.cancel()  # just under half of the heap: no compaction yet
        assert clock.held() == 1_000
        clock.advance(2.0)  # the early ones fire: now nearly all that is held is cancelled
        assert len(fired) == 500 and clock.pending() == 1
        assert clock.held() <= max(2 * clock.pending(), MIN_COMPACT_SIZE + 1)
    finally:
        clock.close()


def test_the_real_clock_still_fires_live_timers_after_compaction():
    clock = RealClock()
    done = threading.Event()
    try:
        for _ in range(500):
            clock.call_later(HOUR_S, lambda: None).cancel()
        clock.call_later(0.01, done.set)
        assert done.wait(1.0)
        assert clock.pending() == 0
    finally:
        clock.stop()


def test_a_heap_on_its_own_counts_what_it_holds():
    heap = TimerHeap(threading.RLock())
    handles = [heap.push(float(i), lambda: None) for i in range(10)]
    handles[0].cancel()
    handles[5].cancel()
    assert heap.live == 8 and len(heap) == 10
    head = heap.peek()  # the cancelled head is dropped as it surfaces
    assert head is handles[1] and len(heap) == 9 and heap.live == 8
    handle, fn = heap.pop()
    assert handle is handles[1] and fn is handles[1].fn
    heap.clear()
    assert heap.live == 0 and len(heap) == 0
