"""EventRecorder: a global subscriber that keeps every event with its simulated time."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from corvid_actors.clock import Clock
from corvid_actors.events import Event, to_dict

if TYPE_CHECKING:
    from corvid_actors.runtime import Runtime


@dataclass(frozen=True)
class Recorded:
    """One event as the recorder heard it."""

    #: when the event reached the recorder, in seconds of the runtime's clock
    #: (``clock.monotonic()``): under a :class:`~corvid_actors.testing.SimClock`, simulated
    #: seconds since the clock's start — the time base of ``SimClock.elapsed``,
    #: ``advance_to`` and ``ModelRequest.at``. Events are delivered as they are published,
    #: so an event published while a timer fires carries that timer's due time.
    at: float
    #: the session the event is about
    session_id: str
    #: the event (``corvid_actors.events``: each class documents its fields)
    event: Event

    @property
    def type(self) -> str:
        """The event's type name (``session_started``, ``assistant``, …)."""
        return self.event.type


class EventRecorder:
    """Records ``(clock.monotonic(), session_id, event)`` for every event of a runtime.

    Attach with ``EventRecorder.attach(runtime)``; read with :meth:`of`, :meth:`first`,
    :meth:`types`, :meth:`times` and :meth:`log` (a list of plain dicts, for comparing two
    runs); assert timing with :meth:`assert_first_at` ("nothing at t − ε, this at t") and
    :meth:`assert_none_between`.
    """

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.events: list[Recorded] = []
        self._lock = threading.Lock()

    @classmethod
    def attach(cls, runtime: Runtime) -> EventRecorder:
        """A recorder subscribed to every session of ``runtime``, timing events on its clock."""
        recorder = cls(runtime.clock)
        runtime.subscribe_all(recorder)
        return recorder

    def __call__(self, session_id: str, event: Event) -> None:
        with self._lock:
            self.events.append(Recorded(self.clock.monotonic(), session_id, event))

    def of(self, session_id: str | None = None, type: str | None = None, *,
           since: float | None = None, until: float | None = None) -> list[Recorded]:
        """Recorded events, oldest first, of one session and/or type, optionally only those
        at ``since`` ≤ time ≤ ``until``."""
        with self._lock:
            return [r for r in self.events
                    if (session_id is None or r.session_id == session_id) and (type is None or r.type == type)
                    and (since is None or r.at >= since) and (until is None or r.at <= until)]

    def first(self, type: str, session_id: str | None = None, *, after: float | None = None) -> Recorded | None:
        """The first ``type`` event (strictly after time ``after``, when given), or None."""
        for r in self.of(session_id, type):
            if after is None or r.at > after:
                return r
        return None

    def assert_first_at(self, type: str, t: float, session_id: str | None = None, *,
                        after: float | None = None, tolerance: float = 1e-6) -> Recorded:
        """Assert that the first ``type`` event (after ``after``) happened at time ``t`` —
        nothing of that type at ``t − ε`` for any ε > ``tolerance``, and one at ``t``.
        Returns it; the AssertionError lists what was recorded instead."""
        found = self.first(type, session_id, after=after)
        if found is None or abs(found.at - t) > tolerance:
            seen = [round(r.at, 6) for r in self.of(session_id, type)]
            when = "never" if found is None else f"first at {found.at:g}"
            raise AssertionError(f"expected the first {type!r}{_whose(session_id)}"
                                 f"{'' if after is None else f' after {after:g}'} at {t:g}, "
                                 f"but it came {when} (all at: {seen})")
        return found

    def assert_none_between(self, type: str, start: float, end: float, session_id: str | None = None) -> None:
        """Assert that no ``type`` event happened at ``start`` ≤ time < ``end``."""
        hits = [r.at for r in self.of(session_id, type, since=start) if r.at < end]
        if hits:
            raise AssertionError(f"expected no {type!r}{_whose(session_id)} in [{start:g}, {end:g}), "
                                 f"got them at {hits}")

    def types(self, session_id: str | None = None, *, skip: tuple[str, ...] = ()) -> list[str]:
        """The types of the recorded events (of one session, or all), in order, leaving out those in
        ``skip``."""
        return [r.type for r in self.of(session_id) if r.type not in skip]

    def times(self, type: str, session_id: str | None = None) -> list[float]:
        """When each event of ``type`` arrived, in seconds of the runtime's clock."""
        return [r.at for r in self.of(session_id, type)]

    def last(self, type: str, session_id: str | None = None) -> Event | None:
        """The last event of ``type`` (of one session, or any), or None."""
        found = self.of(session_id, type)
        return found[-1].event if found else None

    def log(self) -> list[dict[str, object]]:
        """Every recorded event as a dict (``at``, ``session`` and the event's fields), for a failure
        message."""
        with self._lock:
            return [{"at": r.at, "session": r.session_id, **to_dict(r.event)} for r in self.events]

    def clear(self) -> None:
        """Forget the events recorded so far."""
        with self._lock:
            self.events.clear()


def _whose(session_id: str | None) -> str:
    return "" if session_id is None else f" of session {session_id}"
