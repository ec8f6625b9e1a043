"""How a chat bridge delivers its sessions' answers: one per turn, streamed where it can.

:class:`TurnDelivery` is the bridge's collaborator on its outbox thread: it feeds a turn's
events to the :class:`~corvid_actors.chat.replies.ReplyAssembler` and performs what that
decides through the transport — ``update_reply`` for a transport that can edit (the reply
streams as it is written, the final text last), else ``send`` with the final text; an
empty turn becomes the ``empty_turn_notice``.
"""

from __future__ import annotations

from loguru import logger

from corvid_actors.chat.bridge_settings import BridgeSettings
from corvid_actors.chat.conversations import Conversation
from corvid_actors.chat.replies import (
    DELTA_EVENT_TYPE,
    TURN_EVENT_TYPES,
    EmptyTurn,
    ReplyAssembler,
    ReplyStep,
)
from corvid_actors.chat.transport import ChatTransport, OutgoingMessage, ReplyUpdate
from corvid_actors.clock import Clock
from corvid_actors.events import Assistant, Event


def can_edit(transport: object) -> bool:
    """Whether ``transport`` declared it can change a message it sent (and streams replies)."""
    return bool(getattr(transport, "can_edit", False)) and callable(getattr(transport, "update_reply", None))


class TurnDelivery:
    """See the module docstring. Called from the bridge's outbox thread only."""

    def __init__(self, transport: ChatTransport, settings: BridgeSettings, clock: Clock) -> None:
        self._transport = transport
        self._settings = settings
        self._clock = clock
        self.streaming = can_edit(transport)
        self._assembler = ReplyAssembler(streaming=self.streaming, interval_s=settings.stream_interval_s)

    @property
    def event_types(self) -> frozenset[str]:
        """The event types it reads (the bridge relays them to the outbox)."""
        return TURN_EVENT_TYPES | {DELTA_EVENT_TYPE} if self.streaming else TURN_EVENT_TYPES

    def handle(self, conv: Conversation, session_id: str, event: Event) -> bool:
        """Take ``event`` into the turn's reply; True when nothing else is to be made of it
        (an ``assistant`` text or a delta: delivered, if at all, as the turn's answer)."""
        if event.type not in TURN_EVENT_TYPES and event.type != DELTA_EVENT_TYPE:
            return False
        for step in self._assembler.on_event(session_id, conv.channel, event, self._clock.monotonic()):
            self._perform(conv, step)
        return isinstance(event, Assistant) or event.type == DELTA_EVENT_TYPE

    def _perform(self, conv: Conversation, step: ReplyStep | EmptyTurn) -> None:
        if isinstance(step, EmptyTurn):
            notice = self._settings.empty_turn_notice
            if notice and self.streaming and step.streamed:  # the streamed message becomes the notice
                self._update(conv, step.session_id, step.reply_id, notice, final=True)
            elif notice:
                self._transport.send(OutgoingMessage(conv.channel, conv.participant, notice, "notice",
                                                     step.session_id))
            else:
                logger.bind(session_id=step.session_id).info("chat turn ended without a reply (no notice set)")
            return
        if self.streaming:
            self._update(conv, step.session_id, step.reply_id, step.text, final=step.final)
        elif step.final:
            self._transport.send(OutgoingMessage(conv.channel, conv.participant, step.text, "reply",
                                                 step.session_id))

    def _update(self, conv: Conversation, session_id: str, reply_id: str, text: str, *, final: bool) -> None:
        self._transport.update_reply(ReplyUpdate(  # type: ignore[attr-defined]
            conv.channel, conv.participant, reply_id, text, final, session_id))
