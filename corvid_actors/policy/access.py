"""Who may talk to an agent, how often, and for how much: the policy, as plain functions.

An agent carries six settings (the original's agents carry them too); each NULL column
takes the ``[access]`` config's value (:class:`~corvid_actors.schema.sections.AccessConfig`):

- ``conversation_mode``: ``private`` (owners only), ``allowlist`` (owners and the
  participant ids in ``conversation_allowlist``) or ``public`` (anyone). *Owners* are the
  participants the chat bridge's ``is_owner`` admits (the same callback that exempts them
  from credits and lets them answer anyone's approvals); a participant id is what the
  chat transport names the sender (a Telegram user id, a webhook's ``participant``).
- ``conversation_rate_limit_window_s`` / ``conversation_rate_limit_max``: a participant's
  messages answered per agent in any sliding window (owners are not limited; 0: no limit).
  :class:`RateWindow` counts them on the runtime's clock.
- ``max_budget_usd`` (one session) and ``max_total_budget_usd`` (all the agent's sessions
  together): a turn is not started once the spend (the turns' model cost, ``total_cost_usd``)
  has reached a cap (:class:`Spend`; 0: no cap).

Nothing here reads a clock, a store or a thread: the chat bridge, the Runtime and the
session actor (:class:`SessionBudget`, checked at the start of every turn) call it.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from corvid_actors.errors import AgentSettingError
from corvid_actors.schema.sections import CONVERSATION_MODES, AccessConfig

__all__ = ["AgentAccess", "RateWindow", "SessionBudget", "Spend", "agent_access", "agent_access_fields",
           "duration_text", "rate_limited_text", "refusal_text", "session_budget", "usd"]

#: the agent columns this module reads, and the config key each falls back to
ACCESS_FIELDS = ("conversation_mode", "conversation_allowlist", "conversation_rate_limit_window_s",
                 "conversation_rate_limit_max", "max_budget_usd", "max_total_budget_usd")


@dataclass(frozen=True)
class AgentAccess:
    """An agent's effective access settings (its columns, else the config's)."""

    mode: str
    allowlist: frozenset[str]
    rate_limit_window_s: float
    #: 0: no limit
    rate_limit_max: int
    #: USD per session; 0: no cap
    max_budget_usd: float
    #: USD for all the agent's sessions; 0: no cap
    max_total_budget_usd: float

    def admits(self, participant: str, *, owner: bool) -> bool:
        """May ``participant`` talk to the agent? Owners always may."""
        if owner or self.mode == "public":
            return True
        return self.mode == "allowlist" and participant in self.allowlist


def agent_access(agent: Any | None, cfg: AccessConfig) -> AgentAccess:
    """The settings of ``agent`` (a stored row, or None: a session without an agent)."""
    def pick(column: str) -> Any:
        value = getattr(agent, column, None) if agent is not None else None
        return getattr(cfg, column) if value is None else value

    allowlist = pick("conversation_allowlist")
    if isinstance(allowlist, str):
        allowlist = json.loads(allowlist)
    return AgentAccess(
        mode=str(pick("conversation_mode")), allowlist=frozenset(str(p) for p in allowlist),
        rate_limit_window_s=float(pick("conversation_rate_limit_window_s")),
        rate_limit_max=int(pick("conversation_rate_limit_max")),
        max_budget_usd=float(pick("max_budget_usd")), max_total_budget_usd=float(pick("max_total_budget_usd")),
    )


def agent_access_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` of create_agent / update_agent with the access settings checked and the
    allowlist as the stored JSON; AgentSettingError naming the setting that is wrong. None
    (the config's value) is always allowed."""
    out = dict(fields)
    mode = out.get("conversation_mode")
    if mode is not None and mode not in CONVERSATION_MODES:
        raise AgentSettingError(f"conversation_mode {mode!r} is not one of {', '.join(CONVERSATION_MODES)}")
    allowlist = out.get("conversation_allowlist")
    if allowlist is not None:
        if isinstance(allowlist, str) or not all(isinstance(p, str) and p for p in allowlist):
            raise AgentSettingError("conversation_allowlist takes a list of participant ids (non-empty strings)")
        out["conversation_allowlist"] = json.dumps(sorted(set(allowlist)))
    for key in ("conversation_rate_limit_window_s", "conversation_rate_limit_max", "max_budget_usd",
                "max_total_budget_usd"):
        value = out.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise AgentSettingError(f"{key} takes a number >= 0 (0: no limit), not {value!r}")
        if key == "conversation_rate_limit_window_s" and value == 0:
            raise AgentSettingError("conversation_rate_limit_window_s must be > 0 (set conversation_rate_limit_max "
                             "to 0 for no limit)")
        if key == "conversation_rate_limit_max" and value != int(value):
            raise AgentSettingError(f"conversation_rate_limit_max takes a whole number, not {value!r}")
    return out


def refusal_text(access: AgentAccess) -> str:
    """What a participant the agent does not admit is told."""
    if access.mode == "allowlist":
        return "Sorry, this bot only talks to invited participants. Ask its owner to add you."
    return "Sorry, this bot only talks to its owners."


# --- rate limit -----------------------------------------------------------------------------


