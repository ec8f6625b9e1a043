"""How an incarnation ends: exit, crash with backoff restart, timeout, stop.

Seed invariants 8 (crash auto-restart, 5 s × 3^n for chat sessions, at most 3, the
count reset after a stable period) and 10 (timeouts). The decisions are
:mod:`corvid_actors.policy.supervision`'s; these functions perform them, on the supervisor's
thread.
"""

from __future__ import annotations

from corvid_actors.actors.base import tell
from corvid_actors.actors.supervisor._core import SupervisorCore
from corvid_actors.actors.supervisor._resume import resume
from corvid_actors.actors.supervisor._state import _RestartDue
from corvid_actors.actors.timers import ScheduleTimer
from corvid_actors.events import ErrorEvent, SessionError, SessionExited, SessionRestarting
from corvid_actors.policy.supervision import (
    completed_note,
    crashed_note,
    restart_after_crash,
    restart_count_after_uptime,
)


def stop_request(core: SupervisorCore, sid: str, reason: str) -> bool:
    """Stop the session unless it is stopped already (then False and nothing published)."""
    meta = core.meta.get(sid)
    if sid not in core.running and sid not in core.paused and not (meta and meta.restart_pending):
        row = core.store.get_session(sid)
        if row is not None and row.status == "stopped":
            return False  # stopped already: no second session_stopped
    core.stop_session(sid, reason)
    return True


def handle_exit(core: SupervisorCore, sid: str, code: int, error: str = "") -> None:
    """The incarnation ended (``code`` 0: completed): row, exit note, events, and a
    restart with backoff when the crash policy allows one."""
    inc = core.kill(sid)
    assert inc is not None
    sup = core.sup
    meta = core.meta_of(sid)
    duration_s = core.clock.monotonic() - inc.started_at
    # the stability reset, applied when it matters (no timer per incarnation): an
    # incarnation that ran for the stable period crashes as if for the first time
    meta.restart_count = restart_count_after_uptime(sup, meta.restart_count, duration_s)
    core.set_status(sid, "idle" if code == 0 else "error")
    note = completed_note(duration_s, meta.turns) if code == 0 else crashed_note(code, error, duration_s, meta.turns)
    core.write(sid, "the exit note", lambda: core.store.append_message(sid, "system", note))
    decision = restart_after_crash(sup, source=meta.source, exit_code=code, restarts_so_far=meta.restart_count)
    core.tracing.decision("exit", sid, {"corvid.exit.code": code, "corvid.restart.decided": decision.restart,
                                        "corvid.restart.attempt": decision.attempt,
                                        "corvid.restart.backoff_s": decision.delay_s})
    if code != 0:
        core.publish(sid, SessionError(error_type="crash", message=error or f"Session crashed with exit code {code}",
                                       severity="warning" if decision.restart else "error", recoverable=True))
    core.publish(sid, SessionExited(code=code, num_turns=meta.turns, duration_ms=int(duration_s * 1000)))
    if decision.restart:
        meta.restart_count = decision.attempt
        meta.restart_pending = True
        if core.cluster is not None:  # durable before announced: a daemon taking the session over restarts it then
            core.cluster.set_due(sid, restart_in_s=decision.delay_s)
        core.publish(sid, SessionRestarting(attempt=decision.attempt, delay_s=decision.delay_s))
        tell(core.timers, ScheduleTimer((sid, "restart"), decision.delay_s, core.ref,
                                        _RestartDue(sid, decision.attempt)))
        core.ensure_housekeeping()
        return
    if code != 0 and meta.source in sup.auto_restart_sources:
        core.publish(sid, ErrorEvent(
            error_type="max_restarts_exceeded",
            message=f"Session crashed {meta.restart_count + 1} times; giving up after {sup.max_restarts} restarts",
        ))
    core.cleanup(sid, released=True)  # kill() above released its slot and approvals


def crashed(core: SupervisorCore, sid: str, error: str) -> None:
    """The incarnation's actor failed (a bug): an ``error`` event, then the crash path."""
    core.publish(sid, ErrorEvent(error_type="crash", message=error))
    core.tracing.decision("crash", sid, {"error.type": error.split(":", 1)[0]})
    handle_exit(core, sid, 1, error)


def restart_due(core: SupervisorCore, sid: str) -> None:
    """A crashed session's backoff is over: resume it, unless it was stopped meanwhile."""
    meta = core.meta.get(sid)
    if meta is None or not meta.restart_pending or sid in core.running or core.shutting_down:
        return
    row = core.store.get_session(sid)
    if row is None or row.status == "stopped":
        core.cleanup(sid)
        return
    meta.restart_pending = False
    core.tracing.decision("restart", sid, {"corvid.restart.attempt": meta.restart_count})
    resume(core, sid, None)


def timed_out(core: SupervisorCore, sid: str) -> None:
    """The incarnation saw no activity for its timeout: a warning, then a stop (the two
    events reach the bus as one message, once the incarnation is ended and its row
    stopped)."""
    timeout_s = core.running[sid].timeout_s
    core.stop_session(sid, "timeout", notice=SessionError(
        error_type="timeout", severity="warning", recoverable=True,
        message=f"Session stopped after {timeout_s:g}s without activity. Send a message to resume."))
