"""The SessionSupervisor: the process manager of the seed, as an actor.

It owns every running :class:`~corvid_actors.actors.session.SessionActor`, one per
session (1:1), and decides what happens when one ends: clean exit, crash with
backoff restart (chat sessions), pause on an upstream outage with health-probed
auto-resume, timeout, stop. The decisions are pure functions in
``corvid_actors.policy.supervision``; this package performs them.

Invariants kept here (seed numbering): 1 one actor per session (a new incarnation
has a new generation; messages and timers of an old one are ignored), 2 stale sessions
reset at start-up (``Runtime``), 6/7 context reset through the resume path, 8 crash
auto-restart, 9 outage pause and auto-resume, 10 timeouts, 12 events before
subscriber removal, 13 orphan pruning, 14 ``cleanup`` as the single cleanup path.

Lifecycle only: the supervisor starts, stops, restarts, pauses and resumes incarnations
and hears about their ends (``SessionEnded``, ``SessionCrashed``, ``OutageReported``,
``TimedOut``, ``StopRequested``) — not about every turn. User messages to a running
session do not pass through it: ``Runtime.send_message`` persists them and tells the
incarnation through the live registry (``corvid_actors.actors.live``), which only this
actor writes. It is asked to deliver only when that fast path does not apply (no
incarnation, a resumed incarnation's first message, a context reset, an incarnation
that refuses input or died: the cold path). Turn accounting (turn counts, cost, credit
charges) is the session actor's.

Failures: a told handler that raises (a store error, a bug) does not stop this actor:
the session concerned gets a ``session_error`` event and the error is logged; the
writes that must happen (session status, exit notes) go through
:class:`~corvid_actors.actors.retry.PendingWrites` and are retried with backoff through
the Timers table. An asked request that raises replies with the exception.

Layout (private modules, one concern each; the public names are this ``__all__``):
``_messages`` (requests, :class:`StartTicket`), ``_actor`` (the mailbox and message
switch), ``_core`` (the books and primitive moves), ``_state`` (records and timer
messages), ``_start``, ``_resume``, ``_exits``, ``_outage``, ``_housekeeping``.
"""

from __future__ import annotations

from corvid_actors.actors.supervisor._actor import SessionSupervisor
from corvid_actors.actors.supervisor._messages import (
    ActiveSessionIds,
    CleanupSessionState,
    ExtendSessionTimeout,
    IsPaused,
    IsRunning,
    KillIncarnation,
    PausedSessionIds,
    RefuseInput,
    ResumeMany,
    ResumeProcess,
    ResumeSession,
    SendMessage,
    SessionInfo,
    Shutdown,
    StartProcess,
    StartTicket,
    StopProcess,
    SupervisorStats,
    started_pid,
)

__all__ = [
    "ActiveSessionIds", "CleanupSessionState", "ExtendSessionTimeout", "IsPaused", "IsRunning", "KillIncarnation",
    "PausedSessionIds", "RefuseInput", "ResumeMany", "ResumeProcess", "ResumeSession", "SendMessage", "SessionInfo",
    "SessionSupervisor", "Shutdown", "StartProcess", "StartTicket", "StopProcess", "SupervisorStats", "started_pid",
]
