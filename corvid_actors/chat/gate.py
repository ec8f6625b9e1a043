"""The chat bridge's door: who may talk to its agent, how often, and whether the agent may
still spend (the policy is :mod:`corvid_actors.policy.access`; this holds its state and notices).

- **Owners** are the participants the bridge's ``is_owner`` admits; they always get in,
  are never rate limited, and are the only ones a ``private`` agent talks to. An
  ``allowlist`` agent also admits the participant ids of its ``conversation_allowlist``
  (ids as the transport names the sender). Refused participants get a notice and nothing
  else happens: no session, no credit account.
- **Rate limit**: a participant's messages to the agent, in every channel, counted in a
  sliding window on the runtime's clock. Only messages that go to the model count; one
  over the limit is answered with a notice naming the time to come back, and the model
  is not called. The counts live in the bridge's memory: a restarted bot starts afresh.
- **Budget**: before a message goes to its session, :meth:`Runtime.check_budget` (only
  when the agent has a cap): over a cap, the session gets its ``session_error``
  (``budget_exceeded``) and the participant a notice.

The agent's settings are read at every message, so ``update_agent`` takes effect at once.
"""

from __future__ import annotations

import threading

from corvid_actors.policy.access import AgentAccess, RateWindow, Spend, rate_limited_text, usd
from corvid_actors.runtime import Runtime

__all__ = ["ChatGate", "budget_notice", "spend_line"]


class ChatGate:
    """One per bridge; thread-safe (the transports' threads call it)."""

    def __init__(self, runtime: Runtime, agent_id: str | None) -> None:
        self.runtime = runtime
        self.agent_id = agent_id
        self._lock = threading.Lock()
        self._window = RateWindow()

    def access(self) -> AgentAccess:
        """The agent's settings now (a store read)."""
        return self.runtime.agent_access(self.agent_id)

    def rate_limited(self, access: AgentAccess, participant: str, *, owner: bool) -> str | None:
        """Count one message of ``participant`` and return None, or (over the limit: not
        counted) the notice that says when they may write again."""
        if owner or access.rate_limit_max <= 0:
            return None
        now = self.runtime.clock.now()
        with self._lock:
            again_at = self._window.admit(participant, now, window_s=access.rate_limit_window_s,
                                          limit=access.rate_limit_max)
        return None if again_at is None else rate_limited_text(access, now, again_at)

    @property
    def tracked_participants(self) -> int:
        """Participants with messages in the current window (what the counts hold)."""
        with self._lock:
            return len(self._window)


def budget_notice(spend: Spend) -> str:
    """What a participant is told when their message is not answered for the budget."""
    if spend.exceeded == "session":
        return (f"Sorry, this conversation has reached its spending limit ({usd(spend.session_usd)} of "
                f"{usd(spend.max_budget_usd)}), so it gets no more answers. The bot's owner can raise it.")
    return (f"Sorry, this bot has reached its spending limit ({usd(spend.agent_usd)} of "
            f"{usd(spend.max_total_budget_usd)}), so it cannot answer now. Its owner can raise it.")


def spend_line(spend: Spend) -> str:
    """``/status``'s line on a capped agent: this conversation's spend against the caps."""
    parts = [f"Spent: {usd(spend.session_usd)}" + (f" of {usd(spend.max_budget_usd)}" if spend.max_budget_usd else "")]
    if spend.max_total_budget_usd:
        parts.append(f"the bot: {usd(spend.agent_usd)} of {usd(spend.max_total_budget_usd)}")
    return "; ".join(parts)
