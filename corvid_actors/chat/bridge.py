"""The ChatBridge: hosts one session per (channel, participant) conversation of a chat bot.

    runtime = Runtime(config, with_credits=True, is_owner=owners.__contains__)
    agent = runtime.create_agent("helper", provider="ollama", model="qwen3:8b")
    with ChatBridge(runtime, WebhookTransport(callback_url), agent_id=agent.id,
                    is_owner=owners.__contains__):
        ...  # serve until told to stop

Incoming (on the transport's threads, see :mod:`corvid_actors.chat.transport`):

- chat commands ``/help``, ``/status``, ``/stop``, ``/credits`` (and ``/grant`` for owners)
  are answered by the bridge;
- ``yes <id>`` / ``no <id>`` resolves a pending tool approval of one of this bridge's
  sessions — only when written by the participant the request belongs to, or by an
  owner; anyone else is told no and the approval stays pending;
- a participant the agent does not talk to (``conversation_mode`` private or allowlist)
  gets a notice and nothing else happens; a message over the participant's rate limit,
  or to an agent that has spent its cap, is answered with a notice and not taken
  (:mod:`corvid_actors.chat.gate`);
- anything else goes to the conversation's session (created on first contact, source
  ``chat``): ``send_message`` to a running session, else ``resume_process`` (a stopped,
  idle, crashed or paused one). Both persist the message before they return, so a
  message the transport acknowledged is never lost — a crashed session's restart, or
  the resume, finds it. With credits enabled, a non-owner whose balance cannot pay a turn
  is told so and the message is not taken; a first-time participant's account opens with
  the free credits. A message that comes while the session still answers the previous
  one follows the agent's double-texting policy (:mod:`corvid_actors.core.double_texting`):
  queued, interrupting the answer, or (``reject``) answered with ``busy_notice``.

Outgoing: the bridge subscribes to *every* session (``subscribe_all``: global subscribers
survive session restarts and are never pruned), maps events of its own sessions back to
their conversation (:func:`~corvid_actors.chat.commands.render_event`) and hands them to
its :class:`~corvid_actors.chat.outbox.Outbox`, whose one thread calls the transport — so
a slow or failing platform never blocks the EventBus or a session actor. One answer per
user message: a turn's final assistant text is delivered once, when the turn ends —
streamed as it is written to a transport that can edit — and a turn that ends without
text gets ``settings.empty_turn_notice`` (:mod:`corvid_actors.chat.delivery`). The
bridge's sessions are ``chat`` agents unless their agent says otherwise; a ``task``
agent is allowed, and the log says once that its replies will be nudged.

A bridge's sessions are the rows with ``source = 'chat'``, ``name = 'chat:<settings.name>'``
and the conversation's ``channel`` and ``participant``; a restarted bot finds them again
(:mod:`corvid_actors.chat.conversations`).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import TypeAlias

from loguru import logger

from corvid_actors.chat.bridge_settings import RELAYED_EVENT_TYPES, BridgeSettings
from corvid_actors.chat.commands import (
    ApprovalReply,
    Command,
    help_text,
    parse_input,
    render_event,
)
from corvid_actors.chat.conversations import Conversation, ConversationDirectory
from corvid_actors.chat.credit_commands import balance_line, credits_text, grant_text
from corvid_actors.chat.delivery import TurnDelivery
from corvid_actors.chat.gate import ChatGate, budget_notice, spend_line
from corvid_actors.chat.outbox import Outbox
from corvid_actors.chat.transport import (
    ChatTransport,
    IncomingMessage,
    OutgoingMessage,
    is_storable_text,
)
from corvid_actors.core.vocabulary import TASK_AGENT
from corvid_actors.errors import BudgetExceededError, RuntimeStoppedError, SessionBusyError
from corvid_actors.events import ApprovalRequestEvent, ApprovalResolved, CreditsLow, Event, Thinking
from corvid_actors.policy.access import AgentAccess, refusal_text
from corvid_actors.runtime import Runtime


def _id_key(seen_key: str) -> str:
    # channel and id may be 200 characters each: the replay store keeps a digest
    return "id:" + hashlib.sha256(seen_key.encode("utf-8")).hexdigest()

#: shortest id prefix an approval answer may use
_MIN_APPROVAL_PREFIX = 4

#: what the outbox carries: a reply ready to send, or a session's event to render first
_OutboxItem: TypeAlias = "OutgoingMessage | tuple[str, Event]"


class ChatBridge:
    """See the module docstring. ``start()``/``stop()``, or use it as a context manager."""

    def __init__(self, runtime: Runtime, transport: ChatTransport, *, agent_id: str | None = None,
                 project_id: str | None = None, is_owner: Callable[[str], bool] | None = None,
                 settings: BridgeSettings | None = None) -> None:
        self.runtime = runtime
        self.transport = transport
        self.agent_id = agent_id
        self.project_id = project_id
        self.settings = settings or BridgeSettings()
        self._is_owner = is_owner or (lambda participant: False)
        self.conversations = ConversationDirectory(runtime, f"chat:{self.settings.name}", agent_id=agent_id,
                                                   project_id=project_id)
        #: who may talk to the agent, how often, for how much (chat/gate.py)
        self.gate = ChatGate(runtime, agent_id)
        self._lock = threading.Lock()
        self._low_warned: dict[tuple[str, str], int] = {}
        self._seen_ids = runtime.replay_store()
        self._outbox = Outbox(self._deliver, max_pending=self.settings.outbox_max_pending,
                              tracker=runtime.work_tracker() if self.settings.track_delivery else None,
                              name=f"chat-outbox-{self.settings.name}")
        self._started = False
        #: a transport with ``typing(channel, participant, active)`` hears when a session thinks
        self._relays_typing = callable(getattr(transport, "typing", None))
        #: one answer per turn, streamed to a transport that can edit (chat/delivery.py)
        self._turns = TurnDelivery(transport, self.settings, runtime.clock)
        self._relayed = RELAYED_EVENT_TYPES | self._turns.event_types

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> ChatBridge:
        """Start the outbox, follow the runtime's events and start the transport (also ``with``);
        idempotent. Returns the bridge."""
        if not self._started:
            self._started = True
            self._outbox.start()
            self._warn_if_task_agent()
            self.runtime.subscribe_all(self._on_event)
            bind = getattr(self.transport, "bind_runtime", None)
            if callable(bind):  # e.g. the webhook's replay store lives in the runtime's database
                bind(self.runtime)
            self.transport.start(self.handle)
        return self

    def _warn_if_task_agent(self) -> None:
        agent = self.runtime.agent(self.agent_id) if self.agent_id else None
        if agent is not None and self.runtime.config.agents.kind_for(agent.kind, "chat") == TASK_AGENT:
            logger.warning("chat bridge {!r}: agent {!r} is a task agent: its text-only replies will be nudged to "
                           "act with tools (more model calls per message; one reply is still delivered per "
                           "message). Create it with kind='chat' for a conversational bot.",
                           self.settings.name, agent.name)

    def stop(self) -> None:
        """Stop receiving, unsubscribe, deliver what is queued. Stop the runtime *first* if
        participants should hear its shutdown notice."""
        if not self._started:
            return
        self._started = False
        self.transport.stop()
        try:
            self.runtime.unsubscribe_all(self._on_event)
        except RuntimeStoppedError:
            pass
        self._outbox.stop(self.settings.stop_timeout_s)

    def __enter__(self) -> ChatBridge:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def stats(self) -> dict[str, int]:
        """Outbox counters: ``handled``, ``failed`` (transport raised), ``dropped`` (queue full)."""
        return dict(self._outbox.stats)

    @property
    def credits_enabled(self) -> bool:
        """Whether the runtime charges credits (``Runtime(with_credits=True)``): the bridge's
        ``/credits`` and ``/grant`` need it."""
        return bool(getattr(self.runtime, "credits_enabled", False))

    # --- incoming -------------------------------------------------------------------------------

    def handle(self, message: IncomingMessage) -> str:
        """Deal with one incoming message (the transport's handler; any non-actor thread).

        Returns ``delivered``, ``command``, ``refused`` (the agent does not talk to this
        participant, no credits, or a spending cap reached), ``rate_limited``, ``approved`` /
        ``denied`` / ``rejected`` / ``expired`` / ``unclear`` (approval replies),
        ``duplicate``, ``ignored`` or ``busy`` (the agent is still answering and its
        ``double_texting`` is ``reject``: the participant gets ``settings.busy_notice``). Raises ValueError for a message without channel or participant,
        or with text that is not valid Unicode (a transport answers that as a bad request).
        """
        for what, value in (("channel", message.channel), ("participant", message.participant)):
            if not value or len(value) > self.settings.max_id_chars:
                raise ValueError(f"a chat message needs a {what} id of 1–{self.settings.max_id_chars} characters")
        for what, value in (("channel", message.channel), ("participant", message.participant),
                            ("text", message.text), ("id", message.message_id)):
            if not is_storable_text(value):
                raise ValueError(f"the message's {what} is not valid Unicode text (lone surrogates or NUL)")
        # platform message ids are unique per channel at least
        seen_key = f"{message.channel}\0{message.message_id}" if message.message_id else ""
        if seen_key and not self._first_sight(seen_key):
            return "duplicate"
        try:
            with self.conversations.lock_for(message.channel, message.participant):
                return self._handle(message)
        except BaseException:
            if seen_key:
                self._forget(seen_key)  # let the platform's redelivery try again
            raise

    def _handle(self, message: IncomingMessage) -> str:
        access = self.gate.access()
        owner = self._owner(message.participant)
        if not access.admits(message.participant, owner=owner):
            self._reply(message, refusal_text(access), "notice")
            return "refused"
        parsed = parse_input(message.text)
        if isinstance(parsed, Command):
            self._command(message, parsed)
            return "command"
        if isinstance(parsed, ApprovalReply):
            outcome = self._approval(message, parsed)
            if outcome is not None:
                return outcome
        text = message.text.strip()
        if not text:
            return "ignored"
        return self._deliver_text(message, text, access, owner)

    def _deliver_text(self, message: IncomingMessage, text: str, access: AgentAccess, owner: bool) -> str:
        conv = self.conversations.open(message.channel, message.participant)
        if self.credits_enabled and not owner:
            account = self.runtime.open_credit_account(message.participant)
            per_turn = self.runtime.config.credits.credits_per_turn
            if account.created and account.balance > 0:
                self._reply(message, f"Welcome! You have {account.balance} free credits; each reply costs "
                                     f"{per_turn}. /help lists the commands.", "notice")
            if account.balance < per_turn:
                self._reply(message, f"You are out of credits ({account.balance} left, {per_turn} per reply). "
                                     "Top up to continue; /credits shows your balance.", "notice")
                return "refused"
        if access.max_budget_usd > 0 or access.max_total_budget_usd > 0:
            try:
                self.runtime.check_budget(conv.session_id)  # over a cap: the session's session_error
            except BudgetExceededError as exc:
                self._reply(message, budget_notice(exc.spend), "notice", conv.session_id)
                return "refused"
        notice = self.gate.rate_limited(access, message.participant, owner=owner)
        if notice is not None:
            self._reply(message, notice, "notice", conv.session_id)
            return "rate_limited"
        # send_message persists before delivering; a session that is not running (idle,
        # stopped, crashed and waiting for its restart, paused) is resumed with the message
        # persisted first, so it is answered now rather than lost.
        try:
            sent = self.runtime.send_message(conv.session_id, text)
        except SessionBusyError:  # double texting "reject": not stored, not answered
            self._reply(message, self.settings.busy_notice, "notice", conv.session_id)
            return "busy"
        if not sent:
            self.runtime.resume_process(conv.session_id, text)
        return "delivered"

    # --- commands -----------------------------------------------------------------------------

    def _command(self, message: IncomingMessage, command: Command) -> None:
        match command.name:
            case "/help":
                self._reply(message, help_text())
            case "/status":
                self._reply(message, self._status_text(message))
            case "/stop":
                conv = self.conversations.find(message.channel, message.participant)
                sid = conv.session_id if conv is not None else None
                if sid is not None and self._is_active(sid):
                    self.runtime.stop_process(sid, "user_stop")
                    self._reply(message, "Stopped. Your next message starts the session again.")
                else:
                    self._reply(message, "Nothing is running.")
            case "/credits":
                self._reply(message, credits_text(self.runtime, message.participant,
                                                  owner=self._owner(message.participant),
                                                  recent=self.settings.recent_transactions))
            case "/grant":
                self._reply(message, grant_text(self.runtime, message.participant, command.args,
                                                owner=self._owner(message.participant)))
            case _:
                self._reply(message, f"Unknown command {command.name}.\n{help_text()}")

    def _is_active(self, sid: str) -> bool:
        info = self.runtime.session_info(sid).get(sid, {})
        return bool(info.get("running") or info.get("restart_pending")) or self.runtime.is_paused(sid)

    def _status_text(self, message: IncomingMessage) -> str:
        conv = self.conversations.find(message.channel, message.participant)
        if conv is None:
            return "No session yet: send a message to start one."
        sid = conv.session_id
        info = self.runtime.session_info(sid).get(sid, {})
        row = self.runtime.session(sid)
        if self.runtime.is_paused(sid):
            state = "paused (the model is unavailable; it resumes by itself)"
        elif info.get("running"):
            state = "running"
        elif info.get("restart_pending"):
            state = "restarting after a failure"
        else:
            state = row.status if row is not None else "unknown"
        lines = [f"Session {sid[:8]}: {state}", f"Turns: {row.cumulative_turns if row is not None else 0}"]
        pending = self.runtime.list_approvals(sid)
        if pending:
            lines.append("Waiting for your approval: " + ", ".join(a["id"] for a in pending))
        if self.credits_enabled:
            lines.append(balance_line(self.runtime, message.participant, owner=self._owner(message.participant)))
        access = self.gate.access()
        if access.max_budget_usd > 0 or access.max_total_budget_usd > 0:
            lines.append(spend_line(self.runtime.spend(sid)))
        return "\n".join(lines)

    # --- approvals ------------------------------------------------------------------------------

    def _approval(self, message: IncomingMessage, reply: ApprovalReply) -> str | None:
        """Resolve the approval ``reply`` names, or None when it names none of ours (then
        the line is an ordinary chat message)."""
        pending = self.runtime.list_approvals()
        matches = [a for a in pending if a["id"] == reply.ref] or [
            a for a in pending if len(reply.ref) >= _MIN_APPROVAL_PREFIX and a["id"].startswith(reply.ref)]
        if len(matches) != 1:
            return self._unclear_approval(message, reply, pending)
        approval = matches[0]
        conv = self.conversations.of_session(approval["session_id"])
        if conv is None:
            return None
        sender = message.participant
        if sender != conv.participant and not self._owner(sender):
            logger.bind(session_id=conv.session_id).warning(
                "approval {} answered by {!r}, not its participant: rejected", approval["id"], sender)
            self._reply(message, f"Approval {approval['id']} is not yours to answer: only the participant "
                                 "who asked (or an owner) can.")
            return "rejected"
        behavior = "allow" if reply.allow else "deny"
        verb = "Approved" if reply.allow else "Denied"
        if self.runtime.resolve_approval(approval["id"], behavior, f"{verb} by {sender}",
                                         answered_by=f"chat:{sender}") is None:
            self._reply(message, f"Approval {approval['id']} is no longer pending.")
            return "expired"
        if (message.channel, sender) != (conv.channel, conv.participant):
            # the conversation hears the resolution from its event; an owner elsewhere gets this
            self._reply(message, f"{verb} {approval['id']}.")
        return "approved" if reply.allow else "denied"

    def _unclear_approval(self, message: IncomingMessage, reply: ApprovalReply,
                          pending: list[dict[str, object]]) -> str | None:
        """An answer word that names no pending approval: with approvals waiting in this
        conversation it surely meant one of them, so say what is expected (and decide
        nothing); otherwise it is an ordinary chat line ("yes" to the model's question)."""
        conv = self.conversations.find(message.channel, message.participant)
        mine = [a for a in pending if conv is not None and a["session_id"] == conv.session_id]
        if not mine:
            return None
        word = "yes" if reply.allow else "no"
        listed = "; ".join(f"{a['id']}: {a.get('description') or a.get('tool_name', '')}" for a in mine[:5])
        what = f"'{reply.ref}' matches none of them" if reply.ref else "it needs the approval's id"
        first = mine[0]["id"]
        self._reply(message, f"Waiting for your approval: {listed}\nYour '{word}' was not applied: {what}. "
                             f"Reply 'yes {first}' to allow or 'no {first}' to deny.")
        return "unclear"

    # --- conversations --------------------------------------------------------------------------

    def conversation(self, channel: str, participant: str) -> Conversation | None:
        """The conversation's session, if it has one."""
        return self.conversations.find(channel, participant)

    def _first_sight(self, seen_key: str) -> bool:
        now = self.runtime.clock.now()
        return bool(self._seen_ids.first_use(_id_key(seen_key), now=now,
                                             expires_at=now + timedelta(seconds=self.settings.dedupe_window_s)))

    def _forget(self, seen_key: str) -> None:
        self._seen_ids.forget(_id_key(seen_key))

    def _owner(self, participant: str) -> bool:
        try:
            return bool(self._is_owner(participant))
        except Exception:  # noqa: BLE001 - a broken owner check grants nothing
            logger.opt(exception=True).error("is_owner({!r}) raised; treating as not an owner", participant)
            return False

    # --- outgoing -------------------------------------------------------------------------------

    def _on_event(self, session_id: str, event: Event) -> None:
        # On the EventBus thread: filter, queue, return. No store reads, no runtime calls.
        if event.type not in self._relayed and not (event.type == "thinking" and self._relays_typing):
            return
        if self.conversations.known_foreign(session_id):
            return
        self._outbox.put((session_id, event))

    def _reply(self, message: IncomingMessage, text: str, kind: str = "command", session_id: str = "") -> None:
        self._outbox.put(OutgoingMessage(message.channel, message.participant, text, kind, session_id))

    def _deliver(self, item: _OutboxItem) -> None:
        """On the outbox thread: render and send one item (slow work is fine here)."""
        if isinstance(item, OutgoingMessage):
            self.transport.send(item)
            return
        session_id, event = item
        conv = self.conversations.of_session(session_id)
        if conv is None:
            return
        if isinstance(event, Thinking):
            self.transport.typing(conv.channel, conv.participant, bool(event.thinking))  # type: ignore[attr-defined]
            return
        if self._turns.handle(conv, session_id, event):
            return
        if isinstance(event, CreditsLow) and not self._should_warn_low(conv, event.remaining):
            return
        rendered = render_event(event)
        if rendered is not None:
            kind, text = rendered
            approval_id = event.id if isinstance(event, ApprovalRequestEvent | ApprovalResolved) else ""
            self.transport.send(OutgoingMessage(conv.channel, conv.participant, text, kind, session_id,
                                                approval_id=approval_id))

    def _should_warn_low(self, conv: Conversation, remaining: int) -> bool:
        # Once per low-balance episode: again only after the balance went up (a top-up).
        key = (conv.channel, conv.participant)
        with self._lock:
            previous = self._low_warned.get(key)
            self._low_warned[key] = remaining
        return previous is None or remaining > previous
