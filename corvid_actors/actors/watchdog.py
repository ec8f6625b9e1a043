"""The StoreWatch actor: probes an unavailable store until it is back.

The store notices an outage itself, at use (a lost connection, a SQLite file gone or
read-only: :mod:`corvid_actors.db.store`), and tells its listeners; this actor is one.
While the store is down it probes it through the timer table — first after
``store.reconnect_backoff_initial_s``, then doubling up to ``store.reconnect_backoff_max_s``
— so the store comes back (and ``admin health`` says ``ok`` again) within one backoff step
of its server, even when nothing else uses it meanwhile. No polling thread, no wall-clock
sleep, and nothing at all while the store is healthy.

Messages (handled on the actor's own thread): ``ask(WatchStats())`` → ``{"store_unavailable": reason | None, "probes": n}``.
"""

from __future__ import annotations

from dataclasses import dataclass

from loguru import logger

from corvid_actors.actors.base import ActivityTracker, TrackedActor, tell
from corvid_actors.actors.timers import CancelTimer, ScheduleTimer, Timers
from corvid_actors.db.store import Store

__all__ = ["StoreWatch", "WatchStats"]

_PROBE_KEY = ("store_watch", "probe")


@dataclass(frozen=True)
class WatchStats:
    """Asked by tests (``rt.internals.store_watch``, on the caller's thread); handled on the
    StoreWatch thread. Replies ``{"store_unavailable": reason | None, "probes": n}``."""


@dataclass(frozen=True)
class _StoreChanged:
    """The store went down (``reason``) or came back (None): told by its listener callback."""

    reason: str | None


@dataclass(frozen=True)
class _Probe:
    """Time to probe the store (told by the timer table on the clock's thread; handled on the StoreWatch thread)."""


class StoreWatch(TrackedActor):
    """See the module docstring."""

    survive_errors = True  # one bad told message never kills it (actors/base.py)

    def __init__(self, tracker: ActivityTracker, *, store: Store, timers: Timers,
                 backoff_s: tuple[float, float] = (0.5, 5.0)) -> None:
        super().__init__(tracker)
        self.store = store
        self.timers = timers
        self._first, self._max = backoff_s
        self._delay = self._first
        self._probing = False
        self.probes = 0
        store.add_listener(self._on_store_change)

    def _on_store_change(self, reason: str | None) -> None:
        # On whichever thread met the outage (maybe under the store lock): only a tell.
        tell(self.actor_ref, _StoreChanged(reason))

    def on_stop(self) -> None:
        self.store.remove_listener(self._on_store_change)

    def on_receive(self, message: object) -> object:
        match message:
            case _StoreChanged(reason):
                if reason is not None and not self._probing:
                    self._probing = True
                    self._delay = self._first
                    self._schedule()
                elif reason is None and self._probing:
                    self._probing = False
                    tell(self.timers, CancelTimer(_PROBE_KEY))
            case _Probe():
                if not self._probing:
                    return None
                self.probes += 1
                reason = self.store.probe()
                if reason is None:
                    self._probing = False
                    logger.info("store probe: the store is back")
                else:
                    self._delay = min(self._delay * 2, self._max)
                    logger.debug("store probe: still unavailable ({}); next probe in {} s", reason, self._delay)
                    self._schedule()
            case WatchStats():
                return {"store_unavailable": self.store.unavailable_reason, "probes": self.probes}
        return None

    def _schedule(self) -> None:
        tell(self.timers, ScheduleTimer(_PROBE_KEY, self._delay, self.actor_ref, _Probe()))
