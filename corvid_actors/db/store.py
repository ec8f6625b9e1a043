"""The Store: every database read and write the runtime makes, behind one lock.

One connection per store, shared by all actor threads and serialised by a lock: in
one process there is never "database is locked" (SQLite sees one writer), and
``:memory:`` databases are the same database on every thread. SQLite runs in WAL mode
with a busy timeout for other processes (the CLI reading while the daemon writes), and
every transaction begins IMMEDIATE so that another process's writer makes it wait, never
fail. PostgreSQL works through the same models, by URL (see :mod:`.connect`).

A write returns only after its transaction committed: ``append_message`` returning is
the acknowledgement that the message is durable. Concurrent ``append_message`` calls share
commits (group commit, ``corvid_actors.db.group_commit``): each still returns only after
the transaction holding its row committed.

The store survives its server (see :meth:`Store.run`): an operation that finds the
connection lost reconnects and replays once (nothing was committed, so a replay writes
nothing twice); while the server stays down, operations fail at once with
:class:`~corvid_actors.errors.StoreUnavailableError` ("store unavailable: …") and a
reconnect is tried at most once per backoff step (``store.reconnect_backoff_*``). A SQLite
file deleted, replaced or made read-only under the running store is detected before each
write (the open file's device/inode against the path's, and its write bits) and reported
the same way, so a write is refused rather than acknowledged into a file that is gone.
:attr:`Store.unavailable_reason` says why while it lasts; :meth:`Store.probe` checks now.
"""

from __future__ import annotations

import functools
import json
import os
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import peewee as pw
from loguru import logger

from corvid_actors.clock import RealClock
from corvid_actors.content import UserContent, content_blocks, stored_text
from corvid_actors.db.connect import enable_wal, open_database
from corvid_actors.db.group_commit import GroupCommitter
from corvid_actors.db.message_batches import MessageRow, insert_messages
from corvid_actors.db.migrations import migrate
from corvid_actors.db.models import build_models, new_id
from corvid_actors.errors import ConflictError, NotFoundError, StoreError, StoreUnavailableError
from corvid_actors.loop.prompts import compose_persona_prompt, strip_conversation_history

_HISTORY_TAG = re.compile(r"</?conversation_history>", re.IGNORECASE)
#: most append calls one group commit carries
DEFAULT_MAX_MESSAGE_BATCH = 500
#: most ids one ``… WHERE id IN (…)`` statement carries (SQLite before 3.32 takes 999 parameters)
DEFAULT_ID_CHUNK = 500
#: (first, longest) wait in seconds between reconnect attempts while the server is down
DEFAULT_RECONNECT_BACKOFF_S = (0.5, 5.0)
#: what psycopg2 / psycopg say when the connection is gone (lower case)
_LOST_CONNECTION = (
    "server closed the connection", "connection already closed", "terminating connection",
    "could not connect", "connection refused", "no connection to the server", "connection timed out",
    "could not receive data", "could not send data", "the connection is closed", "connection reset",
    "ssl connection has been closed", "connection not open", "server conn crashed", "eof detected",
)
#: what SQLite says when its file cannot be written any more (lower case)
_SQLITE_FILE_FAULT = ("readonly database", "disk i/o error", "unable to open database file",
                      "database disk image is malformed", "database or disk is full")


