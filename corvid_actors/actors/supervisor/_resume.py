"""Resume with history, the send slow path, the context reset and the zero-turn breaker.

A resume delivers to a running incarnation (warm) or starts a new one whose first turn
carries the recent history (cold). The cold path also serves the context reset (seed
invariants 6/7: after ``max_turns_before_context_reset`` delivered turns an incarnation
is replaced) and the zero-turn breaker (reference §Resume 3: when every recent
incarnation died before a turn, the history is summarised and deleted). User messages
to a running session reach it here only when the runtime's fast path does not apply
(:class:`~corvid_actors.actors.supervisor.SendMessage`). All on the supervisor's thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from loguru import logger

from corvid_actors.actors.session_messages import Begin, UserInput
from corvid_actors.actors.supervisor._core import SupervisorCore
from corvid_actors.actors.supervisor._dormant import ResumeBatch, register_dormant
from corvid_actors.actors.supervisor._messages import StartTicket
from corvid_actors.actors.supervisor._start import claim_here, start
from corvid_actors.content import UserContent, content_blocks, image_blocks, text_parts
from corvid_actors.errors import CorvidError, NotFoundError
from corvid_actors.events import SessionError, SystemEvent
from corvid_actors.loop.prompts import build_resume_prompt, with_context_summary
from corvid_actors.loop.summaries import summarize_conversation
from corvid_actors.policy.supervision import (
    active_turns,
    inherited_inactivity_deadline,
    needs_context_reset,
    zero_turn_breaker_trips,
)
from corvid_actors.providers.base import ChatMessage

#: how many of a session's latest system messages the zero-turn breaker reads
BREAKER_NOTES_WINDOW = 50
#: ``last_role`` not read by the caller (``None`` means: the session has no message)
UNREAD = object()


def _warm_path_failed(core: SupervisorCore, sid: str) -> None:
    core.publish(sid, SystemEvent(subtype="warm_path_failed", message="Warm path failed, falling back to cold start"))


def resume(core: SupervisorCore, sid: str, prompt: UserContent | None, *,
           idle_deadline: datetime | None = None,
           idle_exit_deadline: datetime | None = None,
           session: Any | None = None, last_role: str | None | object = UNREAD,
           dormant: ResumeBatch | None = None) -> StartTicket | int | None:
    """Deliver ``prompt`` to the running incarnation, or start one with the history.
    Replies as :class:`~corvid_actors.actors.supervisor.ResumeProcess` says.
    ``idle_deadline``: a session taken over from another daemon — if it comes up waiting
    for its user, it keeps this inactivity deadline (the one its old owner stored), and
    ``idle_exit_deadline`` as its idle exit's (issue 36). ``session`` and ``last_role``:
    the session's row and the role that spoke last, read already (a bulk resume).
    ``dormant``: a start-up's bulk resume — a session that comes up waiting for its user
    is registered passivated, without a build or an actor (``_dormant``)."""
    session_cfg = core.cfg.session
    rec = core.passivated.get(sid)
    if rec is not None and not prompt:
        return rec.pid  # passivated: running, as far as a resume is concerned
    if rec is not None and not core.shutting_down:
        reactivate(core, sid)  # the prompt goes to the new, quiet incarnation below
    inc = core.running.get(sid)
    if inc is not None:
        if not prompt:
            return inc.ticket if inc.building else inc.pid
        if needs_context_reset(inc.entry.delivered, session_cfg.max_turns_before_context_reset):
            core.publish(sid, SystemEvent(subtype="context_reset",
                                          message="Context reset: restarting with recent history"))
            core.kill(sid)
        elif send(core, sid, prompt):
            return inc.ticket if inc.building else inc.pid
        else:
            # the incarnation refused the message (it is ending): send evicted it
            _warm_path_failed(core, sid)
    if not claim_here(core, sid):  # another daemon runs it: nothing is written here
        return None
    session = session if session is not None else core.store.require_session(sid)
    # Decided before the breaker may delete the history: a turn in flight at the end of
    # the last incarnation, or a user message nobody answered. Only then does a resume
    # without a new message call the model (a restart spends no turn on a session that
    # was waiting for its user).
    unanswered = unanswered_request(core, sid, session, last_role) if not prompt else None
    # several messages delivered to the last incarnation and not answered yet (queued
    # behind its turn): the first is the turn resumed, the others follow as their own
    # turns, each answered once (issue 36: a session moved or killed mid-queue)
    queued = queued_requests(core, sid, session) if unanswered is not None else []
    # the exit notes the breaker reads and the history, in one read
    notes, history = core.store.recent_messages_of(sid, ((("system",), BREAKER_NOTES_WINDOW),
                                                         (("user", "assistant"), session_cfg.resume_history_messages)))
    if zero_turn_breaker(core, sid, session, [content for _, content in notes]):
        session = core.store.require_session(sid)  # its summary and counts were rewritten
        history = core.store.recent_messages(sid, session_cfg.resume_history_messages)  # deleted
    if prompt:
        core.store.append_message(sid, "user", prompt)
    turns = active_turns(history, new_prompt=bool(prompt))
    if not prompt and (unanswered is None or not (history or unanswered)):
        last_write = _aware(session.updated_at)
        inherited = inherited_inactivity_deadline(idle_deadline, last_write, core.sup.session_timeout_s)
        # the idle exit is counted from the same turn's end, so the same rule applies
        idle_exit = inherited_inactivity_deadline(idle_exit_deadline, last_write, core.sup.session_idle_timeout_s)
        if dormant is not None:
            pid = register_dormant(core, sid, session, turns, dormant, inherited_deadline=inherited,
                                   inherited_idle_deadline=idle_exit)
            if pid is not None:
                return pid
        return start(core, sid, None, begin=False, turns=turns, session=session, inherited_deadline=inherited,
                     inherited_idle_deadline=idle_exit)
    blocks = content_blocks(prompt) if prompt else ()
    new_text = text_parts(blocks) if blocks else str(prompt or "")
    if queued:
        history = _without(history, queued)
    if history:
        text = build_resume_prompt(
            history, new_text, max_messages=session_cfg.resume_history_messages,
            max_chars=session_cfg.resume_history_message_chars, interrupted=not prompt,
        )
    else:
        text = new_text or unanswered or ""
    text = with_context_summary(session.conversation_summary or "", text)
    if blocks:
        # the history prompt as the text, the new message's images after it
        return start(core, sid, ({"type": "text", "text": text}, *image_blocks(blocks)), turns=turns,
                     session=session)
    ticket = start(core, sid, text, turns=turns, session=session)
    for message in queued:  # held by the incarnation being built, told after its first turn
        send(core, sid, message, stored=True)
    return ticket


def queued_requests(core: SupervisorCore, sid: str, session: Any) -> list[str]:
    """The user messages after the unanswered request that are unanswered too, oldest
    first: the session's ``open_turns`` counts the messages its incarnations took and did
    not answer (each is answered in order, so they are its newest user messages)."""
    count = int(session.open_turns or 0)
    if count <= 1:
        return []
    users = core.store.recent_messages(sid, count, roles=("user",))
    return [content for _, content in users[1:]]


def _without(history: list[tuple[str, str]], queued: list[str]) -> list[tuple[str, str]]:
    # the history up to the first unanswered request: the queued ones come as their own turns
    out = list(history)
    for text in reversed(queued):
        for i in range(len(out) - 1, -1, -1):
            if out[i] == ("user", text):
                del out[i]
                break
    return out


def _aware(moment: datetime | None) -> datetime | None:
    # the store's columns hold naive UTC
    return moment if moment is None or moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def unanswered_request(core: SupervisorCore, sid: str, session: Any,
                       last_role: str | None | object = UNREAD) -> str | None:
    """The request a resume without a new message must answer, or None when the session
    was not mid-turn: a turn was open when its last incarnation ended, or its newest
    user/assistant message is the user's, or it never had one and has an initial prompt.
    ``last_role``: that newest message's role if the caller read it (``UNREAD``: not)."""
    last = core.store.last_message_role(sid) if last_role is UNREAD else last_role
    if (session.open_turns or 0) > 0 or last == "user":
        users = core.store.recent_messages(sid, 1, roles=("user",))
        return users[0][1] if users else (session.initial_prompt or "")
    if last is None and session.initial_prompt:
        return str(session.initial_prompt)
    return None


