"""What the SessionSupervisor remembers, and the timer messages it sends itself.

Plain records, no behaviour: one :class:`Incarnation` per running session, one
:class:`Meta` per session it knows (what survives between incarnations, the seed's
sessionMeta), one :class:`Paused` per session paused by an outage. The timer messages
are scheduled on the Timers table and come back to the supervisor's own mailbox.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pykka

from corvid_actors.actors.live import LiveSession
from corvid_actors.actors.session_messages import Begin, Ready
from corvid_actors.actors.session_wiring import Lifeline, TurnTally
from corvid_actors.actors.supervisor._messages import StartTicket

# --- timer messages (the supervisor tells itself through the Timers table) ------------------
# Underscored: nobody else sends them, and their names appear in the ``session_error`` a
# handler that raised publishes ("could not handle _RestartDue"), as they always have.


@dataclass(frozen=True)
class _RestartDue:
    """A crashed session's backoff is over: restart attempt ``attempt``."""

    session_id: str
    attempt: int


@dataclass(frozen=True)
class _ResumeDue:
    """A paused session is due for a health probe (``seq``: which pause it belongs to)."""

    session_id: str
    seq: int


@dataclass(frozen=True)
class _ProbeResult:
    """The health probe of pause ``seq`` ended (told from the probe's worker thread)."""

    session_id: str
    seq: int
    healthy: bool


@dataclass(frozen=True)
class _FallbackCheck:
    """The timeout safety net: ask overdue incarnations to check their deadline."""


@dataclass(frozen=True)
class _Prune:
    """The orphan pruner's sweep: ghost rows, stale meta, subscribers of gone sessions."""


@dataclass(frozen=True)
class _PassivatedDue:
    """A passivated session's inactivity deadline or idle exit is due (``seq``: which
    passivation it belongs to). Told by the Timers table to the supervisor."""

    session_id: str
    seq: int


# --- records ------------------------------------------------------------------------------


@dataclass
class Incarnation:
    """One running (or building) SessionActor of a session."""

    generation: int
    ref: pykka.ActorRef[Any]
    lifeline: Lifeline
    pid: int
    started_at: float
    provider_name: str
    #: the inactivity timeout last set: the default, or what extend_timeout granted (it
    #: holds until the session's next event, which re-arms the default)
    timeout_s: float
    #: its entry in the live registry (``entry.begun``: False while a resumed incarnation
    #: waits for its first message, which goes to it with the history, see ``send``)
    entry: LiveSession
    #: its turn accounting (the session actor's; read here when it ends)
    tally: TurnTally
    #: blocking closers of what the incarnation owns (BuiltSession.resources)
    resources: tuple[Any, ...] = ()
    #: True until it reports Built: its first message and what was sent meanwhile wait
    building: bool = True
    #: resolved with the pid when built, None when it never runs (the asker waits on it)
    ticket: StartTicket | None = None
    #: Begin or Ready, told when it is built; then the held messages, in their order
    first: Begin | Ready | None = None
    held: list[Any] = field(default_factory=list)
    #: a passivated session's reactivation (issue 37): the pid it keeps; it is built
    #: quietly (no start events, no row write, no ``Ready``). 0: an ordinary start
    quiet_pid: int = 0
    #: a quiet reactivation of a session passivated at start-up without a build
    #: (``_dormant``): this build's notices are published, as that start would have
    first_build: bool = False


@dataclass
class Meta:
    """What survives between incarnations of one session (the seed's sessionMeta)."""

    source: str = "web"
    restart_count: int = 0
    outage_attempts: int = 0
    restart_pending: bool = False
    #: turn accounting of the ended incarnations (a running one's is in its TurnTally)
    cost_usd: float = 0.0
    turns: int = 0


@dataclass
class Paused:
    """A session paused by an outage, due for a probe at ``resume_at_iso``."""

    seq: int
    resume_at_iso: str


@dataclass
class Passivated:
    """A session whose incarnation was passivated: what its actor knew that must outlive it."""

    seq: int
    pid: int
    provider_name: str
    #: monotonic: when its last incarnation started (an idle exit's note counts from there)
    started_at: float
    #: the inactivity timeout in force (the default, or what extend_timeout granted)
    timeout_s: float
    #: monotonic: the inactivity deadline, and the idle exit (None: the loop has none)
    deadline_at: float
    idle_at: float | None
    #: False: registered passivated at start-up without a build (``_dormant``): its first
    #: build, at reactivation, publishes the build's notices a start would have
    built: bool = True
