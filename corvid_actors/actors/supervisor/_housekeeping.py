"""The supervisor's sweeps and reports: timeout safety net, orphan pruner, shutdown, info.

Seed invariants 10 (the 60 s fallback check behind each incarnation's own timeout),
13 (orphan pruning: ghost rows, meta of forgotten sessions, subscribers of gone
sessions) and 2's other half (shutdown marks every session for resume at the next
start). All on the supervisor's thread.
"""

from __future__ import annotations

from typing import Any

from loguru import logger

from corvid_actors.actors.base import tell
from corvid_actors.actors.events import PruneSessions
from corvid_actors.actors.session_messages import CheckTimeout
from corvid_actors.actors.supervisor._core import SupervisorCore
from corvid_actors.actors.timers import CancelTimer
from corvid_actors.policy.supervision import restart_count_after_uptime


def fallback_check(core: SupervisorCore) -> None:
    """Ask every incarnation that may be overdue to check its own deadline."""
    core.fallback_scheduled = False
    now = core.last_fallback = core.clock.monotonic()
    for inc in core.running.values():
        # an incarnation younger than its timeout cannot be overdue: leave it be
        if now - inc.started_at >= core.due_after(inc):
            tell(inc.ref, CheckTimeout())
    core.ensure_housekeeping()


def prune(core: SupervisorCore) -> None:
    """Repair ghost rows, forget the meta of sessions nothing waits for, and drop the
    subscribers of sessions no longer known here."""
    core.prune_scheduled = False
    ghosts: list[str] = []
    # Several daemons: a row running with no incarnation here may be another daemon's (its
    # lease says so), and marking it for resume would have the next daemon to start resume
    # it, even once stopped. A dead daemon's rows come back through its expired leases.
    if core.cluster is None:
        try:
            ghosts = core.store.reset_ghost_sessions(core.live_ids())
        except Exception:  # noqa: BLE001 - a told handler must not die of a store error; next sweep retries
            logger.opt(exception=True).warning("orphan pruner could not repair ghost session rows")
    for sid in ghosts:
        # "running" with no live incarnation: reset as at start-up (idle, marked for resume)
        logger.bind(session_id=sid).warning("ghost session row (running, no incarnation) reset to idle")
    keep = set(core.running) | set(core.paused) | set(core.passivated)
    keep |= {sid for sid, meta in core.meta.items() if meta.restart_pending}
    for sid in [s for s in core.meta if s not in keep]:
        del core.meta[sid]
    tell(core.bus, PruneSessions(frozenset(keep)))
    core.ensure_housekeeping()


def shutdown(core: SupervisorCore, reason: str) -> None:
    """Stop every session, marked for resume; from now on nothing starts."""
    core.shutting_down = True
    # Marked for resume in batches (one UPDATE per chunk of ids, not one transaction
    # per session: 10,000 sessions stop in seconds); the rows are written before any
    # session_stopped is published, as one session at a time did. If a batch fails,
    # each session's mark goes through core.write (retried with backoff) as before.
    running = core.live_ids()  # passivated sessions stop and resume as running ones do
    pending = [sid for sid in core.paused if sid not in core.running]
    pending += [sid for sid, meta in core.meta.items()
                if meta.restart_pending and sid not in core.running and sid not in core.paused]
    running_marked = _mark_many(core, running, stopped=True)
    pending_marked = _mark_many(core, pending)
    for sid in running:
        if not running_marked:
            _mark_for_resume(core, sid)
        core.stop_session(sid, reason, write=not running_marked)
    for sid in list(core.paused):
        if not pending_marked:
            _mark_for_resume(core, sid)
        core.cleanup(sid)
    for sid in list(core.meta):
        if not pending_marked and core.meta[sid].restart_pending:
            _mark_for_resume(core, sid)
        core.cleanup(sid)
    # every session's subscribers, also of sessions never started here (globals stay)
    tell(core.bus, PruneSessions(frozenset()))
    tell(core.timers, CancelTimer(("supervisor", "fallback")))
    tell(core.timers, CancelTimer(("supervisor", "prune")))


def _mark_many(core: SupervisorCore, sids: list[str], *, stopped: bool = False) -> bool:
    """Mark ``sids`` for resume (``stopped``: and stopped) in batched statements; False
    (nothing assumed written) when the store refused: the caller marks one by one."""
    if not sids:
        return True
    try:
        core.store.mark_for_resume(sids, stopped=stopped)
    except Exception:  # noqa: BLE001 - the per-session path retries with backoff
        logger.opt(exception=True).warning("batched resume marks failed for {} session(s); "
                                           "marking them one by one", len(sids))
        return False
    return True


def _mark_for_resume(core: SupervisorCore, sid: str) -> None:
    core.write(sid, "the resume mark", lambda: core.store.update_session(sid, restart_pending=True))


def stats(core: SupervisorCore) -> dict[str, int]:
    """The reply to ``SupervisorStats``. ``stable_timers`` is the original's count of
    pending stability resets: running sessions that were restarted and have not yet been
    up ``stable_period_s`` (the reset itself is applied at exit, from the uptime)."""
    now = core.clock.monotonic()
    pending = sum(
        1 for sid, inc in core.running.items()
        if (meta := core.meta.get(sid)) is not None and meta.restart_count > 0
        and now - inc.started_at < core.sup.stable_period_s
    )
    return {"processes": len(core.running), "session_meta": len(core.meta), "paused_sessions": len(core.paused),
            "stable_timers": pending, "passivated_sessions": len(core.passivated)}


def info(core: SupervisorCore, sid: str | None) -> dict[str, Any]:
    """The reply to ``SessionInfo``: in-memory facts per session."""
    now = core.clock.monotonic()
    ids = [sid] if sid else sorted(set(core.running) | set(core.paused) | set(core.meta) | set(core.passivated))
    out: dict[str, Any] = {}
    for s in ids:
        inc, meta, paused, rec = core.running.get(s), core.meta.get(s), core.paused.get(s), core.passivated.get(s)
        started = inc.started_at if inc else rec.started_at if rec else None
        out[s] = {
            # a passivated session runs (without an actor: its next message reactivates it)
            "running": inc is not None or rec is not None,
            "passivated": rec is not None,
            "pid": (inc.pid or None) if inc else rec.pid if rec else None,  # none yet while it builds
            "generation": inc.generation if inc else None,
            "provider": inc.provider_name if inc else rec.provider_name if rec else None,
            "uptime_s": round(now - started, 3) if started is not None else 0.0,
            "timeout_s": inc.timeout_s if inc else rec.timeout_s if rec else None,
            # the stability reset is applied at exit (see _exits.handle_exit): shown as it will be
            "restarts": (restart_count_after_uptime(core.sup, meta.restart_count, now - started)
                         if meta and started is not None else meta.restart_count if meta else 0),
            "turns": inc.tally.turns if inc else (meta.turns if meta else 0),
            "in_turn": bool(inc and inc.tally.in_turn),
            "cost_usd": inc.tally.cost_usd if inc else (meta.cost_usd if meta else 0.0),
            "paused_until": paused.resume_at_iso if paused else None,
            "restart_pending": meta.restart_pending if meta else False,
        }
    return out
