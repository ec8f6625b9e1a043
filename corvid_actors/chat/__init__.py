"""corvid_actors.chat — embed the runtime in a chat bot: one session per conversation.

- :class:`ChatBridge` (with :class:`BridgeSettings`): routes participants' messages to
  their sessions and the sessions' replies, approvals and notices back; chat commands
  ``/help``, ``/status``, ``/stop``, ``/credits``.
- The transport seam: :class:`ChatTransport`, :class:`IncomingMessage`,
  :class:`OutgoingMessage`, :class:`TransportError` (see :mod:`corvid_actors.chat.transport`
  for how to write one for another platform).
- Transports: :class:`MemoryTransport` (tests, simulations), :class:`ConsoleTransport`
  (try a bot in a terminal), :class:`WebhookTransport` (HTTP in, HTTP callback out).
- For asyncio bots: :class:`AsyncChatBridge` with an :class:`AsyncChatTransport`
  (:mod:`corvid_actors.chat.aio_bridge`), e.g. ``corvid_actors.chat.telegram.TelegramTransport``
  (``pip install 'corvid-actors[telegram]'``; imported from its module, not from here).
"""

from __future__ import annotations

from corvid_actors.chat.aio_bridge import AsyncChatBridge, AsyncChatTransport
from corvid_actors.chat.bridge import ChatBridge
from corvid_actors.chat.bridge_settings import BridgeSettings
from corvid_actors.chat.console import ConsoleTransport
from corvid_actors.chat.conversations import Conversation
from corvid_actors.chat.memory import MemoryTransport
from corvid_actors.chat.transport import (
    ChatTransport,
    IncomingMessage,
    OutgoingMessage,
    TransportError,
)
from corvid_actors.chat.webhook import WebhookTransport

__all__ = [
    "AsyncChatBridge", "AsyncChatTransport", "BridgeSettings", "ChatBridge", "ChatTransport", "ConsoleTransport", "Conversation", "IncomingMessage",
    "MemoryTransport", "OutgoingMessage", "TransportError", "WebhookTransport",
]
