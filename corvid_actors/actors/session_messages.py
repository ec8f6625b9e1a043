"""The messages a :class:`~corvid_actors.actors.session.SessionActor` takes and sends.

In (from the supervisor, or — ``UserInput`` — straight from ``Runtime.send_message``
through the live registry): :class:`Begin`, :class:`Ready`, :class:`UserInput`,
:class:`ExtendTimeout`, :class:`CheckTimeout`, :class:`Abort`, :class:`InjectedCrash`.
Out, to the supervisor (lifecycle only): :class:`Built` / :class:`BuildFailed`,
:class:`SessionEnded`, :class:`OutageReported`, :class:`TimedOut`,
:class:`SessionCrashed`, :class:`StopRequested`, :class:`WritesHandedOver`. All are
told (no replies); the actor handles them on its own thread.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from corvid_actors.actors.session_work import ExitRequested
from corvid_actors.loop import effects as fx


@dataclass(frozen=True)
class Begin:
    """The first message; ``blocks`` when it is multimodal (``prompt`` is its text).
    ``counts_turn``: a user message that opens a new turn (a resumed incarnation's first
    message); the start's own prompt was counted by the supervisor's start write.

    Told by the supervisor (``on_built``, or a resumed incarnation's first user message
    through its live entry); handled on the session actor's thread. Reply: none (told)."""

    prompt: str
    blocks: tuple[dict[str, Any], ...] = ()
    counts_turn: bool = False


@dataclass(frozen=True)
class Ready:
    """Start without a turn: the incarnation waits for its first message (a resumed
    session that was not mid-turn calls no model until someone speaks).

    Told by the supervisor when the incarnation is built (``on_built``); handled on the
    session actor's thread. Reply: none (told)."""


@dataclass(frozen=True)
class UserInput:
    """A user message; ``blocks`` when it is multimodal (``text`` is its text parts).

    Told through the incarnation's ``LiveSession.deliver``: by ``Runtime.send_message``
    on the caller's thread (fast path) or by the supervisor (slow path, or held until the
    incarnation is built). Handled on the session actor's thread. Reply: none (told)."""

    text: str
    blocks: tuple[dict[str, Any], ...] = ()
    #: the sender stored it with its turn counted open (``Store.append_user_turn``): the
    #: actor counts the turn in memory only (and uncounts it if it does not start it)
    turn_opened: bool = False


@dataclass(frozen=True)
class ExtendTimeout:
    """Replace the pending inactivity deadline with now + ``timeout_s`` (already capped by
    the supervisor); the session's next event re-arms the default timeout.

    Told by the supervisor (on an ``ExtendSessionTimeout`` request); handled on the session
    actor's thread. Reply: none (told)."""

    timeout_s: float


@dataclass(frozen=True)
class CheckTimeout:
    """Check the inactivity deadline now (ends the session with ``TimedOut`` if past it).

    Told by the supervisor's housekeeping (``fallback_check``) to incarnations that may
    be overdue; handled on the session actor's thread. Reply: none (told)."""


@dataclass(frozen=True)
class Abort:
    """Stop now: cancel in-flight work and end the actor without emitting anything.

    Told by the supervisor when it evicts the incarnation (``SupervisorCore.evict``);
    handled on the session actor's thread. Reply: none (told)."""


@dataclass(frozen=True)
class InjectedCrash:
    """Fault hook (``corvid_actors.testing.kill_incarnation``): the actor fails on this
    message as on any bug in it — ``on_failure`` runs and the supervisor hears
    ``SessionCrashed`` (exit code 1, restart with backoff).

    Told by the supervisor on its ``KillIncarnation`` request; handled on the session
    actor's thread. Reply: none (told)."""

    reason: str = "incarnation killed (fault hook)"


class InjectedCrashError(RuntimeError):
    """What the actor raises on :class:`InjectedCrash`."""


@dataclass(frozen=True)
class SessionEnded:
    """The incarnation ended with exit ``code`` (0: clean; the row and restart follow).

    Told by the session actor (``session_effects``, on its own thread) to the supervisor;
    handled on the supervisor's thread. Reply: none (told)."""

    session_id: str
    generation: int
    code: int
    #: the last error the incarnation published (for the exit note), "" for a clean end
    error: str = ""


@dataclass(frozen=True)
class OutageReported:
    """The loop reported a provider outage (``message``): the supervisor pauses the session.

    Told by the session actor (``session_effects``, on its own thread) to the supervisor;
    handled on the supervisor's thread. Reply: none (told)."""

    session_id: str
    generation: int
    message: str


