"""Passivated sessions (issue 37, item 4): an idle session without an actor or a thread.

An incarnation that waited ``[session] passivate_after_s`` for its user with nothing in
flight (no turn, worker, slot, approval or loop timer) offers itself
(:class:`~corvid_actors.actors.session_messages.WantsPassivation`). The supervisor takes
the offer only if nothing was delivered to it since it checked (its live entry's count
matches, read under the entry's lock, which also stops further deliveries): then the
incarnation is ended silently (``SupervisorCore.kill``: no event), the session is noted
here as a :class:`Passivated` record and in the live registry (so a send still reaches
the supervisor). Its state is the store's: the row stays ``running`` with its pid, its
turn count and cost stay in its ``Meta``; the cluster lease stays this daemon's.

What the record keeps of the incarnation's timers: its inactivity deadline (a stop with
reason ``timeout`` when it passes, as the actor's own timer did) and the idle exit of a
loop that has one (``session_exited`` code 0, as the actor's ``IdleDue`` did) — one timer
per passivated session, on the Timers table. ``extend_timeout`` moves the deadline.

The next user message reactivates it (``_resume.reactivate``): a new incarnation is started
ready (``begin=False``) and quiet — no ``session_started``, ``provider_selected`` or
``thinking`` event, no model call of its own; the message goes to it with the stored
history as a resumed incarnation's first message does. A stop, a shutdown, a crash-free
restart or another daemon's takeover treat a passivated session as a running one.
All functions run on the supervisor's thread.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from loguru import logger

from corvid_actors.actors.base import tell
from corvid_actors.actors.session_messages import WantsPassivation
from corvid_actors.actors.supervisor._core import SupervisorCore
from corvid_actors.actors.supervisor._state import Passivated, _PassivatedDue
from corvid_actors.actors.timers import ScheduleTimer
from corvid_actors.events import SessionError, SessionExited
from corvid_actors.policy.supervision import completed_note, extended_timeout


def offered(core: SupervisorCore, offer: WantsPassivation) -> bool:
    """Passivate the offering incarnation if it is still the session's and nothing reached
    it since its check; True if it was passivated."""
    sid = offer.session_id
    inc = core.running.get(sid)
    if (inc is None or inc.generation != offer.generation or inc.building or inc.held
            or core.shutting_down or sid in core.paused):
        return False
    if not core.live.passivate(sid, inc.generation, offer.received):
        return False  # a message is on its way to it: it stays (and offers again after that turn)
    core.seq += 1
    now, mono = core.clock.now(), core.clock.monotonic()
    rec = Passivated(seq=core.seq, pid=inc.pid, provider_name=inc.provider_name, started_at=inc.started_at,
                     timeout_s=inc.timeout_s, deadline_at=mono + _seconds_until(offer.deadline, now),
                     idle_at=None if offer.idle_due is None else mono + _seconds_until(offer.idle_due, now))
    # it holds no slot and no pending approval (it checked): nothing is released, so that
    # its session grants (``allow_session``) outlive the actor, as the session does
    inc.tally.asked_slots_or_approvals = False
    core.kill(sid)  # silent: the lifeline closes, the actor stops, its resources are closed
    core.passivated[sid] = rec
    schedule(core, sid, rec)
    logger.bind(session_id=sid).debug("session passivated (generation {})", offer.generation)
    core.ensure_housekeeping()
    return True


def _seconds_until(moment: datetime, now: datetime) -> float:
    return max((moment - now).total_seconds(), 0.0)


def schedule(core: SupervisorCore, sid: str, rec: Passivated) -> None:
    """One timer for the passivated session: its idle exit or inactivity deadline, the earlier."""
    due = rec.deadline_at if rec.idle_at is None else min(rec.deadline_at, rec.idle_at)
    tell(core.timers, ScheduleTimer((sid, "passivated"), max(due - core.clock.monotonic(), 0.0), core.ref,
                                    _PassivatedDue(sid, rec.seq)))


def due(core: SupervisorCore, sid: str, seq: int) -> None:
    """The passivated session's idle exit or inactivity deadline has come: it ends as its
    incarnation would have (an idle exit first when both are due)."""
    rec = core.passivated.get(sid)
    if rec is None or rec.seq != seq:
        return
    now = core.clock.monotonic()
    if rec.idle_at is not None and rec.idle_at <= rec.deadline_at and now >= rec.idle_at:
        _idle_exit(core, sid, rec, now)
    elif now >= rec.deadline_at:
        core.stop_session(sid, "timeout", notice=SessionError(
            error_type="timeout", severity="warning", recoverable=True,
            message=f"Session stopped after {rec.timeout_s:g}s without activity. Send a message to resume."))
    else:
        schedule(core, sid, rec)  # an extension moved the deadline


def _idle_exit(core: SupervisorCore, sid: str, rec: Passivated, now: float) -> None:
    """As ``_exits.handle_exit`` with code 0 for an incarnation that is no longer there."""
    meta = core.meta_of(sid)
    duration_s = now - rec.started_at
    core.set_status(sid, "idle")
    note = completed_note(duration_s, meta.turns)
    core.write(sid, "the exit note", lambda: core.store.append_message(sid, "system", note))
    core.publish(sid, SessionExited(code=0, num_turns=meta.turns, duration_ms=int(duration_s * 1000)))
    core.cleanup(sid)


def extend(core: SupervisorCore, sid: str, additional_s: float) -> bool:
    """``extend_timeout`` of a passivated session: its deadline moves as a running one's
    would (now + the extension, capped); False if it is not passivated."""
    rec = core.passivated.get(sid)
    if rec is None:
        return False
    rec.timeout_s = extended_timeout(core.sup, additional_s)
    rec.deadline_at = core.clock.monotonic() + rec.timeout_s
    if core.cluster is not None:  # as the actor's Deadlines.note: stored by the next heartbeat
        now, mono = core.clock.now(), core.clock.monotonic()
        idle = None if rec.idle_at is None else now + timedelta(seconds=max(rec.idle_at - mono, 0.0))
        core.cluster.note_deadline(sid, now + timedelta(seconds=rec.timeout_s), idle)
    schedule(core, sid, rec)
    return True
