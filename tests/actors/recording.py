"""A recording actor the actor unit tests put where a collaborator would be."""

from __future__ import annotations

from typing import Any

from corvid_actors.actors.base import ActivityTracker, TrackedActor


class Inbox(TrackedActor):
    """Keeps every message it is told; ``"dump"`` (asked) replies with the list so far."""

    def __init__(self, tracker: ActivityTracker) -> None:
        super().__init__(tracker)
        self.got: list[Any] = []

    def on_receive(self, message: Any) -> Any:
        if message == "dump":
            return list(self.got)
        self.got.append(message)
        return None
