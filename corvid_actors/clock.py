"""Time, the only module of the runtime that may read the wall clock or wait.

Every delay in corvid-actors goes through a :class:`Clock`: the runtime's timer
table (``actors/timers.py``) schedules on it, and workers that must wait (scripted latency, retry sleeps in
tools) call :meth:`Clock.wait`. :class:`RealClock` runs ONE timer thread over a heap —
never a ``threading.Timer`` per timer. The simulated clock lives in
``corvid_actors.testing.clock`` and fires timers only when a test advances it.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from loguru import logger


def wall_now() -> datetime:
    """Aware UTC wall-clock time, for timestamps outside any runtime (database defaults).

    Under the simulated clock freezegun freezes this too, so stored timestamps follow
    simulated time.
    """
    return datetime.now(UTC)


def iso_utc(moment: datetime) -> str:
    """ISO-8601 UTC text ending in ``Z`` (``2026-01-01T00:00:02.500Z``): the one format of
    every time corvid-actors shows or sends. A naive datetime is taken as UTC (the store
    keeps naive UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def iso_after(clock: Clock, delay_s: float) -> str:
    """ISO-8601 UTC text of the time ``delay_s`` after ``clock.now()`` (for due-at fields)."""
    return iso_utc(clock.now() + timedelta(seconds=delay_s))


def _cancelled_callback() -> None:
    """What a cancelled handle holds instead of its callback (the closure is released)."""


class TimerHandle:
    """A scheduled callback. ``cancel()`` is idempotent and thread-safe.

    Cancelling drops the callback at once (and with it whatever the closure holds) and
    tells the :class:`TimerHeap` holding the handle, which frees its slot soon (see there).
    """

    __slots__ = ("due", "fn", "cancelled", "seq", "_heap")

    def __init__(self, due: float, seq: int, fn: Callable[[], None]) -> None:
        self.due = due
        self.seq = seq
        self.fn = fn
        self.cancelled = False
        self._heap: TimerHeap | None = None

    def cancel(self) -> None:
        heap = self._heap
        if heap is not None:
            heap._cancel(self)  # under the heap's lock, so its count stays exact
        else:  # fired already, or never scheduled
            self.cancelled = True
            self.fn = _cancelled_callback

    def __lt__(self, other: TimerHandle) -> bool:
        return (self.due, self.seq) < (other.due, other.seq)


#: below this many scheduled handles a heap is never compacted (asyncio's
#: ``_MIN_SCHEDULED_TIMER_HANDLES``): rebuilding a small heap buys nothing
MIN_COMPACT_SIZE = 100
#: compact when more than this fraction of the scheduled handles are cancelled (asyncio: ½)
COMPACT_CANCELLED_FRACTION = 0.5


class TimerHeap:
    """The timers of one clock in due order, releasing cancelled ones promptly.

    A plain heap with lazy cancellation would hold every cancelled handle until its due
    time — with 30-minute session timeouts under churn that looks like a leak
    (FIELD-NOTES). As asyncio does, the heap counts its cancelled handles and rebuilds
    itself without them when they are more than half of it (and it holds more than
    :data:`MIN_COMPACT_SIZE`): amortised O(1) per cancel, and at most about twice the
    live timers (or the minimum) are ever held. Cancelled handles that reach the top
    are dropped as they surface.

    Not locked itself: every method runs under the owning clock's ``lock`` (a re-entrant
    lock), which a cancel from another thread takes.
    """

    def __init__(self, lock: AbstractContextManager[Any]) -> None:
        self._lock = lock
        self._heap: list[TimerHandle] = []
        self._cancelled = 0
        self._seq = itertools.count()

    def __len__(self) -> int:
        """Handles held, cancelled ones not yet released included."""
        return len(self._heap)

    @property
    def live(self) -> int:
        """Handles scheduled and not cancelled."""
        return len(self._heap) - self._cancelled

    def push(self, due: float, fn: Callable[[], None]) -> TimerHandle:
        handle = TimerHandle(due, next(self._seq), fn)
        handle._heap = self
        heapq.heappush(self._heap, handle)
        return handle

    def peek(self) -> TimerHandle | None:
        """The next live handle (cancelled ones on top are dropped), or None."""
        heap = self._heap
        while heap and heap[0].cancelled:
            heapq.heappop(heap)._heap = None
            self._cancelled -= 1
        return heap[0] if heap else None

    def pop(self) -> tuple[TimerHandle, Callable[[], None]]:
        """Remove the next live handle (``peek()`` first) and return it with its callback."""
        handle = heapq.heappop(self._heap)
        handle._heap = None
        self._maybe_compact()  # firing live timers raises the cancelled share too
        return handle, handle.fn

    def clear(self) -> None:
        for handle in self._heap:
            handle._heap = None
        self._heap.clear()
        self._cancelled = 0

    def _cancel(self, handle: TimerHandle) -> None:
        with self._lock:
            if handle.cancelled:
                return
            handle.cancelled = True
            handle.fn = _cancelled_callback
            if handle._heap is not self:  # popped to fire meanwhile: nothing held
                return
            self._cancelled += 1
            self._maybe_compact()

    def _maybe_compact(self) -> None:
        size = len(self._heap)
        if size > MIN_COMPACT_SIZE and self._cancelled > size * COMPACT_CANCELLED_FRACTION:
            self._compact()

    def _compact(self) -> None:
        kept = []
        for handle in self._heap:
            if handle.cancelled:
                handle._heap = None
            else:
                kept.append(handle)
        heapq.heapify(kept)
        self._heap = kept
        self._cancelled = 0


class Cancellable(Protocol):
    """What :meth:`Clock.wait` needs of a cancellation signal (a provider's
    ``CancelToken`` is one): whether it fired, and a callback when it does."""

    @property
    def cancelled(self) -> bool: ...

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Register ``callback`` (called at once if the signal already fired); returns a
        function that unregisters it."""
        ...


class Clock(Protocol):
    """What the runtime needs from time — and nothing about the runtime.

    Like Trio's ``Clock``, a clock knows no scheduler: it tells the time, runs a callback
    later and blocks a worker. A clock that must also see the runtime's work accounting
    (the simulated clock) says so through ``corvid_actors.actors.base.ActivityAware``,
    and the Runtime hands it over there.
    """

    def now(self) -> datetime:
        """Aware UTC wall-clock time."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""
        ...

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> TimerHandle:
        """Run ``fn`` (quickly: it should only send a message) after ``delay_s``."""
        ...

    def wait(self, delay_s: float, cancel: Cancellable | None = None) -> bool:
        """Block the calling *worker* thread for ``delay_s``; False if cancelled first.

        Never call this on an actor thread.
        """
        ...

    def start(self) -> None:
        """Called once by the Runtime that uses this clock, before anything is scheduled."""
        ...

    def stop(self) -> None:
        """Called by that Runtime's shutdown: drop pending timers, release what it holds."""
        ...


class RealClock:
    """Wall-clock time with one timer thread over a :class:`TimerHeap`."""

    # Kept as a class attribute: freezegun rewrites module-level references to time
    # functions but not class attributes, so the real clock stays real even while a
    # simulation freezes time (the process-wide I/O clock runs during simulations).
    _mono = staticmethod(time.monotonic)

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap = TimerHeap(self._cond)
        self._thread: threading.Thread | None = None
        self._stopping = False

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return self._mono()

    def start(self) -> None:
        with self._cond:
            if self._thread is not None:
                return
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="corvid-clock", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._heap.clear()
            self._cond.notify_all()
            thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> TimerHandle:
        due = self._mono() + max(0.0, delay_s)
        with self._cond:
            handle = self._heap.push(due, fn)
            if self._heap.peek() is handle:
                self._cond.notify()
        if self._thread is None:
            self.start()
        return handle

    def wait(self, delay_s: float, cancel: Cancellable | None = None) -> bool:
        done = threading.Event()
        unregister = cancel.on_cancel(done.set) if cancel is not None else (lambda: None)
        try:
            done.wait(max(0.0, delay_s))
        finally:
            unregister()
        return not (cancel is not None and cancel.cancelled)

    def pending(self) -> int:
        """Timers scheduled and not cancelled."""
        with self._cond:
            return self._heap.live

    def held(self) -> int:
        """Timer handles in memory, cancelled ones not yet released included."""
        with self._cond:
            return len(self._heap)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping:
                    head = self._heap.peek()
                    if head is None:
                        self._cond.wait()
                        continue
                    delay = head.due - self._mono()
                    if delay <= 0:
                        break
                    self._cond.wait(delay)
                if self._stopping:
                    return
                _handle, fn = self._heap.pop()
            try:
                fn()
            except Exception:  # noqa: BLE001 - a failing callback must not kill the clock
                logger.exception("timer callback failed")


_io_clock: RealClock | None = None
_io_clock_lock = threading.Lock()


def io_clock() -> RealClock:
    """The process-wide real clock for I/O deadlines (e.g. killing a tool's subprocess).

    A subprocess runs in real time even when the runtime's clock is simulated, so its
    timeout must be real too: a simulated deadline could never fire while ``settle()``
    waits for the worker blocked on that subprocess. One timer thread for the process.
    """
    global _io_clock
    with _io_clock_lock:
        if _io_clock is None:
            _io_clock = RealClock()
            _io_clock.start()
        return _io_clock
