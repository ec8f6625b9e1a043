"""The two PostgreSQL connections of the cross-daemon bus: a listener and a sender.

:class:`PgListener` is ONE thread with its own autocommit connection that ``LISTEN``\\ s on
a few channels and waits in ``select()`` on that connection's socket and on a self-pipe:
a notification wakes it, :meth:`PgListener.stop` wakes it at once, and nothing polls on a
timer. It reconnects when the connection drops (waiting out a backoff through the Clock,
cut short by ``stop``), re-LISTENs, and reports itself degraded meanwhile.

:class:`PgSender` is the other connection, behind a lock: each call runs ONE statement
string, so one round trip and one transaction (PostgreSQL runs a multi-statement query
as one transaction, and delivers its NOTIFYs when it commits).

Used by :mod:`corvid_actors.db.pg_bus`; needs psycopg2.
"""

from __future__ import annotations

import os
import selectors
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import psycopg2
from loguru import logger

from corvid_actors.clock import Clock
from corvid_actors.db.faults import one_line, says_connection_lost
from corvid_actors.errors import RuntimeStoppedError, StoreError, StoreUnavailableError

#: libpq settings of both connections: a refused connect fails fast, and TCP keepalives
#: find a peer that vanished without closing (else select() would wait on it forever)
CONNECTION_PARAMS: dict[str, Any] = {
    "connect_timeout": 5, "keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2,
    "keepalives_count": 3,
}
#: run on each new connection: its commits do not wait for the WAL flush. The bus's rows
#: are transient coordination (a command between two daemons, an event for a live view):
#: a PostgreSQL crash may lose the last moments of them (a caller then times out), never
#: corrupt them, and a forwarded command costs no fsync at each of its four commits
#: (about 3 ms each on a plain disk: most of a round trip).
SESSION_SETUP = "SET synchronous_commit TO off"
#: (first, longest) wait in seconds between the listener's reconnect attempts
DEFAULT_RECONNECT_BACKOFF_S = (0.05, 5.0)

#: opens a connection: ``connect(url, **CONNECTION_PARAMS)`` (psycopg2.connect by default)
Connect = Callable[..., Any]


def is_lost(conn: Any, exc: BaseException) -> bool:
    """Is ``exc`` on ``conn`` a lost connection, not an error of the statement?"""
    return bool(conn.closed) or says_connection_lost(exc)


