"""Commands and events between daemons through PostgreSQL ``LISTEN/NOTIFY`` (issue 20).

Each daemon runs one :class:`PgBus` over two connections (:mod:`corvid_actors.db.pg_notify`):
a listener thread that ``LISTEN``\\ s on this daemon's command and reply channels and on the
events channel, woken by the socket or by ``stop`` (no polling), reconnecting and
re-LISTENing when its connection drops; and a sender, one round trip per send.

Commands (:meth:`PgBus.forward`, :meth:`PgBus.await_result`) are forwarded, not answered
with the owner's address: the caller needs only the database it already has (no
daemon-to-daemon network, no second authentication), the command is a row (so a NOTIFY
lost while the target was disconnected is not a lost command: the target sweeps its
pending rows at every (re)connect), and the target takes each row exactly once
(``UPDATE … WHERE state = 'pending' RETURNING``). A caller that gives up withdraws a
command not yet taken (it will never run) or marks a taken one abandoned.

Events (:meth:`PgBus.publish_events`) travel in NOTIFY payloads, not through a persisted
table read with a cursor: ``corvid-actors events`` is a live view, and the events that
matter later are in the store already (messages, session status). A listener that was
disconnected misses what was published meanwhile; the payload's sequence number lets it
count what it missed (:attr:`PgBus.missed_notifications`) instead of pretending. Payloads
stay under PostgreSQL's 8000-byte limit (batches are split); one event larger than that
goes through a ``cluster_events`` row and the NOTIFY carries its id. The wire format is
in :mod:`corvid_actors.db.pg_bus_wire`.

The bus's connections commit without waiting for the WAL flush (``SESSION_SETUP`` in
pg_notify): its rows are transient coordination, and a flush per commit was most of a
command's round trip. Rows left behind by a daemon that died mid-command are purged
(:mod:`corvid_actors.db.pg_bus_purge`). Needs psycopg2 (``pip install 'corvid-actors[postgres]'``) and the
store's ``_cluster_bus`` migration (the ``cluster_commands`` and ``cluster_events`` tables).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from loguru import logger

from corvid_actors.clock import Clock
from corvid_actors.core.jsontypes import JsonObject, JsonValue
from corvid_actors.db.models import new_id
from corvid_actors.db.pg_bus_purge import BusPurger, PurgePolicy, PurgeResult, purge_bus_tables
from corvid_actors.db.pg_bus_wire import (
    Oversized,
    Packed,
    check_namespace,
    command_channel,
    decode_events_payload,
    encode_event,
    events_channel,
    events_payload,
    missed_between,
    pack_events,
    reply_channel,
)
from corvid_actors.db.pg_notify import (
    DEFAULT_RECONNECT_BACKOFF_S,
    Connect,
    PgListener,
    PgSender,
    WakeSignal,
)
from corvid_actors.errors import (
    CommandFailed,
    CommandTimeout,
    CorvidError,
    NotFoundError,
    RuntimeStoppedError,
    StoreError,
)

#: how long a ``cluster_events`` row (one oversized event) is kept for late readers
DEFAULT_EVENT_RETENTION_S = 60.0
#: the final states of ``cluster_commands.state`` (see ClusterCommand in db/models.py)
DONE, FAILED = "done", "failed"
#: one oversized event: its row and the NOTIFY carrying the row's id, in one statement
_NOTIFY_STORED_EVENT = (
    "WITH row AS (INSERT INTO cluster_events (origin, body, created_at) VALUES (%s, %s, %s) RETURNING id) "
    "SELECT pg_notify(%s, json_build_object('o', %s::text, 'n', %s::bigint, 'r', id)::text) FROM row")

#: ``handler(origin daemon, command, reply)``, on the listener thread: must return promptly
#: (tell an actor) and answer through ``reply`` then or later, from any thread
CommandHandler = Callable[[str, JsonObject, "Reply"], None]
#: ``handler(origin daemon, events in order)``, on the listener thread: must return promptly
EventsHandler = Callable[[str, list[JsonObject]], None]


@dataclass(frozen=True)
class _Finished:
    value: JsonValue


class Reply:
    """The answer to one forwarded command: :meth:`done` or :meth:`fail`, once, any thread."""

    def __init__(self, bus: PgBus, command_id: str, origin: str) -> None:
        self.command_id = command_id
        self.origin = origin
        self._bus = bus
        self._lock = threading.Lock()
        self.given = False

    def done(self, result: JsonValue) -> None:
        """Store ``result`` (JSON) and wake the caller. Raises StoreUnavailableError if the
        database cannot be reached (the caller then times out)."""
        self._give(DONE, result)

    def fail(self, message: str) -> None:
        """Store the failure; the caller's ``await_result`` raises :class:`CommandFailed`."""
        self._give(FAILED, message)

    def _give(self, state: str, value: JsonValue) -> None:
        with self._lock:
            if self.given:
                raise RuntimeError(f"command {self.command_id} was answered already")
            self.given = True
        self._bus._finish(self, state, json.dumps(value))


