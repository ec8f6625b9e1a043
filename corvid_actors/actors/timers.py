"""The timer table: every delay in the runtime goes through it.

Timers are named by a key (a tuple such as ``(session_id, "restart")``); scheduling a
key again replaces the old timer, so an actor never has two of the same kind. When a
timer is due the clock's callback checks, under the table's lock, that it was not
cancelled or replaced meanwhile, and then — outside the lock — tells the target its
message. A target that has died is skipped silently: late timers of a dead incarnation
are harmless by construction.

:class:`Timers` is a plain thread-safe object, not an actor (issue 18): the table is a
clock concern, not a conversation. Until then it was an actor, and every timer cost two
messages more than it needed (the schedule, and the clock's "due" that came back through
its mailbox before the target heard of it). Scheduling and cancelling now run on the
caller's thread, under a lock that is never held while anything else is called but the
clock's own (leaf) lock — no actor, no target.

It keeps the surface of the actor ref it replaced, so every call site stays as it was:
``tell(timers, ScheduleTimer(...))`` (``corvid_actors.actors.base.tell`` and
``Timers.tell``), ``timers.ask(TimerStats())``, ``timers.is_alive()``. New code may call
:meth:`Timers.schedule`, :meth:`Timers.cancel` and :meth:`Timers.cancel_owner`.

Tuple keys are also indexed by their first element (a session id, or ``"supervisor"``),
so that :class:`CancelTimers` costs O(that owner's timers), not a scan of every key: a
session's cleanup at 30,000 live timers took 3 ms per call, about 16 s of a 10,000-session
shutdown. The index holds exactly the keys of the table (:class:`TimerIndexCheck`).

Ordering: a schedule and a cancel from one thread take effect in the order they were
made (each is done when its call returns). A timer firing on the clock's thread while
another thread cancels or replaces it: whichever takes the table's lock first wins; a
message already told is not recalled, so targets check that a timer message is still
theirs (a generation or sequence number in it) — as they did when a ``CancelTimer`` could
cross a due timer in the actor's mailbox.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, NamedTuple, overload

import pykka
from loguru import logger

from corvid_actors.actors.base import tell
from corvid_actors.clock import Clock, TimerHandle


@dataclass(frozen=True)
class ScheduleTimer:
    """Tell ``target`` ``message`` after ``delay_s``, replacing any timer under ``key``.

    Told by nearly every actor for its own delays (supervisor, session actors, SlotPool,
    ApprovalBroker, CreditBank, StoreWatch; ``PendingWrites`` for its owner), each on its
    own thread; handled at once on that thread. ``message`` is told on the clock's thread
    when due. Reply: none (told)."""

    key: Hashable
    delay_s: float
    #: any actor (``Any``: pykka's refs are invariant in their actor type)
    target: pykka.ActorRef[Any]
    #: whatever ``target`` takes
    message: object


@dataclass(frozen=True)
class CancelTimer:
    """Cancel the timer under ``key`` (nothing if there is none).

    Told by the same actors as :class:`ScheduleTimer`; handled at once on the caller's
    thread. Reply: none (told)."""

    key: Hashable


@dataclass(frozen=True)
class CancelTimers:
    """Cancel every timer whose key is a tuple starting with ``prefix``.

    Told by the supervisor (a session's cleanup: its session id); handled at once on the
    caller's thread. Reply: none (told)."""

    prefix: Hashable


@dataclass(frozen=True)
class TimerStats:
    """Asked by ``Runtime.get_memory_stats`` and the AdminActor's ``stats``; answered on the
    asking thread. Replies with a dict of counts (``timers``, ``by_kind``, ``clock_handles``)."""


@dataclass(frozen=True)
class TimerIndexCheck:
    """Replies ``{"exact": bool, "keys": set, "by_owner": dict}``: the table's keys and
    its per-owner index, copied (for tests: the index must hold exactly the table's keys).
    Asked by tests only; answered on the asking thread."""


class _Timer(NamedTuple):
    #: which scheduling of its key this is (a replaced timer's callback finds another)
    seq: int
    handle: TimerHandle
    target: pykka.ActorRef[Any]
    message: object


class Timers:
    """The runtime's timer table (see the module docstring). Thread-safe; never blocks on
    anything but its own lock and the clock's.

    One per Runtime (``runtime.internals.timers``), made before the actors that take it.
    :meth:`close` (the Runtime's shutdown, after every actor stopped) cancels every timer;
    a timer scheduled after that is dropped, as a message told to a stopped actor was.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        # not re-entrant on purpose: nothing under it may call back into the table
        self._lock = threading.Lock()
        self._seq = 0
        self._timers: dict[Hashable, _Timer] = {}
        #: owner (a tuple key's first element) -> its keys in ``_timers``; no empty sets
        self._by_owner: dict[Hashable, set[Hashable]] = {}
        self._closed = False

    # --- the plain API ----------------------------------------------------------------

    def schedule(self, key: Hashable, delay_s: float, target: pykka.ActorRef[Any], message: object) -> None:
        """Tell ``target`` ``message`` after ``delay_s``, replacing any timer under ``key``
        (on the calling thread; the message is told on the clock's thread when due)."""
        with self._lock:
            if self._closed:
                logger.debug("timer {!r} scheduled after the timers closed: dropped", key)
                return
            self._cancel(key)
            self._seq += 1
            seq = self._seq
            handle = self._clock.call_later(delay_s, partial(self._fire, key, seq))
            self._timers[key] = _Timer(seq, handle, target, message)
            if isinstance(key, tuple) and key:
                self._by_owner.setdefault(key[0], set()).add(key)

    def cancel(self, key: Hashable) -> bool:
        """Cancel the timer under ``key``; False if there was none (never scheduled, fired
        already — its message is then told or being told — or cancelled before)."""
        with self._lock:
            return self._cancel(key)

    def cancel_owner(self, prefix: Hashable) -> int:
        """Cancel every timer whose key is a tuple starting with ``prefix``: O(its timers).
        Returns how many were cancelled."""
        with self._lock:
            cancelled = 0
            for key in self._by_owner.pop(prefix, ()):
                entry = self._timers.pop(key, None)
                if entry is not None:
                    entry.handle.cancel()
                    cancelled += 1
            return cancelled

    def stats(self) -> dict[str, Any]:
        """``{"timers": n, "by_kind": {kind: n}, "clock_handles": n | None}`` (a tuple key's
        second element is its kind)."""
        with self._lock:
            kinds: dict[str, int] = {}
            for key in self._timers:
                kind = str(key[1]) if isinstance(key, tuple) and len(key) > 1 else "other"
                kinds[kind] = kinds.get(kind, 0) + 1
            count = len(self._timers)
        # the clock's heap, cancelled handles not yet released included (issue 21)
        held = getattr(self._clock, "held", None)
        return {"timers": count, "by_kind": kinds, "clock_handles": held() if callable(held) else None}

    def index_check(self) -> dict[str, Any]:
        """The answer to :class:`TimerIndexCheck` (for tests)."""
        with self._lock:
            return {"exact": self._check_index(), "keys": set(self._timers),
                    "by_owner": {owner: set(keys) for owner, keys in self._by_owner.items()}}

    def close(self) -> None:
        """Cancel every timer; later schedules are dropped (the Runtime's shutdown)."""
        with self._lock:
            self._closed = True
            for entry in self._timers.values():
                entry.handle.cancel()
            self._timers.clear()
            self._by_owner.clear()

    # --- the surface of the actor ref it replaced ---------------------------------------

    def tell(self, message: object) -> None:
        """Handle a :class:`ScheduleTimer`, :class:`CancelTimer` or :class:`CancelTimers` now,
        on the calling thread (anything else is ignored, as the actor did). As a told
        message did, one that fails (an unhashable key) is logged and dropped: it does not
        raise into the teller."""
        try:
            self._handle(message)
        except Exception as exc:  # noqa: BLE001 - a told message never raises into its teller
            logger.opt(exception=exc).error("Timers could not handle {}: {}; the table goes on",
                                            type(message).__name__, exc)

    @overload
    def ask(self, message: object, *, block: Literal[True] = ..., timeout: float | None = None) -> Any: ...

    @overload
    def ask(self, message: object, *, block: Literal[False], timeout: float | None = None) -> pykka.Future[Any]: ...

    def ask(self, message: object, *, block: bool = True, timeout: float | None = None) -> Any:
        """Answer any of the messages above now, on the calling thread (``timeout`` is
        accepted for the ref's signature; nothing here waits): the stats and index checks
        their dicts, the others None. An error (an unhashable key) raises into the asker
        (with ``block=False``: the future holds it)."""
        if block:
            return self._handle(message)
        future: pykka.Future[Any] = pykka.ThreadingFuture()
        try:
            future.set(self._handle(message))
        except Exception:  # noqa: BLE001 - handed to the asker through the future
            future.set_exception()
        return future

    def is_alive(self) -> bool:
        """True until :meth:`close` (a table has no thread to lose: it cannot die)."""
        return not self._closed

    # --- internals --------------------------------------------------------------------

    def _handle(self, message: object) -> Any:
        match message:
            case ScheduleTimer(key, delay_s, target, payload):
                self.schedule(key, delay_s, target, payload)
            case CancelTimer(key):
                self.cancel(key)
            case CancelTimers(prefix):
                self.cancel_owner(prefix)
            case TimerStats():
                return self.stats()
            case TimerIndexCheck():
                return self.index_check()
            case _:
                # as the actor did: anything else is ignored (tests use the table as a sink
                # for answers nobody reads)
                logger.debug("Timers ignored a {}", type(message).__name__)
        return None

    def _fire(self, key: Hashable, seq: int) -> None:
        # The clock's callback: on its timer thread (RealClock) or the thread advancing a
        # SimClock. The target is told outside the lock: its inbox (or, inline, anything
        # it runs) may schedule again.
        with self._lock:
            entry = self._timers.get(key)
            if entry is None or entry.seq != seq:
                return  # cancelled or replaced before it came due
            del self._timers[key]
            self._unindex(key)
        tell(entry.target, entry.message)

    def _cancel(self, key: Hashable) -> bool:
        # under the lock
        entry = self._timers.pop(key, None)
        if entry is None:
            return False
        entry.handle.cancel()
        self._unindex(key)
        return True

    def _unindex(self, key: Hashable) -> None:
        # under the lock
        if isinstance(key, tuple) and key:
            keys = self._by_owner.get(key[0])
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_owner[key[0]]

    def _check_index(self) -> bool:
        """The index holds exactly the table's tuple keys, under their owners (for tests)."""
        indexed = {(owner, key) for owner, keys in self._by_owner.items() for key in keys}
        expected = {(key[0], key) for key in self._timers if isinstance(key, tuple) and key}
        return indexed == expected and all(self._by_owner.values())
