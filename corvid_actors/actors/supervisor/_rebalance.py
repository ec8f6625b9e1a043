"""Handing idle sessions over to less-loaded daemons (issue 36 item 7): ``Rebalance``.

A session moves between daemons as a drain moves it: its lease is released (here:
offered to one daemon, ``ClusterSeat.offer``) and that daemon's next sweep claims it and
resumes it (``_takeover``). Only a session waiting for its user moves: its incarnation is
built, no turn is in flight, nothing is held for it, it is neither paused nor due for a
restart. The new owner then resumes it ready, calling no model; its inactivity and idle
deadlines travel in the lease. The rows are marked for resume and the lease released
before the incarnation stops, so its writes stay fenced until then. How many move, and to
whom, is :func:`~corvid_actors.db.balance.rebalance_moves`. Runs on the supervisor's thread.

A user message delivered (and stored) just as the session is chosen, before its actor
started the turn, is not lost nor answered twice: the new owner's resume sees the stored
message last and answers it (``_resume``), as after a drain.
"""

from __future__ import annotations

from typing import Any

from loguru import logger

from corvid_actors.actors.supervisor._core import SupervisorCore
from corvid_actors.db.balance import rebalance_moves
from corvid_actors.errors import StoreError

#: the ``session_stopped`` reason of a session handed over by a rebalance
REBALANCE_REASON = "rebalance"


def movable(core: SupervisorCore) -> list[str]:
    """This daemon's sessions that may move now: waiting for their user (see the module
    docstring), oldest incarnation first."""
    seat = core.cluster
    assert seat is not None
    out = []
    for sid, inc in sorted(core.running.items(), key=lambda item: (item[1].started_at, item[0])):
        meta = core.meta.get(sid)
        if (inc.building or inc.held or inc.tally.in_turn or sid in core.paused
                or (meta is not None and meta.restart_pending) or not seat.owns(sid)):
            continue
        out.append(sid)
    # passivated sessions (issue 37) wait for their user without an actor: movable too
    out += [sid for sid in sorted(core.passivated) if sid not in core.running and seat.owns(sid)]
    return out


def rebalance(core: SupervisorCore, cause: str) -> dict[str, Any]:
    """Offer the idle sessions beyond the bound to the least-loaded daemons, and stop their
    incarnations here (``session_stopped`` with reason ``rebalance``). Returns what it did:
    ``{"daemon_id", "load", "moved": {target: [ids]}, "kept_busy"}`` (``kept_busy``: how
    many sessions were above the bound but could not move, mid-turn or starting)."""
    seat = core.cluster
    if seat is None or core.shutting_down:
        return {"daemon_id": None if seat is None else seat.daemon_id, "load": {}, "moved": {}, "kept_busy": 0}
    cfg = seat.config
    try:
        load = seat.cluster.load(core.clock.now(), cfg.dead_daemon_grace_s)
    except StoreError as exc:
        logger.warning("rebalance ({}): could not read the daemons' load ({})", cause, exc)
        return {"daemon_id": seat.daemon_id, "load": {}, "moved": {}, "kept_busy": 0, "error": str(exc)}
    candidates = movable(core)
    plan = rebalance_moves(load, seat.daemon_id, cfg.rebalance_tolerance, len(candidates))
    wanted = rebalance_moves(load, seat.daemon_id, cfg.rebalance_tolerance, load.get(seat.daemon_id, 0))
    moved: dict[str, list[str]] = {}
    for target, count in sorted(plan.items()):
        chosen, candidates = candidates[:count], candidates[count:]
        try:
            core.store.mark_for_resume(chosen, stopped=True)  # the new owner resumes them
            seat.offer(chosen, target)
        except StoreError as exc:  # nothing moved (the marks are cleared when they run again)
            logger.warning("rebalance: could not hand {} session(s) over to daemon {} ({})", len(chosen), target, exc)
            break
        for sid in chosen:
            core.stop_session(sid, REBALANCE_REASON, write=False)  # its lease is released: finish is a no-op
        moved[target] = chosen
    count = sum(len(sids) for sids in moved.values())
    if count:
        logger.info("rebalance ({}): handed {} session(s) over: {}", cause, count,
                    ", ".join(f"{len(sids)} to {target}" for target, sids in sorted(moved.items())))
    return {"daemon_id": seat.daemon_id, "load": load, "moved": moved,
            "kept_busy": sum(wanted.values()) - sum(plan.values())}