class PgBus:
    """One daemon's end of the cross-daemon transport. Thread-safe; see the module docstring.

    ``clock`` paces the listener's reconnect backoff and bounds :meth:`await_result`;
    ``connect(url, **CONNECTION_PARAMS)`` opens a connection (psycopg2's by default).
    ``namespace`` prefixes the channels: daemons of one cluster share it. With ``purge``,
    a worker thread deletes stale rows of the bus tables every ``purge.interval_s``
    (:mod:`corvid_actors.db.pg_bus_purge`); :meth:`purge` runs one pass on demand.
    """

    def __init__(self, url: str, daemon_id: str, *, clock: Clock, on_command: CommandHandler,
                 on_events: EventsHandler, namespace: str = "corvid",
                 reconnect_backoff_s: tuple[float, float] = DEFAULT_RECONNECT_BACKOFF_S,
                 event_retention_s: float = DEFAULT_EVENT_RETENTION_S,
                 purge: PurgePolicy | None = None, connect: Connect | None = None) -> None:
        self.daemon_id = daemon_id
        self.namespace = check_namespace(namespace)
        self._clock = clock
        self._on_command = on_command
        self._on_events = on_events
        self._retention = timedelta(seconds=event_retention_s)
        self.purge_policy = purge
        self.purger = None if purge is None else BusPurger(
            self.purge, clock=clock, interval_s=purge.interval_s, name=f"corvid-pgbus-purge-{daemon_id}")
        self._cmd_channel = command_channel(namespace, daemon_id)
        self._reply_channel = reply_channel(namespace, daemon_id)
        self._events_channel = events_channel(namespace)
        self.listener = PgListener(
            url, (self._cmd_channel, self._reply_channel, self._events_channel), clock=clock,
            on_connected=self._caught_up, on_notify=self._dispatch, name=f"corvid-pgbus-{daemon_id}",
            reconnect_backoff_s=reconnect_backoff_s, connect=connect)
        self._sender = PgSender(url, name=f"bus {daemon_id}", connect=connect)
        self._lock = threading.Lock()
        self._stopped = False
        self._waiters: dict[str, WakeSignal] = {}  # command id -> its awaiting caller's wake-up
        self._publish_lock = threading.Lock()
        self._seq = 0  # the next events sequence number (under _publish_lock)
        self._last_seq: dict[str, int] = {}  # per origin (listener thread only)
        #: event notifications of other daemons this listener missed (sequence gaps)
        self.missed_notifications = 0

    def start(self) -> None:
        """Start listening; returns once the first connection attempt succeeded (pending
        commands swept) or failed (the bus is then degraded and keeps retrying)."""
        self.listener.start()
        if self.purger is not None:
            self.purger.start()

    def stop(self) -> None:
        """Stop the listener (at once) and close both connections; callers waiting in
        :meth:`await_result` raise RuntimeStoppedError. Idempotent."""
        with self._lock:
            self._stopped = True
        if self.purger is not None:
            self.purger.stop()
        self.listener.stop()
        self._sender.close()
        self._wake_waiters()

    @property
    def status(self) -> str:
        """``ok`` (listening), ``degraded`` (reconnecting: nothing arrives meanwhile) or
        ``stopped`` (not started yet, or stopped)."""
        return self.listener.status

    @property
    def available(self) -> bool:
        """False while degraded: the listener is not connected (nothing arrives)."""
        return self.listener.available

    @property
    def unavailable_reason(self) -> str | None:
        """Why the bus is degraded, or None."""
        return self.listener.unavailable_reason

    def purge(self) -> PurgeResult:
        """Delete the bus rows past their retention now (one pass; see
        :mod:`corvid_actors.db.pg_bus_purge`); the rows deleted. Any thread."""
        if self.purge_policy is None:
            raise RuntimeError(f"bus {self.daemon_id} has no purge policy")
        return purge_bus_tables(self._sender.run, self._clock.now(), self.purge_policy,
                                self._retention.total_seconds())

    # --- commands -------------------------------------------------------------------------

    def forward(self, target_daemon_id: str, command: JsonObject) -> str:
        """Queue ``command`` for daemon ``target_daemon_id`` and notify it; returns the
        command's id (for :meth:`await_result`). Row and NOTIFY commit together."""
        command_id = new_id()
        created = self._clock.now().replace(tzinfo=None)
        self._sender.run(
            "INSERT INTO cluster_commands (id, origin, target, payload, state, created_at) "
            "VALUES (%s, %s, %s, %s, 'pending', %s) ON CONFLICT (id) DO NOTHING; SELECT pg_notify(%s, %s)",
            (command_id, self.daemon_id, target_daemon_id, json.dumps(command), created,
             command_channel(self.namespace, target_daemon_id), command_id),
            replay_safe=True)  # the id makes a replayed insert a no-op; a second NOTIFY takes nothing
        return command_id

    def await_result(self, command_id: str, timeout_s: float) -> JsonValue:
        """The result of a command this daemon forwarded, waiting at most ``timeout_s``.

        Woken by the target's reply NOTIFY (and at every listener reconnect, to re-check a
        reply that may have been missed); no polling. Raises :class:`CommandFailed`,
        :class:`CommandTimeout`, or NotFoundError for an unknown (or collected) id. Never
        call it on the listener thread (from a handler): the reply could not arrive.
        """
        if self.listener.on_thread():
            raise RuntimeError("await_result on the bus's listener thread would block the reply it waits for")
        deadline = self._clock.monotonic() + timeout_s
        try:
            while True:
                signal = WakeSignal()
                with self._lock:
                    if self._stopped:
                        raise RuntimeStoppedError(f"bus {self.daemon_id} is stopped")
                    self._waiters[command_id] = signal  # armed before the check: no lost wake-up
                finished = self._collect(command_id)
                if finished is not None:
                    return finished.value
                remaining = deadline - self._clock.monotonic()
                if remaining <= 0:
                    return self._give_up(command_id, timeout_s)
                self._clock.wait(remaining, cancel=signal)
        finally:
            with self._lock:
                self._waiters.pop(command_id, None)

    def _collect(self, command_id: str) -> _Finished | None:
        # Reads a finished command and deletes its row in one statement (the result has
        # served). Not replayed: a connection lost at its commit may have taken the result
        # with it, and the caller then hears so (StoreUnavailableError), not "not found".
        rows = self._sender.run(
            "WITH gone AS (DELETE FROM cluster_commands WHERE id = %s AND state IN ('done', 'failed') "
            "RETURNING state, result, target) SELECT state, result, target FROM gone UNION ALL "
            "SELECT state, NULL, target FROM cluster_commands WHERE id = %s AND NOT EXISTS (SELECT 1 FROM gone)",
            (command_id, command_id), replay_safe=False)
        if not rows:
            raise NotFoundError(f"no forwarded command {command_id} (never forwarded, or its result "
                                "was collected already)")
        state, result, target = rows[0]
        if state not in (DONE, FAILED):
            return None
        value = json.loads(result)
        if state == FAILED:
            raise CommandFailed(f"command {command_id} failed on daemon {target}: {value}")
        return _Finished(value)

    def _give_up(self, command_id: str, timeout_s: float) -> JsonValue:
        # One UPDATE decides, even against a concurrent take (PostgreSQL re-evaluates the
        # row it waited for): a pending command is withdrawn (the take skips it), a taken
        # one abandoned (the target deletes it when it finishes).
        rows = self._sender.run(
            "UPDATE cluster_commands SET state = CASE state WHEN 'pending' THEN 'withdrawn' ELSE 'abandoned' "
            "END WHERE id = %s AND state IN ('pending', 'taken') RETURNING state, target",
            (command_id,), replay_safe=False)
        if not rows:  # finished meanwhile
            finished = self._collect(command_id)
            if finished is not None:
                return finished.value
            raise CommandTimeout(f"command {command_id}: no result within {timeout_s}s", taken=True)
        state, target = rows[0]
        if state == "withdrawn":
            try:
                self._sender.run("DELETE FROM cluster_commands WHERE id = %s", (command_id,), replay_safe=True)
            except StoreError as exc:  # withdrawn, it will not run: a row left behind is clutter
                logger.warning("bus {}: could not delete withdrawn command {}: {}", self.daemon_id, command_id, exc)
            raise CommandTimeout(
                f"daemon {target} did not take command {command_id} within {timeout_s}s (its listener is "
                "down or it is gone); the command was withdrawn and will not run", taken=False)
        raise CommandTimeout(
            f"daemon {target} took command {command_id} but gave no result within {timeout_s}s; it may "
            "still run to its end, and its result will be discarded", taken=True)

    def _finish(self, reply: Reply, state: str, result_json: str) -> None:
        # UPDATE first, then delete the row if its caller abandoned it before: a caller
        # abandoning after the UPDATE finds the command done and collects it instead.
        self._sender.run(
            "WITH done AS (UPDATE cluster_commands SET state = %s, result = %s WHERE id = %s AND "
            "state = 'taken' RETURNING id) SELECT pg_notify(%s, id) FROM done; "
            "DELETE FROM cluster_commands WHERE id = %s AND state = 'abandoned'",
            (state, result_json, reply.command_id, reply_channel(self.namespace, reply.origin),
             reply.command_id), replay_safe=True)

    def _take(self, conn: Any, command_id: str) -> None:
        with conn.cursor() as cur:
            cur.execute("UPDATE cluster_commands SET state = 'taken' WHERE id = %s AND target = %s AND "
                        "state = 'pending' RETURNING origin, payload", (command_id, self.daemon_id))
            row = cur.fetchone()
        if row is not None:  # None: taken already (by the sweep), or withdrawn by its caller
            self._run_handler(command_id, row[0], row[1])

    def _caught_up(self, conn: Any) -> None:
        """After every (re)connect, on the listener thread: take the commands queued while
        it was not listening, and wake every waiting caller to re-check its result."""
        with conn.cursor() as cur:
            cur.execute("WITH taken AS (UPDATE cluster_commands SET state = 'taken' WHERE target = %s AND "
                        "state = 'pending' RETURNING id, origin, payload, created_at) "
                        "SELECT id, origin, payload FROM taken ORDER BY created_at, id", (self.daemon_id,))
            rows = cur.fetchall()
        if rows:
            logger.info("bus {}: took {} command(s) queued while it was not listening", self.daemon_id, len(rows))
        for command_id, origin, payload in rows:
            self._run_handler(command_id, origin, payload)
        self._wake_waiters()

    def _wake_waiters(self) -> None:
        with self._lock:
            waiters = list(self._waiters.values())
        for signal in waiters:
            signal.fire()

    def _run_handler(self, command_id: str, origin: str, payload: str) -> None:
        reply = Reply(self, command_id, origin)
        try:
            self._on_command(origin, json.loads(payload), reply)
        except Exception as exc:  # noqa: BLE001 - the caller gets the failure, the listener goes on
            logger.opt(exception=True).error("bus {}: command {} from {} failed", self.daemon_id, command_id, origin)
            if not reply.given:
                try:
                    reply.fail(f"{type(exc).__name__}: {exc}")
                except CorvidError as answer_exc:
                    logger.error("bus {}: could not answer command {}: {}", self.daemon_id, command_id, answer_exc)

    # --- events ---------------------------------------------------------------------------

    def publish_events(self, events: Sequence[JsonObject]) -> int:
        """Send ``events`` (in order) to every other daemon's listener; returns the number of
        notifications it took, in one transaction. Calls are serialised and NOTIFYs arrive in
        commit order, so every listener sees a session's events in order. A connection lost
        while sending raises StoreUnavailableError and the batch is not re-sent (it may have
        gone out): a live view prefers a gap, which receivers count, to duplicates."""
        if not events:
            return 0
        parts = pack_events(self.daemon_id, [encode_event(e) for e in events])
        statements: list[str] = []
        params: list[Any] = []
        with self._publish_lock:
            for seq, part in enumerate(parts, start=self._seq):
                if isinstance(part, Packed):
                    statements.append("SELECT pg_notify(%s, %s)")
                    params += [self._events_channel, events_payload(self.daemon_id, seq, part)]
                else:
                    statements.append(_NOTIFY_STORED_EVENT)
                    params += [self.daemon_id, part.event, self._clock.now().replace(tzinfo=None),
                               self._events_channel, self.daemon_id, seq]
            if any(isinstance(part, Oversized) for part in parts):
                statements.append("DELETE FROM cluster_events WHERE created_at < %s")
                params.append((self._clock.now() - self._retention).replace(tzinfo=None))
            self._seq += len(parts)  # a failed send leaves a gap the receivers count
            self._sender.run("; ".join(statements), params, replay_safe=False)
        return len(parts)

    def _receive_events(self, conn: Any, payload: str) -> None:
        try:
            notice = decode_events_payload(payload)
        except ValueError as exc:
            logger.warning("bus {}: ignoring a stranger's payload on {}: {}", self.daemon_id,
                           self._events_channel, exc)
            return
        if notice.origin == self.daemon_id:
            return  # this daemon delivers its own events locally
        missed = missed_between(self._last_seq.get(notice.origin), notice.seq)
        self._last_seq[notice.origin] = notice.seq
        if missed:
            self.missed_notifications += missed
            logger.warning("bus {}: missed {} event notification(s) of daemon {}", self.daemon_id, missed,
                           notice.origin)
        events = list(notice.events)
        if notice.row_id is not None:
            with conn.cursor() as cur:
                cur.execute("SELECT body FROM cluster_events WHERE id = %s", (notice.row_id,))
                row = cur.fetchone()
            if row is None:
                logger.warning("bus {}: event row {} of daemon {} is gone (past its retention)",
                               self.daemon_id, notice.row_id, notice.origin)
                return
            events = [json.loads(row[0])]
        try:
            self._on_events(notice.origin, events)
        except Exception:  # noqa: BLE001 - a failing subscriber must not stop the listener
            logger.opt(exception=True).error("bus {}: the events handler failed", self.daemon_id)

    def _dispatch(self, conn: Any, channel: str, payload: str) -> None:
        """One notification, on the listener thread."""
        if channel == self._events_channel:
            self._receive_events(conn, payload)
        elif channel == self._cmd_channel:
            self._take(conn, payload)
        elif channel == self._reply_channel:
            with self._lock:
                signal = self._waiters.get(payload)
            if signal is not None:
                signal.fire()
