"""The cluster member and its seat: ownership of sessions across daemons
(private modules; the public names are this ``__all__``).
"""

from __future__ import annotations

from corvid_actors.actors.cluster._member import (
    AdoptSessions,
    ClusterMember,
    ClusterStats,
    DeliverHeld,
    HandOverIdle,
    Rebalance,
    SendOrHold,
    SessionsLost,
    new_daemon_id,
)
from corvid_actors.actors.cluster._seat import (
    ClusterSeat,
    sweep_resumes_at,
)

__all__ = [
    "AdoptSessions",
    "ClusterMember",
    "ClusterSeat",
    "ClusterStats",
    "DeliverHeld",
    "HandOverIdle",
    "Rebalance",
    "SendOrHold",
    "SessionsLost",
    "new_daemon_id",
    "sweep_resumes_at",
]
