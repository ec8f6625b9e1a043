"""The admin actor's views of sessions: ``admin sessions`` (stored, or the local view while
the store cannot be reached) and ``admin session ID``. A collaborator the admin actor
holds, given what it reads; it runs on the admin actor's thread."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import corvid_actors.actors.admin._commands as cmd
from corvid_actors.actors import approvals as ap
from corvid_actors.actors import supervisor as sv
from corvid_actors.actors.admin._cluster import ClusterRouter
from corvid_actors.actors.admin._commands import ask_actor
from corvid_actors.actors.admin._views import (
    RecentEvents,
    local_view,
    session_detail,
    session_summary,
)
from corvid_actors.clock import iso_utc
from corvid_actors.errors import BAD_REQUEST, AdminError, StoreError, StoreUnavailableError
from corvid_actors.policy.access import agent_access
from corvid_actors.schema.sections import AccessConfig, DaemonConfig


class SessionViews:
    """See the module docstring."""

    def __init__(self, store: Any, supervisor: Any, approvals: Any, router: ClusterRouter | None,
                 access: AccessConfig, settings: DaemonConfig, recent: RecentEvents) -> None:
        self._store = store
        self._supervisor = supervisor
        self._approvals = approvals
        self._router = router
        self._access = access
        self._settings = settings
        self._recent = recent

    def sessions(self, args: Mapping[str, Any]) -> list[dict[str, Any]] | dict[str, Any]:
        """The stored sessions; while the store cannot be reached, the local view
        (:func:`local_view`): a daemon cut off from the database still says what it runs."""
        try:
            return self._stored_sessions(args)
        except StoreUnavailableError as exc:
            return self._local_sessions(args, str(exc))

    def _local_sessions(self, args: Mapping[str, Any], reason: str) -> dict[str, Any]:
        info = self._own(ask_actor(self._supervisor, sv.SessionInfo(None)))
        pending = cmd.pending_counts(self._approvals)
        router, doubt = self._router, None
        if router is not None and not router.seat.lease_valid():
            doubt = (f"no heartbeat for {router.seat.config.lease_s:g}s: another daemon may have taken "
                     "some of these sessions over (this daemon stops them when it learns so)")
        return local_view(info, pending, self._recent.known_agent, reason, status=args.get("status"),
                          limit=args.get("limit", self._settings.session_list_limit),
                          owner=router.daemon_id if router is not None else None, doubt=doubt)

    def _stored_sessions(self, args: Mapping[str, Any]) -> list[dict[str, Any]]:
        status = args.get("status")
        rows = self._store.list_sessions(statuses=[status] if status else None,
                                          limit=args.get("limit", self._settings.session_list_limit))
        info = self._own(ask_actor(self._supervisor, sv.SessionInfo(None)))
        pending = cmd.pending_counts(self._approvals)
        agents, caps = self._agent_names_and_caps()
        out = [session_summary(row, info.get(row.id), pending.get(row.id, 0), agents, caps) for row in rows]
        if self._router is not None:  # several daemons: which one owns each session
            owners = self._router.owners([row.id for row in rows])
            for item in out:
                item["owner"] = owners.get(item["id"])
        return out

    def page(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """``sessions_page`` (the HTTP API's sessions list): one keyset page of stored
        sessions, most recently active first, filtered by status, agent (name or id),
        source and a search text ``q``; ``next_cursor`` continues it (None: the last page)."""
        limit = int(args.get("limit", self._settings.session_list_limit))
        agent_id = None
        if args.get("agent"):
            agent = self._store.find_agent(args["agent"])
            if agent is None:
                return {"sessions": [], "next_cursor": None}
            agent_id = agent.id
        rows = self._store.page_sessions(limit=limit + 1, status=args.get("status"), agent_id=agent_id,
                                         source=args.get("source"), query=args.get("q"),
                                         after=decode_cursor(args["cursor"]) if args.get("cursor") else None)
        more = len(rows) > limit
        rows = rows[:limit]
        info = self._own(ask_actor(self._supervisor, sv.SessionInfo(None)))
        pending = cmd.pending_counts(self._approvals)
        agents, caps = self._agent_names_and_caps()
        owners = self._router.owners([row.id for row in rows]) if self._router is not None else {}
        out = []
        for row in rows:
            item = session_summary(row, info.get(row.id), pending.get(row.id, 0), agents, caps)
            item["owner"] = owners.get(row.id)
            item["last_activity"] = iso_utc(row.updated_at.replace(tzinfo=UTC))
            out.append(item)
        return {"sessions": out, "next_cursor": encode_cursor(rows[-1]) if more and rows else None}

    def session(self, sid: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """One session in detail: its row, what runs here, approvals, recent messages and
        events, and (several daemons) where it ran."""
        row = self._store.require_session(sid)
        info = self._own(ask_actor(self._supervisor, sv.SessionInfo(sid))).get(sid)
        approvals = ask_actor(self._approvals, ap.ListPending(sid))
        agents, caps = self._agent_names_and_caps()
        summary = session_summary(row, info, len(approvals), agents, caps)
        n_messages = args.get("messages", self._settings.session_messages_shown)
        messages = self._store.recent_messages(sid, n_messages, roles=("user", "assistant", "system"))
        n_events = args.get("events", self._settings.recent_events)
        detail = session_detail(summary, row, info, approvals, messages, self._recent.of(sid)[-n_events:])
        if self._router is not None:  # several daemons: where it ran, oldest first (issue 36)
            try:
                detail["ownership"] = [o.to_dict() for o in self._router.seat.cluster.ownership(sid)]
            except StoreError as exc:  # the rest of the answer stands without it
                detail["ownership"], detail["ownership_unavailable"] = None, str(exc)
        return detail

    def _agent_names_and_caps(self) -> tuple[dict[str, str], dict[str, float]]:
        """Each agent's name and per-session spending cap, by agent id (session views)."""
        rows = self._store.list_agents()
        return ({a.id: a.name for a in rows},
                {a.id: agent_access(a, self._access).max_budget_usd for a in rows})

    def _own(self, info: Mapping[str, Any]) -> Mapping[str, Any]:
        """The supervisor's facts of the sessions this daemon still owns (several daemons:
        an incarnation whose lease was taken is on its way out; it does not run "here")."""
        if self._router is None:
            return info
        seat = self._router.seat
        return {sid: facts for sid, facts in info.items() if seat.owns(sid) or not facts.get("running")}


def encode_cursor(row: Any) -> str:
    """The cursor after ``row``: its ``(updated_at, id)``, opaque to the client."""
    raw = f"{row.updated_at.isoformat()}|{row.id}".encode()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The ``(updated_at, id)`` an :func:`encode_cursor` cursor holds; ``bad_request`` when
    it is not one."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("utf-8")
        stamp, sep, sid = raw.partition("|")
        if not sep or not sid:
            raise ValueError(cursor)
        return datetime.fromisoformat(stamp), sid
    except ValueError:
        raise AdminError(BAD_REQUEST, "sessions_page: argument 'cursor' is not a cursor this API gave "
                                      "(pass next_cursor of the previous page as it is)") from None
