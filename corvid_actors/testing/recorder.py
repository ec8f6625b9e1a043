"""EventRecorder: a global subscriber that keeps every event with its simulated time."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from corvid_actors.clock import Clock
from corvid_actors.events import Event, to_dict


@dataclass(frozen=True)
class Recorded:
    at: float
    session_id: str
    event: Event

    @property
    def type(self) -> str:
        return self.event.type


class EventRecorder:
    """Records ``(clock.monotonic(), session_id, event)`` for every event of a runtime.

    Attach with ``EventRecorder.attach(runtime)``; read with :meth:`of`, :meth:`types`,
    :meth:`times` and :meth:`log` (a list of plain dicts, for comparing two runs).
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.events: list[Recorded] = []
        self._lock = threading.Lock()

    @classmethod
    def attach(cls, runtime: Any) -> EventRecorder:
        recorder = cls(runtime.clock)
        runtime.subscribe_all(recorder)
        return recorder

    def __call__(self, session_id: str, event: Event) -> None:
        with self._lock:
            self.events.append(Recorded(self.clock.monotonic(), session_id, event))

    def of(self, session_id: str | None = None, type: str | None = None) -> list[Recorded]:
        with self._lock:
            return [r for r in self.events
                    if (session_id is None or r.session_id == session_id) and (type is None or r.type == type)]

    def types(self, session_id: str | None = None, *, skip: tuple[str, ...] = ()) -> list[str]:
        return [r.type for r in self.of(session_id) if r.type not in skip]

    def times(self, type: str, session_id: str | None = None) -> list[float]:
        return [r.at for r in self.of(session_id, type)]

    def last(self, type: str, session_id: str | None = None) -> Event | None:
        found = self.of(session_id, type)
        return found[-1].event if found else None

    def log(self) -> list[dict[str, Any]]:
        with self._lock:
            return [{"at": r.at, "session": r.session_id, **to_dict(r.event)} for r in self.events]

    def clear(self) -> None:
        with self._lock:
            self.events.clear()
