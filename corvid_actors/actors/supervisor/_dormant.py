"""A start-up resume without an actor: sessions that only waited for their user come back
passivated (issue 37, items 4 and 5).

A daemon's start-up (``resume_many``) resumes every session a dead process left
``running``. Most of them were only waiting for their user: starting each for real builds
it (provider routing, tools, prompts) and gives it an actor and a thread, only for it to
passivate ``passivate_after_s`` later. Here such a session is registered passivated at
once (``_passivation``'s :class:`~corvid_actors.actors.supervisor._state.Passivated`
record, one timer): no build, no actor, no thread. What an observer sees is what a ready
start publishes — ``session_started`` (a new generation and pid), ``provider_selected``
and ``thinking: false`` — and the row is written as a built start writes it (``running``,
its pid, the turn count, nothing open). Its inactivity deadline and idle exit are armed as
the incarnation would have armed them (or inherited); the lease stays this daemon's.

What differs, and why: nothing is built until the next message, so a build that would
fail (a provider's start hook, an MCP server) fails at that message's reactivation (a
``spawn_error`` then), and a build's notices (``BuiltSession.notices``: a failed MCP
server, the sandbox's) are published at that reactivation instead of at start-up.

Routing is decided here as the build decides it (``SessionBuilder.routing``,
``model_for``, ``loop_for_provider``, the provider's traits), from the session's agent,
read once per agent and batch. A builder without those (a host's own) or a routing the
build would refuse (an unknown provider or loop): the session starts for real, as before.
All functions run on the supervisor's thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from loguru import logger

from corvid_actors.actors.base import tell
from corvid_actors.actors.supervisor._core import SupervisorCore
from corvid_actors.actors.supervisor._passivation import schedule
from corvid_actors.actors.supervisor._state import Meta, Passivated
from corvid_actors.actors.timers import CancelTimer
from corvid_actors.errors import CorvidError
from corvid_actors.events import Event, SessionStarted, SystemEvent, Thinking
from corvid_actors.policy.routing import provider_selected_message
from corvid_actors.providers.base import traits_of
from corvid_actors.telemetry.metrics import SessionLabels, agent_labels


@dataclass(frozen=True)
class StartPlan:
    """What a build would decide about a session's incarnation, without building it."""

    provider_name: str
    pid_kind: str
    loop_kind: str
    #: the ``provider_selected`` note of its start
    provider_selected: str


class ResumeBatch:
    """One bulk resume's shared reads and deferred effects: the agents (and projects) of
    its sessions, each read once; the rows and events of the sessions registered
    passivated, written in one transaction and then published by :meth:`finish`."""

    def __init__(self, store: Any) -> None:
        self._store = store
        #: (sid, pid, turns, events) per session registered passivated, in order
        self.pending: list[tuple[str, int, int, tuple[Event, ...]]] = []
        self._agents: dict[str, Any] = {}
        self._labels: dict[str | None, SessionLabels] = {}
        self._projects: dict[str, bool] = {}

    def agent(self, agent_id: str | None) -> Any | None:
        if not agent_id:
            return None
        if agent_id not in self._agents:
            self._agents[agent_id] = self._store.get_agent(agent_id)
        return self._agents[agent_id]

    def labels(self, agent_id: str | None) -> SessionLabels:
        """The metrics labels of the agent's sessions (one object per agent, shared)."""
        if agent_id not in self._labels:
            self._labels[agent_id] = agent_labels(self.agent(agent_id))
        return self._labels[agent_id]

    def project_exists(self, project_id: str | None) -> bool:
        if not project_id:
            return True
        if project_id not in self._projects:
            self._projects[project_id] = self._store.get_project(project_id) is not None
        return self._projects[project_id]

    def finish(self, core: SupervisorCore) -> None:
        """Write the rows of the sessions registered passivated (one transaction: one
        commit for the batch, not one per session), then publish their start events — the
        order of a built start: row first. A batch that cannot be written whole (or a
        retry queued before it) is written session by session, each a write that must
        happen (``SupervisorCore.write``: retried, or fenced alone)."""
        pending, self.pending = self.pending, []
        if not pending:
            return
        store = core.store

        def write_all() -> None:
            with store.transaction():
                for sid, pid, turns, _ in pending:
                    store.update_session(sid, pid=pid, status="running", restart_pending=False,
                                         total_turns=turns, open_turns=0)

        try:
            if len(core.writes):
                raise _InOrder
            write_all()
        except Exception:  # noqa: BLE001 - rolled back whole: each row again, on its own
            for sid, pid, turns, _ in pending:
                core.write(sid, "the session status", partial(
                    store.update_session, sid, pid=pid, status="running", restart_pending=False,
                    total_turns=turns, open_turns=0))
        for sid, _, _, events in pending:
            core.publish_all(sid, events)


