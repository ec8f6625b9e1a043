"""What every corvid actor shares: exact work accounting for ``Runtime.settle()``.

Pykka has no idle detection, so each runtime owns an :class:`ActivityTracker`: a counter
of work in flight. Every message put into a tracked actor's inbox counts until the actor
has *finished* handling it (the inbox learns that when the actor asks for its next
message, or when it tears down); every worker thread counts while it runs and stops
counting while it is parked on the simulated clock. ``settle()`` waits for zero.

The inbox hook is Pykka's ``_create_actor_inbox`` (internal: pykka is pinned to 4.5.x).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import pykka
from loguru import logger

from corvid_actors.errors import SettleTimeout


class ActivityTracker:
    """Counts work in flight across one runtime's actors and workers."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._busy = 0

    @property
    def busy(self) -> int:
        return self._busy

    def begin(self, n: int = 1) -> None:
        with self._cond:
            self._busy += n

    def end(self, n: int = 1) -> None:
        with self._cond:
            self._busy -= n
            if self._busy < 0:  # pragma: no cover - a bookkeeping bug; make it loud
                logger.error("activity tracker went negative ({})", self._busy)
                self._busy = 0
            if self._busy == 0:
                self._cond.notify_all()

    def wait_idle(self, timeout_s: float | None = None) -> None:
        """Block until nothing is in flight. ``timeout_s`` is real seconds (a safety net)."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._busy == 0, timeout=timeout_s):
                raise SettleTimeout(f"runtime still busy after {timeout_s}s ({self._busy} items in flight)")

    def run_tracked(self, target: Callable[[], None], name: str) -> threading.Thread:
        """Start a worker thread whose whole run counts as work in flight."""
        self.begin()

        def body() -> None:
            try:
                target()
            except Exception:  # noqa: BLE001 - workers report their own errors; this is a last resort
                logger.exception("worker {} failed", name)
            finally:
                self.end()

        thread = threading.Thread(target=body, name=name, daemon=True)
        thread.start()
        return thread


class _TrackingInbox(queue.Queue):  # type: ignore[type-arg]
    """An actor inbox that reports each message to the tracker until it is handled."""

    def __init__(self, tracker: ActivityTracker) -> None:
        super().__init__()
        self._tracker = tracker
        self._guard = threading.Lock()
        self._in_progress = False
        self._closed = False

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        with self._guard:
            if not self._closed:
                self._tracker.begin()
            super().put(item, block, timeout)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        self._finish_current()
        item = super().get(block, timeout)
        self._in_progress = True
        return item

    def empty(self) -> bool:
        # Only Pykka's teardown asks: the message being handled is done, and once the
        # inbox is drained nothing put later will ever be handled, so stop counting.
        self._finish_current()
        with self._guard:
            is_empty = super().empty()
            if is_empty:
                self._closed = True
            return is_empty

    def _finish_current(self) -> None:
        if self._in_progress:
            self._in_progress = False
            self._tracker.end()


class TrackedActor(pykka.ThreadingActor):
    """A Pykka actor whose inbox reports to the runtime's :class:`ActivityTracker`.

    Actors run on daemon threads so a wedged actor cannot keep the interpreter alive;
    the Runtime stops every actor explicitly on shutdown.
    """

    use_daemon_thread = True

    def __init__(self, tracker: ActivityTracker) -> None:
        self._tracker = tracker
        super().__init__()

    def _create_actor_inbox(self) -> Any:  # type: ignore[override]
        return _TrackingInbox(self._tracker)


def tell(ref: pykka.ActorRef[Any] | None, message: Any) -> bool:
    """Send ``message`` if ``ref`` is alive; False (not an error) when it is gone."""
    if ref is None:
        return False
    try:
        ref.tell(message)
        return True
    except pykka.ActorDeadError:
        return False
