"""The Runtime's reads: what a host may ask without changing anything.

:class:`RuntimeReads` is the part of :class:`~corvid_actors.runtime.Runtime` that only
reads: the supervisor's in-memory facts (running, paused, timeouts), the stored plan and
full tool outputs, statistics, pending approvals, credit balances, and the stored agents,
sessions and messages a host needs (so that no host reaches into the store).
The writes are :class:`~corvid_actors.runtime.records.RuntimeRecords`.

The Runtime holds one and forwards its methods, same names and signatures.
Every method is synchronous and thread-safe; none may be called from an actor thread or an
event callback (see :mod:`corvid_actors.runtime`).
"""

from __future__ import annotations

from typing import Any, Protocol

import pykka

from corvid_actors.actors import approvals as ap
from corvid_actors.actors import supervisor as sv
from corvid_actors.actors.base import tell
from corvid_actors.actors.credits import (
    GetBalance,
    GetTransactions,
)
from corvid_actors.actors.events import BusStats, Publish
from corvid_actors.actors.slots import SlotStats
from corvid_actors.clock import Clock
from corvid_actors.config import Config
from corvid_actors.db.messages import StoredMessage
from corvid_actors.errors import BudgetExceededError, ConfigError, NotFoundError
from corvid_actors.events import SessionError
from corvid_actors.loop.observation import OPERATOR_OUTPUT_ROLE, parse_operator_record
from corvid_actors.loop.plan import plan_from_json
from corvid_actors.policy.access import AgentAccess, Spend, agent_access
from corvid_actors.providers.base import Provider
from corvid_actors.runtime.tree import RuntimeInternals
from corvid_actors.telemetry.metrics import RuntimeMetrics

__all__ = ["Ask", "RuntimeReads", "credit_bank"]


class Ask(Protocol):
    """How the reads ask an actor: the lifecycle's gate
    (:meth:`~corvid_actors.runtime.lifecycle.RuntimeLifecycle.ask`: the supervisor when
    ``ref`` is None; RuntimeStoppedError once the runtime is stopped)."""

    def __call__(self, message: Any, ref: pykka.ActorRef[Any] | None = None) -> Any:
        """Ask ``ref`` (default: the supervisor) ``message``; its answer."""
        ...


def credit_bank(internals: RuntimeInternals) -> pykka.ActorRef[Any]:
    """The credit bank's ref; ConfigError when the runtime runs without one."""
    if internals.credits is None:
        raise ConfigError("credits are not enabled: create the runtime with Runtime(with_credits=True)")
    return internals.credits


