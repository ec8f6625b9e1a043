"""The books of one session incarnation: :class:`SessionState`.

:class:`~corvid_actors.actors.session.SessionActor` owns one and passes it to its
collaborators — the effect performer (:mod:`.session_effects`), the model calls and tool
runs (:mod:`.session_calls`), passivation (:mod:`.session_passivation`) and the deadlines
(:mod:`.session_deadline`) — so what each of their methods reads and writes is named at
the call. It is only touched on the actor's thread.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from corvid_actors.core.vocabulary import CancelToken


@dataclass(slots=True, eq=False)
class SessionState:
    """The incarnation's mutable state, shared by the actor and its collaborators."""

    #: when the turn in flight started (monotonic), for a Result's duration
    turn_started: float
    #: the loop's first turn was started (``Begin``), or the session waits for its user
    begun: bool = False
    #: the incarnation ended (exited, aborted, an outage, a failed build): nothing more runs
    ended: bool = False
    #: the last error event's text (why a non-zero exit happened), "" after a success
    last_error: str = ""
    #: user messages handed to the loop whose turn has not finished: the loop queues
    #: those that arrive mid-turn, and each starts exactly one turn, in order
    turns_open: int = 0
    #: turns finished so far (an idle or passivation timer of an older turn is stale)
    turn_seq: int = 0
    #: user messages that came mid-turn to a capped session: each starts its turn after
    #: the running one, once the caps are checked (uncapped, the loop queues them)
    held: deque[tuple[str, tuple[dict[str, Any], ...], bool]] = field(default_factory=deque)
    #: the worker (or model call) in flight: its sequence number and cancel token
    worker_seq: int = 0
    worker_cancel: CancelToken | None = None
    #: the text the model call in flight has streamed so far (for StopModelCall)
    streamed: list[str] = field(default_factory=list)
    #: the SlotPool request in flight and where it stands: none | waiting | held
    slot_request: int = 0
    slot_state: str = "none"
    #: a queue_status with the waiting text was published for the current request
    slot_queued: bool = False
    #: tool calls waiting for an approval answer
    awaiting_approval: set[str] = field(default_factory=set)
    #: call id → (call, description, kind) of requests not yet announced by the broker
    approval_details: dict[str, tuple[Any, str, str]] = field(default_factory=dict)
    #: approval ids published as ``approval_request`` (their resolution is published too)
    announced: set[str] = field(default_factory=set)
    approval_seq: int = 0
    #: an idle timer is scheduled (cancel it only then: one message fewer per turn)
    idle_armed: bool = False
    #: when the armed idle exit is due (wall clock, stored by the cluster seat), or None
    idle_due: datetime | None = None
    #: passivation (issue 37, :mod:`.session_passivation`): its timer is armed; the user
    #: messages taken; the loop's timers in flight (tokens)
    passivate_armed: bool = False
    received: int = 0
    loop_timers: set[str] = field(default_factory=set)
