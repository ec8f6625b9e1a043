"""The SessionSupervisor's public messages: what it is asked and told, and its replies.

Every request is asked (``ref.ask``) from the asker's thread and handled on the
supervisor's thread; an asked request that raises replies with the exception. The
askers are :class:`~corvid_actors.runtime.Runtime` (its ProcessManager methods, on the
caller's thread), the :class:`~corvid_actors.actors.admin.AdminActor` (on its own
thread) and the fault hooks of :mod:`corvid_actors.testing.faults`.

A start or resume replies with a :class:`StartTicket` while the new incarnation builds
itself off the supervisor's thread; :func:`started_pid` turns any such reply into a pid.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from corvid_actors.actors.inline import InlineDispatcher
from corvid_actors.content import UserContent
from corvid_actors.errors import SettleTimeout


@dataclass(frozen=True)
class StartProcess:
    """Start (or restart) a session; ``prompt`` may be multimodal content blocks
    (``corvid_actors.content``) and is stored as the user's message first.

    Asked by ``Runtime.start_process`` and the AdminActor's ``start``; runs on the
    supervisor's thread. Replies with a :class:`StartTicket` (wait on it, or pass the reply
    to :func:`started_pid`), or None when it could not start (an ``error`` event says
    why). Raises NotFoundError for an unknown session, RuntimeStoppedError while the
    runtime shuts down."""

    session_id: str
    prompt: UserContent | None = None


@dataclass(frozen=True)
class ResumeProcess:
    """Resume with history (warm: a running session just gets ``prompt``).

    Asked by ``Runtime.resume_process`` and the AdminActor's ``send``/``resume``; runs on
    the supervisor's thread. Replies with the running incarnation's pid, a
    :class:`StartTicket` for a new one, or None when it could not start. Raises
    RuntimeStoppedError while the runtime shuts down."""

    session_id: str
    prompt: UserContent | None = None


@dataclass(frozen=True)
class ResumeMany:
    """Resume several sessions without a new message, as :class:`ResumeProcess` each (a
    daemon's start-up: ``Runtime.resume_pending_sessions``), their rows and last speakers
    read in one statement each (issue 37, item 5).

    Asked by ``Runtime.resume_pending_sessions``; runs on the supervisor's thread. Replies
    with ``{session_id: reply}``, each reply as :class:`ResumeProcess`'s (None for a session
    that is unknown or could not start: logged, the others go on). Raises
    RuntimeStoppedError while the runtime shuts down."""

    session_ids: tuple[str, ...]


@dataclass(frozen=True)
class StopProcess:
    """Stop a session (``reason`` goes into its ``session_stopped`` event).

    Asked by ``Runtime.stop_process`` and the AdminActor's ``stop``; runs on the
    supervisor's thread. Replies True if it stopped something; False (nothing published)
    when the session is stopped already — no incarnation, not paused, no restart pending,
    row ``stopped``."""

    session_id: str
    reason: str = "user_stop"


@dataclass(frozen=True)
class SendMessage:
    """The slow path of ``Runtime.send_message`` (asked by it, on the caller's thread;
    handled on the supervisor's thread). ``text`` may be multimodal content blocks.

    Replies True if a running session accepted the message (persisted first). False when
    no incarnation runs, or when the incarnation refuses input (it is ending): then
    nothing is persisted and the incarnation is evicted, so the next resume cold-starts.
    ``fallback``: the generation of the incarnation whose direct delivery was refused
    after the caller's lookup (its actor ended in between). If that one is still the
    current incarnation, it is evicted and the session cold-starts with the message (True
    if it started); if the supervisor has stopped or replaced it meanwhile, the message
    goes to a newer incarnation, or nowhere (False) — a stop stays a stop."""

    session_id: str
    text: UserContent
    fallback: int = 0


@dataclass(frozen=True)
class IsRunning:
    """Asked by ``Runtime.is_running`` and the AdminActor; runs on the supervisor's thread.
    Replies True while the session has an incarnation (also while it builds)."""

    session_id: str


@dataclass(frozen=True)
class IsPaused:
    """Asked by ``Runtime.is_paused`` and the AdminActor; runs on the supervisor's thread.
    Replies True while the session is paused by an outage and due for an auto-resume."""

    session_id: str


@dataclass(frozen=True)
class ActiveSessionIds:
    """Asked by ``Runtime.get_active_session_ids`` and the AdminActor's ``health``; runs on
    the supervisor's thread. Replies with the list of sessions that have an incarnation."""


@dataclass(frozen=True)
class PausedSessionIds:
    """Asked by ``Runtime.get_paused_session_ids`` and the AdminActor's ``health``; runs on
    the supervisor's thread. Replies with the list of paused sessions."""


@dataclass(frozen=True)
class ResumeSession:
    """Manual resume of a paused session (restart and outage counters start over).

    Asked by ``Runtime.resume_session`` and the AdminActor's ``resume``; runs on the
    supervisor's thread. Replies True if it resumed; False if the session is not paused,
    or if its row was deleted while it was paused (the paused record is dropped then)."""

    session_id: str


@dataclass(frozen=True)
class ExtendSessionTimeout:
    """Replace the running session's pending inactivity deadline with now +
    min(``additional_s``, 4 × default); its next event re-arms the default timeout.

    Asked by ``Runtime.extend_timeout`` and the AdminActor's ``extend``; runs on the
    supervisor's thread. Replies True, or False if the session is not running."""

    session_id: str
    additional_s: float


@dataclass(frozen=True)
class CleanupSessionState:
    """Forget the session here (the single cleanup path: incarnation ended silently,
    timers cancelled, slot and approvals released, subscribers removed).

    Asked by ``Runtime.cleanup_session_state``; runs on the supervisor's thread. Replies
    None."""

    session_id: str


@dataclass(frozen=True)
class SupervisorStats:
    """Asked by ``Runtime.get_memory_stats`` and the AdminActor's ``stats``; runs on the
    supervisor's thread. Replies with a dict: ``processes``, ``session_meta``,
    ``paused_sessions``, ``stable_timers`` (restarted sessions whose stability reset is
    pending), ``passivated_sessions`` (running without an actor, issue 37) (counts)."""


@dataclass(frozen=True)
class SessionInfo:
    """Asked by ``Runtime.session_info`` and the AdminActor's ``sessions``/``session``/
    ``extend``; runs on the supervisor's thread. Replies with a dict of in-memory facts
    per session id (all known sessions when ``session_id`` is None): running, pid,
    generation, provider, uptime, timeout, restarts, turns, cost, paused_until,
    restart_pending."""

    session_id: str | None = None


@dataclass(frozen=True)
class Shutdown:
    """Stop every session and mark it for resume at the next start (batched writes),
    then refuse new starts.

    Asked by ``Runtime.shutdown`` and ``Runtime.stop_sessions`` (on the caller's thread); runs on the supervisor's
    thread. Replies None once every row is written and every event published."""

    reason: str = "server_shutdown"


@dataclass(frozen=True)
class RefuseInput:
    """Fault hook (``corvid_actors.testing.refuse_input``, asked from the test's thread;
    runs on the supervisor's thread): the running incarnation refuses user input from now
    on, as one does between its end and the supervisor hearing of it. Replies True, or
    False when the session is not running."""

    session_id: str


@dataclass(frozen=True)
class KillIncarnation:
    """Fault hook (``corvid_actors.testing.kill_incarnation``, asked from the test's thread;
    runs on the supervisor's thread): the running incarnation's actor fails as on a bug
    (``SessionCrashed``: the crash path, restart with backoff). Replies True, or False
    when the session is not running."""

    session_id: str


#: the asked requests: their exceptions go back to the asker
REQUESTS = (StartProcess, ResumeProcess, ResumeMany, StopProcess, SendMessage, IsRunning, IsPaused, ActiveSessionIds,
            PausedSessionIds, ResumeSession, ExtendSessionTimeout, CleanupSessionState, SupervisorStats,
            SessionInfo, Shutdown, RefuseInput, KillIncarnation)


class StartTicket:
    """The reply to :class:`StartProcess` / :class:`ResumeProcess` while the new
    incarnation builds itself (off the supervisor's thread): :meth:`wait` blocks the asker
    — never the supervisor — until it is built (its pid) or will not run (None: the build
    failed, with a ``spawn_error`` event, or it was stopped first). The supervisor
    resolves it on its own thread."""

    def __init__(self, dispatcher: InlineDispatcher | None = None) -> None:
        self._done = threading.Event()
        self._pid: int | None = None
        #: the runtime's inline dispatcher (simulations): waiting runs the actors meanwhile
        self._dispatcher = dispatcher

    def resolve(self, pid: int | None) -> None:
        """Set the outcome once (later calls are ignored); on the supervisor's thread."""
        if not self._done.is_set():
            self._pid = pid
            self._done.set()

    @property
    def done(self) -> bool:
        """True once resolved."""
        return self._done.is_set()

    def wait(self, timeout_s: float | None = None) -> int | None:
        """The pid, or None; ``timeout_s`` (real seconds) passed: None."""
        if self._dispatcher is not None:
            try:
                self._dispatcher.run_until(self._done.is_set, timeout_s, what="start ticket")
            except SettleTimeout:
                return None
        self._done.wait(timeout_s)
        return self._pid


def started_pid(reply: StartTicket | int | None, timeout_s: float | None = None) -> int | None:
    """What StartProcess / ResumeProcess replied, as a pid or None (waits for a ticket)."""
    return reply.wait(timeout_s) if isinstance(reply, StartTicket) else reply
