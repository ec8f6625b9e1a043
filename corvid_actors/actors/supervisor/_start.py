"""Starting an incarnation: the ticket, the build off the supervisor's thread, ``Built``.

:func:`start` creates the SessionActor, which builds itself on its own worker (provider
routing, tools, MCP servers, prompts) and reports :class:`~corvid_actors.actors.session.Built`
or :class:`~corvid_actors.actors.session.BuildFailed`. Until then the asker holds a
:class:`~corvid_actors.actors.supervisor.StartTicket` and messages sent to the session wait
in the incarnation's ``held`` list. All functions run on the supervisor's thread.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from corvid_actors.actors.base import tell
from corvid_actors.actors.live import LiveSession
from corvid_actors.actors.session import SessionActor
from corvid_actors.actors.session_messages import Begin, Ready
from corvid_actors.actors.session_wiring import Lifeline, SessionWiring, TurnTally
from corvid_actors.actors.supervisor._core import SupervisorCore
from corvid_actors.actors.supervisor._messages import StartTicket
from corvid_actors.actors.supervisor._state import Incarnation, Meta
from corvid_actors.actors.timers import CancelTimer
from corvid_actors.content import UserContent, content_blocks, text_parts
from corvid_actors.core.double_texting import double_texting_policy
from corvid_actors.errors import SchemaTooNew
from corvid_actors.events import ErrorEvent, SessionError, SessionStarted, SystemEvent
from corvid_actors.policy.access import session_budget
from corvid_actors.telemetry.metrics import agent_labels


def claim_here(core: SupervisorCore, sid: str) -> bool:
    """Several daemons: this daemon holds ``sid``'s lease (claimed now if need be); False,
    with an ``owned_elsewhere`` error event, when another live daemon holds it. Called
    before anything is written for the session (a prompt included). One daemon: True.
    Raises SchemaTooNew for a new incarnation once the database's schema changed to one
    this code cannot run with (issue 36: it takes no new work; ``Store.check_schema``)."""
    refusal = core.store.schema_refusal
    if refusal is not None and not (core.cluster is not None and core.cluster.owns(sid)):
        raise SchemaTooNew(f"this daemon takes no new work: {refusal}")
    if core.cluster is None or core.cluster.owns(sid) or core.cluster.claim(sid) is not None:
        return True
    owner = core.cluster.cluster.owner_of(sid)
    where = f" on daemon {owner.owner_id}" if owner is not None and owner.owner_id else " elsewhere"
    core.publish(sid, ErrorEvent(error_type="owned_elsewhere", message=f"Session is running{where}"))
    return False


def start(core: SupervisorCore, sid: str, prompt: UserContent | None, *, begin: bool = True,
          turns: int | None = None, session: Any | None = None,
          inherited_deadline: datetime | None = None,
          inherited_idle_deadline: datetime | None = None, quiet: bool = False) -> StartTicket | None:
    """Start an incarnation. ``begin``: its first turn is ``prompt`` (or the initial
    prompt); otherwise it comes up ready and waits for a message. ``turns``: the turn
    count it starts with (default, as the original's start: at least 1, the prompt).

    The incarnation builds itself on its own worker (off this thread): the reply is a
    :class:`StartTicket` that gets the pid when it reports ``Built`` (see
    :func:`on_built`), or None when the build fails or it is stopped first. None: it
    could not start (an unknown project; an ``error`` event says so). ``session``: the
    session's row if the caller has just read it. ``inherited_deadline``: a session taken
    over while it waited for its user (``begin=False``) keeps the inactivity deadline its
    old owner stored (issue 20), and ``inherited_idle_deadline`` its idle exit's (issue 36).
    ``quiet``: a passivated session's reactivation (issue 37, ``_passivation``): it keeps
    its pid, publishes no start events and is told no ``Ready`` (its first message, held
    until it is built, is the one that woke it)."""
    if sid in core.running:
        core.stop_session(sid, "replaced")
    ctx = core.store.session_context(sid, session)  # NotFoundError goes to the asker
    session = ctx.session
    if session.project_id and ctx.project is None:
        core.publish(sid, ErrorEvent(error_type="not_found", message=f"Project {session.project_id} not found"))
        return None
    if not claim_here(core, sid):
        return None
    blocks = content_blocks(prompt) if prompt is not None else ()
    text = text_parts(blocks) if blocks else (prompt if isinstance(prompt, str) else session.initial_prompt or "")
    core.generation += 1
    gen = core.generation
    sup = core.sup
    lifeline = Lifeline(sid, core.bus, coalesce=sup.coalesce_deltas, pump=core.delta_pump,
                        gate=core.cluster.may_publish if core.cluster is not None else None)
    timeout_s = sup.session_timeout_s
    meta = core.meta.setdefault(sid, Meta(source=session.source))
    meta.source = session.source
    tally = TurnTally(turns=turns if turns is not None else max(meta.turns, session.total_turns or 0, 1),
                      cost_usd=meta.cost_usd)
    partial = SessionWiring(
        session_id=sid, generation=gen, lifeline=lifeline, supervisor=core.ref,
        timers=core.timers, clock=core.clock, store=core.store, provider=None,  # type: ignore[arg-type]
        loop=None, tools=None, tool_context=None,  # type: ignore[arg-type]
        timeout_s=timeout_s, idle_timeout_s=None, approvals=core.approvals,
        passivate_after_s=core.cfg.session.passivate_after_s or None,
        snapshot_dir=core.snapshot_dir,
        tally=tally, source=session.source, credits=core.credits, write_retry=core.cfg.store.write_retry,
        io_loop=core.io_loop,
        deadline_sink=core.cluster.note_deadline if core.cluster is not None else None,
        inherited_deadline=None if begin else inherited_deadline,
        double_texting=double_texting_policy(
            getattr(ctx.agent, "double_texting", None),
            core.cfg.agents.kind_for(getattr(ctx.agent, "kind", None), session.source),
            config_default=core.cfg.agents.double_texting),
        inherited_idle_deadline=None if begin else inherited_idle_deadline,
        budget=session_budget(ctx.agent, core.cfg.access, stored_usd=float(session.total_cost_usd or 0.0),
                              tally_usd=tally.cost_usd),
        access=core.cfg.access,
        tracing=core.tracing, agent=getattr(ctx.agent, "name", "") or "",
    )
    builder, slot_pool, journal = core.builder, core.slot_pool, core.journal

    def build() -> tuple[SessionWiring, Any]:
        # on the incarnation's worker: provider routing, tools, MCP servers, prompts
        built = builder.build(ctx)
        tap = journal.tap(sid, gen, ctx.agent, built, session.source) if journal is not None else None
        return replace(
            partial, provider=built.provider, loop=built.loop, tools=built.tools,
            tool_context=built.tool_context,
            idle_timeout_s=sup.session_idle_timeout_s if built.loop_kind in sup.idle_exit_loops else None,
            slot_pool=slot_pool if built.uses_slots else None, approval_timeout_s=built.approval_timeout_s,
            slot_weight=built.slot_weight, provider_name=built.provider_name, journal=tap,
        ), built

    core.tracing.decision("start", sid, {"corvid.session.generation": gen, "corvid.session.begin": begin,
                                         "corvid.session.source": session.source or ""})
    ref = SessionActor.start(core.tracker, partial, build)
    entry = LiveSession(sid, gen, ref, lifeline, tally, begun=begin, double_texting=partial.double_texting,
                        labels=agent_labels(ctx.agent))
    ticket = StartTicket(core.tracker.inline)
    first: Begin | Ready | None = Begin(text, blocks) if begin else None if quiet else Ready()
    core.live.starting(sid, gen)
    passivated = core.passivated.get(sid)
    inc = core.running[sid] = Incarnation(gen, ref, lifeline, 0, core.clock.monotonic(), "", timeout_s, entry,
                                          tally, ticket=ticket, first=first,
                                          quiet_pid=passivated.pid if quiet and passivated is not None else 0,
                                          first_build=quiet and passivated is not None and not passivated.built)
    core.unpassivate(sid)  # after live.starting: a send in between still finds the session
    core.track_due(sid, inc)
    core.ensure_housekeeping()
    return ticket


def on_built(core: SupervisorCore, sid: str, built: Any) -> None:
    """The incarnation is built: it runs from now on (row, events, its first message)."""
    inc = core.running[sid]
    meta = core.meta_of(sid)
    kind = built.pid_kind
    pid = inc.quiet_pid
    if not pid:
        pid = core.next_pid[kind]
        core.next_pid[kind] += 1
    inc.pid, inc.provider_name, inc.resources = pid, built.provider_name, tuple(built.resources)
    inc.started_at = core.clock.monotonic()
    core.track_due(sid, inc)
    inc.building = False
    restart_timer = meta.restart_pending  # a restart may still be scheduled: cancelled below
    meta.restart_pending = False
    meta.turns = inc.tally.turns
    begin = isinstance(inc.first, Begin)
    tally, gen = inc.tally, inc.generation
    if not inc.quiet_pid:  # a reactivation's row says so already: running, its pid, no open turn
        # open_turns: the first turn is in flight (begin) or there is none (ready)
        core.write(sid, "the session status", lambda: core.store.update_session(
            sid, pid=pid, status="running", restart_pending=False, total_turns=tally.turns,
            open_turns=1 if begin else 0))
    if restart_timer:
        tell(core.timers, CancelTimer((sid, "restart")))
    if core.cluster is not None:
        core.cluster.clear_due(sid)
    if not inc.quiet_pid:
        # one message to the bus, before the incarnation hears of its first turn
        core.publish_all(sid, (
            SessionStarted(pid=pid, generation=gen),
            SystemEvent(subtype="provider_selected", message=built.provider_selected
                        or f"Provider: {built.provider_name} ({built.model})"),
            *built.notices))
    elif inc.first_build and built.notices:  # passivated at start-up, built only now (``_dormant``)
        core.publish_all(sid, built.notices)
    if inc.first is not None:
        tell(inc.ref, inc.first)
    # messages sent while it was building, in their order
    held, inc.held, inc.first = inc.held, [], None
    for message in held:
        tell(inc.ref, message)
    # only now may the send path tell it directly
    core.live.put(inc.entry)
    if inc.ticket is not None:
        inc.ticket.resolve(pid)
    core.ensure_housekeeping()


def built_too_late(core: SupervisorCore, sid: str, built: Any) -> None:
    """An incarnation stopped (or replaced) while it was building reports ``Built``: what
    it made is closed here."""
    core.close_later(sid, tuple(built.resources))


def build_failed(core: SupervisorCore, sid: str, error: str) -> None:
    """Building raised (a spawn error): row ``error``, ``spawn_error`` events."""
    core.kill(sid)
    core.write(sid, "the session status", lambda: core.store.update_session(sid, status="error", pid=None))
    core.publish(sid, ErrorEvent(error_type="spawn_error", message=error))
    core.publish(sid, SessionError(error_type="spawn_error", message=error, severity="fatal", recoverable=False))
