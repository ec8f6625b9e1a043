"""Outage pause and health-probed auto-resume (seed invariant 9).

An incarnation that reports an upstream outage is paused (not restarted) and its
session's subscribers are removed, as the original's pause does: due for a resume after 5 min × 3^resumes (capped). When due, the provider's health probe runs on
a tracked worker; healthy resumes the session, unhealthy keeps it due one check interval
later; after ``auto_resume_max_attempts`` resumes it is given up. The decisions are
:mod:`corvid_actors.policy.supervision`'s; these functions run on the supervisor's thread.
"""

from __future__ import annotations

from loguru import logger

from corvid_actors.actors.base import tell
from corvid_actors.actors.events import RemoveSession
from corvid_actors.actors.supervisor._core import SupervisorCore
from corvid_actors.actors.supervisor._resume import resume
from corvid_actors.actors.supervisor._state import Paused, _ProbeResult, _ResumeDue
from corvid_actors.actors.timers import CancelTimer, ScheduleTimer
from corvid_actors.clock import iso_after
from corvid_actors.events import ErrorEvent, SessionPaused, SessionResumed
from corvid_actors.policy.supervision import auto_resume_delay, auto_resume_exhausted


def pause_for_outage(core: SupervisorCore, sid: str, reason: str) -> None:
    """Pause (not a restart): due for a resume after 5 min × 3^resumes (capped). The
    give-up after ``auto_resume_max_attempts`` resumes happens at the due check."""
    core.kill(sid)
    meta = core.meta_of(sid)
    delay_s = auto_resume_delay(core.sup, meta.outage_attempts)
    core.set_status(sid, "paused")
    core.seq += 1
    resume_iso = iso_after(core.clock, delay_s)
    core.paused[sid] = Paused(core.seq, resume_iso)
    if core.cluster is not None:  # durable before announced: a daemon taking the session over resumes it then
        core.cluster.set_due(sid, resume_in_s=delay_s)
    core.tracing.decision("pause", sid, {"corvid.outage.attempt": meta.outage_attempts + 1,
                                         "corvid.outage.resume_in_s": delay_s})
    logger.bind(session_id=sid, event="api_outage").warning("session paused by an API outage: {}", reason)
    core.publish(sid, ErrorEvent(error_type="api_outage",
                                 message=f"Session paused due to API outage — auto-resume in {delay_s / 60:g}min"))
    core.publish(sid, SessionPaused(resume_at=resume_iso, attempt=meta.outage_attempts + 1))
    # As the original's pause: the session's subscribers go (after the two events above:
    # the bus handles its messages in order); global subscribers stay, and whoever wants
    # the resumed session's events subscribes again (session_resumed reaches the globals).
    tell(core.bus, RemoveSession(sid))
    tell(core.timers, ScheduleTimer((sid, "resume"), delay_s, core.ref, _ResumeDue(sid, core.seq)))
    core.ensure_housekeeping()


def resume_due(core: SupervisorCore, sid: str, seq: int) -> None:
    """Pause ``seq`` is due: give up, or run the health probe on a tracked worker (its
    result comes back as :class:`_ProbeResult`)."""
    paused = core.paused.get(sid)
    if paused is None or paused.seq != seq or core.shutting_down:
        return
    if core.store.get_session(sid) is None:
        core.cleanup(sid)  # deleted while paused: nothing left to resume
        return
    meta = core.meta_of(sid)
    if auto_resume_exhausted(core.sup, meta.outage_attempts):
        _exhausted(core, sid, meta.outage_attempts)
        return
    probe = core.builder.health_probe(sid)
    ref = core.ref

    def run() -> None:
        try:
            healthy = bool(probe())
        except Exception:  # noqa: BLE001 - a probe that raises means "not healthy"
            healthy = False
        tell(ref, _ProbeResult(sid, seq, healthy))

    core.tracker.run_tracked(run, f"probe-{sid[:8]}", never_parks=True)


def probe_result(core: SupervisorCore, sid: str, seq: int, healthy: bool) -> None:
    """Healthy: resume (one more attempt counted). Not: due again one check interval later."""
    paused = core.paused.get(sid)
    if paused is None or paused.seq != seq:
        return
    core.tracing.decision("probe", sid, {"corvid.probe.healthy": healthy})
    if core.journal is not None:  # a replay answers its probes so: the outage lasts as long
        core.journal.probe(sid, healthy)
    if healthy:
        meta = core.meta_of(sid)
        meta.outage_attempts += 1  # attempts count resumes, not probes
        core.tracing.decision("resume", sid, {"corvid.resume.automatic": True,
                                              "corvid.outage.attempt": meta.outage_attempts})
        del core.paused[sid]
        core.publish(sid, SessionResumed(automatic=True))
        resume(core, sid, None)
        return
    # Still down: the session stays due and is probed again one check interval later.
    delay_s = core.sup.auto_resume_check_interval_s
    core.seq += 1
    paused.seq = core.seq
    paused.resume_at_iso = iso_after(core.clock, delay_s)
    tell(core.timers, ScheduleTimer((sid, "resume"), delay_s, core.ref, _ResumeDue(sid, core.seq)))
    if core.cluster is not None:
        core.cluster.set_due(sid, resume_in_s=delay_s)


def _exhausted(core: SupervisorCore, sid: str, attempts: int) -> None:
    core.paused.pop(sid, None)
    core.tracing.decision("resume_exhausted", sid, {"corvid.outage.attempt": attempts})
    core.set_status(sid, "error")
    core.publish(sid, ErrorEvent(error_type="auto_resume_exhausted",
                                 message=f"Auto-resume abandoned after {attempts} attempts"))
    core.cleanup(sid)


def manual_resume(core: SupervisorCore, sid: str) -> bool:
    """The operator resumes a paused session: counters start over (see ``ResumeSession``)."""
    if sid not in core.paused:
        return False
    if core.store.get_session(sid) is None:
        core.cleanup(sid)  # the row was deleted while paused: drop the paused record
        return False
    del core.paused[sid]
    tell(core.timers, CancelTimer((sid, "resume")))
    meta = core.meta_of(sid)
    meta.restart_count = 0
    meta.outage_attempts = 0
    core.tracing.decision("resume", sid, {"corvid.resume.automatic": False})
    core.publish(sid, SessionResumed(automatic=False))
    resume(core, sid, None)
    return True
