"""What starting a session reads from the store, in one read: the session's row, its
agent, project, personas and skill bundles, and the tool permissions they resolve to.

Rows only: the persona prompt is composed by the caller (``loop.prompts``) from
:attr:`SessionContext.personas`; the store does not build prompts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import peewee as pw

from corvid_actors.db.catalog import CatalogRows
from corvid_actors.db.sessions import SessionRows
from corvid_actors.db.store_base import store_op
from corvid_actors.errors import NotFoundError


@dataclass(frozen=True)
class SessionContext:
    """What starting a session needs from the store, resolved in one read."""

    session: Any
    agent: Any | None
    project: Any | None
    #: the agent's persona rows in order (compose the prompt with ``loop.prompts.compose_persona_prompt``)
    personas: tuple[Any, ...]
    skill_prompt: str
    agent_tool_base: tuple[str, ...] | None
    agent_bundle_tools: tuple[tuple[str, ...], ...]
    project_bundle_tools: tuple[tuple[str, ...], ...]
    project_env: dict[str, str]
    #: the agent's ``revision`` as the start read it (None: no agent): what the agent's
    #: cached parts are keyed by (``wiring.BuildCache``)
    agent_revision: int | None = None

    def tool_permissions(self, defaults: Sequence[str]) -> tuple[str, ...] | None:
        """The resolved tool list (seed invariant 4) from ``defaults``, the default core tools
        bundles extend; None means "no list and no bundle: every tool"."""
        return resolve_tool_permissions(
            self.agent_tool_base, self.agent_bundle_tools, self.project_bundle_tools, defaults
        )


class SessionContextReads(SessionRows, CatalogRows):
    """:meth:`session_context` (a part of :class:`~corvid_actors.db.store.Store`)."""

    @store_op
    def session_context(self, session_id: str, session: Any | None = None) -> SessionContext:
        """Session, agent, project, personas, skill prompt additions and tool permissions.
        ``session``: its row, if the caller has just read it (one read fewer per start).

        The agent's rows (the agent, its personas and skill bundles) come from
        :attr:`agent_rows` when its current ``revision`` is there: the session's row is read
        with the revision beside it (one statement), so three reads of the agent go and an
        agent changed by any process is read afresh (issue 37)."""
        m = self.m
        with self._lock:
            if session is None:
                session = self._session_with_revision(session_id)
            revision = getattr(session, "agent_revision", None)
            if revision is None and session.agent_id:  # a row the caller read: its revision alone
                revision = self._agent_revision(session.agent_id)
            cached = self.agent_rows.get((session.agent_id, revision)) if revision is not None else None
            if cached is None and session.agent_id:
                cached = self._agent_rows(session.agent_id)
                if cached[0] is not None:
                    self.agent_rows.put((session.agent_id, cached[0].revision), cached)
            agent, personas, agent_bundles = cached if cached is not None else (None, (), ())
            project = self.get_project(session.project_id) if session.project_id else None
            project_bundles: list[Any] = []
            if project is not None:
                project_bundles_sql = self._sql("project_bundles", lambda: (
                    m.SkillBundle.select().join(m.ProjectSkill).where(m.ProjectSkill.project == "")
                    .order_by(m.ProjectSkill.sort_order)))
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
            session, agent, project, tuple(personas), skill_prompt, base,
            tuple(tuple(json.loads(b.tools)) for b in agent_bundles),
            tuple(tuple(json.loads(b.tools)) for b in project_bundles),
            env, agent.revision if agent is not None else None,
        )

    def _session_with_revision(self, session_id: str) -> Any:
        """The session's row, with its agent's ``revision`` as ``agent_revision`` (None:
        no agent), in one statement. Call with the store lock held."""
        S, A = self.m.Session, self.m.Agent
        sql = self._sql("session_with_revision", lambda: (
            S.select(S, A.revision.alias("agent_revision")).join(A, pw.JOIN.LEFT_OUTER, on=(S.agent == A.id))
            .where(S.id == "")))
        rows = self._rows(S, sql, session_id)
        if not rows:
            raise NotFoundError(f"no session with id {session_id!r}")
        return rows[0]

    def _agent_revision(self, agent_id: str) -> int | None:
        """The agent's ``revision`` (None: no such agent). Call with the store lock held."""
        A = self.m.Agent
        sql = self._sql("agent_revision", lambda: A.select(A.revision).where(A.id == ""))
        row = self.db.execute_sql(sql, (agent_id,)).fetchone()
        return None if row is None else int(row[0])

    def _agent_rows(self, agent_id: str) -> tuple[Any, tuple[Any, ...], tuple[Any, ...]]:
        """The agent (None: gone), its personas and its skill bundles, in order. Call with
        the store lock held."""
        m = self.m
        agent = self.get_agent(agent_id)
        if agent is None:
            return None, (), ()
        personas_sql = self._sql("agent_personas", lambda: (
            m.Persona.select().join(m.AgentPersona).where(m.AgentPersona.agent == "")
            .order_by(m.AgentPersona.sort_order)))
        agent_bundles_sql = self._sql("agent_bundles", lambda: (
            m.SkillBundle.select().join(m.AgentSkill).where(m.AgentSkill.agent == "")
            .order_by(m.AgentSkill.sort_order)))
        return (agent, tuple(self._rows(m.Persona, personas_sql, agent.id)),
                tuple(self._rows(m.SkillBundle, agent_bundles_sql, agent.id)))


def resolve_tool_permissions(
    agent_base: Sequence[str] | None,
    agent_bundle_tools: Sequence[Sequence[str]],
    project_bundle_tools: Sequence[Sequence[str]],
    defaults: Sequence[str] = (),
) -> tuple[str, ...] | None:
    """Seed invariant 4: agent base → ∪ agent bundle tools → ∪ project bundle tools
    (the latter only when the agent has no explicit list). With no explicit list, bundle
    tools extend ``defaults`` (the default core tools) and the result is only those. None
    means "no list and no bundle: every tool"."""
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