class _InOrder(Exception):
    """Writes are queued for a retry already: these go after them, one by one."""


def plan_start(builder: Any, agent: Any | None, council_role: str | None) -> StartPlan | None:
    """The routing a build of this session would choose (``SessionBuilder._build``'s first
    steps), or None when it cannot be told without building: a builder without the
    routing methods, or a routing the build would refuse (that start reports why)."""
    routing = getattr(builder, "routing", None)
    providers = getattr(builder, "providers", None)
    loops = getattr(builder, "loops", None)
    if routing is None or providers is None or loops is None:
        return None
    decision = routing(agent)
    provider = providers.get(decision.provider)
    loop_kind = builder.loop_for_provider.get(decision.provider, "conversation")
    if provider is None or loop_kind not in loops:
        return None
    model = builder.model_for(decision.provider, agent, council_role, fallback=decision.fallback)
    return StartPlan(decision.provider, traits_of(provider).pid_kind, loop_kind,
                     provider_selected_message(decision, model))


def register_dormant(core: SupervisorCore, sid: str, session: Any, turns: int, rows: ResumeBatch, *,
                     inherited_deadline: datetime | None = None,
                     inherited_idle_deadline: datetime | None = None) -> int | None:
    """Register ``sid`` (waiting for its user, its lease claimed here) as passivated without
    an incarnation; its pid. None: it must start for real (passivation is off, its project
    is gone, or its routing cannot be told without a build — ``start`` reports those).
    Its row and start events wait for ``rows.finish`` (the end of the batch)."""
    if not core.cfg.session.passivate_after_s or sid in core.running or sid in core.passivated:
        return None
    if not rows.project_exists(session.project_id):
        return None
    try:
        plan = plan_start(core.builder, rows.agent(session.agent_id), session.council_role)
    except CorvidError as exc:  # e.g. a provider not configured: the real start says so
        logger.bind(session_id=sid).debug("start-up passivation skipped: {}", exc)
        return None
    if plan is None:
        return None
    sup = core.sup
    core.generation += 1
    gen = core.generation
    pid = core.next_pid[plan.pid_kind]
    core.next_pid[plan.pid_kind] += 1
    meta = core.meta.setdefault(sid, Meta(source=session.source))
    if meta.restart_pending:  # a restart still scheduled: this resume replaces it (as on_built)
        tell(core.timers, CancelTimer((sid, "restart")))
    meta.source, meta.turns, meta.restart_pending = session.source, turns, False
    now, mono = core.clock.now(), core.clock.monotonic()
    timeout_s = sup.session_timeout_s
    wait_s = timeout_s if inherited_deadline is None else max(
        min((inherited_deadline - now).total_seconds(), timeout_s), 0.0)
    idle_s: float | None = None
    if plan.loop_kind in sup.idle_exit_loops and sup.session_idle_timeout_s is not None:
        idle_s = sup.session_idle_timeout_s if inherited_idle_deadline is None else max(
            (inherited_idle_deadline - now).total_seconds(), 0.0)
    core.seq += 1
    rec = Passivated(seq=core.seq, pid=pid, provider_name=plan.provider_name, started_at=mono, timeout_s=timeout_s,
                     deadline_at=mono + wait_s, idle_at=None if idle_s is None else mono + idle_s, built=False)
    core.passivated[sid] = rec
    core.live.mark_passivated(sid, rows.labels(session.agent_id))
    if core.cluster is not None:
        core.cluster.clear_due(sid)
        core.cluster.note_deadline(sid, now + timedelta(seconds=wait_s),
                                   None if idle_s is None else now + timedelta(seconds=idle_s))
    # what a ready start publishes: the start (on_built) and "not thinking" (its actor)
    rows.pending.append((sid, pid, turns, (SessionStarted(pid=pid, generation=gen),
                                           SystemEvent(subtype="provider_selected", message=plan.provider_selected),
                                           Thinking(thinking=False))))
    schedule(core, sid, rec)
    core.ensure_housekeeping()
    return pid
