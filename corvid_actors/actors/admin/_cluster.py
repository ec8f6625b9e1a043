"""Operator commands for sessions other daemons own (issue 20: several daemons on one
PostgreSQL). The AdminActor of any daemon can act on any session: a command for a session
whose lease another live daemon holds is forwarded to it through the database
(:class:`~corvid_actors.db.pg_bus.PgBus`: a ``cluster_commands`` row and a NOTIFY; the
owner runs it as its own operator's and the result comes back the same way), a new
session is started on the least-loaded live daemon, and an approval this daemon does not
know is asked of the others. Forwarded, not answered with the owner's address: the
operator's client needs no route to the other hosts and no second credential.

The reply of a forwarded command is ``{"ok": true, "result": …}`` or ``{"ok": false,
"code": …, "message": …}``: the owner's AdminError reaches the operator with its code.

``admin session ID`` of a session another daemon owns is asked of its owner too: only the
owner knows its live facts (running, in turn, uptime, pending approvals, recent events).
A read must not hang the operator, so it waits ``[cluster.bus] owner_query_timeout_s``;
then this daemon answers from the database, saying so (:func:`database_view`).

Waiting for another daemon never holds the AdminActor: where a command goes is decided on
its thread (a lease read), and a forwarded command is awaited on a thread of its own, the
actor replying with a future the admin socket's connection thread waits on. Other
operators' commands are served meanwhile, however long the owner takes to answer.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pykka

from corvid_actors.actors.admin._commands import ask_actor
from corvid_actors.actors.cluster import ClusterSeat, DeliverHeld, SendOrHold
from corvid_actors.actors.supervisor import started_pid
from corvid_actors.db.pg_bus import PgBus
from corvid_actors.errors import (
    BAD_REQUEST,
    INTERNAL,
    NOT_FOUND,
    UNAVAILABLE,
    AdminError,
    CommandFailed,
    CommandTimeout,
    CorvidError,
)

#: commands about one session (``args["session"]``): run by the daemon that owns it. Not
#: ``send``: a message is committed by the daemon that accepts it, whoever owns the session
#: (:func:`send_anywhere`), so no send is refused or lost while its session moves
SESSION_COMMANDS = frozenset({"stop", "resume", "extend"})
#: commands about one approval (``args["approval"]``): run by the daemon that holds it
APPROVAL_COMMANDS = frozenset({"approve", "deny"})
#: reads about one session: its owner answers with its live facts, or the database does
QUERY_COMMANDS = frozenset({"session"})
#: the owner's AdminError codes after which a read is answered from the database instead
_FALL_BACK_CODES = frozenset({UNAVAILABLE, INTERNAL})


@dataclass(frozen=True)
class RemoteEvents:
    """Events other daemons published (``{"s": session id, "t": at ISO, "e": event dict}``,
    in order): the AdminActor hands them to its followers. Told by the daemon's cluster
    link (its listener thread); handled on the AdminActor's thread."""

    events: tuple[Mapping[str, Any], ...]


