"""The EventBus actor: fan-out of session events to per-session and global subscribers.

Callbacks run on the EventBus thread, session subscribers first, then global ones, in
subscription order. A callback that raises is logged and skipped; delivery goes on.
A subscriber that joins a running session is told at once whether it is thinking.

Streamed text may arrive coalesced: while the bus is behind, a session's consecutive
``content_block_delta`` events reach it as one :class:`PublishDeltas` whose buffer kept
growing until the bus took it, and subscribers see one delta carrying their text, in
order (see :class:`~corvid_actors.actors.session_wiring.Lifeline`). Under load a
subscriber therefore sees fewer, larger deltas; the concatenated text is the same.

Streamed text read on the I/O loop comes through its
:class:`~corvid_actors.actors.delta_pump.DeltaPump`: one :class:`PublishDeltaBatch` per
``[supervisor] delta_interval_ms`` at most, for every session streaming there, so the bus
thread is not woken per token (issue 37); the event a subscriber sees is the same
``content_block_delta``, carrying a longer text.

Messages: :class:`Publish` / :class:`PublishMany` / :class:`PublishDeltas` /
:class:`PublishDeltaBatch` (tell),
:class:`Subscribe` / :class:`Unsubscribe` / :class:`SubscribeAll` / :class:`UnsubscribeAll`
(ask or tell), :class:`RemoveSession`,
:class:`PruneSessions` (keep only the given ids), ``ask(BusStats())`` → dict.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from loguru import logger

from corvid_actors.actors.base import ActivityTracker, TrackedActor
from corvid_actors.events import (
    TERMINAL_EVENT_TYPES,
    ContentBlockDelta,
    Event,
    SessionStarted,
    Thinking,
)

EventCallback = Callable[[str, Event], None]


@dataclass(frozen=True)
class Publish:
    """Deliver ``event`` to the session's subscribers, then the global ones.

    Told by a session's Lifeline (``session_wiring``), the supervisor, the CreditBank, the
    runtime (``runtime_lifecycle``, ``session_control``), each on its own thread; handled
    (callbacks run) on the EventBus thread. Reply: none (told)."""

    session_id: str
    event: Event


class DeltaBuffer:
    """Streamed text of one incarnation on its way to the bus: the deltas published while
    the bus had not yet taken it. Appended to by the session's Lifeline (any thread), taken
    once by the EventBus (its thread); after :meth:`take` nothing more is appended.

    ``parts`` and ``taken`` are guarded by ``lock``: the Lifeline passes its own lock, so
    that a delta costs it one lock (it appends to ``parts`` itself while holding it).
    ``told``: a message carrying it is in the bus's inbox (a buffer started on the I/O
    loop waits in the :class:`~corvid_actors.actors.delta_pump.DeltaPump` first). It may
    be told twice (by the pump and by its lifeline); the bus delivers it once."""

    __slots__ = ("parts", "taken", "told", "lock")

    def __init__(self, text: str, lock: threading.Lock | None = None, *, told: bool = True) -> None:
        self.parts = [text]
        self.taken = False
        self.told = told
        self.lock = lock if lock is not None else threading.Lock()

    def append(self, text: str) -> bool:
        """Add ``text``; False when the bus has taken the buffer already (start a new one)."""
        with self.lock:
            if self.taken:
                return False
            self.parts.append(text)
            return True

    def take(self) -> tuple[str, int] | None:
        """The text gathered so far and how many deltas it joins; seals the buffer. None
        when it was taken already (a buffer told twice is delivered once)."""
        with self.lock:
            if self.taken:
                return None
            self.taken = True
            parts = self.parts
        return (parts[0] if len(parts) == 1 else "".join(parts)), len(parts)


@dataclass(frozen=True)
class PublishMany:
    """Deliver ``events`` of one session, in order, as consecutive :class:`Publish`
    messages would: one message for a handler's run of events (a reply's ``assistant``,
    ``result`` and ``thinking``; ``session_started`` and its ``system`` notice).

    Told by a session's Lifeline (:meth:`~corvid_actors.actors.session_wiring.Lifeline.hold`)
    and the supervisor (on their threads); handled on the EventBus thread. Reply: none (told)."""

    session_id: str
    events: tuple[Event, ...]


@dataclass(frozen=True)
class PublishDeltas:
    """Deliver the streamed text gathered in ``buffer`` as one ``content_block_delta``.

    Told by a session's Lifeline (on the thread streaming the model's reply); handled on
    the EventBus thread, which takes the buffer (later deltas start a new one). Reply:
    none (told)."""

    session_id: str
    buffer: DeltaBuffer


@dataclass(frozen=True)
class PublishDeltaBatch:
    """Deliver the streamed text of several sessions, one ``content_block_delta`` per
    buffer, in the order given (each session's buffers are in its order).

    Told by the I/O loop's :class:`~corvid_actors.actors.delta_pump.DeltaPump` (on the
    loop thread) at most once per ``[supervisor] delta_interval_ms``; handled on the
    EventBus thread. Reply: none (told)."""

    entries: tuple[tuple[str, DeltaBuffer], ...]


@dataclass(frozen=True)
class Subscribe:
    """Add ``callback`` for one session (told at once whether it is thinking, if running).

    Asked by ``Runtime.subscribe`` (on the caller's thread); handled on the EventBus
    thread. Replies None (the ask only waits until it is subscribed)."""

    session_id: str
    callback: EventCallback


@dataclass(frozen=True)
class Unsubscribe:
    """Remove ``callback`` from one session's subscribers.

    Asked by ``Runtime.unsubscribe`` (on the caller's thread); handled on the EventBus
    thread. Replies None."""

    session_id: str
    callback: EventCallback


@dataclass(frozen=True)
class SubscribeAll:
    """Add a global ``callback`` (every session's events).

    Asked by ``Runtime.subscribe_all`` (on the caller's thread) and the AdminActor (on its
    thread, for itself and its followers); handled on the EventBus thread. Replies None.
    ``deltas=False``: the callback hears every event but the streamed text's
    ``content_block_delta`` (the journal: it keeps the chunks' sizes itself, and a callback
    per delta it would only drop cost ~5 % of a stream's CPU)."""

    callback: EventCallback
    deltas: bool = True


@dataclass(frozen=True)
class UnsubscribeAll:
    """Remove a global ``callback``.

    Asked by ``Runtime.unsubscribe_all`` (on the caller's thread), told by the AdminActor
    (on its thread, when it or a follower stops); handled on the EventBus thread. An ask
    replies None; a tell has no reply."""

    callback: EventCallback


@dataclass(frozen=True)
class RemoveSession:
    """Forget the session's subscribers and running state (its cleanup).

    Told by the supervisor (``SupervisorCore.cleanup``, on its thread); handled on the
    EventBus thread. Reply: none (told)."""

    session_id: str


@dataclass(frozen=True)
class PruneSessions:
    """Drop subscriber sets of every session not in ``keep``; replies with how many.

    Told by the supervisor's housekeeping (on its thread; empty ``keep`` at shutdown);
    handled on the EventBus thread. An ask replies with the count; a tell has no reply."""

    keep: frozenset[str]


@dataclass(frozen=True)
class BusStats:
    """Asked by ``Runtime.get_memory_stats`` (on the caller's thread) and the
    AdminActor's ``stats`` (on its thread); handled on the EventBus thread. Replies with a
    dict of subscriber counts."""


class EventBus(TrackedActor):
    survive_errors = True  # one bad told message never kills it (actors/base.py)

    def __init__(self, tracker: ActivityTracker, *, observer: EventCallback | None = None) -> None:
        super().__init__(tracker)
        #: the runtime's own listener (its metrics): hears every event first, and is no
        #: subscriber (``BusStats`` counts the program's subscribers only)
        self._observer = observer
        self._session_subs: dict[str, list[EventCallback]] = {}
        self._global_subs: list[EventCallback] = []
        #: the global subscribers that hear ``content_block_delta`` too (most of them)
        self._delta_subs: list[EventCallback] = []
        # What a late subscriber needs to hear: is the session running, is it thinking.
        self._running: dict[str, bool] = {}
        #: deltas delivered inside another (coalesced while the bus was behind)
        self.deltas_merged = 0
        #: deliveries a subscriber's callback raised on (the event was lost to it)
        self.subscriber_errors = 0

    def on_receive(self, message: object) -> object:
        match message:
            case PublishDeltas(session_id, buffer):
                self._deliver_buffer(session_id, buffer)
            case PublishDeltaBatch(entries):
                for session_id, buffer in entries:
                    self._deliver_buffer(session_id, buffer)
            case Publish(session_id, event):
                self._track(session_id, event)
                self._fan_out(session_id, event)
            case PublishMany(session_id, events):
                for event in events:
                    self._track(session_id, event)
                    self._fan_out(session_id, event)
            case Subscribe(session_id, callback):
                self._session_subs.setdefault(session_id, []).append(callback)
                thinking = self._running.get(session_id)
                if thinking is not None:
                    self._deliver(callback, session_id, Thinking(thinking=thinking))
            case Unsubscribe(session_id, callback):
                subs = self._session_subs.get(session_id)
                if subs and callback in subs:
                    subs.remove(callback)
                    if not subs:
                        del self._session_subs[session_id]
            case SubscribeAll(callback, deltas):
                self._global_subs.append(callback)
                if deltas:
                    self._delta_subs.append(callback)
            case UnsubscribeAll(callback):
                if callback in self._global_subs:
                    self._global_subs.remove(callback)
                if callback in self._delta_subs:
                    self._delta_subs.remove(callback)
            case RemoveSession(session_id):
                self._session_subs.pop(session_id, None)
                self._running.pop(session_id, None)
            case PruneSessions(keep):
                orphans = [sid for sid in self._session_subs if sid not in keep]
                for sid in orphans:
                    del self._session_subs[sid]
                for sid in [s for s in self._running if s not in keep]:
                    del self._running[sid]
                return len(orphans)
            case BusStats():
                return {
                    "subscribers": len(self._session_subs),
                    "global_subscribers": len(self._global_subs),
                    "deltas_merged": self.deltas_merged,
                    "subscriber_errors": self.subscriber_errors,
                }
        return None

    def _deliver_buffer(self, session_id: str, buffer: DeltaBuffer) -> None:
        taken = buffer.take()
        if taken is None:  # told twice (the I/O loop's pump and its lifeline): delivered already
            return
        text, count = taken
        self.deltas_merged += count - 1
        self._fan_out(session_id, ContentBlockDelta(text=text))

    def _fan_out(self, session_id: str, event: Event) -> None:
        if self._observer is not None:
            self._deliver(self._observer, session_id, event)
        subs = self._session_subs.get(session_id)
        if subs:
            for callback in list(subs):
                self._deliver(callback, session_id, event)
        everyone = self._delta_subs if isinstance(event, ContentBlockDelta) else self._global_subs
        if everyone:
            for callback in list(everyone):
                self._deliver(callback, session_id, event)

    def _track(self, session_id: str, event: Event) -> None:
        if isinstance(event, SessionStarted):
            self._running[session_id] = True
        elif isinstance(event, Thinking):
            if session_id in self._running:
                self._running[session_id] = event.thinking
        elif event.type in TERMINAL_EVENT_TYPES:
            self._running.pop(session_id, None)

    def _deliver(self, callback: EventCallback, session_id: str, event: Event) -> None:
        try:
            callback(session_id, event)
        except Exception:  # noqa: BLE001 - one bad subscriber must not break delivery
            self.subscriber_errors += 1
            logger.opt(exception=True).warning(
                "event subscriber {} raised on {} for session {}", callback, event.type, session_id
            )
