"""The admin actor's commands that start, stop and resume sessions: ``start``, ``send``,
``stop``, ``resume``, ``extend`` and ``restart``. A collaborator the admin actor holds,
given the store, the supervisor and (several daemons) the cluster router; it runs on the
admin actor's thread, replies with JSON-ready data, or raises
:class:`~corvid_actors.errors.AdminError`. Whether the daemon still takes such work (a
shutdown refuses it) is the actor's to decide, before it calls here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pykka

from corvid_actors.actors import supervisor as sv
from corvid_actors.actors.admin._cluster import ClusterRouter, send_anywhere
from corvid_actors.actors.admin._commands import ask_actor
from corvid_actors.actors.admin._views import resolve_session_id
from corvid_actors.errors import CONFLICT, NOT_FOUND, UNAVAILABLE, AdminError, ConflictError


class SessionCommands:
    """See the module docstring."""

    def __init__(self, store: Any, supervisor: pykka.ActorRef[Any], router: ClusterRouter | None) -> None:
        self._store = store
        self._supervisor = supervisor
        self._router = router

    def _sid(self, args: Mapping[str, Any]) -> str:
        return resolve_session_id(self._store, args["session"])

    def start(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """``admin start AGENT PROMPT``: a new session of the agent (created with ``create``)."""
        store = self._store
        if store.schema_refusal is not None:  # issue 36: nothing is created here
            raise AdminError(UNAVAILABLE, f"this daemon takes no new work: {store.schema_refusal}")
        agent = store.find_agent(args["agent"])
        created = agent is None
        settings = {k: args[k] for k in ("provider", "model", "permission_mode", "kind", "conversation_mode",
                                         "max_budget_usd", "max_total_budget_usd") if k in args}
        if agent is None and not args.get("create"):
            names = ", ".join(a.name for a in store.list_agents()) or "none yet"
            raise AdminError(NOT_FOUND, f"no agent {args['agent']!r} (agents: {names}); add --create to create it "
                                        "(with --provider, --model, --permission-mode, --kind)")
        if created or settings:
            try:
                agent = store.ensure_agent(args["agent"], **settings)
            except ConflictError as exc:
                raise AdminError(CONFLICT, str(exc)) from None
        session = store.create_session(agent_id=agent.id, source=args.get("source", "web"),
                                       name=args.get("name", ""), participant=args.get("participant", ""),
                                       initial_prompt=args["prompt"])
        pid = ask_actor(self._supervisor, sv.StartProcess(session.id, args["prompt"]))
        if pid is None:
            raise AdminError(CONFLICT, f"session {session.id} could not start; "
                                       f"see `corvid-actors admin session {session.id[:8]}`")
        return {"session": session.id, "pid": pid, "agent": agent.name, "created_agent": created}

    def send(self, args: Mapping[str, Any]) -> Any:
        """``admin send ID TEXT``: delivered to the running session, or resumes it."""
        sid = self._sid(args)
        if self._router is not None:  # several daemons: stored wherever the session is (issue 36)
            return send_anywhere(self._router, self._supervisor, sid, args["text"])
        # ResumeProcess delivers to a running session, or resumes an ended one with its
        # history; either way the message is persisted before this reply (acknowledged).
        pid = ask_actor(self._supervisor, sv.ResumeProcess(sid, args["text"]))
        return {"session": sid, "delivered": pid is not None, "pid": pid}

    def stop(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """``admin stop ID``: the session stops (``user_stop``); one stopped already is left."""
        sid = self._sid(args)
        was_running = bool(ask_actor(self._supervisor, sv.IsRunning(sid)))
        was_paused = bool(ask_actor(self._supervisor, sv.IsPaused(sid)))
        # a session stopped already is left as it is: no second session_stopped
        stopped = bool(ask_actor(self._supervisor, sv.StopProcess(sid, "user_stop")))
        return {"session": sid, "was_running": was_running, "was_paused": was_paused,
                "already_stopped": not stopped}

    def resume(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """``admin resume ID``: a paused session resumes; a stopped one starts with its history."""
        sid = self._sid(args)
        if ask_actor(self._supervisor, sv.IsPaused(sid)):
            ask_actor(self._supervisor, sv.ResumeSession(sid))
            return {"session": sid, "how": "resumed_paused"}
        if ask_actor(self._supervisor, sv.IsRunning(sid)):
            return {"session": sid, "how": "already_running"}
        pid = ask_actor(self._supervisor, sv.ResumeProcess(sid, None))
        if pid is None:
            raise AdminError(CONFLICT, f"session {sid} could not resume; see `corvid-actors admin session {sid[:8]}`")
        return {"session": sid, "how": "resumed_with_history", "pid": pid}

    def extend(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """``admin extend ID MINUTES``: the running session's timeout, and whether a cap applied."""
        sid = self._sid(args)
        requested_s = float(args["minutes"]) * 60
        if not ask_actor(self._supervisor, sv.ExtendSessionTimeout(sid, requested_s)):
            raise AdminError(CONFLICT, f"session {sid} is not running")
        after = ask_actor(self._supervisor, sv.SessionInfo(sid)).get(sid, {}).get("timeout_s")
        # The new deadline is now + the request, capped at 4x the default timeout
        # (supervision.extended_timeout): say so when the cap applied.
        capped = after is not None and after < requested_s - 1e-6
        return {"session": sid, "timeout_s": after, "requested_s": requested_s, "capped": capped}

    def restart(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """``admin restart ID``: stop (``user_stop``, when it runs) then resume with its history."""
        stopped = self.stop(args)
        resumed = self.resume({**args, "session": stopped["session"]})
        return {"session": stopped["session"], "was_running": stopped["was_running"],
                "was_paused": stopped["was_paused"], "how": resumed["how"], "pid": resumed.get("pid")}