class ClusterRouter:
    """Where an operator command runs, and forwarding it there (the AdminActor's thread)."""

    def __init__(self, seat: ClusterSeat, bus: PgBus, timeout_s: float, query_timeout_s: float) -> None:
        self.seat = seat
        self.bus = bus
        self.timeout_s = timeout_s
        #: how long a read (QUERY_COMMANDS) waits for the owner before the database answers
        self.query_timeout_s = query_timeout_s

    @property
    def daemon_id(self) -> str:
        return self.seat.daemon_id

    def owner_elsewhere(self, sid: str) -> str | None:
        """The live daemon other than this one whose lease holds ``sid``, or None (this
        daemon owns it, nobody does, or its owner's lease expired: whoever starts it
        next claims it)."""
        lease = self.seat.cluster.owner_of(sid)
        if lease is None or lease.owner_id is None or lease.owner_id == self.daemon_id:
            return None
        if lease.lease_expires_at is None or lease.lease_expires_at <= self.seat.clock.now():
            return None
        return lease.owner_id

    def owners(self, sids: list[str]) -> dict[str, str | None]:
        """The daemon holding each session's lease (sessions without a lease row are left out)."""
        return {lease.session_id: lease.owner_id for lease in self.seat.cluster.leases(sids)}

    def place(self) -> str | None:
        """The live daemon a new session starts on: the least loaded (ties: the smallest
        id), within ``max_sessions``; None when no daemon has room."""
        cfg = self.seat.config
        return self.seat.cluster.place_new_session(self.seat.clock.now(), cfg.dead_daemon_grace_s, cfg.max_sessions)

    def others(self) -> list[str]:
        """The other live daemons, by id."""
        live = self.seat.cluster.live_daemons(self.seat.clock.now(), self.seat.config.dead_daemon_grace_s)
        return [d for d in live if d != self.daemon_id]

    def health(self) -> dict[str, Any]:
        """This daemon's standing in the cluster, for ``admin health``: its id, the live
        daemons and the version each runs (two during a rolling upgrade), how many sessions
        it owns, whether its leases are surely its own, the bus's state and its purge's
        counters (``bus_purge``: None when the purge is off); ``problems``
        (empty when all is well) make health ``degraded``."""
        seat, problems = self.seat, []
        try:
            versions = self.seat.cluster.live_daemon_versions(seat.clock.now(), seat.config.dead_daemon_grace_s)
        except CorvidError as exc:
            versions, problems = {}, [f"cluster: the daemons table cannot be read ({exc})"]
        if not seat.lease_valid():
            problems.append(f"cluster: no heartbeat for {seat.config.lease_s:g}s — this daemon's leases may "
                            "have been taken over (it publishes nothing until a heartbeat succeeds)")
        if self.bus.status != "ok":
            problems.append(f"cluster: the bus to the other daemons is {self.bus.status}"
                            + (f" ({self.bus.unavailable_reason})" if self.bus.unavailable_reason else ""))
        return {"daemon_id": seat.daemon_id, "live_daemons": sorted(versions), "daemon_versions": versions,
                "owned_sessions": len(seat.believed()), "leases_valid": seat.lease_valid(), "bus": self.bus.status,
                "missed_event_notifications": self.bus.missed_notifications,
                "bus_purge": None if self.bus.purger is None else self.bus.purger.stats(), "problems": problems}

    def forward(self, daemon_id: str, name: str, args: Mapping[str, Any], timeout_s: float | None = None) -> Any:
        """Run command ``name`` on daemon ``daemon_id`` and return its result (or raise its
        AdminError); UNAVAILABLE when it does not answer within ``timeout_s`` (default: the
        admin timeout)."""
        wait_s = self.timeout_s if timeout_s is None else timeout_s
        try:
            command_id = self.bus.forward(daemon_id, {"cmd": name, "args": dict(args)})
            reply = self.bus.await_result(command_id, wait_s)
        except CommandTimeout as exc:
            raise AdminError(UNAVAILABLE, f"daemon {daemon_id} did not answer {name!r} within "
                                          f"{wait_s:g}s ({exc})") from None
        except CommandFailed as exc:
            raise AdminError(INTERNAL, f"daemon {daemon_id} failed {name!r}: {exc}") from None
        except CorvidError as exc:  # the database is unreachable: the command was not sent
            raise AdminError(UNAVAILABLE, f"could not reach daemon {daemon_id}: {exc}") from None
        if not isinstance(reply, Mapping) or "ok" not in reply:
            raise AdminError(INTERNAL, f"daemon {daemon_id} answered {name!r} with {reply!r}")
        if reply["ok"]:
            return reply.get("result")
        raise AdminError(str(reply.get("code") or INTERNAL), str(reply.get("message") or "failed"))


def owner_view(answer: Mapping[str, Any], owner: str) -> dict[str, Any]:
    """A session read as its owner ``owner`` answered it (its live facts)."""
    return {**answer, "owner": owner, "answered_by": owner}


