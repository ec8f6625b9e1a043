"""The registry of live session incarnations: the send path's way around the supervisor.

``Runtime.send_message`` persists a user message on the caller's thread (that durable
write is the acknowledgement) and tells the running incarnation directly, through the
:class:`LiveSession` it finds here. The supervisor is the only writer: it registers an
incarnation when it starts one and removes it when it ends (``_kill``); everyone else
only reads. Reads and the delivery itself are guarded by a lock, so a delivery never
interleaves with the supervisor's ``begun`` update or a removal.

What a :class:`LiveSession` does *not* decide: everything that needs the supervisor —
a resumed incarnation's first message (it needs the stored history), a context reset,
an incarnation that refuses input (it is ending). Then :meth:`LiveSession.fast_path`
is False and the caller asks the supervisor, which knows how (the cold path).
"""

from __future__ import annotations

import threading

import pykka

from corvid_actors.actors.session import SessionActor
from corvid_actors.actors.session_messages import Begin, UserInput
from corvid_actors.actors.session_wiring import Lifeline, TurnTally
from corvid_actors.core.double_texting import ENQUEUE, REJECT
from corvid_actors.policy.supervision import needs_context_reset
from corvid_actors.telemetry.metrics import SessionLabels


class LiveSession:
    """One live incarnation as the send path sees it."""

    def __init__(self, session_id: str, generation: int, ref: pykka.ActorRef[SessionActor], lifeline: Lifeline,
                 tally: TurnTally, *, begun: bool, double_texting: str = ENQUEUE,
                 labels: SessionLabels | None = None) -> None:
        self.session_id = session_id
        self.generation = generation
        self.ref = ref
        self.lifeline = lifeline
        self.tally = tally
        #: the incarnation's double-texting policy (:mod:`corvid_actors.core.double_texting`)
        self.double_texting = double_texting
        #: what its metrics are labelled by (its agent's name, provider, model): read from
        #: here, the metrics need no store read per incarnation
        self.labels = labels or SessionLabels()
        self._lock = threading.Lock()
        #: False while a resumed incarnation waits for its first message (the supervisor
        #: sends that one, with the history)
        self._begun = begun
        #: user messages delivered to this incarnation (the context-reset count)
        self._delivered = 0

    @property
    def begun(self) -> bool:
        return self._begun

    @property
    def delivered(self) -> int:
        return self._delivered

    def mark_begun(self) -> None:
        with self._lock:
            self._begun = True

    def fast_path(self, reset_after: int) -> bool:
        """True when a user message may go straight to the incarnation: it has begun, it
        accepts input, and the next message does not call for a context reset."""
        with self._lock:
            return (self._begun and self.lifeline.accepting_input
                    and not needs_context_reset(self._delivered, reset_after))

    def refuses_mid_turn(self) -> bool:
        """True when a user message must be refused now: the policy is ``reject`` and a
        turn is in flight (as the actor last wrote it: a message sent before the actor
        took the previous one is still accepted, and waits its turn)."""
        return self.double_texting == REJECT and self.tally.in_turn

    def record_delivery(self) -> None:
        """Count a message the supervisor holds for this incarnation (told once built)."""
        with self._lock:
            self._delivered += 1

    def deliver(self, message: Begin | UserInput) -> bool:
        """Tell ``message`` (a user message) and count it; False when the incarnation no
        longer takes input or its actor is gone (nothing was delivered)."""
        with self._lock:
            if not self.lifeline.accepting_input:
                return False
            try:
                self.ref.tell(message)
            except pykka.ActorDeadError:
                return False
            self._delivered += 1
            return True


class LiveSessions:
    """session id → :class:`LiveSession`; written by the supervisor only. It also knows
    which sessions have an incarnation at all (building, or live), so that a message to a
    session with none is refused without asking the supervisor."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_id: dict[str, LiveSession] = {}
        #: session id -> the generation of its incarnation in the supervisor (from its
        #: start to its end)
        self._incarnated: dict[str, int] = {}
        #: sessions passivated by the supervisor (issue 37): no incarnation, yet a message
        #: to them goes to the supervisor, which reactivates them; with their metrics'
        #: labels (the metrics of a passivated session's events read no row)
        self._passivated: dict[str, SessionLabels] = {}

    def get(self, session_id: str) -> LiveSession | None:
        with self._lock:
            return self._by_id.get(session_id)

    def labels_of(self, session_id: str) -> SessionLabels | None:
        """The metrics labels of a live or passivated session (None: neither)."""
        with self._lock:
            entry = self._by_id.get(session_id)
            return entry.labels if entry is not None else self._passivated.get(session_id)

    def put(self, entry: LiveSession) -> None:
        with self._lock:
            self._by_id[entry.session_id] = entry

    def starting(self, session_id: str, generation: int) -> None:
        """The supervisor starts an incarnation of the session (it is building)."""
        with self._lock:
            self._incarnated[session_id] = generation

    def has_incarnation(self, session_id: str) -> bool:
        """Does the supervisor hold an incarnation of the session (building or live), or
        has it passivated the session (a message reactivates it)?"""
        with self._lock:
            return session_id in self._incarnated or session_id in self._passivated

    def passivate(self, session_id: str, generation: int, received: int) -> bool:
        """Mark the session passivated and its live incarnation ``generation`` as taking no
        more input, if that incarnation has had exactly ``received`` user messages delivered
        (what its actor has taken: nothing is on its way to it). Under the entry's lock,
        so no delivery slips in between; False (nothing changed) otherwise. The supervisor
        ends the incarnation next; a send meanwhile goes to it (the cold path)."""
        with self._lock:
            entry = self._by_id.get(session_id)
            if entry is None or entry.generation != generation:
                return False
            with entry._lock:
                if entry._delivered != received:
                    return False
                entry.lifeline.refuse_input()
            self._passivated[session_id] = entry.labels
            return True

    def mark_passivated(self, session_id: str, labels: SessionLabels) -> None:
        """Note a session passivated without a live incarnation to retire (a start-up
        resume's, ``supervisor._dormant``): a message to it goes to the supervisor."""
        with self._lock:
            self._passivated[session_id] = labels

    def unpassivate(self, session_id: str) -> None:
        """The session is no longer passivated (reactivated, stopped or lost)."""
        with self._lock:
            self._passivated.pop(session_id, None)

    def passivated_count(self) -> int:
        with self._lock:
            return len(self._passivated)

    def remove(self, session_id: str, generation: int) -> None:
        """The incarnation of that generation ended: it and its entry go (a newer
        incarnation's stay)."""
        with self._lock:
            if self._incarnated.get(session_id) == generation:
                del self._incarnated[session_id]
            entry = self._by_id.get(session_id)
            if entry is not None and entry.generation == generation:
                del self._by_id[session_id]

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_id)
