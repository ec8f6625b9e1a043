"""The runtime's figures in one reading: what ``admin stats`` shows and ``/metrics`` gauges.

:func:`runtime_stats` asks the supervisor, the EventBus and the SlotPool for their stats,
reads the timer table, counts the store's sessions by status and reads its write figures,
and in a cluster asks the ClusterMember for its leases and heartbeats. The runtime makes it the
stats source of its :class:`~corvid_actors.telemetry.metrics.RuntimeMetrics`, and the
AdminActor's ``stats`` reads it through that object, so both faces show one source.
"""

from __future__ import annotations

from typing import Any

import pykka

from corvid_actors.actors import supervisor as sv
from corvid_actors.actors.cluster import ClusterStats
from corvid_actors.actors.events import BusStats
from corvid_actors.actors.slots import SlotStats
from corvid_actors.actors.timers import Timers
from corvid_actors.errors import StoreError

__all__ = ["runtime_stats"]


def runtime_stats(*, supervisor: pykka.ActorRef[Any], bus: pykka.ActorRef[Any],
                  slot_pool: pykka.ActorRef[Any] | None, timers: Timers, store: Any,
                  cluster_member: pykka.ActorRef[Any] | None = None) -> dict[str, Any]:
    """One reading (asks on the caller's thread; a dead actor raises ``pykka.ActorDeadError``).
    A store that cannot answer leaves ``sessions_by_status`` None and ``store.available`` False."""
    event_bus: dict[str, Any] = dict(bus.ask(BusStats(), block=True))
    qsize = getattr(bus.actor_inbox, "qsize", None)  # the inline dispatcher's inbox has no size
    event_bus["queue_depth"] = qsize() if callable(qsize) else 0
    stats: dict[str, Any] = {"supervisor": supervisor.ask(sv.SupervisorStats()), "event_bus": event_bus,
                             "timers": timers.stats()}
    if slot_pool is not None:
        stats["slots"] = slot_pool.ask(SlotStats())
    stats["store"] = {**store.figures.snapshot(), "available": True}
    try:  # the one read of the store: during an outage the rest is still worth showing
        stats["sessions_by_status"] = store.count_sessions_by_status()
    except StoreError:
        stats["sessions_by_status"], stats["store"]["available"] = None, False
    if cluster_member is not None:
        stats["cluster"] = cluster_member.ask(ClusterStats())
    return stats