@dataclass(frozen=True)
class Built:
    """The incarnation is built (``built``: the ``wiring.BuiltSession``) and waits for
    ``Begin``/``Ready``. Its ``built.resources`` are the supervisor's to close from now on.

    Told by the session actor (on its thread, when its build is done) to the supervisor;
    handled on the supervisor's thread (``on_built``). Reply: none (told)."""

    session_id: str
    generation: int
    built: Any


@dataclass(frozen=True)
class BuildFailed:
    """Building the incarnation raised (a spawn error); the actor has stopped.

    Told by the session actor (on its thread) to the supervisor; handled on the
    supervisor's thread. Reply: none (told)."""

    session_id: str
    generation: int
    error: str


@dataclass(frozen=True)
class WritesHandedOver:
    """The ending incarnation's writes that failed and are still pending: the supervisor
    goes on retrying them (``PendingWrites.adopt``), so they outlive the incarnation.

    Told by the ending session actor (``session_effects``, on its thread) to the
    supervisor; handled on the supervisor's thread. Reply: none (told)."""

    session_id: str
    writes: tuple[Any, ...]


@dataclass(frozen=True)
class StopRequested:
    """The incarnation asks to be stopped (``session_stopped`` with ``reason``), e.g. when
    the CreditBank says its participant's credits are exhausted.

    Told by the session actor (on its thread) to the supervisor; handled on the
    supervisor's thread. Reply: none (told)."""

    session_id: str
    generation: int
    reason: str


@dataclass(frozen=True)
class TimedOut:
    """The incarnation's inactivity deadline passed: the supervisor ends it as timed out.

    Told by the session actor (on its thread, after a deadline check) to the supervisor;
    handled on the supervisor's thread. Reply: none (told)."""

    session_id: str
    generation: int


@dataclass(frozen=True)
class SessionCrashed:
    """The session actor failed (``error``: the exception); restart with backoff follows.

    Told by the session actor's ``on_failure`` (on its thread) to the supervisor;
    handled on the supervisor's thread. Reply: none (told)."""

    session_id: str
    generation: int
    error: str


def approval_id_for(session_id: str, generation: int, seq: int) -> str:
    """An 8-character approval id, as the original's (the head of a uuid): hex digits of
    a hash, so simulations replay the same ids while ids of different sessions differ."""
    return hashlib.blake2s(f"{session_id}/{generation}/{seq}".encode(), digest_size=4).hexdigest()


# --- the actor's messages to itself (internal: timers and workers report back) ------------


@dataclass(frozen=True)
class LoopTimerDue:
    """A timer the loop asked for (``Schedule``) fired; fed to the loop as ``TimerFired``.
    Told by the Timers table (from the clock's callback); handled on the session actor's thread."""

    generation: int
    token: str


@dataclass(frozen=True)
class IdleDue:
    """The idle timeout armed after turn ``turn_seq`` fired (ignored if a turn ran since).
    Told by the Timers table (from the clock's callback); handled on the session actor's thread."""

    generation: int
    turn_seq: int


@dataclass(frozen=True)
class PassivateDue:
    """The passivation timer armed after turn ``turn_seq`` fired (ignored if a turn ran
    since): the incarnation offers itself for passivation (issue 37). Told by the Timers
    table; handled on the session actor's thread."""

    generation: int
    turn_seq: int


@dataclass(frozen=True)
class WantsPassivation:
    """An idle incarnation offers to be passivated (issue 37): no turn, worker, slot,
    approval or loop timer of it is in flight. ``received``: the user messages it has
    taken (the supervisor passivates it only if its live entry delivered no more than
    that: nothing is on its way to it). ``deadline``/``idle_due``: its wall-clock
    inactivity deadline and idle exit (None: none armed), kept by the supervisor while
    it has no actor. Told to the supervisor; handled on its thread."""

    session_id: str
    generation: int
    received: int
    deadline: datetime
    idle_due: datetime | None


@dataclass(frozen=True)
class TimeoutDue:
    """Time to check the inactivity deadline (told by the Timers table; handled on the
    session actor's thread)."""

    generation: int


@dataclass(frozen=True)
class WorkerDone:
    """Worker run ``seq`` finished with ``result`` (ignored unless it is the latest run).
    Told from the worker thread; handled on the session actor's thread."""

    seq: int
    result: fx.LoopInput | ExitRequested


@dataclass(frozen=True)
class BuildDone:
    """The build on the worker finished: the complete wiring and the built session, or
    ``error``. Told from the build worker thread; handled on the session actor's thread."""

    wiring: Any = None
    built: Any = None
    error: str = ""
