"""The session actor's spending check: before each turn, whoever started it.

:class:`TurnBudget` holds the caps an incarnation resolved when it started
(:class:`~corvid_actors.policy.access.SessionBudget`) and answers, before a turn starts, whether
a cap is reached. It costs nothing for a session without caps (no check, no read); the
session's own spend is counted in memory (its :class:`~.session_wiring.TurnTally`), and
the store is read only for the agent's total when the agent caps it, and — once a cap
looks reached — for the agent's settings, in case a cap was raised since the start.
Runs on the actor's thread only.
"""

from __future__ import annotations

from typing import Any

from loguru import logger

from corvid_actors.events import ErrorEvent, Event, SessionError
from corvid_actors.policy.access import SessionBudget, Spend, agent_access
from corvid_actors.schema.sections import AccessConfig

__all__ = ["TurnBudget", "budget_events"]


def budget_events(spend: Spend) -> tuple[Event, ...]:
    """What a session publishes for a turn it did not start for the budget: an ``error``
    event (the chat bridge tells its participant: the message got past the bridge's own
    check, so nobody else will) and the ``session_error`` ``Runtime.check_budget`` publishes."""
    message = spend.message()
    return (ErrorEvent(error_type="budget_exceeded", message=message),
            SessionError(error_type="budget_exceeded", message=message, severity="warning", recoverable=False))


class TurnBudget:
    """One incarnation's caps (None: it has none) and the store to read totals from."""

    def __init__(self, session_id: str, budget: SessionBudget | None, access: AccessConfig, store: Any) -> None:
        self._sid = session_id
        self._budget = budget
        self._access = access
        self._store = store

    @property
    def capped(self) -> bool:
        """A cap applies: user messages that arrive mid-turn wait in the actor, so that
        each one's turn is checked when it would start."""
        budget = self._budget
        return budget is not None and (budget.max_budget_usd > 0 or budget.max_total_budget_usd > 0)

    def refusal(self, tally_usd: float) -> Spend | None:
        """The spend that stops the next turn (a cap is reached), or None: start it.
        ``tally_usd``: what the incarnation's tally has counted (its cost_usd)."""
        if not self.capped:
            return None
        spend = self._spend(tally_usd)
        if spend is None or spend.exceeded is None:
            return None
        if self._budget is not None and self._budget.agent_id is not None:
            # reached: the cap may have been raised since the start (read only now, so a
            # turn under the cap reads nothing for it)
            try:
                row = self._store.get_agent(self._budget.agent_id)
            except Exception:  # noqa: BLE001 - a store that cannot answer: the caps known hold
                logger.bind(session_id=self._sid).opt(exception=True).warning("agent settings not read")
            else:
                self._budget = self._budget.with_access(agent_access(row, self._access))
                spend = self._spend(tally_usd)
        return spend if spend is not None and spend.exceeded is not None else None

    def _spend(self, tally_usd: float) -> Spend | None:
        budget = self._budget
        if budget is None:
            return None
        agent_usd = None
        if budget.max_total_budget_usd > 0 and budget.agent_id is not None:
            try:
                agent_usd = float(self._store.agent_spend_usd(budget.agent_id))
            except Exception:  # noqa: BLE001 - not known: the session's own cap still holds
                logger.bind(session_id=self._sid).opt(exception=True).warning("agent spend not read")
                budget = SessionBudget(budget.agent_id, budget.max_budget_usd, 0.0, budget.spent_before_usd)
        return budget.spend(self._sid, tally_usd, agent_usd)
