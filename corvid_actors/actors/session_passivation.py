"""The session actor's side of passivation (issue 37): offering itself when idle.

Between turns, an incarnation built with ``passivate_after_s`` arms a timer
(:class:`~corvid_actors.actors.session_messages.PassivateDue`) next to its idle exit's.
When it fires and the incarnation is still idle — no turn open or held, no worker, slot,
approval or loop timer in flight — it tells the supervisor
:class:`~corvid_actors.actors.session_messages.WantsPassivation` with the number of user
messages it has taken and its deadlines. The supervisor decides (see
``actors/supervisor/_passivation.py``); a message that reached the actor meanwhile starts
a turn as usual and the offer is declined there. A mixin of
:class:`~corvid_actors.actors.session.SessionActor`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from corvid_actors.actors.base import tell
from corvid_actors.actors.session_messages import Begin, PassivateDue, UserInput, WantsPassivation
from corvid_actors.actors.session_wiring import SessionWiring
from corvid_actors.actors.timers import CancelTimer, ScheduleTimer
from corvid_actors.clock import Clock
from corvid_actors.vocabulary import CancelToken


class SessionPassivation:
    """See the module docstring. State: ``_passivate_armed`` (a timer is scheduled),
    ``_received`` (user messages taken), ``_loop_timers`` (the loop's timers in flight)."""

    w: SessionWiring
    sid: str
    gen: int
    _clock: Clock
    _ended: bool
    _turns_open: int
    _turn_seq: int
    _held: Any
    _awaiting_approval: set[str]
    _worker_cancel: CancelToken | None
    _slot_state: str
    _idle_due: datetime | None
    _passivate_armed: bool
    _received: int
    _loop_timers: set[str]

    if TYPE_CHECKING:  # the actor's own (SessionActor / pykka)
        actor_ref: Any

        def _deadline(self) -> float: ...

    def _count_received(self, message: Any) -> None:
        """A user message reached the actor (what its live entry counts as delivered)."""
        if type(message) is UserInput or (type(message) is Begin and message.counts_turn):
            self._received += 1

    def _schedule_passivation(self) -> None:
        after = self.w.passivate_after_s
        if not after:
            return
        self._passivate_armed = True
        tell(self.w.timers, ScheduleTimer((self.sid, "passivate", self.gen), after, self.actor_ref,
                                          PassivateDue(self.gen, self._turn_seq)))

    def _cancel_passivation(self) -> None:
        if self._passivate_armed:
            self._passivate_armed = False
            tell(self.w.timers, CancelTimer((self.sid, "passivate", self.gen)))

    def _passivate_due(self, turn_seq: int) -> None:
        self._passivate_armed = False
        if (self._ended or self._turns_open or turn_seq != self._turn_seq or self._held or self._awaiting_approval
                or self._worker_cancel is not None or self._slot_state != "none" or self._loop_timers):
            return
        now = self._clock.now()
        deadline = now + timedelta(seconds=self._deadline() - self._clock.monotonic())
        tell(self.w.supervisor, WantsPassivation(self.sid, self.gen, self._received, deadline, self._idle_due))
