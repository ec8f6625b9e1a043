"""The store's connection: one connection behind one lock, transactions, and surviving
the server (reconnect and replay once, refuse while down). The row operations build on
:class:`StoreBase` in their own modules; :class:`corvid_actors.db.store.Store` joins them.
See :mod:`corvid_actors.db.store` for the guarantees."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any
from urllib.parse import urlparse

import peewee as pw
from loguru import logger

from corvid_actors.clock import RealClock
from corvid_actors.db.availability import Availability
from corvid_actors.db.connect import enable_wal, open_database
from corvid_actors.db.faults import (
    drop_connection,
    is_file_fault,
    one_line,
    open_connection,
    says_connection_lost,
)
from corvid_actors.db.figures import WriteFigures
from corvid_actors.db.file_watch import FileWatch
from corvid_actors.db.group_commit import GroupCommitter
from corvid_actors.db.lru import LruCache
from corvid_actors.db.memory_schema import copy_memory_schema
from corvid_actors.db.message_batches import MessageRow
from corvid_actors.db.migrations import MIGRATIONS, Migration, migrate, running_schema_verdict
from corvid_actors.db.models import build_models
from corvid_actors.db.row_reads import RowReader
from corvid_actors.db.send_lane import SendLane
from corvid_actors.db.writer import MessageWriter
from corvid_actors.errors import FencedWrite, StoreError, StoreUnavailableError

#: most append calls one group commit carries
DEFAULT_MAX_MESSAGE_BATCH = 500
#: (first, longest) wait in seconds between reconnect attempts while the server is down
DEFAULT_RECONNECT_BACKOFF_S = (0.5, 5.0)
#: seconds between two checks of a SQLite file (gone, replaced, read-only) before writes
DEFAULT_FILE_CHECK_INTERVAL_S = 1.0
#: agents (by revision) whose rows a store keeps for session starts (``[session] build_cache_entries``)
DEFAULT_BUILD_CACHE_ENTRIES = 256


def store_op(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run a method of the store (or of an object with a ``store``) through :meth:`StoreBase.run`:
    refused at once while the store is down, replayed once on a lost connection."""

    @functools.wraps(fn)
    def op(self: Any, *args: Any, **kwargs: Any) -> Any:
        store = self if isinstance(self, StoreBase) else self.store
        return store.run(fn, self, *args, **kwargs)

    return op


