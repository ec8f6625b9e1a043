"""Writes that must happen, retried with backoff through the timer table.

A told handler of the supervisor or a session actor that cannot write to the store
(the server restarted, SQLite busy past its timeout, disk full) must not die of it —
Pykka stops an actor whose told handler raises — and must not drop a write that has to
happen (a session's status, an exit note, a conversation message, a turn's usage).
:class:`PendingWrites` runs such a write at once; when it fails, the write is queued,
the session concerned gets a ``session_error`` event (``store_error``) and the queue is
flushed later, in order, on the ``[store.write_retry]`` schedule
(:class:`~corvid_actors.schema.sections.RetrySchedule`, the type the credit bank's charge
retry uses too) — a write queued behind a failed one waits for it, so the store sees them
in their order. A write whose tries run out is dropped with an ``error`` event.

Messages: :class:`RetryWrites` (told to the owner, handled on the owner's thread).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import pykka
from loguru import logger

from corvid_actors.actors.base import tell
from corvid_actors.actors.timers import CancelTimer, ScheduleTimer, Timers
from corvid_actors.errors import FencedWrite
from corvid_actors.events import ErrorEvent, SessionError
from corvid_actors.schema.sections import RetrySchedule


@dataclass(frozen=True)
class RetryWrites:
    """Timer message to the owner of a :class:`PendingWrites`: flush the queue now.

    Scheduled by ``PendingWrites`` (on its owner's thread) and told by the timer table
    to the owner (the supervisor or a session actor); handled on the owner's thread.
    Reply: none (told)."""

    key: Hashable


class PendingWrites:
    """An actor's queue of writes that failed and must still happen (its thread only)."""

    def __init__(self, *, timers: Timers, owner: pykka.ActorRef[Any] | None,
                 publish: Callable[[str, Any], Any], key: Hashable, schedule: RetrySchedule,
                 on_fenced: Callable[[str], Any] | None = None) -> None:
        self._timers = timers
        #: a write refused as fenced (issue 20: another daemon owns the session now) is
        #: dropped, not retried, and ``on_fenced(session_id)`` says so to whoever stops it
        self._on_fenced = on_fenced
        self._schedule = schedule
        self._owner = owner
        #: ``publish(session_id, event)``: how the owner tells people (a session: its lifeline)
        self._publish_to = publish
        self.key = key
        self._queue: deque[tuple[str, str, Callable[[], Any]]] = deque()
        self._attempt = 0

    def bind(self, owner: pykka.ActorRef[Any]) -> None:
        self._owner = owner

    def __len__(self) -> int:
        return len(self._queue)

    def run(self, session_id: str, what: str, write: Callable[[], Any]) -> bool:
        """Write now; False when the write is queued for a retry (after an earlier one
        that is still pending, or because it failed now)."""
        if self._queue:
            self._queue.append((session_id, what, write))
            return False
        try:
            write()
            return True
        except FencedWrite:
            self._fenced(session_id, what)
            return False
        except Exception as exc:  # noqa: BLE001 - a failed write is retried, never fatal to the actor
            self._queue.append((session_id, what, write))
            self._failed(session_id, what, exc, first=True)
            return False

    def take(self) -> tuple[tuple[str, str, Callable[[], Any]], ...]:
        """Hand the pending writes over (an ending actor gives them to one that lives on)."""
        items, self._queue = tuple(self._queue), deque()
        self._attempt = 0
        if items:
            tell(self._timers, CancelTimer(self.key))
        return items

    def adopt(self, items: tuple[tuple[str, str, Callable[[], Any]], ...]) -> None:
        """Take over another actor's pending writes: run now, in order, behind ours."""
        for session_id, what, write in items:
            self.run(session_id, what, write)

    def flush(self) -> None:
        """Run the pending writes in order; stop at the first that fails (retried later)."""
        while self._queue:
            session_id, what, write = self._queue[0]
            try:
                write()
            except FencedWrite:
                self._queue.popleft()
                self._fenced(session_id, what)
                continue
            except Exception as exc:  # noqa: BLE001 - retried, or given up with an event
                self._attempt += 1
                if self._attempt + 1 >= self._schedule.max_attempts:
                    self._queue.popleft()
                    self._attempt = 0
                    retries = self._schedule.max_attempts - 1
                    logger.bind(session_id=session_id).opt(exception=True).error(
                        "giving up on writing {} after {} attempts", what, retries)
                    self._publish(session_id, ErrorEvent(
                        error_type="store_error", message=f"Could not save {what} after {retries} attempts: {exc}"))
                    continue
                self._failed(session_id, what, exc, first=False)
                return
            self._queue.popleft()
            self._attempt = 0
            logger.bind(session_id=session_id).info("pending write of {} done", what)
        tell(self._timers, CancelTimer(self.key))

    def _fenced(self, session_id: str, what: str) -> None:
        logger.bind(session_id=session_id).warning(
            "write of {} refused: another daemon owns the session now", what)
        if self._on_fenced is not None:
            self._on_fenced(session_id)

    def _failed(self, session_id: str, what: str, exc: Exception, *, first: bool) -> None:
        delay = self._schedule.delay_s(self._attempt + 1)
        log = logger.bind(session_id=session_id)
        if first:
            log.opt(exception=exc).warning("could not write {}; retrying in {:g}s", what, delay)
            self._publish(session_id, SessionError(
                error_type="store_error", severity="warning", recoverable=True,
                message=f"Could not save {what} ({type(exc).__name__}: {exc}); retrying."))
        else:
            log.warning("write of {} failed again ({}); retrying in {:g}s", what, exc, delay)
        if self._owner is not None:
            tell(self._timers, ScheduleTimer(self.key, delay, self._owner, RetryWrites(self.key)))

    def _publish(self, session_id: str, event: Any) -> None:
        if session_id:
            self._publish_to(session_id, event)