def database_view(local: Mapping[str, Any], owner: str, why: str) -> dict[str, Any]:
    """A session read answered from the database because its owner did not answer (``why``):
    the stored facts are current, the live ones (running, in turn, approvals) unknown."""
    return {**local, "owner": owner, "answered_by": "database", "here": False, "in_turn": None,
            "owner_unreachable": (f"the owner, daemon {owner}, did not answer ({why}); shown: what the "
                                  "database holds (status, turns, cost, messages) and the events this daemon "
                                  "heard; whether it runs, is in a turn or waits for approvals is unknown")}


def off_actor(work: Callable[[], Any], name: str) -> pykka.Future[Any]:
    """Run ``work`` (a wait for another daemon) on a thread of its own; its result, or its
    error, in the future returned at once. The thread ends when ``work`` does (each wait
    is bounded by a timeout)."""
    future: pykka.Future[Any] = pykka.ThreadingFuture()

    def run() -> None:
        try:
            future.set(work())
        except BaseException:  # noqa: BLE001 - handed to whoever waits on the future
            future.set_exception(sys.exc_info())

    threading.Thread(target=run, name=f"corvid-admin-{name}", daemon=True).start()
    return future


def _read_session(router: ClusterRouter, name: str, args: Mapping[str, Any], run_here: Any,
                  local_view: Callable[[], Any], sid: str) -> Any:
    owner = router.owner_elsewhere(sid)
    if owner is None:
        local = dict(run_here(args))
        return {**local, "owner": router.owners([sid]).get(sid), "answered_by": router.daemon_id}

    def ask_owner() -> Any:
        try:
            answer = router.forward(owner, name, {**args, "session": sid}, timeout_s=router.query_timeout_s)
        except AdminError as exc:
            if exc.code not in _FALL_BACK_CODES:
                raise
            return database_view(local_view(), owner, exc.message)
        if not isinstance(answer, Mapping):
            raise AdminError(INTERNAL, f"daemon {owner} answered {name!r} with {answer!r}")
        return owner_view(answer, owner)

    return off_actor(ask_owner, name)


def _ask_others(router: ClusterRouter, name: str, args: Mapping[str, Any], unknown_here: AdminError) -> Any:
    for daemon_id in router.others():  # the approval may be another daemon's
        try:
            return router.forward(daemon_id, name, args)
        except AdminError as elsewhere:
            if elsewhere.code != NOT_FOUND:
                raise
    raise unknown_here


def _rebalance_all(router: ClusterRouter, args: Mapping[str, Any], here: Callable[[], Any]) -> dict[str, Any]:
    """``admin rebalance``: each live daemon (or only ``args["daemon"]``) hands its idle
    sessions beyond the bound over, one daemon after the other — this one first — each
    reading the load the ones before it left (a hand-over not yet taken counts for its
    target). A daemon that does not answer is reported, and the others go on."""
    wanted = args.get("daemon")
    daemons = [router.daemon_id, *router.others()]
    if wanted:
        if wanted not in daemons:
            raise AdminError(NOT_FOUND, f"no live daemon {wanted!r} (live: {', '.join(sorted(daemons))})")
        daemons = [wanted]
    results: list[dict[str, Any]] = []
    for daemon_id in daemons:
        try:
            answer = here() if daemon_id == router.daemon_id else router.forward(daemon_id, "rebalance", {})
        except AdminError as exc:
            answer = {"daemon_id": daemon_id, "moved": {}, "error": exc.message}
        results.append(dict(answer))
    moved = sum(len(sids) for result in results for sids in (result.get("moved") or {}).values())
    return {"daemons": results, "moved": moved}