class StoreBase:
    """The store's connection, lock, transactions and availability; the row operations
    are in the mixins :class:`~corvid_actors.db.store.Store` is made of. Thread-safe."""

    def __init__(self, url: str = "sqlite:///:memory:", *, busy_timeout_ms: int = 30000,
                 message_writes: str = "writer", max_message_batch: int = DEFAULT_MAX_MESSAGE_BATCH,
                 reconnect_backoff_s: tuple[float, float] = DEFAULT_RECONNECT_BACKOFF_S,
                 monotonic: Callable[[], float] | None = None, now: Callable[[], datetime] | None = None,
                 migrations: Sequence[Migration] | None = None, release: str | None = None,
                 file_check_interval_s: float = DEFAULT_FILE_CHECK_INTERVAL_S,
                 build_cache_entries: int = DEFAULT_BUILD_CACHE_ENTRIES) -> None:
        # ``migrations``: the schema this code knows (default: all of them); ``release``:
        # which release this code is (default: the installed one). Seams for the
        # rolling-upgrade tests, which open a database as another release would.
        # ``monotonic`` and ``now``: the runtime's clock (reconnect backoff; the stored
        # timestamps, aware UTC: a simulation's rows carry simulated times); default: real.
        self.url = url
        self._lock = threading.RLock()
        self._monotonic = monotonic or RealClock().monotonic
        #: why the store is down, the reconnect backoff and the listeners (db/availability.py)
        self._availability = Availability(self._lock, self._monotonic, reconnect_backoff_s)
        #: commits, replays and fenced writes, for the metrics
        self.figures = WriteFigures()
        #: a SQLite file's checks (db/file_watch.py), None for ``:memory:`` and PostgreSQL
        self._file: FileWatch | None = None
        # Which threads are inside transaction(): their appends must join that transaction,
        # not wait for a group commit that needs the lock they hold.
        self._local = threading.local()
        if message_writes not in ("writer", "group_commit", "direct"):
            raise ValueError(f"message_writes must be writer, group_commit or direct (got {message_writes!r})")
        #: how session messages are committed (``[store] message_writes``)
        self.message_writes = message_writes
        #: update_session's statement per set of columns: (sql, the fields in parameter order)
        self._update_shapes: dict[Any, tuple[str, tuple[Any, ...]]] = {}
        self._sql_cache: dict[Any, str] = {}  # see _sql
        #: session id -> the lease epoch this process's writes for it carry (issue 20; see fence)
        self._epochs: dict[str, int] = {}
        #: (agent id, revision) -> its rows a session start reads (``session_context``),
        #: kept across incarnations (issue 37; ``[session] build_cache_entries``)
        self.agent_rows: LruCache[Any] = LruCache(build_cache_entries)
        #: called with an agent's id after this store wrote it (``CatalogRows.on_agent_change``)
        self._agent_listeners: list[Callable[[str], None]] = []
        #: the hand-written reads' rows as model objects, each statement's column mapping kept (see _rows)
        self._row_reader = RowReader()
        self._message_commits: GroupCommitter[tuple[MessageRow, ...], list[int]] = GroupCommitter(
            self._commit_message_groups, max_batch=max_message_batch)
        #: the writer thread (``message_writes == "writer"``; it starts with the first write)
        self.writer: MessageWriter[tuple[MessageRow, ...], list[int]] = MessageWriter(
            self._commit_message_groups, max_batch=max_message_batch, name="corvid-store-writer")
        #: the connection of the user turns sent to running sessions (db/send_lane.py)
        self.send_lane = SendLane(self, busy_timeout_ms=busy_timeout_ms, max_batch=max_message_batch)
        #: how many migrations this code knows, and why it must take no new work on the
        #: database as it is now (a release it cannot run with migrated it since it was
        #: opened: :meth:`check_schema`), or None
        self.known_migrations = len(MIGRATIONS if migrations is None else migrations)
        self.schema_refusal: str | None = None
        self.db = open_database(url, busy_timeout_ms=busy_timeout_ms)
        try:
            self.db.connect(reuse_if_open=True)
            if isinstance(self.db, pw.SqliteDatabase) and self.db.database != ":memory:":
                enable_wal(self.db)
                self._file = FileWatch(str(self.db.database), interval_s=file_check_interval_s,
                                       monotonic=self._monotonic)
            self.m = build_models(self.db, now)
            with self._lock:
                if migrations is None and isinstance(self.db, pw.SqliteDatabase) and self.db.database == ":memory:":
                    copy_memory_schema(self.m, self.db)  # then migrate finds nothing to apply
                self.schema_version = migrate(self.m, self.db, migrations, release)
        except pw.OperationalError as exc:
            self.db.close()
            raise StoreError(f"cannot open database {self._safe_url()}: {exc}") from exc
        except pw.DatabaseError as exc:  # "file is not a database": corrupt, truncated or not ours
            self.db.close()
            raise StoreError(f"cannot open database {self._safe_url()}: {exc}; it is damaged or not a "
                             "corvid-actors database: restore it from a backup or move it away (a new one is "
                             "created), or point CORVID_DB_URL / --data-dir elsewhere") from exc
        except BaseException:
            self.db.close()  # a failed open must not leak its connection
            raise

    @property
    def is_sqlite(self) -> bool:
        return isinstance(self.db, pw.SqliteDatabase)

    def _safe_url(self) -> str:
        parsed = urlparse(self.url)
        return self.url.replace(parsed.password, "***") if parsed.password else self.url

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One atomic unit under the store lock (for callers composing several writes)."""
        with self._lock:
            outer = not getattr(self._local, "depth", 0)
            if outer:
                self.check_writable()
            self._local.depth = getattr(self._local, "depth", 0) + 1
            committing = False
            try:
                with self._atomic():
                    yield
                    committing = outer
            except (pw.DatabaseError, pw.InterfaceError) as exc:
                raise self.write_error(exc, committing) from exc
            finally:
                self._local.depth -= 1

    def write_error(self, exc: pw.DatabaseError | pw.InterfaceError, committing: bool) -> Exception:
        """The error a failed write raises to its caller (see :meth:`transaction`)."""
        if committing and self.is_lost(exc):
            # Cut off in COMMIT: the server may have committed or not. Never replay.
            return self._mark_unavailable(
                f"the connection was lost while committing ({one_line(exc)}); "
                "that write may not have been saved")
        if self.is_sqlite and is_file_fault(exc):
            return self._mark_unavailable(f"the database file cannot be written ({one_line(exc)})")
        fault = self._file.look() if self._file is not None else None
        if fault is not None:  # the first error checks the file at once, whatever the interval
            return self._mark_unavailable(fault)
        fenced = FencedWrite.from_database_error(exc)
        if fenced is not None:  # a stale session incarnation's write (db/fencing.py)
            self.figures.fenced()
            return fenced
        # Locked, constraint violated, connection lost: one error type for callers.
        return StoreError(f"database error: {exc}")

    def write_statement(self, sql: str, params: Sequence[Any]) -> Any:
        """Execute one write statement atomically; its cursor. On SQLite outside a
        transaction the statement commits by itself (autocommit: no BEGIN IMMEDIATE and
        COMMIT around it — a single statement takes the write lock when it starts, and
        the busy timeout applies); otherwise it runs in :meth:`transaction`. Errors are
        :meth:`transaction`'s."""
        if not self.is_sqlite or self.in_transaction():
            with self.transaction():
                return self.db.execute_sql(sql, params)
        with self._lock:
            self.check_writable()
            try:
                return self.db.execute_sql(sql, params)
            except (pw.DatabaseError, pw.InterfaceError) as exc:
                raise self.write_error(exc, True) from exc

    # --- availability: the store survives its server ----------------------------------------

    @property
    def available(self) -> bool:
        """False while the store is known to be unreachable (see :attr:`unavailable_reason`)."""
        return self._availability.down is None

    @property
    def unavailable_reason(self) -> str | None:
        """Why the store is unavailable ("the connection to the server was lost: …"), or None."""
        return self._availability.down

    def add_listener(self, listener: Callable[[str | None], None]) -> None:
        """``listener(reason)`` when the store becomes unavailable, ``listener(None)`` when it
        is back. Called on the thread that noticed, possibly under the store lock: keep it
        cheap (tell an actor)."""
        self._availability.add_listener(listener)

    def remove_listener(self, listener: Callable[[str | None], None]) -> None:
        self._availability.remove_listener(listener)

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` (one store operation) surviving a lost connection.

        While the store is down it raises :class:`StoreUnavailableError` at once, except
        once per backoff step, when it tries to reconnect first. A connection found lost
        during ``fn`` is reopened and ``fn`` replayed once — safe, since ``fn``'s
        transaction did not commit (a commit cut off midway is never replayed: it raises).
        Nested calls (an operation inside another, or inside :meth:`transaction`) run
        plainly: the outermost one retries.
        """
        local = self._local
        if getattr(local, "op", False) or getattr(local, "depth", 0):
            return fn(*args, **kwargs)
        local.op = True
        try:
            if self._availability.down is not None:
                self._availability.recover_if_due(self._recover)
            try:
                return fn(*args, **kwargs)
            except (pw.DatabaseError, pw.InterfaceError, StoreError) as exc:
                if not self.is_lost(exc):
                    raise
                first = exc
            logger.warning("store: the connection was lost ({}); reconnecting and retrying once", one_line(first))
            self.figures.replayed()
            with self._lock:
                try:
                    self._reconnect()
                except Exception as exc:  # noqa: BLE001 - any failure to reconnect means "down"
                    raise self._mark_unavailable(f"the connection to the database was lost ({one_line(exc)})") from first
            try:
                return fn(*args, **kwargs)
            except (pw.DatabaseError, pw.InterfaceError, StoreError) as exc:
                if self.is_lost(exc):
                    raise self._mark_unavailable(f"the connection to the database was lost ({one_line(exc)})") from exc
                raise
        finally:
            local.op = False

    def probe(self) -> str | None:
        """Check the store now; returns why it is unavailable, or None when it works.

        While down it tries to recover at once (whatever the backoff); while up it runs a
        trivial query (and, for a SQLite file, the file check), so an outage no write has
        met yet is found too. Cheap: meant for health checks and the runtime's probe timer.
        """
        try:
            if self._availability.down is not None:
                self._availability.recover_if_due(self._recover, now=True)
            else:
                self.run(self._select_one)
        except StoreError as exc:
            return self._availability.down or str(exc)
        except Exception as exc:  # noqa: BLE001 - a probe reports, it does not raise
            return f"store probe failed: {one_line(exc)}"
        return self._availability.down

    def _select_one(self) -> None:
        with self._lock:
            self.check_writable(now=True)
            self.db.execute_sql("SELECT 1").fetchone()

    def check_writable(self, *, now: bool = False) -> None:
        """Raise :class:`StoreUnavailableError` if the SQLite file is gone, replaced or
        read-only: a write into an unlinked file would be acknowledged and lost. Called
        before every write, it looks at the file at most once per ``file_check_interval_s``
        (``now``: whatever the interval; every probe, and the first write error, look at
        once), so a file deleted under the store refuses the writes from its next check
        on — those of the interval before it went into the unlinked file. Free for
        ``:memory:`` and PostgreSQL."""
        if self._file is None:
            return
        fault = self._file.fault(now=now)
        if fault is not None:
            raise self._mark_unavailable(fault)

    def is_lost(self, exc: BaseException) -> bool:
        """Is ``exc`` a lost connection (to reconnect and replay), not an error of the query?"""
        if isinstance(exc, StoreUnavailableError) or self.is_sqlite:
            return False
        cause = exc.__cause__ if isinstance(exc, StoreError) else exc
        if not isinstance(cause, (pw.DatabaseError, pw.InterfaceError)):
            return False
        if isinstance(cause, pw.InterfaceError):
            return True
        if says_connection_lost(cause):
            return True
        conn = open_connection(self.db)
        return conn is not None and bool(getattr(conn, "closed", 0))

    def _reconnect(self) -> None:
        """Drop the connection (whatever state it is in) and open a fresh one. Under the lock.
        A reconnect also rereads the schema's version (:meth:`check_schema`): the outage may
        have been another release's upgrade."""
        drop_connection(self.db, close=True)
        self.db.connect()
        self.db.execute_sql("SELECT 1").fetchone()
        self._check_schema()

    def check_schema(self) -> str | None:
        """Reread the schema's version (one row): why this code must take no new work on the
        database — another release applied a migration it cannot run with (a breaking one,
        or more than one release ahead) since it was opened — or None. Kept in
        :attr:`schema_refusal` (once refused, it stays: only a restart on the right release
        clears it). Called at every heartbeat and every reconnect (issue 36)."""
        return self.run(self._check_schema)

    def _check_schema(self) -> str | None:
        with self._lock:
            refusal = running_schema_verdict(self.db, self.known_migrations)
        if refusal is not None and self.schema_refusal is None:
            logger.error("the database's schema changed under this daemon: {}; it takes no new work", refusal)
            self.schema_refusal = refusal
        return self.schema_refusal

    def _recover(self) -> None:
        """One attempt to end an outage (under the lock; raises while still down)."""
        if self.is_sqlite:
            # No server to reconnect to (and reconnecting would drop a :memory:
            # database): the file must be back, then the connection must answer.
            fault = self._file.look() if self._file is not None else None
            if fault is not None:
                raise StoreUnavailableError(f"store unavailable: {fault}")
            self.db.execute_sql("SELECT 1").fetchone()
        else:
            self._reconnect()

    def _mark_unavailable(self, reason: str) -> StoreUnavailableError:
        """Record the outage (the first reason wins until it is over); the error to raise."""
        return self._availability.mark_unavailable(reason)

    @property
    def sql_cache(self) -> dict[Any, str]:
        """Generated SQL by query shape (see :meth:`_sql`), shared with the write helpers."""
        return self._sql_cache

    @property
    def lock(self) -> threading.RLock:
        """The store's lock: held by whoever uses the connection."""
        return self._lock

    def in_transaction(self) -> bool:
        """Is the calling thread inside :meth:`transaction`?"""
        return bool(getattr(self._local, "depth", 0))

    def _atomic(self) -> Any:
        # SQLite: BEGIN IMMEDIATE takes the write lock up front, waiting (busy_timeout) for
        # another connection's writer. A deferred BEGIN that reads first and writes later
        # fails at once with "database is locked" (SQLITE_BUSY_SNAPSHOT, no busy wait) when
        # another connection committed in between.
        return self.db.atomic("IMMEDIATE") if self.is_sqlite else self.db.atomic()

    # --- fencing (issue 20: several daemons on one PostgreSQL) ---------------------------

    def fence(self, session_id: str, epoch: int) -> None:
        """From now on this store's writes for ``session_id`` (its messages, status and
        usage) carry ``epoch``, the lease epoch its owner claimed: the database refuses
        them with :class:`~corvid_actors.errors.FencedWrite` once a newer owner claimed
        the session (:mod:`corvid_actors.db.fencing`). Thread-safe."""
        self._epochs[session_id] = int(epoch)

    def unfence(self, session_id: str) -> None:
        """Writes for ``session_id`` carry no epoch again (its lease was finished here)."""
        self._epochs.pop(session_id, None)

    def fenced_sessions(self) -> list[str]:
        """The sessions whose writes carry an epoch here (this daemon owns, or owned, them)."""
        return list(self._epochs)

    def epoch_of(self, session_id: str) -> int | None:
        """The epoch this store's writes for ``session_id`` carry (None: none, never refused)."""
        return self._epochs.get(session_id)

    def _sql(self, key: Any, build: Any) -> str:
        """The SQL of a query shape, generated once: ``build()`` returns the peewee query
        (with any placeholder values), and callers pass the real values as parameters in
        the same order. Starting a session reads about ten rows; generating their SQL was
        most of that cost (profile of 1,000 session starts), executing it a small part."""
        sql = self._sql_cache.get(key)
        if sql is None:
            sql = self._sql_cache[key] = build().sql()[0]
        return sql

    def _rows(self, model: Any, sql: str, *params: Any) -> list[Any]:
        """``list(model.raw(sql, *params))`` at a fraction of its cost (see
        :class:`~corvid_actors.db.row_reads.RowReader`). Call with the store lock held."""
        return self._row_reader.read(self.db.execute_sql(sql, params), model, sql)

    def close(self) -> None:
        self.writer.close()  # commits what is queued first: nothing acknowledged is lost
        self.send_lane.close()
        with self._lock:
            if not self.db.is_closed():
                try:
                    self.db.close()
                except Exception as exc:  # noqa: BLE001 - a lost connection (mid-transaction) still closes
                    logger.warning("store: closing the connection failed ({}); dropping it", one_line(exc))
                    drop_connection(self.db, close=True)


    def _commit_message_groups(self, groups: Any) -> list[list[int]]:
        raise NotImplementedError  # the messages mixin commits the groups
