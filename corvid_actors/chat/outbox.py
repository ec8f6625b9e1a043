"""The bridge's outbox: one thread that does everything slow, so nothing else waits.

Session events reach the bridge on the EventBus thread, which must never block (every
session's events pass through it). The bridge only *puts* work here — a non-blocking
``put`` into a bounded queue — and this thread maps it to a conversation and calls the
transport's ``send``, which may be slow or fail. A full queue drops the new item (counted
in ``stats``) rather than block the bus.

With a tracker, each item counts as work in flight from ``put`` until it is handled, so
``Runtime.settle()`` also waits for the delivery of every reply (simulation tests see
what the participant saw).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from loguru import logger

from corvid_actors.actors.base import ActivityTracker
from corvid_actors.chat.transport import TransportError


class _Stop:
    """The worker's end-of-queue marker."""


_STOP = _Stop()
T = TypeVar("T")


class Outbox(Generic[T]):
    """A bounded FIFO with one worker thread calling ``handle(item)`` for each item."""

    def __init__(self, handle: Callable[[T], None], *, max_pending: int, tracker: ActivityTracker | None = None,
                 name: str = "chat-outbox") -> None:
        self._handle = handle
        self._tracker = tracker
        self._queue: queue.Queue[T | _Stop] = queue.Queue(maxsize=max_pending)
        self._name = name
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.stats = {"handled": 0, "failed": 0, "dropped": 0}

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()

    def put(self, item: T) -> bool:
        """Queue ``item`` without blocking; False (and counted) when the queue is full."""
        if self._tracker is not None:
            self._tracker.begin()
        try:
            self._queue.put_nowait(item)
            return True
        except queue.Full:
            if self._tracker is not None:
                self._tracker.end()
            with self._lock:
                self.stats["dropped"] += 1
            logger.warning("chat outbox full: dropped a message for the transport")
            return False

    def stop(self, join_timeout_s: float) -> None:
        """Deliver what is queued, then end the thread (waiting at most ``join_timeout_s``).

        Items still queued after that (a hung transport) are discarded and stop counting
        as work in flight.
        """
        thread, self._thread = self._thread, None
        if thread is None:
            return
        try:
            self._queue.put(_STOP, timeout=join_timeout_s)  # waits for room while the worker drains
        except queue.Full:
            pass
        thread.join(join_timeout_s)
        if thread.is_alive():
            logger.warning("chat outbox: the transport is still busy after {} s; giving up on queued messages",
                           join_timeout_s)
        self._discard_queued()

    def _discard_queued(self) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if not isinstance(item, _Stop) and self._tracker is not None:
                self._tracker.end()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if isinstance(item, _Stop):
                return
            try:
                self._handle(item)
                outcome = "handled"
            except TransportError as exc:  # the platform said no or is away: expected, no traceback
                logger.warning("chat outbox: delivery failed: {}", exc)
                outcome = "failed"
            except Exception:  # noqa: BLE001 - a failing transport must not end the outbox
                logger.opt(exception=True).warning("chat outbox: delivery failed")
                outcome = "failed"
            with self._lock:
                self.stats[outcome] += 1
            # Counted last: once settle() returns, the stats and the transport agree.
            if self._tracker is not None:
                self._tracker.end()