class RateWindow:
    """Messages per key in a sliding window: the times of the answered ones, newest last.

    Not thread-safe (the caller holds a lock). Keys whose messages have all left the
    window are dropped as other keys are counted, so what it holds stays bounded by the
    participants active within one window.
    """

    def __init__(self) -> None:
        #: key -> times of its counted messages; least recently counted key first
        self._times: OrderedDict[str, deque[datetime]] = OrderedDict()

    def admit(self, key: str, now: datetime, *, window_s: float, limit: int) -> datetime | None:
        """Count a message of ``key`` at ``now`` and return None, or (over the limit: not
        counted) the time from which its next message is admitted."""
        if limit <= 0:
            return None
        window = timedelta(seconds=window_s)
        self._drop_idle(now - window)
        times = self._times.get(key)
        if times is None:
            times = self._times[key] = deque()
        while times and times[0] <= now - window:
            times.popleft()
        if len(times) >= limit:
            # the next one fits once enough of the oldest have left the window
            return times[len(times) - limit] + window
        times.append(now)
        self._times.move_to_end(key)
        return None

    def __len__(self) -> int:
        return len(self._times)

    def _drop_idle(self, horizon: datetime) -> None:
        while self._times:
            key, times = next(iter(self._times.items()))
            if times and times[-1] > horizon:
                return
            del self._times[key]


def duration_text(seconds: float) -> str:
    """``1 h 2 min 5 s`` (whole seconds, rounded up; the zero parts left out)."""
    total = max(0, math.ceil(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours} h" if hours else "", f"{minutes} min" if minutes else "", f"{secs} s" if secs else ""]
    return " ".join(p for p in parts if p) or "0 s"


def rate_limited_text(access: AgentAccess, now: datetime, again_at: datetime) -> str:
    """The notice for a message over the rate limit: the limit, and when to come back."""
    return (f"You have reached the limit of {access.rate_limit_max} messages per "
            f"{duration_text(access.rate_limit_window_s)}. You can write again at "
            f"{again_at:%Y-%m-%d %H:%M:%S} UTC (in {duration_text((again_at - now).total_seconds())}).")


# --- budget ---------------------------------------------------------------------------------


def usd(value: float) -> str:
    """``$1.50``, or four decimals for amounts cents do not show (``$0.0123``)."""
    return f"${value:.2f}" if abs(value - round(value, 2)) < 1e-9 else f"${value:.4f}"


@dataclass(frozen=True)
class Spend:
    """A session's spend and its agent's, against their caps (0: no cap), in USD."""

    session_id: str
    session_usd: float
    max_budget_usd: float
    agent_id: str | None
    agent_usd: float
    max_total_budget_usd: float

    @property
    def exceeded(self) -> str | None:
        """``session`` or ``agent`` when that cap is reached (a new turn is not started), else None."""
        if self.max_budget_usd > 0 and self.session_usd >= self.max_budget_usd:
            return "session"
        if self.max_total_budget_usd > 0 and self.agent_usd >= self.max_total_budget_usd:
            return "agent"
        return None

    def message(self) -> str:
        """Says which cap is reached and what to do (for the session_error and the error)."""
        if self.exceeded == "session":
            return (f"This session has reached its spending cap ({usd(self.session_usd)} of "
                    f"{usd(self.max_budget_usd)}): no new turn is started. Raise the agent's "
                    "max_budget_usd, or start a new session.")
        if self.exceeded == "agent":
            return (f"The agent has reached its spending cap ({usd(self.agent_usd)} of "
                    f"{usd(self.max_total_budget_usd)} over all its sessions): no new turn is started. "
                    "Raise the agent's max_total_budget_usd.")
        return "Within budget."

    def as_dict(self) -> dict[str, Any]:
        """For ``admin`` and JSON: the spend and the caps (None: no cap)."""
        return {"session_usd": round(self.session_usd, 6), "max_budget_usd": self.max_budget_usd or None,
                "agent_usd": round(self.agent_usd, 6), "max_total_budget_usd": self.max_total_budget_usd or None,
                "exceeded": self.exceeded}


@dataclass(frozen=True)
class SessionBudget:
    """The caps one session incarnation enforces at the start of each turn, resolved when
    it starts (:func:`session_budget`): the session's spend is counted in memory (what it
    had spent when it started, plus what its turns cost since), the agent's total is read
    from the store only when the agent has a cap on it."""

    agent_id: str | None
    max_budget_usd: float
    #: 0 for a session without an agent (there is no agent total to cap)
    max_total_budget_usd: float
    #: the session's stored spend when the incarnation started, less what its tally
    #: started with (the tally goes on counting from the supervisor's memory)
    spent_before_usd: float

    def spend(self, session_id: str, tally_usd: float, agent_usd: float | None) -> Spend:
        """The :class:`Spend` for the tally's ``tally_usd``; ``agent_usd``: the agent's total
        (None: not read, because the agent's total is not capped)."""
        session_usd = self.spent_before_usd + tally_usd
        return Spend(session_id, session_usd, self.max_budget_usd, self.agent_id,
                     session_usd if agent_usd is None else agent_usd, self.max_total_budget_usd)

    def with_access(self, access: AgentAccess) -> SessionBudget:
        """The same session under the agent's settings as they are now."""
        return SessionBudget(self.agent_id, access.max_budget_usd,
                             access.max_total_budget_usd if self.agent_id else 0.0, self.spent_before_usd)


def session_budget(agent: Any | None, cfg: AccessConfig, *, stored_usd: float,
                   tally_usd: float) -> SessionBudget | None:
    """The caps of a session of ``agent`` (its row, or None) starting an incarnation whose
    stored spend is ``stored_usd`` and whose tally starts at ``tally_usd``; None when no
    cap applies (then a turn costs no check at all)."""
    access = agent_access(agent, cfg)
    agent_id = getattr(agent, "id", None) if agent is not None else None
    budget = SessionBudget(agent_id, 0.0, 0.0, max(stored_usd - tally_usd, 0.0)).with_access(access)
    return budget if budget.max_budget_usd > 0 or budget.max_total_budget_usd > 0 else None