def zero_turn_breaker(core: SupervisorCore, sid: str, session: Any, notes: list[str]) -> bool:
    """Reference §Resume 3: the last N exit notes all say ``Turns: 0`` — every resume dies
    before a turn. Summarise the history, store the summary, delete the messages,
    say so (``context_exhausted``) and let the resume start fresh. True if it tripped.
    ``notes``: the session's last ``BREAKER_NOTES_WINDOW`` system messages, oldest first."""
    store = core.store
    if not zero_turn_breaker_trips(notes, core.cfg.session.zero_turn_breaker_threshold):
        return False
    messages = [ChatMessage(role=m.role, content=m.content)
                for m in store.messages(sid) if m.role in ("user", "assistant")]
    project = store.get_project(session.project_id) if session.project_id else None
    summary = summarize_conversation(messages, project.name if project is not None else None)
    store.update_session(sid, conversation_summary=summary, status="idle", pid=None, total_turns=0, open_turns=0)
    deleted = store.delete_messages(sid)
    meta = core.meta.get(sid)
    if meta is not None:
        meta.turns = 0
    logger.bind(session_id=sid).warning("zero-turn death loop: {} messages replaced by a summary", deleted)
    core.publish(sid, SessionError(error_type="context_exhausted", severity="info", recoverable=True,
                                   message="Session context was bloated — restarting with fresh context."))
    return True


