"""Pure helpers of the AdminActor: how sessions and events look to an operator.

No actor, no thread: rows and dicts in, JSON-ready dicts out (``session_summary``), the
log line for each lifecycle event (``LIFECYCLE_LOG``), the recent events of recent
sessions (``RecentEvents``, owned by the AdminActor), session-id prefixes
(``resolve_session_id``, a read of the store) and the detail of one session
(``session_detail``). Health and process figures are in ``_admin_health``.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from typing import Any

from loguru import logger

from corvid_actors.clock import iso_utc
from corvid_actors.errors import BAD_REQUEST, NOT_FOUND, UNAVAILABLE, AdminError
from corvid_actors.policy.access import AgentAccess

#: events too frequent to keep or log per session (a follower still gets them)
UNRECORDED_EVENTS = frozenset({"content_block_delta", "thinking", "context_usage"})

#: shortest id prefix accepted for a session
MIN_ID_PREFIX = 4


def _text(event: Mapping[str, Any], key: str) -> str:
    return str(event.get(key, ""))


#: event type -> (log level, message) for the daemon's log
LIFECYCLE_LOG: Mapping[str, tuple[str, Callable[[Mapping[str, Any]], str]]] = {
    # Not the pid or generation: runtime counters, meaningless to an operator.
    "session_started": ("INFO", lambda e: "session started"),
    "session_exited": ("INFO", lambda e: f"session exited with code {_text(e, 'code')} after {_text(e, 'num_turns')} turns"),
    "session_stopped": ("INFO", lambda e: f"session stopped ({_text(e, 'reason')})"),
    "session_paused": ("WARNING", lambda e: f"session paused until {_text(e, 'resume_at')} (attempt {_text(e, 'attempt')})"),
    "session_resumed": ("INFO", lambda e: "session resumed " + ("automatically" if e.get("automatic") else "by hand")),
    "session_restarting": ("WARNING", lambda e: f"session restart #{_text(e, 'attempt')} in {_text(e, 'delay_s')} s"),
    "error": ("WARNING", lambda e: f"error [{_text(e, 'error_type')}] {_text(e, 'message')}"),
    "approval_request": ("INFO", lambda e: f"approval {_text(e, 'id')} requested: {_text(e, 'description')}"),
    "approval_resolved": ("INFO", lambda e: f"approval {_text(e, 'id')} resolved: {_text(e, 'behavior')}"),
    "result": ("INFO", lambda e: f"turn finished ({_text(e, 'subtype')}, ${float(e.get('total_cost_usd') or 0):.4f})"),
    "credits_low": ("WARNING", lambda e: f"low credits: {_text(e, 'remaining')} left"),
}


def session_summary(row: Any, info: Mapping[str, Any] | None, pending_approvals: int,
                    agent_names: Mapping[str, str], session_caps: Mapping[str, float] | None = None) -> dict[str, Any]:
    """One line of ``admin sessions``: the stored row joined with the supervisor's facts.
    ``session_caps``: each agent's ``max_budget_usd`` (0: no cap), shown as ``budget_usd``."""
    cap = (session_caps or {}).get(row.agent_id, 0.0) if row.agent_id else 0.0
    return {
        "id": row.id,
        "name": row.name,
        "status": row.status,
        "agent": agent_names.get(row.agent_id, "") if row.agent_id else "",
        "source": row.source,
        "participant": row.participant,
        "uptime_s": info.get("uptime_s", 0.0) if info and info.get("running") else None,
        #: an incarnation runs in this daemon (several daemons: the others run the rest)
        "here": bool(info and info.get("running")),
        "restarts": info.get("restarts", 0) if info else 0,
        "paused_until": info.get("paused_until") if info else None,
        "pending_approvals": pending_approvals,
        "cost_usd": round(float(row.total_cost_usd or 0.0), 6),
        #: the session's spending cap (its agent's max_budget_usd), None: no cap
        "budget_usd": cap or None,
        "turns": int(row.cumulative_turns or 0),
        "restart_pending": bool(row.restart_pending),
    }