class WakeSignal:
    """A one-shot, thread-safe wake-up; a ``Cancellable`` for :meth:`Clock.wait`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fired = False
        self._callbacks: list[Callable[[], None]] = []

    @property
    def cancelled(self) -> bool:
        return self._fired

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        with self._lock:
            if not self._fired:
                self._callbacks.append(callback)
                return lambda: self._forget(callback)
        callback()
        return lambda: None

    def _forget(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

    def fire(self) -> None:
        with self._lock:
            if self._fired:
                return
            self._fired = True
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()


class PgListener:
    """One thread listening on ``channels``. ``on_connected(conn)`` runs on it after every
    (re)connect's LISTEN (to catch up on what was missed); ``on_notify(conn, channel,
    payload)`` for each notification, in order. Both may run statements on ``conn``; a
    lost connection they meet is the listener's to handle (raise it)."""

    def __init__(self, url: str, channels: Sequence[str], *, clock: Clock,
                 on_connected: Callable[[Any], None], on_notify: Callable[[Any, str, str], None],
                 name: str, reconnect_backoff_s: tuple[float, float] = DEFAULT_RECONNECT_BACKOFF_S,
                 connect: Connect | None = None) -> None:
        self.url = url
        self.channels = tuple(channels)
        self.name = name
        self._clock = clock
        self._on_connected = on_connected
        self._on_notify = on_notify
        self._backoff_first, self._backoff_max = reconnect_backoff_s
        self._connect = connect or psycopg2.connect
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._stop_signal = WakeSignal()
        self._wake_r = self._wake_w = -1
        self._first_attempt = threading.Event()
        self._down: str | None = "not started"
        self._health_listeners: list[Callable[[str | None], None]] = []
        self._pid: int | None = None

    def start(self) -> None:
        """Start the thread; returns once its first connection attempt succeeded (LISTEN and
        ``on_connected`` done) or failed (it keeps retrying, degraded)."""
        with self._lock:
            if self._stopping:
                raise RuntimeStoppedError(f"listener {self.name} was stopped; create a new one")
            if self._thread is not None:
                return
            self._wake_r, self._wake_w = os.pipe()
            os.set_blocking(self._wake_w, False)
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        self._first_attempt.wait()  # bounded by connect_timeout

    def stop(self) -> None:
        """Wake the thread through the self-pipe and join it (at once when it is waiting,
        after its statement when it runs one); its connection is closed. Idempotent."""
        with self._lock:
            self._stopping = True
            thread, self._thread = self._thread, None
        self._stop_signal.fire()
        if thread is None:
            return
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:  # the pipe is full: the thread is awake anyway
            pass
        thread.join()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def on_thread(self) -> bool:
        """Is the caller the listener thread?"""
        return threading.current_thread() is self._thread

    @property
    def status(self) -> str:
        """``ok``, ``degraded`` (started, not connected) or ``stopped`` (not started, or stopped)."""
        if self._down is None:
            return "ok"
        return "degraded" if self._thread is not None and not self._stopping else "stopped"

    @property
    def available(self) -> bool:
        """False while not connected (notifications do not arrive)."""
        return self._down is None

    @property
    def unavailable_reason(self) -> str | None:
        """Why the listener is degraded ("the listener connection was lost: …"), or None."""
        return self._down

    @property
    def pid(self) -> int | None:
        """The server process id of the listening connection (None while disconnected)."""
        return self._pid

    def add_listener(self, listener: Callable[[str | None], None]) -> None:
        """``listener(reason)`` when the listener becomes degraded, ``listener(None)`` when
        it is back; called on the listener thread: keep it cheap (tell an actor)."""
        self._health_listeners.append(listener)

    def _set_down(self, reason: str | None) -> None:
        was, self._down = self._down, reason
        if (was is None) == (reason is None):
            return
        if reason is None:
            logger.info("{}: listening again (it was degraded: {})", self.name, was)
        else:
            logger.warning("{}: degraded: {}", self.name, reason)
        for listener in list(self._health_listeners):
            try:
                listener(reason)
            except Exception:  # noqa: BLE001 - a listener must not break the thread
                logger.opt(exception=True).error("{}: health listener {} raised", self.name, listener)

    def _run(self) -> None:
        backoff = self._backoff_first
        while not self._stopping:
            conn = None
            served = False
            try:
                conn = self._connect(self.url, **CONNECTION_PARAMS)
                conn.autocommit = True
                conn.notifies = deque()  # psycopg2 appends to any object with append()
                with conn.cursor() as cur:
                    cur.execute(SESSION_SETUP)
                    for channel in self.channels:
                        cur.execute(f'LISTEN "{channel}"')
                self._pid = conn.get_backend_pid()
                self._on_connected(conn)
                self._set_down(None)
                self._first_attempt.set()
                served = True
                backoff = self._backoff_first
                self._serve(conn)
            except (psycopg2.Error, OSError) as exc:
                if not self._stopping:
                    what = "was lost" if served else "could not be opened"
                    self._set_down(f"the listener connection {what}: {one_line(exc)}")
            finally:
                self._pid = None
                self._first_attempt.set()
                if conn is not None:
                    try:
                        conn.close()
                    except psycopg2.Error:  # already broken
                        pass
            # The first retry after a lost connection comes at the first backoff; a server
            # that keeps refusing (or a failing on_connected) backs off further.
            if self._stopping or not self._clock.wait(backoff, cancel=self._stop_signal):
                break
            if not served:
                backoff = min(backoff * 2, self._backoff_max)
        self._down = "stopped"

    def _serve(self, conn: Any) -> None:
        """Dispatch notifications until stopped; raises when the connection is lost."""
        with selectors.DefaultSelector() as selector:
            selector.register(self._wake_r, selectors.EVENT_READ)
            selector.register(conn.fileno(), selectors.EVENT_READ)
            while True:
                while conn.notifies:  # statements run by a dispatch may bring more
                    note = conn.notifies.popleft()
                    self._dispatch(conn, note.channel, note.payload)
                if self._stopping:
                    return
                selector.select()  # no timeout: the socket or the self-pipe wakes it
                if self._stopping:
                    return
                conn.poll()

    def _dispatch(self, conn: Any, channel: str, payload: str) -> None:
        try:
            self._on_notify(conn, channel, payload)
        except psycopg2.Error as exc:
            if is_lost(conn, exc):
                raise
            logger.error("{}: handling a notification on {} failed: {}", self.name, channel, one_line(exc))


class PgSender:
    """The sending connection, opened on first use and reopened after a loss. Thread-safe."""

    def __init__(self, url: str, *, name: str, connect: Connect | None = None) -> None:
        self.url = url
        self.name = name
        self._connect = connect or psycopg2.connect
        self._lock = threading.Lock()
        self._conn: Any = None
        self._closed = False

    def run(self, sql: str, params: Sequence[Any], *, replay_safe: bool) -> list[tuple[Any, ...]]:
        """Run one statement string (one round trip, one transaction); the rows of its last
        statement. A lost connection is reopened and the statement replayed once if
        ``replay_safe``; otherwise (the statement may or may not have run)
        StoreUnavailableError. Any other database error is a StoreError."""
        with self._lock:
            for attempt in (1, 2):
                conn = self._connection()
                try:
                    with conn.cursor() as cur:
                        cur.execute(sql, params)
                        return list(cur.fetchall()) if cur.description else []
                except psycopg2.Error as exc:
                    if not is_lost(conn, exc):
                        raise StoreError(f"{self.name}: database error: {one_line(exc)}") from exc
                    self._drop()
                    if attempt == 2 or not replay_safe:
                        raise StoreUnavailableError(
                            f"store unavailable: {self.name}'s connection was lost ({one_line(exc)}); "
                            "the statement may or may not have run") from exc
                    logger.warning("{}: the connection was lost ({}); reconnecting and retrying once",
                                   self.name, one_line(exc))
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Close the connection; later calls raise RuntimeStoppedError."""
        with self._lock:
            self._closed = True
            self._drop()

    def _connection(self) -> Any:
        if self._closed:
            raise RuntimeStoppedError(f"{self.name} is stopped")
        if self._conn is None:
            try:
                conn = self._connect(self.url, **CONNECTION_PARAMS)
            except psycopg2.Error as exc:
                raise StoreUnavailableError(f"store unavailable: {self.name} cannot connect ({one_line(exc)})") from exc
            try:
                conn.autocommit = True  # each statement string is its own transaction
                with conn.cursor() as cur:
                    cur.execute(SESSION_SETUP)
            except psycopg2.Error as exc:
                conn.close()
                raise StoreUnavailableError(f"store unavailable: {self.name} cannot connect ({one_line(exc)})") from exc
            self._conn = conn
        return self._conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg2.Error:
                pass