def send(core: SupervisorCore, sid: str, text: UserContent, *, fallback: int = 0, stored: bool = False) -> bool:
    """Persist ``text`` and deliver it to the running incarnation (see
    :class:`~corvid_actors.actors.supervisor.SendMessage` for the reply and ``fallback``).
    ``stored``: ``text`` is the session's newest message already (a held message its owner
    took, ``_handoff``): delivered without a second row, and kept if refused."""
    session_cfg = core.cfg.session
    if sid in core.passivated and not core.shutting_down:
        reactivate(core, sid)  # the message is its first, with the history (below)
    inc = core.running.get(sid)
    if inc is None:
        return False  # stopped, ended or crashed meanwhile: not running, as for any send
    # cold-start only for the very incarnation the caller could not reach, never while
    # shutting down
    cold = bool(fallback) and inc.generation == fallback and not core.shutting_down
    if not inc.lifeline.accepting_input or not inc.ref.is_alive():
        core.evict(sid)
        return cold_send(core, sid, text) if cold else False
    if needs_context_reset(inc.entry.delivered, session_cfg.max_turns_before_context_reset):
        return resume(core, sid, text) is not None
    blocks = content_blocks(text)
    plain = text_parts(blocks) if blocks else str(text)
    message: Begin | UserInput = UserInput(plain, blocks)
    if not inc.entry.begun:
        # a resumed incarnation's first turn: the message with the stored history (as
        # the text; a multimodal message's images after it)
        history = core.store.recent_messages(sid, session_cfg.resume_history_messages)
        if stored and history and history[-1][0] == "user":
            history = history[:-1]  # the message itself: it is the new text below
        first = build_resume_prompt(history, plain, max_messages=session_cfg.resume_history_messages,
                                    max_chars=session_cfg.resume_history_message_chars)
        row = core.store.get_session(sid)
        first = with_context_summary(getattr(row, "conversation_summary", "") or "", first)
        images = tuple(dict(block) for block in image_blocks(blocks))
        message = Begin(first, ({"type": "text", "text": first}, *images) if blocks else (), counts_turn=True)
    message_id = None if stored else core.store.append_message(sid, "user", text)
    if inc.building:
        # told after its first message when it is built (the order is kept)
        inc.held.append(message)
        inc.entry.record_delivery()
        inc.entry.mark_begun()
        return True
    # the session actor counts the turn (and stores it open) when the message arrives
    if not inc.entry.deliver(message):
        if message_id is not None:
            core.store.delete_message(message_id)  # refused: nothing of it stays
        core.evict(sid)
        return cold_send(core, sid, text) if cold else False
    inc.entry.mark_begun()
    return True


def resume_many(core: SupervisorCore, sids: Sequence[str]) -> dict[str, StartTicket | int | None]:
    """Resume each of ``sids`` as ``resume(sid, None)`` does (a daemon's start-up, issue 37
    item 5), with what every resume reads first read for all of them at once: their rows
    and the role that spoke last, one statement each. A session that comes up waiting for
    its user is registered passivated, without a build (``_dormant``; passivation off:
    started as ``resume`` starts it). An unknown session or one that
    cannot start (``CorvidError``) is logged and left out (None); the others go on."""
    core.refuse_if_stopping()
    rows = core.store.sessions_by_id(sids)
    roles = core.store.last_message_roles(sids)
    batch = ResumeBatch(core.store)
    out: dict[str, StartTicket | int | None] = {}
    try:
        for sid in sids:
            row = rows.get(sid)
            try:
                if row is None:
                    raise NotFoundError(f"no session with id {sid!r}")
                out[sid] = resume(core, sid, None, session=row, last_role=roles.get(sid), dormant=batch)
            except CorvidError as exc:  # one bad row must not keep the others down
                logger.bind(session_id=sid).warning("could not resume session: {}", exc)
                out[sid] = None
    finally:
        batch.finish(core)  # the rows of those registered passivated, then their events
    return out


def reactivate(core: SupervisorCore, sid: str) -> StartTicket | None:
    """Start a quiet, ready incarnation of a passivated session (issue 37, ``_passivation``):
    no start event, no model call of its own; the caller delivers the message that woke it
    as a resumed incarnation's first (with the stored history). None if it could not start
    (an event said why; the session is no longer passivated)."""
    logger.bind(session_id=sid).debug("session reactivated")
    ticket = start(core, sid, None, begin=False, quiet=True)
    if ticket is None:
        core.unpassivate(sid)
    return ticket


def cold_send(core: SupervisorCore, sid: str, text: UserContent) -> bool:
    """A message whose direct delivery was refused after it was accepted: the session
    cold-starts with it (resume with history), so it is not lost."""
    _warm_path_failed(core, sid)
    return resume(core, sid, text) is not None

