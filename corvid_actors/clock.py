"""Time, the only module of the runtime that may read the wall clock or wait.

Every delay in corvid-actors goes through a :class:`Clock`: the runtime's ``Timers``
actor schedules on it, and workers that must wait (scripted latency, retry sleeps in
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
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from loguru import logger

if TYPE_CHECKING:
    from corvid_actors.actors.base import ActivityTracker
    from corvid_actors.providers.base import CancelToken


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


class TimerHandle:
    """A scheduled callback. ``cancel()`` is idempotent and thread-safe."""

    __slots__ = ("due", "fn", "cancelled", "seq")

    def __init__(self, due: float, seq: int, fn: Callable[[], None]) -> None:
        self.due = due
        self.seq = seq
        self.fn = fn
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def __lt__(self, other: TimerHandle) -> bool:
        return (self.due, self.seq) < (other.due, other.seq)


class Clock(Protocol):
    """What the runtime needs from time."""

    def now(self) -> datetime:
        """Aware UTC wall-clock time."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""
        ...

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> TimerHandle:
        """Run ``fn`` (quickly: it should only send a message) after ``delay_s``."""
        ...

    def wait(self, delay_s: float, cancel: CancelToken | None = None) -> bool:
        """Block the calling *worker* thread for ``delay_s``; False if cancelled first.

        Never call this on an actor thread.
        """
        ...

    def attach(self, tracker: ActivityTracker, settle: Callable[[], None]) -> None:
        """Called by the Runtime that uses this clock (the simulated clock needs both)."""
        ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


class RealClock:
    """Wall-clock time with one timer thread over a heap of :class:`TimerHandle`."""

    # Kept as a class attribute: freezegun rewrites module-level references to time
    # functions but not class attributes, so the real clock stays real even while a
    # simulation freezes time (the process-wide I/O clock runs during simulations).
    _mono = staticmethod(time.monotonic)

    def __init__(self) -> None:
        self._heap: list[TimerHandle] = []
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopping = False

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return self._mono()

    def attach(self, tracker: ActivityTracker, settle: Callable[[], None]) -> None:
        pass

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
        handle = TimerHandle(self._mono() + max(0.0, delay_s), next(self._seq), fn)
        with self._cond:
            heapq.heappush(self._heap, handle)
            if self._heap[0] is handle:
                self._cond.notify()
        if self._thread is None:
            self.start()
        return handle

    def wait(self, delay_s: float, cancel: CancelToken | None = None) -> bool:
        done = threading.Event()
        unregister = cancel.on_cancel(done.set) if cancel is not None else (lambda: None)
        try:
            done.wait(max(0.0, delay_s))
        finally:
            unregister()
        return not (cancel is not None and cancel.cancelled)

    def pending(self) -> int:
        with self._cond:
            return sum(1 for h in self._heap if not h.cancelled)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping:
                    while self._heap and self._heap[0].cancelled:
                        heapq.heappop(self._heap)
                    if not self._heap:
                        self._cond.wait()
                        continue
                    delay = self._heap[0].due - self._mono()
                    if delay <= 0:
                        break
                    self._cond.wait(delay)
                if self._stopping:
                    return
                handle = heapq.heappop(self._heap)
            try:
                handle.fn()
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
