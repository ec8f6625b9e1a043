"""The simulated clock: time that moves only when a test says so.

:class:`SimClock` owns a heap of timers and keeps freezegun's frozen time in step, so
``datetime.now()`` and ``time.time()`` anywhere in the process (database timestamps
included) agree with simulated time. :meth:`SimClock.advance` fires due timers in time
order and lets the runtime settle after each one, so a chain — crash, backoff, restart,
crash — unfolds exactly as it would in real time, in microseconds.

Workers that wait in simulated time (scripted latency) park on the clock: while parked
they do not count as work in flight, so ``settle()`` returns and the test can advance.
For both, the clock needs the runtime's work accounting: it is
:class:`~corvid_actors.actors.base.ActivityAware`, and the Runtime calls
:meth:`SimClock.attach` (a test driving actors without a Runtime calls it itself).
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import freezegun
import freezegun.api

from corvid_actors.actors.base import ActivityTracker
from corvid_actors.clock import Cancellable, TimerHandle, TimerHeap

DEFAULT_START = datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC)

#: modules that keep real time while a SimClock is open: the test runner (``pytest
#: --durations`` reports real durations) and the logger (log lines carry real times)
REAL_TIME_MODULES = ("_pytest", "pluggy", "loguru")

#: Provider SDKs whose pydantic models are typed with ``datetime``. Imported before the first
#: freeze and left out of freezegun's module rewrite: a model class created (or rebuilt, as
#: ``anthropic.lib.streaming`` does on import) while ``datetime.datetime`` is freezegun's
#: ``FakeDatetime`` gets a field type pydantic cannot build a schema for, for the rest of
#: the process — the SDK then fails in whichever later test uses it first.
SDK_MODULES = ("anthropic", "ollama")

_freeze_lock = threading.Lock()
_open_clocks = 0
_saved_inspection_limit: int | None = None


def _import_sdks() -> None:
    """Import the provider SDKs (those installed) while ``datetime`` is still the real one."""
    for name in SDK_MODULES:
        if name not in sys.modules:
            with contextlib.suppress(ImportError):
                importlib.import_module(name)


def _begin_freeze() -> None:
    """While any SimClock is open, freezegun inspects no call stack, so shallow and deep
    callers agree on the time (FIELD-NOTES: freezegun). The first clock saves the
    process-wide option, the last one closed puts it back."""
    global _open_clocks, _saved_inspection_limit
    with _freeze_lock:
        if _open_clocks == 0:
            _saved_inspection_limit = freezegun.api.call_stack_inspection_limit
            freezegun.api.call_stack_inspection_limit = 0
        _open_clocks += 1


def _end_freeze() -> None:
    global _open_clocks
    with _freeze_lock:
        _open_clocks -= 1
        if _open_clocks == 0 and _saved_inspection_limit is not None:
            freezegun.api.call_stack_inspection_limit = _saved_inspection_limit


class SimClock:
    """A deterministic clock for simulations (see the module docstring).

    Use as ``clock = SimClock()`` and pass it to ``Runtime(clock=clock)``; then
    ``clock.advance(seconds)`` or ``clock.advance_to(...)``. ``clock.close()`` (or the
    runtime's shutdown) unfreezes time and leaves no freezegun option changed. The test
    runner and the logger keep real time throughout (:data:`REAL_TIME_MODULES`).

    While a clock is open, ``time.monotonic()``, ``time.time()``, ``time.perf_counter()``
    and ``datetime.now()`` are frozen in the **whole test process**, the test's own code
    included: a test's real-time bound (``started = time.monotonic(); …; assert
    time.monotonic() - started < 5``) silently measures zero, and a polling loop bounded
    by ``time.monotonic()`` never ends. Bound real waits with
    :func:`corvid_actors.testing.real_monotonic` (or ``real_perf_counter``, ``real_time``).
    """

    def __init__(self, start: datetime = DEFAULT_START) -> None:
        if start.tzinfo is None:
            start = start.replace(tzinfo=UTC)
        self._start = start
        self._t = 0.0
        self._lock = threading.RLock()
        self._heap = TimerHeap(self._lock)  # cancelled timers are released (see TimerHeap)
        self._tracker: ActivityTracker | None = None
        #: every runtime on this clock: (its tracker, its settle), in attach order
        self._attached: list[tuple[ActivityTracker, Callable[[], None]]] = []
        self._stops = 0
        _import_sdks()
        _begin_freeze()
        try:
            self._freezer = freezegun.freeze_time(start.replace(tzinfo=None),
                                                  ignore=[*REAL_TIME_MODULES, *SDK_MODULES])
            self._frozen = self._freezer.start()
        except BaseException:
            _end_freeze()
            raise
        self._closed = False

    # --- the Clock protocol (and ActivityAware) --------------------------------------

    def now(self) -> datetime:
        """The simulated wall time: the clock's start (2026-01-01T00:00Z by default) plus the simulated
        seconds."""
        return self._start + timedelta(seconds=self._t)

    def monotonic(self) -> float:
        """Simulated seconds since the clock's start."""
        return self._t

    def attach(self, tracker: ActivityTracker, settle: Callable[[], None]) -> None:
        """Take the runtime's work accounting (``ActivityAware``): ``tracker`` to stop
        counting a parked worker, ``settle`` to run after each timer fires. Several
        runtimes may share one clock (daemons of a cluster in one simulation): each is
        settled in turn after each timer, and the clock closes when the last one stops."""
        if self._tracker is None:
            self._tracker = tracker
        self._attached.append((tracker, settle))

    def detach(self, tracker: ActivityTracker) -> None:
        """Forget the runtime of ``tracker`` (it died: ``testing.faults.kill_runtime``):
        timers no longer settle it, and it no longer counts among the runtimes whose
        stops close the clock. Other runtimes on the clock go on."""
        self._attached = [(t, settle) for t, settle in self._attached if t is not tracker]
        if self._tracker is tracker:
            self._tracker = self._attached[0][0] if self._attached else None

    def _settle(self) -> None:
        for _tracker, settle in self._attached:
            settle()

    def start(self) -> None:
        """Nothing to start: simulated time moves only when a test advances it."""
        pass

    def stop(self) -> None:
        """A runtime on this clock stopped: the last one closes it."""
        self._stops += 1
        if self._stops >= len(self._attached):
            self.close()

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> TimerHandle:
        """Call ``fn`` when simulated time reaches now + ``delay_s`` (a negative delay counts as 0);
        returns a handle to cancel it."""
        with self._lock:
            return self._heap.push(self._t + max(0.0, delay_s), fn)

    def wait(self, delay_s: float, cancel: Cancellable | None = None) -> bool:
        """Park the calling worker until simulated time reaches now + ``delay_s``."""
        # the waiting worker's runtime (several may share the clock)
        tracker = next((t for t, _ in self._attached if t.on_worker), self._tracker)
        woken = threading.Event()
        once = threading.Lock()
        # a running worker stops counting as one while parked (the inline dispatcher waits
        # for running workers); known before wake() can run, which may be at once
        state = {"fired": False, "worker": tracker is not None and tracker.on_worker}

        def wake() -> None:
            with once:
                if state["fired"]:
                    return
                state["fired"] = True
                if tracker is not None:
                    tracker.unpark(state["worker"])  # counted again before the waiter runs on
            woken.set()

        self.call_later(delay_s, wake)
        unregister = cancel.on_cancel(wake) if cancel is not None else (lambda: None)
        if tracker is not None:
            tracker.park()  # parked: not work in flight
        woken.wait()
        unregister()
        return not (cancel is not None and cancel.cancelled)

    # --- driving time ---------------------------------------------------------------

    @property
    def elapsed(self) -> float:
        """Simulated seconds since the start."""
        return self._t

    def pending(self) -> int:
        """Timers scheduled and not cancelled."""
        with self._lock:
            return self._heap.live

    def held(self) -> int:
        """Timer handles in memory, cancelled ones not yet released included."""
        with self._lock:
            return len(self._heap)

    def next_due(self) -> float | None:
        """Simulated seconds until the next live timer, or None."""
        with self._lock:
            head = self._heap.peek()
            return None if head is None else head.due - self._t

    def advance(self, seconds: float) -> int:
        """Move time forward by ``seconds``, firing due timers in order; returns how many fired."""
        if seconds < 0:
            raise ValueError("cannot move simulated time backwards")
        return self.advance_to(self._t + seconds)

    def advance_to(self, t: float) -> int:
        """Move time to ``t`` simulated seconds after the start."""
        fired = 0
        self._settle()
        while True:
            with self._lock:
                head = self._heap.peek()
                if head is None or head.due > t:
                    break
                handle, fn = self._heap.pop()
                self._set_time(max(self._t, handle.due))
            fn()
            fired += 1
            self._settle()
        with self._lock:
            self._set_time(max(self._t, t))
        self._settle()
        return fired

    def run_until_idle(self, max_seconds: float = 7 * 24 * 3600.0) -> float:
        """Fire timers until none is left (or ``max_seconds`` pass); returns time moved."""
        start = self._t
        while True:
            due = self.next_due()
            if due is None or self._t + due > start + max_seconds:
                return self._t - start
            self.advance(due)

    def close(self) -> None:
        """Stop freezing time: the process's real clocks run again. Idempotent; the last runtime on the
        clock to stop calls it."""
        if not self._closed:
            self._closed = True
            try:
                self._freezer.stop()
            finally:
                _end_freeze()

    def _set_time(self, t: float) -> None:
        self._t = t
        self._frozen.move_to(self.now().replace(tzinfo=None))
