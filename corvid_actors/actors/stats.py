"""The runtime's figures in one reading: what ``admin stats`` shows and ``/metrics`` gauges.

:func:`runtime_stats` asks the supervisor, the EventBus and the SlotPool for their stats,
reads the timer table and counts the store's sessions by status. The runtime makes it the
stats source of its :class:`~corvid_actors.telemetry.metrics.RuntimeMetrics`, and the
AdminActor's ``stats`` reads it through that object, so both faces show one source.
"""

from __future__ import annotations

from typing import Any

import pykka

from corvid_actors.actors import supervisor as sv
from corvid_actors.actors.events import BusStats
from corvid_actors.actors.slots import SlotStats
from corvid_actors.actors.timers import Timers

__all__ = ["runtime_stats"]


def runtime_stats(*, supervisor: pykka.ActorRef[Any], bus: pykka.ActorRef[Any],
                  slot_pool: pykka.ActorRef[Any] | None, timers: Timers, store: Any) -> dict[str, Any]:
    """One reading (asks on the caller's thread; a dead actor raises ``pykka.ActorDeadError``)."""
    event_bus: dict[str, Any] = dict(bus.ask(BusStats(), block=True))
    qsize = getattr(bus.actor_inbox, "qsize", None)  # the inline dispatcher's inbox has no size
    event_bus["queue_depth"] = qsize() if callable(qsize) else 0
    stats: dict[str, Any] = {"supervisor": supervisor.ask(sv.SupervisorStats()), "event_bus": event_bus,
                             "timers": timers.stats()}
    if slot_pool is not None:
        stats["slots"] = slot_pool.ask(SlotStats())
    stats["sessions_by_status"] = store.count_sessions_by_status()
    return stats
