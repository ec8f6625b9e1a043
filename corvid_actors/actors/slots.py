"""The SlotPool actor: weighted admission to inference, fair and leak-proof.

Capacity is a total weight (``slots.max_parallel``); a request weighs 1–3 by model size
(``slots.*_model_weight``; the pool takes its ``[slots]`` section, :class:`SlotsConfig`).
Admission is strict FIFO: the head of the queue is admitted as soon as its weight fits,
and nobody behind it overtakes — so a heavy request cannot be starved by a stream of
light ones (the original's scan let small requests overtake forever). A request heavier
than the whole capacity is admitted alone when nothing runs, rather than never, and then
counts as the whole capacity (a 14 B model on ``max_parallel = 1`` is "1/1 in use").

Waiting requests hear ``SlotQueued`` with a status line, and ``SlotAnswer(granted=False)``
when ``slots.wait_timeout_s`` passes. ``ReleaseSlot(session_id)`` releases whatever the
session holds *or* waits for, and is idempotent — so an abort racing a grant is safe,
and the supervisor can release on behalf of a dead session actor.

Messages: :class:`AcquireSlot`, :class:`ReleaseSlot` (tell); ``ask(SlotStats())``. All are
handled on the SlotPool's own thread.
Replies (owned here): :class:`SlotAnswer`, :class:`SlotQueued`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pykka
from loguru import logger

from corvid_actors.actors.base import ActivityTracker, TrackedActor, tell
from corvid_actors.actors.timers import CancelTimer, ScheduleTimer, Timers
from corvid_actors.clock import Clock
from corvid_actors.schema.sections import SlotsConfig


@dataclass(frozen=True)
class AcquireSlot:
    """Ask for a slot of ``weight`` for ``model``; the answer goes to ``reply_to``.

    Told by a session actor (on its thread, for the loop's ``AcquireSlot`` effect);
    handled on the SlotPool's thread. Reply: none (told); ``reply_to`` is told a
    :class:`SlotAnswer`, and :class:`SlotQueued` first if it has to wait."""

    session_id: str
    request_id: int
    model: str
    weight: int
    reply_to: pykka.ActorRef[Any]


@dataclass(frozen=True)
class ReleaseSlot:
    """Release whatever ``session_id`` holds or waits for (idempotent).

    Told by a session actor (on its thread) and by the supervisor on its thread
    (``release_session_resources``, for a session that ended or died); handled on the
    SlotPool's thread. Reply: none (told)."""

    session_id: str


@dataclass(frozen=True)
class SlotStats:
    """Asked by ``Runtime.slot_stats`` (on the caller's thread) and the AdminActor's
    ``stats`` (on its thread); handled on the SlotPool's thread. Replies with a dict:
    ``capacity``, ``in_use``, ``held``, ``waiting``, ``peak_in_use``, ``grants``,
    ``wait_s_total`` (the granted requests' waits in the queue, summed; 0 without a clock)
    and ``wait_timeouts`` (requests that waited ``wait_timeout_s`` in vain)."""


# --- replies (told to ``reply_to``; this module owns them) ----------------------------------


@dataclass(frozen=True)
class SlotAnswer:
    """From the SlotPool: granted, or the wait timed out.

    Told by the SlotPool (on its thread) to the request's ``reply_to`` (a session actor);
    handled on the session actor's thread. Reply: none (told)."""

    request_id: int
    granted: bool


@dataclass(frozen=True)
class SlotQueued:
    """The request waits; ``status_message`` says for what (shown to the user).

    Told by the SlotPool (on its thread) to the request's ``reply_to`` (a session actor);
    handled on the session actor's thread. Reply: none (told)."""

    request_id: int
    status_message: str


@dataclass(frozen=True)
class _WaitExpired:
    """A waiter's ``wait_timeout_s`` passed (told by the timer table; handled on SlotPool's thread)."""

    session_id: str
    request_id: int


@dataclass
class _Waiter:
    request: AcquireSlot


def admit(capacity: int, in_use: int, queue_weights: Iterable[int]) -> int:
    """How many queue heads (in order) are admitted now. Pure: table-tested. Reads the
    weights only up to the first that does not fit (a lazy iterable costs O(admitted))."""
    admitted = 0
    for weight in queue_weights:
        if in_use == 0 or in_use + weight <= capacity:
            in_use += weight
            admitted += 1
        else:
            break
    return admitted


class SlotPool(TrackedActor):
    survive_errors = True  # one bad told message never kills it (actors/base.py)

    def __init__(self, tracker: ActivityTracker, *, config: SlotsConfig, timers: Timers,
                 clock: Clock | None = None) -> None:
        super().__init__(tracker)
        #: times the waits for a slot (the metrics' ``corvid_slot_wait_seconds``); None: not timed
        self._clock = clock
        self.capacity = config.max_parallel
        self.wait_timeout_s = config.wait_timeout_s
        self.timers = timers
        self._held: dict[str, int] = {}  # session -> weight
        #: the sum of ``_held``'s weights, kept as grants and releases happen (O(1) a message)
        self._in_use = 0
        self._queue: deque[AcquireSlot] = deque()
        #: the sessions with a request in ``_queue`` (at most one each): absent ones skip the scan
        self._waiting: set[str] = set()
        self.peak_in_use = 0
        self.grants = 0
        #: when each waiting session queued (monotonic); the waits of granted requests, summed
        self._queued_at: dict[str, float] = {}
        self.wait_s_total = 0.0
        self.wait_timeouts = 0

    @property
    def in_use(self) -> int:
        return self._in_use

    def on_receive(self, message: Any) -> Any:
        match message:
            case AcquireSlot() as request:
                if request.session_id in self._held:
                    # One slot per session: a re-acquire without release keeps the old one.
                    logger.warning("session {} acquired a slot it already holds", request.session_id)
                    tell(request.reply_to, SlotAnswer(request.request_id, True))
                    return None
                self._drop_waiter(request.session_id)
                self._queue.append(request)
                self._waiting.add(request.session_id)
                self._queued_at[request.session_id] = self._now()
                self._admit()
                if self._queue and self._queue[-1] is request:
                    # not admitted: nobody was queued behind it, so it is last
                    position = len(self._queue)
                    tell(request.reply_to, SlotQueued(request.request_id,
                         f"Queued — waiting for model slot (need {request.weight}, "
                         f"{self.in_use}/{self.capacity} in use, position {position})"))
                    if self.wait_timeout_s > 0:
                        tell(self.timers, ScheduleTimer((request.session_id, "slot_wait"), self.wait_timeout_s,
                                                        self.actor_ref, _WaitExpired(request.session_id,
                                                                                     request.request_id)))
            case ReleaseSlot(session_id):
                self._drop_waiter(session_id)
                if self._release(session_id):
                    self._admit()
            case _WaitExpired(session_id, request_id) if session_id in self._waiting:
                for waiter in list(self._queue):
                    if waiter.session_id == session_id and waiter.request_id == request_id:
                        self._queue.remove(waiter)
                        self._waiting.discard(session_id)
                        self._queued_at.pop(session_id, None)
                        self.wait_timeouts += 1
                        tell(waiter.reply_to, SlotAnswer(request_id, False))
                        self._admit()
            case SlotStats():
                return {"capacity": self.capacity, "in_use": self.in_use, "held": dict(self._held),
                        "waiting": len(self._queue), "peak_in_use": self.peak_in_use, "grants": self.grants,
                        "wait_s_total": self.wait_s_total, "wait_timeouts": self.wait_timeouts}
        return None

    def _drop_waiter(self, session_id: str) -> None:
        if session_id not in self._waiting:
            return
        self._waiting.discard(session_id)
        self._queued_at.pop(session_id, None)
        for waiter in [w for w in self._queue if w.session_id == session_id]:
            self._queue.remove(waiter)
            tell(self.timers, CancelTimer((session_id, "slot_wait")))

    def _now(self) -> float:
        return 0.0 if self._clock is None else self._clock.monotonic()

    def _release(self, session_id: str) -> bool:
        weight = self._held.pop(session_id, None)
        if weight is None:
            return False
        self._in_use -= weight
        return True

    def _admit(self) -> None:
        count = admit(self.capacity, self._in_use, (w.weight for w in self._queue))
        for _ in range(count):
            request = self._queue.popleft()
            self._waiting.discard(request.session_id)
            now = self._now()
            self.wait_s_total += now - self._queued_at.pop(request.session_id, now)
            # A request heavier than the whole pool is admitted alone and holds all of it —
            # not more: in_use (and its peak) never exceeds the capacity.
            weight = min(request.weight, self.capacity)
            self._held[request.session_id] = weight
            self._in_use += weight
            self.grants += 1
            tell(self.timers, CancelTimer((request.session_id, "slot_wait")))
            if not tell(request.reply_to, SlotAnswer(request.request_id, True)):
                self._release(request.session_id)  # its actor is gone: give it back at once
        self.peak_in_use = max(self.peak_in_use, self.in_use)
        if count and self._queue and self.in_use == 0:  # pragma: no cover - defensive
            self._admit()