def send_anywhere(router: ClusterRouter, supervisor: pykka.ActorRef[Any], sid: str, text: Any) -> Any:
    """``admin send`` with several daemons (issue 36 item 2): never refused because the
    session moves. The supervisor here delivers the message (this daemon runs the session)
    or commits it to the hand-off buffer (``db/held.py``) — either way it is stored before
    this reply — and when another daemon owns the session, that daemon is asked (off the
    AdminActor, ``[cluster.bus] owner_query_timeout_s``) to take it now; a draining daemon
    asks the daemon a new session would be placed on to start it. An owner that does not
    answer (dead, paused, draining) costs latency, not an error: the message is held, and
    its owner's next heartbeat, or whoever adopts the session next, delivers it, once.
    The reply: ``{"session", "delivered", "held", "pid", "owner"}``."""
    out = ask_actor(supervisor, SendOrHold(sid, text))
    pid = started_pid(out["pid"])
    owner, me = out["owner"], router.daemon_id
    reply = {"session": sid, "delivered": owner == me and pid is not None, "held": out["held"], "pid": pid,
             "owner": owner}
    if not out["held"] or owner == me:
        return reply
    target = owner or (router.place() if router.seat.draining else None)
    if target is None or target == me:
        return reply  # a released lease: the sweep that claims it delivers the message

    def notify() -> dict[str, Any]:
        try:
            answer = router.forward(target, "deliver_held", {"session": sid}, timeout_s=router.query_timeout_s)
        except AdminError as exc:
            return {**reply, "owner": target, "note": f"held for the session's next owner: {exc.message}"}
        if not isinstance(answer, Mapping):
            return reply
        return {**reply, "delivered": bool(answer.get("delivered")), "pid": answer.get("pid"),
                "owner": answer.get("owner") or target}

    return off_actor(notify, "send")


def deliver_here(router: ClusterRouter | None, supervisor: pykka.ActorRef[Any], sid: str) -> dict[str, Any]:
    """``deliver_held`` (a daemon's internal command, forwarded by :func:`send_anywhere`):
    take the messages held for ``sid`` and deliver them when this daemon owns it, claiming
    and starting it first when nobody does. ``{"delivered", "pid", "owner", "taken"}``."""
    if router is None:
        raise AdminError(BAD_REQUEST, "deliver_held is a command between the daemons of a cluster")
    out = ask_actor(supervisor, DeliverHeld(sid, start=True))
    if out is None:  # the supervisor could not (logged there): still held
        return {"delivered": False, "pid": None, "owner": None, "taken": 0}
    pid = started_pid(out["pid"])
    return {"delivered": out["owner"] == router.daemon_id and pid is not None, "pid": pid,
            "owner": out["owner"], "taken": out["taken"]}


def route(router: ClusterRouter, name: str, args: Mapping[str, Any], run_here: Any, session_of: Any,
          local_view: Callable[[], Any]) -> Any:
    """Run operator command ``name`` where it belongs: ``run_here(args)`` on this daemon,
    or forwarded (see the module docstring): then the reply is a future, awaited off the
    AdminActor. ``session_of(args)`` resolves the session argument (an id or a prefix) to
    an id; ``local_view()`` runs the command here from any thread (through the actor's
    mailbox), for a read whose owner did not answer."""
    if name in QUERY_COMMANDS:
        return _read_session(router, name, args, run_here, local_view, session_of(args))
    if name in SESSION_COMMANDS:
        sid = session_of(args)
        owner = router.owner_elsewhere(sid)
        if owner is not None:
            return off_actor(lambda: router.forward(owner, name, {**args, "session": sid}), name)
        return run_here(args)
    if name == "start":
        target = router.place()
        if target is not None and target != router.daemon_id:
            return off_actor(lambda: router.forward(target, name, args), name)
        return run_here(args)
    if name == "rebalance":
        return off_actor(lambda: _rebalance_all(router, args, local_view), name)
    if name in APPROVAL_COMMANDS:
        try:
            return run_here(args)
        except AdminError as exc:
            if exc.code != NOT_FOUND:
                raise
            unknown_here = exc
        return off_actor(lambda: _ask_others(router, name, args, unknown_here), name)
    return run_here(args)
