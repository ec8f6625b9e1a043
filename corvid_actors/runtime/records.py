"""The Runtime's record writes: what a host creates and changes outside a session's run.

:class:`RuntimeRecords` writes the stored agents, projects, sessions and MCP server configs,
the replay keys, and the credit accounts (granted, opened, charged). The Runtime holds one
and forwards its methods, same names and signatures. Every method is synchronous and
thread-safe; none may be called from an actor thread or an event callback (see
:mod:`corvid_actors.runtime`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corvid_actors.actors.credits import ChargeTurn, GrantCredits, OpenAccount
from corvid_actors.db.replays import ReplayStore
from corvid_actors.runtime.reads import Ask, credit_bank
from corvid_actors.runtime.tree import RuntimeInternals
from corvid_actors.tools.mcp_client import add_mcp_server

__all__ = ["RuntimeRecords"]


class RuntimeRecords:
    """The record writes of a Runtime, over its actor tree (``internals``: the store and the
    credit bank) and ``ask`` (see :class:`Ask`)."""

    def __init__(self, internals: RuntimeInternals, ask: Ask) -> None:
        self._internals = internals
        self._ask = ask

    # --- agents, projects, sessions, MCP servers ------------------------------------------------

    def create_agent(self, name: str, **settings: Any) -> Any:
        """Create an agent (``provider``, ``model``, ``system_prompt``, ``permission_mode``,
        ``kind``, …). ``kind``: ``"task"`` (nudged to act with its tools) or ``"chat"`` (a
        conversational agent, never nudged); not given, the ``[agents] default_kind`` (and
        ``chat`` in the sessions of a chat bridge). Who may talk to it and its caps:
        ``conversation_mode``, ``conversation_allowlist``, ``conversation_rate_limit_window_s``,
        ``conversation_rate_limit_max``, ``max_budget_usd``, ``max_total_budget_usd`` (see
        :mod:`corvid_actors.policy.access`); what a message sent mid-turn does: ``double_texting``
        (see :mod:`corvid_actors.core.double_texting`)."""
        return self._internals.store.create_agent(name, **settings)

    def ensure_agent(self, name: str, **settings: Any) -> Any:
        """The agent of that name (case-insensitive), created with ``settings`` when there is
        none; ConflictError naming each given setting that differs from the stored one."""
        return self._internals.store.ensure_agent(name, **settings)

    def update_agent(self, agent_id: str, **settings: Any) -> Any:
        """Change a stored agent's settings; returns the updated agent."""
        return self._internals.store.update_agent(agent_id, **settings)

    def create_project(self, name: str, working_dir: str | Path, **fields: Any) -> Any:
        """Create a project (``env_vars``, ``description``): the directory its sessions work in."""
        return self._internals.store.create_project(name, working_dir, **fields)

    def create_session(self, **fields: Any) -> Any:
        """Create a session row (``agent_id``, ``project_id``, ``source``, ``name``, …)."""
        return self._internals.store.create_session(**fields)

    def add_mcp_server(self, name: str, command: str, **options: Any) -> Any:
        """Store an MCP server config (``args``, ``env``, ``cwd``, ``agent_id`` — None: every
        agent —, ``enabled``; see :func:`corvid_actors.tools.mcp_client.add_mcp_server`)."""
        return add_mcp_server(self._internals.store, name, command, **options)

    def replay_store(self) -> ReplayStore:
        """Durable replay keys (a chat transport's dedupe window) in this runtime's store."""
        return ReplayStore(self._internals.store)

    # --- credits (Runtime(with_credits=True)) ---------------------------------------------------

    def grant_credits(self, participant: str, amount: int, *, type: str = "grant", reference: str = "") -> int:
        """Add ``amount`` (> 0) credits (``type``: grant | purchase | refund); returns the balance."""
        return int(self._ask(GrantCredits(participant, amount, type, reference), credit_bank(self._internals)))

    def open_credit_account(self, participant: str) -> Any:
        """Open the account with the first-time free credits if it has none (idempotent).
        Returns an ``Account(participant, balance, created)``."""
        return self._ask(OpenAccount(participant), credit_bank(self._internals))

    def charge_turn(self, session_id: str) -> Any:
        """Charge one model turn of ``session_id`` now, exactly as the end of a turn does
        (``credits.credits_per_turn`` from the session's participant when its source is
        charged and the participant is no owner; ``credits_low`` / ``credits_exhausted``
        events, and an exhausted running session is stopped).

        Returns the ``Deduction(success, remaining, is_low, is_exhausted)``, or None when
        the turn is not charged (source not charged, an owner, no participant). Raises
        NotFoundError for an unknown session.
        """
        session = self._internals.store.require_session(session_id)
        # an exhausted session is stopped: the bank tells the supervisor CreditsExhausted
        return self._ask(ChargeTurn(session_id, session.source, self._internals.supervisor), credit_bank(self._internals))