def store_op(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run a method of the store (or of an object with a ``store``) through :meth:`Store.run`:
    refused at once while the store is down, replayed once on a lost connection."""

    @functools.wraps(fn)
    def op(self: Any, *args: Any, **kwargs: Any) -> Any:
        store = self if isinstance(self, Store) else self.store
        return store.run(fn, self, *args, **kwargs)

    return op


@dataclass(frozen=True)
class SessionContext:
    """What starting a session needs from the store, resolved in one read."""

    session: Any
    agent: Any | None
    project: Any | None
    persona_prompt: str
    skill_prompt: str
    agent_tool_base: tuple[str, ...] | None
    agent_bundle_tools: tuple[tuple[str, ...], ...]
    project_bundle_tools: tuple[tuple[str, ...], ...]
    project_env: dict[str, str]

    def tool_permissions(self, defaults: Sequence[str]) -> tuple[str, ...] | None:
        """The resolved tool list (seed invariant 4); None means "all defaults"."""
        return resolve_tool_permissions(
            self.agent_tool_base, self.agent_bundle_tools, self.project_bundle_tools, defaults
        )


@dataclass(frozen=True)
class StoredMessage:
    """One row of a session's messages (:meth:`Store.messages`); ``timestamp`` is aware UTC."""

    id: int
    role: str
    content: str
    timestamp: datetime
    cost_usd: float = 0.0


def _aware(value: Any) -> datetime:
    # SQLite hands back naive datetimes (or text); the store writes UTC
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class Store:
    """Typed access to the database. Thread-safe; every method is one transaction."""

    def __init__(self, url: str = "sqlite:///:memory:", *, busy_timeout_ms: int = 30000,
                 group_commit: bool = True, max_message_batch: int = DEFAULT_MAX_MESSAGE_BATCH,
                 reconnect_backoff_s: tuple[float, float] = DEFAULT_RECONNECT_BACKOFF_S,
                 monotonic: Callable[[], float] | None = None) -> None:
        self.url = url
        self._lock = threading.RLock()
        # Availability (see the module docstring): why the store is down, or None.
        self._down: str | None = None
        self._backoff_first, self._backoff_max = reconnect_backoff_s
        self._backoff = self._backoff_first
        self._retry_at = 0.0
        self._monotonic = monotonic or RealClock().monotonic
        self._listeners: list[Callable[[str | None], None]] = []
        self._file: str | None = None
        self._file_id: tuple[int, int] | None = None
        # Which threads are inside transaction(): their appends must join that transaction,
        # not wait for a group commit that needs the lock they hold.
        self._local = threading.local()
        self.group_commit = group_commit
        #: update_session's statement per set of columns: (sql, the fields in parameter order)
        self._update_shapes: dict[Any, tuple[str, tuple[Any, ...]]] = {}
        self._sql_cache: dict[Any, str] = {}  # see _sql
        #: (model, sql) -> how peewee maps that statement's columns to the model (see _rows)
        self._row_shapes: dict[Any, tuple[Any, ...]] = {}
        self._message_commits: GroupCommitter[tuple[MessageRow, ...], list[int]] = GroupCommitter(
            self._commit_message_groups, max_batch=max_message_batch)
        self.db = open_database(url, busy_timeout_ms=busy_timeout_ms)
        try:
            self.db.connect(reuse_if_open=True)
            if self.is_sqlite and self.db.database != ":memory:":
                enable_wal(self.db)
                self._file = str(self.db.database)
                st = os.stat(self._file)
                self._file_id = (st.st_dev, st.st_ino)
            self.m = build_models(self.db)
            with self._lock:
                self.schema_version = migrate(self.m, self.db)
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
                if committing and self._is_lost(exc):
                    # Cut off in COMMIT: the server may have committed or not. Never replay.
                    raise self._mark_unavailable(
                        f"the connection was lost while committing ({_one_line(exc)}); "
                        "that write may not have been saved") from exc
                if self.is_sqlite and self._is_file_fault(exc):
                    raise self._mark_unavailable(f"the database file cannot be written ({_one_line(exc)})") from exc
                # Locked, constraint violated, connection lost: one error type for callers.
                raise StoreError(f"database error: {exc}") from exc
            finally:
                self._local.depth -= 1

    # --- availability: the store survives its server ----------------------------------------

    @property
    def available(self) -> bool:
        """False while the store is known to be unreachable (see :attr:`unavailable_reason`)."""
        return self._down is None

    @property
    def unavailable_reason(self) -> str | None:
        """Why the store is unavailable ("the connection to the server was lost: …"), or None."""
        return self._down

    def add_listener(self, listener: Callable[[str | None], None]) -> None:
        """``listener(reason)`` when the store becomes unavailable, ``listener(None)`` when it
        is back. Called on the thread that noticed, possibly under the store lock: keep it
        cheap (tell an actor)."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[str | None], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

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
            if self._down is not None:
                self._recover_if_due()
            try:
                return fn(*args, **kwargs)
            except (pw.DatabaseError, pw.InterfaceError, StoreError) as exc:
                if not self._is_lost(exc):
                    raise
                first = exc
            logger.warning("store: the connection was lost ({}); reconnecting and retrying once", _one_line(first))
            with self._lock:
                try:
                    self._reconnect()
                except Exception as exc:  # noqa: BLE001 - any failure to reconnect means "down"
                    raise self._mark_unavailable(f"the connection to the database was lost ({_one_line(exc)})") from first
            try:
                return fn(*args, **kwargs)
            except (pw.DatabaseError, pw.InterfaceError, StoreError) as exc:
                if self._is_lost(exc):
                    raise self._mark_unavailable(f"the connection to the database was lost ({_one_line(exc)})") from exc
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
            if self._down is not None:
                with self._lock:
                    self._retry_at = 0.0
                    self._recover_if_due()
            else:
                self.run(self._select_one)
        except StoreError as exc:
            return self._down or str(exc)
        except Exception as exc:  # noqa: BLE001 - a probe reports, it does not raise
            return f"store probe failed: {_one_line(exc)}"
        return self._down

    def _select_one(self) -> None:
        with self._lock:
            self.check_writable()
            self.db.execute_sql("SELECT 1").fetchone()

    def check_writable(self) -> None:
        """Raise :class:`StoreUnavailableError` if the SQLite file is gone, replaced or
        read-only (checked before every write: a write into an unlinked file would be
        acknowledged and lost). Free for ``:memory:`` and PostgreSQL."""
        if self._file is None:
            return
        fault = self._file_fault()
        if fault is not None:
            raise self._mark_unavailable(fault)

    def _file_fault(self) -> str | None:
        assert self._file is not None
        try:
            st = os.stat(self._file)
        except FileNotFoundError:
            return f"the database file {self._file} is gone (deleted or moved under the running store)"
        except OSError as exc:
            return f"the database file {self._file} cannot be checked ({exc})"
        if (st.st_dev, st.st_ino) != self._file_id:
            return f"the database file {self._file} was replaced under the running store"
        # The write bits, not os.access: root may write anything, yet a file made
        # read-only says the operator wants no writes (or the disk is being remounted).
        if not st.st_mode & 0o222 or not os.access(self._file, os.W_OK):
            return f"the database file {self._file} is read-only"
        return None

    def _is_lost(self, exc: BaseException) -> bool:
        """Is ``exc`` a lost connection (to reconnect and replay), not an error of the query?"""
        if isinstance(exc, StoreUnavailableError) or self.is_sqlite:
            return False
        cause = exc.__cause__ if isinstance(exc, StoreError) else exc
        if not isinstance(cause, (pw.DatabaseError, pw.InterfaceError)):
            return False
        if isinstance(cause, pw.InterfaceError):
            return True
        text = str(cause).lower()
        if any(fragment in text for fragment in _LOST_CONNECTION):
            return True
        conn = getattr(self.db._state, "conn", None)
        return conn is not None and bool(getattr(conn, "closed", 0))

    @staticmethod
    def _is_file_fault(exc: BaseException) -> bool:
        text = str(exc).lower()
        return any(fragment in text for fragment in _SQLITE_FILE_FAULT)

    def _reconnect(self) -> None:
        """Drop the connection (whatever state it is in) and open a fresh one. Under the lock."""
        conn = getattr(self.db._state, "conn", None)
        if conn is not None:
            try:
                self.db._close(conn)
            except Exception:  # noqa: BLE001 - a dead connection may refuse to close
                logger.opt(exception=True).debug("store: closing the lost connection failed")
        self.db._state.reset()
        self.db.connect()
        self.db.execute_sql("SELECT 1").fetchone()

    def _recover_if_due(self) -> None:
        """While down: raise at once until the backoff passed, then try to recover."""
        with self._lock:
            reason = self._down
            if reason is None:
                return
            if self._monotonic() < self._retry_at:
                raise StoreUnavailableError(f"store unavailable: {reason}")
            try:
                if self.is_sqlite:
                    # No server to reconnect to (and reconnecting would drop a :memory:
                    # database): the file must be back, then the connection must answer.
                    fault = self._file_fault() if self._file is not None else None
                    if fault is not None:
                        raise StoreUnavailableError(f"store unavailable: {fault}")
                    self.db.execute_sql("SELECT 1").fetchone()
                else:
                    self._reconnect()
            except Exception as exc:
                self._backoff = min(self._backoff * 2, self._backoff_max)
                self._retry_at = self._monotonic() + self._backoff
                if isinstance(exc, StoreUnavailableError):
                    raise
                raise StoreUnavailableError(f"store unavailable: {reason}") from exc
        self._mark_available()

    def _mark_unavailable(self, reason: str) -> StoreUnavailableError:
        """Record the outage (the first reason wins until it is over); the error to raise."""
        with self._lock:
            first = self._down is None
            if first:
                self._down = reason
                self._backoff = self._backoff_first
                self._retry_at = self._monotonic() + self._backoff
            current = self._down
        if first:
            logger.error("store unavailable: {} (writes are refused until it is back)", reason)
            self._notify(reason)
        return StoreUnavailableError(f"store unavailable: {current}")

    def _mark_available(self) -> None:
        with self._lock:
            was, self._down = self._down, None
            self._backoff = self._backoff_first
        if was is not None:
            logger.info("store available again (it was down: {})", was)
            self._notify(None)

    def _notify(self, reason: str | None) -> None:
        for listener in list(self._listeners):
            try:
                listener(reason)
            except Exception:  # noqa: BLE001 - a listener must not break the store
                logger.opt(exception=True).error("store availability listener {} raised", listener)

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
        """``list(model.raw(sql, *params))``, with peewee's column resolution (which field
        each column is, its converter) done once per statement rather than per call: that
        resolution was most of a one-row read's cost (80 µs of a get_session, 5 µs the
        statement). Call with the store lock held."""
        cursor = self.db.execute_sql(sql, params)
        shape = self._row_shapes.get((model, sql))
        if shape is None:
            wrapper = pw.ModelObjectCursorWrapper(cursor, model, [], model)
            wrapper.initialize()  # reads cursor.description only
            shape = self._row_shapes[(model, sql)] = (
                tuple(wrapper.unique_columns), tuple(wrapper.no_convert), tuple(wrapper.convert),
                tuple(wrapper.converters))
        columns, no_convert, convert, converters = shape
        out = []
        for row in cursor.fetchall():
            data = {columns[i]: row[i] for i in no_convert}
            for i in convert:
                data[columns[i]] = converters[i](row[i])
            obj = model(__no_default__=1, **data)
            obj._dirty.clear()
            out.append(obj)
        return out

    def close(self) -> None:
        with self._lock:
            if not self.db.is_closed():
                try:
                    self.db.close()
                except Exception as exc:  # noqa: BLE001 - a lost connection (mid-transaction) still closes
                    logger.warning("store: closing the connection failed ({}); dropping it", _one_line(exc))
                    conn = getattr(self.db._state, "conn", None)
                    try:
                        if conn is not None:
                            self.db._close(conn)
                    except Exception:  # noqa: BLE001 - it is gone either way
                        pass
                    self.db._state.reset()

    # --- projects, agents, personas, bundles -------------------------------------------

    @store_op
    def create_project(self, name: str, working_dir: str | Path, *, env_vars: dict[str, str] | None = None,
                       description: str = "") -> Any:
        with self.transaction():
            return self.m.Project.create(
                name=name, working_dir=str(working_dir), env_vars=json.dumps(env_vars or {}),
                description=description,
            )

    @store_op
    def get_project(self, project_id: str) -> Any | None:
        P = self.m.Project
        sql = self._sql("project_by_id", lambda: P.select().where(P.id == ""))
        with self._lock:
            rows = self._rows(P, sql, project_id)
        return rows[0] if rows else None

    @store_op
    def create_agent(self, name: str, **fields: Any) -> Any:
        if "tool_permissions" in fields and fields["tool_permissions"] is not None:
            fields["tool_permissions"] = json.dumps(list(fields["tool_permissions"]))
        with self.transaction():
            return self.m.Agent.create(name=name, **fields)

    @store_op
    def ensure_agent(self, name: str, **fields: Any) -> Any:
        """The agent called ``name`` (case-insensitive), created with ``fields`` when there is
        none: get-or-create, so a program can run this at every start.

        An existing agent is never changed: when one of the given ``fields`` differs from
        what is stored, this raises :class:`~corvid_actors.errors.ConflictError` naming each
        difference (change the agent with :meth:`update_agent`, or use another name)."""
        with self._lock:
            agent = self.m.Agent.get_or_none(pw.fn.LOWER(self.m.Agent.name) == name.lower())
            if agent is None:
                try:
                    return self.create_agent(name, **fields)
                except StoreError:  # another process may have created it just now
                    agent = self.m.Agent.get_or_none(pw.fn.LOWER(self.m.Agent.name) == name.lower())
                    if agent is None:
                        raise
        differences = []
        for key, wanted in fields.items():
            stored = getattr(agent, key)
            if key == "tool_permissions":
                stored = None if stored is None else json.loads(stored)
                wanted = None if wanted is None else list(wanted)
            elif key == "default_project":
                stored = agent.default_project_id
                wanted = getattr(wanted, "id", wanted)
            if stored != wanted:
                differences.append(f"{key} is {stored!r}, not {wanted!r}")
        if differences:
            raise ConflictError(f"agent {agent.name!r} already exists with other settings ({'; '.join(differences)}); "
                                "nothing was changed: update it with store.update_agent(agent_id, ...) "
                                "or use another name")
        return agent

    @store_op
    def update_agent(self, agent_id: str, **fields: Any) -> Any:
        """Change an agent's settings; returns the updated row."""
        if "tool_permissions" in fields and fields["tool_permissions"] is not None:
            fields["tool_permissions"] = json.dumps(list(fields["tool_permissions"]))
        with self.transaction():
            if self.m.Agent.update(**fields, updated_at=self.m.Agent.updated_at.default()).where(
                    self.m.Agent.id == agent_id).execute() == 0:
                raise NotFoundError(f"no agent {agent_id!r}")
            return self.m.Agent.get_by_id(agent_id)

    @store_op
    def get_agent(self, agent_id: str) -> Any | None:
        A = self.m.Agent
        sql = self._sql("agent_by_id", lambda: A.select().where(A.id == ""))
        with self._lock:
            rows = self._rows(A, sql, agent_id)
        return rows[0] if rows else None

    @store_op
    def find_agent(self, id_or_name: str) -> Any | None:
        """By id, else by case-insensitive name."""
        with self._lock:
            agent = self.m.Agent.get_or_none(self.m.Agent.id == id_or_name)
            if agent is None:
                agent = self.m.Agent.get_or_none(pw.fn.LOWER(self.m.Agent.name) == id_or_name.lower())
            return agent

    @store_op
    def list_agents(self) -> list[Any]:
        with self._lock:
            return list(self.m.Agent.select().order_by(self.m.Agent.name))

    @store_op
    def create_persona(self, name: str, *, archetype: str = "custom", traits: Sequence[str] = (),
                       background: str = "", voice_guidelines: str = "",
                       example_messages: Sequence[str] = ()) -> Any:
        with self.transaction():
            return self.m.Persona.create(
                name=name, archetype=archetype, traits=json.dumps(list(traits)), background=background,
                voice_guidelines=voice_guidelines, example_messages=json.dumps(list(example_messages)),
            )

    @store_op
    def assign_persona(self, agent_id: str, persona_id: str, sort_order: int = 0) -> None:
        with self.transaction():
            self.m.AgentPersona.create(agent=agent_id, persona=persona_id, sort_order=sort_order)

    @store_op
    def create_skill_bundle(self, name: str, *, tools: Sequence[str] = (), prompt_additions: str = "",
                            description: str = "") -> Any:
        with self.transaction():
            return self.m.SkillBundle.create(
                name=name, tools=json.dumps(list(tools)), prompt_additions=prompt_additions,
                description=description,
            )

    @store_op
    def assign_agent_skill(self, agent_id: str, bundle_id: str, sort_order: int = 0) -> None:
        with self.transaction():
            self.m.AgentSkill.create(agent=agent_id, bundle=bundle_id, sort_order=sort_order)

    @store_op
    def assign_project_skill(self, project_id: str, bundle_id: str, sort_order: int = 0) -> None:
        with self.transaction():
            self.m.ProjectSkill.create(project=project_id, bundle=bundle_id, sort_order=sort_order)

    # --- sessions -----------------------------------------------------------------------

    @store_op
    def create_session(self, *, agent_id: str | None = None, project_id: str | None = None,
                       source: str = "web", name: str = "", initial_prompt: str = "",
                       participant: str = "", channel: str = "", council_role: str | None = None,
                       depth: int = 1, session_id: str | None = None) -> Any:
        with self.transaction():
            return self.m.Session.create(
                id=session_id or new_id(), agent=agent_id, project=project_id, source=source, name=name,
                initial_prompt=initial_prompt, participant=participant, channel=channel,
                council_role=council_role, depth=depth,
            )

    @store_op
    def get_session(self, session_id: str) -> Any | None:
        # The hottest read of the runtime: a precompiled statement skips peewee's
        # per-call SQL generation (most of its cost; see bench/simtime).
        sql = getattr(self, "_session_by_id_sql", None)
        if sql is None:
            sql = self._session_by_id_sql = f'SELECT * FROM "sessions" WHERE "id" = {self.db.param}'
        with self._lock:
            rows = self._rows(self.m.Session, sql, session_id)
        return rows[0] if rows else None

    def require_session(self, session_id: str) -> Any:
        row = self.get_session(session_id)
        if row is None:
            raise NotFoundError(f"no session with id {session_id!r}")
        return row

    @store_op
    def update_session(self, session_id: str, **fields: Any) -> int:
        S = self.m.Session
        fields.setdefault("updated_at", S.updated_at.default())
        if any(isinstance(value, pw.Node) for value in fields.values()):
            with self.transaction():
                return S.update(**fields).where(S.id == session_id).execute()
        # Plain values: the statement's SQL is generated once per set of columns, and the
        # values converted as peewee converts them (each field's db_value), in the order
        # peewee wrote the columns.
        key = ("update_session", frozenset(fields))
        shape = self._update_shapes.get(key)
        if shape is None:
            sql, params = S.update(**fields).where(S.id == session_id).sql()
            by_column = {S._meta.combined[name].column_name: S._meta.combined[name] for name in fields}
            columns = re.findall(r'"(\w+)" = ' + re.escape(self.db.param), sql.split(" WHERE ")[0])
            if sorted(columns) != sorted(by_column) or len(params) != len(columns) + 1:  # pragma: no cover
                with self.transaction():
                    return S.update(**fields).where(S.id == session_id).execute()
            shape = self._update_shapes[key] = (sql, tuple(by_column[c] for c in columns))
        sql, ordered = shape
        values = {S._meta.combined[name].column_name: value for name, value in fields.items()}
        args = [field.db_value(values[field.column_name]) for field in ordered]
        with self.transaction():
            return self.db.execute_sql(sql, (*args, session_id)).rowcount

    @store_op
    def add_session_usage(self, session_id: str, *, cost_usd: float = 0.0, turns: int = 0,
                          answered: bool = False) -> None:
        """Add a turn's cost and count; ``answered``: the turn succeeded, so one open turn
        (see :meth:`open_turn`) is closed."""
        S = self.m.Session
        with self.transaction():
            fields: dict[Any, Any] = {S.total_cost_usd: S.total_cost_usd + cost_usd,
                                      S.cumulative_turns: S.cumulative_turns + turns,
                                      S.updated_at: S.updated_at.default()}
            if answered:
                fields[S.open_turns] = pw.Case(None, [(S.open_turns > 1, S.open_turns - 1)], 0)
            S.update(fields).where(S.id == session_id).execute()

    @store_op
    def list_sessions(self, *, statuses: Sequence[str] | None = None, limit: int = 500) -> list[Any]:
        S = self.m.Session
        with self._lock:
            query = S.select().order_by(S.updated_at.desc()).limit(limit)
            if statuses:
                query = query.where(S.status.in_(list(statuses)))
            return list(query)

    @store_op
    def delete_session(self, session_id: str) -> bool:
        """Delete the session row and its messages (one transaction); False if there was none.

        The store does not know what is running: stop the session first
        (``Runtime.stop_process``), or its next write fails.
        """
        S, M = self.m.Session, self.m.SessionMessage
        with self.transaction():
            M.delete().where(M.session == session_id).execute()
            return bool(S.delete().where(S.id == session_id).execute())

    @store_op
    def reset_stale_sessions(self) -> list[str]:
        """Sessions left running/loading by a dead runtime → idle, pid NULL, marked for resume."""
        S = self.m.Session
        with self.transaction():
            ids = [row.id for row in S.select(S.id).where(S.status.in_(["running", "loading"]))]
            if ids:
                S.update(status="idle", pid=None, restart_pending=True,
                         updated_at=S.updated_at.default()).where(S.id.in_(ids)).execute()
            return ids

    @store_op
    def take_restart_pending(self) -> list[str]:
        """Ids of sessions marked for resume; the marks are cleared."""
        S = self.m.Session
        with self.transaction():
            ids = [row.id for row in S.select(S.id).where(S.restart_pending == True)]  # noqa: E712
            if ids:
                S.update(restart_pending=False).where(S.id.in_(ids)).execute()
            return ids

    @store_op
    def reset_ghost_sessions(self, live: Sequence[str]) -> list[str]:
        """Rows left running/loading with no live incarnation (ids not in ``live``) → reset
        as at start-up: idle, pid NULL, marked for resume. Returns their ids."""
        S = self.m.Session
        keep = set(live)
        with self.transaction():
            ids = [row.id for row in S.select(S.id).where(S.status.in_(["running", "loading"]))
                   if row.id not in keep]
            if ids:
                S.update(status="idle", pid=None, restart_pending=True,
                         updated_at=S.updated_at.default()).where(S.id.in_(ids)).execute()
            return ids

    @store_op
    def mark_for_resume(self, session_ids: Sequence[str], *, stopped: bool = False,
                        chunk: int = DEFAULT_ID_CHUNK) -> int:
        """Mark sessions for resume (``restart_pending``) as a shutdown does; ``stopped``:
        also stop them (status ``stopped``, pid NULL). The same rows as
        ``update_session(sid, restart_pending=True)`` (then ``pid=None, status="stopped"``)
        per session, but one ``UPDATE … WHERE id IN (…)`` per ``chunk`` ids, one transaction
        each: 10,000 sessions are 20 statements, not 20,000 transactions. Unknown ids are
        skipped. Returns how many rows changed."""
        S = self.m.Session
        fields: dict[str, Any] = {"restart_pending": True}
        if stopped:
            fields.update(pid=None, status="stopped")
        ids = list(dict.fromkeys(session_ids))
        changed = 0
        for start in range(0, len(ids), chunk):
            with self.transaction():
                changed += S.update(**fields, updated_at=S.updated_at.default()).where(
                    S.id.in_(ids[start:start + chunk])).execute()
        return changed

    @store_op
    def open_turn(self, session_id: str, *, total_turns: int) -> None:
        """A user turn was delivered: count it open (until its result) and record the
        session's turn count."""
        S = self.m.Session
        with self.transaction():
            S.update(open_turns=S.open_turns + 1, total_turns=total_turns,
                     updated_at=S.updated_at.default()).where(S.id == session_id).execute()

    # --- messages -------------------------------------------------------------------------

    def append_message(self, session_id: str, role: str, content: UserContent, *, cost_usd: float = 0.0) -> int:
        """Persist one message (nested ``<conversation_history>`` blocks stripped); returns its id.

        ``content`` may be multimodal content blocks (:mod:`corvid_actors.content`): they
        are kept as given in ``content_blocks`` (read back with :meth:`message_contents`)
        and ``content`` holds their text, images as placeholders. Raises
        InvalidContentError for blocks that are not valid.
        """
        if not isinstance(content, str):
            return self._append_blocks(session_id, role, content_blocks(content), cost_usd)
        if _HISTORY_TAG.search(content):
            # The resume prompt's own history block must not be stored, or the next
            # resume nests it (seed). Nested and unclosed blocks go whole.
            content = strip_conversation_history(content)
        row: MessageRow = (session_id, role, content, cost_usd)
        if self.group_commit and not self.in_transaction():
            return self._message_commits.submit((row,))[0]
        return self.run(insert_messages, self, [row])[0]

    @store_op
    def _append_blocks(self, session_id: str, role: str, blocks: tuple[dict[str, Any], ...],
                       cost_usd: float) -> int:
        # Rare (a user's picture), so a plain insert rather than the group commit; the
        # caller waits for it as it waits for a group commit, so its order holds.
        for block in blocks:
            if block.get("type") == "text" and _HISTORY_TAG.search(block["text"]):
                block["text"] = strip_conversation_history(block["text"])
        M = self.m.SessionMessage
        with self.transaction():
            return int(M.insert(session=session_id, role=role, content=stored_text(blocks), cost_usd=cost_usd,
                                content_blocks=json.dumps(list(blocks), ensure_ascii=False)).execute())

    @store_op
    def message_contents(self, session_id: str, limit: int, roles: Sequence[str] = ("user", "assistant")
                         ) -> list[tuple[str, UserContent]]:
        """Like :meth:`recent_messages`, with multimodal messages as their content blocks
        (a list of dicts, as given) and the others as strings."""
        M = self.m.SessionMessage
        with self._lock:
            rows = list(
                M.select(M.role, M.content, M.content_blocks)
                .where((M.session == session_id) & (M.role.in_(list(roles))))
                .order_by(M.id.desc())
                .limit(limit)
            )
        return [(r.role, json.loads(r.content_blocks) if r.content_blocks else r.content) for r in reversed(rows)]

    def append_messages(self, messages: Sequence[tuple[str, str, str]]) -> list[int]:
        """Persist ``(session_id, role, content)`` messages atomically (all or none, e.g. a
        turn's messages); their ids in order. Group-committed like :meth:`append_message`."""
        rows: tuple[MessageRow, ...] = tuple(
            (sid, role, strip_conversation_history(content) if _HISTORY_TAG.search(content) else content, 0.0)
            for sid, role, content in messages)
        if not rows:
            return []
        if self.group_commit and not self.in_transaction():
            return self._message_commits.submit(rows)
        return self.run(insert_messages, self, rows)

    @store_op
    def _commit_message_groups(self, groups: Sequence[tuple[MessageRow, ...]]) -> list[list[int]]:
        ids = insert_messages(self, [row for group in groups for row in group])
        out, start = [], 0
        for group in groups:
            out.append(ids[start:start + len(group)])
            start += len(group)
        return out

    @store_op
    def recent_messages(self, session_id: str, limit: int, roles: Sequence[str] = ("user", "assistant")
                        ) -> list[tuple[str, str]]:
        """The last ``limit`` messages with these roles, oldest first, as (role, content)."""
        M = self.m.SessionMessage
        roles = tuple(roles)
        sql = self._sql(("recent_messages", len(roles)), lambda: (
            M.select(M.role, M.content).where((M.session == "") & (M.role.in_(list(roles))))
            .order_by(M.id.desc()).limit(1)))
        with self._lock:
            rows = self.db.execute_sql(sql, (session_id, *roles, limit)).fetchall()
        return [(role, content) for role, content in reversed(rows)]

    @store_op
    def last_message_role(self, session_id: str, roles: Sequence[str] = ("user", "assistant")) -> str | None:
        """The role of the session's newest message among ``roles`` (None: there is none)."""
        M = self.m.SessionMessage
        roles = tuple(roles)
        sql = self._sql(("last_message_role", len(roles)), lambda: (
            M.select(M.role).where((M.session == "") & (M.role.in_(list(roles)))).order_by(M.id.desc()).limit(1)))
        with self._lock:
            row = self.db.execute_sql(sql, (session_id, *roles, 1)).fetchone()
        return row[0] if row is not None else None

    @store_op
    def delete_messages(self, session_id: str) -> int:
        """Delete every message of the session; returns how many."""
        M = self.m.SessionMessage
        with self.transaction():
            return M.delete().where(M.session == session_id).execute()

    @store_op
    def delete_message(self, message_id: int) -> int:
        """Delete one message by id (an append whose delivery was refused)."""
        M = self.m.SessionMessage
        with self.transaction():
            return M.delete().where(M.id == message_id).execute()

    @store_op
    def messages(self, session_id: str) -> list[StoredMessage]:
        """Every stored message of the session — all roles (user, assistant, system and the
        runtime's own), in the order they were written — with id, timestamp and cost."""
        M = self.m.SessionMessage
        with self._lock:
            rows = list(M.select(M.id, M.role, M.content, M.cost_usd, M.timestamp)
                        .where(M.session == session_id).order_by(M.id))
        return [StoredMessage(r.id, r.role, r.content, _aware(r.timestamp), r.cost_usd) for r in rows]

    @store_op
    def count_messages(self, session_id: str) -> int:
        M = self.m.SessionMessage
        with self._lock:
            return M.select().where(M.session == session_id).count()

    @store_op
    def mcp_server_configs(self, agent_id: str | None) -> list[Any]:
        """The stored MCP server configs a session of ``agent_id`` sees: the global ones
        (no agent) and the agent's own. Read at every session start (precompiled)."""
        C = self.m.McpServerConfig
        if agent_id is None:
            sql = self._sql("mcp_global", lambda: C.select().where(C.agent.is_null()))
            params: tuple[Any, ...] = ()
        else:
            sql = self._sql("mcp_for_agent", lambda: C.select().where(C.agent.is_null() | (C.agent == "")))
            params = (agent_id,)
        with self._lock:
            return self._rows(C, sql, *params)

    # --- session context ------------------------------------------------------------------

    @store_op
    def session_context(self, session_id: str) -> SessionContext:
        """Session, agent, project, persona/skill prompts and resolved tool permissions."""
        m = self.m
        personas_sql = self._sql("agent_personas", lambda: (
            m.Persona.select().join(m.AgentPersona).where(m.AgentPersona.agent == "")
            .order_by(m.AgentPersona.sort_order)))
        agent_bundles_sql = self._sql("agent_bundles", lambda: (
            m.SkillBundle.select().join(m.AgentSkill).where(m.AgentSkill.agent == "")
            .order_by(m.AgentSkill.sort_order)))
        project_bundles_sql = self._sql("project_bundles", lambda: (
            m.SkillBundle.select().join(m.ProjectSkill).where(m.ProjectSkill.project == "")
            .order_by(m.ProjectSkill.sort_order)))
        with self._lock:
            session = self.require_session(session_id)
            agent = self.get_agent(session.agent_id) if session.agent_id else None
            project = self.get_project(session.project_id) if session.project_id else None
            persona_prompt = ""
            agent_bundles: list[Any] = []
            if agent is not None:
                personas = self._rows(m.Persona, personas_sql, agent.id)
                persona_prompt = compose_persona_prompt(personas) if personas else ""
                agent_bundles = self._rows(m.SkillBundle, agent_bundles_sql, agent.id)
            project_bundles: list[Any] = []
            if project is not None:
                project_bundles = self._rows(m.SkillBundle, project_bundles_sql, project.id)
        skill_prompt = "\n\n".join(
            b.prompt_additions for b in [*agent_bundles, *project_bundles] if b.prompt_additions
        )
        base = (
            tuple(json.loads(agent.tool_permissions))
            if agent is not None and agent.tool_permissions is not None else None
        )
        env = json.loads(project.env_vars) if project is not None else {}
        return SessionContext(
            session, agent, project, persona_prompt, skill_prompt, base,
            tuple(tuple(json.loads(b.tools)) for b in agent_bundles),
            tuple(tuple(json.loads(b.tools)) for b in project_bundles),
            env,
        )


def _one_line(exc: BaseException) -> str:
    """An exception as one short line for logs and health (drivers add newlines and hints)."""
    text = " ".join(str(exc).split())
    return text[:300] if text else type(exc).__name__


def resolve_tool_permissions(
    agent_base: Sequence[str] | None,
    agent_bundle_tools: Sequence[Sequence[str]],
    project_bundle_tools: Sequence[Sequence[str]],
    defaults: Sequence[str] = (),
) -> tuple[str, ...] | None:
    """Seed invariant 4: agent base → ∪ agent bundle tools → ∪ project bundle tools
    (the latter only when the agent has no explicit list). With no explicit list, bundle
    tools extend ``defaults``. None means "the defaults, unchanged"."""
    result: list[str] | None = list(agent_base) if agent_base is not None else None

    def merge(tools: Sequence[str]) -> None:
        nonlocal result
        if result is None:
            result = list(defaults)
        for name in tools:
            if name not in result:
                result.append(name)

    for tools in agent_bundle_tools:
        if tools:
            merge(tools)
    if agent_base is None:
        for tools in project_bundle_tools:
            if tools:
                merge(tools)
    return tuple(result) if result is not None else None
