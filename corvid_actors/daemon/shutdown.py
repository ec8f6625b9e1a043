"""The daemon's way down, as plain functions over the parts they are handed:

- :func:`stop_gracefully` runs on the daemon's shutdown thread once a signal, ``admin
  shutdown`` or ``admin drain`` asked: the admin actor refuses new work, a drain hands the
  sessions over to the other daemons (:func:`hand_over`), then the runtime shuts down
  (sessions marked for resume) and the listeners close.
- :func:`close_quietly` runs on the way out of ``Daemon.run`` whatever happened: each part
  that started is closed, best effort.

Nothing here reaches into the runtime's internals: the daemon
(:mod:`corvid_actors.daemon.service`) hands over the cluster seat and the supervisor a
drain needs, in a :class:`Drain`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pykka
from loguru import logger

from corvid_actors.actors.admin import AdminActor, BeginShutdown, Ready
from corvid_actors.actors.base import tell
from corvid_actors.actors.cluster import ClusterSeat, HandOverIdle
from corvid_actors.daemon.cluster_link import ClusterLink
from corvid_actors.daemon.model_server import ModelServer
from corvid_actors.daemon.socket_server import AdminSocketServer
from corvid_actors.db.models import DaemonState
from corvid_actors.runtime import Runtime
from corvid_actors.telemetry.metrics import MetricsServer

#: how often a drain looks for turns still in flight (seconds)
DRAIN_POLL_S = 0.05


@dataclass(frozen=True)
class Drain:
    """What a drain (several daemons) works with: this daemon's cluster seat, which says it
    drains, and the supervisor, which hands its sessions over."""

    seat: ClusterSeat
    supervisor: pykka.ActorRef[Any]


def stop_gracefully(runtime: Runtime, admin: pykka.ActorRef[AdminActor], server: AdminSocketServer | None,
                    http: Any, *, drain: Drain | None, shutdown_timeout_s: float) -> None:
    """The graceful shutdown (the daemon's shutdown thread): new work is refused, a
    ``drain`` hands the sessions over first, then the runtime shuts down with reason
    ``server_shutdown`` (``drain`` after one), letting turns settle for at most
    ``shutdown_timeout_s``, and the admin socket and the HTTP listener close."""
    tell(admin, BeginShutdown())
    reason = "server_shutdown"
    if drain is not None:
        reason = "drain"
        hand_over(runtime, drain, shutdown_timeout_s / 2)
        if server is not None:
            # issue 36: from here on a client is refused at connect (its send was never
            # accepted: it goes to another daemon), not answered with an error; the
            # commands already read are answered first (the admin's mailbox is FIFO)
            server.close("daemon drained")
            admin.ask(Ready())
    runtime.shutdown(reason, settle_timeout_s=shutdown_timeout_s)
    if server is not None:
        server.close("daemon stopped")
    if http is not None:
        http.stop()


def hand_over(runtime: Runtime, drain: Drain, bound_s: float) -> None:
    """Several daemons: say so (no new session is placed here; this daemon sweeps and
    takes nothing, and every message sent to its sessions is held for their next owner:
    issue 36), hand the sessions waiting for their user over at once, then each
    mid-turn one as its turn ends — for at most ``bound_s`` (half the shutdown bound); the
    shutdown that follows hands the rest over (a turn still running then is resumed once by
    its new owner)."""
    seat = drain.seat
    seat.draining = True
    seat.cluster.set_daemon_state(seat.daemon_id, DaemonState.DRAINING)
    clock = runtime.clock
    deadline = clock.monotonic() + bound_s
    while clock.monotonic() < deadline:
        handed: list[str] = drain.supervisor.ask(HandOverIdle("drain"), block=True)
        if handed:
            logger.info("drain: handed {} session(s) over", len(handed))
        if not runtime.get_active_session_ids():
            break
        clock.wait(DRAIN_POLL_S)  # the daemon's shutdown thread: nothing else waits on it
    logger.info("drain: handing {} session(s) over to the other daemons",
                len(runtime.get_active_session_ids()))


def close_quietly(runtime: Runtime | None, *, server: AdminSocketServer | None, http: Any,
                  admin: pykka.ActorRef[AdminActor] | None, link: ClusterLink | None,
                  metrics_server: MetricsServer | None, models: ModelServer | None) -> None:
    """Close every part that started (None: it did not), in this order: the admin socket,
    the HTTP listener, the admin actor, the runtime (``server_shutdown``), the cluster link,
    the metrics server, the model server. Best effort: a step that fails is logged (debug)
    and the next one runs. The runtime first hears that it is stopping, so an actor
    stopped from here on is no failure."""
    if runtime is not None:
        runtime.mark_stopping()
    steps: list[Callable[[], object]] = []
    if server is not None:
        steps.append(functools.partial(server.close, "daemon stopped"))
    if http is not None:
        steps.append(http.stop)
    if admin is not None:
        steps.append(admin.stop)
    if runtime is not None:
        steps.append(functools.partial(runtime.shutdown, "server_shutdown"))
    if link is not None:
        steps.append(link.stop)
    if metrics_server is not None:
        steps.append(metrics_server.close)
    if models is not None:
        steps.append(models.close)
    for step in steps:
        try:
            step()
        except Exception:  # noqa: BLE001 - best effort on the way out
            logger.opt(exception=True).debug("cleanup step failed")