def local_view(info: Mapping[str, Mapping[str, Any]], pending_approvals: Mapping[str, int],
               agent_of: Callable[[str], str], reason: str, *, status: str | None = None, limit: int | None = None,
               owner: str | None = None, doubt: str | None = None) -> dict[str, Any]:
    """``admin sessions`` while the store cannot be reached (``reason``): the sessions that
    run (or wait paused) in this daemon, from the supervisor's facts (``info``), as
    ``{"view": "local", "sessions": [...], "warning": {"code": "unavailable", "message": ...}}``.
    Each line has :func:`session_summary`'s keys; what only the store knows (name, source,
    participant, budget) is left empty, the turns and cost are this incarnation's count.
    ``agent_of`` names an agent from what the daemon remembers ("" if nothing);
    ``owner``: this daemon's id (several daemons); ``doubt``: why the list may hold sessions
    another daemon has taken meanwhile (its leases are not known to be its own)."""
    lines: list[dict[str, Any]] = []
    for sid, facts in sorted(info.items()):
        state = "paused" if facts.get("paused_until") else "running" if facts.get("running") else None
        if state is None or (status is not None and state != status):
            continue
        lines.append({
            "id": sid, "name": "", "status": state, "agent": agent_of(sid), "source": "", "participant": "",
            "uptime_s": facts.get("uptime_s", 0.0) if facts.get("running") else None,
            "here": bool(facts.get("running")), "restarts": facts.get("restarts", 0),
            "paused_until": facts.get("paused_until"), "pending_approvals": pending_approvals.get(sid, 0),
            "cost_usd": round(float(facts.get("cost_usd") or 0.0), 6), "budget_usd": None,
            "turns": int(facts.get("turns") or 0), "restart_pending": bool(facts.get("restart_pending")),
            **({"owner": owner} if owner is not None else {}),
        })
    message = (f"{reason}; shown: only the sessions that run in this daemon, as it knows them without "
               "the database (names, sources and the other daemons' sessions are not known)")
    if doubt:
        message += f"; {doubt}"
    return {"view": "local", "sessions": lines[:limit] if limit is not None else lines,
            "warning": {"code": UNAVAILABLE, "message": message}}


def agent_summary(agent: Any, access: AgentAccess, spend_usd: float) -> dict[str, Any]:
    """One line of ``admin agents``: the agent, who may talk to it, and its spend against its caps."""
    return {
        "id": agent.id, "name": agent.name, "provider": agent.provider, "model": agent.model,
        "permission_mode": agent.permission_mode, "kind": agent.kind,
        "conversation_mode": access.mode, "conversation_allowlist": sorted(access.allowlist),
        "conversation_rate_limit_max": access.rate_limit_max,
        "conversation_rate_limit_window_s": access.rate_limit_window_s,
        #: what all its sessions have spent, and the caps (None: no cap)
        "spend_usd": round(spend_usd, 6),
        "max_total_budget_usd": access.max_total_budget_usd or None,
        "max_budget_usd": access.max_budget_usd or None,
    }


def session_detail(summary: Mapping[str, Any], row: Any, info: Mapping[str, Any] | None,
                   approvals: list[Any], messages: list[tuple[str, Any]],
                   events: list[dict[str, Any]]) -> dict[str, Any]:
    """``admin session ID``: the summary line with the row's and the supervisor's details,
    the pending approvals, the latest messages and the recent events."""
    return {
        **summary,
        "pid": info.get("pid") if info else None,
        "provider": info.get("provider") if info else None,
        "timeout_s": info.get("timeout_s") if info else None,
        "in_turn": bool(info.get("in_turn")) if info else None,
        "restart_pending": bool(row.restart_pending),
        "initial_prompt": row.initial_prompt,
        "created_at": iso_utc(row.created_at),
        "updated_at": iso_utc(row.updated_at),
        "approvals": approvals,
        "messages": [{"role": role, "content": content} for role, content in messages],
        "events": events,
    }