class RuntimeReads:
    """The read-only queries of a Runtime, over the values it was made with: ``config``,
    ``clock``, the actor tree (``internals``) and ``ask`` (see :class:`Ask`)."""

    def __init__(self, config: Config, clock: Clock, internals: RuntimeInternals, ask: Ask) -> None:
        self._config = config
        self._clock = clock
        self._internals = internals
        self._ask = ask

    # --- what the runtime was made with ---------------------------------------------------------

    @property
    def config(self) -> Config:
        """The configuration (read it; the running actors do not see later changes)."""
        return self._config

    @property
    def clock(self) -> Clock:
        """The clock every timer and timestamp of this runtime uses."""
        return self._clock

    @property
    def metrics(self) -> RuntimeMetrics:
        """This runtime's Prometheus figures: ``metrics.registry`` is the ``CollectorRegistry``
        to serve (the daemon serves it at ``/metrics``), ``metrics.read()`` one reading."""
        return self._internals.metrics

    @property
    def internals(self) -> RuntimeInternals:
        """The store, actors and builder behind this facade: for ``corvid_actors.testing``,
        the daemon's admin-actor wiring and tests only (see :mod:`corvid_actors.runtime.tree`)."""
        return self._internals

    @property
    def credits_enabled(self) -> bool:
        """Whether the credit bank runs (``Runtime(with_credits=True)``)."""
        return self._internals.credits is not None

    @property
    def database_url(self) -> str:
        """The store's URL (with its password, if any: redact it before showing it)."""
        return str(self._internals.store.url)

    def sandbox_status(self) -> Any:
        """The OS sandbox's probe result (``SandboxStatus``: ``warning``, ``refuses_commands``,
        ``reason``, ``as_dict()``), as every session of this runtime sees it."""
        return self._internals.builder.sandbox.status

    # --- providers ------------------------------------------------------------------------------

    def route(self, agent: Any | None) -> str:
        """The provider name a session of ``agent`` (a stored agent row, or None) uses."""
        return self._internals.builder.route(agent)

    def has_provider(self, name: str) -> bool:
        """Whether a provider of that name is configured."""
        return name in self._internals.providers

    def provider(self, name: str) -> Provider:
        """The provider of that name; ConfigError naming the setting when it is not configured."""
        return self._internals.builder.provider(name)

    # --- stored agents, sessions and messages -----------------------------------------------------

    def agent(self, id_or_name: str) -> Any | None:
        """The stored agent of that id or name (case-insensitive), or None."""
        return self._internals.store.find_agent(id_or_name)

    def agents(self) -> list[Any]:
        """Every stored agent."""
        return list(self._internals.store.list_agents())

    def project(self, id_or_name: str) -> Any | None:
        """The stored project of that id, else the one of that name, or None."""
        store = self._internals.store
        found = store.get_project(id_or_name)
        if found is None:
            P = store.m.Project
            with store.transaction():
                found = P.get_or_none(P.name == id_or_name)
        return found

    def session(self, session_id: str) -> Any | None:
        """The stored session row (``status``, ``source``, ``channel``, ``participant``,
        ``cumulative_turns``, …), or None for an unknown id."""
        return self._internals.store.get_session(session_id)

    def find_session(self, *, source: str, channel: str, agent_id: str | None = None, name: str | None = None,
                     participant: str | None = None) -> str | None:
        """The id of the newest stored session with these fields (those given), or None."""
        return self._internals.store.newest_session_id(source=source, channel=channel, agent_id=agent_id,
                                                       name=name, participant=participant)

    def agent_access(self, agent_id: str | None) -> AgentAccess:
        """Who may talk to the agent, how often, for how much: its settings, else ``[access]``'s
        (``agent_id`` None or unknown: the config's)."""
        row = self._internals.store.get_agent(agent_id) if agent_id else None
        return agent_access(row, self._config.access)

    def spend(self, session_id: str) -> Spend:
        """What ``session_id`` and its agent (over all its sessions) have spent against their
        caps, in USD; NotFoundError for an unknown session."""
        store = self._internals.store
        row = store.get_session(session_id)
        if row is None:
            raise NotFoundError(f"no session {session_id!r}")
        agent_id = row.agent_id
        access = agent_access(store.get_agent(agent_id) if agent_id else None, self._config.access)
        # a session without an agent has no agent total: its own spend stands for it
        session_usd = float(row.total_cost_usd or 0.0)
        agent_usd = store.agent_spend_usd(agent_id) if agent_id else session_usd
        return Spend(session_id, session_usd, access.max_budget_usd, agent_id, agent_usd,
                     access.max_total_budget_usd if agent_id else 0.0)

    def check_budget(self, session_id: str) -> Spend:
        """Before a new turn of ``session_id``: its :class:`~corvid_actors.policy.access.Spend` when
        no cap is reached; else the session gets a ``session_error`` of type
        ``budget_exceeded`` (a warning, not recoverable by sending) and this raises
        :class:`~corvid_actors.errors.BudgetExceededError` with the same message, so the
        caller does not send. The session checks the caps itself before every turn (whoever
        started it); the chat bridge calls this for every message so that it can answer the
        participant before anything is stored, and a host may do the same."""
        spend = self.spend(session_id)
        if spend.exceeded is None:
            return spend
        message = spend.message()
        tell(self._internals.bus, Publish(session_id, SessionError(
            error_type="budget_exceeded", message=message, severity="warning", recoverable=False)))
        raise BudgetExceededError(message, spend)

    def history(self, session_id: str) -> list[StoredMessage]:
        """Every stored message of the session (every role), in write order."""
        return list(self._internals.store.messages(session_id))

    def message_count(self, session_id: str) -> int:
        """How many messages the session has stored."""
        return int(self._internals.store.count_messages(session_id))

    # --- the supervisor's facts -------------------------------------------------------------------

    def is_running(self, session_id: str) -> bool:
        """Whether ``session_id`` has an incarnation (also while it builds)."""
        return bool(self._ask(sv.IsRunning(session_id)))

    def get_active_session_ids(self) -> list[str]:
        """The ids of the sessions that have an incarnation."""
        return list(self._ask(sv.ActiveSessionIds()))

    def is_paused(self, session_id: str) -> bool:
        """Whether ``session_id`` is paused by an outage (see :meth:`resume_session`)."""
        return bool(self._ask(sv.IsPaused(session_id)))

    def get_paused_session_ids(self) -> list[str]:
        """The ids of every session paused by an outage."""
        return list(self._ask(sv.PausedSessionIds()))

    def get_memory_stats(self) -> dict[str, int]:
        """Counts of what the runtime holds in memory: the supervisor's (``processes``,
        ``session_meta``, ``paused_sessions``, ``stable_timers``, ``passivated_sessions``),
        the event bus's, ``timers`` (the timer table's entries) and ``session_timeouts``."""
        stats = dict(self._ask(sv.SupervisorStats()))
        stats.update(self._ask(BusStats(), self._internals.bus))
        timers = self._internals.timers.stats()  # the table answers on this thread
        stats["timers"] = timers["timers"]
        stats["session_timeouts"] = timers["by_kind"].get("timeout", 0)
        return stats

    def session_info(self, session_id: str | None = None) -> dict[str, Any]:
        """In-memory facts per session, plus each one's current ``plan`` (see get_plan)."""
        info = dict(self._ask(sv.SessionInfo(session_id)))
        for sid, facts in info.items():
            if isinstance(facts, dict):
                facts["plan"] = self._stored_plan(sid)
        return info

    # --- plans and full tool outputs (OpenAgent seed) ---------------------------------------------

    def get_plan(self, session_id: str) -> list[dict[str, Any]]:
        """The session's current plan: ``[{"id", "title", "status", "waiting_for"}, …]``.

        Read from the store (``sessions.plan``), which the session updates before it
        publishes each ``plan`` event; works for idle sessions too. Render it for people
        with ``corvid_actors.loop.plan.render_plan``. Raises NotFoundError for an unknown id.
        """
        self._internals.store.require_session(session_id)
        return self._stored_plan(session_id)

    def _stored_plan(self, session_id: str) -> list[dict[str, Any]]:
        row = self._internals.store.get_session(session_id)
        return plan_from_json(getattr(row, "plan", "")) if row is not None else []

    def get_tool_outputs(self, session_id: str, limit: int = 20) -> list[dict[str, Any]]:
        """The complete outputs of the session's last ``limit`` tool calls whose output the
        model saw only in part (observation caps), oldest first: ``{"call_id",
        "tool_name", "is_error", "bytes", "output"}``."""
        rows = self._internals.store.recent_messages(session_id, limit, roles=(OPERATOR_OUTPUT_ROLE,))
        return [record for _, content in rows if (record := parse_operator_record(content)) is not None]

    # --- approvals, slots, credits ----------------------------------------------------------------

    def list_approvals(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """The pending approval requests (of ``session_id``, or of every session)."""
        return list(self._ask(ap.ListPending(session_id), self._internals.approvals))

    def approval_mode(self) -> str:
        """The approval broker's mode: ``normal``, ``queued`` or ``paused``."""
        return str(self._ask(ap.GetMode(), self._internals.approvals))

    def slot_stats(self) -> dict[str, Any]:
        """The slot pool's figures: ``capacity``, ``in_use``, ``held``, ``waiting``,
        ``peak_in_use``, ``grants``, ``wait_s_total`` and ``wait_timeouts`` (see
        :class:`~corvid_actors.actors.slots.SlotStats`)."""
        return dict(self._ask(SlotStats(), self._internals.slot_pool))

    def credit_balance(self, participant: str) -> int:
        """The participant's balance (0 without an account)."""
        return int(self._ask(GetBalance(participant), credit_bank(self._internals)))

    def credit_transactions(self, participant: str, limit: int = 10) -> list[dict[str, Any]]:
        """The latest ``limit`` ledger rows of ``participant``, newest first."""
        return list(self._ask(GetTransactions(participant, limit), credit_bank(self._internals)))
