"""The admin actor's event followers (``corvid-actors events``): who follows which
session, their EventBus subscriptions, and the other daemons' events streamed to them.

A collaborator the admin actor holds; every method runs on the admin actor's thread,
except the callbacks it subscribes, which run on the EventBus thread and only hand the
event to their sink.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from corvid_actors.actors.admin._commands import ask_actor
from corvid_actors.actors.admin._views import UNRECORDED_EVENTS, RecentEvents
from corvid_actors.actors.base import tell
from corvid_actors.actors.events import SubscribeAll, UnsubscribeAll
from corvid_actors.clock import Clock, iso_utc
from corvid_actors.events import Event, to_dict

#: a follower's sink: (session id, ISO time, event as a dict)
Sink = Callable[[str, str, dict[str, Any]], None]


class Followers:
    """The followers of one admin actor (see the module docstring)."""

    def __init__(self, bus: Any, clock: Clock, recent: RecentEvents) -> None:
        self._bus = bus
        self._clock = clock
        self._recent = recent
        self._callbacks: dict[Sink, Callable[[str, Event], None]] = {}
        #: each follower's session (None: all), for the events of other daemons
        self._wanted: dict[Sink, str | None] = {}

    def __len__(self) -> int:
        return len(self._callbacks)

    def follow(self, wanted: str | None, sink: Sink) -> None:
        """``sink`` hears every event of ``wanted`` (None: of every session) from now on."""
        clock = self._clock

        def callback(sid: str, event: Event) -> None:
            # A global subscription filtered here: a session's own subscriber set is
            # removed when it ends, and a follower should see it come back.
            if wanted is None or sid == wanted:
                sink(sid, iso_utc(clock.now()), to_dict(event))

        self._callbacks[sink] = callback
        self._wanted[sink] = wanted
        ask_actor(self._bus, SubscribeAll(callback), "event bus")

    def unfollow(self, sink: Sink) -> None:
        self._wanted.pop(sink, None)
        callback = self._callbacks.pop(sink, None)
        if callback is not None:
            tell(self._bus, UnsubscribeAll(callback))

    def remote(self, events: tuple[Mapping[str, Any], ...]) -> None:
        """Other daemons' events: recorded and streamed to the followers as local ones are."""
        for item in events:
            sid, at, event = str(item["s"]), str(item["t"]), dict(item["e"])
            if event.get("type") not in UNRECORDED_EVENTS:
                self._recent.record(sid, at, event)
            for sink, wanted in list(self._wanted.items()):
                if wanted is None or wanted == sid:
                    sink(sid, at, event)

    def close(self, bus_alive: bool) -> None:
        """The admin actor stops: its subscriptions go (a stopped bus holds none)."""
        if bus_alive:
            for callback in self._callbacks.values():
                tell(self._bus, UnsubscribeAll(callback))
        self._callbacks.clear()
        self._wanted.clear()
