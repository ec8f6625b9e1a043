"""The transport seam of the chat bridge: what a chat platform adapter must provide.

A transport connects one chat platform to a :class:`~corvid_actors.chat.bridge.ChatBridge`.
It has three methods:

- ``start(handler)``: begin receiving. For every message a participant writes, call
  ``handler(IncomingMessage(...))`` from any thread of the transport's own (an HTTP
  handler thread, a websocket reader, a polling loop). The call returns once the bridge
  has dealt with the message — persisted it and handed it to the session, or answered a
  command — with a short outcome string (``delivered``, ``command``, ``refused`` …), so
  a transport can acknowledge the platform only then. It may raise
  :class:`~corvid_actors.errors.RuntimeStoppedError` while the bot shuts down.
- ``send(message)``: deliver one :class:`OutgoingMessage` to the platform. The bridge
  calls it from its single outbox thread, never from an actor, so it may block (an HTTP
  call, a rate limit) or raise (the bridge logs, counts and moves on) without slowing
  any session.
- ``stop()``: stop receiving and release sockets/threads. Idempotent.

One answer per user message: the bridge sends a turn's final reply once, when the turn
ends (:mod:`corvid_actors.chat.replies`). A transport whose platform can change a message
it sent declares ``can_edit = True`` and has ``update_reply(update)``: the bridge then
streams each reply as it is written, as :class:`ReplyUpdate` s (the whole text so far,
throttled by the bridge), the last one with ``final=True`` — the text that must persist.
How it shows them is the platform's business (a draft, or a message sent at the first
update and edited after). Transports without it (console, webhook) get the final reply
through ``send`` as a ``reply``.

Writing a transport for another platform (Slack, Telegram, Matrix, a game server …):
map the platform's conversation id to ``channel`` and the sender's stable account id to
``participant`` (it is the credit payer and the only one who may answer its approvals),
pass the platform's message id as ``message_id`` so redelivered webhooks are ignored,
and in ``send`` post ``message.text`` to ``message.channel`` (addressing
``message.participant`` where the platform needs it). ``message.kind`` tells replies
from approval requests and notices apart, for platforms with buttons or formatting.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from corvid_actors.errors import CorvidError


@dataclass(frozen=True)
class IncomingMessage:
    """A message a participant wrote in a channel."""

    channel: str
    participant: str
    text: str
    #: the platform's id of the message; a repeated id is ignored (webhook redelivery)
    message_id: str = ""


@dataclass(frozen=True)
class OutgoingMessage:
    """A message for a participant in a channel.

    ``kind``: ``reply`` (the assistant's words), ``approval`` (a tool use to allow or
    deny), ``notice`` (restarts, low credits, errors) or ``command`` (an answer to a
    chat command). ``session_id`` is empty for answers not tied to a session.
    """

    channel: str
    participant: str
    text: str
    kind: str = "reply"
    session_id: str = ""
    #: the approval an ``approval`` request (or the ``notice`` of its resolution) is about,
    #: for platforms that show buttons and update them when it is answered
    approval_id: str = ""


@dataclass(frozen=True)
class ReplyUpdate:
    """A reply being written, for a transport with ``can_edit`` (see the module docstring).

    ``text`` is the whole reply so far (not a delta); updates with the same ``reply_id``
    are one answer; ``final``: the turn is over and ``text`` is the answer to keep (it may
    differ from the last update: a new model call of the turn starts the text again).
    """

    channel: str
    participant: str
    reply_id: str
    text: str
    final: bool = False
    session_id: str = ""


MessageHandler = Callable[[IncomingMessage], str]


class TransportError(CorvidError):
    """A transport could not deliver a message (the platform refused or was unreachable)."""


@runtime_checkable
class ChatTransport(Protocol):
    """A chat platform adapter; see the module docstring."""

    name: str

    def start(self, handler: MessageHandler) -> None:
        """Start receiving: call ``handler(IncomingMessage(...))`` for each message, from the
        transport's own thread."""
        ...

    def send(self, message: OutgoingMessage) -> None:
        """Deliver one message to the platform; may block, or raise :class:`TransportError`."""
        ...

    def stop(self) -> None:
        """Stop receiving."""
        ...


def is_storable_text(value: str) -> bool:
    """Text the store can keep as it is: encodable as UTF-8 (no lone surrogates), no NUL."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in value
