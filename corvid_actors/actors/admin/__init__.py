"""The admin actor: the daemon's commands, views, followers, health and cluster
administration (private modules, one concern each; the public names are this
``__all__``).
"""

from __future__ import annotations

from corvid_actors.actors.admin._actor import (
    AdminActor,
    AdminCommand,
    AdminWiring,
    BeginShutdown,
    Follow,
    Ready,
)

__all__ = [
    "AdminActor",
    "AdminCommand",
    "AdminWiring",
    "BeginShutdown",
    "Follow",
    "Ready",
]
