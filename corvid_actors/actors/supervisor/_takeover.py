"""Sessions taken over from a daemon that stopped renewing its leases (issue 20).

The ClusterMember claimed them (their epochs are fenced in the store already); each is
brought back as the start-up after a crash brings a session back, with the due times the
old owner stored in the lease honoured at the same instant it would have honoured them:

- an outage pause with an auto-resume due: paused here, due then (the health probe runs
  at that time as it would have there);
- a crash-restart due: restarted then (``restart_pending`` until it is);
- otherwise resumed now: a turn only for a session that was mid-turn (the resume's own
  rule), a ready incarnation for one that was waiting for its user — which keeps the
  inactivity deadline the old owner stored (its heartbeat flushes it: ``ClusterSeat``),
  so it times out at the same instant (at once if that instant has passed), and the idle
  exit's deadline (issue 36: a direct-loop session ends idle when it would have there,
  not a full ``session_idle_timeout_s`` after the takeover). A mid-turn session re-runs
  its turn, whose events re-arm both anyway.

What lived only in the old daemon's memory starts over: the restart and outage counters.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from loguru import logger

from corvid_actors.actors.base import tell
from corvid_actors.actors.cluster import AdoptSessions
from corvid_actors.actors.supervisor._core import SupervisorCore
from corvid_actors.actors.supervisor._resume import resume
from corvid_actors.actors.supervisor._state import Paused, _RestartDue, _ResumeDue
from corvid_actors.actors.timers import ScheduleTimer
from corvid_actors.clock import iso_utc
from corvid_actors.errors import CorvidError, StoreError

#: sessions brought back per supervisor message: the rest is told again, so the first ones'
#: ``Built`` (and everything else the supervisor hears) is not queued behind a thousand
ADOPT_CHUNK = 16


def adopt(core: SupervisorCore, sids: tuple[str, ...]) -> None:
    """Bring back each session this daemon has just claimed (see the module docstring)."""
    assert core.cluster is not None
    if len(sids) > ADOPT_CHUNK:
        tell(core.ref, AdoptSessions(sids[ADOPT_CHUNK:]))
        sids = sids[:ADOPT_CHUNK]
    for sid in sids:
        if sid in core.running or sid in core.paused or sid in core.passivated or core.shutting_down:
            continue
        try:
            lease = core.cluster.cluster.owner_of(sid)
            core.tracing.decision("takeover", sid, {"corvid.takeover.then": takeover_action(lease)})
            if lease is not None and lease.resume_due_at is not None:
                _pause_until(core, sid, lease.resume_due_at)
            elif lease is not None and lease.restart_due_at is not None:
                _restart_at(core, sid, lease.restart_due_at)
            else:
                resume(core, sid, None, idle_deadline=lease.inactivity_due_at if lease is not None else None,
                       idle_exit_deadline=lease.idle_due_at if lease is not None else None)
        except StoreError as exc:  # perhaps passing: hand it over, a sweep (maybe ours) tries again
            logger.bind(session_id=sid).warning("could not resume a session claimed from another daemon ({}); "
                                                "handing its lease over", exc)
            core.cluster.release(sid)
        except CorvidError as exc:  # it cannot run (a deleted row): its lease ends, as a stopped session's
            logger.bind(session_id=sid).warning("could not resume a session claimed from another daemon: {}", exc)
            core.cluster.finish(sid)


def takeover_action(lease: Any) -> str:
    """What a session taken over does next: ``pause`` (an outage pause), ``restart`` (a
    crash backoff) or ``resume``."""
    if lease is not None and lease.resume_due_at is not None:
        return "pause"
    if lease is not None and lease.restart_due_at is not None:
        return "restart"
    return "resume"


def _delay_until(core: SupervisorCore, due: datetime) -> float:
    return max(0.0, (due - core.clock.now()).total_seconds())


def _pause_until(core: SupervisorCore, sid: str, due: datetime) -> None:
    core.seq += 1
    core.paused[sid] = Paused(core.seq, iso_utc(due))
    if core.cluster is not None:
        core.cluster.note_due(sid)  # the lease's due time is cleared once it runs here
    tell(core.timers, ScheduleTimer((sid, "resume"), _delay_until(core, due), core.ref, _ResumeDue(sid, core.seq)))
    core.ensure_housekeeping()


def _restart_at(core: SupervisorCore, sid: str, due: datetime) -> None:
    meta = core.meta_of(sid)
    meta.restart_pending = True
    if core.cluster is not None:
        core.cluster.note_due(sid)  # the lease's due time is cleared once it runs here
    tell(core.timers, ScheduleTimer((sid, "restart"), _delay_until(core, due), core.ref,
                                    _RestartDue(sid, meta.restart_count + 1)))
    core.ensure_housekeeping()