def resolve_session_id(store: Any, text: str) -> str:
    """A full session id from an id or a unique prefix (at least ``MIN_ID_PREFIX`` chars)."""
    if store.get_session(text) is not None:
        return text
    if len(text) < MIN_ID_PREFIX:
        raise AdminError(NOT_FOUND, f"no session {text!r} (give the id or at least {MIN_ID_PREFIX} of its first characters)")
    session = store.m.Session
    with store.transaction():
        matches = [row.id for row in session.select(session.id).where(session.id.startswith(text)).limit(2)]
    if not matches:
        raise AdminError(NOT_FOUND, f"no session {text!r}; see `corvid-actors admin sessions`")
    if len(matches) > 1:
        raise AdminError(BAD_REQUEST, f"session prefix {text!r} is ambiguous: give more characters")
    return matches[0]


class RecentEvents:
    """The last ``per_session`` events of the ``sessions`` sessions heard from most
    recently, each logged (lifecycle events only) with ``session_id`` and ``agent`` bound.
    ``agent_of(session_id)`` names a session's agent (asked once per session)."""

    def __init__(self, per_session: int, sessions: int, agent_of: Callable[[str], str],
                 turns_done_of: Callable[[str], int] | None = None) -> None:
        self.per_session = per_session
        self.sessions = sessions
        self._agent_of = agent_of
        #: how many turns the store says a session has finished (read when it starts)
        self._turns_done_of = turns_done_of
        self._rings: OrderedDict[str, deque[dict[str, Any]]] = OrderedDict()
        self._agents: OrderedDict[str, str] = OrderedDict()
        #: each recent session's current (or next) turn, counted from 1
        self._turns: OrderedDict[str, int] = OrderedDict()

    def log_fields(self, session_id: str) -> dict[str, Any]:
        """``agent`` and ``turn`` of a recent session for a log record (any thread: one
        read of each table, which only this actor's thread changes)."""
        fields: dict[str, Any] = {}
        agent = self._agents.get(session_id)
        if agent:
            fields["agent"] = agent
        turn = self._turns.get(session_id)
        if turn:
            fields["turn"] = turn
        return fields

    def __len__(self) -> int:
        return len(self._rings)

    def of(self, session_id: str) -> list[dict[str, Any]]:
        return list(self._rings.get(session_id, ()))

    def record(self, session_id: str, at: str, event: dict[str, Any]) -> None:
        ring = self._rings.get(session_id)
        if ring is None:
            ring = self._rings[session_id] = deque(maxlen=self.per_session)
            while len(self._rings) > self.sessions:
                self._rings.popitem(last=False)
        else:
            self._rings.move_to_end(session_id)
        ring.append({"at": at, **event})
        if event["type"] == "session_started" and self._turns_done_of is not None:
            self._turns[session_id] = self._turns_done_of(session_id) + 1
            while len(self._turns) > self.sessions:
                self._turns.popitem(last=False)
        self._log(session_id, event)
        if event["type"] == "result" and session_id in self._turns:
            self._turns[session_id] += 1  # what is logged from now on belongs to the next turn

    def known_agent(self, session_id: str) -> str:
        """The agent name remembered for ``session_id`` ("" if none): no store read."""
        return self._agents.get(session_id, "")

    def _agent(self, session_id: str) -> str:
        name = self._agents.get(session_id)
        if name is None:
            name = self._agents[session_id] = self._agent_of(session_id)
            while len(self._agents) > self.sessions:
                self._agents.popitem(last=False)
        return name

    def _log(self, session_id: str, event: dict[str, Any]) -> None:
        rule = LIFECYCLE_LOG.get(event["type"])
        if rule is None:
            return
        level, describe = rule
        if event["type"] == "session_exited" and event.get("code"):
            level = "WARNING"
        turn = self._turns.get(session_id)
        logger.bind(session_id=session_id, agent=self._agent(session_id), event=event["type"],
                    **({"turn": turn} if turn else {})).log(level, describe(event))
