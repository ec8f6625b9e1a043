"""A session incarnation's inactivity timeout: :class:`Deadlines`.

Every event (a streamed chunk, a worker's answer, a user message) re-arms the default
timeout; ``extend_timeout`` grants a longer one that holds only while no event comes
after it; a session taken over from another daemon inherits the deadline stored there.
The timer (:class:`~corvid_actors.actors.session_messages.TimeoutDue`) is armed with the
Timers actor; when the deadline has passed the supervisor is told ``TimedOut``. With
several daemons the wall-clock deadline goes to the cluster seat (``deadline_sink``).
Owned by :class:`~corvid_actors.actors.session.SessionActor`; its thread only.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pykka

from corvid_actors.actors.base import tell
from corvid_actors.actors.session_messages import TimedOut, TimeoutDue
from corvid_actors.actors.session_state import SessionState
from corvid_actors.actors.timers import CancelTimer, ScheduleTimer
from corvid_actors.clock import Clock

#: ``deadline_sink(session_id, wall-clock deadline or None, idle due or None)``
DeadlineSink = Callable[[str, datetime | None, datetime | None], Any]


class Deadlines:
    """The inactivity timeout of one incarnation (see the module docstring)."""

    def __init__(self, sid: str, gen: int, clock: Clock, timeout_s: float, *, timers: Any, supervisor: Any,
                 deadline_sink: DeadlineSink | None, self_ref: pykka.ActorRef[Any]) -> None:
        self._sid, self._gen, self._clock = sid, gen, clock
        self._timers, self._supervisor, self._sink, self._ref = timers, supervisor, deadline_sink, self_ref
        self._timeout_s = timeout_s
        self._last_activity = clock.monotonic()
        #: counts activity (events): an extension holds only while no event came after it
        self._activity_seq = 0
        #: (activity_seq when granted, monotonic deadline) of the last extend_timeout
        self._extension: tuple[int, float] | None = None
        #: when the inactivity timer is due (monotonic): re-armed when a turn ends only if
        #: activity moved the deadline past it (see :meth:`rearm`)
        self._timeout_at = 0.0

    def touch(self) -> None:
        """An event: re-arms the default inactivity timeout (ends any extension)."""
        self._last_activity = self._clock.monotonic()
        self._activity_seq += 1

    def deadline(self) -> float:
        """When the session times out (monotonic)."""
        extension = self._extension
        if extension is not None and extension[0] == self._activity_seq:
            return extension[1]
        return self._last_activity + self._timeout_s

    def extend(self, timeout_s: float) -> None:
        """``extend_timeout``: the session may stay quiet ``timeout_s`` from now, until the next event."""
        self._extension = (self._activity_seq, self._clock.monotonic() + max(timeout_s, 0.0))
        self.schedule(min(timeout_s, self._timeout_s))

    def inherit(self, due: datetime) -> None:
        """Wait until ``due`` (the deadline another daemon stored for this waiting session)
        instead of a full timeout; held as an extension is: the next event re-arms the
        default. A deadline already past ends the session at once, as it would have there."""
        remaining = (due - self._clock.now()).total_seconds()
        self._extension = (self._activity_seq, self._clock.monotonic() + remaining)
        self.schedule(max(min(remaining, self._timeout_s), 0.0))

    def note(self, state: SessionState, *, busy: bool = False) -> None:
        """Several daemons: tell the seat the wall-clock inactivity deadline while the
        session waits for its user, or None when a turn starts (``busy``): kept in memory,
        stored by the next heartbeat. Called at those transitions only, never per event."""
        sink = self._sink
        if sink is None:
            return
        if busy:
            sink(self._sid, None, None)
        else:
            now = self._clock.now()
            sink(self._sid, now + timedelta(seconds=self.deadline() - self._clock.monotonic()), state.idle_due)

    def schedule(self, delay_s: float) -> None:
        """Arm the timeout timer ``delay_s`` from now."""
        delay_s = max(delay_s, 0.0)
        self._timeout_at = self._clock.monotonic() + delay_s
        tell(self._timers, ScheduleTimer((self._sid, "timeout", self._gen), delay_s,
                                         self._ref, TimeoutDue(self._gen)))

    def cancel(self) -> None:
        """The incarnation ends: its timeout timer goes."""
        tell(self._timers, CancelTimer((self._sid, "timeout", self._gen)))

    def rearm(self) -> None:
        """The session goes quiet (its last turn finished): move the inactivity timer to
        the deadline, so that it fires once, when the session is due, instead of firing at
        the old time to find the deadline moved and re-arm then (a timer firing and a
        message per incarnation). The deadline is the one :meth:`check` would compute;
        activity only moves it later, and the check still re-arms if it has."""
        now = self._clock.monotonic()
        due = min(self.deadline(), now + self._timeout_s)
        if due > self._timeout_at:
            self.schedule(due - now)

    def check(self) -> None:
        """The timer fired (or the supervisor asks): past the deadline, tell it ``TimedOut``."""
        now = self._clock.monotonic()
        deadline = self.deadline()
        if now >= deadline:
            tell(self._supervisor, TimedOut(self._sid, self._gen))
        else:
            # An event may re-arm the default before an extension's deadline: check again
            # no later than one default timeout from now (activity only pushes it later).
            self.schedule(min(deadline, now + self._timeout_s) - now)
