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
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import peewee as pw

from corvid_actors.content import UserContent, content_blocks, stored_text
from corvid_actors.db.connect import enable_wal, open_database
from corvid_actors.db.group_commit import GroupCommitter
from corvid_actors.db.message_batches import MessageRow, insert_messages
from corvid_actors.db.migrations import migrate
from corvid_actors.db.models import build_models, new_id
from corvid_actors.errors import ConflictError, NotFoundError, StoreError
from corvid_actors.loop.prompts import compose_persona_prompt, strip_conversation_history

_HISTORY_TAG = re.compile(r"</?conversation_history>", re.IGNORECASE)
#: most append calls one group commit carries
DEFAULT_MAX_MESSAGE_BATCH = 500


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
                 group_commit: bool = True, max_message_batch: int = DEFAULT_MAX_MESSAGE_BATCH) -> None:
        self.url = url
        self._lock = threading.RLock()
        # Which threads are inside transaction(): their appends must join that transaction,
        # not wait for a group commit that needs the lock they hold.
        self._local = threading.local()
        self.group_commit = group_commit
        self._message_commits: GroupCommitter[tuple[MessageRow, ...], list[int]] = GroupCommitter(
            self._commit_message_groups, max_batch=max_message_batch)
        self.db = open_database(url, busy_timeout_ms=busy_timeout_ms)
        try:
            self.db.connect(reuse_if_open=True)
            if self.is_sqlite and self.db.database != ":memory:":
                enable_wal(self.db)
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
            self._local.depth = getattr(self._local, "depth", 0) + 1
            try:
                with self._atomic():
                    yield
            except pw.DatabaseError as exc:
                # Locked, constraint violated, connection lost: one error type for callers.
                raise StoreError(f"database error: {exc}") from exc
            finally:
                self._local.depth -= 1

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

    def close(self) -> None:
        with self._lock:
            if not self.db.is_closed():
                self.db.close()

    # --- projects, agents, personas, bundles -------------------------------------------

    def create_project(self, name: str, working_dir: str | Path, *, env_vars: dict[str, str] | None = None,
                       description: str = "") -> Any:
        with self.transaction():
            return self.m.Project.create(
                name=name, working_dir=str(working_dir), env_vars=json.dumps(env_vars or {}),
                description=description,
            )

    def get_project(self, project_id: str) -> Any | None:
        with self._lock:
            return self.m.Project.get_or_none(self.m.Project.id == project_id)

    def create_agent(self, name: str, **fields: Any) -> Any:
        if "tool_permissions" in fields and fields["tool_permissions"] is not None:
            fields["tool_permissions"] = json.dumps(list(fields["tool_permissions"]))
        with self.transaction():
            return self.m.Agent.create(name=name, **fields)

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

    def update_agent(self, agent_id: str, **fields: Any) -> Any:
        """Change an agent's settings; returns the updated row."""
        if "tool_permissions" in fields and fields["tool_permissions"] is not None:
            fields["tool_permissions"] = json.dumps(list(fields["tool_permissions"]))
        with self.transaction():
            if self.m.Agent.update(**fields, updated_at=self.m.Agent.updated_at.default()).where(
                    self.m.Agent.id == agent_id).execute() == 0:
                raise NotFoundError(f"no agent {agent_id!r}")
            return self.m.Agent.get_by_id(agent_id)

    def get_agent(self, agent_id: str) -> Any | None:
        with self._lock:
            return self.m.Agent.get_or_none(self.m.Agent.id == agent_id)

    def find_agent(self, id_or_name: str) -> Any | None:
        """By id, else by case-insensitive name."""
        with self._lock:
            agent = self.m.Agent.get_or_none(self.m.Agent.id == id_or_name)
            if agent is None:
                agent = self.m.Agent.get_or_none(pw.fn.LOWER(self.m.Agent.name) == id_or_name.lower())
            return agent

    def list_agents(self) -> list[Any]:
        with self._lock:
            return list(self.m.Agent.select().order_by(self.m.Agent.name))

    def create_persona(self, name: str, *, archetype: str = "custom", traits: Sequence[str] = (),
                       background: str = "", voice_guidelines: str = "",
                       example_messages: Sequence[str] = ()) -> Any:
        with self.transaction():
            return self.m.Persona.create(
                name=name, archetype=archetype, traits=json.dumps(list(traits)), background=background,
                voice_guidelines=voice_guidelines, example_messages=json.dumps(list(example_messages)),
            )

    def assign_persona(self, agent_id: str, persona_id: str, sort_order: int = 0) -> None:
        with self.transaction():
            self.m.AgentPersona.create(agent=agent_id, persona=persona_id, sort_order=sort_order)

    def create_skill_bundle(self, name: str, *, tools: Sequence[str] = (), prompt_additions: str = "",
                            description: str = "") -> Any:
        with self.transaction():
            return self.m.SkillBundle.create(
                name=name, tools=json.dumps(list(tools)), prompt_additions=prompt_additions,
                description=description,
            )

    def assign_agent_skill(self, agent_id: str, bundle_id: str, sort_order: int = 0) -> None:
        with self.transaction():
            self.m.AgentSkill.create(agent=agent_id, bundle=bundle_id, sort_order=sort_order)

    def assign_project_skill(self, project_id: str, bundle_id: str, sort_order: int = 0) -> None:
        with self.transaction():
            self.m.ProjectSkill.create(project=project_id, bundle=bundle_id, sort_order=sort_order)

    # --- sessions -----------------------------------------------------------------------

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

    def get_session(self, session_id: str) -> Any | None:
        # The hottest read of the runtime: a precompiled statement skips peewee's
        # per-call SQL generation (most of its cost; see bench/simtime).
        sql = getattr(self, "_session_by_id_sql", None)
        if sql is None:
            sql = self._session_by_id_sql = f'SELECT * FROM "sessions" WHERE "id" = {self.db.param}'
        with self._lock:
            rows = list(self.m.Session.raw(sql, session_id))
        return rows[0] if rows else None

    def require_session(self, session_id: str) -> Any:
        row = self.get_session(session_id)
        if row is None:
            raise NotFoundError(f"no session with id {session_id!r}")
        return row

    def update_session(self, session_id: str, **fields: Any) -> int:
        fields.setdefault("updated_at", self.m.Session.updated_at.default())
        with self.transaction():
            return self.m.Session.update(**fields).where(self.m.Session.id == session_id).execute()

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

    def list_sessions(self, *, statuses: Sequence[str] | None = None, limit: int = 500) -> list[Any]:
        S = self.m.Session
        with self._lock:
            query = S.select().order_by(S.updated_at.desc()).limit(limit)
            if statuses:
                query = query.where(S.status.in_(list(statuses)))
            return list(query)

    def delete_session(self, session_id: str) -> bool:
        """Delete the session row and its messages (one transaction); False if there was none.

        The store does not know what is running: stop the session first
        (``Runtime.stop_process``), or its next write fails.
        """
        S, M = self.m.Session, self.m.SessionMessage
        with self.transaction():
            M.delete().where(M.session == session_id).execute()
            return bool(S.delete().where(S.id == session_id).execute())

    def reset_stale_sessions(self) -> list[str]:
        """Sessions left running/loading by a dead runtime → idle, pid NULL, marked for resume."""
        S = self.m.Session
        with self.transaction():
            ids = [row.id for row in S.select(S.id).where(S.status.in_(["running", "loading"]))]
            if ids:
                S.update(status="idle", pid=None, restart_pending=True,
                         updated_at=S.updated_at.default()).where(S.id.in_(ids)).execute()
            return ids

    def take_restart_pending(self) -> list[str]:
        """Ids of sessions marked for resume; the marks are cleared."""
        S = self.m.Session
        with self.transaction():
            ids = [row.id for row in S.select(S.id).where(S.restart_pending == True)]  # noqa: E712
            if ids:
                S.update(restart_pending=False).where(S.id.in_(ids)).execute()
            return ids

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
        return insert_messages(self, [row])[0]

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
        return insert_messages(self, rows)

    def _commit_message_groups(self, groups: Sequence[tuple[MessageRow, ...]]) -> list[list[int]]:
        ids = insert_messages(self, [row for group in groups for row in group])
        out, start = [], 0
        for group in groups:
            out.append(ids[start:start + len(group)])
            start += len(group)
        return out

    def recent_messages(self, session_id: str, limit: int, roles: Sequence[str] = ("user", "assistant")
                        ) -> list[tuple[str, str]]:
        """The last ``limit`` messages with these roles, oldest first, as (role, content)."""
        M = self.m.SessionMessage
        with self._lock:
            rows = list(
                M.select(M.role, M.content)
                .where((M.session == session_id) & (M.role.in_(list(roles))))
                .order_by(M.id.desc())
                .limit(limit)
            )
        return [(r.role, r.content) for r in reversed(rows)]

    def last_message_role(self, session_id: str, roles: Sequence[str] = ("user", "assistant")) -> str | None:
        """The role of the session's newest message among ``roles`` (None: there is none)."""
        M = self.m.SessionMessage
        with self._lock:
            row = (M.select(M.role).where((M.session == session_id) & (M.role.in_(list(roles))))
                   .order_by(M.id.desc()).first())
        return row.role if row is not None else None

    def delete_messages(self, session_id: str) -> int:
        """Delete every message of the session; returns how many."""
        M = self.m.SessionMessage
        with self.transaction():
            return M.delete().where(M.session == session_id).execute()

    def delete_message(self, message_id: int) -> int:
        """Delete one message by id (an append whose delivery was refused)."""
        M = self.m.SessionMessage
        with self.transaction():
            return M.delete().where(M.id == message_id).execute()

    def messages(self, session_id: str) -> list[StoredMessage]:
        """Every stored message of the session — all roles (user, assistant, system and the
        runtime's own), in the order they were written — with id, timestamp and cost."""
        M = self.m.SessionMessage
        with self._lock:
            rows = list(M.select(M.id, M.role, M.content, M.cost_usd, M.timestamp)
                        .where(M.session == session_id).order_by(M.id))
        return [StoredMessage(r.id, r.role, r.content, _aware(r.timestamp), r.cost_usd) for r in rows]

    def count_messages(self, session_id: str) -> int:
        M = self.m.SessionMessage
        with self._lock:
            return M.select().where(M.session == session_id).count()

    # --- session context ------------------------------------------------------------------

    def session_context(self, session_id: str) -> SessionContext:
        """Session, agent, project, persona/skill prompts and resolved tool permissions."""
        with self._lock:
            session = self.require_session(session_id)
            agent = self.m.Agent.get_or_none(self.m.Agent.id == session.agent_id) if session.agent_id else None
            project = (
                self.m.Project.get_or_none(self.m.Project.id == session.project_id)
                if session.project_id else None
            )
            persona_prompt = ""
            agent_bundles: list[Any] = []
            if agent is not None:
                personas = list(
                    self.m.Persona.select().join(self.m.AgentPersona)
                    .where(self.m.AgentPersona.agent == agent.id).order_by(self.m.AgentPersona.sort_order)
                )
                persona_prompt = compose_persona_prompt(personas) if personas else ""
                agent_bundles = list(
                    self.m.SkillBundle.select().join(self.m.AgentSkill)
                    .where(self.m.AgentSkill.agent == agent.id).order_by(self.m.AgentSkill.sort_order)
                )
            project_bundles: list[Any] = []
            if project is not None:
                project_bundles = list(
                    self.m.SkillBundle.select().join(self.m.ProjectSkill)
                    .where(self.m.ProjectSkill.project == project.id).order_by(self.m.ProjectSkill.sort_order)
                )
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
