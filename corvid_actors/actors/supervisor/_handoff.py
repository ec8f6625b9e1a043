"""No message refused while a session moves (issue 36 item 2): the supervisor's side.

Several daemons: a user message sent through any daemon is committed before it is
acknowledged. When this daemon runs the session (owns it, does not drain) it is delivered
at once, as with one daemon (:func:`send_or_hold`). Otherwise it goes to the hand-off
buffer (``db/held.py``) and the session's owner delivers it: this daemon when nobody
owns the session (it claims and starts it here — a sweep's adoption, due times included),
else the owner when it hears of it (``DeliverHeld``: asked by the daemon that held the
message, and told by each heartbeat's backstop), or whoever takes the session over next:
every incarnation that comes up here takes what is held for it once it is built
(:func:`after_built`). The take moves the messages into the conversation under the
lease's epoch, in one transaction (``HeldMessages.take``), so each is delivered exactly
once; each is then sent to the incarnation as its own message (the agent's double-texting
policy applies as to any message).

A draining daemon takes nothing and holds every message sent to its sessions; it hands
the sessions waiting for their user over first (:func:`hand_over_idle`, asked again and
again by the drain, so a session mid-turn goes once its turn has ended). All on the
supervisor's thread, so no hand-over runs between a check and a delivery.
"""

from __future__ import annotations

from typing import Any

from loguru import logger

from corvid_actors.actors.supervisor._core import SupervisorCore
from corvid_actors.actors.supervisor._rebalance import movable
from corvid_actors.actors.supervisor._resume import resume, send
from corvid_actors.actors.supervisor._takeover import adopt
from corvid_actors.content import UserContent
from corvid_actors.errors import StoreError


def _runs_here(core: SupervisorCore, sid: str) -> bool:
    seat = core.cluster
    inc = core.running.get(sid)
    return (seat is not None and not seat.draining and not core.shutting_down and inc is not None
            and not inc.building and sid not in core.paused and seat.owns(sid))


def send_or_hold(core: SupervisorCore, sid: str, text: UserContent) -> dict[str, Any]:
    """See :class:`~corvid_actors.actors.cluster.SendOrHold`."""
    seat = core.cluster
    assert seat is not None
    core.store.require_session(sid)  # NotFoundError goes to the asker: nothing is held
    if _runs_here(core, sid):
        # delivered here as with one daemon (the send stores it before its reply)
        return {"held": False, "owner": seat.daemon_id, "pid": resume(core, sid, text), "taken": 0}
    seat.hold(sid, text)  # committed: acknowledged from here on
    return {"held": True, **deliver(core, sid, start=True)}


def deliver(core: SupervisorCore, sid: str, *, start: bool = False) -> dict[str, Any]:
    """See :class:`~corvid_actors.actors.cluster.DeliverHeld`."""
    seat = core.cluster
    assert seat is not None
    if seat.draining or core.shutting_down:
        return {"owner": None, "pid": None, "taken": 0}  # the next owner takes them
    if not seat.owns(sid):
        try:
            claimed = start and seat.claim(sid) is not None
            lease = None if claimed else seat.cluster.owner_of(sid)
        except StoreError as exc:  # held still: the owner's backstop or the next adoption takes it
            logger.bind(session_id=sid).warning("could not learn who owns the session ({})", exc)
            return {"owner": None, "pid": None, "taken": 0}
        if not claimed:
            return {"owner": lease.owner_id if lease is not None else None, "pid": None, "taken": 0}
        # nobody owned it: it comes up here as a sweep's adoption brings it (its due
        # times honoured), and what is held for it is taken once it is built
        adopt(core, (sid,))
    inc = core.running.get(sid)
    if inc is None or inc.building or sid in core.paused:
        # taken when an incarnation here is built (a paused one: when it runs again)
        return {"owner": seat.daemon_id, "pid": inc.ticket if inc is not None else None, "taken": 0}
    return {"owner": seat.daemon_id, "pid": inc.pid, "taken": deliver_held(core, sid)}


def after_built(core: SupervisorCore, sid: str) -> None:
    """An incarnation of ``sid`` is built here: it takes what was held for it."""
    if core.cluster is not None and sid in core.running and not core.running[sid].building:
        deliver_held(core, sid)


def deliver_held(core: SupervisorCore, sid: str) -> int:
    """Take the messages held for ``sid`` (this daemon's, running and built) and send each
    to its incarnation; how many were taken. One its incarnation refuses (it is ending) is
    in the conversation already: a resume answers it (the last user message of a session
    is answered when it comes up)."""
    seat = core.cluster
    assert seat is not None
    try:
        taken = seat.take_held(sid)
    except StoreError as exc:  # still held: the next heartbeat's backstop tries again
        logger.bind(session_id=sid).warning("could not take the messages held for the session ({})", exc)
        return 0
    for message in taken:
        if not send(core, sid, message.content, stored=True):
            logger.bind(session_id=sid).info("a held message's incarnation ended: resuming the session for it")
            resume(core, sid, None)
            break
    return len(taken)


def hand_over_idle(core: SupervisorCore, reason: str) -> list[str]:
    """See :class:`~corvid_actors.actors.cluster.HandOverIdle`."""
    seat = core.cluster
    if seat is None:
        return []
    chosen = movable(core)
    if not chosen:
        return []
    try:
        core.store.mark_for_resume(chosen, stopped=True)  # the next owner resumes them
        seat.hand_over(chosen, reason)
    except StoreError as exc:  # nothing moved: the drain asks again, or its shutdown hands them over
        logger.warning("drain: could not hand {} session(s) over ({})", len(chosen), exc)
        return []
    for sid in chosen:
        core.stop_session(sid, reason, write=False)  # its lease is released: finish is a no-op
    return chosen
