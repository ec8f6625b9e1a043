"""Whether the store is up: :class:`Availability`, the outage machine of
:class:`~corvid_actors.db.store_base.StoreBase`.

An outage starts with the first fault a write or a probe meets (its reason is kept until
the store is back: the first reason wins). While it lasts, operations are refused at
once, except once per backoff step (doubling from the first to the longest wait), when
the store tries to recover first. Listeners hear ``reason`` when the outage starts and
``None`` when it ends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from loguru import logger

from corvid_actors.errors import StoreUnavailableError


class Availability:
    """The store's availability under its lock (see the module docstring). ``monotonic``:
    the runtime's clock; ``backoff_s``: (first, longest) wait between recovery attempts."""

    def __init__(self, lock: threading.RLock, monotonic: Callable[[], float],
                 backoff_s: tuple[float, float]) -> None:
        self._lock, self._monotonic = lock, monotonic
        #: why the store is down, or None
        self.down: str | None = None
        self._backoff_first, self._backoff_max = backoff_s
        self._backoff = self._backoff_first
        self._retry_at = 0.0
        self._listeners: list[Callable[[str | None], None]] = []

    def add_listener(self, listener: Callable[[str | None], None]) -> None:
        """See :meth:`StoreBase.add_listener <corvid_actors.db.store_base.StoreBase.add_listener>`."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[str | None], None]) -> None:
        """Forget ``listener`` (nothing if it was not added)."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def recover_if_due(self, recover: Callable[[], None], *, now: bool = False) -> None:
        """While down: raise at once until the backoff passed (``now``: whatever the
        backoff), then try ``recover()`` (under the lock; it raises if the store is still
        down, and the next attempt waits twice as long)."""
        with self._lock:
            if now:
                self._retry_at = 0.0
            reason = self.down
            if reason is None:
                return
            if self._monotonic() < self._retry_at:
                raise StoreUnavailableError(f"store unavailable: {reason}")
            try:
                recover()
            except Exception as exc:
                self._backoff = min(self._backoff * 2, self._backoff_max)
                self._retry_at = self._monotonic() + self._backoff
                if isinstance(exc, StoreUnavailableError):
                    raise
                raise StoreUnavailableError(f"store unavailable: {reason}") from exc
        self.mark_available()

    def mark_unavailable(self, reason: str) -> StoreUnavailableError:
        """Record the outage (the first reason wins until it is over); the error to raise."""
        with self._lock:
            first = self.down is None
            if first:
                self.down = reason
                self._backoff = self._backoff_first
                self._retry_at = self._monotonic() + self._backoff
            current = self.down
        if first:
            logger.error("store unavailable: {} (writes are refused until it is back)", reason)
            self._notify(reason)
        return StoreUnavailableError(f"store unavailable: {current}")

    def mark_available(self) -> None:
        """The store answers again: the outage is over."""
        with self._lock:
            was, self.down = self.down, None
            self._backoff = self._backoff_first
        if was is not None:
            logger.info("store available again (it was down: {})", was)
            self._notify(None)

    def _notify(self, reason: str | None) -> None:
        for listener in list(self._listeners):
            try:
                listener(reason)
            except Exception:  # noqa: BLE001 - a listener must not break the store
                logger.opt(exception=True).error("store availability listener {} raised", listener)
