"""A daemon's link to the other daemons of its cluster (issue 20), over the database.

One :class:`~corvid_actors.db.pg_bus.PgBus` per daemon: commands other daemons forward to
this one are run by its AdminActor as its own operator's would be (on a short-lived thread
each: the bus's listener must return at once), and answered with ``{"ok": …}`` (see
:mod:`corvid_actors.actors.admin._cluster`); every event of this daemon's sessions is
published for the others (batched by a publisher thread: whatever queued while the last
batch was sent goes in the next NOTIFYs), and theirs are handed to the AdminActor, so
``corvid-actors events`` on any daemon shows every session. The bus purges its stale
rows every ``[cluster.bus] purge_interval_s`` (:func:`purge_policy`).
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Mapping
from typing import Any

import pykka
from loguru import logger

from corvid_actors.actors.admin import AdminCommand
from corvid_actors.actors.admin._cluster import ClusterRouter, RemoteEvents
from corvid_actors.actors.base import tell
from corvid_actors.actors.cluster import ClusterSeat
from corvid_actors.clock import iso_utc
from corvid_actors.db.pg_bus import PgBus, Reply
from corvid_actors.db.pg_bus_purge import PurgePolicy
from corvid_actors.errors import INTERNAL, AdminError, ConfigError, CorvidError, admin_code
from corvid_actors.events import Event, to_dict
from corvid_actors.runtime import Runtime
from corvid_actors.schema.sections import ClusterBusConfig

#: most events one publish call carries (the bus splits them into NOTIFYs under 8000 bytes)
PUBLISH_BATCH = 200
_STOP = object()


def owner_query_timeout(cfg: ClusterBusConfig, command_timeout_s: float) -> float:
    """How long ``admin session`` waits for a session's owner; ConfigError unless shorter
    than the admin's timeout (the client would give up before the database answers)."""
    if cfg.owner_query_timeout_s >= command_timeout_s:
        raise ConfigError(f"config key cluster.bus.owner_query_timeout_s = {cfg.owner_query_timeout_s:g} must be "
                          f"less than daemon.admin_client_timeout_s = {command_timeout_s:g} (the operator's client "
                          "would give up before the fallback answer): lower it")
    return cfg.owner_query_timeout_s


def purge_policy(cfg: ClusterBusConfig, command_timeout_s: float) -> PurgePolicy:
    """The bus's purge from ``[cluster.bus]``; ConfigError if it could delete the row of a
    command whose caller still waits (``command_timeout_s``, the admin's timeout)."""
    if cfg.unanswered_retention_s <= command_timeout_s:
        raise ConfigError(f"config key cluster.bus.unanswered_retention_s = {cfg.unanswered_retention_s:g} must "
                          f"be more than daemon.admin_client_timeout_s = {command_timeout_s:g} (a command "
                          "still awaited would lose its row): raise it")
    return PurgePolicy(interval_s=cfg.purge_interval_s, finished_retention_s=cfg.finished_retention_s,
                       unanswered_retention_s=cfg.unanswered_retention_s, batch=cfg.purge_batch)


class ClusterLink:
    """See the module docstring. :meth:`start` before the AdminActor needs the router,
    :meth:`bind` once the AdminActor runs, :meth:`stop` at shutdown."""

    def __init__(self, runtime: Runtime, seat: ClusterSeat, url: str, *, timeout_s: float) -> None:
        self._runtime = runtime
        self._admin: pykka.ActorRef[Any] | None = None
        self.bus = PgBus(url, seat.daemon_id, clock=runtime.clock, on_command=self._command,
                         on_events=self._events, purge=purge_policy(seat.config.bus, timeout_s))
        self.router = ClusterRouter(seat, self.bus, timeout_s, owner_query_timeout(seat.config.bus, timeout_s))
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._publisher = threading.Thread(target=self._publish_loop, name="corvid-cluster-events", daemon=True)

    def start(self) -> None:
        self.bus.start()
        self._publisher.start()
        self._runtime.subscribe_all(self._local_event)

    def bind(self, admin: pykka.ActorRef[Any]) -> None:
        """Commands and events of other daemons go to ``admin`` from now on."""
        self._admin = admin

    def stop(self) -> None:
        try:
            self._runtime.unsubscribe_all(self._local_event)
        except Exception:  # noqa: BLE001 - the runtime may be stopped already
            pass
        self._queue.put(_STOP)
        self._publisher.join(5.0)
        self.bus.stop()

    # --- this daemon's events, out ------------------------------------------------------------

    def _local_event(self, session_id: str, event: Event) -> None:
        # on the EventBus thread: cheap
        self._queue.put({"s": session_id, "t": iso_utc(self._runtime.clock.now()), "e": to_dict(event)})

    def _publish_loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            batch = [item]
            while len(batch) < PUBLISH_BATCH:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is _STOP:
                    self._send(batch)
                    return
                batch.append(more)
            self._send(batch)

    def _send(self, batch: list[Any]) -> None:
        try:
            self.bus.publish_events(batch)
        except Exception as exc:  # noqa: BLE001 - the others miss them (a live view); the store has the rest
            logger.warning("cluster: {} event(s) could not be published to the other daemons ({})", len(batch), exc)

    # --- the others' commands and events, in ----------------------------------------------------

    def _events(self, origin: str, events: list[Any]) -> None:
        if self._admin is not None:
            tell(self._admin, RemoteEvents(tuple(events)))

    def _command(self, origin: str, command: Mapping[str, Any], reply: Reply) -> None:
        threading.Thread(target=self._run_command, args=(origin, command, reply),
                         name="corvid-cluster-command", daemon=True).start()

    def _run_command(self, origin: str, command: Mapping[str, Any], reply: Reply) -> None:
        try:
            if self._admin is None:
                raise AdminError(INTERNAL, "this daemon is starting: try again")
            name, args = str(command["cmd"]), dict(command.get("args") or {})
            result = self._admin.ask(AdminCommand(name, args, forwarded=True))
            if isinstance(result, pykka.Future):
                result = result.get()
            # JSON as the admin socket sends it (a datetime or a path becomes its text)
            answer: dict[str, Any] = {"ok": True, "result": json.loads(json.dumps(result, default=str))}
        except CorvidError as exc:  # an AdminError, or the store found down here (`unavailable`)
            answer = {"ok": False, "code": admin_code(exc), "message": str(exc)}
        except Exception as exc:  # noqa: BLE001 - the caller must hear something
            logger.opt(exception=True).warning("cluster: a command from daemon {} failed", origin)
            answer = {"ok": False, "code": INTERNAL, "message": f"{type(exc).__name__}: {exc}"}
        try:
            reply.done(answer)
        except Exception as exc:  # noqa: BLE001 - the caller times out and says so
            logger.warning("cluster: could not answer daemon {} ({})", origin, exc)
