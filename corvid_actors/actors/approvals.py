"""The ApprovalBroker actor: pending tool-use approvals, timeouts, session grants, modes.

A session actor tells the broker :class:`RequestApproval`. A request that needs a human
is kept pending and the broker tells the session ``ApprovalAsked`` (with the request's
8-character id, unique among the pending ones); only then does the session publish
``approval_request`` (itself, through its lifeline, so nothing of a stopped session is
published late). The broker answers the session with an ``ApprovalAnswer`` when a human
resolves it (:class:`Resolve`), when it times out (deny), or at once — without asking
anyone, so without ``ApprovalAsked`` — in ``paused`` mode (deny) or for a tool granted
for the whole session. ``queued`` mode keeps requests without a timeout until someone
resolves them.

Requests never leave the broker with their raw input: :class:`ListPending` shows the
description only.

Messages: :class:`RequestApproval`, :class:`CancelSession` (tell); :class:`Resolve`,
:class:`ListPending`, :class:`DenyAll`, :class:`SetMode`, :class:`GetMode` (ask). All are
handled on the broker's own thread.
Replies (owned here): :class:`ApprovalAsked`, :class:`ApprovalAnswer`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Any

import pykka

from corvid_actors.actors.base import ActivityTracker, TrackedActor, tell
from corvid_actors.actors.timers import CancelTimer, ScheduleTimer, Timers
from corvid_actors.clock import Clock, iso_after
from corvid_actors.core.jsontypes import WireJson

MODES = ("normal", "queued", "paused")


@dataclass(frozen=True)
class RequestApproval:
    """A tool call needs approval (``approval_id`` is the session's proposal for its id).

    Told by a session actor (``session_effects``, on its thread); handled on the broker's
    thread. Reply: none (told); ``reply_to`` is told an :class:`ApprovalAnswer`, preceded
    by :class:`ApprovalAsked` when a human is asked."""

    approval_id: str
    session_id: str
    call_id: str
    tool_name: str
    description: str
    kind: str
    timeout_s: float
    #: the asking session actor (``Any``: pykka's refs are invariant in their actor type)
    reply_to: pykka.ActorRef[Any]
    tool_input: dict[str, WireJson] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class Resolve:
    """Resolve by id (a unique prefix of at least 4 characters is enough).

    ``behavior``: allow | deny | allow_session. Asked by ``Runtime.resolve_approval`` (on
    the caller's thread) and the AdminActor's ``approve``/``deny`` (on its thread); handled
    on the broker's thread. Replies with the resolved request's info dict, or None when no
    pending request matches; raises ValueError for an unknown ``behavior``. ``answered_by``:
    who answers (``admin:<user>``, ``http:<token>``, ``chat:<user>``, ``library``), carried
    to the session (its ``approval_resolved`` event, the journal)."""

    approval_id: str
    behavior: str
    message: str = ""
    updated_input: dict[str, WireJson] | None = None
    answered_by: str = "library"


@dataclass(frozen=True)
class ListPending:
    """The pending requests (of ``session_id``, or all), without their raw input.

    Asked by ``Runtime.list_approvals`` (on the caller's thread) and the
    AdminActor (on its thread); handled on the broker's thread. Replies with a list of
    info dicts (``timeout_s`` None for a request without a countdown)."""

    session_id: str | None = None


@dataclass(frozen=True)
class CancelSession:
    """Deny the session's pending requests with ``reason`` and drop its session grants.

    Told by the supervisor (``release_session_resources``) and by an ending session actor,
    each on its own thread; handled on the broker's thread. Reply: none (told)."""

    session_id: str
    reason: str = "Session stopped"


@dataclass(frozen=True)
class DenyAll:
    """Deny every pending request with ``reason`` (shutdown).

    Asked by the runtime's shutdown (``runtime_lifecycle``, on the stopping thread) so that
    it waits; handled on the broker's thread. Replies None."""

    reason: str = "Server shutting down"


@dataclass(frozen=True)
class SetMode:
    """Switch to ``mode`` (normal | queued | paused).

    Asked by ``Runtime.set_approval_mode`` (on the caller's thread) and the AdminActor's
    ``mode`` (on its thread); handled on the broker's thread. Replies with the new
    mode; raises ValueError for an unknown one."""

    mode: str


# --- replies (told to ``reply_to``; this module owns them) ----------------------------------


@dataclass(frozen=True)
class ApprovalAnswer:
    """From the ApprovalBroker: the decision on call ``call_id`` (``scope``: once | session).

    Told by the broker (on its thread) to the request's ``reply_to``, or by a session
    actor to itself when no broker is configured; handled on the session actor's thread.
    Reply: none (told)."""

    call_id: str
    allowed: bool
    message: str = ""
    updated_input: dict[str, WireJson] | None = None
    scope: str = "once"
    approval_id: str = ""
    #: who answered (``Resolve.answered_by``); empty: the broker itself (timeout, stop, shutdown)
    answered_by: str = ""


@dataclass(frozen=True)
class ApprovalAsked:
    """From the ApprovalBroker: a human is being asked (the session publishes
    ``approval_request`` now). Not sent for requests answered at once (paused mode, a
    session-wide grant). ``approval_id`` is the id the broker keeps the request under.

    Told by the broker (on its thread) to the request's ``reply_to``; handled on the
    session actor's thread. Reply: none (told)."""

    call_id: str
    approval_id: str
    created_at: str = ""
    #: False when the request waits for a human however long it takes (queued mode): its
    #: ``approval_request`` then carries ``timeout_s = 0`` (no countdown)
    expires: bool = True


@dataclass(frozen=True)
class GetMode:
    """Asked by ``Runtime.approval_mode`` (on the caller's thread) and the AdminActor's
    ``mode`` (on its thread); handled on the broker's thread. Replies with the
    mode: normal | queued | paused."""


@dataclass(frozen=True)
class _Expired:
    """A pending request timed out (told by the timer table; handled on the broker's thread)."""

    approval_id: str


class ApprovalBroker(TrackedActor):
    survive_errors = True  # one bad told message never kills it (actors/base.py)

    def __init__(self, tracker: ActivityTracker, *, clock: Clock, timers: Timers,
                 mode: str = "normal") -> None:
        super().__init__(tracker)
        self.clock = clock
        self.timers = timers
        self.mode = mode
        self._pending: dict[str, tuple[RequestApproval, str]] = {}  # id -> (request, created_at)
        self._session_grants: dict[str, set[str]] = {}
        self._timed: set[str] = set()  # pending ids with an expiry timer

    def on_receive(self, message: object) -> object:
        match message:
            case RequestApproval() as request:
                self._request(request)
            case Resolve(approval_id, behavior, text, updated, answered_by):
                return self._resolve(approval_id, behavior, text, updated, answered_by)
            case _Expired(approval_id):
                entry = self._take(approval_id)
                if entry is not None:
                    self._answer(entry[0], False, "Approval timed out")
            case ListPending(session_id):
                # timeout_s is None for a request that waits for a human (queued mode):
                # it has no countdown.
                return [
                    {"id": r.approval_id, "session_id": r.session_id, "tool_name": r.tool_name,
                     "description": r.description, "kind": r.kind, "created_at": created,
                     "timeout_s": r.timeout_s if r.approval_id in self._timed else None}
                    for r, created in self._pending.values()
                    if session_id is None or r.session_id == session_id
                ]
            case CancelSession(session_id, reason):
                self._session_grants.pop(session_id, None)
                for approval_id in [a for a, (r, _) in self._pending.items() if r.session_id == session_id]:
                    request, _ = self._pop(approval_id)
                    tell(self.timers, CancelTimer(("approval", approval_id)))
                    self._answer(request, False, reason)
            case DenyAll(reason):
                for approval_id in list(self._pending):
                    request, _ = self._pop(approval_id)
                    tell(self.timers, CancelTimer(("approval", approval_id)))
                    self._answer(request, False, reason)
            case SetMode(mode):
                if mode not in MODES:
                    raise ValueError(f"unknown approval mode {mode!r}; use one of {', '.join(MODES)}")
                self.mode = mode
                return mode
            case GetMode():
                return self.mode
        return None

    def _take(self, approval_id: str) -> tuple[RequestApproval, str] | None:
        """The pending request and its creation time, removed; None if it is gone."""
        self._timed.discard(approval_id)
        return self._pending.pop(approval_id, None)

    def _pop(self, approval_id: str) -> tuple[RequestApproval, str]:
        """Like :meth:`_take` for an id known to be pending."""
        self._timed.discard(approval_id)
        return self._pending.pop(approval_id)

    def _request(self, request: RequestApproval) -> None:
        if self.mode == "paused":
            self._answer(request, False, "System is in paused mode — all tool requests denied")
            return
        if request.kind == "tool" and request.tool_name in self._session_grants.get(request.session_id, ()):
            self._answer(request, True, "Allowed for this session")
            return
        approval_id = self._unique_id(request.approval_id)
        if approval_id != request.approval_id:
            request = replace(request, approval_id=approval_id)
        created = iso_after(self.clock, 0)
        self._pending[approval_id] = (request, created)
        tell(request.reply_to, ApprovalAsked(request.call_id, approval_id, created, expires=self.mode == "normal"))
        if self.mode == "normal":
            self._timed.add(request.approval_id)
            tell(self.timers, ScheduleTimer(("approval", request.approval_id), request.timeout_s,
                                            self.actor_ref, _Expired(request.approval_id)))

    def _unique_id(self, approval_id: str) -> str:
        """``approval_id``, or (if a pending request has it) a new 8-character id derived
        from it: prefixes resolve requests, so two pending ones must never share an id."""
        while approval_id in self._pending:
            approval_id = hashlib.blake2s(approval_id.encode(), digest_size=4).hexdigest()
        return approval_id

    def _resolve(self, approval_id: str, behavior: str, text: str,
                 updated: dict[str, WireJson] | None, answered_by: str) -> dict[str, str] | None:
        if behavior not in ("allow", "deny", "allow_session"):
            raise ValueError(f"unknown behavior {behavior!r}; use allow, deny or allow_session")
        matches = [a for a in self._pending if a == approval_id]
        if not matches and len(approval_id) >= 4:
            matches = [a for a in self._pending if a.startswith(approval_id)]
        if len(matches) != 1:
            return None
        request, created = self._pop(matches[0])
        tell(self.timers, CancelTimer(("approval", request.approval_id)))
        allowed = behavior != "deny"
        scope = "session" if behavior == "allow_session" else "once"
        if behavior == "allow_session":
            self._session_grants.setdefault(request.session_id, set()).add(request.tool_name)
        self._answer(request, allowed, text or ("Approved" if allowed else "Permission denied by user"),
                     updated, scope, answered_by)
        return {"id": request.approval_id, "session_id": request.session_id, "tool_name": request.tool_name,
                "behavior": behavior, "answered_by": answered_by}

    @staticmethod
    def _answer(request: RequestApproval, allowed: bool, text: str,
                updated: dict[str, WireJson] | None = None, scope: str = "once", answered_by: str = "") -> None:
        tell(request.reply_to, ApprovalAnswer(request.call_id, allowed, text, updated, scope,
                                              approval_id=request.approval_id, answered_by=answered_by))
