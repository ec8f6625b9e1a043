"""The store's catalog rows: projects, agents, personas, skill bundles and MCP server
configs (what sessions are made from)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import peewee as pw

from corvid_actors.core.double_texting import checked_double_texting
from corvid_actors.core.vocabulary import AGENT_KINDS
from corvid_actors.db.store_base import StoreBase, store_op
from corvid_actors.errors import ConflictError, NotFoundError, StoreError
from corvid_actors.policy.access import agent_access_fields


def _check_kind(fields: dict[str, Any]) -> None:
    kind = fields.get("kind")
    if kind is not None and kind not in AGENT_KINDS:
        raise ValueError(f"an agent's kind is {' or '.join(map(repr, AGENT_KINDS))}, not {kind!r} "
                         "(None: the [agents] default_kind)")


def _check_double_texting(fields: dict[str, Any]) -> None:
    """AgentSettingError for a ``double_texting`` that is not a policy (None: by kind)."""
    if fields.get("double_texting") is not None:
        checked_double_texting(fields["double_texting"])


class CatalogRows(StoreBase):
    """Reads and writes of the catalog tables (a part of :class:`~corvid_actors.db.store.Store`)."""

    _agent_listeners: list[Callable[[str], None]]

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
        _check_kind(fields)
        fields = agent_access_fields(fields)  # AgentSettingError naming a wrong access setting
        _check_double_texting(fields)
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
            elif key == "conversation_allowlist":
                stored = None if stored is None else json.loads(stored)
                wanted = None if wanted is None else sorted(set(wanted))
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
        _check_kind(fields)
        fields = agent_access_fields(fields)
        _check_double_texting(fields)
        if "tool_permissions" in fields and fields["tool_permissions"] is not None:
            fields["tool_permissions"] = json.dumps(list(fields["tool_permissions"]))
        A = self.m.Agent
        with self.transaction():
            # the revision moves in the same statement: no reader sees the new settings
            # under the old revision (a cached build, wiring.BuildCache)
            if A.update(**fields, updated_at=A.updated_at.default(), revision=A.revision + 1).where(
                    A.id == agent_id).execute() == 0:
                raise NotFoundError(f"no agent {agent_id!r}")
            agent = A.get_by_id(agent_id)
        self._agent_changed(agent_id)
        return agent

    def on_agent_change(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(agent_id)`` after each write of an agent through this store (its
        settings, personas or skills), on the writer's thread: an in-process cache drops
        what it holds of the agent at once. Writes by other processes are seen through the
        agent's ``revision``, which every such write bumps."""
        self._agent_listeners.append(listener)

    def _agent_changed(self, agent_id: str) -> None:
        self.agent_rows.drop(lambda key: key[0] == agent_id)  # type: ignore[index]
        for listener in tuple(self._agent_listeners):
            listener(agent_id)

    def _bump_revision(self, agent_id: str) -> None:
        """+1 on the agent's revision (call inside the transaction of the write)."""
        A = self.m.Agent
        A.update(revision=A.revision + 1).where(A.id == agent_id).execute()

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
    def agent_spend_usd(self, agent_id: str) -> float:
        """What all the sessions of ``agent_id`` have spent (their ``total_cost_usd``), USD."""
        S = self.m.Session
        with self._lock:
            total = S.select(pw.fn.COALESCE(pw.fn.SUM(S.total_cost_usd), 0.0)).where(S.agent == agent_id).scalar()
        return float(total or 0.0)

    @store_op
    def spend_by_agent(self) -> dict[str, float]:
        """Each agent's sessions' spend, USD (agents with no session left out)."""
        S = self.m.Session
        with self._lock:
            rows = (S.select(S.agent, pw.fn.SUM(S.total_cost_usd)).where(S.agent.is_null(False))
                    .group_by(S.agent).tuples())
            return {agent_id: float(total or 0.0) for agent_id, total in rows}

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
            self._bump_revision(agent_id)  # the agent's sessions build another prompt
        self._agent_changed(agent_id)

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
            self._bump_revision(agent_id)  # the agent's sessions build other tools
        self._agent_changed(agent_id)

    @store_op
    def assign_project_skill(self, project_id: str, bundle_id: str, sort_order: int = 0) -> None:
        with self.transaction():
            self.m.ProjectSkill.create(project=project_id, bundle=bundle_id, sort_order=sort_order)

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
