"""The store's session rows: create, read, update, usage and turn counts, and the
start-up/shutdown marks (stale, ghost and restart-pending sessions)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import peewee as pw

from corvid_actors.db.models import SessionStatus, new_id
from corvid_actors.db.store_base import StoreBase, store_op
from corvid_actors.errors import NotFoundError

#: most ids one ``… WHERE id IN (…)`` statement carries (SQLite before 3.32 takes 999 parameters)
DEFAULT_ID_CHUNK = 500


class SessionRows(StoreBase):
    """Reads and writes of ``sessions`` (a part of :class:`~corvid_actors.db.store.Store`)."""

    # --- sessions -----------------------------------------------------------------------

    @store_op
    def create_session(self, *, agent_id: str | None = None, project_id: str | None = None,
                       source: str = "web", name: str = "", initial_prompt: str = "",
                       participant: str = "", channel: str = "", council_role: str | None = None,
                       depth: int = 1, session_id: str | None = None) -> Any:
        S = self.m.Session
        # The row as Session.create makes it (defaults included), inserted with a statement
        # generated once per set of columns: peewee generated this INSERT anew at ~170 µs
        # a session (the simulated day's 100 sessions: 5 % of its time).
        row = S(id=session_id or new_id(), agent=agent_id, project=project_id, source=source, name=name,
                initial_prompt=initial_prompt, participant=participant, channel=channel,
                council_role=council_role, depth=depth)
        data = row.__data__
        key = ("create_session", tuple(data))
        shape = self._update_shapes.get(key)
        if shape is None:
            sql, params = S.insert(**data).sql()
            columns = re.findall(r'"(\w+)"', sql[sql.index("(") + 1:sql.index(")")])
            by_column = S._meta.columns
            if sorted(columns) != sorted(f.column_name for f in map(S._meta.combined.get, data)) \
                    or len(params) != len(columns):  # pragma: no cover - a peewee that writes it otherwise
                with self.transaction():
                    return S.create(**{name: data[name] for name in data})
            shape = self._update_shapes[key] = (sql, tuple(by_column[c] for c in columns))
        sql, ordered = shape
        args = [field.db_value(data[field.name]) for field in ordered]
        self.write_statement(sql, args)
        row._dirty.clear()  # saved, as create leaves it
        return row

    @store_op
    def newest_session_id(self, *, source: str, channel: str, agent_id: str | None = None,
                          name: str | None = None, participant: str | None = None) -> str | None:
        """The id of the newest session of ``channel`` and ``source`` with the other fields
        given (a chat bridge's conversation, an agent's session for a sender), or None.
        A range of the index on (channel, source, created_at): the other channels' sessions
        are never read."""
        S = self.m.Session
        where = (S.channel == channel) & (S.source == source)
        if agent_id is not None:
            where &= S.agent == agent_id
        if name is not None:
            where &= S.name == name
        if participant is not None:
            where &= S.participant == participant
        sql, params = S.select(S.id).where(where).order_by(S.created_at.desc()).limit(1).sql()
        with self._lock:
            row = self.db.execute_sql(sql, params).fetchone()
        return None if row is None else str(row[0])

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
        epoch = self.epoch_of(session_id)
        if epoch is not None:  # fenced (issue 20): the trigger refuses it for a stale owner
            fields.setdefault("writer_epoch", epoch)
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
        return int(self.write_statement(sql, (*args, session_id)).rowcount)

    @store_op
    def add_session_usage(self, session_id: str, *, cost_usd: float = 0.0, turns: int = 0,
                          answered: bool = False) -> None:
        """Add a turn's cost and count; ``answered``: the turn succeeded, so one open turn
        (see :meth:`open_turn`) is closed."""
        # once per turn: written by hand (peewee generated this UPDATE anew at ~1 ms a call)
        S, p = self.m.Session, self.db.param
        epoch = self.epoch_of(session_id)
        key = ("add_session_usage", answered, epoch is not None)
        sql = self._sql_cache.get(key)
        if sql is None:
            close_turn = (', "open_turns" = CASE WHEN "open_turns" > 1 THEN "open_turns" - 1 ELSE 0 END'
                          if answered else "")
            fenced = f', "writer_epoch" = {p}' if epoch is not None else ""
            sql = self._sql_cache[key] = (
                f'UPDATE "{S._meta.table_name}" SET "total_cost_usd" = ("total_cost_usd" + {p}), '
                f'"cumulative_turns" = ("cumulative_turns" + {p}), "updated_at" = {p}{close_turn}{fenced} '
                f'WHERE "id" = {p}')
        stamp = S.updated_at.db_value(S.updated_at.default())
        params: tuple[Any, ...] = (float(cost_usd), int(turns), stamp)
        if epoch is not None:
            params += (epoch,)
        self.write_statement(sql, (*params, session_id))

    @store_op
    def list_sessions(self, *, statuses: Sequence[str] | None = None, limit: int = 500) -> list[Any]:
        S = self.m.Session
        with self._lock:
            query = S.select().order_by(S.updated_at.desc()).limit(limit)
            if statuses:
                query = query.where(S.status.in_(list(statuses)))
            return list(query)

    @store_op
    def page_sessions(self, *, limit: int, status: str | None = None, agent_id: str | None = None,
                      source: str | None = None, query: str | None = None,
                      after: tuple[Any, str] | None = None) -> list[Any]:
        """One page of sessions, most recently active first (``updated_at``, then ``id``,
        both descending): at most ``limit`` rows strictly after ``after`` — the
        ``(updated_at, id)`` of the previous page's last row (keyset paging: a walk down
        the index ``(updated_at, id)``, or ``(status|agent_id|source, updated_at, id)``
        with that filter, never an offset). ``query`` keeps the rows whose id, name or
        participant contains it (filtered on the walk, so a rare match reads further)."""
        S = self.m.Session
        with self._lock:
            rows = S.select().order_by(S.updated_at.desc(), S.id.desc()).limit(limit)
            if status is not None:
                rows = rows.where(S.status == status)
            if agent_id is not None:
                rows = rows.where(S.agent == agent_id)
            if source is not None:
                rows = rows.where(S.source == source)
            if query:
                rows = rows.where(S.id.contains(query) | S.name.contains(query) | S.participant.contains(query))
            if after is not None:
                rows = rows.where(pw.Tuple(S.updated_at, S.id) < pw.Tuple(*after))
            return list(rows)

    @store_op
    def count_sessions_by_status(self) -> dict[str, int]:
        """How many session rows have each status (the metrics' ``corvid_sessions``)."""
        S = self.m.Session
        with self._lock:
            rows = S.select(S.status, pw.fn.COUNT(S.id).alias("n")).group_by(S.status).tuples()
            return {status: int(n) for status, n in rows}

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
            ids = [row.id for row in S.select(S.id).where(S.status.in_([SessionStatus.RUNNING, SessionStatus.LOADING]))]
            if ids:
                S.update(status=SessionStatus.IDLE, pid=None, restart_pending=True,
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
        # every prune sweep: the SELECT is generated once
        running = self._sql("running_ids", lambda: S.select(S.id).where(S.status.in_(["", ""])))
        # Nearly every sweep finds no ghost: a plain read then, not a write transaction (on
        # SQLite BEGIN IMMEDIATE takes the write lock); with candidates, read again and reset
        # them atomically as before.
        with self._lock:
            self.check_writable()  # a sweep notices a deleted or read-only file, as before
            candidates = [row[0] for row in self.db.execute_sql(running, (SessionStatus.RUNNING, SessionStatus.LOADING))
                          if row[0] not in keep]
        if not candidates:
            return []
        with self.transaction():
            ids = [row[0] for row in self.db.execute_sql(running, (SessionStatus.RUNNING, SessionStatus.LOADING))
                   if row[0] not in keep]
            if ids:
                S.update(status=SessionStatus.IDLE, pid=None, restart_pending=True,
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
            fields.update(pid=None, status=SessionStatus.STOPPED)
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
        # once per user turn of a running session: written by hand, as add_session_usage
        # (peewee generated this UPDATE anew: 15 % of a turn's CPU in a simulated day of
        # sessions that stay running)
        S, p = self.m.Session, self.db.param
        epoch = self.epoch_of(session_id)
        key = ("open_turn", epoch is not None)
        sql = self._sql_cache.get(key)
        if sql is None:
            fenced = f', "writer_epoch" = {p}' if epoch is not None else ""
            sql = self._sql_cache[key] = (
                f'UPDATE "{S._meta.table_name}" SET "open_turns" = ("open_turns" + 1), "total_turns" = {p}, '
                f'"updated_at" = {p}{fenced} WHERE "id" = {p}')
        params: tuple[Any, ...] = (int(total_turns), S.updated_at.db_value(S.updated_at.default()))
        if epoch is not None:
            params += (epoch,)
        self.write_statement(sql, (*params, session_id))
