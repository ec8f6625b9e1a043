"""The session actor's side of passivation (issue 37): offering itself when idle.

Between turns, an incarnation built with ``passivate_after_s`` arms a timer
(:class:`~corvid_actors.actors.session_messages.PassivateDue`) next to its idle exit's.
When it fires and the incarnation is still idle — no turn open or held, no worker, slot,
approval or loop timer in flight — it tells the supervisor
:class:`~corvid_actors.actors.session_messages.WantsPassivation` with the number of user
messages it has taken and its deadlines. The supervisor decides (see
``actors/supervisor/_passivation.py``); a message that reached the actor meanwhile starts
a turn as usual and the offer is declined there. :class:`Passivation` is held by
:class:`~corvid_actors.actors.session.SessionActor` and works on its
:class:`~corvid_actors.actors.session_state.SessionState`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pykka

from corvid_actors.actors.base import tell
from corvid_actors.actors.session_messages import Begin, PassivateDue, UserInput, WantsPassivation
from corvid_actors.actors.session_state import SessionState
from corvid_actors.actors.timers import CancelTimer, ScheduleTimer
from corvid_actors.clock import Clock


class Passivation:
    """See the module docstring. Its books are the state's ``passivate_armed`` (a timer is
    scheduled), ``received`` (user messages taken) and ``loop_timers`` (in flight);
    ``deadline()`` is the incarnation's inactivity deadline (monotonic)."""

    def __init__(self, sid: str, gen: int, clock: Clock, after_s: float | None, *, timers: Any, supervisor: Any,
                 self_ref: pykka.ActorRef[Any], deadline: Callable[[], float]) -> None:
        self._sid, self._gen, self._clock, self._after_s = sid, gen, clock, after_s
        self._timers, self._supervisor, self._ref, self._deadline = timers, supervisor, self_ref, deadline

    @staticmethod
    def count_received(state: SessionState, message: Any) -> None:
        """A user message reached the actor (what its live entry counts as delivered)."""
        if type(message) is UserInput or (type(message) is Begin and message.counts_turn):
            state.received += 1

    def schedule(self, state: SessionState) -> None:
        """Between turns: arm the passivation timer (when the incarnation has one)."""
        after = self._after_s
        if not after:
            return
        state.passivate_armed = True
        tell(self._timers, ScheduleTimer((self._sid, "passivate", self._gen), after, self._ref,
                                         PassivateDue(self._gen, state.turn_seq)))

    def cancel(self, state: SessionState) -> None:
        """A turn starts or the incarnation ends: the armed timer goes."""
        if state.passivate_armed:
            state.passivate_armed = False
            tell(self._timers, CancelTimer((self._sid, "passivate", self._gen)))

    def due(self, state: SessionState, turn_seq: int) -> None:
        """The timer fired: still idle since turn ``turn_seq``, offer the supervisor to passivate."""
        state.passivate_armed = False
        if (state.ended or state.turns_open or turn_seq != state.turn_seq or state.held or state.awaiting_approval
                or state.worker_cancel is not None or state.slot_state != "none" or state.loop_timers):
            return
        now = self._clock.now()
        deadline = now + timedelta(seconds=self._deadline() - self._clock.monotonic())
        tell(self._supervisor, WantsPassivation(self._sid, self._gen, state.received, deadline, state.idle_due))
